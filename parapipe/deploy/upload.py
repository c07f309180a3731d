"""Bundle files on an SSH host: what is there (SHA-256 per file), resumable upload, stray removal, fetch.

Used by :mod:`parapipe.app.deploy`. Every remote command is shell-quoted by
:meth:`~parapipe.remote.host.RemoteHost.exec`; uploads are atomic (temp file + rename), over SFTP or, on
servers without it, through exec channels with a SHA-256 check on the host before the rename, so an
interrupted upload leaves at most a temporary file, which :func:`remove_strays` deletes on the next attempt.
"""
from __future__ import annotations

import json
import logging
import posixpath
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from parapipe.deploy.bundle import MANIFEST, Bundle
from parapipe.remote.host import RemoteHost
from parapipe.remote.ssh_channels import said
from parapipe.errors import HostError
from ppexec import bundle_run

log = logging.getLogger(__name__)

__all__ = ["remote_abs", "remote_files", "upload_bundle", "remove_strays", "fetch"]

#: Files of a bundle folder that are not in the manifest and stay: the lock, the keep mark, the run's output.
_NOT_BUNDLE_FILES = (bundle_run.LOCK, bundle_run.KEEP)
_OUT_PREFIX = bundle_run.OUT_DIR + "/"

Progress = Optional[Callable[[Dict[str, Any]], None]]

#: Python run on the host: every file under a folder (relative path -> SHA-256), the lock, keep mark and
#: output excluded; ``{}`` when the folder does not exist. Argument: the folder.
_REMOTE_HASHES = r"""
import hashlib, json, os, sys
root, skip, out = sys.argv[1], set(sys.argv[2].split(',')), sys.argv[3]
found = {}
for folder, dirs, files in os.walk(root):
    for name in files:
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, root).replace(os.sep, '/')
        if rel in skip or rel.startswith(out) or os.path.islink(path):
            continue
        digest = hashlib.sha256()
        with open(path, 'rb') as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b''):
                digest.update(chunk)
        found[rel] = digest.hexdigest()
print('PARAPIPE-HASHES ' + json.dumps(found))
"""


def remote_abs(host: RemoteHost, path: str) -> str:
    """``path`` on the host made absolute: ``~`` and relative paths are taken from the remote home."""
    path = path.strip()
    if path == "~" or path.startswith("~/"):
        path = path[2:]
    return posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(host.home(), path))


def remote_files(host: RemoteHost, folder: str, python: str = "python3",
                 timeout_s: float = 120.0) -> Dict[str, str]:
    """Every file of a bundle folder on the host with its SHA-256 (one remote command); ``{}`` if absent.

    The lock, the keep mark and the ``out/`` folder are left out.

    Raises
    ------
    HostError
        The listing fails or the connection is lost.
    """
    rc, output = host.exec([python, "-c", _REMOTE_HASHES, folder, ",".join(_NOT_BUNDLE_FILES), _OUT_PREFIX],
                           timeout_s=timeout_s)
    for line in reversed(output.splitlines()):
        if rc == 0 and line.startswith("PARAPIPE-HASHES "):
            return json.loads(line[len("PARAPIPE-HASHES "):])
    raise HostError(f"{host.spec}: cannot list {folder!r} ({said(output, rc)}); check "
                    "permissions on the host")


def upload_bundle(host: RemoteHost, bundle: Bundle, folder: str, present: Dict[str, str],
                  only: Optional[Tuple[str, ...]] = None,
                  on_event: Progress = None) -> Tuple[List[str], List[str]]:
    """Upload the bundle's files that the host lacks or holds with another SHA-256.

    Parameters
    ----------
    host : RemoteHost
    bundle : Bundle
    folder : str
        Absolute bundle folder on the host.
    present : dict of str to str
        Files already there (from :func:`remote_files`); updated with what is uploaded.
    only : tuple of str, optional
        Upload only files whose path starts with one of these prefixes (``manifest.json`` is never uploaded
        then); default: every file, ``manifest.json`` last.
    on_event : callable(dict), optional
        Receives ``{"event": "upload", "file", "nbytes", "done", "total"}`` before each file is sent.

    Returns
    -------
    (uploaded, skipped) : lists of str

    Raises
    ------
    HostError
        A file cannot be written, or the connection is lost.
    """
    files = bundle.manifest["files"]
    wanted = [rel for rel in sorted(files) if only is None or rel.startswith(only)]
    if only is None:
        wanted.append(MANIFEST)
    uploaded, skipped = [], []
    digests = dict((rel, files[rel]["sha256"]) for rel in files)
    digests[MANIFEST] = bundle_run.sha256_file(str(bundle.folder / MANIFEST))
    folders = set()
    for i, rel in enumerate(wanted):
        if present.get(rel) == digests[rel]:
            skipped.append(rel)
            continue
        remote = posixpath.join(folder, rel)
        parent = posixpath.dirname(remote)
        if parent not in folders:
            host.mkdir_p(parent)
            folders.add(parent)
        if on_event is not None:
            on_event({"event": "upload", "file": rel, "nbytes": (bundle.folder / rel).stat().st_size,
                      "done": i, "total": len(wanted)})
        host.upload(bundle.folder / rel, remote, sha256=digests[rel])
        present[rel] = digests[rel]
        uploaded.append(rel)
    return uploaded, skipped


def remove_strays(host: RemoteHost, bundle: Bundle, folder: str, present: Dict[str, str]) -> None:
    """Remove the files of the remote folder that the bundle does not have (an interrupted upload's part
    files); ``present`` (from :func:`remote_files`) is updated."""
    known = set(bundle.manifest["files"]) | {MANIFEST}
    for rel in sorted(set(present) - known):
        host.remove(posixpath.join(folder, rel))
        present.pop(rel)
        log.info("removed %s, which the bundle does not have", rel)


def fetch(host: RemoteHost, remote: str, local: Path) -> None:
    """Copy a remote file to ``local`` over SFTP or an exec channel (temp file in the same folder, then renamed;
    the usual file mode, as pareto.json gets: :func:`parapipe.files.atomic_path`)."""
    from parapipe.files import atomic_path

    with atomic_path(Path(local)) as tmp:
        host.download(remote, Path(tmp))
