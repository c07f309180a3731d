"""Precision tolerance benchmark: how far stage outputs computed at a lower precision land from fp32.

Run from the repository root (about 1 minute per model on a 2-core x86 machine)::

    python benchmarks/precision_tolerance_bench.py [--precision bf16] [--runtime openvino]
        [--models squeezenet inception_v1 mobilenet_v2] [--stages 4] [--cpu 1]

Each model (the onnx wheel's light zoo models and the generated mobilenet_v2 with seeded weights) is cut into
``--stages`` stages of about equal block counts (:func:`parapipe.execution.build_plan`). Two chains run on one
thread pinned to ``--cpu``: every stage through ONNX Runtime at fp32 (the reference, as the unsplit model), and
every stage through ``--runtime`` bound with ``precision=--precision``, each stage fed the tensors the SAME chain
produced (errors carry through, as in a pipeline whose PUs all compute at that precision: the worst case of a
mixed plan). Printed per stage: the precision the runtime read back, and the largest ``max|low - ref| /
max|ref|`` over the stage's outputs (how :func:`ppexec.reference.within_tolerance` scales a tensor's error);
a Softmax output is printed apart (its error is bounded through its input, :func:`ppexec.reference.softmax_bound`).
``ppexec.precision.PRECISION_RTOL`` is set from the largest figure over the models (with a margin).
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # a checkout, not installed
sys.path.insert(0, os.path.join(ROOT, "device_agents"))  # the board-side package ppexec
from ppexec.plan import PUBinding  # noqa: E402
from ppexec.runtimes import ADAPTERS  # noqa: E402
from ppexec.session import pin_current_thread  # noqa: E402
from runtime_adapters_bench import equal_stage_plan  # noqa: E402  (this folder: run as a script)


def scaled(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (the absolute difference where ref is all zeros)."""
    a, b = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    top = float(np.max(np.abs(b))) if b.size else 0.0
    err = float(np.max(np.abs(a - b))) if b.size else 0.0
    return err / top if top > 0 else err


def bench_model(name: str, n_stages: int, cpu: int, runtime: str, precision: str) -> float:
    og, plan = equal_stage_plan(name, n_stages, cpu)
    softmax = {n.output[0] for n in og.model.graph.node if n.op_type in ("Softmax", "LogSoftmax")}
    (x,) = og.inputs
    frame = {x: np.random.default_rng(0).standard_normal(og.tensors[x].shape).astype(np.float32)}
    ref_tensors, low_tensors = dict(frame), dict(frame)
    fp32 = PUBinding(cpus=(cpu,), threads=1)
    low = PUBinding(cpus=(cpu,), threads=1, runtime=runtime, precision=precision)
    rows: List[tuple] = []

    def work():
        pin_current_thread("pu", (cpu,))
        for stage in plan.stages:
            for task in stage:
                ref_runner = ADAPTERS["onnxruntime"].load(task.model, fp32, "pu")
                low_runner = ADAPTERS[runtime].load(task.model, low, "pu")
                ref = ref_runner.run(task.outputs, {t: ref_tensors[t] for t in task.inputs})
                got = low_runner.run(task.outputs, {t: low_tensors[t] for t in task.inputs})
                ref_tensors.update(zip(task.outputs, ref))
                low_tensors.update(zip(task.outputs, got))
                plain = [scaled(g, r) for t, g, r in zip(task.outputs, got, ref) if t not in softmax]
                soft = [scaled(g, r) for t, g, r in zip(task.outputs, got, ref) if t in softmax]
                rows.append((task.name, low_runner.describe()["precision"], max(plain, default=0.0),
                             max(soft, default=None)))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    print(f"\n{name}: {n_stages} stages through {runtime} at {precision} vs ONNX Runtime fp32, CPU {cpu}")
    print(f"{'task':<12}{'ran':>6}{'scaled':>11}{'softmax':>11}")
    for task, ran, worst, soft in rows:
        print(f"{task:<12}{ran:>6}{worst:>11.2e}{'' if soft is None else format(soft, '.2e'):>11}")
    return max(r[2] for r in rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["squeezenet", "inception_v1", "mobilenet_v2"])
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--runtime", default="openvino")
    parser.add_argument("--precision", default="bf16", choices=["fp16", "bf16"])
    args = parser.parse_args(argv)
    probe = ADAPTERS[args.runtime].probe()
    if not probe["available"]:
        print(probe["reason"], file=sys.stderr)
        return 2
    worst: Dict[str, float] = {}
    for name in args.models:
        worst[name] = bench_model(name, args.stages, args.cpu, args.runtime, args.precision)
    print("\nlargest scaled difference (Softmax outputs apart): "
          + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()) + f"; overall {max(worst.values()):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
