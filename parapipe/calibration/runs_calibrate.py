"""``parapipe calibrate --runs``: measured runs in, the pipeline-level terms (and powers) of a SoC profile out.

Runs come from the ``runs`` table of a profile database (:mod:`parapipe.profiledb.runs`, what ``parapipe run``
and ``deploy`` record) or from a CSV: the long format ``model,soc,mapping,period_s,latency_s[,energy_j]``
(``mapping``: one PU per block, as ``parapipe evaluate --mapping`` takes it, ``big@1800`` operating points and
``[..]`` stages included (:func:`parapipe.mapping.index.parse_pu_list`); seconds and joules per inference;
a byte-order mark and CRLF line ends are fine), or the export of ``parapipe runs --csv`` (its ``pu_list``,
stage ``mapping`` and ``idle_latency_s`` columns). Each model's problem comes from ``--blocks DIR``
(``DIR/<model>.blocks.csv``, the block table ``parapipe import`` writes) or, without it, from the model itself
costed on the profile by the caller's ``problem_of`` (the application layer prepares it; on ``host``: its blocks
measured, reusing the database's measurements).

Rows of a workload run (several models at once: the ``workload`` column, :attr:`RunRecord.workload
<parapipe.profiledb.runs.RunRecord.workload>`) are grouped by the run's ``id`` into one
:class:`~parapipe.calibration.runfit.MeasuredWorkload` (every model's mapping rebuilt as a single model's is, its
measured period ``1 / workload throughput``), from the database and from the export alike. A workload run is
skipped, with one line naming it, when a model's problem cannot be built (no block table, a model that cannot be
loaded), a model's row is missing, or a row has PUs substituted or outputs that differ.

The fit is :func:`parapipe.calibration.runfit.calibrate_runs`; :func:`calibrated_profile` writes its terms into the
profile's ``pipeline:`` section (and fitted powers into the PUs) with ``source: runs`` provenance.
"""
from __future__ import annotations

import csv
import json
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from parapipe.cost.mapping import Mapping
from parapipe.cost.problem import MappingProblem
from parapipe.errors import InputError, input_error
from parapipe.calibration.runfit import TERM_NAMES, MeasuredRun, MeasuredWorkload, Run, RunsFit, calibrate_runs
from parapipe.soc.profile import SoC

log = logging.getLogger(__name__)

__all__ = ["RunsCalibration", "read_runs_csv", "runs_from_db", "runs_calibration", "calibrated_profile",
           "RUNS_SOURCE"]

#: Source key of the numbers ``calibrate --runs`` writes into a profile.
RUNS_SOURCE = "runs"
_LONG_COLUMNS = ("model", "soc", "mapping", "period_s", "latency_s")


@dataclass
class _WorkloadRow:
    """One model's row of a workload run, from the database or an export."""

    model: str
    point: str
    stages: Union[str, List[Dict[str, Any]]]
    idle_latency_s: Optional[float]
    workload: Dict[str, Any]
    usable: bool
    source: str


