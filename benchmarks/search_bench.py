"""Search benchmark: speed, bounds, quality and energy efficiency of ``parapipe optimize`` with the CLI's defaults.

1. (default) Per zoo model × bundled SoC profile, each as a whole ``parapipe optimize MODEL --soc SOC`` process,
   the command as a user types it (a subprocess, so start-up, model import, search, the plot and writing all
   count), with the default ``--operating-points auto`` and with ``--operating-points max`` (highest points
   only): wall and CPU seconds of the process, the search's seconds (pareto.json ``search.search_s``), the best
   period's gap to its lower bound (pareto.json ``bounds.period_lb_s``) and whether it was proved optimal
   (``search.bound.period_proved_optimal``).
   A profile with one operating point per PU searches the same space either way: its ``max`` columns repeat the
   ``auto`` run (``=``). Then, per SoC, how many models were certified (period within 10 % of its bound, or
   proved optimal; the project's goal is >= 7 of 9) and how many whole processes took at most 3 s; and the
   DenseNet-121 / A1000 process (median of ``--runs``; goal at most 2 s for the command as a user types it,
   which draws pareto.png, also timed with ``--no-plot``; ``--before DIR`` times another checkout's next to
   it, the two alternating).
2. ``--quality``: in-process for the zoo × ``--socs``: search time, front size, exactness, the best period next
   to its bound and the bound's method, and the energy-efficiency gains of parapipe over the pure-pipeline and
   non-pipelined-parallel baselines, both throughput-optimal against throughput-optimal (the Para-Pipe paper's
   comparison) and at equal throughput (per baseline, the most efficient parapipe point at least as fast;
   :mod:`experiments.tables`).
3. ``--sizes 25,50,...``: a scaling curve on synthetic block tables (search time vs blocks, with time / n²).
4. ``--rates``: the work rates of :mod:`parapipe.search.budget` (units of counted work per CPU second of each
   budgeted pass: PU-reuse and least-period DP, replicated pass, bound relaxation), median over the zoo models ×
   the bundled profiles and a seeded 40-block table with parallel branches (tests/search_cases.py); CPU seconds
   (``time.process_time``) so a loaded machine measures the same rates.
5. ``--sequence-beams MODEL/SOC,...``: the best evaluated period and CPU seconds of the mappings read off the
   relaxation (:mod:`parapipe.search.relaxed_sequences`) per beam and count, limited at the best period the
   search finds without them.
6. ``--period-curves``: the least-period pass's counted work per block, with the projection
   (:meth:`parapipe.search.budget.Budget.over_projected`) off: whether each pass finished, and that the largest
   projection of every finished pass stays below its budget.
7. ``--evaluate MODEL/SOC,...``: the cost model's speed: CPU seconds per :func:`parapipe.cost.evaluate.evaluate`
   call over the mappings the search of each pair evaluates (with the profile's pipeline terms; best of 5), next
   to ``--before``'s checkout (each in a subprocess of its own checkout), and their ratio.

Wall seconds depend on the machine's load: compare the CPU column on a shared machine.

Run from the repository root::

    python benchmarks/search_bench.py [--models a,b] [--process-socs x,y] [--before DIR] [--runs N]
    python benchmarks/search_bench.py --quality [--socs x,y]
    python benchmarks/search_bench.py --sizes 25,50,100,200
    python benchmarks/search_bench.py --rates
    python benchmarks/search_bench.py --sequence-beams resnet50/amlogic_a311d,resnet50/rockchip_rk3588
    python benchmarks/search_bench.py --period-curves [--models a,b] [--process-socs x,y]
    python benchmarks/search_bench.py --evaluate resnet50/amlogic_a311d,densenet121/black_sesame_a1000 --before DIR
"""
from __future__ import annotations

import argparse
import shutil
import atexit
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments import tables  # noqa: E402
from parapipe.cost.problem import MappingProblem  # noqa: E402
from parapipe.mapping import doc_from_result  # noqa: E402
from parapipe.search.api import search  # noqa: E402
from parapipe.app.prepare import prepare  # noqa: E402
from parapipe.app.resolve import soc_ref  # noqa: E402

