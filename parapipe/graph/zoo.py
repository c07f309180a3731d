"""The model registry (``models/registry.yaml``) and loading models by registry name or by path.

Registry kinds (fields in ``models/README.md``):

* ``onnx-light`` -- a file of the onnx wheel's ``onnx/backend/test/data/light`` folder, resolved at run time
  from the installed onnx package;
* ``file`` -- an .onnx file, path relative to the ``models/`` folder (or absolute);
* ``generator`` -- ``generator: "module:function"``; calling ``function()`` returns an ``onnx.ModelProto``.
  ``module`` is imported normally, else loaded from ``models/<module>.py``.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import yaml

from parapipe._paths import data_dir
from parapipe.errors import input_error

if TYPE_CHECKING:
    import onnx

__all__ = ["KINDS", "ModelRef", "LoadedModel", "ZooEntry", "light_models_dir", "registry_path",
           "zoo_entries", "list_models", "zoo_entry", "resolve_model", "load_model"]

logger = logging.getLogger(__name__)

KINDS = ("onnx-light", "file", "generator")


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: registry or file-stem ``name``, file ``path`` (None for generated models) and a
    human-readable ``source`` (citation for registry models, the path for files)."""

    name: str
    path: Optional[Path]
    source: str


@dataclass
class LoadedModel:
    """A model loaded into memory; ``sha256`` is the hex digest of the file bytes (of the serialised
    ModelProto for generated models), for caching and provenance."""

    name: str
    path: Optional[Path]
    model: onnx.ModelProto
    sha256: str


@dataclass(frozen=True)
class ZooEntry:
    """One entry of ``models/registry.yaml`` (validated). ``input_shape`` is in elements, ``dtype`` a numpy
    dtype name; both are None when the entry does not declare them."""

    name: str
    kind: str
    source: str
    file: Optional[str] = None
    generator: Optional[str] = None
    input_name: Optional[str] = None
    input_shape: Optional[tuple[int, ...]] = None
    dtype: Optional[str] = None


def light_models_dir() -> Path:
    """Folder of the light model-zoo models shipped in the installed onnx wheel (found without importing onnx).

    Raises
    ------
    ModuleNotFoundError
        onnx is not installed.
    """
    spec = importlib.util.find_spec("onnx")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("No module named 'onnx'", name="onnx")
    return Path(os.path.dirname(spec.origin)) / "backend" / "test" / "data" / "light"


def registry_path() -> Path:
    """Path of the registry file, ``models/registry.yaml``."""
    return data_dir("models") / "registry.yaml"


def _entry(raw: object, i: int, src: str) -> ZooEntry:
    where = f"models[{i}]"
    if not isinstance(raw, dict):
        raise input_error(src, where, f"must be a mapping, got {type(raw).__name__}", "see models/README.md")
    allowed = {"name", "kind", "source", "file", "generator", "input_name", "input_shape", "dtype"}
    extra = sorted(set(raw) - allowed)
    if extra:
        raise input_error(src, f"{where}.{extra[0]}", "unknown field",
                          f"use only {', '.join(sorted(allowed))}")
    for key in ("name", "kind", "source"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise input_error(src, f"{where}.{key}", "missing or not a non-empty string", "fill it in")
    kind = raw["kind"]
    if kind not in KINDS:
        raise input_error(src, f"{where}.kind", f"unknown kind {kind!r}", f"use one of {', '.join(KINDS)}")
    needed = "generator" if kind == "generator" else "file"
    if not isinstance(raw.get(needed), str) or not raw[needed]:
        raise input_error(src, f"{where}.{needed}", f"required for kind {kind!r}", "fill it in")
    if kind == "generator" and ":" not in raw["generator"]:
        raise input_error(src, f"{where}.generator", f"{raw['generator']!r} is not 'module:function'",
                          "write it as module:function")
    shape = raw.get("input_shape")
    bad_shape = not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape)
    if shape is not None and bad_shape:
        raise input_error(src, f"{where}.input_shape", f"must be a list of positive ints, got {shape!r}",
                          "e.g. [1, 3, 224, 224]")
    return ZooEntry(name=raw["name"], kind=kind, source=raw["source"], file=raw.get("file"),
                    generator=raw.get("generator"), input_name=raw.get("input_name"),
                    input_shape=tuple(shape) if shape is not None else None, dtype=raw.get("dtype"))


_cache: dict[tuple[str, float], list[ZooEntry]] = {}


