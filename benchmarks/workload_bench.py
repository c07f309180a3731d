"""Workload search on the bundled A311D and AGX Orin profiles: for three pairs of zoo models and one three-model
workload, the front's best-throughput and best-energy points against the baselines (a) separate, (b) split,
(c) whole — workload throughput (workload frames/s), energy per workload frame (mJ) and the ratios.

    python benchmarks/workload_bench.py [--socs amlogic_a311d,jetson_agx_orin] [--quick]

Predictions of the cost model (no board is run), with the CLI's search options; search time in process CPU
seconds (the models' preparation excluded). ``--quick``: one pair per SoC.
"""
from __future__ import annotations

import argparse
import sys
import time

from parapipe.app.workload import WorkloadSpec, prepare_workload
from parapipe.search.options import SearchOptions
from parapipe.search.workload import workload_search

PAIRS = [("inception_v1", "squeezenet"), ("resnet50", "shufflenet"), ("densenet121", "alexnet")]
TRIPLE = ("squeezenet", "shufflenet", "mobilenet_v2")


def run(soc: str, models, rates, options: SearchOptions) -> None:
    spec = WorkloadSpec(list(models), list(rates), [None] * len(models), [None] * len(models))
    preps = prepare_workload(spec, soc)
    t0, c0 = time.perf_counter(), time.process_time()
    res = workload_search([p.problem for p in preps], spec.rates, options, terms=preps[0].terms)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    best_t, best_e = res.best("throughput"), res.best("energy")
    print(f"\n{' + '.join(f'{r:g}x{m}' for m, r in zip(models, rates))} on {soc}: search {cpu:.1f} s CPU "
          f"({wall:.1f} s wall; the models' single-model searches {res.info['model_search_s']:.1f} s wall of it), "
          f"exact {res.info['exact']}, period bound {res.period_lb_s * 1e3:.2f} ms "
          f"(gap of the best-throughput point {best_t.evaluation.period_s / res.period_lb_s - 1:.0%})")
    print(f"  {'point':<16} {'wl/s':>8} {'mJ/wl':>8}   {'thr vs front-best':>17} {'energy vs front-best-E':>22}")
    for name, p in [("front best-thr", best_t), ("front best-E", best_e)] + [
            (b.strategy, b) for b in res.points if b.strategy != "parapipe"]:
        ev = p.evaluation
        print(f"  {name:<16} {ev.throughput_per_s:>8.2f} {ev.energy_j * 1e3:>8.1f}   "
              f"{best_t.evaluation.throughput_per_s / ev.throughput_per_s:>16.2f}x "
              f"{ev.energy_j / best_e.evaluation.energy_j:>21.2f}x")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socs", default="amlogic_a311d,jetson_agx_orin")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    options = SearchOptions()  # the CLI's defaults
    print("columns: workload frames/s, energy per workload frame; ratios: front best-throughput point's "
          "throughput / this point's, and this point's energy / front best-energy point's")
    for soc in args.socs.split(","):
        for pair in PAIRS[:1] if args.quick else PAIRS:
            run(soc, pair, (1.0, 1.0), options)
        if not args.quick:
            run(soc, TRIPLE, (1.0, 2.0, 1.0), options)


if __name__ == "__main__":
    main()
