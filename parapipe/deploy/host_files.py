"""Files on a connected host: the part of :class:`~parapipe.deploy.host.RemoteHost` that picks SFTP or exec
channels (:mod:`parapipe.deploy.remote_fs`) once per connection and resolves remote paths."""
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

from parapipe.deploy.remote_fs import HASH_SH, ExecFiles, SftpFiles, parse_digest
from parapipe.deploy.ssh_channels import settle_s
from parapipe.errors import HostError
from ppexec.bundle_run import sha256_file

__all__ = ["FilesMixin"]

log = logging.getLogger("parapipe.deploy.host")

#: ``sh -c _SHA_SH sh PATH``: the file's SHA-256, or ``PARAPIPE-ABSENT``.
_SHA_SH = HASH_SH + '\n[ -e "$1" ] || { echo PARAPIPE-ABSENT; exit 0; }\nsha "$1"'


class FilesMixin:
    """File methods of :class:`~parapipe.deploy.host.RemoteHost` (uses its ``spec``, ``step_timeout_s``,
    ``step``, ``exec``, ``_open_channel``, ``_request``, ``lost_reason`` and ``failure``; keeps ``_files`` and
    ``_home``)."""

    _files: Union[SftpFiles, ExecFiles, None] = None
    _home: Optional[str] = None

    def _fs(self) -> Union[SftpFiles, ExecFiles]:
        """SFTP where the server offers it, else exec channels (decided once per connection)."""
        if self._files is None:
            self._files = self._open_sftp() or ExecFiles(self)
        return self._files

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
        timeout = self.step_timeout_s
        deadline = time.monotonic() + timeout
        channel = self._open_channel(timeout, "the start of SFTP")
        try:
            self._request(channel, "subsystem", "sftp", deadline, "SFTP", timeout)
            channel.settimeout(timeout)  # every later SFTP answer has this deadline too
            return SftpFiles(self, paramiko.SFTPClient(channel))
        except HostError as exc:
            if self.lost_reason() is not None or "no answer" in str(exc):
                raise
            reason = str(exc)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            if self.lost_reason(settle_s(exc)) is not None or isinstance(exc, socket.timeout):
                raise self.failure(exc, "SFTP does not start", "check the host", "the start of SFTP") from None
            reason = " ".join(str(exc).split()) or type(exc).__name__
        log.info("%s offers no SFTP (%s); files go through exec channels", self.spec, reason)
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
            raise HostError(f"{self.spec}: SFTP unavailable; enable 'Subsystem sftp' in the host's sshd_config")
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

    def _abs(self, remote: str) -> str:
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
        :attr:`step_timeout_s`.

        Raises
        ------
        HostError
            If the file cannot be written (permissions, missing folder, full disk, damaged copy);
            :class:`ConnectionLost` if the connection dies.
        """
        local = Path(local)
        mode = local.stat().st_mode & 0o777
        with self._in_step(f"the upload of {local.name}"), open(local, "rb") as stream:
            path = self._abs(remote)
            self._fs().put_stream(stream, str(local), path, mode, sha256 or sha256_file(str(local)))

    def write_bytes(self, remote: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to the remote file ``remote`` atomically (as :meth:`upload`)."""
        with self._in_step(f"the upload of {posixpath.basename(remote)}"):
            path = self._abs(remote)
            self._fs().put_stream(io.BytesIO(data), posixpath.basename(path), path, mode,
                                  hashlib.sha256(data).hexdigest())

    def mkdir_p(self, remote: str) -> None:
        """Create the remote folder ``remote`` and its parents (no error if it exists).

        Raises
        ------
        HostError
            If a component exists and is not a folder, or cannot be created.
        """
        with self._in_step(f"the creation of {remote}"):
            self._fs().mkdir_p(self._abs(remote))

    def remove(self, remote: str) -> None:
        """Remove one remote file (absent is fine)."""
        with self._in_step(f"the removal of {remote}"):
            self._fs().remove(self._abs(remote))

    def download(self, remote: str, local: Path) -> None:
        """Copy the remote file ``remote`` into the local file ``local`` (overwritten; not atomic)."""
        with self._in_step(f"the fetch of {remote}"):
            self._fs().get(self._abs(remote), Path(local))

    def _in_step(self, name: str):
        """The caller's step if one is set, else ``name``."""
        return self.step(self._step or name)

    def remove_tree(self, remote: str, timeout_s: float = 60.0) -> None:
        """Remove the remote file or folder ``remote`` recursively (``rm -rf``); absent is fine.

        Raises
        ------
        ValueError
            If ``remote`` is ``/``, the home folder or empty (a bug in the caller, never user input).
        HostError
            If removal fails.
        """
        with self._in_step(f"the removal of {remote}"):
            path = posixpath.normpath(self._abs(remote))
            if path in ("/", "", ".") or path == posixpath.normpath(self.home()):
                raise ValueError(f"refusing to remove {path!r} on {self.spec}")
            rc, output = self.exec(["rm", "-rf", "--", path], timeout_s=timeout_s)
        if rc != 0:
            raise HostError(f"{self.spec}: cannot remove {path!r}: {output.strip()}; check permissions")

    def sha256(self, remote_path: str, timeout_s: float = 60.0) -> Optional[str]:
        """SHA-256 hex digest of a remote file, or None if it does not exist.

        Uses ``sha256sum`` (coreutils, busybox), else ``openssl``, else ``python3`` on the host.

        Raises
        ------
        HostError
            If the file exists but cannot be hashed.
        """
        with self._in_step(f"the hashing of {remote_path}"):
            path = self._abs(remote_path)
            rc, output = self.exec(["sh", "-c", _SHA_SH, "sh", path], timeout_s=timeout_s)
        if rc == 0 and output.strip() == "PARAPIPE-ABSENT":
            return None
        digest = parse_digest(output)
        if rc != 0 or digest is None:
            raise HostError(f"{self.spec}: cannot hash {path!r}: {output.strip()[-300:]}; check permissions")
        return digest
