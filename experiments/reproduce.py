"""``python -m experiments.reproduce``: run a sweep of models x SoC profiles and write its tables, figures and
report into one folder, atomically.

Usage::

    python -m experiments.reproduce [--config FILE | --quick] [--out DIR] [--workers N]
                                    [--scheduler ADDRESS [--scheduler-timeout S]] [-v]

Writes ``DIR/points.csv``, ``DIR/energy_efficiency.csv``, ``DIR/search_times.csv``, ``DIR/break_even.csv``,
``DIR/fronts/<model>__<soc>.pareto.json``, ``DIR/figures/*.png``, ``DIR/report.md`` and ``DIR/manifest.json``.
Everything is written into a temporary folder next to ``DIR`` and renamed onto it at the end, so ``DIR`` holds
either the previous complete result or the new one. Exit codes: 0 done, 2 bad input (one line on stderr:
unknown model or SoC in the configuration, unwritable output folder, Dask scheduler that does not answer, a
cluster without workers or whose scheduler or workers lack this parapipe version), 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from parapipe.errors import ParapipeError, input_error

from . import markdown, tables
from .config import FULL_CONFIG, QUICK_CONFIG, SweepConfig, load_config
from .sweep import DEFAULT_SCHEDULER_TIMEOUT_S, Job, JobResult, check_cluster, connect_dask, run_dask, run_local

log = logging.getLogger("experiments")

DEFAULT_OUT = Path("out") / "experiments"
MANIFEST = "manifest.json"
MANIFEST_KIND = "parapipe-experiments"
SUMMARY_FIGURE = "summary_energy_gains.png"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.reproduce",
                                description="Reproduce the evaluation: parapipe fronts and baselines for "
                                "every model x SoC of a configuration; tables, figures and report.md.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--config", default=None, help=f"sweep configuration YAML (default {FULL_CONFIG.name})")
    g.add_argument("--quick", action="store_true", help=f"use {QUICK_CONFIG.name} (three models, two SoCs)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--workers", type=int, default=None,
                   help="local worker processes (default: the configuration's, else the CPU count)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run the jobs on this Dask scheduler (e.g. tcp://host:8786), not local processes")
    p.add_argument("--scheduler-timeout", type=float, default=DEFAULT_SCHEDULER_TIMEOUT_S, metavar="S",
                   help="seconds to wait for the scheduler, and then for a first worker "
                   f"(default {DEFAULT_SCHEDULER_TIMEOUT_S:g})")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-v info, -vv debug)")
    return p


# -- output folder -------------------------------------------------------------------------------------------
def _is_previous_result(out: Path) -> bool:
    try:
        return json.loads((out / MANIFEST).read_text()).get("kind") == MANIFEST_KIND
    except (OSError, ValueError, AttributeError):
        return False


def stage_output(out: Path) -> Path:
    """Check ``out`` and create the temporary folder next to it that the run writes into.

    Raises
    ------
    InputError
        ``out`` is a file, a non-empty folder that is not an earlier result of this command, or its parent
        cannot be created or written.
    """
    if out.exists() and not out.is_dir():
        raise input_error("--out", str(out), "exists and is not a folder", "choose a folder path")
    if out.is_dir() and any(out.iterdir()) and not _is_previous_result(out):
        raise input_error("--out", str(out), "is a non-empty folder that does not hold an earlier "
                          f"experiments result (no {MANIFEST})", "choose a new or empty folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=str(out.parent)))
    except OSError as exc:
        raise input_error("--out", str(out), f"cannot be written ({exc.strerror or exc})",
                          "choose a writable folder") from None


def _umask_modes(folder: Path) -> None:
    """Give ``folder`` and its contents the modes the umask allows (mkdtemp/mkstemp create them private)."""
    umask = os.umask(0)
    os.umask(umask)
    for p in [folder, *folder.rglob("*")]:
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)


def publish(staging: Path, out: Path) -> None:
    """Move the finished ``staging`` folder onto ``out`` (replacing an earlier result as a whole)."""
    _umask_modes(staging)
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        os.replace(staging, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=str(out.parent)))
    os.replace(out, old / "previous")
    try:
        os.replace(staging, out)
    except BaseException:
        os.replace(old / "previous", out)
        raise
    shutil.rmtree(old, ignore_errors=True)


# -- running -------------------------------------------------------------------------------------------------
def _absolute(name: str) -> str:
    """``name`` as an absolute path when it names an existing .onnx / .yaml file, else unchanged (a registry or
    bundled name): a job may run in another folder (a Dask worker's), where a relative path would not resolve."""
    p = Path(name).expanduser()
    return str(p.resolve()) if name.endswith((".onnx", ".yaml", ".yml")) and p.is_file() else name


def make_jobs(cfg: SweepConfig) -> List[Job]:
    """One job per model x SoC, models outermost (the report's row order); file paths made absolute.

    Raises
    ------
    InputError
        Two entries would write the same files (e.g. ``a/net.onnx`` and ``b/net.onnx``).
    """
    jobs = [Job(model=_absolute(m), soc=_absolute(s), search=dict(cfg.search), max_blocks=cfg.max_blocks,
                figures=cfg.figures) for m in cfg.models for s in cfg.socs]
    seen: Dict[str, str] = {}
    for job in jobs:
        if job.key in seen:
            raise input_error(cfg.source, "models/socs", f"{seen[job.key]} and {job.model} on {job.soc} "
                              f"would both be written as {job.key!r}", "rename one of the files")
        seen[job.key] = f"{job.model} on {job.soc}"
    return jobs


def _progress(total: int):
    from tqdm import tqdm

    bar = tqdm(total=total, desc="model x SoC", unit="job", file=sys.stderr, mininterval=0.5, disable=None)

    def update(result: JobResult) -> None:
        bar.set_postfix_str(f"{result.job.key} {result.search_s:.1f}s", refresh=False)
        bar.update(1)

    return bar, update


def write_outputs(folder: Path, cfg: SweepConfig, results: Sequence[JobResult],
                  info: markdown.RunInfo) -> None:
    """Write every file of a sweep into ``folder`` (the staging folder)."""
    from parapipe.mapping import write_pareto
    from parapipe.report.summary import plot_energy_gains

    (folder / "figures").mkdir()
    (folder / "fronts").mkdir()
    eff = tables.efficiency_rows(results)
    search, breakeven = tables.search_rows(results), tables.break_even_rows(results)
    tables.write_csv(folder / "points.csv", tables.POINT_COLUMNS, tables.point_rows(results))
    tables.write_csv(folder / "energy_efficiency.csv", tables.EFFICIENCY_COLUMNS,
                     eff + [tables.average_row(eff)])
    tables.write_csv(folder / "search_times.csv", tables.SEARCH_COLUMNS, search)
    tables.write_csv(folder / "break_even.csv", tables.BREAK_EVEN_COLUMNS, breakeven)
    for r in results:
        write_pareto(r.doc, folder / "fronts" / f"{r.job.key}.pareto.json")
        for name, data in r.figures.items():
            (folder / "figures" / name).write_bytes(data)
        info.figures[r.job.key] = sorted(r.figures, key=lambda n: ("front" not in n, "gantt" not in n, n))
    if cfg.figures:
        plot_energy_gains(eff, folder / "figures" / SUMMARY_FIGURE,
                          reference_pct={"gain_vs_pipeline_pct": tables.PAPER_GAIN_VS_PIPELINE_PCT,
                                         "gain_vs_parallel_pct": tables.PAPER_GAIN_VS_PARALLEL_PCT},
                          title=f"{cfg.name}: energy-efficiency gain of throughput-optimal parapipe mappings "
                                "(dashed: Para-Pipe paper)")
        info.summary_figure = SUMMARY_FIGURE
    labels = {r.job.key: f"{r.doc.model.name} on {r.doc.soc.name}" for r in results}
    (folder / "report.md").write_text(markdown.render(info, eff, search, breakeven, labels), encoding="utf-8")
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    manifest = {"kind": MANIFEST_KIND,
                "config": {"name": cfg.name, "source": cfg.source, "models": cfg.models, "socs": cfg.socs,
                           "search": cfg.search, "max_blocks": cfg.max_blocks},
                "runner": info.runner, "wall_s": info.wall_s, "files": files + [MANIFEST]}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


WORKLOAD_COLUMNS = ["workload", "soc", "point", "strategy", "throughput_per_s", "energy_j", "latency_s",
                    "search_s"]


def write_workloads(folder: Path, cfg: SweepConfig) -> None:
    """Each workload of ``cfg`` on each SoC, in this process: ``workloads/<a+b>__<soc>/pareto.json`` (and
    ``pareto.png``), and ``workloads.csv`` (the front's best-throughput and best-energy points and the
    ``separate``, ``split`` and ``whole`` baselines: workload frames/s, J per workload frame)."""
    if not cfg.workloads:
        return
    from parapipe.app.workload import WorkloadSpec, optimize_workload, prepare_workload
    from parapipe.search.options import SearchOptions

    rows = []
    for models, rates in cfg.workloads:
        for soc in cfg.socs:
            spec = WorkloadSpec([_absolute(m) for m in models], rates, [None] * len(models), [None] * len(models))
            preps = prepare_workload(spec, _absolute(soc), max_blocks=cfg.max_blocks)
            name = "+".join(p.loaded.name for p in preps)
            out = folder / "workloads" / f"{name}__{preps[0].soc.name}"
            out.mkdir(parents=True)
            _, res = optimize_workload(preps, spec, SearchOptions(**cfg.search), out, plot=cfg.figures)
            picks = [("best-throughput", res.best("throughput")), ("best-energy", res.best("energy"))] + [
                (p.strategy, p) for p in res.points if p.strategy != "parapipe"]
            for label, p in picks:
                ev = p.evaluation
                rows.append({"workload": name, "soc": preps[0].soc.name, "point": label, "strategy": p.strategy,
                             "throughput_per_s": ev.throughput_per_s, "energy_j": ev.energy_j,
                             "latency_s": ev.latency_s, "search_s": res.info["search_s"]})
    tables.write_csv(folder / "workloads.csv", WORKLOAD_COLUMNS, rows)


def _loadavg() -> List[float]:
    try:
        return list(os.getloadavg())
    except OSError:
        return []


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The command body (see the module docstring); returns the exit code."""
    t0 = time.perf_counter()
    load_before = _loadavg()
    cfg = load_config(args.config or (QUICK_CONFIG if args.quick else FULL_CONFIG))
    if args.workers is not None and args.workers < 1:
        raise input_error("--workers", None, f"must be >= 1, got {args.workers}", "give a positive count")
    workers = args.workers or cfg.workers
    out = Path(args.out).expanduser()
    staging = stage_output(out)
    client = None
    n_dask = 0
    try:
        if args.scheduler:
            client = connect_dask(args.scheduler, args.scheduler_timeout)
            n_dask = check_cluster(client, args.scheduler, args.scheduler_timeout)
        jobs = make_jobs(cfg)
        runner = (f"Dask scheduler {args.scheduler} ({n_dask} worker(s) at the start)" if client
                  else f"{min(workers, len(jobs))} local process(es)")
        log.info("%d jobs (%d models x %d SoCs) on %s", len(jobs), len(cfg.models), len(cfg.socs), runner)
        bar, update = _progress(len(jobs))
        try:
            results = run_dask(jobs, client, update) if client else run_local(jobs, workers, update)
        finally:
            bar.close()
        info = markdown.RunInfo(config_name=cfg.name, config_source=cfg.source,
                                command="python -m experiments.reproduce " + shlex.join(argv), runner=runner,
                                wall_s=0.0, load_before=load_before)
        write_workloads(staging, cfg)
        info.wall_s = time.perf_counter() - t0
        info.load_after = _loadavg()
        write_outputs(staging, cfg, results, info)
        publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if client is not None:
            client.close()
    _print_summary(out, results, time.perf_counter() - t0)
    return 0


def _print_summary(out: Path, results: Sequence[JobResult], wall_s: float) -> None:
    eff = tables.efficiency_rows(results)
    avg = tables.average_row(eff)
    search = [r.search_s for r in results]
    print(f"{len(results)} jobs in {wall_s:.1f} s; search total {sum(search):.1f} s, max {max(search):.2f} s")
    print("average energy-efficiency gain of throughput-optimal parapipe: "
          + ", ".join(f"vs {b} {avg[f'gain_vs_{b}_pct']:+.1f} %" for b in tables.BASELINES
                      if avg[f"gain_vs_{b}_pct"] is not None)
          + f" (paper: vs pipeline {tables.PAPER_GAIN_VS_PIPELINE_PCT} %, vs parallel "
            f"{tables.PAPER_GAIN_VS_PARALLEL_PCT} %)")
    print("average energy-efficiency gain at equal throughput: "
          + ", ".join(f"vs {b} {avg[f'eqthr_gain_vs_{b}_pct']:+.1f} %" for b in tables.BASELINES
                      if avg[f"eqthr_gain_vs_{b}_pct"] is not None))
    print(f"wrote {out / 'report.md'}, {out / 'points.csv'}, {out / 'energy_efficiency.csv'}, "
          f"{out / 'figures'}/")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command; returns the exit code (0 done, 2 bad input, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return run(args, argv)
    except ParapipeError as exc:
        print(f"experiments: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("experiments: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
