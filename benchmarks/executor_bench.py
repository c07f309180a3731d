"""Executor benchmark: pipelined inception_v1 vs plain ONNX Runtime, and the cost of one stage hop.

Run from the repository root::

    python benchmarks/executor_bench.py [--frames 60] [--hops 1 2 4 8] [--trace out/inception_trace.json]

Prints two tables (stderr is left to logging):

1. inception_v1 (the onnx wheel's light zoo model): throughput of one ORT session with 1 and 2 intra-op
   threads, of a two-stage pipeline cut at the Concat that best balances FLOPs (one stage per core), and of
   one stage whose Inception branches are spread over both cores (LPT by FLOPs: intra-stage parallelism
   only). Outputs are checked against the unsplit model (max abs diff). Ratios to ORT 1 thread are the
   figure to compare: machines here are shared.
2. Identity hops: a chain of k one-Identity stages (alternating cpu0/cpu1) on a [1, 16] float tensor: the
   saturated throughput, and the latency of single frames through an idle pipeline (one frame per run); the
   per-hop overhead is the growth of that median latency per extra stage, (p50(k) - p50(1)) / (k - 1).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper

from parapipe.runtime import (ExecutionPlan, PipelineExecutor, PUBinding, StageSpec, Task, build_plan,
                              max_abs_diff,
                              reference_outputs, run_pipeline, write_chrome_trace)
from parapipe.runtime.session import create_session

BINDINGS = {"cpu0": PUBinding(cpus=(0,)), "cpu1": PUBinding(cpus=(1,))}


def ort_throughput(model: onnx.ModelProto, frames: List[Dict[str, np.ndarray]], threads: int,
                   warmup: int = 5) -> float:
    """Frames per second of one session with ``threads`` intra-op threads, unpinned."""
    sess = create_session(model, PUBinding(cpus=None, threads=threads), "CPUExecutionProvider")
    names = [i.name for i in sess.get_inputs()]
    for f in frames[:warmup]:
        sess.run(None, {n: f[n] for n in names})
    t0 = time.perf_counter()
    for f in frames:
        sess.run(None, {n: f[n] for n in names})
    return len(frames) / (time.perf_counter() - t0)


def balanced_concat_cut(og, bg) -> int:
    """Index k into ``bg.blocks``: blocks[:k] form stage 0, ending just after the Concat block that best
    balances FLOPs between the two sides."""
    total = sum(b.flops for b in bg.blocks)
    best, best_gap, prefix = None, float("inf"), 0.0
    for i, b in enumerate(bg.blocks):
        prefix += b.flops
        if "Concat" in b.op_types and abs(2 * prefix - total) < best_gap:
            best, best_gap = i + 1, abs(2 * prefix - total)
    if best is None:
        raise SystemExit("the model has no Concat block to cut at")
    return best


def fork_branches(bg) -> List[List[str]]:
    """Every branch of every fork of the block graph: the blocks from a fork's successor up to (not including)
    the next join (a block with several predecessors)."""
    branches = []
    for block in bg.blocks:
        heads = sorted(bg.graph.successors(block.name), key=bg.index.__getitem__)
        if len(heads) < 2:
            continue
        for head in heads:
            branch, x = [], head
            while bg.graph.in_degree(x) == 1:
                branch.append(x)
                succ = list(bg.graph.successors(x))
                if len(succ) != 1:
                    break
                x = succ[0]
            if branch:
                branches.append(branch)
    return branches


def lpt_branch_split(bg, blocks: List[str], pus=("cpu0", "cpu1")) -> Dict[str, str]:
    """Block -> PU for one stage holding ``blocks``: each fork's branches go to the PU least loaded by that
    fork's branches so far, largest first (LPT per fork); blocks outside branches go to the first PU."""
    inside = set(blocks)
    flops = {b.name: b.flops for b in bg.blocks}
    assignment = {b: pus[0] for b in blocks}
    by_fork: Dict[str, List[List[str]]] = {}
    for branch in fork_branches(bg):
        if set(branch) <= inside:
            fork = next(iter(bg.graph.predecessors(branch[0])))
            by_fork.setdefault(fork, []).append(branch)
    for fork in by_fork:  # forks run one after the other: balance each on its own
        load = {pu: 0.0 for pu in pus}
        for branch in sorted(by_fork[fork], key=lambda br: -sum(flops[b] for b in br)):
            pu = min(pus, key=load.__getitem__)
            load[pu] += sum(flops[b] for b in branch)
            assignment.update({b: pu for b in branch})
    return assignment


