"""The sweep configuration: which models on which SoC profiles, with which search options.

A configuration is a YAML file (``experiments/configs/*.yaml``)::

    name: quick                       # shown in the report
    models: [inception_v1, mobilenet_v2, yolo_detector]   # registry names or .onnx paths
    socs: [amlogic_a311d, black_sesame_a1000]             # bundled profile names or .yaml paths
    workers: 2                        # optional: local processes (default: os.cpu_count())
    figures: true                     # optional: per model x SoC figures (default true)
    search:                           # optional: parapipe.search.options.SearchOptions fields, plus max_blocks
      max_blocks: 48
      seed: 0
      time_limit_s: 20

Every name is checked before any job starts: an unknown model, SoC, key or a wrong type is one
:class:`parapipe.errors.InputError` naming the file and field.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from parapipe.errors import ParapipeError, input_error

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
FULL_CONFIG = CONFIG_DIR / "full.yaml"
QUICK_CONFIG = CONFIG_DIR / "quick.yaml"

_TOP_KEYS = ("name", "models", "socs", "workers", "figures", "search", "workloads")
#: Search keys that are not SearchOptions fields: handed to parapipe.app.prepare.prepare.
_PREPARE_KEYS = ("max_blocks",)


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep configuration.

    Attributes
    ----------
    name : str
        Label of the sweep (report title).
    models : list of str
        Registry names or .onnx paths, in report order.
    socs : list of str
        Bundled SoC profile names or profile .yaml paths, in report order.
    workers : int
        Local worker processes (ignored with a Dask scheduler).
    figures : bool
        Whether jobs render the per model x SoC figures.
    search : dict
        ``parapipe.search.options.SearchOptions`` keyword arguments.
    max_blocks : int or None
        Coarsening target handed to :func:`parapipe.app.prepare.prepare`.
    source : str
        The file the configuration came from.
    workloads : list of (list of str, list of float)
        Workloads of several models (``workloads: [{models: [a, b], rates: [1, 1]}]``, rates optional),
        searched on every SoC of ``socs`` (:func:`parapipe.search.workload.workload_search`).
    """

    name: str
    models: List[str]
    socs: List[str]
    workers: int
    figures: bool
    search: Dict[str, Any] = field(default_factory=dict)
    max_blocks: Optional[int] = 48
    source: str = "<config>"
    workloads: List[Tuple[List[str], List[float]]] = field(default_factory=list)


def _names(doc: Dict[str, Any], key: str, src: str) -> List[str]:
    value = doc.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise input_error(src, key, f"must be a non-empty list of names, got {value!r}",
                          f"e.g. {key}: [a, b]")
    dup = next((v for v in value if value.count(v) > 1), None)
    if dup is not None:
        raise input_error(src, key, f"{dup!r} is listed twice", "list each name once")
    return list(value)


def _search(doc: Dict[str, Any], src: str) -> tuple:
    from parapipe.search.options import SearchOptions

    raw = doc.get("search") or {}
    if not isinstance(raw, dict):
        raise input_error(src, "search", f"must be a mapping, got {type(raw).__name__}",
                          "e.g. search: {seed: 0}")
    allowed = [f.name for f in dataclasses.fields(SearchOptions)] + list(_PREPARE_KEYS)
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise input_error(src, f"search.{unknown[0]}", "unknown key", f"use only {', '.join(allowed)}")
    opts = {k: v for k, v in raw.items() if k not in _PREPARE_KEYS}
    if "objectives" in opts:
        if not isinstance(opts["objectives"], list):
            raise input_error(src, "search.objectives", "must be a list",
                              "e.g. [throughput, latency, energy]")
        opts["objectives"] = tuple(opts["objectives"])
    for k, v in opts.items():
        if k != "objectives" and v is not None and not isinstance(v, (int, float, bool)):
            raise input_error(src, f"search.{k}", f"must be a number, got {v!r}", "give a number")
    try:
        SearchOptions(**opts)
    except ParapipeError as exc:
        raise input_error(src, "search", str(exc), "fix the search options") from None
    max_blocks = raw.get("max_blocks", 48)
    if max_blocks is not None and (not isinstance(max_blocks, int) or isinstance(max_blocks, bool)
                                   or max_blocks < 1):
        raise input_error(src, "search.max_blocks", f"must be a positive integer or null, got {max_blocks!r}",
                          "e.g. 48")
    return opts, max_blocks