def zoo_entries(path: Optional[Path] = None) -> list[ZooEntry]:
    """The validated entries of the registry (default :func:`registry_path`), in file order.

    Raises
    ------
    InputError
        The registry is missing, not YAML, or an entry is malformed (message names the entry and field).
    """
    path = Path(path) if path is not None else registry_path()
    src = str(path)
    try:
        key = (src, path.stat().st_mtime)
    except OSError as exc:
        raise input_error(src, None, f"cannot be read ({exc.strerror})", "reinstall parapipe") from exc
    if key in _cache:
        return list(_cache[key])
    try:
        # libyaml's safe parser where PyYAML has it (the pure-Python one takes ~10x longer on the registry)
        doc = yaml.load(path.read_text(encoding="utf-8"),  # noqa: S506 - a safe loader
                        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise input_error(src, None, f"is not a readable YAML file ({str(exc).splitlines()[0]})",
                          "fix the YAML syntax") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), list):
        raise input_error(src, "models", "missing or not a list", "see models/README.md")
    entries = [_entry(raw, i, src) for i, raw in enumerate(doc["models"])]
    names = [e.name for e in entries]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise input_error(src, f"models[{names.index(dup)}].name", f"duplicate name {dup!r}", "rename one")
    _cache[key] = entries
    return list(entries)


def _entry_path(entry: ZooEntry) -> Optional[Path]:
    if entry.kind == "onnx-light":
        return light_models_dir() / str(entry.file)
    if entry.kind == "file":
        p = Path(str(entry.file))
        return p if p.is_absolute() else data_dir("models") / p
    return None


def _ref(entry: ZooEntry) -> ModelRef:
    return ModelRef(name=entry.name, path=_entry_path(entry), source=entry.source)


def list_models() -> list[ModelRef]:
    """All registry models, in registry order.

    Returns
    -------
    list of ModelRef
        ``path`` is the file (``onnx-light``: inside the installed onnx package) or None for generators.

    Raises
    ------
    InputError
        The registry file is malformed (see :func:`zoo_entries`).
    """
    return [_ref(e) for e in zoo_entries()]


def zoo_entry(name: str) -> ZooEntry:
    """The registry entry called ``name``.

    Raises
    ------
    InputError
        No entry has that name (the message lists the known names).
    """
    for e in zoo_entries():
        if e.name == name:
            return e
    raise _unknown(name)


def _unknown(spec: str):
    known = ", ".join(e.name for e in zoo_entries())
    return input_error(None, None, f"{spec!r} is neither a registry model nor an existing .onnx file "
                       f"(known models: {known})", "run 'parapipe models' to list them, or give a path")


def resolve_model(spec: str) -> ModelRef:
    """Resolve a registry name or a path to an .onnx file (registry names win over same-named files).

    Parameters
    ----------
    spec : str
        Registry name (``"resnet50"``) or file path (``~`` expanded).

    Returns
    -------
    ModelRef
        For a path: ``name`` is the file stem, ``path`` the resolved absolute path, ``source`` the path
        as given.

    Raises
    ------
    InputError
        ``spec`` is not a registry name and not an existing file: the message names ``spec`` and lists the
        known names.
    """
    for e in zoo_entries():
        if e.name == spec:
            return _ref(e)
    p = Path(spec).expanduser()
    if p.is_file():
        return ModelRef(name=p.stem, path=p.resolve(), source=str(p))
    if p.is_dir():
        raise input_error(str(p), None, "is a directory, not an .onnx file",
                          "give the path of the .onnx file")
    if spec.endswith(".onnx") or os.sep in spec:
        known = ", ".join(e.name for e in zoo_entries())
        raise input_error(spec, None, "file not found",
                          f"check the path, or give a registry name ({known}; run 'parapipe models')")
    raise _unknown(spec)


_MODELS_PACKAGE = "parapipe_models"


def _models_package() -> str:
    """Register the models/ folder as the package ``parapipe_models`` (once) and return its name.

    Generator modules found there are imported as its submodules, so they share helpers with relative imports
    (``from . import _onnx_builder``) whether parapipe runs from a checkout or an installed copy.
    """
    if _MODELS_PACKAGE not in sys.modules:
        import types

        pkg = types.ModuleType(_MODELS_PACKAGE)
        pkg.__path__ = [str(data_dir("models"))]
        pkg.__package__ = _MODELS_PACKAGE
        sys.modules[_MODELS_PACKAGE] = pkg
    return _MODELS_PACKAGE


