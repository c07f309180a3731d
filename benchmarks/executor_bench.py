"""Executor benchmark: what a user would run (ONNX Runtime with 1 and 2 threads, two pinned copies of the model)
next to parapipe's host mappings (its replicated mapping and its best-throughput point), the cost of splitting a
model into stages, the cost of a stage hop, and a long soak.

Run from the repository root (about 10 minutes on a 2-core x86 machine, plus the soak)::

    python benchmarks/executor_bench.py [--models inception_v1 squeezenet resnet50] [--frames 100] [--min-run-s 2]
        [--repeats 3] [--soak 10000] [--trace out/inception_trace.json] [--measured-cut] [--terms CAL.yaml]

Prints (stderr is left to logging):

1. Per model (the onnx wheel's light zoo models), run interleaved ``--repeats`` times, every other repeat in reverse
   order, each run at least ``--frames`` frames and about ``--min-run-s`` seconds at the predicted rate (median;
   spread = (max - min) / median; parapipe against the loop: the median of the per-repeat ratios, which cancels the
   load drift between repeats that a ratio of medians keeps): one ORT session with 1 and with 2 intra-op threads
   (unpinned); **two pinned copies** twice: a plain loop (two threads, each pinned to one core with its own single-
   thread session, frames dealt alternately) and parapipe's ``replicated`` mapping
   (:func:`parapipe.cost.replicated_baseline`: the whole model replicated on cpu0 and cpu1, each replica pulling the
   next frame when it is free) run by the pipelined executor;
   and the best-throughput point of parapipe's search for ``--soc host`` (this machine measured with
   :func:`parapipe.app.prepare.prepare`, searched with :func:`parapipe.app.optimize.search_prepared` as ``optimize``
   does: replicated stages included, so the replicated baseline is one of its candidates, and the leading
   points' stages timed as sub-models). All ratios are to ORT with 2 threads, same run. parapipe runs go
   through the deploy bundle's run-and-verify (every output and handed-over tensor compared with the unsplit
   model's).
2. Measured / predicted throughput of the parapipe mappings, with the prediction from isolated block times
   alone (the host profile) and the search's (its leading points' stages timed as sub-models,
   :func:`parapipe.measure.submodels.measure_submodels`); per stage
   the predicted time, the sub-model alone on its core and its busy time in the pipeline; and the work ratios:
   the stages' sub-models timed alone, summed, over the whole model timed alone (the cost of splitting), and
   the sum of the block times over the whole model.
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
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_REPO, os.path.join(_REPO, "device_agents")]  # this checkout (parapipe, ppexec), not installed
from ppexec.executor import PipelineExecutor, run_pipeline  # noqa: E402
from ppexec.frames import FrameInput, draw_frames  # noqa: E402
from ppexec.plan import ExecutionPlan, PUBinding, Task  # noqa: E402
from ppexec.reference import max_abs_diff, reference_outputs  # noqa: E402
from ppexec.bundle_run import run_bundle  # noqa: E402
from ppexec.reference import handed_over_tensors, max_scaled_diff, with_outputs  # noqa: E402
from ppexec.session import create_session, pin_current_thread  # noqa: E402

from parapipe.deploy.bundle import build_bundle  # noqa: E402
from parapipe.execution.reference import reference_with_outputs  # noqa: E402
from parapipe.graph.feeds import input_specs  # noqa: E402

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


def host_mappings(model: str, time_limit_s: float, terms_from: Optional[str] = None):
    """Measure this host for ``model`` and search it as ``optimize --soc host`` does
    (:func:`parapipe.app.optimize.search_prepared`: replicated stages included, the leading points' stages timed as
    sub-models), and load the best-throughput point and the ``replicated`` baseline (``replicated-0``) as
    LoadedMappings: ``(pp, rep, prep, seconds, block_prediction)``. ``block_prediction``: the two points'
    predicted throughput from block sums alone (no stage-level time). ``terms_from``: a calibrated host profile
    (``calibrate --runs``) whose pipeline terms the search uses, as ``optimize --refine`` does once it has
    fitted them."""
    import dataclasses

    from parapipe.mapping.index import mapping_from_point
    from parapipe.mapping import write_pareto
    from parapipe.app.run import load_mapping
    from parapipe.search.options import SearchOptions
    from parapipe.app.optimize import result_doc, search_prepared
    from parapipe.app.prepare import prepare

    t0 = time.perf_counter()
    prep = prepare(model, "host")
    if terms_from:
        from parapipe.cost.pipeline_terms import terms_from_soc
        from parapipe.soc.loader import load_soc

        prep = dataclasses.replace(prep, terms=terms_from_soc(load_soc(terms_from)))
    result = search_prepared(prep, SearchOptions(time_limit_s=time_limit_s, seed=0))
    prep = dataclasses.replace(prep, problem=result.problem)  # with the stage-level times the search measured
    doc = result_doc(prep, result, 0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pareto.json")
        write_pareto(doc, path)
        pp = load_mapping(model, path, "best-throughput")
        rep = load_mapping(model, path, "replicated-0")
    from parapipe.cost.evaluate import evaluate

    plain = dataclasses.replace(prep.problem, submodel_time_s=None)  # block sums only
    block_prediction = {key: evaluate(plain, mapping_from_point(plain, m.point, "benchmark"),
                                      prep.terms).throughput_per_s for key, m in (("pp", pp), ("rep", rep))}
    return pp, rep, prep, time.perf_counter() - t0, block_prediction


def two_copies_loop(model: onnx.ModelProto, frames: List[Dict[str, np.ndarray]], warmup: int = 5) -> float:
    """Frames per second of two pinned copies run by hand: two threads, each pinned to one core (0, 1) with its
    own single-thread session (the executor's settings), taking frames alternately (thread i runs frames i,
    i + 2, ...); wall time from the first start to the last end."""
    barrier = threading.Barrier(3)
    spans: Dict[int, tuple] = {}

    def body(cpu: int) -> None:
        pin_current_thread(f"copy{cpu}", (cpu,))
        sess = create_session(model, PUBinding(cpus=(cpu,)), "CPUExecutionProvider")
        names = [i.name for i in sess.get_inputs()]
        for f in frames[:warmup]:
            sess.run(None, {n: f[n] for n in names})
        barrier.wait()
        t0 = time.perf_counter()
        for f in frames[cpu::2]:
            sess.run(None, {n: f[n] for n in names})
        spans[cpu] = (t0, time.perf_counter())

    threads = [threading.Thread(target=body, args=(cpu,)) for cpu in (0, 1)]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join()
    return len(frames) / (max(e for _, e in spans.values()) - min(b for b, _ in spans.values()))


def make_frames(og, n: int, seed: int = 0) -> List[Dict[str, np.ndarray]]:
    """``n`` frames cycling through ``DISTINCT_FRAMES`` seeded ones (:func:`ppexec.frames.draw_frames`)."""
    pool = draw_frames(input_specs(og), DISTINCT_FRAMES, seed)
    return [pool[i % DISTINCT_FRAMES] for i in range(n)]


def standalone_task_s(task: Task, og, cpu: int, repeats: int = 20, warmup: int = 3) -> float:
    """Median time of one task's sub-model alone on ``cpu`` (a pinned thread, the executor's session)."""
    feeds = draw_frames([FrameInput(n, og.tensors[n].shape, og.tensors[n].dtype) for n in task.inputs], 1, 1)[0]
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
    from parapipe.execution import build_plan
    from parapipe.mapping import Stage

    og, bg = mapping.opgraph, mapping.block_graph
    names = [b.name for b in bg.blocks]
    total, prefix, best = sum(b.flops for b in bg.blocks), 0.0, None
    bindings = {"cpu0": PUBinding(cpus=(0,)), "cpu1": PUBinding(cpus=(1,))}
    for k, block in enumerate(bg.blocks[:-1], start=1):
        prefix += block.flops
        if not lo <= prefix / total <= hi:
            continue
        specs = [Stage(pus=["cpu0"], blocks=names[:k], time_s=0.0), Stage(pus=["cpu1"], blocks=names[k:], time_s=0.0)]
        plan = build_plan(og, bg, specs, bindings)
        t0 = standalone_task_s(plan.stages[0][0], og, 0, repeats)
        t1 = standalone_task_s(plan.stages[1][0], og, 1, repeats)
        if best is None or max(t0, t1) < max(best[2], best[3]):
            best = (plan, k, t0, t1)
    return best


def spread(values: List[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def whole_alone_s(og, repeats: int = 20) -> float:
    """Median time of the whole model alone on core 0 (a pinned thread, the executor's single-thread session)."""
    sub = Task("whole", 0, "cpu0", og.model, list(og.inputs), list(og.outputs), [])
    return standalone_task_s(sub, og, 0, repeats)


def bench_model(model: str, args) -> dict:
    pp, rep, prep, prep_s, predicted_blocks = host_mappings(model, args.time_limit, args.terms)
    og = pp.opgraph
    # every run lasts about --min-run-s at the predicted rate: 200 frames of squeezenet took 0.7 s, short enough
    # for one scheduling hiccup of a shared machine to move a run's throughput by several per cent
    frames = make_frames(og, max(args.frames, int(math.ceil(args.min_run_s * pp.predicted_throughput_per_s))))
    cut = measured_best_cut(pp, args.cut_repeats) if args.measured_cut else None
    folders = tempfile.TemporaryDirectory(prefix="parapipe-bench-")
    bundles = {key: build_bundle(m, Path(folders.name) / key) for key, m in (("pp", pp), ("rep", rep))}
    runs: Dict[str, List[float]] = {"ort1": [], "ort2": [], "loop": [], "rep": [], "pp": []}
    extra = {}
    if cut is not None:
        reference_cut, cut_handed = reference_with_outputs(pp.loaded.model, og, handed_over_tensors(cut[0]))
        ref_cut = reference_outputs(reference_cut, frames[:DISTINCT_FRAMES])
        extra["cut"] = with_outputs(cut[0], cut_handed)
        runs["cut"] = []
    diff = scaled = 0.0
    matched = True
    last = {}

    def run_parapipe(key: str) -> float:
        nonlocal diff, scaled, matched
        r = run_bundle(str(bundles[key].folder), frames=len(frames), warmup=5, verify=False, idle_frames=0)
        diff, scaled = max(diff, r.max_abs_diff), max(scaled, r.max_scaled_diff)
        matched = matched and r.outputs_match
        last[key] = r
        return r.throughput_per_s

    configs = {"ort1": lambda: ort_throughput(og.model, frames, 1),
               "ort2": lambda: ort_throughput(og.model, frames, 2),
               "loop": lambda: two_copies_loop(og.model, frames),
               "rep": lambda: run_parapipe("rep"), "pp": lambda: run_parapipe("pp")}
    order = list(configs)
    for i in range(args.repeats):  # interleaved, so that load changes hit every configuration alike; every
        for key in (order if i % 2 == 0 else order[::-1]):  # other repeat in reverse, so order effects cancel
            runs[key].append(configs[key]())
        if cut is not None:
            outs, last["cut"] = run_pipeline(extra["cut"], frames, warmup=5)
            runs["cut"].append(last["cut"].throughput_per_s)
            refs = [ref_cut[i % DISTINCT_FRAMES] for i in range(len(frames))]
            outputs = list(pp.plan.model_outputs)
            diff = max(diff, max_abs_diff([{k: o[k] for k in outputs} for o in outs],
                                          [{k: r[k] for k in outputs} for r in refs]))
            scaled = max([scaled] + [max_scaled_diff(o, r, cut_handed) for o, r in zip(outs, refs)])
    if args.trace and model == args.models[0]:
        shutil.copyfile(bundles["pp"].folder / last["pp"].trace_file, args.trace)
    folders.cleanup()
    med = {k: statistics.median(v) for k, v in runs.items()}
    paired = {k: statistics.median(a / b for a, b in zip(runs[k], runs["loop"])) for k in ("rep", "pp")}
    stages = []
    for s, st in enumerate(pp.point.stages):
        tasks = pp.plan.replicas(s)[0]  # a replicated stage: its first replica (each runs the same sub-models)
        alone = (standalone_task_s(tasks[0], og, pp.plan.bindings[tasks[0].pu].cpus[0])
                 if len(tasks) == 1 else float("nan"))
        pus = "|".join("+".join(r.pus) for r in st.replicas) if st.replicas else "+".join(st.pus)
        stages.append({"pus": pus, "blocks": len(st.blocks), "tasks": len(tasks),
                       "predicted_s": st.time_s, "alone_s": alone, "busy_s": last["pp"].stage_busy_s[s]})
    whole_s = whole_alone_s(og)
    predicted = {"pp": pp.predicted_throughput_per_s, "rep": rep.predicted_throughput_per_s}
    block_sum_s = float(prep.problem.time_s[:, 0].sum())
    return {"model": model, "frames": len(frames), "med": med, "paired": paired,
            "spread": {k: spread(v) for k, v in runs.items()},
            "diff": diff,
            "scaled": scaled, "outputs_match": matched, "predicted": predicted, "predicted_blocks": predicted_blocks,
            "point": pp.point.id, "stages": stages,
            "prep_s": prep_s, "whole_s": whole_s, "block_sum_s": block_sum_s, "mapping": pp,
            "utilisation": {k: last[k].pu_utilisation for k in ("pp", "rep")},
            "cut": None if cut is None else {"k": cut[1], "of": len(pp.block_graph.blocks),
                                              "alone_s": (cut[2], cut[3]),
                                              "busy_s": list(last["cut"].stage_busy_s)}}


def print_models(results: List[dict], frames: int, repeats: int, min_run_s: float) -> None:
    print(f"\n1. throughput, ratio to ORT with 2 threads (at least {frames} frames and about {min_run_s:g} s per run, "
          f"frames per model in the last column; median of {repeats} interleaved runs; "
          "copies = two pinned single-thread sessions: by hand, frames dealt alternately (loop), and as "
          "parapipe's replicated baseline in the executor, each replica pulling the next frame (rep); "
          "pp = the search's best-throughput point; rep/loop and pp/loop: the median of the per-repeat ratios, "
          "each repeat running every configuration back to back, in reverse order every other repeat)")
    print(f"{'model':<13} {'ORT-1':>6} {'ORT-2 /s':>9} {'copies loop':>11} {'copies rep':>10} {'pp':>6} "
          f"  {'x ORT-2:':<8} {'ORT-1':>6} {'loop':>6} {'rep':>6} {'pp':>6}  "
          f"{'rep/loop':>8} {'pp/loop':>8}  spread 1/2/loop/rep/pp  outputs  pp stages  frames")
    for r in results:
        m, sp = r["med"], r["spread"]
        stages = " | ".join(st["pus"] for st in r["stages"])
        print(f"{r['model']:<13} {m['ort1']:6.1f} {m['ort2']:9.1f} {m['loop']:11.1f} {m['rep']:10.1f} "
              f"{m['pp']:6.1f}   {'':<8} {m['ort1'] / m['ort2']:6.2f} {m['loop'] / m['ort2']:6.2f} "
              f"{m['rep'] / m['ort2']:6.2f} {m['pp'] / m['ort2']:6.2f}  "
              f"{r['paired']['rep']:8.3f} {r['paired']['pp']:8.3f}  "
              + "/".join(f"{sp[k] * 100:.0f}%" for k in ("ort1", "ort2", "loop", "rep", "pp"))
              + f"  {'match' if r['outputs_match'] else 'DIFFER'} (|d| {r['diff']:.0e}, handed {r['scaled']:.0e})"
              + f"  {stages}  {r['frames']}")
    print("\n2. measured / predicted throughput (pred blocks: from the host profile's isolated block times alone; "
          "pred: the search's, with the leading points' stages timed as sub-models)")
    print(f"{'model':<13} {'mapping':<5} {'measured':>9} {'pred blocks':>11} {'meas/pred':>9} "
          f"{'pred':>11} {'meas/pred':>9}   utilisation")
    for r in results:
        for key in ("rep", "pp"):
            meas, pb, ps = r["med"][key], r["predicted_blocks"][key], r["predicted"][key]
            pb_text = f"{pb:11.1f} {meas / pb:9.2f}" if pb else f"{'-':>11} {'-':>9}"
            util = {pu: round(u, 2) for pu, u in r["utilisation"][key].items()}
            print(f"{r['model']:<13} {key:<5} {meas:9.1f} {pb_text} {ps:11.1f} {meas / ps:9.2f}   {util}")
    print("\n   per stage of pp (ms per frame; a replicated stage: its first replica): predicted = cost model on "
          "the host profile; alone = the stage's sub-model on its core by itself; busy = inside the pipeline")
    print(f"{'model':<13} {'stage':<10} {'blocks':>6} {'tasks':>5} {'predicted':>9} {'alone':>7} {'busy':>7}")
    for r in results:
        for s, st in enumerate(r["stages"]):
            print(f"{r['model']:<13} {s:<2}{st['pus']:<8} {st['blocks']:>6} {st['tasks']:>5} "
                  f"{st['predicted_s'] * 1e3:9.2f} {st['alone_s'] * 1e3:7.2f} {st['busy_s'] * 1e3:7.2f}")
    print("\n   work ratios (the cost of splitting): stage sum = the pp stages' sub-models alone, summed; blocks = "
          "the host profile's block times, summed; both over the whole model alone (1 thread, pinned)")
    print(f"{'model':<13} {'whole ms':>9} {'stage sum':>10} {'ratio':>6} {'block sum':>10} {'ratio':>6}")
    for r in results:
        alone = [st["alone_s"] for st in r["stages"]]
        stage_sum = sum(alone) if all(np.isfinite(alone)) else float("nan")
        print(f"{r['model']:<13} {r['whole_s'] * 1e3:9.2f} {stage_sum * 1e3:10.2f} {stage_sum / r['whole_s']:6.3f} "
              f"{r['block_sum_s'] * 1e3:10.2f} {r['block_sum_s'] / r['whole_s']:6.3f}")
    cuts = [r for r in results if r["cut"] is not None]
    if cuts:
        print("\n1b. the two-stage cut (cpu0 | cpu1) chosen by timing candidate stages alone (what the "
              "executor reaches with exact stage costs); predicted = 1 / the slower stage alone")
        print(f"{'model':<13} {'cut /s':>9} {'x ORT-2':>8} {'pred /s':>8} {'meas/pred':>9} {'spread':>7}")
        for r in cuts:
            m, c = r["med"], r["cut"]
            pred = 1.0 / max(c["alone_s"])
            print(f"{r['model']:<13} {m['cut']:9.1f} {m['cut'] / m['ort2']:8.2f} {pred:8.1f} {m['cut'] / pred:9.2f} "
                  f"{r['spread']['cut'] * 100:6.0f}%")


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
    parser.add_argument("--frames", type=int, default=100, help="frames per run, at least (default 100)")
    parser.add_argument("--min-run-s", type=float, default=2.0,
                        help="more frames for fast models: each run about this long at the predicted rate (default "
                        "2 s; 0 for exactly --frames)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=10.0, help="search time limit, s")
    parser.add_argument("--terms", default=None,
                        help="search with the pipeline terms of this calibrated host profile (e.g. "
                        "benchmarks/fidelity.py's WORK/host-calibrated.yaml)")
    parser.add_argument("--measured-cut", action="store_true",
                        help="also run the two-stage cut chosen by timing candidate stages (the executor's reach "
                        "with exact stage costs; a few minutes per model)")
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
        print_models(results, args.frames, args.repeats, args.min_run_s)
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
