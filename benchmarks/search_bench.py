"""Search benchmark: quality, bounds, energy efficiency and speed of the search with the CLI's defaults.

1. For the nine zoo models × the bundled A311D and A1000 profiles: search time, front size, whether the front is
   exact, the best period next to its lower bound (gap, or ``proved optimal``) and the bound's method, and the
   energy-efficiency gains of parapipe over the pure-pipeline and non-pipelined-parallel baselines, both
   throughput-optimal against throughput-optimal (the Para-Pipe paper's comparison) and at equal throughput
   (per baseline, the most efficient parapipe point at least as fast; :mod:`experiments.tables`).
2. The whole ``parapipe optimize densenet121 --soc black_sesame_a1000 --no-plot`` process, median of runs, next to
   the same command in another checkout (``--before DIR``), with the ratio; the goal is at most 2 s.
3. A scaling curve on synthetic block tables (search time vs blocks, with time / n²).
4. ``--rates``: the work rates of :mod:`parapipe.search.budget` (units of counted work per CPU second of each
   budgeted pass: PU-reuse and least-period DP, replicated pass, bound relaxation), median over the zoo models ×
   the bundled profiles and a seeded 40-block table with parallel branches (tests/search_cases.py); CPU seconds
   (``time.process_time``) so a loaded machine measures the same rates.

Run from the repository root::

    python benchmarks/search_bench.py [--models a,b] [--socs x,y] [--sizes 25,50,...] [--before DIR] [--runs N]
    python benchmarks/search_bench.py --rates
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

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
PROCESS_TARGET_S = 2.0  # project target: DenseNet-121 on the A1000, whole process


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


def process_time(checkout: Path, runs: int) -> float:
    """Median wall time of the whole DenseNet-121 / A1000 optimize process run from ``checkout``, seconds."""
    times = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "parapipe", "optimize", "densenet121", "--soc",
                            "black_sesame_a1000", "--no-plot", "--out", out], cwd=checkout, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def process_table(before, runs):
    now = process_time(ROOT, runs)
    line = f"\nDenseNet-121 on black_sesame_a1000, whole 'parapipe optimize --no-plot' process (median of {runs}): " \
           f"{now:.2f} s (goal <= {PROCESS_TARGET_S:.0f} s)"
    if before:
        then = process_time(Path(before), runs)
        line += f"; before ({before}) {then:.2f} s; ratio before/now {then / now:.2f}x"
    print(line)


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--socs", default="amlogic_a311d,black_sesame_a1000")
    ap.add_argument("--sizes", default="25,50,100,200,300,500")
    ap.add_argument("--before", default=None, help="another checkout to time the DenseNet process in")
    ap.add_argument("--runs", type=int, default=5, help="process runs per checkout (median)")
    ap.add_argument("--rates", action="store_true", help="only measure the work rates of the search budgets")
    args = ap.parse_args()
    if args.rates:
        rates(ZOO, ["amlogic_a311d", "black_sesame_a1000", "jetson_agx_orin"])
        return
    zoo_table(args.models.split(","), args.socs.split(","))
    process_table(args.before, args.runs)
    if args.sizes:
        scaling([int(s) for s in args.sizes.split(",")])


if __name__ == "__main__":
    main()
