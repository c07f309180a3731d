"""Runtime adapters benchmark: OpenVINO vs ONNX Runtime on zoo stage sub-models (outputs and speed).

Run from the repository root (about 1 minute per model on a 2-core x86 machine)::

    python benchmarks/runtime_adapters_bench.py [--models inception_v1 squeezenet mobilenet_v2] [--stages 4]
        [--repeats 20] [--cpu 1]

Each model (the onnx wheel's light zoo models, whose constant weights blow activations up to 1e10, and the
generated mobilenet_v2 with seeded weights) is cut into ``--stages`` stages of about equal block counts
(:func:`parapipe.execution.build_plan`, one PU); every stage sub-model gets the input tensors the unsplit
model's earlier stages produce (run with ONNX Runtime) and runs once through each adapter of
``device_agents/ppexec/runtimes.py``, both on one thread pinned to ``--cpu``. Printed per stage:

- max |OV - ORT| over the stage's outputs, the same divided by the largest |ORT| of the output (scaled), and
  the largest element-wise relative difference among elements with |ORT| >= 1e-3 * max |ORT| (relative);
- the median time of ``--repeats`` runs of each runtime and their ratio (ORT / OV: > 1 means OpenVINO is
  faster). Machines here are shared: compare ratios, not absolute figures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # a checkout, not installed
sys.path.insert(0, os.path.join(ROOT, "device_agents"))  # the board-side package ppexec
from parapipe.graph.coarsen import coarsen  # noqa: E402
from parapipe.graph.opgraph import import_onnx  # noqa: E402
from parapipe.graph.zoo import load_model  # noqa: E402
from parapipe.execution import build_plan  # noqa: E402
from parapipe.mapping import Stage  # noqa: E402
from ppexec.plan import PUBinding  # noqa: E402
from ppexec.runtimes import ADAPTERS  # noqa: E402
from ppexec.session import pin_current_thread  # noqa: E402


def diffs(got: List[np.ndarray], ref: List[np.ndarray]) -> Dict[str, float]:
    """Max absolute, scaled (by max |ref| per tensor) and relative (|ref| >= 1e-3 max |ref|) differences."""
    out = {"abs": 0.0, "scaled": 0.0, "rel": 0.0}
    for a, b in zip(got, ref):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        err = np.abs(a - b)
        top = float(np.max(np.abs(b))) if b.size else 0.0
        out["abs"] = max(out["abs"], float(err.max(initial=0.0)))
        if top > 0:
            out["scaled"] = max(out["scaled"], float(err.max()) / top)
            big = np.abs(b) >= 1e-3 * top
            out["rel"] = max(out["rel"], float((err[big] / np.abs(b[big])).max(initial=0.0)))
    return out


def time_runner(runner, outputs: List[str], feeds: Dict[str, np.ndarray], repeats: int) -> float:
    """Median seconds of ``repeats`` runs after 3 warm-up runs."""
    times = []
    for i in range(repeats + 3):
        start = time.perf_counter()
        runner.run(outputs, feeds)
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def equal_stage_plan(name: str, n_stages: int, cpu: int):
    """``(opgraph, plan)``: zoo model ``name`` cut into ``n_stages`` stages of about equal block counts, all on one
    PU ``"pu"`` pinned to CPU ``cpu`` (also used by precision_tolerance_bench.py)."""
    og = import_onnx(load_model(name).model, name)
    bg = coarsen(og)
    names = [b.name for b in bg.blocks]
    cuts = [round(k * len(names) / n_stages) for k in range(n_stages + 1)]
    specs = [Stage(pus=["pu"], blocks=names[a:z], time_s=0.0) for a, z in zip(cuts, cuts[1:])]
    return og, build_plan(og, bg, specs, {"pu": PUBinding(cpus=(cpu,))})


def bench_model(name: str, n_stages: int, repeats: int, cpu: int) -> None:
    og, plan = equal_stage_plan(name, n_stages, cpu)
    (x,) = og.inputs
    tensors = {x: np.random.default_rng(0).standard_normal(og.tensors[x].shape).astype(np.float32)}
    binding = PUBinding(cpus=(cpu,), threads=1)
    rows = []

    def work():
        pin_current_thread("pu", (cpu,))
        for stage in plan.stages:
            for task in stage:
                feeds = {t: tensors[t] for t in task.inputs}
                ort_runner = ADAPTERS["onnxruntime"].load(task.model, binding, "pu")
                ov_runner = ADAPTERS["openvino"].load(task.model, binding, "pu")
                ref = ort_runner.run(task.outputs, feeds)
                got = ov_runner.run(task.outputs, feeds)
                d = diffs(got, ref)
                t_ort = time_runner(ort_runner, task.outputs, feeds, repeats)
                t_ov = time_runner(ov_runner, task.outputs, feeds, repeats)
                rows.append((task.name, len(task.model.graph.node), d, t_ort, t_ov))
                tensors.update(zip(task.outputs, ref))
                ort_runner.close()
                ov_runner.close()

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    print(f"\n{name}: {n_stages} stages, 1 thread pinned to CPU {cpu}, {repeats} timed runs each")
    print(f"{'task':<12}{'nodes':>6}{'max abs':>11}{'scaled':>11}{'relative':>11}{'ORT ms':>9}{'OV ms':>9}"
          f"{'ORT/OV':>8}")
    for task, nodes, d, t_ort, t_ov in rows:
        print(f"{task:<12}{nodes:>6}{d['abs']:>11.2e}{d['scaled']:>11.2e}{d['rel']:>11.2e}{t_ort * 1e3:>9.2f}"
              f"{t_ov * 1e3:>9.2f}{t_ort / t_ov:>8.2f}")
    total_ort, total_ov = sum(r[3] for r in rows), sum(r[4] for r in rows)
    print(f"{'all stages':<12}{'':>6}{max(r[2]['abs'] for r in rows):>11.2e}"
          f"{max(r[2]['scaled'] for r in rows):>11.2e}{max(r[2]['rel'] for r in rows):>11.2e}"
          f"{total_ort * 1e3:>9.2f}{total_ov * 1e3:>9.2f}{total_ort / total_ov:>8.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["inception_v1", "squeezenet", "mobilenet_v2"])
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cpu", type=int, default=1)
    args = parser.parse_args(argv)
    probe = ADAPTERS["openvino"].probe()
    if not probe["available"]:
        print(probe["reason"], file=sys.stderr)
        return 2
    print(f"OpenVINO {probe['version']}, ONNX Runtime {ADAPTERS['onnxruntime'].probe()['version']}")
    for name in args.models:
        bench_model(name, args.stages, args.repeats, args.cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
