"""Files on an SSH host, over SFTP or, where the server has none, through exec channels (POSIX sh + cat).

Dropbear on Buildroot/Yocto images often ships without ``sftp-server``; :class:`ExecFiles` then moves the
files through ``sh -c`` commands on exec channels: an upload streams into a temporary file, is hashed on the
host (``sha256sum``, else ``openssl dgst -sha256``, else ``python3``), and renamed only when its SHA-256 equals
the local one. Both classes have the same methods and raise :class:`~parapipe.errors.HostError` (one line);
:class:`~parapipe.remote.host_files.HostFiles` picks one per connection and puts deadlines on every call.

An SFTP upload is renamed over its target with the ``posix-rename@openssh.com`` extension (an atomic
``rename(2)``). SFTP's own rename (``SSH_FXP_RENAME``) may refuse an existing target (OpenSSH's sftp-server
does), so on servers without the extension :class:`SftpFiles` renames a new file with it, and replaces an
existing one with ``mv -f`` on an exec channel (atomic too), else by renaming the old file aside first.
"""
from __future__ import annotations

import logging
import os
import posixpath
import re
import socket
import stat
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import paramiko

from parapipe.errors import HostError
from parapipe.remote.connection import SshConnection
from parapipe.remote.ssh_channels import ExecChannels, said

__all__ = ["SftpFiles", "ExecFiles", "HASH_SH", "parse_digest", "POSIX_RENAME"]

log = logging.getLogger(__name__)

#: The SFTP extension of an atomic rename over an existing file (OpenSSH's PROTOCOL file, section 4.3).
POSIX_RENAME = "posix-rename@openssh.com"
#: The status text of an unknown extended request, which paramiko raises as a bare ``IOError(text)``: SFTP
#: status 8 ``SSH_FX_OP_UNSUPPORTED`` (draft-ietf-secsh-filexfer-02, section 7) reads "Operation unsupported"
#: in OpenSSH's sftp-server and paramiko's SFTPServer.
_UNSUPPORTED = re.compile(r"unsupported|not supported|not implemented", re.IGNORECASE)

#: sh function ``sha FILE`` printing the file's SHA-256 first on its line: coreutils/busybox ``sha256sum``,
#: else OpenSSL, else Python 3 (one of them is on every board parapipe runs on: the agent needs Python 3).
HASH_SH = ('sha() { if command -v sha256sum >/dev/null 2>&1; then sha256sum < "$1"; '
           'elif command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r < "$1"; '
           'else python3 -c "import hashlib,sys; h=hashlib.sha256(); '
           '[h.update(b) for b in iter(lambda: sys.stdin.buffer.read(1 << 20), b\'\')]; '
           'print(h.hexdigest())" < "$1"; fi; }')

#: Upload script: ``sh -c _PUT_SH sh TMP DEST MODE SHA256`` with the file on stdin. Writes TMP, checks its
#: SHA-256, sets the mode and renames it over DEST; a mismatch removes TMP and prints the digest found.
_PUT_SH = HASH_SH + r'''
umask 077
cat > "$1" || { rm -f "$1"; exit 3; }
sum=$(sha "$1") || { rm -f "$1"; exit 3; }
sum=${sum%% *}
if [ "$sum" != "$4" ]; then rm -f "$1"; echo "PARAPIPE-SHA256-MISMATCH $sum"; exit 4; fi
chmod "$3" "$1" && mv -f "$1" "$2"
'''

def parse_digest(output: str) -> Optional[str]:
    """The digest ``sha`` of :data:`HASH_SH` printed: the first word of the last line of ``output`` that starts
    with 64 hex digits (lines a chatty start-up file printed before it are skipped), or None."""
    for line in reversed(output.splitlines()):
        words = line.split()
        if words and re.fullmatch(r"[0-9a-f]{64}", words[0]):
            return words[0]
    return None


def _temp_name(remote: str, suffix: str = "part") -> str:
    return posixpath.join(posixpath.dirname(remote), f".{posixpath.basename(remote)}.{suffix}{os.getpid()}")


