"""Tests of parapipe.report: every plot writes a real PNG of the expected size from a realistic pareto.json
document (read by the one reader, :func:`parapipe.mapping.parse_pareto`); schedule layout (stage offsets, bars)
and the 2-D staircase are checked against hand-worked values and brute force; bad input raises one-line
InputErrors naming the field."""
from __future__ import annotations

import doctest
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.image import imread

from parapipe.errors import InputError
from parapipe.mapping import parse_pareto, read_pareto, select_point
from parapipe.report import (gantt_bars, gantt_from_trace, plot_gantt, plot_pareto, plot_utilisation,
                             staircase, stage_offsets_s, utilisation)
from parapipe.report import gantt as gantt_mod
from parapipe.report import plots as plots_mod
from ppexec.metrics import TraceEvent

# Power figures for the fixture's energy (W), of the order of soc_profiles/amlogic_a311d.yaml's (board ~2.3 W
# baseline, big cluster adds ~1.8-4.7 W, GPU ~0.6-1.3 W, LITTLE ~0.7-1.3 W).
ACTIVE_W = {"big": 3.0, "gpu": 1.0, "little": 1.0}
IDLE_W = {"big": 0.2, "gpu": 0.1, "little": 0.1}
STATIC_W = 2.3


def _stage(pus, blocks, input_s=0.0, schedule="cp-sat optimal"):
    """A stage dict; ``blocks``: (name, pu, duration_s, deps in the stage), list-scheduled in order."""
    free = {p: 0.0 for p in pus}
    start, finish, assign = {}, {}, {}
    for name, pu, dur, deps in blocks:
        s = max([free[pu]] + [finish[d] for d in deps])
        start[name], finish[name], assign[name] = s, s + dur, pu
        free[pu] = s + dur
    makespan = max(finish.values())
    return {"pus": list(pus), "blocks": [b[0] for b in blocks], "time_s": input_s + makespan,
            "input_s": input_s, "makespan_s": makespan, "schedule": schedule, "assignment": assign,
            "order": [b[0] for b in blocks], "block_start_s": start, "block_finish_s": finish}


def _point(pid, strategy, stages):
    busy, compute = {}, {}
    for st in stages:
        for p in st["pus"]:
            busy[p] = busy.get(p, 0.0) + st["time_s"]
        for b, p in st["assignment"].items():
            compute[p] = compute.get(p, 0.0) + st["block_finish_s"][b] - st["block_start_s"][b]
    period = max(busy.values())
    latency = sum(st["time_s"] for st in stages)
    energy = STATIC_W * period + sum(ACTIVE_W[p] * c + IDLE_W[p] * (period - c) for p, c in compute.items())
    return {"id": pid, "strategy": strategy, "pareto": False, "throughput_per_s": 1 / period,
            "period_s": period,
            "latency_s": latency, "energy_j": energy, "period_gap": period / 0.030 - 1,
            "latency_gap": latency / 0.075 - 1, "mapping": {"stages": stages}, "pu_busy_s": busy}


STEM = ["conv1", "pool1", "conv2", "pool2"]
INCEPTION = [
    "inc3a", "inc3b", "pool3", "inc4a", "inc4b", "inc4c", "inc4d", "inc4e", "pool4", "inc5a", "inc5b"]
# Whole-block times (s) per PU: GoogLeNet ~114 ms big / 100 ms GPU / 311 ms LITTLE on the A311D (soc_profiles/README.md, "Calibration"),
# spread over the blocks in proportion to a rough FLOP share.
SHARE = dict(zip(STEM + INCEPTION + ["head"],
                 [0.08, 0.01, 0.14, 0.01, 0.06, 0.09, 0.01, 0.07, 0.07, 0.07, 0.08, 0.10, 0.01, 0.08, 0.10,
                  0.02]))
WHOLE_S = {"big": 0.114, "gpu": 0.100, "little": 0.311}


def _t(block, pu, frac=1.0):
    return WHOLE_S[pu] * SHARE[block] * frac


def _chain(names, pu):
    out, prev = [], []
    for n in names:
        out.append((n, pu, _t(n, pu), prev))
        prev = [n]
    return out


def _branches(module, pus, prev, first=0.55):
    """An Inception module as two branch groups on two PUs (``first``: work share of the first), then a concat
    on the first PU."""
    a, b = f"{module}_b12", f"{module}_b34"
    return [(a, pus[0], _t(module, pus[0], first), prev), (b, pus[1], _t(module, pus[1], 1 - first), prev),
            (f"{module}_cat", pus[0], 0.0004, [a, b])]


