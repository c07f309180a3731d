"""``parapipe optimize A B ...``: a workload of several models on one SoC (search:
:mod:`parapipe.search.workload`, cost model: :mod:`parapipe.cost.workload`, document:
:mod:`parapipe.mapping.workload`).

:func:`read_app_file` reads a workload app file (YAML)::

    models:
      - model: inception_v1          # registry name or .onnx path (relative to the file)
        rate: 1                      # frames per workload frame (> 0; default 1)
        input_shapes: {data_0: [1, 3, 224, 224]}   # optional
        latency_bound_s: 0.1         # optional, s
      - model: squeezenet
        rate: 3
    latency_axis: max                # or weighted-mean (optional)

:func:`check_models` refuses a model that cannot join (an input shape it cannot take, an operator no PU of the
SoC declares) in one line naming the model, before anything is measured; :func:`prepare_workload` then prepares
every model (:func:`parapipe.app.prepare.prepare`, once per model) and :func:`optimize_workload` searches and
writes pareto.json (and pareto.png).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

from parapipe.app.prepare import Prepared, model_notes
from parapipe.errors import InfeasibleError, InputError, ParapipeError, input_error
from parapipe.mapping.workload import WorkloadDoc

log = logging.getLogger(__name__)

__all__ = ["WorkloadSpec", "read_app_file", "parse_rates", "check_models", "prepare_workload",
           "optimize_workload", "workload_result_doc", "latency_bound_error"]

#: What a user can do when ``optimize A B --soc host``'s measurements were disturbed (a workload times no stages).
WORKLOAD_REMEDY = "run it again at a quieter moment (stop other CPU-bound processes)"

_APP_FIX = "see the README's 'Workload app file' section for the file's fields"


@dataclass
class WorkloadSpec:
    """The models of a workload: names or paths, rates, input shapes (per model, or None), latency bounds (s, or
    None) and the latency axis."""

    models: List[str]
    rates: List[float]
    input_shapes: List[Optional[Dict[str, Tuple[int, ...]]]]
    latency_bounds_s: List[Optional[float]]
    latency_axis: str = "max"
    source: Optional[str] = None  # the app file the models came from (None: the command line)
    shapes_from_file: bool = False  # input_shapes came from the app file (not --input-shape)


def parse_rates(text: Optional[str], n: int) -> List[float]:
    """``--rates 3,1``: one rate (> 0) per model; None: every model at rate 1.

    Raises
    ------
    InputError
        Not ``n`` positive numbers.
    """
    if not text:
        return [1.0] * n
    try:
        rates = [float(x) for x in text.split(",")]
    except ValueError:
        raise input_error("--rates", None, f"not numbers: {text!r}", "give one number per model, e.g. 3,1") from None
    example = ",".join(["1"] * n)
    if len(rates) != n:
        raise input_error("--rates", text, f"{len(rates)} rate(s) for {n} model(s)",
                          f"give {n} positive numbers, one per model in order, e.g. {example}")
    bad = [i for i, r in enumerate(rates) if not (r > 0 and r < float("inf"))]
    if bad:
        raise input_error("--rates", text, f"rate {bad[0] + 1} ({text.split(',')[bad[0]].strip()}) is not a "
                          "positive number", f"give {n} positive numbers, one per model in order, e.g. {example}")
    return rates


def read_app_file(path: str) -> WorkloadSpec:
    """Read a workload app file (module docstring).

    Raises
    ------
    InputError
        Unreadable file, not YAML, a missing or wrong field: one line naming the file, the field and the fix.
    """
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise input_error(str(p), None, f"cannot read the workload file ({exc.strerror or exc})",
                          "give the path of a workload YAML file") from None
    except yaml.YAMLError as exc:
        raise input_error(str(p), None, f"not valid YAML ({str(exc).splitlines()[0]})", _APP_FIX) from None
    if not isinstance(data, dict):
        raise input_error(str(p), None, "not a mapping with a 'models' list", _APP_FIX)
    unknown = sorted(set(data) - {"models", "latency_axis"})
    if unknown:
        raise input_error(str(p), unknown[0], "unknown field", "use models and latency_axis")
    axis = data.get("latency_axis", "max")
    if axis not in ("max", "weighted-mean"):
        raise input_error(str(p), "latency_axis", f"unknown axis {axis!r}", "write max or weighted-mean")
    entries = data.get("models")
    if not isinstance(entries, list) or len(entries) < 1:
        raise input_error(str(p), "models", "missing or not a list", "list the models, e.g. models: [{model: squeezenet}]")
    spec = WorkloadSpec([], [], [], [], axis, source=str(p), shapes_from_file=True)
    for i, e in enumerate(entries):
        where = f"models[{i}]"
        if isinstance(e, str):
            e = {"model": e}
        if not isinstance(e, dict) or not isinstance(e.get("model"), str):
            raise input_error(str(p), f"{where}.model", "missing", "give a registry name or an .onnx path")
        bad = sorted(set(e) - {"model", "rate", "input_shapes", "latency_bound_s"})
        if bad:
            raise input_error(str(p), f"{where}.{bad[0]}", "unknown field",
                              "use model, rate, input_shapes and latency_bound_s")
        model = e["model"]
        if model.endswith(".onnx") and not Path(model).is_absolute():
            model = str((p.parent / model))
        rate = e.get("rate", 1)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
            raise input_error(str(p), f"{where}.rate", f"must be a number > 0, got {rate!r}",
                              "give frames of this model per workload frame, e.g. 1")
        bound = e.get("latency_bound_s")
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound > 0):
            raise input_error(str(p), f"{where}.latency_bound_s", f"must be seconds > 0, got {bound!r}",
                              "give seconds, e.g. 0.1")
        shapes = e.get("input_shapes")
        parsed: Optional[Dict[str, Tuple[int, ...]]] = None
        if shapes is not None:
            if not isinstance(shapes, dict) or not all(
                    isinstance(v, list) and v and all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                                      for d in v) for v in shapes.values()):
                raise input_error(str(p), f"{where}.input_shapes", "not a mapping of input name to positive dims",
                                  "write e.g. input_shapes: {images: [1, 3, 640, 640]} (README: Workload app file)")
            parsed = {str(k): tuple(v) for k, v in shapes.items()}
        spec.models.append(model)
        spec.rates.append(float(rate))
        spec.input_shapes.append(parsed)
        spec.latency_bounds_s.append(None if bound is None else float(bound))
    return spec


def check_models(spec: WorkloadSpec, soc: str, pus: Optional[Sequence[str]] = None) -> List[Any]:
    """Load every model, import it with its input shapes and check that the SoC's PUs declare its operators,
    before anything is measured. Returns the loaded models (:class:`parapipe.graph.zoo.LoadedModel`).

    Raises
    ------
    InputError
        ``model NAME: cannot join the workload: <why>`` (one line) for the first model that cannot join; two
        models with one name.
    """
    from parapipe.app.resolve import resolve_soc
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.support import check_declared
    from parapipe.graph.zoo import load_model
    from parapipe.soc.identity import HOST_SOC, is_host

    soc_obj = None if is_host(soc) else resolve_soc(soc)
    if soc_obj is not None and pus:
        soc_obj = soc_obj.restrict(list(pus))
    loaded = []
    names: List[str] = []
    for i, (model, shapes) in enumerate(zip(spec.models, spec.input_shapes)):
        try:
            lm = load_model(model)
            # errors name the model as the user gave it (a registry name, not the zoo's cached file)
            source = model
            og = import_onnx(lm.model, name=lm.name, source=source, input_shapes=shapes)
            if soc_obj is None:
                check_declared(og.structure, source, HOST_SOC, [])
            else:
                check_declared(og.structure, source, soc_obj.name, [p.supported_ops for p in soc_obj.pus.values()])
        except ParapipeError as exc:
            text = str(exc)
            if spec.source and spec.shapes_from_file and text.startswith("--input-shape: "):
                text = f"{spec.source}: models[{i}].input_shapes: " + text[len("--input-shape: "):]
                raise InputError(text) from None
            raise InputError(f"model {model}: cannot join the workload: {text}") from None
        if lm.name in names:
            raise input_error(f"model {model}", None, "is listed twice",
                              "list each model once and give its frames per workload frame with --rates")
        names.append(lm.name)
        loaded.append(lm)
    return loaded


def prepare_workload(spec: WorkloadSpec, soc: str, pus: Optional[Sequence[str]] = None,
                     max_blocks: Optional[int] = 48, db: Optional[str] = None, progress=None) -> List[Prepared]:
    """:func:`check_models`, then :func:`parapipe.app.prepare.prepare` of each model (once each). On ``--soc
    host`` the machine (its cores' transfer and power figures, facts of the machine) is measured once, with the
    first model, and every model's own blocks (times, and the whole model as one sub-model) are measured on it:
    each model keeps its own measured problem, and the problems share one SoC (board power, transfers and memory
    limits are taken from the first problem for every model, as one board).

    Raises
    ------
    InputError, InfeasibleError
        As :func:`check_models` and ``prepare``.
    """
    from dataclasses import replace

    from parapipe.app.prepare import prepare

    from parapipe.soc.identity import is_host

    loaded = check_models(spec, soc, pus)
    preps: List[Prepared] = []
    for model, shapes, lm in zip(spec.models, spec.input_shapes, loaded):
        # on host the machine is measured once (with the first model), then each model's blocks on it
        machine = preps[0].soc if preps and is_host(soc) else None
        try:
            preps.append(prepare(model, soc, pus=pus, max_blocks=max_blocks, db=db, input_shapes=shapes, loaded=lm,
                                 progress=progress, host_soc=machine))
        except ParapipeError as exc:  # name the model as the user gave it, not the zoo's cached file
            text = str(exc)
            if lm.path is not None and str(lm.path) != model:
                text = text.replace(str(lm.path), model)
            if model not in text and lm.name not in text:
                text = f"model {model}: {text}"
            if isinstance(exc, InputError):
                raise InputError(text) from None
            if isinstance(exc, InfeasibleError):
                raise InfeasibleError(text) from None
            raise
    first = preps[0]
    out = [first]
    for prep in preps[1:]:
        if list(prep.problem.pu_names) != list(first.problem.pu_names):
            raise input_error("--soc", soc, "the models' measured PUs differ "
                              f"({', '.join(prep.problem.pu_names)} vs {', '.join(first.problem.pu_names)})",
                              "measure again on a quiet machine, or give a profile")
        pr = replace(prep.problem, idle_power_w=first.problem.idle_power_w,
                     static_power_w=first.problem.static_power_w, alpha_s=first.problem.alpha_s,
                     beta_bytes_per_s=first.problem.beta_bytes_per_s, memory_bytes=first.problem.memory_bytes)
        out.append(replace(prep, problem=pr, soc=first.soc, terms=first.terms))
    return out


def workload_result_doc(preps: Sequence[Prepared], spec: WorkloadSpec, result, seed: int) -> WorkloadDoc:
    """The workload document of ``result`` (:func:`parapipe.mapping.io.workload_doc_from_result`)."""
    from parapipe.app.resolve import soc_ref
    from parapipe.mapping.io import workload_doc_from_result

    models = []
    for prep, bound in zip(preps, spec.latency_bounds_s):
        notes = model_notes(prep.opgraph)
        models.append({"name": prep.loaded.name, "sha256": prep.loaded.sha256,
                       "input_shapes": notes["input_shapes"], "cost_notes": notes["cost_notes"],
                       "blocks": {b.name: list(b.ops) for b in prep.block_graph.blocks},
                       "latency_bound_s": bound, "search": {"max_blocks": prep.max_blocks, **prep.timings_s}})
    return workload_doc_from_result(result, models, soc_ref(preps[0].soc), search={"seed": seed})


def latency_bound_error(spec: WorkloadSpec, exc: Any, name: str, max_stages: Optional[int] = None) -> InputError:
    """The one-line error for a latency bound no mapping meets (``exc``: a
    :class:`parapipe.search.workload.LatencyBoundError`): the app file and field, the bound, the least latency the
    model reaches and the fix."""
    i = exc.model_index
    best = exc.best_latency_s
    within = f" within --max-stages {max_stages}" if max_stages is not None else ""
    return input_error(spec.source or "--workload", f"models[{i}].latency_bound_s",
                       f"no mapping of {name}{within} meets {exc.bound_s:g} s ({exc.bound_s * 1e3:.4g} ms); the "
                       f"least latency it reaches on these PUs is {best * 1e3:.4g} ms",
                       f"raise the bound to at least {best * 1.001:.3g} s, or remove it"
                       + (", or allow more stages" if within else ""))


def optimize_workload(preps: Sequence[Prepared], spec: WorkloadSpec, options, out_dir: Path,
                      plot: bool = True) -> Tuple[WorkloadDoc, Any]:
    """Search the workload (:func:`parapipe.search.workload.workload_search`) and write ``out_dir/pareto.json``
    (and ``pareto.png``). Returns the document and the :class:`parapipe.search.workload.WorkloadResult`.

    Raises
    ------
    InputError
        ``out_dir`` not writable. InfeasibleError: a model without a mapping (within its latency bound).
    """
    from parapipe.app.optimize import check_out_dir
    from parapipe.files import atomic_path
    from parapipe.mapping import write_pareto
    from parapipe.search.workload import LatencyBoundError, workload_search

    out_dir = Path(out_dir)
    check_out_dir(out_dir)
    try:
        result = workload_search([p.problem for p in preps], spec.rates, options, terms=preps[0].terms,
                                 latency_axis=spec.latency_axis, latency_bounds_s=spec.latency_bounds_s)
    except LatencyBoundError as exc:
        raise latency_bound_error(spec, exc, preps[exc.model_index].loaded.name, options.max_stages) from None
    doc = workload_result_doc(preps, spec, result, options.seed)
    logs = [p.measure_log for p in preps if p.measure_log is not None]
    if logs:  # --soc host: how far the measurements of every model can be trusted, as for one model
        from parapipe.measure.trust import MeasureLog, front_gap, warning

        merged = MeasureLog([s for lg in logs for s in lg.spreads], [ld for lg in logs for ld in lg.loads])
        summary = merged.summary()
        gap = front_gap([p.evaluation.throughput_per_s for p in result.front()])
        doc.search["measurement"] = {**summary, "gap": gap, "warning": warning(summary, gap, WORKLOAD_REMEDY)}
    png = out_dir / "pareto.png"
    if plot:
        from parapipe.report.plots import power_note
        from parapipe.report.workload import plot_workload

        with atomic_path(png, suffix=".png") as tmp:
            plot_workload(doc, tmp, note=power_note(cast(Any, doc), preps[0].soc))
            write_pareto(doc, out_dir / "pareto.json")
    else:
        write_pareto(doc, out_dir / "pareto.json")
        if png.exists():
            png.unlink()
    return doc, result