def _generator(entry: ZooEntry) -> Callable[[], onnx.ModelProto]:
    module_name, _, func_name = str(entry.generator).partition(":")
    src, field = str(registry_path()), f"{entry.name}.generator"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        candidate = data_dir("models") / (module_name.replace(".", "/") + ".py")
        target_missing = exc.name in (module_name, module_name.split(".")[0])
        if not (target_missing and candidate.is_file()):
            raise input_error(src, field, f"cannot import {module_name!r} ({exc})",
                              "install the module or put it in models/") from exc
        module = importlib.import_module(f"{_models_package()}.{module_name}")
    func = getattr(module, func_name, None)
    if not callable(func):
        raise input_error(src, field, f"{module_name!r} has no function {func_name!r}", "fix the name")
    return func


def _load_file(path: Path) -> tuple[onnx.ModelProto, str]:
    import onnx
    from google.protobuf.message import DecodeError

    src = str(path)
    if not path.exists():
        raise input_error(src, None, "file not found", "check the path (or run 'parapipe models' for names)")
    if path.is_dir():
        raise input_error(src, None, "is a directory, not an .onnx file", "give the path of the .onnx file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise input_error(src, None, f"cannot be read ({exc.strerror})", "check its permissions") from exc
    bad = input_error(src, None, "is not a valid ONNX model (truncated or wrong format)", "re-export it")
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise bad from exc
    if model.ir_version <= 0 or not model.HasField("graph") or len(model.graph.node) == 0:
        raise bad
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
        except (OSError, onnx.checker.ValidationError) as exc:
            raise input_error(src, "external data", f"cannot be loaded ({exc})",
                              "keep the .data file(s) next to the .onnx file, as exported") from exc
    try:
        onnx.checker.check_model(str(path))
    except (onnx.checker.ValidationError, DecodeError) as exc:
        if not (_MISSING_TYPE in str(exc) and _fill_output_types(model, src)):
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise input_error(src, None, f"is not a valid ONNX model ({first})", "re-export it") from exc
    return model, hashlib.sha256(data).hexdigest()


#: What onnx.checker says about a value_info (a graph output) without type or shape; ONNX Runtime runs such
#: models, inferring what is missing.
_MISSING_TYPE = "is required but missing"


def _fill_output_types(model: onnx.ModelProto, src: str) -> bool:
    """Give graph outputs without a type or shape the ones ONNX shape inference finds, drop ``value_info``
    entries without a type (hints only), then check the model again. True if it passes now."""
    import onnx

    from parapipe.graph.shapes import skeleton

    g = model.graph
    untyped = [vi for vi in g.output
               if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape")]
    for i in range(len(g.value_info) - 1, -1, -1):
        if not g.value_info[i].HasField("type"):
            del g.value_info[i]
    if untyped:
        try:
            inferred = onnx.shape_inference.infer_shapes(skeleton(model), strict_mode=False)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
            return False
        known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
        for vi in untyped:
            found = known.get(vi.name)
            if found is None or not found.type.tensor_type.HasField("shape"):
                return False
            vi.type.CopyFrom(found.type)
    try:
        onnx.checker.check_model(skeleton(model))
    except onnx.checker.ValidationError:
        return False
    logger.info("%s: %d graph output(s) had no type or shape; inferred them", src, len(untyped))
    return True


def load_model(spec: str) -> LoadedModel:
    """Load a registry model or an .onnx file (external data is read from the file's folder).

    Parameters
    ----------
    spec : str
        Registry name (see :func:`list_models`) or path.

    Returns
    -------
    LoadedModel

    Raises
    ------
    InputError
        Unknown name; missing, unreadable, truncated or non-ONNX file; missing external data; a generator
        that cannot be imported or does not return a ModelProto. The message names the file.
    """
    ref = resolve_model(spec)
    if ref.path is not None:
        model, digest = _load_file(ref.path)
        return LoadedModel(name=ref.name, path=ref.path, model=model, sha256=digest)
    import onnx

    entry = zoo_entry(ref.name)
    model = _generator(entry)()
    if not isinstance(model, onnx.ModelProto):
        raise input_error(str(registry_path()), f"{entry.name}.generator",
                          f"returned {type(model).__name__}, not an onnx.ModelProto", "fix the generator")
    digest = hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()
    return LoadedModel(name=ref.name, path=None, model=model, sha256=digest)