def _doc():
    all_blocks = STEM + INCEPTION + ["head"]
    pts = []
    # p0: GPU -> big -> GPU+LITTLE: the GPU serves two non-adjacent stages.
    s2 = _branches("inc4e", ["gpu", "little"], []) + _chain(["pool4", "inc5a", "inc5b", "head"], "gpu")
    s2[3] = ("pool4", "gpu", _t("pool4", "gpu"), ["inc4e_cat"])
    pts.append(_point("p0", "parapipe", [
        _stage(["gpu"], _chain(STEM + ["inc3a"], "gpu"), schedule="single-pu"),
        _stage(["big"], _chain(["inc3b", "pool3", "inc4a", "inc4b", "inc4c", "inc4d"], "big"), 0.0012,
               schedule="single-pu"),
        _stage(["gpu", "little"], s2, 0.0009)]))
    # p1: GPU, then big+LITTLE with branch parallelism (throughput-oriented).
    s1, prev = [], []
    for m in ["pool3", "inc4a", "inc4b", "inc4c", "inc4d", "inc4e", "pool4", "inc5a", "inc5b", "head"]:
        if m.startswith("inc"):
            s1 += _branches(m, ["big", "little"], prev, first=0.75)
            prev = [f"{m}_cat"]
        else:
            s1.append((m, "big", _t(m, "big"), prev))
            prev = [m]
    pts.append(_point("p1", "parapipe", [
        _stage(["gpu"], _chain(STEM + ["inc3a", "inc3b"], "gpu"), schedule="single-pu"),
        _stage(["big", "little"], s1, 0.0013)]))
    # p2: one stage, big+GPU (lowest latency).
    s = []
    prev = []
    for m in all_blocks:
        if m.startswith("inc"):
            s += _branches(m, ["big", "gpu"], prev)
            prev = [f"{m}_cat"]
        else:
            s.append((m, "gpu", _t(m, "gpu"), prev))
            prev = [m]
    pts.append(_point("p2", "parapipe", [_stage(["big", "gpu"], s)]))
    pts.append(_point("pipeline-0", "pipeline", [
        _stage(["gpu"], _chain(STEM + ["inc3a", "inc3b"], "gpu"), schedule="single-pu"),
        _stage(["big"], _chain(["pool3", "inc4a", "inc4b", "inc4c"], "big"), 0.0011, "single-pu"),
        _stage(["little"], _chain(["inc4d", "inc4e", "pool4", "inc5a", "inc5b", "head"], "little"), 0.0015,
               "single-pu")]))
    cycle = zip(all_blocks, itertools.cycle(["gpu", "big", "gpu", "little"]))
    par = _stage(["big", "gpu", "little"],
                 [(b, pu, _t(b, pu), [all_blocks[i - 1]] if i else []) for i, (b, pu) in enumerate(cycle)],
                 schedule="greedy")
    pts.append(_point("parallel-0", "parallel", [par]))
    for pu in ("big", "gpu", "little"):
        pts.append(_point(f"single-{pu}", "single",
                          [_stage([pu], _chain(all_blocks, pu), schedule="single-pu")]))
    objs = np.array([[p["period_s"], p["latency_s"], p["energy_j"]] for p in pts])
    for i, p in enumerate(pts):
        p["pareto"] = not any(np.all(objs[j] <= objs[i]) and np.any(objs[j] < objs[i])
                              for j in range(len(pts)))
    # no block list: the points cut the Inception modules into branch blocks at different granularities
    return {"schema_version": 2, "model": {"name": "inception_v1", "sha256": "0" * 64},
            "soc": {"name": "amlogic_a311d"}, "blocks": {},
            "objectives": ["throughput", "latency", "energy"],
            "bounds": {"period_lb_s": 0.030, "latency_lb_s": 0.075}, "points": pts}


def _parse(data, source="pareto.json"):
    return parse_pareto(data, source)


@pytest.fixture()
def doc():
    return _parse(_doc())


def _pt(doc, pid):
    return select_point(doc, pid)


def _png_size(path):
    assert os.path.getsize(path) > 0
    img = imread(path)
    return img.shape[1], img.shape[0]


def test_plot_pareto_writes_png(doc, tmp_path):
    out = tmp_path / "pareto.png"
    plot_pareto(doc, out)
    assert _png_size(out) == (1600, 1250)
    assert os.listdir(tmp_path) == ["pareto.png"]  # no temp file left behind


def test_plot_pareto_draws_once(doc, tmp_path, monkeypatch):
    """One pass over the figure: the rendering written to the PNG (the layout measures texts without drawing,
    and savefig would draw again), which holds the same pixels as ``Figure.savefig`` writes."""
    from matplotlib.figure import Figure

    from parapipe.report.plots import pareto_figure

    passes = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: passes.append(1) or draw(self, renderer))
    plot_pareto(doc, tmp_path / "pareto.png")
    assert len(passes) == 1
    monkeypatch.setattr(Figure, "draw", draw)
    pareto_figure(doc).savefig(tmp_path / "saved.png", format="png", dpi=100)
    assert (imread(tmp_path / "pareto.png") == imread(tmp_path / "saved.png")).all()