def _workload_runs(rows: Sequence[_WorkloadRow], problems: "_Problems", src: str,
                   models: Sequence[str] = ()) -> List[MeasuredWorkload]:
    """The rows of workload runs grouped by their ``workload.id`` into runs (module docstring), in the order of
    their first row; the ones that cannot be used are skipped with one log line each.

    Raises
    ------
    InputError
        A row's ``workload`` without its fields, a bad throughput or rate, a stage list that does not fit its
        model's blocks.
    """
    groups: Dict[str, List[_WorkloadRow]] = {}
    for row in rows:
        wid = row.workload.get("id") if isinstance(row.workload, dict) else None
        if not isinstance(wid, str) or not wid:
            raise input_error(row.source, "workload", "no run id", "export the runs with 'parapipe runs --csv'")
        groups.setdefault(wid, []).append(row)
    out = []
    for wid, group in groups.items():
        first = group[0]
        names = first.workload.get("models")
        rates = first.workload.get("rates")
        if not isinstance(names, list) or not names or not isinstance(rates, dict):
            raise input_error(first.source, "workload", "no 'models' list or 'rates'",
                              "export the runs with 'parapipe runs --csv'")
        what = f"{src}: workload run {wid} (point {first.point}: {'+'.join(map(str, names))})"
        if models and not all(n in models for n in names):
            log.info("%s skipped: not every model of it is among %s", what, list(models))
            continue
        if not all(r.usable for r in group):
            log.info("%s skipped (PUs substituted with --bind, or outputs differ)", what)
            continue
        by_model = {r.model: r for r in group}
        missing = [n for n in names if n not in by_model]
        if missing:
            log.warning("%s skipped: no row of model %s; record the workload run again", what, missing[0])
            continue
        built = {}
        for name in names:
            try:
                built[name] = problems.get(name, by_model[name].source)
            except InputError as exc:
                log.warning("%s skipped: model %s cannot be costed (%s)", what, name, exc)
                break
        if len(built) < len(names):
            continue
        throughput = first.workload.get("throughput_per_s")
        if not isinstance(throughput, (int, float)) or not math.isfinite(throughput) or throughput <= 0:
            raise input_error(first.source, "workload.throughput_per_s", f"must be a number > 0, got {throughput!r}",
                              "record the workload run again")
        members, member_rates = [], []
        for name in names:
            row, problem = by_model[name], built[name]
            rate = rates.get(name)
            if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
                raise input_error(row.source, f"workload.rates.{name}", f"must be a number > 0, got {rate!r}",
                                  "record the workload run again")
            mapping = _stage_mapping(problem, row.stages, row.point, row.source)
            members.append(MeasuredRun(name, row.point, problem, mapping, 1.0 / float(throughput) / float(rate),
                                       row.idle_latency_s or None, None, row.source))
            member_rates.append(float(rate))
        out.append(MeasuredWorkload(first.point, members, member_rates, 1.0 / float(throughput), what, wid))
    return out


#: Builds the mapping problem of a model by name (the application layer's ``prepare(...).problem``).
ProblemOf = Callable[[str], MappingProblem]


class _Problems:
    """Each model's problem, built once: from ``blocks_dir/<model>.blocks.csv``, else with ``problem_of``."""

    def __init__(self, soc, blocks_dir: Optional[str], problem_of: Optional[ProblemOf], board_power: bool = False):
        self.soc, self.blocks_dir, self.problem_of = soc, blocks_dir, problem_of
        self.board_power = board_power
        self.cache: Dict[str, object] = {}

    def get(self, model: str, source: str):
        if model not in self.cache:
            if self.blocks_dir:
                from parapipe.cost.blocktable import read_block_table

                path = Path(self.blocks_dir) / f"{model}.blocks.csv"
                if not path.is_file():
                    raise input_error(source, "model", f"no block table {path} for model {model!r}",
                                      "write it with 'parapipe import' (DIR/<model>.blocks.csv) or drop --blocks "
                                      "to cost the model itself")
                self.cache[model] = read_block_table(path, self.soc, name=model, board_power=self.board_power)
            elif self.problem_of is not None:
                self.cache[model] = self.problem_of(model)
            else:
                raise input_error(source, "model", f"no block table for model {model!r}",
                                  "give --blocks DIR holding <model>.blocks.csv")
        return self.cache[model]


def _number(src: str, where: str, text: Optional[str], what: str, positive: bool = True) -> Optional[float]:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise input_error(src, where, f"{what} {text!r} is not a number", "give a number in SI units") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise input_error(src, where, f"{what} must be a finite number {'>' if positive else '>='} 0, got {text!r}",
                          "give seconds (joules for energy_j) per inference")
    return value


def _stage_mapping(problem: MappingProblem, stages_json: Union[str, List[Dict[str, Any]]], label: str,
                   source: str) -> Mapping:
    """A Mapping from the stage list of a ``runs`` row (``[{"pus", "blocks", "assignment"}]``): the list,
    or its JSON text (a CSV cell)."""
    from pydantic import ValidationError

    from parapipe.mapping.index import mapping_from_stages
    from parapipe.mapping.model import Replica, Stage

    try:
        stages = json.loads(stages_json) if isinstance(stages_json, str) else stages_json
        typed = [Stage(pus=list(st["pus"]), blocks=list(st["blocks"]), time_s=0.0,
                       assignment=dict(st.get("assignment") or {}), order=list(st.get("order") or []),
                       replicas=[Replica.model_validate(r) for r in st.get("replicas") or []] or None)
                 for st in stages]
    except (ValueError, TypeError, KeyError, ValidationError) as exc:
        raise input_error(source, "mapping", f"not a stage list ({exc})", "export the runs with 'parapipe runs "
                          "--csv'") from None
    return mapping_from_stages(problem, typed, source, f"points[{label}].mapping.")