def inception_plans(og, bg):
    """(two stages cut at the balanced Concat, one per core; one stage with every module's branches split
    over both cores)."""
    k = balanced_concat_cut(og, bg)
    names = [b.name for b in bg.blocks]
    s0, s1 = names[:k], names[k:]
    pipe = [StageSpec(["cpu0"], {b: "cpu0" for b in s0}, s0),
            StageSpec(["cpu1"], {b: "cpu1" for b in s1}, s1)]
    par = [StageSpec(["cpu0", "cpu1"], lpt_branch_split(bg, names), names)]
    return build_plan(og, bg, pipe, BINDINGS), build_plan(og, bg, par, BINDINGS)


def identity_chain_plan(k: int) -> ExecutionPlan:
    """k one-Identity stages t0 -> t1 -> ... -> tk, stage i on cpu(i % 2)."""
    stages = []
    for i in range(k):
        node = helper.make_node("Identity", [f"t{i}"], [f"t{i + 1}"], name=f"id{i}")
        graph = helper.make_graph([node], "id",
                                  [helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT, [1, 16])],
                                  [helper.make_tensor_value_info(f"t{i + 1}", TensorProto.FLOAT, [1, 16])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        stages.append([Task(f"id{i}", i, f"cpu{i % 2}", model, [f"t{i}"], [f"t{i + 1}"], [])])
    return ExecutionPlan(stages, ["t0"], [f"t{k}"], dict(BINDINGS))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--hops", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hop-frames", type=int, default=2000, help="frames of the saturated hop runs")
    parser.add_argument("--idle-frames", type=int, default=200, help="one-frame runs for the idle latency")
    parser.add_argument("--trace", default=None, help="write the two-stage run's Chrome trace here")
    args = parser.parse_args(argv)

    from parapipe.graph.coarsen import coarsen
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.zoo import load_model

    og = import_onnx(load_model("inception_v1").model, "inception_v1")
    bg = coarsen(og)
    (name,) = og.inputs
    shape = og.tensors[name].shape
    rng = np.random.default_rng(0)
    frames = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(args.frames)]
    ref = reference_outputs(og.model, frames)
    pipe, par = inception_plans(og, bg)

    rows = [("ORT, 1 thread", ort_throughput(og.model, frames, 1), 0.0, float("nan")),
            ("ORT, 2 threads", ort_throughput(og.model, frames, 2), 0.0, float("nan"))]
    for label, plan in (("2 stages (cpu0 | cpu1)", pipe), ("1 stage, branches split (LPT)", par)):
        outs, m = run_pipeline(plan, frames, warmup=5)
        rows.append((label, m.throughput_per_s, max_abs_diff(outs, ref), m.latency_p50_s))
        if args.trace and plan is pipe:
            write_chrome_trace(m, args.trace)
        print(f"# {label}: stage busy ms {[round(b * 1e3, 2) for b in m.stage_busy_s]}, utilisation "
              f"{ {p: round(u, 2) for p, u in m.pu_utilisation.items()} }, "
              f"tasks {[len(s) for s in plan.stages]}")
    base = rows[0][1]
    print(f"{'inception_v1, ' + str(args.frames) + ' frames':34s} {'inf/s':>8s} {'x ORT-1':>8s} "
          f"{'p50 ms':>8s} {'max|diff|':>10s}")
    for label, tput, diff, p50 in rows:
        print(f"{label:34s} {tput:8.1f} {tput / base:8.2f} {p50 * 1e3:8.1f} {diff:10.2e}")

    print(f"\n{'Identity hops':14s} {'frames/s':>10s} {'idle p50 us':>12s} {'idle p90 us':>12s} "
          f"{'us/hop':>8s}")
    p50_1 = None
    x = {"t0": np.ones((1, 16), np.float32)}
    for k in args.hops:
        plan = identity_chain_plan(k)
        _, m = run_pipeline(plan, [x] * args.hop_frames, warmup=50)
        with PipelineExecutor(plan) as ex:  # idle pipeline: one frame per run
            idle = []
            for _ in range(args.idle_frames):
                list(ex.run([x]))
                idle.append(ex.metrics.latency_s[0])
        p50, p90 = np.percentile(idle[10:], [50, 90])
        if k == 1:
            p50_1 = p50
        per_hop = (p50 - p50_1) / (k - 1) if (p50_1 is not None and k > 1) else float("nan")
        print(f"{k:14d} {m.throughput_per_s:10.0f} {p50 * 1e6:12.0f} {p90 * 1e6:12.0f} {per_hop * 1e6:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