@pytest.mark.parametrize("which", ["doc", "crowded", "placeholder"])
def test_pareto_layout_keeps_every_text_in_the_figure_and_off_the_other_panels(doc, which):
    """The fixed layout (measured once, no layout engine): once drawn, each panel with its tick labels, axis
    labels and title lies inside the figure, clear of the other panels, the figure title and the legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from parapipe.report.plots import pareto_figure

    d = {"doc": doc, "crowded": _crowded_doc(), "placeholder": _crowded_doc(4, 4, soc="host")}[which]
    fig = pareto_figure(d)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    boxes = [ax.get_tightbbox(r) for ax in fig.axes] + [fig._suptitle.get_window_extent(r),
                                                          fig.legends[0].get_window_extent(r)]
    for b in boxes:
        assert 0 <= b.x0 and b.x1 <= fig.bbox.width and 0 <= b.y0 and b.y1 <= fig.bbox.height, b
    for i, j in itertools.combinations(range(len(boxes)), 2):
        a, b = boxes[i], boxes[j]
        assert min(a.x1, b.x1) <= max(a.x0, b.x0) or min(a.y1, b.y1) <= max(a.y0, b.y0), (i, j)
    # and the panels use the figure: each at least 40 % of its width and 30 % of its height
    for ax in fig.axes:
        e = ax.get_window_extent(r)
        assert e.width > 0.4 * fig.bbox.width and e.height > 0.3 * fig.bbox.height


def test_plot_worker_draws_the_png_plot_pareto_draws_and_exits(doc, tmp_path):
    """The second process (``python -m parapipe.report.serve``) writes the same pixels as drawing here, into the
    path it is given (no temp file of its own), and has exited once :meth:`PlotWorker.draw` returns."""
    from parapipe.app.plot_worker import PlotWorker

    worker = PlotWorker()
    assert worker.draw(doc, None, tmp_path / "worker.png")
    assert worker.proc.returncode is not None
    plot_pareto(doc, tmp_path / "here.png")
    assert (imread(tmp_path / "worker.png") == imread(tmp_path / "here.png")).all()
    assert sorted(os.listdir(tmp_path)) == ["here.png", "worker.png"]


def test_pareto_json_is_written_while_the_worker_draws(doc, tmp_path):
    """write_outputs hands the document to the worker, writes pareto.json's temp file while the worker draws, then
    waits for the plot; both files appear, and no temp file is left."""
    from parapipe.app.optimize import write_outputs
    from parapipe.app.plot_worker import PlotWorker

    worker = PlotWorker()
    real, events = worker.proc.stdout, []

    class Watched:
        def readline(self):
            events.append(("reply", sorted(f.name for f in tmp_path.iterdir() if f.stat().st_size)))
            return real.readline()

        def __getattr__(self, name):
            return getattr(real, name)

    worker.proc.stdout = Watched()
    write_outputs(doc, tmp_path, True, worker=worker)
    assert worker.proc.returncode is not None and worker.proc.stdin.closed
    [(what, written)] = events  # when it waited for the reply, pareto.json's temp file was written
    assert what == "reply" and any(name.startswith(".pareto.json.") for name in written)
    assert sorted(os.listdir(tmp_path)) == ["pareto.json", "pareto.png"]
    assert read_pareto(tmp_path / "pareto.json") == doc


def test_plot_worker_exits_without_a_request():
    from parapipe.app.plot_worker import PlotWorker

    worker = PlotWorker()
    worker.proc.stdin.close()  # the parent wants no plot after all, or is gone: end of input
    assert worker.proc.wait(timeout=120) == 0
    assert worker.proc.stdout.read() == b""
    worker.close()


def test_a_plot_the_worker_cannot_draw_is_drawn_here_and_its_error_raised_here(tmp_path):
    """A document the plot rejects: the worker answers an error, the plot is drawn in this process, which raises
    the one-line InputError; neither file is written."""
    from parapipe.app.optimize import write_outputs
    from parapipe.app.plot_worker import PlotWorker

    worker = PlotWorker()
    with pytest.raises(InputError, match="no points"):
        write_outputs(_parse(dict(_doc(), points=[])), tmp_path, True, worker=worker)
    assert worker.proc.returncode is not None
    assert os.listdir(tmp_path) == []


def test_ctrl_c_while_the_worker_draws_kills_it_and_leaves_no_file(doc, tmp_path):
    """KeyboardInterrupt while waiting for the worker (once it has started writing the temp file): the worker
    is killed and reaped before the temp file is removed, and neither pareto.json nor pareto.png appears."""
    import time

    from parapipe.app.optimize import write_outputs
    from parapipe.app.plot_worker import PlotWorker

    worker = PlotWorker()
    real = worker.proc.stdout

    class Interrupted:
        def readline(self):
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not any(f.stat().st_size for f in tmp_path.iterdir()
                                                          if f.name.endswith(".png")):
                time.sleep(0.005)  # the worker draws, then writes the temp file
            raise KeyboardInterrupt

        def __getattr__(self, name):
            return getattr(real, name)

    worker.proc.stdout = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        write_outputs(doc, tmp_path, True, worker=worker)
    assert worker.proc.returncode is not None
    time.sleep(0.2)
    assert os.listdir(tmp_path) == []


def test_plot_pareto_replaces_existing_file(doc, tmp_path):
    out = tmp_path / "pareto.png"
    out.write_bytes(b"old")
    plot_pareto(doc, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_gantt_writes_png(doc, tmp_path):
    out = tmp_path / "gantt.png"
    plot_gantt(doc, _pt(doc, "p0"), out, n_frames=3)
    w, h = _png_size(out)
    assert w == 1600 and h >= 360


def test_plot_utilisation_writes_png(doc, tmp_path):
    out = tmp_path / "util.png"
    plot_utilisation(doc, _pt(doc, "p1"), out)
    assert _png_size(out) == (1000, 600)


def test_gantt_from_trace_writes_png(tmp_path):
    trace = []
    for f in range(4):
        t = 0.03 * f
        trace += [TraceEvent(0, "gpu", "stage0", f, t, t + 0.028),
                  TraceEvent(1, "big", "inc4a", f, t + 0.029, t + 0.045),
                  TraceEvent(1, "little", "inc4b", f, t + 0.029, t + 0.052)]
    out = tmp_path / "trace.png"
    gantt_from_trace(trace, out)
    w, h = _png_size(out)
    assert w == 1600 and h > 0
    dicts = [{"stage": e.stage, "pu": e.pu, "task": e.task, "frame": e.frame, "start_s": e.start_s,
              "end_s": e.end_s} for e in trace]
    gantt_from_trace(dicts, out, title="dicts")
    assert _png_size(out)[0] == 1600


def test_gantt_of_a_workload_trace_colours_each_models_stages_and_names_them(tmp_path, monkeypatch):
    import parapipe.report.gantt as gantt

    drawn = {}
    monkeypatch.setattr(gantt, "_draw", lambda bars, lanes, title, path, names, **kw: drawn.update(
        names=names, stages={b.stage for b in bars}, label=kw["label_of"](bars[0])))
    trace = [TraceEvent(0, "cpu0", "s0.cpu0.t0", f, 0.01 * f, 0.01 * f + 0.004, "a") for f in range(3)]
    trace += [TraceEvent(0, "cpu0", "s0.cpu0.t0", f, 0.005 + 0.01 * f, 0.008 + 0.01 * f, "b") for f in range(3)]
    gantt_from_trace(trace, tmp_path / "w.png", title="w")
    assert drawn["names"] == {0: "a stage 0 on cpu0", 1: "b stage 0 on cpu0"}  # one colour each
    assert drawn["stages"] == {0, 1} and drawn["label"][0] == "a s0 f0"


def test_unknown_point_id_raises_input_error(doc):
    # the plots take a point of the document: the one selector names a missing id and lists those there are
    with pytest.raises(InputError, match=r"no point 'p9'.*p0, p1, p2") as exc:
        select_point(doc, "p9", path="run/pareto.json")
    assert "\n" not in str(exc.value)


def test_stage_offsets_without_shared_pus_are_cumulative_times():
    times = [0.021, 0.017, 0.03]
    assert stage_offsets_s(times, [["gpu"], ["big"], ["little"]], 0.03) == pytest.approx([0.0, 0.021, 0.038])


def test_stage_offsets_delay_a_stage_sharing_a_pu_to_a_free_slot():
    # GPU 2 + 1 = 3 = period: the second GPU stage must fill GPU time 2..3 of each period -> offset 5, not 3.
    gpu_big_gpu = [["gpu"], ["big"], ["gpu"]]
    assert stage_offsets_s([2.0, 1.0, 1.0], gpu_big_gpu, 3.0) == pytest.approx([0.0, 2.0, 5.0])
    # Period with slack: GPU free from 2 to 4 of each period of 4, so stage 2 starts right after stage 1.
    assert stage_offsets_s([2.0, 1.0, 1.0], gpu_big_gpu, 4.0) == pytest.approx([0.0, 2.0, 3.0])


def test_stage_offsets_fall_back_when_a_pu_is_overbooked(caplog):
    with caplog.at_level("WARNING", logger="parapipe.report.gantt"):
        out = stage_offsets_s([2.0, 2.0], [["gpu"], ["gpu"]], 3.0)
    assert out == pytest.approx([0.0, 2.0])
    assert "no time in the period" in caplog.text


def _overlaps(bars):
    by_pu = {}
    for b in bars:
        by_pu.setdefault(b.pu, []).append((b.start_s, b.end_s))
    bad = []
    for pu, iv in by_pu.items():
        iv.sort()
        bad += [(pu, a, b) for a, b in zip(iv, iv[1:]) if b[0] < a[1] - 1e-12]
    return bad


@pytest.mark.parametrize("pid", ["p0", "p1", "p2", "pipeline-0", "parallel-0", "single-gpu"])
def test_gantt_bars_never_overlap_on_a_pu(doc, pid):
    bars = gantt_bars(_pt(doc, pid), n_frames=5)
    assert _overlaps(bars) == []


def test_gantt_bars_layout(doc):
    point = _pt(doc, "p0")
    stages = point.stages
    period = point.period_s
    bars = gantt_bars(point, n_frames=3)
    n_inputs = sum(len(st.pus) for st in stages if st.input_s > 0)
    n_blocks = sum(len(st.blocks) for st in stages)
    assert len(bars) == 3 * (n_inputs + n_blocks)
    # Frame f is frame 0 shifted by f periods.
    f0 = sorted((b.pu, b.label, b.start_s) for b in bars if b.frame == 0)
    f2 = sorted((b.pu, b.label, b.start_s - 2 * period) for b in bars if b.frame == 2)
    assert [x[:2] for x in f0] == [x[:2] for x in f2]
    assert np.allclose([x[2] for x in f0], [x[2] for x in f2])
    # Stage 1 (big) starts when stage 0 ends; its first block after its input transfer.
    first = min((b for b in bars if b.frame == 0 and b.stage == 1 and b.kind == "block"),
                key=lambda b: b.start_s)
    assert first.start_s == pytest.approx(stages[0].time_s + stages[1].input_s)
    # Stage 2 shares the GPU with stage 0 and the GPU is the bottleneck: it is delayed past the plain sum.
    s2 = min(b.start_s for b in bars if b.frame == 0 and b.stage == 2)
    assert s2 > stages[0].time_s + stages[1].time_s + 1e-9


def test_gantt_bars_of_a_replicated_stage_deal_frames_to_its_replicas():
    # stage 0 on the GPU, then stage 1 replicated: big takes 2/3 of the frames (6 ms each), little 1/3 (12 ms)
    data = _doc()
    point = next(p for p in data["points"] if p["id"] == "pipeline-0")
    st0, st1 = point["mapping"]["stages"][:2]
    st1 = dict(st1, replicas=[{"pus": ["big"], "share": 2 / 3, "time_s": 0.006},
                              {"pus": ["little"], "share": 1 / 3, "time_s": 0.012}])
    point["mapping"]["stages"] = [st0, st1]
    point["period_s"] = max(st0["time_s"], 0.004)
    bars = gantt_bars(_pt(_parse(data), "pipeline-0"), n_frames=6)
    rep = [b for b in bars if b.stage == 1]
    assert [(b.frame, b.pu) for b in rep] == [(0, "big"), (1, "little"), (2, "big"), (3, "big"), (4, "little"),
                                              (5, "big")]
    assert all(b.end_s - b.start_s == pytest.approx(0.006 if b.pu == "big" else 0.012) for b in rep)
    # frame f enters the replicated stage when stage 0 is done with it, or later if its replica is still busy
    assert all(b.start_s >= b.frame * point["period_s"] + st0["time_s"] - 1e-12 for b in rep)
    assert rep[0].start_s == pytest.approx(st0["time_s"]) and _overlaps(bars) == []
    assert {b.label for b in rep} == {"replica 0", "replica 1"}


def test_gantt_bars_reject_missing_or_reversed_block_times():
    data = _doc()
    del data["points"][0]["mapping"]["stages"][1]["block_start_s"]["inc4a"]
    field = r"points\[p0\]\.mapping\.stages\[1\]\.block_start_s\.inc4a"
    with pytest.raises(InputError, match=rf"^pareto.json: {field}: missing"):
        gantt_bars(_pt(_parse(data), "p0"))
    data = _doc()
    data["points"][1]["mapping"]["stages"][0]["block_finish_s"]["conv1"] = -1.0
    with pytest.raises(InputError, match=r"^run/pareto.json: .*block_finish_s\.conv1: finishes .* before it starts"):
        gantt_bars(_pt(_parse(data), "p1"), source="run/pareto.json")
    with pytest.raises(InputError, match="n_frames"):
        gantt_bars(_pt(_parse(_doc()), "p0"), n_frames=0)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["points"][1]["mapping"]["stages"][1]["assignment"].__setitem__("pool3", "npu"),
     r"points\[p1\]\.mapping\.stages\[1\]\.assignment\.pool3: PU 'npu' is not one of the stage's PUs"),
    (lambda d: d["points"][2].__setitem__("strategy", "greedy"), r"points\.2\.strategy: must be one of"),
    (lambda d: d["points"][3].pop("period_s"), r"points\.3\.period_s: missing"),
    (lambda d: d["points"][0].__setitem__("latency_s", float("nan")), r"points\.0\.latency_s: must be a finite number"),
    (lambda d: d.__setitem__("schema_version", 1), r"schema_version: expected 2, got 1"),
])
def test_documents_the_plots_cannot_draw_are_refused_by_the_one_reader(edit, message):
    data = _doc()
    edit(data)
    with pytest.raises(InputError, match=rf"^out/pareto.json: {message}") as exc:
        _parse(data, "out/pareto.json")
    assert "\n" not in str(exc.value)


def test_plot_pareto_rejects_a_document_without_points(tmp_path):
    with pytest.raises(InputError, match="no points"):
        plot_pareto(_parse(dict(_doc(), points=[])), tmp_path / "x.png")
    assert not os.listdir(tmp_path)


def test_gantt_from_trace_rejects_bad_events(tmp_path):
    with pytest.raises(InputError, match="no trace events"):
        gantt_from_trace([], tmp_path / "x.png")
    with pytest.raises(InputError, match=r"event\[0\]\.frame: missing"):
        gantt_from_trace([{"stage": 0, "pu": "big", "task": "t", "start_s": 0.0, "end_s": 1.0}],
                         tmp_path / "x.png")
    with pytest.raises(InputError, match=r"event\[0\]: ends"):
        gantt_from_trace([TraceEvent(0, "big", "t", 0, 1.0, 0.5)], tmp_path / "x.png")


def test_utilisation_values(doc):
    point = _pt(doc, "p0")
    rows = utilisation(point)
    assert [r[0] for r in rows] == ["gpu", "big", "little"]
    busy = {pu: b for pu, b, _ in rows}
    assert max(busy.values()) == pytest.approx(1.0)  # the bottleneck PU is busy the whole period
    for pu, b, c in rows:
        assert b == pytest.approx(point.pu_busy_s[pu] / point.period_s)
        assert 0 < c <= b + 1e-12
    little = next(c for pu, _, c in rows if pu == "little")
    assert little == pytest.approx(_t("inc4e", "little", 0.45) / point.period_s)


def test_staircase_matches_brute_force():
    rng = np.random.default_rng(3)
    for maximise in (True, False):
        for _ in range(30):
            n = int(rng.integers(1, 12))
            xs = [float(v) for v in rng.integers(0, 6, n)]
            ys = [float(v) for v in rng.integers(0, 6, n)]
            sign = -1 if maximise else 1

            def dominated(i):
                return any(xs[j] <= xs[i] and sign * ys[j] <= sign * ys[i]
                           and (xs[j] < xs[i] or ys[j] != ys[i]) for j in range(n))

            want = sorted({(xs[i], ys[i]) for i in range(n) if not dominated(i)})
            kx, ky = staircase(xs, ys, maximise_y=maximise)
            assert list(zip(kx, ky)) == want


def test_doctests():
    for mod in (gantt_mod, plots_mod):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0


def test_import_does_not_touch_pyplot():
    code = "import sys, parapipe.report; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ranked_labels_name_front_points_and_merge_coinciding_ones():
    # front points by id, single-PU baselines by PU, other baselines by id; coinciding points share one label,
    # at the rank of the first (the front's)
    from parapipe.report.plots import ranked_labels

    by = {"parapipe": [{"id": "p0", "x": 1.0, "y": 2.0, "pareto": True},
                       {"id": "p1", "x": 2.0, "y": 1.0, "pareto": True}],
          "single": [{"id": "single-dsp0", "x": 5.0, "y": 5.0}, {"id": "single-dsp1", "x": 5.0, "y": 5.0},
                     {"id": "single-dla", "x": 1.0, "y": 2.0}],
          "pipeline": [{"id": "pipeline-0", "x": 9.0, "y": 9.0}]}
    labels = [text for _, _, text, _ in ranked_labels(by, "x", "y", maximise_y=False)]
    assert sorted(labels) == ["dsp0/dsp1", "p0/dla", "p1", "pipeline-0"]
    assert labels.index("p0/dla") < labels.index("dsp0/dsp1") < labels.index("pipeline-0")


def test_place_labels_keeps_a_crowded_cluster_readable():
    # six markers within 12 px of each other (the A311D front's corner), one label each, a legend beside them:
    # every label lies inside the axes and covers no other label, no marker and not the legend
    from parapipe.report.plots import _overlap, place_labels

    anchors = [(200.0 + 4 * i, 300.0 + (i % 3) * 4, 8.0) for i in range(6)]
    sizes = [(14.0, 9.0)] * 6
    legend = (240.0, 280.0, 400.0, 400.0)
    bounds = (0.0, 0.0, 800.0, 600.0)
    placed = place_labels(anchors, sizes, [legend], bounds)
    boxes = [box for box, _ in placed]
    markers = [(x - r, y - r, x + r, y + r) for x, y, r in anchors]
    for i, box in enumerate(boxes):
        assert bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1] and box[3] <= bounds[3]
        assert (box[2] - box[0], box[3] - box[1]) == sizes[i]
        assert all(_overlap(box, other) == 0 for other in boxes[:i] + boxes[i + 1:] + markers + [legend])
    # the first label sits beside its marker, on the left (its right is the cluster); crowding pushed some
    # out to a farther ring, with a leader line
    assert placed[0] == ((175.0, 295.5, 189.0, 304.5), False)
    assert any(leader for _, leader in placed)
    # at an edge of the axes, a label goes to the side that stays inside
    ((box, _),) = place_labels([(795.0, 300.0, 4.0)], [(30.0, 10.0)], [], bounds)
    assert box[2] <= 800.0 and box[0] < 795.0


def test_drawing_a_chart_does_not_import_the_executor_or_onnxruntime():
    # parapipe.report reads the one dealing rule of the executor (ppexec.dispatch), a light module: importing it
    # must not import ppexec.executor and, with it, ONNX Runtime
    code = ("import sys, parapipe.report, parapipe.report.gantt, parapipe.report.plots; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('onnxruntime', 'ppexec'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "ppexec.dispatch" in loaded and "ppexec.executor" not in loaded and "onnxruntime" not in loaded, loaded


def _crowded_doc(n_front=40, n_pipeline=60, soc="amlogic_a311d"):
    """The fixture's document with a crowded front: ``n_front`` parapipe points on a tight staircase (1 % apart)
    and a cloud of ``n_pipeline`` pipeline points next to it, every one a copy of a real mapping with its own
    figures; host documents have placeholder powers."""
    import copy

    data = _doc()
    base = {p["strategy"]: p for p in data["points"]}
    pts = [p for p in data["points"] if p["strategy"] not in ("parapipe", "pipeline")]
    rng = np.random.default_rng(0)
    for i in range(n_front):
        p = copy.deepcopy(base["parapipe"])
        p.update(id=f"p{i}", period_s=0.030 * (1 + 0.01 * i), latency_s=0.080 * (1 - 0.004 * i),
                 energy_j=0.30 * (1 + 0.005 * ((i * 7) % n_front)), pareto=True)
        p["throughput_per_s"] = 1 / p["period_s"]
        pts.append(p)
    for i in range(n_pipeline):
        p = copy.deepcopy(base["pipeline"])
        p.update(id=f"pipeline-{i}", period_s=0.033 * (1 + 0.2 * rng.random()),
                 latency_s=0.085 * (1 + 0.2 * rng.random()), energy_j=0.33 * (1 + 0.2 * rng.random()))
        p["throughput_per_s"] = 1 / p["period_s"]
        pts.append(p)
    data["points"] = pts
    data["soc"] = {"name": soc}
    return _parse(data)


def _label_collisions(fig):
    """Renderer boxes of every point label of ``fig`` that overlap another label or a visible marker (marker
    extents from the scatter collections' own paths and sizes), or leave the axes; and the label count."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PathCollection

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    px = fig.dpi / 72
    bad, count = [], 0

    def hit(a, b):
        return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])

    for ax in fig.axes:
        b = ax.get_window_extent(r)
        texts = [t for t in ax.texts if t.get_gid() == "point-label"]
        boxes = [(e.x0, e.y0, e.x1, e.y1) for e in (t.get_window_extent(r) for t in texts)]
        count += len(boxes)
        markers = []
        for c in ax.collections:
            if isinstance(c, PathCollection):
                ext = c.get_paths()[0].get_extents()
                sizes = c.get_sizes()
                for i, (x, y) in enumerate(c.get_offset_transform().transform(c.get_offsets())):
                    if b.x0 <= x <= b.x1 and b.y0 <= y <= b.y1:
                        k = sizes[i % len(sizes)] ** 0.5 * px
                        markers.append((x + ext.x0 * k, y + ext.y0 * k, x + ext.x1 * k, y + ext.y1 * k))
        for i, a in enumerate(boxes):
            if not (b.x0 - 0.5 <= a[0] and a[2] <= b.x1 + 0.5 and b.y0 - 0.5 <= a[1] and a[3] <= b.y1 + 0.5):
                bad.append((texts[i].get_text(), "outside the axes"))
            bad += [(texts[i].get_text(), texts[j].get_text()) for j in range(i + 1, len(boxes)) if hit(a, boxes[j])]
            bad += [(texts[i].get_text(), "a marker") for m in markers if hit(a, m)]
    return bad, count


