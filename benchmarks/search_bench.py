"""Search benchmark (issue: exact and scalable hierarchical mapping).

For the nine zoo models × the bundled A311D and A1000 profiles: search time, front size, best period against the
period lower bound, and the energy-efficiency gain of the throughput-optimal parapipe point over the
throughput-optimal pure-pipeline and non-pipelined-parallel points (throughput-optimal = least period, ties → least
energy; efficiency = inferences per joule). Then a scaling curve on synthetic block tables (search time vs blocks,
with time / n² to show the growth). Prints tables; run from the repository root:

    python benchmarks/search_bench.py [--models a,b] [--socs x,y] [--sizes 25,50,...] [--time-limit S]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from parapipe.cost.problem import MappingProblem  # noqa: E402
from parapipe.search.api import SearchOptions, search  # noqa: E402
from parapipe.workflow import prepare  # noqa: E402

ZOO = ["alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet", "vgg19",
       "zfnet512"]
PAPER_GAIN_VS_PIPELINE = 11.0  # %, Para-Pipe (reference publication), throughput-optimal configurations
PAPER_GAIN_VS_PARALLEL = 23.3  # %


def throughput_optimal(points, strategy):
    pts = [p for p in points if p.strategy == strategy]
    if not pts:
        return None
    return min(pts, key=lambda p: (round(p.evaluation.period_s, 12), p.evaluation.energy_j))


def gain_pct(ours, base):
    if base is None:
        return float("nan")
    return (base.evaluation.energy_j / ours.evaluation.energy_j - 1.0) * 100.0


def zoo_table(models, socs, time_limit):
    print(f"{'model':<13} {'soc':<19} {'blocks':>6} {'search s':>8} {'front':>5} {'period ms':>9} {'LB ms':>7} "
          f"{'gap %':>6} {'EE vs pipe %':>12} {'EE vs par %':>11}")
    per_soc = {}
    for soc in socs:
        for m in models:
            prep = prepare(m, soc)
            t0 = time.perf_counter()
            res = search(prep.problem, SearchOptions(time_limit_s=time_limit))
            dt = time.perf_counter() - t0
            best = throughput_optimal(res.points, "parapipe")
            gp = gain_pct(best, throughput_optimal(res.points, "pipeline"))
            ga = gain_pct(best, throughput_optimal(res.points, "parallel"))
            gap = (best.evaluation.period_s / res.bounds.period_lb_s - 1) * 100
            per_soc.setdefault(soc, []).append((m, dt, gap, gp, ga))
            print(f"{m:<13} {soc:<19} {prep.problem.n_blocks:>6} {dt:>8.2f} {len(res.front()):>5} "
                  f"{best.evaluation.period_s * 1e3:>9.2f} {res.bounds.period_lb_s * 1e3:>7.2f} {gap:>6.1f} "
                  f"{gp:>12.1f} {ga:>11.1f}", flush=True)
    print()
    allrows = [r for rows in per_soc.values() for r in rows]
    for soc, rows in per_soc.items():
        within = sum(1 for r in rows if r[2] <= 10.0)
        print(f"{soc}: {within}/{len(rows)} models within 10 % of the period lower bound; "
              f"mean search {statistics.mean(r[1] for r in rows):.2f} s, max {max(r[1] for r in rows):.2f} s")
    gp = [r[3] for r in allrows if np.isfinite(r[3])]
    ga = [r[4] for r in allrows if np.isfinite(r[4])]
    print(f"average energy-efficiency gain of throughput-optimal parapipe: vs pure pipeline "
          f"{statistics.mean(gp):.1f} % (paper {PAPER_GAIN_VS_PIPELINE} %), vs non-pipelined parallel "
          f"{statistics.mean(ga):.1f} % (paper {PAPER_GAIN_VS_PARALLEL} %)")


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


def scaling(sizes, time_limit):
    print(f"\n{'blocks':>6} {'search s':>9} {'DP s':>7} {'DP states':>9} {'front':>5} {'s / n^2 (x1e6)':>15}")
    for n in sizes:
        pr = synthetic(n)
        t0 = time.perf_counter()
        res = search(pr, SearchOptions(time_limit_s=time_limit))
        dt = time.perf_counter() - t0
        print(f"{n:>6} {dt:>9.2f} {res.stats['dp_s']:>7.2f} {int(res.stats['dp_states']):>9} {len(res.front()):>5} "
              f"{dt / n ** 2 * 1e6:>15.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--socs", default="amlogic_a311d,black_sesame_a1000")
    ap.add_argument("--sizes", default="25,50,100,200,300,500")
    ap.add_argument("--time-limit", type=float, default=5.0)
    args = ap.parse_args()
    zoo_table(args.models.split(","), args.socs.split(","), args.time_limit)
    scaling([int(s) for s in args.sizes.split(",")], args.time_limit)


if __name__ == "__main__":
    main()
