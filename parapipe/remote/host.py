"""An SSH host (paramiko), composed of small parts: the connection, its exec channels, its files, its agents.

:class:`RemoteHost` holds one of each and forwards the operations callers use:

- :attr:`RemoteHost.connection` (:class:`~parapipe.remote.connection.SshConnection`): host-key checked
  connection, keepalive, the step in progress, one-line errors of a failed or lost connection;
- :attr:`RemoteHost.channels` (:class:`~parapipe.remote.ssh_channels.ExecChannels`): commands with deadlines;
- :attr:`RemoteHost.files` (:class:`~parapipe.remote.host_files.HostFiles`): files over SFTP or, on hosts
  without it (Dropbear on Buildroot/Yocto images), over exec channels (:mod:`parapipe.remote.remote_fs`);
- :attr:`RemoteHost.agent` (:class:`~parapipe.remote.remote_agent.AgentLauncher`): the on-device agent.

Every failure a user can cause becomes a :class:`~parapipe.errors.HostError` whose message is one line: the
cause and the remedy; a connection that dies reads ``"connection to HOST lost during STEP (...)"``
(:class:`~parapipe.remote.liveness.ConnectionLost`).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, List, Optional, Tuple

import paramiko

from parapipe.errors import HostError
from parapipe.remote.agent_client import AgentClient
from parapipe.remote.connection import SshConnection
from parapipe.remote.host_files import HostFiles
from parapipe.remote.hostspec import HostSpec
from parapipe.remote.liveness import KEEPALIVE_COUNT_MAX, KEEPALIVE_S
from parapipe.remote.remote_agent import AgentLauncher
from parapipe.remote.ssh_channels import ExecChannels

__all__ = ["RemoteHost"]


class RemoteHost:
    """An SSH connection to one host with its channels, files and agents, used as a context manager.

    Parameters
    ----------
    spec : HostSpec
        The host and the credentials.
    connect_timeout_s : float, optional
        Deadline for the TCP connection, the SSH banner and authentication, s (default ``spec.timeout_s``,
        else :data:`~parapipe.remote.connection.DEFAULT_CONNECT_TIMEOUT_S`).
    keepalive_s, keepalive_count : float, int
        A keepalive that wants an answer goes out every ``keepalive_s`` seconds; after ``keepalive_count``
        silent intervals the connection counts as lost (OpenSSH's ServerAliveInterval/CountMax; defaults 15 s
        and 3, see :mod:`parapipe.remote.liveness`).

    Attributes
    ----------
    connection : SshConnection
    channels : ExecChannels
    files : HostFiles
    agent : AgentLauncher

    Examples
    --------
    >>> with RemoteHost(HostSpec.parse("pi@board:22")) as host:       # doctest: +SKIP
    ...     with host.step("the board check"):
    ...         rc, out = host.exec(["uname", "-m"], timeout_s=10)
    """

    def __init__(self, spec: HostSpec, connect_timeout_s: Optional[float] = None,
                 keepalive_s: float = KEEPALIVE_S, keepalive_count: int = KEEPALIVE_COUNT_MAX):
        self.connection = SshConnection(spec, connect_timeout_s, keepalive_s, keepalive_count)
        self.channels = ExecChannels(self.connection)
        self.files = HostFiles(self.connection, self.channels)
        self.agent = AgentLauncher(self.connection, self.channels, self.files)

    # ------------------------------------------------------------------------------------------- connection
    @property
    def spec(self) -> HostSpec:
        """The host and the credentials."""
        return self.connection.spec

    @property
    def step_timeout_s(self) -> float:
        """Deadline of each short step (file operations, channel requests; a transfer's longest silence), s:
        ``spec.timeout_s`` or :data:`~parapipe.remote.connection.DEFAULT_STEP_TIMEOUT_S`."""
        return self.connection.step_timeout_s

    def connect(self) -> "RemoteHost":
        """Open the connection (:meth:`SshConnection.connect`: same errors); returns self."""
        self.connection.connect()
        return self

    def close(self) -> None:
        """Stop the agents started here, close SFTP and the connection (idempotent)."""
        self.agent.close()
        self.files.close()
        self.connection.close()

    def __enter__(self) -> "RemoteHost":
        return self.connect()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def step(self, name: str) -> "contextlib.AbstractContextManager[None]":
        """Name what the following remote calls do, for messages (``"connection to HOST lost during NAME"``)."""
        return self.connection.step(name)

    def is_connected(self) -> bool:
        """Whether the SSH connection is open and alive (False once closed or lost)."""
        return self.connection.is_connected()

    def lost_reason(self, settle_s: float = 0.0) -> Optional[str]:
        """Why the connection died, or None (:meth:`SshConnection.lost_reason`)."""
        return self.connection.lost_reason(settle_s)

    def failure(self, exc: BaseException, what: str, remedy: str, default_step: str = "the command") -> HostError:
        """The one-line error for ``exc`` raised by a remote call (:meth:`SshConnection.failure`)."""
        return self.connection.failure(exc, what, remedy, default_step)

    # --------------------------------------------------------------------------------------------- commands
    def exec(self, argv: List[str], timeout_s: float, stdin_data: Optional[bytes] = None) -> Tuple[int, str]:
        """Run a command, arguments shell-quoted, output combined (:meth:`ExecChannels.exec`)."""
        return self.channels.exec(argv, timeout_s, stdin_data)

    def run(self, argv: List[str], timeout_s: float, stdin: Any = None, combine: bool = False,
            idle: bool = False) -> Tuple[int, bytes, bytes]:
        """Run a command; ``(exit status, stdout, stderr)`` as bytes (:meth:`ExecChannels.run`)."""
        return self.channels.run(argv, timeout_s, stdin, combine, idle)

    def open_exec_channel(self, argv: List[str], timeout_s: Optional[float] = None) -> paramiko.Channel:
        """Start a long-running command and return its channel (:meth:`ExecChannels.open_exec_channel`)."""
        return self.channels.open_exec_channel(argv, timeout_s)

    # ------------------------------------------------------------------------------------------------ files
    @property
    def file_transport(self) -> str:
        """How files move on this connection: ``"SFTP"`` or ``"exec channel"``."""
        return self.files.file_transport

    def sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP client (:meth:`HostFiles.sftp`)."""
        return self.files.sftp()

    def home(self) -> str:
        """Absolute path of the remote user's home folder."""
        return self.files.home()

    def upload(self, local: Path, remote: str, sha256: Optional[str] = None) -> None:
        """Copy a local file to ``remote`` atomically (:meth:`HostFiles.upload`)."""
        self.files.upload(local, remote, sha256)

    def write_bytes(self, remote: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to the remote file ``remote`` atomically (:meth:`HostFiles.write_bytes`)."""
        self.files.write_bytes(remote, data, mode)

    def mkdir_p(self, remote: str) -> None:
        """Create the remote folder ``remote`` and its parents (:meth:`HostFiles.mkdir_p`)."""
        self.files.mkdir_p(remote)

    def remove(self, remote: str) -> None:
        """Remove one remote file; absent is fine (:meth:`HostFiles.remove`)."""
        self.files.remove(remote)

    def remove_tree(self, remote: str, timeout_s: float = 60.0) -> None:
        """Remove a remote file or folder recursively (:meth:`HostFiles.remove_tree`)."""
        self.files.remove_tree(remote, timeout_s)

    def download(self, remote: str, local: Path) -> None:
        """Copy the remote file ``remote`` into the local file ``local`` (:meth:`HostFiles.download`)."""
        self.files.download(remote, local)

    def sha256(self, remote_path: str, timeout_s: float = 60.0) -> Optional[str]:
        """SHA-256 of a remote file, or None if absent (:meth:`HostFiles.sha256`)."""
        return self.files.sha256(remote_path, timeout_s)

    # ------------------------------------------------------------------------------------------------ agent
    def check_python(self, python: str = "python3", timeout_s: Optional[float] = None) -> Tuple[str, str]:
        """Check Python >= 3.8 and numpy + onnxruntime >= 1.19 on the host (:meth:`AgentLauncher.check_python`)."""
        return self.agent.check_python(python, timeout_s)

    def start_agent(self, python: str = "python3", timeout_s: Optional[float] = None) -> AgentClient:
        """Upload the agent (once a version) and run it; it is closed with the host
        (:meth:`AgentLauncher.start`)."""
        return self.agent.start(python, timeout_s)

    def open_agent(self, argv: List[str], timeout_s: Optional[float] = None) -> AgentClient:
        """Run an agent command line and talk to it; the caller closes it (:meth:`AgentLauncher.open`)."""
        return self.agent.open(argv, timeout_s)