def test_crowded_front_labels_never_overlap_labels_or_markers():
    from parapipe.report.plots import pareto_figure

    fig = pareto_figure(_crowded_doc())
    bad, count = _label_collisions(fig)
    assert bad == [] and count >= 40
    zoom_c = fig.axes[2]
    labelled = {t.get_text() for t in zoom_c.texts if t.get_gid() == "point-label"}
    # the zoomed panel names most of the 40 crowded front points; those left out are counted in its title
    ids = {part for text in labelled for part in text.split("/")}
    front = {f"p{i}" for i in range(40)}
    left = len(front - ids)
    assert left <= 20
    assert (f"{left} label" in zoom_c.get_title()) == (left > 0)
    # every baseline strategy is named somewhere (single PU by its PU), not only single-PU
    every = {part for ax in fig.axes for t in ax.texts if t.get_gid() == "point-label" for part in t.get_text().split("/")}
    assert any(s.startswith("pipeline-") for s in every) and any(s.startswith("parallel-") for s in every)
    assert {"big", "gpu", "little"} <= every


def test_legend_sits_outside_every_panel_and_the_upper_bound_shows(doc):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from parapipe.report.plots import pareto_figure

    fig = pareto_figure(doc)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    (legend,) = fig.legends
    e = legend.get_window_extent(r)
    for ax in fig.axes:
        a = ax.get_window_extent(r)
        assert min(a.x1, e.x1) <= max(a.x0, e.x0) or min(a.y1, e.y1) <= max(a.y0, e.y0)
    ax_t = fig.axes[0]
    upper = 1 / doc.bounds.period_lb_s
    assert ax_t.get_ylim()[0] <= upper <= ax_t.get_ylim()[1]
    assert "throughput upper bound" in [t.get_text() for t in legend.get_texts()][-1]