class SftpFiles:
    """Files over the connection's SFTP channel (its reads time out after the connection's step timeout).

    ``forget``: called after a timeout, when answers may still arrive out of step, so that the owner never
    reuses this client (it opens a new one on its next call). ``channels``: exec channels on the same
    connection, for ``mv -f`` where the server lacks :data:`POSIX_RENAME` (None: SFTP renames only).

    Attributes
    ----------
    posix_rename : bool or None
        Whether the server did the :data:`POSIX_RENAME` extension (None before the first upload).
    """

    kind_name = "SFTP"

    def __init__(self, connection: SshConnection, sftp: paramiko.SFTPClient, forget: Callable[[], None],
                 channels: Optional[ExecChannels] = None):
        self._conn = connection
        self.sftp = sftp
        self._forget = forget
        self._channels = channels
        self.posix_rename: Optional[bool] = None

    def _fail(self, exc: BaseException, what: str, remedy: str) -> HostError:
        if isinstance(exc, socket.timeout):  # answers may still arrive, out of step: never reuse this client
            self._forget()
        return self._conn.failure(exc, what, remedy)

    def home(self) -> str:
        """The remote user's home folder (where SFTP starts)."""
        try:
            return self.sftp.normalize(".")
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise self._fail(exc, "cannot find the home folder", "check the host") from None

    def kind(self, path: str) -> Optional[str]:
        """``"dir"``, ``"file"`` or None (absent)."""
        try:
            mode = self.sftp.stat(path).st_mode
        except FileNotFoundError:
            return None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise self._fail(exc, f"cannot inspect {path!r}", "check permissions") from None
        return "dir" if stat.S_ISDIR(mode or 0) else "file"

    def mkdir_p(self, path: str) -> None:
        """Create ``path`` (absolute) and its parents."""
        current = "/"
        for part in [p for p in path.split("/") if p]:
            current = posixpath.join(current, part)
            found = self.kind(current)
            if found == "file":
                raise HostError(f"{self._conn.spec}: {current!r} exists and is not a folder; move it away")
            if found is None:
                try:
                    self.sftp.mkdir(current)
                except (OSError, paramiko.SSHException, EOFError) as exc:
                    raise self._fail(exc, f"cannot create {current!r}", "check permissions") from None

    def put_stream(self, stream: Any, name: str, remote: str, mode: int, sha256: str) -> None:
        """Copy a binary stream to ``remote`` atomically (temporary name, then renamed); ``name`` is for
        messages; ``sha256`` is unused here: the bundle's manifest check on the host covers SFTP uploads.

        Without :data:`POSIX_RENAME` on the server, an existing ``remote`` is replaced by ``mv -f`` on an exec
        channel; where that cannot run (an SFTP-only account), the old file is renamed aside, the new one
        renamed in and the old one removed (the old file is put back if the second rename fails), so
        ``remote`` is briefly absent but never truncated."""
        tmp = _temp_name(remote)
        renaming = False
        try:
            self.sftp.putfo(stream, tmp)
            self.sftp.chmod(tmp, mode)
            renaming = True
            self._rename_over(tmp, remote)
        except (OSError, paramiko.SSHException, EOFError, HostError) as exc:
            if self._conn.is_connected() and not isinstance(exc, socket.timeout):
                try:
                    self.sftp.remove(tmp)
                except (OSError, paramiko.SSHException, EOFError):
                    pass
            if isinstance(exc, HostError):
                raise
            remedy = "check that the folder exists and is writable"
            if renaming and self.posix_rename is False:
                remedy = (f"the SFTP server lacks the {POSIX_RENAME} extension and the fallback rename failed: "
                          "check that the folder is writable, or use an SFTP server with that extension "
                          "(OpenSSH's sftp-server)")
            raise self._fail(exc, f"cannot upload {name} to {remote!r}", remedy) from None

    def _rename_over(self, tmp: str, remote: str) -> None:
        """Rename ``tmp`` over ``remote``: :data:`POSIX_RENAME` where the server has it, else the fallback."""
        if self.posix_rename is not False:
            try:
                self.sftp.posix_rename(tmp, remote)
                self.posix_rename = True
                return
            except OSError as exc:
                if self.posix_rename or exc.errno is not None or not _UNSUPPORTED.search(str(exc)):
                    raise
            self.posix_rename = False
            log.info("%s: the SFTP server lacks the %s extension; uploads replace files with mv -f on an exec "
                     "channel, else with SFTP renames", self._conn.spec, POSIX_RENAME)
        found = self.kind(remote)
        if found is None:
            self.sftp.rename(tmp, remote)  # nothing to replace: SFTP's rename is atomic
            return
        if found == "dir":  # mv would move the file into it
            raise HostError(f"{self._conn.spec}: cannot upload to {remote!r}: it is a folder; move it away")
        if self._exec_mv(tmp, remote):
            return
        aside = _temp_name(remote, "old")
        self.sftp.rename(remote, aside)
        try:
            self.sftp.rename(tmp, remote)
        except (OSError, paramiko.SSHException, EOFError):
            try:
                self.sftp.rename(aside, remote)  # put the old file back
            except (OSError, paramiko.SSHException, EOFError):
                log.warning("%s: the old %s stays at %s", self._conn.spec, remote, aside)
            raise
        try:
            self.sftp.remove(aside)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            log.warning("%s: cannot remove the replaced file %s (%s)", self._conn.spec, aside, exc)

    def _exec_mv(self, tmp: str, remote: str) -> bool:
        """``mv -f tmp remote`` on an exec channel; True if ``tmp`` is gone after it (moved).

        Raises
        ------
        HostError
            ``mv`` ran and refused (its message); the connection died or the server stalled.
        """
        if self._channels is None:
            return False
        try:
            rc, output = self._channels.exec(["mv", "-f", "--", tmp, remote], timeout_s=self._conn.step_timeout_s)
        except HostError as exc:
            if not self._conn.is_connected() or "no answer" in str(exc):
                raise
            log.info("%s: no mv on an exec channel (%s)", self._conn.spec, exc)
            return False
        if self.kind(tmp) is None:
            return True
        refusal = [line for line in output.splitlines() if line.startswith("mv:")]
        if rc != 0 and refusal:  # mv ran and refused (other lines: the login shell's start-up files)
            raise HostError(f"{self._conn.spec}: cannot replace {remote!r} with mv -f, used as the SFTP server "
                            f"lacks the {POSIX_RENAME} extension ({said(chr(10).join(refusal), rc)}); check "
                            "permissions")
        return False  # a forced command ran instead (an SFTP-only account), or no mv: SFTP renames

    def remove(self, path: str) -> None:
        """Remove one file (absent is fine)."""
        try:
            self.sftp.remove(path)
        except FileNotFoundError:
            pass
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise self._fail(exc, f"cannot remove {path!r}", "check permissions") from None

    def get(self, remote: str, local: Path) -> None:
        """Copy ``remote`` into the local file ``local`` (overwritten)."""
        try:
            self.sftp.get(remote, str(local))
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise self._fail(exc, f"cannot fetch {remote!r}", "check that the file exists") from None


