"""SSH hosts (paramiko): host-key checked connections, commands with deadlines, SFTP files, the agent.

Every failure a user can cause (unreachable host, refused key, unknown or changed host key, timeouts, a host
without Python or ONNX Runtime) becomes a :class:`~parapipe.errors.HostError` whose message is one line: the
cause and the remedy. Host-key checking is always on; trusting a new key is an explicit choice
(``trust_new_host``) and the key is then saved to the known_hosts file.
"""
from __future__ import annotations

import logging
import os
import posixpath
import re
import select
import shlex
import socket
import stat
import time
from pathlib import Path
from typing import Any, List, Optional, Tuple

import paramiko

from parapipe.deploy import remote_agent
from parapipe.deploy.agent_client import AgentClient
from parapipe.deploy.hostspec import HostSpec
from parapipe.deploy.known_hosts import RejectPolicy, TrustAndSavePolicy, UnknownHostKey, fingerprint
from parapipe.errors import HostError, input_error

__all__ = ["HostSpec", "RemoteHost"]

log = logging.getLogger(__name__)

#: Seconds between SSH keepalives, so a dead remote is noticed while waiting (OpenSSH's ServerAliveInterval).
KEEPALIVE_S = 15


class RemoteHost:
    """An SSH connection to one host, used as a context manager.

    Parameters
    ----------
    spec : HostSpec
        The host and the credentials.
    connect_timeout_s : float
        Deadline for the TCP connection, the SSH banner and authentication, in seconds (default 10).

    Examples
    --------
    >>> with RemoteHost(HostSpec.parse("pi@board:22")) as host:       # doctest: +SKIP
    ...     rc, out = host.exec(["uname", "-m"], timeout_s=10)
    """

    def __init__(self, spec: HostSpec, connect_timeout_s: float = 10.0):
        self.spec = spec
        self.connect_timeout_s = connect_timeout_s
        self._client: Optional[paramiko.SSHClient] = None
        self._sftp: Optional[paramiko.SFTPClient] = None
        self._agents: List[AgentClient] = []

    # ---------------------------------------------------------------------------------------------connection
    def connect(self) -> "RemoteHost":
        """Open the connection (host key checked, key authentication).

        Raises
        ------
        HostError
            Unreachable host, timeout, unknown or changed host key, refused key (one line: cause; remedy).
        InputError
            If the identity file does not exist.
        """
        spec, name = self.spec, str(self.spec)
        if spec.identity is not None and not Path(spec.identity).is_file():
            raise input_error("--identity", None, f"{spec.identity} does not exist",
                              "pass the private key file that the host accepts")
        client = paramiko.SSHClient()
        known_hosts = spec.known_hosts_path
        if known_hosts.is_file():
            try:
                client.load_host_keys(str(known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise input_error(str(known_hosts), None, f"cannot be read ({exc})",
                                  "fix or move the known_hosts file") from None
        client.set_missing_host_key_policy(TrustAndSavePolicy(known_hosts) if spec.trust_new_host
                                           else RejectPolicy())
        timeout = self.connect_timeout_s
        kwargs: dict = {"hostname": spec.address, "port": spec.port, "username": spec.user,
                        "timeout": timeout, "banner_timeout": timeout, "auth_timeout": timeout,
                        "channel_timeout": timeout}
        if spec.identity is not None:
            kwargs.update(key_filename=str(spec.identity), look_for_keys=False, allow_agent=False)
        try:
            client.connect(**kwargs)
        except UnknownHostKey as exc:
            client.close()
            raise HostError(f"{name}: host key ({exc}) not in {known_hosts}; verify it and pass "
                            f"--trust-new-host, or add it with ssh-keyscan -p {spec.port} "
                            f"{spec.address}") from None
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostError(f"{name}: host key changed ({exc.key.get_name()} {fingerprint(exc.key)} is not "
                            f"the one in {known_hosts}); if the host was reinstalled, remove the old key "
                            f"with ssh-keygen -R '{spec.host_key_name}' -f {known_hosts}, else do not "
                            "connect") from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise HostError(f"{name}: the key {spec.identity} is encrypted; load it into ssh-agent and pass "
                            "no identity, or pass an unencrypted key") from None
        except paramiko.AuthenticationException as exc:
            client.close()
            key = spec.identity or "the default keys"
            raise HostError(f"{name}: authentication failed with {key} ({exc}); check the user name and add "
                            f"the public key to ~{spec.user}/.ssh/authorized_keys on the host") from None
        except paramiko.ssh_exception.NoValidConnectionsError as exc:
            client.close()
            reasons = sorted({(e.strerror or str(e)) for e in exc.errors.values()}) or ["refused"]
            raise HostError(f"{name}: cannot connect ({'; '.join(reasons)}); check the address and that sshd "
                            f"listens on port {spec.port}") from None
        except (socket.timeout, TimeoutError):
            client.close()
            raise HostError(f"{name}: no answer within {timeout:g} s; check the address, the network and the "
                            "firewall, or raise the connect timeout") from None
        except socket.gaierror as exc:
            client.close()
            raise HostError(f"{name}: cannot resolve {spec.address!r} ({exc.strerror}); check the host "
                            "name") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise HostError(f"{name}: cannot connect ({reason}); check the address and that sshd listens on "
                            f"port {spec.port}") from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
        self._client = client
        log.info("connected to %s", name)
        return self

    def close(self) -> None:
        """Stop the agents started here and close the connection (idempotent)."""
        for agent in self._agents:
            agent.close(timeout_s=2.0)
        self._agents.clear()
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "RemoteHost":
        return self.connect()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def is_connected(self) -> bool:
        """Whether the SSH connection is open and alive (False once closed or lost)."""
        transport = self._client.get_transport() if self._client is not None else None
        return transport is not None and transport.is_active()

    def _transport(self) -> paramiko.Transport:
        transport = self._client.get_transport() if self._client is not None else None
        if transport is None or not transport.is_active():
            raise HostError(f"{self.spec}: not connected (the connection was closed or lost); connect again")
        return transport

    def _open_channel(self) -> paramiko.Channel:
        try:
            return self._transport().open_session(timeout=self.connect_timeout_s)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(f"{self.spec}: cannot open an SSH channel ({exc}); check the host's MaxSessions "
                            "and that it is still up") from None

    def open_exec_channel(self, argv: List[str]) -> paramiko.Channel:
        """Start a long-running command (arguments shell-quoted) and return its channel, stderr kept apart.

        The caller reads and writes the channel itself, with its own deadlines (the agent protocol does).

        Raises
        ------
        HostError
            If no channel can be opened or the command is refused.
        """
        channel = self._open_channel()
        try:
            channel.exec_command(" ".join(shlex.quote(str(arg)) for arg in argv))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            raise HostError(f"{self.spec}: cannot start {argv[0]!r} ({exc}); check the host") from None
        return channel

    def sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP client (opened on first use).

        Raises
        ------
        HostError
            If the host offers no SFTP subsystem.
        """
        if self._sftp is None:
            self._transport()
            try:
                self._sftp = self._client.open_sftp()
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise HostError(f"{self.spec}: SFTP unavailable ({exc}); enable 'Subsystem sftp' in the "
                                "host's sshd_config") from None
        return self._sftp

    # -----------------------------------------------------------------------------------------------commands
    def exec(self, argv: List[str], timeout_s: float, stdin_data: Optional[bytes] = None) -> Tuple[int, str]:
        """Run a command; every argument is shell-quoted, stdout and stderr are read together.

        Parameters
        ----------
        argv : list of str
            Program and arguments (quoted with :func:`shlex.quote`, so no shell syntax is interpreted).
        timeout_s : float
            Deadline for the whole command, in seconds.
        stdin_data : bytes, optional
            Sent to the command's stdin, which is then closed (it is closed at once without data).

        Returns
        -------
        (int, str)
            Exit status (-1 if the command died without one, e.g. killed by a signal) and the combined output
            (UTF-8, undecodable bytes replaced).

        Raises
        ------
        HostError
            If the command does not finish within ``timeout_s`` or the connection is lost.
        """
        command = " ".join(shlex.quote(str(arg)) for arg in argv)
        channel = self._open_channel()
        deadline = time.monotonic() + timeout_s
        chunks: List[bytes] = []
        pending = memoryview(stdin_data or b"")
        try:
            channel.set_combine_stderr(True)
            channel.exec_command(command)
            if not pending:
                channel.shutdown_write()
            while True:
                if pending and channel.send_ready():
                    sent = channel.send(pending[:1 << 16])
                    pending = pending[sent:]
                    if not pending:
                        channel.shutdown_write()
                while channel.recv_ready():
                    chunks.append(channel.recv(1 << 16))
                if channel.exit_status_ready() and not channel.recv_ready():
                    # Output may still be in flight after the status: read until EOF (short, bounded wait).
                    channel.settimeout(max(0.0, min(1.0, deadline - time.monotonic())))
                    try:
                        while True:
                            data = channel.recv(1 << 16)
                            if not data:
                                break
                            chunks.append(data)
                    except socket.timeout:
                        pass
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if not self._transport().is_active():
                    raise EOFError("connection lost")
                select.select([channel], [], [], min(left, 0.01 if pending else 0.2))
            rc = channel.recv_exit_status()
        except TimeoutError:
            raise HostError(f"{self.spec}: command {command!r} did not finish within {timeout_s:g} s; raise "
                            "the timeout or check the host") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(f"{self.spec}: lost the connection while running {command!r} ({exc}); check the "
                            "host and the network") from None
        finally:
            channel.close()
        output = b"".join(chunks).decode("utf-8", "replace")
        log.debug("%s: %s -> %d", self.spec, command, rc)
        return rc, output

    # --------------------------------------------------------------------------------------------------files
    def home(self) -> str:
        """Absolute path of the remote user's home folder (where SFTP starts)."""
        return self.sftp().normalize(".")

    def _abs(self, remote: str) -> str:
        remote = str(remote)
        if remote == "~" or remote.startswith("~/"):
            remote = self.home() + remote[1:]
        return remote if posixpath.isabs(remote) else posixpath.join(self.home(), remote)

    def upload(self, local: Path, remote: str) -> None:
        """Copy a local file to ``remote`` (absolute, or relative to the remote home) atomically.

        The file is written under a temporary name in the same folder and renamed over ``remote``, so a broken
        upload never leaves a truncated file. The parent folder must exist (see :meth:`mkdir_p`).

        Raises
        ------
        HostError
            If the file cannot be written (permissions, missing folder, full disk).
        """
        remote = self._abs(remote)
        tmp = posixpath.join(posixpath.dirname(remote), f".{posixpath.basename(remote)}.part{os.getpid()}")
        sftp = self.sftp()
        try:
            sftp.put(str(local), tmp)
            sftp.chmod(tmp, os.stat(local).st_mode & 0o777)
            sftp.posix_rename(tmp, remote)
        except (OSError, paramiko.SSHException) as exc:
            try:
                sftp.remove(tmp)
            except (OSError, paramiko.SSHException):
                pass
            raise HostError(f"{self.spec}: cannot upload {local} to {remote!r} ({exc}); check that the "
                            "folder exists and is writable") from None

    def mkdir_p(self, remote: str) -> None:
        """Create the remote folder ``remote`` and its parents (no error if it exists).

        Raises
        ------
        HostError
            If a component exists and is not a folder, or cannot be created.
        """
        remote = self._abs(remote)
        sftp = self.sftp()
        current = "/"
        for part in [p for p in remote.split("/") if p]:
            current = posixpath.join(current, part)
            try:
                mode = sftp.stat(current).st_mode
            except FileNotFoundError:
                try:
                    sftp.mkdir(current)
                except OSError as exc:
                    raise HostError(f"{self.spec}: cannot create {current!r} ({exc}); "
                                    "check permissions") from None
                continue
            except OSError as exc:
                raise HostError(f"{self.spec}: cannot inspect {current!r} ({exc}); "
                                "check permissions") from None
            if not stat.S_ISDIR(mode or 0):
                raise HostError(f"{self.spec}: {current!r} exists and is not a folder; move it away")

    def remove_tree(self, remote: str, timeout_s: float = 60.0) -> None:
        """Remove the remote file or folder ``remote`` recursively (``rm -rf``); absent is fine.

        Raises
        ------
        ValueError
            If ``remote`` is ``/``, the home folder or empty (a bug in the caller, never user input).
        HostError
            If removal fails.
        """
        path = posixpath.normpath(self._abs(remote))
        if path in ("/", "", ".") or path == posixpath.normpath(self.home()):
            raise ValueError(f"refusing to remove {path!r} on {self.spec}")
        rc, output = self.exec(["rm", "-rf", "--", path], timeout_s=timeout_s)
        if rc != 0:
            raise HostError(f"{self.spec}: cannot remove {path!r}: {output.strip()}; check permissions")

    def sha256(self, remote_path: str, timeout_s: float = 60.0) -> Optional[str]:
        """SHA-256 hex digest of a remote file, or None if it does not exist.

        Uses ``sha256sum`` (coreutils) and falls back to ``python3``'s hashlib where it is missing.

        Raises
        ------
        HostError
            If the file exists but cannot be hashed.
        """
        path = self._abs(remote_path)
        try:
            self.sftp().stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostError(f"{self.spec}: cannot inspect {path!r} ({exc}); check permissions") from None
        rc, output = self.exec(["sha256sum", "--", path], timeout_s=timeout_s)
        if rc == 127:
            code = "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())"
            rc, output = self.exec(["python3", "-c", code, path], timeout_s=timeout_s)
        digest = output.split()[0] if output.split() else ""
        if rc != 0 or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise HostError(f"{self.spec}: cannot hash {path!r}: {output.strip()[-300:]}; check permissions")
        return digest

    # --------------------------------------------------------------------------------------------------agent
    def check_python(self, python: str = "python3", timeout_s: float = 60.0) -> Tuple[str, str]:
        """Check Python >= 3.8 and numpy + onnxruntime >= 1.19 on the host; see
        :func:`parapipe.deploy.remote_agent.check_python`.
        """
        return remote_agent.check_python(self, python, timeout_s)

    def start_agent(self, python: str = "python3", timeout_s: float = 60.0) -> AgentClient:
        """Upload the agent to ``~/.cache/parapipe/agent-<sha256[:12]>/agent.py`` (once a version), run it.

        See :func:`parapipe.deploy.remote_agent.start_agent`. The agent is closed with the host.

        Raises
        ------
        HostError
            No Python >= 3.8, numpy/onnxruntime missing (remedy: ``pip install onnxruntime``), upload failed.
        """
        agent = remote_agent.start_agent(self, python, timeout_s)
        self._agents.append(agent)
        return agent