def test_placeholder_energies_are_marked_on_the_energy_panels():
    from parapipe.report.plots import PLACEHOLDER_NOTE, power_note, pareto_figure
    from parapipe.soc.loader import load_soc

    host = _crowded_doc(4, 4, soc="host")
    assert power_note(host) == PLACEHOLDER_NOTE
    fig = pareto_figure(host)
    assert PLACEHOLDER_NOTE in fig.axes[1].get_xlabel() and PLACEHOLDER_NOTE in fig.axes[3].get_xlabel()
    assert PLACEHOLDER_NOTE not in fig.axes[0].get_xlabel()
    # a profile whose powers all cite a source gets no note; one with a placeholder power gets it
    soc = load_soc("amlogic_a311d")
    sourced = soc.model_copy(update={"provenance": {k: v.model_copy(update={"confidence": None, "source": "x"})
                                                    for k, v in soc.provenance.items()}})
    assert power_note(_parse(_doc()), sourced) is None
    prov = dict(sourced.provenance)
    prov["pus.gpu.active_power_w"] = prov["pus.gpu.active_power_w"].model_copy(
        update={"confidence": "low", "note": "placeholder: no power meter read"})
    assert power_note(_parse(_doc()), sourced.model_copy(update={"provenance": prov})) == PLACEHOLDER_NOTE


