"""Files on a connected host: :class:`HostFiles` picks SFTP or exec channels (:mod:`parapipe.remote.remote_fs`)
once per connection, resolves remote paths (``~`` and relative ones from the remote home) and names each file
operation as the connection's step, for messages."""
from __future__ import annotations

import hashlib
import io
import logging
import posixpath
import socket
import time
from pathlib import Path
from typing import Optional, Union

import paramiko

from parapipe.errors import HostError
from parapipe.remote.connection import SshConnection, settle_s
from parapipe.remote.remote_fs import HASH_SH, ExecFiles, SftpFiles, parse_digest
from parapipe.remote.ssh_channels import ExecChannels, said

__all__ = ["HostFiles"]

log = logging.getLogger(__name__)

#: ``sh -c _SHA_SH sh PATH``: the file's SHA-256, or ``PARAPIPE-ABSENT``.
_SHA_SH = HASH_SH + '\n[ -e "$1" ] || { echo PARAPIPE-ABSENT; exit 0; }\nsha "$1"'


class HostFiles:
    """The files of one connected host, over SFTP where the server offers it, else over exec channels.

    Parameters
    ----------
    connection : SshConnection
        The connection (its ``step_timeout_s`` bounds each file operation, and a transfer's silence).
    channels : ExecChannels
        Exec channels on that connection (SFTP's channel, the exec-channel transfers, ``rm``, hashing).
    """

    def __init__(self, connection: SshConnection, channels: ExecChannels):
        self.connection = connection
        self.channels = channels
        self._files: Union[SftpFiles, ExecFiles, None] = None  # chosen on first use
        self._home: Optional[str] = None

    def _fs(self) -> Union[SftpFiles, ExecFiles]:
        """SFTP where the server offers it, else exec channels (decided once per connection)."""
        if self._files is None:
            self._files = self._open_sftp() or ExecFiles(self.connection, self.channels)
        return self._files

    def close(self) -> None:
        """Close the SFTP client, if one is open and the connection lives (before the connection closes)."""
        files, self._files = self._files, None
        if isinstance(files, SftpFiles) and self.connection.is_connected():
            files.sftp.close()

    def forget_files(self) -> None:
        """Drop the SFTP client (after a timeout its answers may come out of step); the next file call opens
        a new one."""
        files, self._files = self._files, None
        if isinstance(files, SftpFiles):
            try:
                files.sftp.close()
            except (OSError, EOFError, paramiko.SSHException):
                pass

    def _open_sftp(self) -> Optional[SftpFiles]:
        conn = self.connection
        timeout = conn.step_timeout_s
        deadline = time.monotonic() + timeout
        channel = self.channels.open_channel(timeout, "the start of SFTP")
        try:
            self.channels.request(channel, "subsystem", "sftp", deadline, "SFTP", timeout)
            channel.settimeout(timeout)  # every later SFTP answer has this deadline too
            return SftpFiles(conn, paramiko.SFTPClient(channel), self.forget_files, self.channels)
        except HostError as exc:
            if conn.lost_reason() is not None or "no answer" in str(exc):
                raise
            reason = str(exc)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            if conn.lost_reason(settle_s(exc)) is not None or isinstance(exc, socket.timeout):
                raise conn.failure(exc, "SFTP does not start", "check the host", "the start of SFTP") from None
            reason = " ".join(str(exc).split()) or type(exc).__name__
        log.info("%s offers no SFTP (%s); files go through exec channels", conn.spec, reason)
        return None

    def sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP client (opened on first use).

        Raises
        ------
        HostError
            If the host offers no SFTP subsystem (files then still work through :meth:`upload` and the
            other file methods, over exec channels).
        """
        files = self._fs()
        if not isinstance(files, SftpFiles):
            raise HostError(f"{self.connection.spec}: SFTP unavailable; enable 'Subsystem sftp' in the host's "
                            "sshd_config")
        return files.sftp

    @property
    def file_transport(self) -> str:
        """How files move on this connection: ``"SFTP"`` or ``"exec channel"``."""
        return self._fs().kind_name

    def home(self) -> str:
        """Absolute path of the remote user's home folder (where sessions start)."""
        if self._home is None:
            self._home = self._fs().home()
        return self._home

    def abs_path(self, remote: str) -> str:
        """``remote`` made absolute: ``~``, ``~/...`` and relative paths are taken from the remote home."""
        remote = str(remote)
        if remote == "~" or remote.startswith("~/"):
            remote = self.home() + remote[1:]
        return remote if posixpath.isabs(remote) else posixpath.join(self.home(), remote)

    def upload(self, local: Path, remote: str, sha256: Optional[str] = None) -> None:
        """Copy a local file to ``remote`` (absolute, or relative to the remote home) atomically.

        The file is written under a temporary name in the same folder and renamed over ``remote``, so a broken
        upload never leaves a truncated file. The parent folder must exist (see :meth:`mkdir_p`). Without
        SFTP the copy goes through an exec channel and is renamed only if its SHA-256 on the host equals
        ``sha256`` (computed here when not given). Each transfer may be silent for at most
        the connection's ``step_timeout_s``.

        Raises
        ------
        HostError
            If the file cannot be written (permissions, missing folder, full disk, damaged copy);
            :class:`ConnectionLost` if the connection dies.
        """
        local = Path(local)
        mode = local.stat().st_mode & 0o777
        with self.connection.in_step(f"the upload of {local.name}"), open(local, "rb") as stream:
            path = self.abs_path(remote)
            self._fs().put_stream(stream, str(local), path, mode, sha256 or _sha256_file(local))

    def write_bytes(self, remote: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to the remote file ``remote`` atomically (as :meth:`upload`)."""
        with self.connection.in_step(f"the upload of {posixpath.basename(remote)}"):
            path = self.abs_path(remote)
            self._fs().put_stream(io.BytesIO(data), posixpath.basename(path), path, mode,
                                  hashlib.sha256(data).hexdigest())

    def mkdir_p(self, remote: str) -> None:
        """Create the remote folder ``remote`` and its parents (no error if it exists).

        Raises
        ------
        HostError
            If a component exists and is not a folder, or cannot be created.
        """
        with self.connection.in_step(f"the creation of {remote}"):
            self._fs().mkdir_p(self.abs_path(remote))

    def remove(self, remote: str) -> None:
        """Remove one remote file (absent is fine)."""
        with self.connection.in_step(f"the removal of {remote}"):
            self._fs().remove(self.abs_path(remote))

    def download(self, remote: str, local: Path) -> None:
        """Copy the remote file ``remote`` into the local file ``local`` (overwritten; not atomic)."""
        with self.connection.in_step(f"the fetch of {remote}"):
            self._fs().get(self.abs_path(remote), Path(local))

    def remove_tree(self, remote: str, timeout_s: float = 60.0) -> None:
        """Remove the remote file or folder ``remote`` recursively (``rm -rf``); absent is fine.

        Raises
        ------
        ValueError
            If ``remote`` is ``/``, the home folder or empty (a bug in the caller, never user input).
        HostError
            If removal fails.
        """
        with self.connection.in_step(f"the removal of {remote}"):
            path = posixpath.normpath(self.abs_path(remote))
            if path in ("/", "", ".") or path == posixpath.normpath(self.home()):
                raise ValueError(f"refusing to remove {path!r} on {self.connection.spec}")
            rc, output = self.channels.exec(["rm", "-rf", "--", path], timeout_s=timeout_s)
        if rc != 0:
            raise HostError(f"{self.connection.spec}: cannot remove {path!r}: {said(output, rc)}; check permissions")

    def sha256(self, remote_path: str, timeout_s: float = 60.0) -> Optional[str]:
        """SHA-256 hex digest of a remote file, or None if it does not exist.

        Uses ``sha256sum`` (coreutils, busybox), else ``openssl``, else ``python3`` on the host.

        Raises
        ------
        HostError
            If the file exists but cannot be hashed.
        """
        with self.connection.in_step(f"the hashing of {remote_path}"):
            path = self.abs_path(remote_path)
            # stdout alone: the login shell's start-up files may warn on stderr before the command runs.
            rc, out, err = self.channels.run(["sh", "-c", _SHA_SH, "sh", path], timeout_s=timeout_s)
        output = out.decode("utf-8", "replace")
        if rc == 0 and output.split()[-1:] == ["PARAPIPE-ABSENT"]:
            return None
        digest = parse_digest(output)
        if rc != 0 or digest is None:
            printed = output + err.decode("utf-8", "replace")
            raise HostError(f"{self.connection.spec}: cannot hash {path!r}: {said(printed, rc)}; check permissions")
        return digest


def _sha256_file(path: Path) -> str:
    """SHA-256 hex digest of a local file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