ZOO = ["alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet", "vgg19",
       "zfnet512"]
GAP_TARGET = 0.10  # project target: period within 10 % of the bound (or proved optimal) on >= 7 of 9 models per SoC
CERTIFIED_TARGET = 7  # of the 9 zoo models, per SoC
PROCESS_TARGET_S = 2.0  # project target: DenseNet-121 on the A1000, whole process
PAIR_TARGET_S = 3.0  # project target: every zoo model x bundled profile, whole process


def _pct(x):
    return "–" if x is None else f"{x:+.1f}"


def zoo_table(models, socs):
    print(f"{'model':<13} {'soc':<19} {'blocks':>6} {'search s':>8} {'cpu s':>6} {'front':>5} {'exact':>5} {'period ms':>9} "
          f"{'bound ms':>8} {'gap':>15} {'bound by':>10} | {'EE thr-opt vs pipe/par %':>24} | "
          f"{'EE eq-thr vs pipe/par %':>23}")
    rows = []
    for soc in socs:
        for m in models:
            prep = prepare(m, soc)
            t0, c0 = time.perf_counter(), time.process_time()
            res = search(prep.problem)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            doc = doc_from_result(res, m, prep.loaded.sha256, soc_ref(prep.soc))
            [eff] = tables.efficiency_rows([SimpleNamespace(doc=doc)])
            best = min(p.evaluation.period_s for p in res.front())
            b = res.bounds
            gap = best / b.period_lb_s - 1
            gap_text = "proved optimal" if b.period_proved_optimal else f"{gap * 100:.1f} %"
            rows.append({"soc": soc, "model": m, "s": dt, "cpu": cpu, "ok": b.period_proved_optimal or gap <= GAP_TARGET,
                         **eff})
            print(f"{m:<13} {soc:<19} {prep.problem.n_blocks:>6} {dt:>8.2f} {cpu:>6.2f} {len(res.front()):>5} "
                  f"{'yes' if res.info['exact'] else 'no':>5} {best * 1e3:>9.3f} {b.period_lb_s * 1e3:>8.3f} "
                  f"{gap_text:>15} {b.period_method:>10} | "
                  f"{_pct(eff['gain_vs_pipeline_pct']):>11} {_pct(eff['gain_vs_parallel_pct']):>12} | "
                  f"{_pct(eff['eqthr_gain_vs_pipeline_pct']):>11} {_pct(eff['eqthr_gain_vs_parallel_pct']):>11}",
                  flush=True)
    print()
    for soc in socs:
        rs = [r for r in rows if r["soc"] == soc]
        print(f"{soc}: {sum(r['ok'] for r in rs)}/{len(rs)} models with the period within {GAP_TARGET:.0%} of its "
              f"lower bound or proved optimal (target >= 7); mean search {statistics.mean(r['s'] for r in rs):.2f} s,"
              f" max {max(r['s'] for r in rs):.2f} s; CPU {sum(r['cpu'] for r in rs):.2f} s in all")
    avg = tables.average_row(rows)
    print(f"average energy-efficiency gain, throughput-optimal vs throughput-optimal: vs pure pipeline "
          f"{_pct(avg['gain_vs_pipeline_pct'])} %, vs non-pipelined parallel {_pct(avg['gain_vs_parallel_pct'])} % "
          f"(paper {tables.PAPER_GAIN_VS_PIPELINE_PCT} %, {tables.PAPER_GAIN_VS_PARALLEL_PCT} %)")
    print(f"average energy-efficiency gain at equal throughput: vs pure pipeline "
          f"{_pct(avg['eqthr_gain_vs_pipeline_pct'])} %, vs non-pipelined parallel "
          f"{_pct(avg['eqthr_gain_vs_parallel_pct'])} %")


_PYCACHES: dict = {}


