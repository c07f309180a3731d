"""Executor benchmark: parapipe's best-throughput host mappings vs plain ONNX Runtime, the cost of a stage
hop, and a long soak.

Run from the repository root (about 5 minutes on the 2-core machine, plus the soak)::

    python benchmarks/executor_bench.py [--models inception_v1 squeezenet resnet50] [--frames 100]
        [--repeats 3] [--soak 10000] [--trace out/inception_trace.json]

Prints (stderr is left to logging):

1. Per model (the onnx wheel's light zoo models): throughput of one ORT session with 1 and with 2 intra-op
   threads (unpinned), and of parapipe's best-throughput mapping for ``--soc host`` (this machine measured
   with :func:`parapipe.workflow.prepare`, searched with :func:`parapipe.search.api.search`, run by the
   pipelined executor). The three run interleaved, ``--repeats`` times each; the table gives the median and
   the spread ((max - min) / median) of each, the ratios of the medians, parapipe's predicted throughput
   (1 / period_s) and measured / predicted, and the largest difference to the unsplit model: of the model's
   outputs (absolute) and of every tensor a task hands on (relative to its largest magnitude; the light zoo
   models have constant weights, so their final outputs do not depend on the input and check little alone).
   A ratio is only meaningful when both match. Machines here are shared: compare ratios, not absolute figures.
2. Why measured and predicted differ, per stage: the predicted stage time (the cost model on the host
   profile's block times), the stage's sub-model timed alone on its core (same session settings), and its
   busy time per frame inside the pipeline; plus the whole model's 1-thread time against the sum of its block
   times (what splitting a model into per-block sessions costs in the profile).
3. Identity hops: a chain of k one-Identity stages (alternating cpu0/cpu1) on a [1, 16] float tensor: the
   saturated throughput, and the latency of single frames through an idle pipeline (one frame per run); the
   per-hop overhead is the growth of that median latency per extra stage, (p50(k) - p50(1)) / (k - 1).
4. ``--soak N``: N frames of the first model's mapping through one executor (runs of ``--soak-chunk`` frames,
   distinct frames fed cyclically): every output and every handed-over tensor compared with the unsplit
   model's for its frame (an out-of-order output is a mismatch), and the process RSS after each run (first
   run, last, growth after the first run, least-squares slope per 1000 frames).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_REPO, os.path.join(_REPO, "device_agents")]  # this checkout (parapipe, ppexec), not installed
from ppexec import (ExecutionPlan, PipelineExecutor, PUBinding, Task, max_abs_diff,  # noqa: E402
                    reference_outputs, run_pipeline)
from ppexec.bundle_run import run_bundle  # noqa: E402
from ppexec.reference import handed_over_tensors, max_scaled_diff, with_outputs  # noqa: E402
from ppexec.session import create_session, pin_current_thread  # noqa: E402

from parapipe.deploy.bundle import build_bundle  # noqa: E402
from parapipe.runtime.reference import reference_with_outputs  # noqa: E402

BINDINGS = {"cpu0": PUBinding(cpus=(0,)), "cpu1": PUBinding(cpus=(1,))}
DISTINCT_FRAMES = 8  # distinct inputs, fed cyclically (the reference runs once on each)


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


def best_throughput_mapping(model: str, time_limit_s: float):
    """Measure this host for ``model``, search, and load the best-throughput point as a LoadedMapping."""
    from parapipe.mapping import doc_from_result, write_pareto
    from parapipe.runtime.mapping import load_mapping
    from parapipe.search.api import SearchOptions, search
    from parapipe.soc.resolve import soc_ref
    from parapipe.workflow import prepare

    t0 = time.perf_counter()
    prep = prepare(model, "host")
    result = search(prep.problem, SearchOptions(time_limit_s=time_limit_s, seed=0))
    blocks = {b.name: list(b.ops) for b in prep.block_graph.blocks}
    doc = doc_from_result(result, prep.loaded.name, prep.loaded.sha256, soc_ref(prep.soc), blocks=blocks,
                          search={"max_blocks": prep.max_blocks, "seed": 0})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pareto.json")
        write_pareto(doc, path)
        mapping = load_mapping(model, path, "best-throughput")
    return mapping, prep, time.perf_counter() - t0


def make_frames(og, n: int, seed: int = 0) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    pool = [{name: rng.standard_normal(og.tensors[name].shape).astype(og.tensors[name].dtype)
             for name in og.inputs} for _ in range(DISTINCT_FRAMES)]
    return [pool[i % DISTINCT_FRAMES] for i in range(n)]


def standalone_task_s(task: Task, og, cpu: int, repeats: int = 20, warmup: int = 3) -> float:
    """Median time of one task's sub-model alone on ``cpu`` (a pinned thread, the executor's session)."""
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(og.tensors[n].shape).astype(og.tensors[n].dtype) for n in task.inputs}
    box = {}

    def body():
        pin_current_thread(task.pu, (cpu,))
        sess = create_session(task.model, PUBinding(cpus=(cpu,)), "CPUExecutionProvider")
        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            sess.run(task.outputs, feeds)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        box["s"] = statistics.median(times)

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    return box["s"]


def measured_best_cut(mapping, repeats: int, lo: float = 0.2, hi: float = 0.8):
    """The two-stage cut (cpu0 | cpu1) whose slower stage is fastest, by timing the stage sub-models alone.

    Candidates are the prefixes of the blocks' topological order holding ``lo``..``hi`` of the FLOPs. Returns
    ``(plan, k, stage0_s, stage1_s)``: the plan, blocks in stage 0, and the two stages' times alone.
    """
    from parapipe.runtime import StageSpec, build_plan

    og, bg = mapping.opgraph, mapping.block_graph
    names = [b.name for b in bg.blocks]
    total, prefix, best = sum(b.flops for b in bg.blocks), 0.0, None
    bindings = {"cpu0": PUBinding(cpus=(0,)), "cpu1": PUBinding(cpus=(1,))}
    for k, block in enumerate(bg.blocks[:-1], start=1):
        prefix += block.flops
        if not lo <= prefix / total <= hi:
            continue
        specs = [StageSpec(["cpu0"], {b: "cpu0" for b in names[:k]}, names[:k]),
                 StageSpec(["cpu1"], {b: "cpu1" for b in names[k:]}, names[k:])]
        plan = build_plan(og, bg, specs, bindings)
        t0 = standalone_task_s(plan.stages[0][0], og, 0, repeats)
        t1 = standalone_task_s(plan.stages[1][0], og, 1, repeats)
        if best is None or max(t0, t1) < max(best[2], best[3]):
            best = (plan, k, t0, t1)
    return best


def spread(values: List[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def bench_model(model: str, args) -> dict:
    mapping, prep, prep_s = best_throughput_mapping(model, args.time_limit)
    og, pt = mapping.opgraph, mapping.point
    reference, handed = reference_with_outputs(mapping.loaded.model, og, handed_over_tensors(mapping.plan))
    plan = with_outputs(mapping.plan, handed)
    outputs = list(mapping.plan.model_outputs)
    frames = make_frames(og, args.frames)
    ref = reference_outputs(reference, frames[:DISTINCT_FRAMES])
    ref = [ref[i % DISTINCT_FRAMES] for i in range(len(frames))]
    cut = measured_best_cut(mapping, args.cut_repeats) if args.measured_cut else None
    plans = {}
    bundle_dir = tempfile.TemporaryDirectory(prefix="parapipe-bench-")
    bundle = build_bundle(mapping, Path(bundle_dir.name) / "bundle")  # the run-and-verify 'parapipe run' uses
    if cut is not None:
        cut_handed = handed_over_tensors(cut[0])
        reference_cut, cut_handed = reference_with_outputs(mapping.loaded.model, og, cut_handed)
        ref_cut = reference_outputs(reference_cut, frames[:DISTINCT_FRAMES])
        plans["cut"] = with_outputs(cut[0], cut_handed)
    runs = {"ort1": [], "ort2": [], "pp": [], **{key: [] for key in plans}}
    diff = scaled = 0.0
    last = {}
    matched = True
    for _ in range(args.repeats):  # interleaved, so that load changes hit every configuration alike
        runs["ort1"].append(ort_throughput(og.model, frames, 1))
        runs["ort2"].append(ort_throughput(og.model, frames, 2))
        rep = run_bundle(str(bundle.folder), frames=len(frames), warmup=5, verify=False, idle_frames=0)
        runs["pp"].append(rep.throughput_per_s)
        diff, scaled = max(diff, rep.max_abs_diff), max(scaled, rep.max_scaled_diff)
        matched = matched and rep.outputs_match
        last["pp"] = rep
        for key, p in plans.items():
            outs, last[key] = run_pipeline(p, frames, warmup=5)
            runs[key].append(last[key].throughput_per_s)
            refs = [ref_cut[i % DISTINCT_FRAMES] for i in range(len(frames))]
            names = cut_handed
            diff = max(diff, max_abs_diff([{k: o[k] for k in outputs} for o in outs],
                                          [{k: r[k] for k in outputs} for r in refs]))
            scaled = max([scaled] + [max_scaled_diff(o, r, names) for o, r in zip(outs, refs)])
    last_pp = last["pp"]
    if args.trace and model == args.models[0]:
        shutil.copyfile(bundle.folder / last_pp.trace_file, args.trace)
    bundle_dir.cleanup()
    med = {k: statistics.median(v) for k, v in runs.items()}
    stages = []
    for s, (st, tasks) in enumerate(zip(pt.stages, plan.stages)):
        alone = (standalone_task_s(tasks[0], og, plan.bindings[tasks[0].pu].cpus[0])
                 if len(tasks) == 1 else float("nan"))
        stages.append({"pus": "+".join(st.pus), "blocks": len(st.blocks), "tasks": len(tasks),
                       "predicted_s": st.time_s, "alone_s": alone, "busy_s": last_pp.stage_busy_s[s]})
    whole_blocks_s = float(prep.problem.time_s.min(axis=1).sum())  # every block on its fastest PU
    return {"model": model, "med": med, "spread": {k: spread(v) for k, v in runs.items()}, "diff": diff,
            "scaled": scaled, "handed": len(handed), "outputs_match": matched,
            "predicted": 1.0 / pt.period_s, "point": pt.id, "stages": stages, "prep_s": prep_s,
            "whole_blocks_s": whole_blocks_s, "mapping": mapping, "utilisation": last_pp.pu_utilisation,
            "cut": None if cut is None else {"k": cut[1], "of": len(mapping.block_graph.blocks),
                                              "alone_s": (cut[2], cut[3]),
                                              "busy_s": list(last["cut"].stage_busy_s)}}


def print_models(results: List[dict], frames: int, repeats: int) -> None:
    print(f"\n1. best-throughput host mappings vs ONNX Runtime ({frames} frames, median of {repeats} "
          "interleaved runs; spread = (max - min) / median)")
    print(f"{'model':<13} {'ORT-1 /s':>9} {'ORT-2 /s':>9} {'parapipe /s':>11} {'x ORT-1':>8} {'x ORT-2':>8} "
          f"{'pred /s':>8} {'meas/pred':>9} {'max|diff|':>9} {'handed':>9} {'spread 1/2/pp':>15}  stages")
    for r in results:
        m, sp = r["med"], r["spread"]
        stages = " | ".join(st["pus"] for st in r["stages"])
        print(f"{r['model']:<13} {m['ort1']:9.1f} {m['ort2']:9.1f} {m['pp']:11.1f} "
              f"{m['pp'] / m['ort1']:8.2f} {m['pp'] / m['ort2']:8.2f} {r['predicted']:8.1f} "
              f"{m['pp'] / r['predicted']:9.2f} {r['diff']:9.1e} {r['scaled']:9.1e} "
              f"{sp['ort1'] * 100:4.0f}%/{sp['ort2'] * 100:3.0f}%/{sp['pp'] * 100:3.0f}%  {stages}")
    cuts = [r for r in results if r["cut"] is not None]
    if cuts:
        print("\n1b. the two-stage cut (cpu0 | cpu1) chosen by timing candidate stages alone (what the "
              "executor reaches with exact stage costs); predicted = 1 / the slower stage alone")
        print(f"{'model':<13} {'cut /s':>9} {'x ORT-1':>8} {'x ORT-2':>8} {'pred /s':>8} {'meas/pred':>9} "
              f"{'spread':>7}")
        for r in cuts:
            m, c = r["med"], r["cut"]
            pred = 1.0 / max(c["alone_s"])
            print(f"{r['model']:<13} {m['cut']:9.1f} {m['cut'] / m['ort1']:8.2f} {m['cut'] / m['ort2']:8.2f} "
                  f"{pred:8.1f} {m['cut'] / pred:9.2f} {r['spread']['cut'] * 100:6.0f}%")
    print("\n2. measured vs predicted, per stage (ms per frame): predicted = cost model on the host profile; "
          "alone = the stage's sub-model on its core by itself; busy = inside the pipeline")
    print(f"{'model':<13} {'stage':<10} {'blocks':>6} {'tasks':>5} {'predicted':>9} {'alone':>7} {'busy':>7}")
    for r in results:
        for s, st in enumerate(r["stages"]):
            print(f"{r['model']:<13} {s:<2}{st['pus']:<8} {st['blocks']:>6} {st['tasks']:>5} "
                  f"{st['predicted_s'] * 1e3:9.2f} {st['alone_s'] * 1e3:7.2f} {st['busy_s'] * 1e3:7.2f}")
        one = 1e3 / r["med"]["ort1"]
        c = r["cut"]
        if c is not None:
            print(f"{r['model']:<13} measured-best cut ({c['k']} of {c['of']} blocks on cpu0): alone "
                  f"{c['alone_s'][0] * 1e3:.2f} | {c['alone_s'][1] * 1e3:.2f} ms, busy "
                  f"{c['busy_s'][0] * 1e3:.2f} | {c['busy_s'][1] * 1e3:.2f} ms")
        print(f"{r['model']:<13} whole model, 1 thread: {one:.2f} ms; sum of its block times in the host "
              f"profile {r['whole_blocks_s'] * 1e3:.2f} ms ({r['whole_blocks_s'] * 1e3 / one:.2f}x); "
              f"utilisation {({p: round(u, 2) for p, u in r['utilisation'].items()})}")


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


def print_hops(hops: List[int], hop_frames: int, idle_frames: int) -> None:
    print(f"\n3. {'Identity hops':14s} {'frames/s':>10s} {'idle p50 us':>12s} {'idle p90 us':>12s} "
          f"{'us/hop':>8s}")
    p50_1 = None
    x = {"t0": np.ones((1, 16), np.float32)}
    for k in hops:
        plan = identity_chain_plan(k)
        _, m = run_pipeline(plan, [x] * hop_frames, warmup=50)
        with PipelineExecutor(plan) as ex:  # idle pipeline: one frame per run
            idle = []
            for _ in range(idle_frames):
                list(ex.run([x]))
                idle.append(ex.metrics.latency_s[0])
        p50, p90 = np.percentile(idle[10:], [50, 90])
        if k == 1:
            p50_1 = p50
        per_hop = (p50 - p50_1) / (k - 1) if (p50_1 is not None and k > 1) else float("nan")
        print(f"   {k:14d} {m.throughput_per_s:10.0f} {p50 * 1e6:12.0f} {p90 * 1e6:12.0f} "
              f"{per_hop * 1e6:8.0f}")


def rss_bytes() -> int:
    """Resident set size of this process (/proc/self/statm, field 2, in pages: proc(5))."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak(mapping, frames: int, chunk: int, atol: float = 1e-5) -> dict:
    """``frames`` frames through one executor in runs of ``chunk``; outputs checked, RSS sampled per run."""
    og = mapping.opgraph
    reference, handed = reference_with_outputs(mapping.loaded.model, og, handed_over_tensors(mapping.plan))
    plan, outputs = with_outputs(mapping.plan, handed), list(mapping.plan.model_outputs)
    pool = make_frames(og, DISTINCT_FRAMES, seed=3)
    ref = reference_outputs(reference, pool)
    done, mismatches, worst, samples, rates = 0, 0, 0.0, [], []
    with PipelineExecutor(plan) as ex:
        for _ in ex.run(pool):  # warm-up run
            pass
        while done < frames:
            n = min(chunk, frames - done)
            for i, out in enumerate(ex.run(pool[(done + j) % DISTINCT_FRAMES] for j in range(n))):
                expected = ref[(done + i) % DISTINCT_FRAMES]
                d = max_abs_diff([{k: out[k] for k in outputs}], [{k: expected[k] for k in outputs}])
                worst = max(worst, d)
                mismatches += d > atol or max_scaled_diff(out, expected, handed) > atol
            done += n
            rates.append(ex.metrics.throughput_per_s)
            samples.append((done, rss_bytes()))
    xs = np.array([s[0] for s in samples[1:]], float)
    ys = np.array([s[1] for s in samples[1:]], float)
    slope = float(np.polyfit(xs, ys, 1)[0]) if len(xs) >= 2 else float("nan")
    return {"frames": done, "mismatches": int(mismatches), "max_abs_diff": worst, "rss_first": samples[0][1],
            "rss_last": samples[-1][1], "rss_max": max(s[1] for s in samples),
            "growth_after_first": samples[-1][1] - samples[0][1], "slope_bytes_per_1000": slope * 1000,
            "throughput_median": statistics.median(rates), "runs": len(samples),
            "rss_mib": [round(rss / 2.0 ** 20, 1) for _, rss in samples]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["inception_v1", "squeezenet", "resnet50"],
                        help="models to compare (the soak runs the first)")
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=10.0, help="search time limit, s")
    parser.add_argument("--no-measured-cut", dest="measured_cut", action="store_false",
                        help="skip the two-stage cut chosen by timing candidate stages (the executor's reach "
                        "with exact stage costs)")
    parser.add_argument("--cut-repeats", type=int, default=8, help="timed runs per candidate stage")
    parser.add_argument("--hops", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hop-frames", type=int, default=2000, help="frames of the saturated hop runs")
    parser.add_argument("--idle-frames", type=int, default=200, help="one-frame runs for the idle latency")
    parser.add_argument("--soak", type=int, default=0, help="frames of the soak (0: no soak)")
    parser.add_argument("--soak-chunk", type=int, default=500, help="frames per run in the soak")
    parser.add_argument("--trace", default=None,
                        help="write the first model's last parapipe run as a Chrome trace")
    parser.add_argument("--skip-models", action="store_true", help="only the hops (and the soak)")
    args = parser.parse_args(argv)
    if not {0, 1} <= os.sched_getaffinity(0):
        raise SystemExit("the benchmark needs CPUs 0 and 1")
    print(f"# load average at start: {os.getloadavg()}")
    results = []
    if not args.skip_models or args.soak:
        for model in (args.models if not args.skip_models else args.models[:1]):
            t0 = time.perf_counter()
            results.append(bench_model(model, args))
            print(f"# {model}: measured the host and searched in {results[-1]['prep_s']:.1f} s, benchmarked "
                  f"in {time.perf_counter() - t0:.1f} s", flush=True)
        print_models(results, args.frames, args.repeats)
    print_hops(args.hops, args.hop_frames, args.idle_frames)
    if args.soak:
        r = soak(results[0]["mapping"], args.soak, args.soak_chunk)
        mib = 2.0 ** 20
        print(f"\n4. soak, {results[0]['model']} point {results[0]['point']}: {r['frames']} frames in "
              f"{r['runs']} runs of {args.soak_chunk}: {r['mismatches']} mismatched or out-of-order outputs "
              f"(max |diff| {r['max_abs_diff']:.1e}); median {r['throughput_median']:.1f} inf/s; RSS after "
              f"the first run {r['rss_first'] / mib:.1f} MiB, last {r['rss_last'] / mib:.1f} MiB, max "
              f"{r['rss_max'] / mib:.1f} MiB, growth {r['growth_after_first'] / mib:+.2f} MiB, slope "
              f"{r['slope_bytes_per_1000'] / 1024:+.1f} KiB per 1000 frames")
        print(f"   RSS after each run, MiB: {r['rss_mib']}")
    print(f"# load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
