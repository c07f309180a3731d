"""Where and how to reach a host over SSH: ``user@address[:port]`` plus key, known_hosts and trust choice."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from parapipe.errors import input_error

__all__ = ["HostSpec"]

_HOST_RE = re.compile(r"^(?P<user>[A-Za-z0-9_.][A-Za-z0-9_.-]*)@"
                      r"(?P<address>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>[0-9]{1,5}))?$")


@dataclass(frozen=True)
class HostSpec:
    """Where and how to reach a host over SSH.

    Attributes
    ----------
    user : str
        Login name on the host.
    address : str
        Host name or IP address (IPv6 without brackets).
    port : int
        SSH port, 1..65535 (default 22, the IANA SSH port).
    identity : Path, optional
        Private key file; None lets paramiko use the SSH agent and ``~/.ssh/id_*``.
    known_hosts : Path, optional
        known_hosts file to check the host key against (and to save a trusted key to); None means
        ``~/.ssh/known_hosts``.
    trust_new_host : bool
        Accept a host key that is not in ``known_hosts`` and save it there (a changed key is never accepted).
    timeout_s : float, optional
        Deadline of connecting and of each short remote step (a check, a file operation, a channel request;
        the longest silence of a transfer), s; None: 10 s to connect and for the host to answer a channel
        open or a command request, 60 s a step (``--ssh-timeout``).
    """

    user: str
    address: str
    port: int = 22
    identity: Optional[Path] = None
    known_hosts: Optional[Path] = None
    trust_new_host: bool = False
    timeout_s: Optional[float] = None

    @classmethod
    def parse(cls, text: str, identity: Optional[Path] = None, known_hosts: Optional[Path] = None,
              trust_new_host: bool = False, timeout_s: Optional[float] = None) -> "HostSpec":
        """Parse ``"user@address[:port]"`` (IPv6 as ``user@[::1]:2222``).

        Raises
        ------
        InputError
            ``"--host: ...; use user@address[:port]"`` if ``text`` has another form or the port is out of
            range; ``"--ssh-timeout: ..."`` if ``timeout_s`` is not a positive number of seconds.
        """
        if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < 1e6):
            raise input_error("--ssh-timeout", None, f"must be a positive number of seconds, got {timeout_s!r}",
                              "give e.g. --ssh-timeout 30")
        match = _HOST_RE.match(text.strip()) if isinstance(text, str) else None
        if not match:
            raise input_error("--host", None, f"{text!r} is not a host", "use user@address[:port]")
        port = int(match["port"]) if match["port"] else 22
        if not 1 <= port <= 65535:
            raise input_error("--host", None, f"port {port} in {text!r} is out of range 1..65535",
                              "use user@address[:port]")
        address = match["address"].strip("[]")
        return cls(match["user"], address, port, None if identity is None else Path(identity),
                   None if known_hosts is None else Path(known_hosts), trust_new_host,
                   None if timeout_s is None else float(timeout_s))

    def __str__(self) -> str:
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.user}@{address}:{self.port}"

    @property
    def known_hosts_path(self) -> Path:
        """The known_hosts file in use (``known_hosts`` or ``~/.ssh/known_hosts``)."""
        return Path(self.known_hosts) if self.known_hosts else Path.home() / ".ssh" / "known_hosts"

    @property
    def host_key_name(self) -> str:
        """The name OpenSSH and paramiko file the host key under (``[address]:port`` unless port 22)."""
        return self.address if self.port == 22 else f"[{self.address}]:{self.port}"