def test_narrow_blocks_of_a_stage_merge_into_one_counted_bar():
    # 35 blocks of 0.1 ms on one PU in a 70 ms chart (~2 px each) become one bar "35 blocks"; wide bars stay
    from parapipe.report.gantt import GanttBar, merge_narrow_bars

    narrow = [GanttBar("npu", 0.010 + 1e-4 * i, 0.010 + 1e-4 * (i + 1), 3, 0, f"n{i}", "block") for i in range(35)]
    wide = [GanttBar("npu", 0.020, 0.030, 3, 0, "big block", "block"),
            GanttBar("npu", 0.005, 0.010, 3, 0, "input", "input")]
    other_frame = [GanttBar("npu", 0.040 + 1e-4 * i, 0.040 + 1e-4 * (i + 1), 3, 1, f"n{i}", "block")
                   for i in range(3)]
    px_per_s = 1360 / 0.070
    out = merge_narrow_bars(narrow + wide + other_frame, px_per_s)
    labels = sorted(b.label for b in out)
    assert labels == ["3 blocks", "35 blocks", "big block", "input"]
    merged = next(b for b in out if b.label == "35 blocks")
    assert (merged.start_s, merged.end_s) == (pytest.approx(0.010), pytest.approx(0.0135))


def test_trace_bars_speak_of_stages_and_frames():
    from parapipe.report.gantt import GanttBar, trace_bar_texts

    texts = trace_bar_texts(GanttBar("cpu0", 0.0, 1.0, 1, 12, "s1.cpu0.t0", "task"))
    assert texts[0] == "stage 1 on cpu0, frame 12" and all("s1.cpu0" not in t for t in texts)
    assert trace_bar_texts(GanttBar("cpu0", 0.0, 1.0, 2, 3, "s2.cpu0.t1", "task"))[0] == \
        "stage 2 task 1 on cpu0, frame 3"
