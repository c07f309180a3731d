"""The executor's one atomic write: JSON to a temporary file in the target's folder, then a rename, with the mode
a new file gets under the umask (as ``parapipe.files`` gives pareto.json; ``mkstemp`` alone leaves 0600).
Standard library only (Python >= 3.8)."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

__all__ = ["default_file_mode", "write_json_atomic"]


def default_file_mode() -> int:
    """Mode a newly created file gets under the current umask (``0666 & ~umask``, e.g. 0o644)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_json_atomic(doc: Any, path: str) -> None:
    """Write ``doc`` as JSON to ``path`` (folders created) through a temporary file and a rename.

    Raises
    ------
    OSError
        The folder cannot be written (the temporary file is removed).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