def _pycache(checkout: Path) -> str:
    """A bytecode cache folder of this run for ``checkout`` (as an installed package has one; the checkout stays
    clean): without it a process where PYTHONDONTWRITEBYTECODE is set compiles every module on each run. The
    first process of a checkout writes it: warm it with one untimed import of what a search imports."""
    key = str(checkout)
    if key not in _PYCACHES:
        folder = tempfile.mkdtemp(prefix="parapipe-bench-pycache-")
        atexit.register(shutil.rmtree, folder, True)
        _PYCACHES[key] = folder
        env = {**os.environ, "PYTHONPYCACHEPREFIX": folder,
               "PYTHONPATH": os.pathsep.join([str(checkout), str(checkout / "device_agents")])}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        # with PYTHONPYCACHEPREFIX set, Python compiles third-party modules into it too (it ignores their
        # __pycache__): warm the lazily imported ones as well, or the first search that polishes (alexnet on the
        # A311D) pays about 4 s compiling OR-Tools' CP-SAT wrapper and pandas
        warm = ("import parapipe.app.optimize, parapipe.cli.optimize, parapipe.search.api, parapipe.report.plots, "
                "parapipe.app.prepare, parapipe.report.serve, ortools.sat.python.cp_model, "
                "ortools.linear_solver.pywraplp, onnxruntime, matplotlib.backends.backend_agg")
        subprocess.run([sys.executable, "-c", warm], cwd=checkout, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return _PYCACHES[key]


def run_optimize(checkout: Path, model: str, soc: str, ops: str, out: str, plot: bool = True) -> dict:
    """One whole ``parapipe optimize MODEL --soc SOC --no-plot --operating-points OPS`` process run from
    ``checkout`` (with ``plot``: without ``--no-plot``, the command as a user types it, which also draws
    pareto.png): wall and CPU seconds (the child's and its plot process's user + system time) and what its
    pareto.json reports."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(checkout / "device_agents")]
                                                       + [p for p in [os.environ.get("PYTHONPATH")] if p]),
           "PYTHONPYCACHEPREFIX": _pycache(checkout)}  # warms the cache on first use: before the clocks start
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "parapipe", "optimize", model, "--soc", soc]
                          + ([] if plot else ["--no-plot"]) + ["--operating-points", ops, "--out", out], cwd=checkout, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if proc.returncode != 0:
        return {"wall": wall, "cpu": cpu, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    doc = json.loads((Path(out) / "pareto.json").read_text())
    search_info = doc.get("search", {})
    best = min(p["period_s"] for p in doc["points"] if p["strategy"] == "parapipe")
    lb = (doc.get("bounds") or {}).get("period_lb_s")
    proved = bool((search_info.get("bound") or {}).get("period_proved_optimal"))
    gap = best / lb - 1 if lb else None
    return {"wall": wall, "cpu": cpu, "search": search_info.get("search_s"), "gap": gap, "proved": proved,
            "certified": proved or (gap is not None and gap <= GAP_TARGET), "best_ms": best * 1e3,
            "same_space": (search_info.get("operating_points") or {}).get("where") == "max"}


def _cells(r: Optional[dict]) -> str:
    if r is None:
        return f"{'=':>6} {'':>6} {'':>6} {'':>9}"
    if "error" in r:
        return f"{r['wall']:>6.2f} {r['cpu']:>6.2f} {'failed: ' + r['error'][:40]}"
    gap = "proved" if r["proved"] else "–" if r["gap"] is None else f"{r['gap'] * 100:.1f}%"
    return f"{r['wall']:>6.2f} {r['cpu']:>6.2f} {r['search'] or 0:>6.2f} {gap:>9}"


def process_table(models, socs, checkout: Path = ROOT) -> list:
    """Item 1 of the module docstring: one row per model × SoC; returns the rows."""
    head = f"{'wall s':>6} {'cpu s':>6} {'srch s':>6} {'gap':>9}"
    print(f"whole 'parapipe optimize MODEL --soc SOC' processes ({checkout}); gap: best period over its "
          f"lower bound, less 1 ('proved': proved optimal); '=': the profile has one point per PU, same as auto")
    print(f"{'model':<13} {'soc':<19} | {'--operating-points auto':^31} | {'--operating-points max':^31}")
    print(f"{'':<13} {'':<19} | {head} | {head}")
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for soc in socs:
            for m in models:
                auto = run_optimize(checkout, m, soc, "auto", out)
                top = None if auto.get("same_space") else run_optimize(checkout, m, soc, "max", out)
                rows.append({"soc": soc, "model": m, "auto": auto, "max": top or auto})
                print(f"{m:<13} {soc:<19} | {_cells(auto)} | {_cells(top)}", flush=True)
    print()
    for soc in socs:
        rs = [r for r in rows if r["soc"] == soc]
        for ops in ("auto", "max"):
            ok = [r[ops] for r in rs if "error" not in r[ops]]
            print(f"{soc:<19} {ops:<4}: certified {sum(r['certified'] for r in ok)}/{len(rs)} (goal >= "
                  f"{CERTIFIED_TARGET}); whole process <= {PAIR_TARGET_S:.0f} s wall {sum(r['wall'] <= PAIR_TARGET_S for r in ok)}"
                  f"/{len(rs)}, CPU {sum(r['cpu'] <= PAIR_TARGET_S for r in ok)}/{len(rs)}; max wall "
                  f"{max((r['wall'] for r in ok), default=0):.2f} s, max CPU {max((r['cpu'] for r in ok), default=0):.2f} s")
    for ops in ("auto", "max"):
        ok = [r[ops] for r in rows if "error" not in r[ops]]
        print(f"all pairs {ops:<4}: whole process <= {PAIR_TARGET_S:.0f} s wall {sum(r['wall'] <= PAIR_TARGET_S for r in ok)}"
              f"/{len(rows)}, CPU {sum(r['cpu'] <= PAIR_TARGET_S for r in ok)}/{len(rows)}")
    return rows


def densenet_line(before, runs):
    """The DenseNet-121 / A1000 whole process, median of ``runs`` (wall and CPU), as a user types it (drawing
    pareto.png; the goal is judged on it) and with ``--no-plot``, each next to ``before``'s; the runs of the
    checkouts alternate, so that a change in the machine's load falls on both."""
    checkouts = [ROOT] + ([Path(before).resolve()] if before else [])
    for plot, how in ((True, "parapipe optimize densenet121 --soc black_sesame_a1000"), (False, "... --no-plot")):
        times = {c: [] for c in checkouts}
        with tempfile.TemporaryDirectory() as out:
            for _ in range(runs):
                for c in checkouts:
                    times[c].append(run_optimize(c, "densenet121", "black_sesame_a1000", "auto", out, plot=plot))
        (wall, cpu), *rest = [(statistics.median(r["wall"] for r in times[c]),
                               statistics.median(r["cpu"] for r in times[c])) for c in checkouts]
        line = (f"DenseNet-121 / A1000, whole '{how}' process (median of {runs}): {wall:.2f} s wall, {cpu:.2f} s CPU"
                + (f" (goal <= {PROCESS_TARGET_S:.0f} s: {'met' if wall <= PROCESS_TARGET_S else 'not met'} by "
                   f"wall)" if plot else ""))
        if rest:
            bw, bc = rest[0]
            line += f"; before ({before}) {bw:.2f} s wall, {bc:.2f} s CPU; before/now {bw / wall:.2f}x wall, {bc / cpu:.2f}x CPU"
        print(("\n" if plot else "") + line, flush=True)


def synthetic(n, k=4, seed=0) -> MappingProblem:
    """A CNN-like block table: chains with a skip edge in a quarter of the blocks, 10 % unsupported cells."""
    rng = np.random.default_rng(seed)
    preds = [()]
    for j in range(1, n):
        if rng.random() < 0.75 or j < 3:
            preds.append((j - 1,))
        else:
            preds.append(tuple(sorted({j - 1, int(rng.integers(max(0, j - 6), j - 1))})))
    t = rng.uniform(0.2e-3, 3e-3, (n, 1)) * rng.uniform(0.3, 3, (1, k))
    t[rng.random((n, k)) < 0.1] = np.inf
    t[:, 0] = np.where(np.isfinite(t[:, 0]), t[:, 0], 1e-3)  # PU 0 runs everything
    edges = {(i, j): float(rng.integers(10_000, 1_000_000)) for j in range(n) for i in preds[j]}
    return MappingProblem([f"b{i}" for i in range(n)], preds, edges, [f"pu{i}" for i in range(k)], t,
                          np.tile(rng.uniform(1, 5, k), (n, 1)), rng.uniform(0.05, 0.3, k), 1.0,
                          np.full((k, k), 2e-4), np.full((k, k), 5e9), name=f"synthetic{n}")


def scaling(sizes):
    print(f"\n{'blocks':>6} {'search s':>9} {'DP s':>7} {'DP states':>9} {'front':>5} {'s / n^2 (x1e6)':>15}")
    for n in sizes:
        pr = synthetic(n)
        t0 = time.perf_counter()
        res = search(pr)
        dt = time.perf_counter() - t0
        print(f"{n:>6} {dt:>9.2f} {res.stats['dp_s']:>7.2f} {int(res.stats['dp_states']):>9} {len(res.front()):>5} "
              f"{dt / n ** 2 * 1e6:>15.2f}", flush=True)


def rates(models, socs):
    """Print the measured work rates (units per CPU second) of the budgeted passes (item 4 of the docstring)."""
    import tempfile as _tf

    from parapipe.app.resolve import resolve_soc
    from parapipe.cost.blocktable import read_block_table
    from parapipe.search import bounds as _bounds, passes as _passes, relaxation as _relax

    sys.path.insert(0, str(ROOT / "tests"))
    from search_cases import branchy_block_table

    seen = {"dp": [], "replicated": [], "relax": []}

    def wrap(mod, name, kind, get_budget):
        orig = getattr(mod, name)

        def run(*a, **kw):
            b = get_budget(a, kw)
            u0, c0 = (b.used if b is not None else 0.0), time.process_time()
            try:
                return orig(*a, **kw)
            finally:
                if b is not None and b.limit is not None:
                    seen[kind].append((b.used - u0, time.process_time() - c0))
        setattr(mod, name, run)

    wrap(_passes, "dp_front", "dp", lambda a, kw: (a[1] if len(a) > 1 else kw.get("options")).budget)
    wrap(_passes, "replicated_front", "replicated", lambda a, kw: kw.get("budget"))
    wrap(_relax, "lagrangian_period_bound", "relax", lambda a, kw: kw.get("budget"))
    wrap(_relax, "relaxed_period_bound", "relax", lambda a, kw: kw.get("budget"))
    problems = [prepare(m, soc).problem for soc in socs for m in models]
    with _tf.TemporaryDirectory() as d:
        problems.append(read_block_table(branchy_block_table(Path(d) / "T.csv"), resolve_soc("amlogic_a311d")))
    for pr in problems:
        search(pr)
    print(f"\n{'pass':<11} {'runs':>4} {'median units/CPU s':>18} {'min':>10} {'max':>10}")
    for kind, xs in seen.items():
        r = [u / c for u, c in xs if c > 0.02 and u > 0]
        if r:
            print(f"{kind:<11} {len(r):>4} {statistics.median(r):>18.3g} {min(r):>10.3g} {max(r):>10.3g}")
    del _bounds


def period_curves(models, socs):
    """The least-period pass's counted work after each block (projection off), per model × SoC: whether it
    finished within its budget, the largest linear projection ``work × n / blocks done`` over its budget (below 1
    for every pass that finished, or :meth:`parapipe.search.budget.Budget.over_projected` would have stopped it),
    and for a pass that ran out, the block where the projection stops it now (of the block where it ran out)."""
    from parapipe.search import budget as _budget

    curve: list = []

    def record(self, done, total):
        curve.append((done, total, self.used, self.limit))
        return self.over()

    orig = _budget.Budget.over_projected
    _budget.Budget.over_projected = record
    print(f"{'model':<13} {'soc':<19} {'finished':>8} {'work':>9} {'limit':>9} {'max proj/limit':>14} "
          f"{'stops at (was)':>15}")
    try:
        for soc in socs:
            for m in models:
                curve.clear()
                prep = prepare(m, soc)
                res = search(prep.problem, terms=prep.terms)
                rep = res.info["spaces"].get("period")
                if not rep or not curve:
                    print(f"{m:<13} {soc:<19} {'not run':>8}")
                    continue
                ratios = [u * t / d / lim for d, t, u, lim in curve if lim]
                stop = next((d for (d, t, u, lim), r in zip(curve, ratios) if r > 1), None)
                finished = not rep.get("timed_out")
                print(f"{m:<13} {soc:<19} {'yes' if finished else 'no':>8} {int(curve[-1][2]):>9} "
                      f"{int(curve[-1][3] or 0):>9} {max(ratios):>14.2f} "
                      f"{'' if finished else f'{stop} ({curve[-1][0]})':>15}", flush=True)
    finally:
        _budget.Budget.over_projected = orig


def sequence_beams(pairs, beams=(8, 16, 32, 64, 128, 256), counts=(16, 64, 256)):
    """The relaxation's sequences (:mod:`parapipe.search.relaxed_sequences`) per beam and count, on each
    ``model/soc`` of ``pairs`` as the search builds them (the relaxation of the optimistic problem with the
    profile's dispatch terms, limited at the best period the search finds without them): the best evaluated
    period of the mappings returned and the CPU seconds of the call and their evaluations."""
    from parapipe.cost.evaluate import evaluate
    from parapipe.search.options import SearchOptions
    from parapipe.search.bounds import dispatch_table, optimistic_problem
    from parapipe.search.relaxation import Relaxed
    from parapipe.search.relaxed_sequences import relaxed_sequence_mappings
    from parapipe.search.transitions import StageCatalog
    from unittest import mock

    print(f"{'model':<13} {'soc':<19} {'without':>8} | per beam b and count c: best evaluated period ms / CPU s")
    for pair in pairs:
        model, soc = pair.split("/")
        prep = prepare(model, soc)
        with mock.patch("parapipe.search.api.relaxed_sequence_mappings", lambda *a, **k: []):
            res = search(prep.problem, SearchOptions(workers=1), terms=prep.terms)
        limit = min(p.evaluation.period_s for p in res.points if p.strategy == "parapipe")
        bound_problem = optimistic_problem(StageCatalog(prep.problem, None, prep.terms).problem)  # as search()
        rel = Relaxed(bound_problem, limit, dispatch=dispatch_table(prep.problem.pu_names, prep.terms))
        cells = []
        for beam in beams:
            for count in counts:
                t0 = time.process_time()
                got = relaxed_sequence_mappings(rel.dp, limit, (rel.lam, rel.h_probe), beam=beam, count=count)
                best = min((evaluate(prep.problem, m, prep.terms).period_s for _, m in got), default=None)
                cells.append(f"b{beam}/c{count} {'-' if best is None else f'{best * 1e3:.2f}'}/{time.process_time() - t0:.2f}")
        print(f"{model:<13} {soc:<19} {limit * 1e3:>8.2f} | " + "  ".join(cells), flush=True)


EVALUATE_SCRIPT = r"""
import sys, time
import parapipe.search.api as api
from parapipe.app.prepare import prepare
from parapipe.cost.evaluate import evaluate
from parapipe.search.options import SearchOptions

prep = prepare(sys.argv[1], sys.argv[2])
seen = []
real = api.evaluate


def spy(problem, mapping, terms=None):
    seen.append(mapping)
    return real(problem, mapping, terms)


api.evaluate = spy  # what the search's memo of evaluations misses: each mapping it evaluates, once
api.search(prep.problem, SearchOptions(workers=1), terms=prep.terms)
best = float("inf")
for _ in range(5):
    t = time.process_time()
    for m in seen:
        evaluate(prep.problem, m, prep.terms)
    best = min(best, time.process_time() - t)
print(len(seen), best)
"""


def evaluate_speed(pairs, before):
    """Item 7 of the module docstring: per MODEL/SOC pair, the CPU seconds of evaluating, with the profile's
    pipeline terms, every mapping the search evaluates (:func:`parapipe.cost.evaluate.evaluate`, best of 5), in
    this checkout and in ``before``'s (each in a subprocess of its own checkout), and their ratio."""
    checkouts = [ROOT] + ([Path(before).resolve()] if before else [])
    print(f"{'pair':<32} {'mappings':>8} " + " ".join(f"{'us/call ' + c.name:>16}" for c in checkouts)
          + ("  before/now" if before else ""))
    for pair in pairs:
        model, soc = pair.split("/")
        got = []
        for c in checkouts:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(c), str(c / "device_agents")]),
                   "PYTHONPYCACHEPREFIX": _pycache(c)}
            out = subprocess.run([sys.executable, "-c", EVALUATE_SCRIPT, model, soc], cwd=c, env=env,
                                 capture_output=True, text=True, check=True).stdout.split()
            got.append((int(out[0]), float(out[1])))
        line = f"{pair:<32} {got[0][0]:>8} " + " ".join(f"{t / max(n, 1) * 1e6:>16.1f}" for n, t in got)
        if before:
            line += f"  {got[1][1] / got[0][1] * got[0][0] / max(got[1][0], 1):>10.2f}x"
        print(line, flush=True)


