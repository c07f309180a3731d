"""The bundled SoC profiles by name, and their PU names read without validating the files.

Loading a profile (:func:`parapipe.soc.loader.load_soc`) validates every field with pydantic; listing the
bundled profiles and their PUs (``parapipe socs``) needs only the file names and the keys of each file's
``pus:`` mapping, so this module imports neither pydantic nor numpy. For a file whose ``pus:`` is anything but a
mapping of plain names, :func:`pu_names` answers None: load it with :func:`~parapipe.soc.loader.load_soc`, which
names the problem.
"""
from __future__ import annotations

import re
from typing import Optional

from parapipe._paths import data_dir

__all__ = ["list_socs", "pu_names"]

#: A key that every YAML reader loads as the same string: a letter, then letters, digits or ``_``, and not one of
#: the words YAML 1.1 reads as a boolean (https://yaml.org/type/bool.html). Anything else goes to load_soc.
_PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_YAML11_BOOLEAN_WORDS = frozenset({"y", "yes", "true", "on", "n", "no", "false", "off"})


def list_socs() -> list[str]:
    """Names of the bundled profiles: the ``*.yaml`` file stems in soc_profiles/, sorted."""
    return sorted(p.stem for p in data_dir("soc_profiles").glob("*.yaml"))


def pu_names(name: str) -> Optional[list[str]]:
    """The PU names of the bundled profile ``name`` (one of :func:`list_socs`), in file order, or None.

    Reads the file with PyYAML's base loader (libyaml's when installed; every scalar a string) and takes the
    keys of ``pus:``. None where the file cannot be read or parsed, or ``pus:`` is not a mapping of plain
    names: then ``load_soc(name).pu_names`` gives the answer or the error.
    """
    import yaml

    path = data_dir("soc_profiles") / f"{name}.yaml"
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        raw = None
    pus = raw.get("pus") if isinstance(raw, dict) else None
    if isinstance(pus, dict) and pus and all(isinstance(k, str) and _PLAIN_NAME.fullmatch(k)
                                            and k.lower() not in _YAML11_BOOLEAN_WORDS for k in pus):
        return list(pus)
    return None
