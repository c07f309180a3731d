"""The library behind ``parapipe profile``, ``calibrate``, ``import`` and ``soc detect``: one function per
command.

Each job validates its inputs before it touches the database, so a bad model, SoC, PU, host, key or CSV leaves
the database file as it was: an existing file is only checked (never written) until the host has answered and
every PU passed its checks, and a missing one is created only then. The CLI (:mod:`parapipe.cli`) formats what
the jobs return; ``calibrate --runs`` is :func:`calibrate_runs_job` (the fit is
:func:`parapipe.calibration.runs_calibrate.runs_calibration`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Mapping, Optional, Sequence, Tuple, Union

import onnx

from parapipe.app.resolve import resolve_soc
from parapipe.remote.hostspec import HostSpec
from parapipe.errors import input_error
from parapipe.graph.coarsen import BlockGraph
from parapipe.graph.opgraph import OpGraph
from parapipe.graph.zoo import LoadedModel
from parapipe.calibration.accuracy import AccuracyReport
from parapipe.calibration.calibrated import Calibration
from parapipe.calibration.frequency_fit import FrequencyFit
from parapipe.profiledb.catalog import Catalog
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.importer import ImportedGraph
from parapipe.measure.profile import ProfileOptions, ProfileReport
from parapipe.measure.trust import MeasureLog
from parapipe.soc.identity import HOST_SOC
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["load_graph", "with_batch", "profile_job", "calibrate_job", "CalibrateResult", "calibrate_runs_job",
           "import_job", "detect_job"]

Progress = Optional[Callable[[int, int], None]]
PathArg = Union[str, Path]


def with_batch(model: onnx.ModelProto, batch: int, source: str) -> onnx.ModelProto:
    """A copy of ``model`` whose data inputs (graph inputs that are neither initializers nor produced by a
    node) and outputs have ``batch`` as first dimension.

    Raises
    ------
    InputError
        ``batch`` < 1, or the model has no data input with a first dimension.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise input_error("--batch", None, f"must be an integer >= 1, got {batch!r}", "give e.g. --batch 4")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    constants = {t.name for t in g.initializer}
    produced = {o for n in g.node for o in n.output}
    data = [vi for vi in g.input if vi.name not in constants and vi.name not in produced]
    changed = 0
    for vi in data + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) >= 1:
            dims[0].Clear()
            dims[0].dim_value = batch
            changed += 1
    if not data or not changed:
        raise input_error(source, "graph.input", "has no data input with a batch dimension",
                          "profile it without --batch")
    del g.value_info[:]
    return out