def check_names(models: List[str], socs: List[str], src: str) -> None:
    """Resolve every model and SoC name without loading weights.

    Raises
    ------
    InputError
        An unknown model or SoC (naming ``src`` and the entry), or ``host`` as a SoC (a sweep runs
        several jobs at once, which would disturb each other's measurements on this machine).
    """
    from parapipe.graph.zoo import resolve_model
    from parapipe.soc import list_socs, load_soc

    for i, m in enumerate(models):
        try:
            resolve_model(m)
        except ParapipeError as exc:
            raise input_error(src, f"models[{i}]", f"unknown model {m!r}",
                              "use a name listed by 'parapipe models' or the path of an .onnx file") from exc
    for i, s in enumerate(socs):
        if s == "host":
            raise input_error(src, f"socs[{i}]", "'host' cannot be swept (parallel jobs would disturb its "
                              "measurements)", "use 'parapipe optimize MODEL --soc host' for this machine")
        try:
            load_soc(s)
        except ParapipeError as exc:
            raise input_error(src, f"socs[{i}]", f"unknown or invalid SoC profile {s!r} ({exc})",
                              f"use one of {', '.join(list_socs())} or a profile .yaml path") from exc


def load_config(path: os.PathLike) -> SweepConfig:
    """Read and validate a sweep configuration.

    Parameters
    ----------
    path : path-like
        The YAML file.

    Returns
    -------
    SweepConfig

    Raises
    ------
    InputError
        Unreadable file, bad YAML, unknown key, wrong type, unknown model or SoC (one line naming the file and
        the field).
    """
    p = Path(path)
    src = str(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise input_error(src, None, f"cannot read the configuration ({exc.strerror or exc})",
                          "give an existing YAML file, e.g. experiments/configs/quick.yaml") from None
    except yaml.YAMLError as exc:
        raise input_error(src, None, f"is not valid YAML ({str(exc).splitlines()[0]})",
                          "fix the YAML syntax") from None
    if not isinstance(doc, dict):
        raise input_error(src, None, "must be a YAML mapping", "see experiments/README.md")
    unknown = sorted(set(doc) - set(_TOP_KEYS))
    if unknown:
        raise input_error(src, unknown[0], "unknown key", f"use only {', '.join(_TOP_KEYS)}")
    name = doc.get("name", p.stem)
    if not isinstance(name, str):
        raise input_error(src, "name", f"must be a string, got {name!r}", "e.g. name: quick")
    models, socs = _names(doc, "models", src), _names(doc, "socs", src)
    workers = doc.get("workers", os.cpu_count() or 1)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise input_error(src, "workers", f"must be a positive integer, got {workers!r}", "e.g. workers: 2")
    figures = doc.get("figures", True)
    if not isinstance(figures, bool):
        raise input_error(src, "figures", f"must be true or false, got {figures!r}", "e.g. figures: true")
    search, max_blocks = _search(doc, src)
    check_names(models, socs, src)
    workloads = _workloads(doc, src)
    for wl_models, _ in workloads:
        check_names(wl_models, socs, src)
    return SweepConfig(name=name, models=models, socs=socs, workers=workers, figures=figures, search=search,
                       max_blocks=max_blocks, source=src, workloads=workloads)


def _workloads(doc: Dict[str, Any], src: str) -> List[Tuple[List[str], List[float]]]:
    """The ``workloads`` key (see :class:`SweepConfig`), validated."""
    raw = doc.get("workloads") or []
    fix = "e.g. workloads: [{models: [inception_v1, squeezenet], rates: [1, 1]}]"
    if not isinstance(raw, list):
        raise input_error(src, "workloads", f"must be a list, got {type(raw).__name__}", fix)
    out = []
    for i, w in enumerate(raw):
        if not isinstance(w, dict) or set(w) - {"models", "rates"}:
            raise input_error(src, f"workloads[{i}]", "must be a mapping with models (and rates)", fix)
        models = _names(w, "models", f"{src}: workloads[{i}]")
        if len(models) < 2:
            raise input_error(src, f"workloads[{i}].models", "needs two or more models", fix)
        rates = w.get("rates", [1] * len(models))
        if (not isinstance(rates, list) or len(rates) != len(models)
                or not all(isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0 for r in rates)):
            raise input_error(src, f"workloads[{i}].rates", f"must be {len(models)} positive numbers, got {rates!r}",
                              fix)
        out.append((models, [float(r) for r in rates]))
    return out
