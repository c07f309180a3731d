"""DVFS benchmark: energy per inference of the front over mappings × operating points, at equal throughput.

Per SoC profile and zoo model, two searches with the CLI's defaults: ``--operating-points max`` (every PU at its
highest point: the front without DVFS) and the default ``auto``. Printed:

* search time of each (CPU seconds) and their ratio (goal: auto within 1.5× of max);
* the energy per inference of the DVFS front against the maximum-frequency front at equal throughput: with ``X``
  the best throughput of the max front, at ``X``, 75 % and 50 % of ``X``, the least energy among the points at
  least that fast, each front (saving in %);
* against each baseline at its own best operating points (pipeline, parallel, single, replicated, and the
  governors performance and schedutil on the best-throughput mapping): at the baseline's best throughput, the
  least energy of the DVFS front at least as fast against the baseline's least energy at that throughput
  (energy-efficiency gain of parapipe, inferences per joule, in %).

Run from the repository root (profiles: bundled names or YAML paths)::

    python benchmarks/dvfs_bench.py [--models a,b] [--socs amlogic_a311d,jetson_agx_orin]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from parapipe.app.prepare import prepare  # noqa: E402
from parapipe.search.options import SearchOptions  # noqa: E402
from parapipe.search.api import search  # noqa: E402

ZOO = ["alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet", "vgg19",
       "zfnet512"]
BASELINES = ["pipeline", "parallel", "single", "replicated", "performance", "schedutil"]
LEVELS = (1.0, 0.75, 0.5)


def least_energy(points, throughput):
    """Least energy (J) among ``points`` with throughput >= ``throughput`` (1e-9 relative slack), or None."""
    got = [p.evaluation.energy_j for p in points if 1.0 / p.evaluation.period_s >= throughput * (1 - 1e-9)]
    return min(got) if got else None


def family(result, name):
    if name in ("performance", "schedutil"):
        return [p for p in result.points if p.strategy == "governor" and p.id == name]
    return [p for p in result.points if p.strategy == name]


def pct(a, b):
    """Saving of ``b`` against ``a`` in % (None when either is missing)."""
    return None if a is None or b is None else 100.0 * (1 - b / a)


def gain(base, ours):
    """Energy-efficiency gain (inferences per joule) of ``ours`` over ``base``, %."""
    return None if base is None or ours is None else 100.0 * (base / ours - 1)


def fmt(x):
    return "   –" if x is None else f"{x:+5.1f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--socs", default="amlogic_a311d,jetson_agx_orin")
    args = ap.parse_args(argv)
    head = (f"{'soc':<16} {'model':<13} {'max s':>6} {'auto s':>6} {'ratio':>5} | "
            + " ".join(f"{'@' + str(int(100 * lv)) + '%':>6}" for lv in LEVELS) + " | "
            + " ".join(f"{b[:8]:>8}" for b in BASELINES))
    print("energy saving of the DVFS front vs the max-frequency front at equal throughput (%), and "
          "energy-efficiency gain of the DVFS front vs each baseline at its best operating points (%)")
    print(head)
    ratios = []
    for soc in args.socs.split(","):
        for model in args.models.split(","):
            pr = prepare(model, soc).problem
            t = time.process_time()
            top = search(pr, SearchOptions(operating_points="max"))
            t_max = time.process_time() - t
            t = time.process_time()
            dv = search(pr)
            t_auto = time.process_time() - t
            ratios.append(t_auto / t_max)
            top_front, dv_front = top.front(), dv.front()
            x = max(1.0 / p.evaluation.period_s for p in top_front)
            saves = [pct(least_energy(top_front, lv * x), least_energy(dv_front, lv * x)) for lv in LEVELS]
            gains = []
            for b in BASELINES:
                fam = family(dv, b)
                if not fam:
                    gains.append(None)
                    continue
                xb = max(1.0 / p.evaluation.period_s for p in fam)
                gains.append(gain(least_energy(fam, xb), least_energy(dv_front, xb)))
            name = Path(soc).stem
            print(f"{name:<16} {model:<13} {t_max:6.2f} {t_auto:6.2f} {t_auto / t_max:5.2f} | "
                  + " ".join(f"{fmt(s):>6}" for s in saves) + " | " + " ".join(f"{fmt(g):>8}" for g in gains),
                  flush=True)
            ops = dv.info.get("operating_points", {})
            if ops.get("bounded_by"):
                print(f"{'':<31}operating points: {ops.get('where')}, {ops.get('bounded_by')}")
    if ratios:
        print(f"search time auto / max: median {sorted(ratios)[len(ratios) // 2]:.2f}, worst {max(ratios):.2f}")


if __name__ == "__main__":
    main()