def load_graph(model: str, batch: Optional[int] = None, max_blocks: Optional[int] = 48,
               input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> Tuple[LoadedModel, OpGraph, BlockGraph]:
    """Load ``model`` (registry name or .onnx path), optionally at another batch size or with the
    ``--input-shape`` values ``input_shapes``; return ``(LoadedModel, OpGraph, BlockGraph)`` coarsened as
    ``parapipe optimize`` does by default (48 blocks).

    Raises
    ------
    InputError
        Unknown or broken model; a batch size the model's fixed shapes do not allow (e.g. a Reshape to
        ``[1, -1]``).
    """
    from parapipe.graph.coarsen import coarsen
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.zoo import load_model

    lm = load_model(model)
    source = str(lm.path or model)
    proto = lm.model if batch in (None, 1) else with_batch(lm.model, batch, source)
    try:
        og = import_onnx(proto, name=lm.name, source=source, input_shapes=input_shapes)
    except Exception as exc:  # shape inference, checker: the batch size does not fit the model
        if batch in (None, 1):
            raise
        raise input_error(source, "--batch", f"the model does not run at batch {batch} "
                          f"({' '.join(str(exc).split())[:200]})", "profile it at batch 1") from None
    return lm, og, coarsen(og, max_blocks=max_blocks)


def _check_db(path: PathArg) -> Optional[ProfileDB]:
    """Open an existing database now (its checks never write); a missing one is created later."""
    return ProfileDB(path) if Path(path).exists() else None


def profile_job(model: str, soc: str, db_path: PathArg, host: Optional[HostSpec] = None,
                python: Optional[str] = None, options: Optional[ProfileOptions] = None, batch: Optional[int] = None,
                max_blocks: Optional[int] = 48, progress: Progress = None,
                input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                binds: Optional[Mapping[str, Sequence[int]]] = None) -> ProfileReport:
    """``parapipe profile``: returns the :class:`~parapipe.measure.profile.ProfileReport`.

    Parameters
    ----------
    model : str
    soc : str
        ``host``, a bundled name or a YAML path.
    db_path : path
    host : HostSpec, optional
        The board (default: this machine, with a local agent).
    python : str, optional
        Interpreter on the board.
    options : ProfileOptions, optional
    batch : int, optional
    max_blocks : int, optional
        Coarsening of the blocks (as ``parapipe optimize --max-blocks``, default 48).
    progress : callable (done, total), optional
    input_shapes : dict of str to sequence of int, optional
        ``--input-shape`` values (:func:`parapipe.graph.inputs.resolve_input_shapes`).
    binds : dict of str to sequence of int, optional
        ``--bind``: these PUs are measured on those CPUs with ONNX Runtime's CPU provider
        (:func:`parapipe.execution.bindings.bind_soc`) and recorded as the profile's PUs.

    Raises
    ------
    InputError, HostError
        Before anything is written: bad model, SoC, PU, batch, budget, database, ``--bind``; unreachable host, refused or
        unknown key, no onnxruntime or too old a Python there, a PU whose provider or CPUs it lacks.
    """
    from parapipe.measure.profile import check_pus, profile_model
    from parapipe.measure.agent_timer import open_agent_timer

    from parapipe.measure.trust import RecordingTimer

    options = options or ProfileOptions()
    if not (isinstance(options.budget, (int, float)) and 0.0 < options.budget <= 1.0):
        raise input_error("--budget", None, f"must be a fraction in (0, 1], got {options.budget!r}",
                          "give e.g. 0.1 to measure a tenth of the operators, or 1 for all")
    from parapipe.execution.bindings import bind_soc

    _, og, bg = load_graph(model, batch, max_blocks, input_shapes)
    if soc != HOST_SOC:
        check_pus(bind_soc(resolve_soc(soc), binds), options.pus)
    db = _check_db(db_path)
    try:
        with open_agent_timer(host, python) as runner:
            soc_obj = bind_soc(resolve_soc(soc, runner), binds)
            runner.check_pus(soc_obj, check_pus(soc_obj, options.pus))
            db = db or ProfileDB(db_path)
            record = MeasureLog()  # spread and load of every model timed (the report's ``measurement``)
            report = profile_model(og, bg, soc_obj, RecordingTimer(runner, record), db, Catalog(db), options,
                                   progress)
            report.measurement = record.summary()
            return report
    finally:
        if db is not None:
            db.close()


@dataclass(frozen=True)
class CalibrateResult:
    """What ``parapipe calibrate`` found: the fits, their accuracy, stage measurements taken, profile
    written (None without ``--out``)."""

    calibration: Calibration
    accuracy: AccuracyReport
    stages_measured: int
    out: Optional[Path]
    frequency_fits: Tuple[FrequencyFit, ...] = ()


def calibrate_job(soc: str, db_path: PathArg, models: Sequence[str] = (), host: Optional[HostSpec] = None,
                  python: Optional[str] = None, out: Optional[PathArg] = None, pus: Optional[Sequence[str]] = None,
                  splits: Sequence[int] = (1, 2, 4),
                  warmup: int = 3, repeats: int = 10, max_blocks: Optional[int] = 48,
                  progress: Progress = None, rounds: int = 3,
                  binds: Optional[Mapping[str, Sequence[int]]] = None) -> CalibrateResult:
    """``parapipe calibrate``: fit, optionally time stages of ``models`` first, evaluate, optionally write
    the calibrated profile to ``out`` (temporary file, then rename). ``binds`` (``--bind``) substitutes PUs as
    :func:`profile_job` does: stages are timed on them and the written profile carries those bindings, so the
    points searched on it run where the measurements were taken.

    Raises
    ------
    InputError
        Missing or corrupt database; bad SoC, model or PU; an ``out`` that is not a .yaml path.
    HostError
        As :func:`profile_job`, when stages are timed.
    """
    from parapipe.calibration.accuracy import evaluate
    from parapipe.calibration.calibrated import calibrated_soc, fit_calibration
    from parapipe.calibration.frequency_fit import fit_frequency_scaling
    from parapipe.calibration.predict import open_existing_db
    from parapipe.measure.profile import check_pus, profile_stages
    from parapipe.measure.agent_timer import open_agent_timer

    if out is not None and not str(out).endswith((".yaml", ".yml")):
        raise input_error("--out", None, f"{out} is not a .yaml file", "give a path ending in .yaml")
    from parapipe.execution.bindings import bind_soc

    graphs = [load_graph(m, None, max_blocks) for m in models]
    if binds and soc != HOST_SOC:
        bind_soc(resolve_soc(soc), binds)  # a PU the profile lacks: refused before the database is opened
    db = open_existing_db(db_path)
    measured = 0
    try:
        if graphs or (soc == HOST_SOC and host is not None):
            with open_agent_timer(host, python) as runner:
                soc_obj = bind_soc(resolve_soc(soc, runner), binds)
                chosen = check_pus(soc_obj, pus)
                runner.check_pus(soc_obj, chosen)
                for _, og, bg in graphs:
                    res = profile_stages(og, bg, soc_obj, runner, db, Catalog(db), chosen, splits, warmup,
                                         repeats, progress, rounds)
                    measured += res.measured
        else:
            soc_obj = bind_soc(resolve_soc(soc), binds)
            check_pus(soc_obj, pus)
        cal = fit_calibration(soc_obj, db, Catalog(db))
        fits = tuple(fit_frequency_scaling(db, soc_obj))
    finally:
        db.close()
    accuracy = evaluate(cal)
    path = None
    if out is not None:
        from parapipe.soc.loader import save_soc

        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_soc(with_frequency_fits(calibrated_soc(cal, f"parapipe calibrate on {Path(db_path).name}"), fits),
                 path)
    return CalibrateResult(cal, accuracy, measured, path, fits)


def with_frequency_fits(soc: SoC, fits: Sequence[FrequencyFit]) -> SoC:
    """``soc`` with each fitted PU's ``operating_points.memory_bound_fraction`` set (provenance: the
    calibration's source, :data:`parapipe.calibration.calibrated.CALIBRATION_SOURCE`)."""
    from parapipe.calibration.calibrated import CALIBRATION_SOURCE
    from parapipe.soc.profile import Provenance

    if not fits:
        return soc
    pus = dict(soc.pus)
    provenance = dict(soc.provenance)
    for fit in fits:
        pu = pus[fit.pu]
        assert pu.operating_points is not None  # fit_frequency_scaling fits PUs with operating points only
        pus[fit.pu] = pu.model_copy(update={"operating_points": pu.operating_points.model_copy(
            update={"memory_bound_fraction": round(fit.memory_bound_fraction, 4)})})
        provenance[f"pus.{fit.pu}.operating_points.memory_bound_fraction"] = Provenance(source=CALIBRATION_SOURCE)
    return soc.model_copy(update={"pus": pus, "provenance": provenance})


def import_job(csv_path: PathArg, soc: str, db_path: Optional[PathArg] = None,
               out: Optional[str] = None, board_power: bool = False) -> Tuple[List[ImportedGraph], List[Path], int]:
    """``parapipe import``: returns ``(graphs, block table paths, rows written to the database)``.
    ``board_power``: the powers are whole-board readings (checked against the board's baseline,
    :func:`parapipe.profiledb.importer.read_long_csv`).

    Raises
    ------
    InputError
        Bad CSV (missing columns, unknown PUs, ...), bad SoC, corrupt database: nothing is written.
    """
    from parapipe.profiledb.importer import read_long_csv, to_measurements, write_tables

    if soc == HOST_SOC:
        raise input_error("--soc", None, "'host' is measured, not imported",
                          "give the profile (name or YAML) the "
                          "measurements were taken on")
    soc_obj = resolve_soc(soc)
    graphs = read_long_csv(csv_path, soc_obj, board_power=board_power)
    rows = to_measurements(graphs, soc_obj, str(csv_path))
    db = _check_db(db_path) if db_path is not None else None
    try:
        paths = write_tables(graphs, out, str(csv_path))
        written = 0
        if db_path is not None:
            db = db or ProfileDB(db_path)
            written = db.put(rows)
    finally:
        if db is not None:
            db.close()
    return graphs, paths, written


def detect_job(out: PathArg, host: Optional[HostSpec] = None, python: Optional[str] = None,
               name: Optional[str] = None, per_core: Optional[bool] = None, progress: Progress = None,
               record: Optional[MeasureLog] = None) -> Tuple[SoC, Path, str, List[str]]:
    """``parapipe soc detect``: measure the machine and write its profile YAML to ``out``; returns the profile,
    its path, how its CPU PUs were grouped (``per_core`` None: as
    :func:`parapipe.measure.detect.cpu_grouping` chooses) and one line per runtime found
    (:func:`parapipe.measure.detect.runtime_findings`). ``progress(done, total)`` follows the
    micro-benchmarks, ``record`` gets their spread and load.

    Raises
    ------
    InputError
        ``out`` not a .yaml path.
    HostError
        As :func:`profile_job`.
    """
    from parapipe.measure.detect import cpu_grouping, detect_soc, runtime_findings
    from parapipe.measure.agent_timer import open_agent_timer
    from parapipe.soc.loader import load_soc, save_soc

    if not str(out).endswith((".yaml", ".yml")):
        raise input_error("--out", None, f"{out} is not a .yaml file", "give a path ending in .yaml")
    from parapipe.measure.trust import RecordingTimer

    with open_agent_timer(host, python) as runner:
        if per_core is None:
            per_core, how = cpu_grouping(runner.facts)
        else:
            how = ("one PU per core, as --per-core asked (--per-cluster for one PU per cluster)" if per_core else
                   "one PU per CPU cluster, as --per-cluster asked (--per-core for one PU per core)")
        soc = detect_soc(runner if record is None else RecordingTimer(runner, record), name=name,
                         per_core=per_core, progress=progress)
        found = runtime_findings(runner.facts)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_soc(soc, path)
    load_soc(str(path))  # the written file must load; a failure here is a bug in detect_soc
    return soc, path, how, found


def calibrate_runs_job(soc: str, runs_csv: Optional[str], db_path: Optional[str], blocks_dir: Optional[str],
                       out: Optional[PathArg], models: Sequence[str], fit: Sequence[str],
                       max_blocks: Optional[int] = 48, board_power: bool = False):
    """``parapipe calibrate --runs``: resolve ``soc``, fit the pipeline-level terms (and powers) on measured runs.

    A model the runs name without a block table in ``blocks_dir`` is prepared here (:func:`parapipe.app.prepare.
    prepare`, at ``max_blocks``; on ``host`` its blocks' measurements come from ``db_path``) and handed to the fit
    (:func:`parapipe.calibration.runs_calibrate.runs_calibration`) as a callable, so fitting never imports this
    layer; on ``host`` this machine is measured once for every model, and the models' block and whole-model times
    come from ``db_path`` where it holds them (a warning says so without it). ``board_power``: the block tables'
    watts are whole-board readings. Returns its
    :class:`~parapipe.calibration.runs_calibrate.RunsCalibration`.

    Raises
    ------
    InputError
        Unknown ``soc``; bad CSV, database, block table or ``fit``; ``out`` not a .yaml path; no run.
    """
    from parapipe.app.prepare import prepare
    from parapipe.calibration.runs_calibrate import runs_calibration
    from parapipe.soc.identity import is_host

    db = db_path if is_host(soc) else None  # on host: the models' measurements come from the database
    if is_host(soc) and not db and not blocks_dir:
        log.warning("the runs' models are measured again on this machine (no --db): the fit differs from one on "
                    "the database the runs were recorded in by this machine's noise; give that database with --db "
                    "to reuse its measurements")
    resolved = resolve_soc(soc)

    def problem_of(model: str):
        return prepare(model, soc, max_blocks=max_blocks, db=db, host_soc=resolved if is_host(soc) else None).problem

    return runs_calibration(resolved, runs_csv, db_path, blocks_dir, out, models, fit, problem_of,
                            board_power=board_power)
