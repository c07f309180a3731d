"""Atomic file writes: a temporary file in the target's folder, then a rename, with the usual permissions."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def default_file_mode() -> int:
    """Mode a newly created file gets under the current umask (0666 & ~umask), e.g. 0o644.

    ``ppexec.files.default_file_mode`` is the board-side twin: ppexec cannot import parapipe, and importing
    ppexec here would load onnxruntime into every command that writes a file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it gets the usual mode and replaces ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was. ``suffix`` keeps a file
    extension for writers that choose the format from it (matplotlib: ``".png"``).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=str(path.parent))
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(doc: Any, path: Path) -> None:
    """Write ``doc`` as JSON (indent 1) to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
