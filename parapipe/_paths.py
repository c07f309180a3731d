"""Locate the data folders that ship with parapipe (soc_profiles/, models/, device_agents/).

In a source checkout (tests, editable installs) they are the top-level folders of the repository; in a regular
``pip install .`` they are installed as the package ``parapipe._data`` (see pyproject.toml's package-dir).
"""
from __future__ import annotations

from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """Return the folder ``name`` (``"soc_profiles"``, ``"models"`` or ``"device_agents"``).

    Raises
    ------
    FileNotFoundError
        If neither the checkout folder nor the installed copy exists (a broken install: reinstall parapipe).
    """
    candidate = _REPO_ROOT / name
    if candidate.is_dir():
        return candidate
    installed = Path(__file__).resolve().parent / "_data" / name
    if installed.is_dir():
        return installed
    raise FileNotFoundError(f"parapipe data folder {name!r} not found next to {Path(__file__).parent}; "
                            "reinstall parapipe with 'pip install .'")