class ExecFiles:
    """Files through exec channels (``sh``, ``cat``, ``mkdir``, ``rm`` and a SHA-256 tool on the host)."""

    kind_name = "exec channel"

    def __init__(self, connection: SshConnection, channels: ExecChannels):
        self._conn = connection
        self._channels = channels

    def _run(self, argv: List[str], stdin: Any = None, idle: bool = False) -> Tuple[int, bytes, bytes]:
        return self._channels.run(argv, timeout_s=self._conn.step_timeout_s, stdin=stdin, idle=idle)

    def home(self) -> str:
        """The remote user's home folder (where sessions start: ``pwd``)."""
        rc, out, err = self._run(["pwd"])
        home = out.decode("utf-8", "replace").strip()
        if rc != 0 or not home.startswith("/"):
            raise HostError(f"{self._conn.spec}: cannot find the home folder ({said(err, rc)}); check the host")
        return home

    def mkdir_p(self, path: str) -> None:
        """Create ``path`` (absolute) and its parents (``mkdir -p``)."""
        rc, _, err = self._run(["mkdir", "-p", "--", path])
        if rc != 0:
            raise HostError(f"{self._conn.spec}: cannot create {path!r} ({said(err, rc)}); check permissions "
                            "and that no file is in the way")

    def put_stream(self, stream: Any, name: str, remote: str, mode: int, sha256: str) -> None:
        """Stream a binary stream into a temporary file next to ``remote``; rename it over ``remote`` only if
        its SHA-256 on the host equals ``sha256`` (the temporary is removed otherwise). ``name`` is for
        messages."""
        argv = ["sh", "-c", _PUT_SH, "sh", _temp_name(remote), remote, format(mode & 0o7777, "o"), sha256]
        rc, out, err = self._run(argv, stdin=stream, idle=True)
        text = out.decode("utf-8", "replace")
        if rc == 4 and "PARAPIPE-SHA256-MISMATCH" in text:
            found = text.split("PARAPIPE-SHA256-MISMATCH", 1)[1].split()[:1] or ["none"]
            raise HostError(f"{self._conn.spec}: {remote!r} arrived with SHA-256 {found[0][:16]}..., not "
                            f"{sha256[:16]}... (the copy of {name} was damaged on the way); upload again")
        if rc != 0:
            raise HostError(f"{self._conn.spec}: cannot upload {name} to {remote!r} ({said(err, rc)}); check "
                            "that the folder exists and is writable")

    def remove(self, path: str) -> None:
        """Remove one file (absent is fine)."""
        rc, _, err = self._run(["rm", "-f", "--", path])
        if rc != 0:
            raise HostError(f"{self._conn.spec}: cannot remove {path!r} ({said(err, rc)}); check permissions")

    def get(self, remote: str, local: Path) -> None:
        """Copy ``remote`` into the local file ``local`` (overwritten) with ``cat``."""
        rc, out, err = self._run(["cat", "--", remote], idle=True)
        if rc != 0:
            raise HostError(f"{self._conn.spec}: cannot fetch {remote!r} ({said(err, rc)}); check that the "
                            "file exists")
        Path(local).write_bytes(out)