def bundled_socs() -> list:
    from parapipe.soc import list_socs

    return list(list_socs())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--process-socs", default=None, help="profiles of the process table (default: every bundled one)")
    ap.add_argument("--socs", default="amlogic_a311d,black_sesame_a1000", help="profiles of --quality")
    ap.add_argument("--sizes", default="", help="synthetic table sizes of the scaling curve (e.g. 25,50,100)")
    ap.add_argument("--before", default=None, help="another checkout to time the DenseNet process in")
    ap.add_argument("--runs", type=int, default=5, help="DenseNet process runs per checkout (median; 0: no DenseNet line)")
    ap.add_argument("--quality", action="store_true", help="only the in-process quality and efficiency table")
    ap.add_argument("--rates", action="store_true", help="only measure the work rates of the search budgets")
    ap.add_argument("--sequence-beams", default="",
                    help="only the relaxation's sequences per beam and count on these MODEL/SOC pairs (comma-separated)")
    ap.add_argument("--evaluate", default="",
                    help="only the cost model's speed on the mappings a search evaluates, on these MODEL/SOC pairs "
                         "(comma-separated; with --before, next to that checkout's)")
    ap.add_argument("--period-curves", action="store_true",
                    help="only the least-period pass's work per block and its linear projection (every bundled SoC)")
    args = ap.parse_args()
    if args.evaluate:
        evaluate_speed(args.evaluate.split(","), args.before)
        return
    if args.sequence_beams:
        sequence_beams(args.sequence_beams.split(","))
        return
    if args.period_curves:
        period_curves(args.models.split(","), args.process_socs.split(",") if args.process_socs else bundled_socs())
        return
    if args.rates:
        rates(ZOO, ["amlogic_a311d", "black_sesame_a1000", "jetson_agx_orin"])
        return
    if args.quality:
        zoo_table(args.models.split(","), args.socs.split(","))
        return
    if args.sizes:
        scaling([int(s) for s in args.sizes.split(",")])
        return
    socs = args.process_socs.split(",") if args.process_socs else bundled_socs()
    process_table(args.models.split(","), socs)
    if args.runs > 0:
        densenet_line(args.before, args.runs)


if __name__ == "__main__":
    main()