def read_runs_csv(path, soc, problems: _Problems, models: Sequence[str] = ()) -> List[Run]:
    """The runs of a CSV (long format or ``parapipe runs --csv`` export; module docstring): the export's rows of
    one workload run grouped into one :class:`MeasuredWorkload`, after the single-model runs. ``models``: only
    these models' runs (and the workload runs of only these models); all when empty.

    Raises
    ------
    InputError
        Unreadable file, a missing column, a run of another SoC, a bad number or mapping (naming the line), no
        row.
    """
    src = str(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [(h or "").strip() for h in (reader.fieldnames or [])]
            rows = [{(k or "").strip(): v for k, v in row.items()} for row in reader]
    except OSError as exc:
        raise input_error(src, None, f"cannot read ({exc.strerror or exc})", "check the path") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise input_error(src, None, f"not a CSV file ({exc})", "write model,soc,mapping,period_s,latency_s[,energy_j]"
                          ) from None
    export = "pu_list" in header
    need = ("model", "soc", "pu_list", "period_s", "idle_latency_s") if export else _LONG_COLUMNS
    for col in need:
        if col not in header:
            raise input_error(src, f"column {col!r}", "missing",
                              "the header must be model,soc,mapping,period_s,latency_s[,energy_j]")
    runs: List[Run] = []
    workload_rows: List[_WorkloadRow] = []
    for line, row in enumerate(rows, start=2):
        where = f"line {line}"
        model, soc_name = (row.get("model") or "").strip(), (row.get("soc") or "").strip()
        if not model:
            raise input_error(src, f"{where}, column 'model'", "empty", "name the model of every run")
        if soc_name != soc.name:
            raise input_error(src, f"{where}, column 'soc'", f"run measured on SoC {soc_name!r}, not {soc.name!r}",
                              f"calibrate one SoC at a time (--soc {soc_name}) or remove the row")
        usable = not (export and ((row.get("prediction_applies") or "").strip().lower() in ("false", "0")
                                  or (row.get("outputs_match") or "").strip().lower() in ("false", "0")))
        if export and (row.get("workload") or "").strip() not in ("", "null"):
            try:
                workload = json.loads(row["workload"])
            except ValueError:
                workload = None
            if not isinstance(workload, dict):
                raise input_error(src, f"{where}, column 'workload'", "not a JSON object",
                                  "export the runs with 'parapipe runs --csv'")
            workload_rows.append(_WorkloadRow(
                model, (row.get("point") or "").strip() or row["pu_list"], row.get("mapping") or "",
                _number(src, f"{where}, column 'idle_latency_s'", row.get("idle_latency_s"), "idle_latency_s"),
                workload, usable, f"{src}: {where}"))
            continue
        if not usable:
            log.info("%s: %s skipped (PUs substituted with --bind, or outputs differ)", src, where)
            continue
        if models and model not in models:
            continue
        problem = problems.get(model, f"{src}: {where}")
        if export:
            label = (row.get("point") or "").strip() or row["pu_list"]
            mapping = _stage_mapping(problem, row.get("mapping") or "", label, f"{src}: {where}")
        else:
            from parapipe.mapping.index import parse_pu_list

            label = (row.get("mapping") or "").strip()
            mapping = parse_pu_list(problem, label, f"{src}: {where}, column 'mapping'")
        period = _number(src, f"{where}, column 'period_s'", row.get("period_s"), "period_s")
        if period is None:
            raise input_error(src, f"{where}, column 'period_s'", "empty", "give the measured 1 / throughput, s")
        latency = _number(src, f"{where}, column '{'idle_latency_s' if export else 'latency_s'}'",
                          row.get("idle_latency_s" if export else "latency_s"), "latency_s")
        energy = _number(src, f"{where}, column 'energy_j'", row.get("energy_j"), "energy_j")
        runs.append(MeasuredRun(model, label, problem, mapping, period, latency, energy, f"{src}: {where}"))
    runs.extend(_workload_runs(workload_rows, problems, src, models))
    if not runs:
        raise input_error(src, None, "no run to calibrate on", "add one row per measured run")
    return runs


def runs_from_db(db_path: str, soc, problems: _Problems, models: Sequence[str] = ()) -> List[Run]:
    """The usable runs of the ``runs`` table for ``soc`` (and ``models``): not substituted, outputs matched;
    the rows of one workload run grouped into one :class:`MeasuredWorkload` (module docstring), after the
    single-model runs.

    Raises
    ------
    InputError
        Missing database, or no usable run.
    """
    from parapipe.calibration.predict import open_existing_db
    from parapipe.profiledb.runs import list_runs

    db = open_existing_db(db_path)
    try:
        records = list_runs(db, soc=soc.name)
    finally:
        db.close()
    out: List[Run] = []
    workload_rows: List[_WorkloadRow] = []
    for rec in records:
        usable = rec.prediction_applies and rec.outputs_match
        if rec.workload is not None:
            workload_rows.append(_WorkloadRow(rec.model, rec.point, rec.mapping, rec.idle_latency_s or None,
                                              rec.workload, usable, f"{db_path}: run {rec.id}"))
            continue
        if models and rec.model not in models:
            continue
        if not usable:
            log.info("%s: run %s skipped (PUs substituted with --bind, or outputs differ)", db_path, rec.id)
            continue
        source = f"{db_path}: run {rec.id}"
        problem = problems.get(rec.model, source)
        mapping = _stage_mapping(problem, rec.mapping, rec.point, source)
        out.append(MeasuredRun(rec.model, rec.point, problem, mapping, rec.period_s, rec.idle_latency_s or None,
                               rec.energy_j, source))
    out.extend(_workload_runs(workload_rows, problems, db_path, models))
    if not out:
        raise input_error(db_path, "runs", f"no usable run of SoC {soc.name!r}" + (f" and model(s) {list(models)}"
                          if models else ""), "record runs with 'parapipe run' or 'parapipe deploy' (--db), "
                          "or give a CSV with --runs FILE")
    return out


@dataclass
class RunsCalibration:
    """What ``calibrate --runs`` found (``fit``) and wrote (``out``, None without ``--out``)."""

    fit: RunsFit
    soc: object
    out: Optional[Path]


def calibrated_profile(soc, fit: RunsFit, citation: str):
    """``soc`` with the fitted terms in its ``pipeline:`` section and the fitted powers in its PUs, each with
    ``source: runs`` (cited as ``citation``). Powers: ``C = Σ idle + static`` is split keeping the profile's
    static power and scaling every idle power alike (static = C and idle 0 when C is below the static power);
    active = idle + the group's fitted ``Δ`` (with powers per operating point: the one at the PU's
    ``frequency_hz``, and each fitted point of the profile's ``operating_points`` table as its
    ``active_power_w``, the others scaled from the active power by the table's power model)."""
    from parapipe.soc.pipeline import PipelineParams
    from parapipe.soc.profile import Provenance

    terms = fit.terms
    provenance = dict(soc.provenance)
    fitted = {p.name for p in fit.params if p.fitted}
    for name in fitted:
        provenance[f"pipeline.{name}"] = Provenance(source=RUNS_SOURCE)
    overlap = {pu: (float(v) if v > 1e-9 else 0.0) for pu, v in terms.overlap.items()  # 1e-9: zero to the fit
               if pu in soc.pus and (v or f"overlap.{pu}" in fitted)}
    pipeline = PipelineParams(overlap=overlap, dispatch_s=terms.dispatch_s, handoff_s=terms.handoff_s,
                              contention=terms.contention, slowdown=terms.slowdown, sharing=terms.sharing,
                              invoke_s={pu: float(v) for pu, v in terms.invoke_s.items() if pu in soc.pus})
    pus = {name: pu for name, pu in soc.pus.items()}
    static = soc.static_power_w
    if fit.power is not None:
        base = fit.power.base_w.value
        idle_sum = sum(pu.idle_power_w for pu in soc.pus.values())
        scale = (base - static) / idle_sum if base >= static and idle_sum > 0 else 0.0
        static = static if base >= static and idle_sum > 0 else base
        provenance["static_power_w"] = Provenance(source=RUNS_SOURCE)
        group_of = {pu: g for g, members in fit.power.groups.items() for pu in members}
        for name, pu in soc.pus.items():
            idle = pu.idle_power_w * scale
            fitted_at = {f: fit.power.delta_w[key].value for key, (g, f) in fit.power.points.items()
                         if g == group_of.get(name)} if fit.power.points else (
                {None: fit.power.delta_w[group_of[name]].value} if name in group_of else {})
            table = pu.operating_points
            top = None if table is None else table.index_of(pu.frequency_hz)
            delta = fitted_at.get(None, pu.active_power_w - pu.idle_power_w)
            for f, d in fitted_at.items():  # per operating point: the one at the PU's frequency is its active power
                if f is not None and table is not None and table.index_of(f) == top:
                    delta = d
            update: Dict[str, Any] = {"idle_power_w": idle, "active_power_w": idle + delta}
            points = {table.index_of(f): d for f, d in fitted_at.items() if f is not None and table is not None
                      and table.index_of(f) is not None}
            if table is not None and len(table) > 1 and points:
                ratio = table.dynamic_ratio(pu.active_power_w, pu.idle_power_w)
                update["operating_points"] = table.model_copy(update={"active_power_w": tuple(
                    idle + points.get(i, delta * ratio[i]) for i in range(len(table)))})
                provenance[f"pus.{name}.operating_points"] = Provenance(source=RUNS_SOURCE)
            pus[name] = pu.model_copy(update=update)
            provenance[f"pus.{name}.idle_power_w"] = provenance[f"pus.{name}.active_power_w"] = \
                Provenance(source=RUNS_SOURCE)
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    fields.update(pus=pus, static_power_w=static, pipeline=pipeline, provenance=provenance,
                  sources={**soc.sources, RUNS_SOURCE: citation}, path=None)
    return type(soc).model_validate(fields)


def runs_calibration(soc: SoC, runs_csv: Optional[str] = None, db_path: Optional[str] = None,
                       blocks_dir: Optional[str] = None, out=None, models: Sequence[str] = (),
                       fit: Sequence[str] = TERM_NAMES, problem_of: Optional[ProblemOf] = None,
                       loo: bool = True, board_power: bool = False) -> RunsCalibration:
    """``parapipe calibrate --runs``: read the runs, fit, optionally write the calibrated profile (atomically).

    Parameters
    ----------
    soc : SoC
        The resolved profile the runs ran on (``--soc``).
    problem_of : callable (model name) -> MappingProblem, optional
        Costs a model the runs name when ``blocks_dir`` has no table for it: the caller's way of preparing a
        model (the application layer's ``prepare``), so that fitting needs no import of that layer.
    board_power : bool
        The block tables' watts are whole-board readings (:mod:`parapipe.cost.blocktable`): the "before" model
        takes the baseline off them once.

    Raises
    ------
    InputError
        Bad CSV, database, block table or ``--fit``; ``out`` not a .yaml path; no run; a model with neither a
        block table nor ``problem_of``.
    """
    from parapipe.cost.pipeline_terms import terms_from_soc

    if out is not None and not str(out).endswith((".yaml", ".yml")):
        raise input_error("--out", None, f"{out} is not a .yaml file", "give a path ending in .yaml")
    bad = [f for f in fit if f not in TERM_NAMES]
    if bad or not fit:
        raise input_error("--fit", None, f"unknown term(s) {', '.join(bad) or '(none)'}",
                          f"choose among {', '.join(TERM_NAMES)}, comma-separated")
    if board_power and not blocks_dir:
        raise input_error("--board-power", None, "applies to block tables' watts (--blocks DIR)",
                          "give --blocks DIR, or drop --board-power")
    problems = _Problems(soc, blocks_dir, problem_of, board_power)
    if runs_csv:
        runs_path = runs_csv
        runs = read_runs_csv(runs_csv, soc, problems, models)
    elif db_path:
        runs_path = db_path
        runs = runs_from_db(db_path, soc, problems, models)
    else:
        raise input_error("--runs", None, "no runs given", "give --runs FILE.csv, or --runs with --db FILE")
    result = calibrate_runs(runs, terms_from_soc(soc), fit=fit, soc=soc, loo=loo)
    path = None
    if out is not None:
        from parapipe.soc.loader import save_soc

        loo_err = result.overall.get("loo")
        names = ", ".join(dict.fromkeys(r.model for r in runs))
        # never call an in-sample error leave-one-out: with one run there is no leave-one-out check
        error = (f"leave-one-out period MAPE {loo_err.period_mape:.1f}%" if loo_err is not None else
                 f"in-sample period MAPE {result.overall['after'].period_mape:.1f}% (the fit saw every run; no "
                 "leave-one-out check)")
        citation = (f"parapipe calibrate --runs on {Path(runs_path).name}: {len(runs)} measured "
                    f"run{'' if len(runs) == 1 else 's'} of {names}, fitted "
                    f"{datetime.now(timezone.utc).date().isoformat()}; {error}")
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_soc(calibrated_profile(soc, result, citation), path)
    return RunsCalibration(result, soc, path)
