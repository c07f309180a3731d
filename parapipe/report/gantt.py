"""Gantt charts: the modelled pipelined schedule of one mapping, and a measured run's task trace.

Modelled schedule (steady state of the cost model, :mod:`parapipe.cost.evaluate`). Frame ``f`` enters stage
``s`` at ``f * period_s + offset_s[s]``. Inside a stage the PUs of the stage are first reserved for the
stage's input transfer (``input_s``, drawn hatched on every PU of the stage, as
:func:`parapipe.cost.evaluate.evaluate_stage` books it), then block ``b`` runs on ``assignment[b]`` from
``input_s + block_start_s[b]`` to ``input_s + block_finish_s[b]`` (the writer's times are measured from the
end of the input transfer: ``time_s = input_s + makespan_s``, :mod:`parapipe.mapping`).

``offset_s[s]`` is the sum of the earlier stage times (each stage starts when the previous one ends) whenever
that puts no two stages on one PU at the same time modulo the period, which always holds when every PU serves
one stage. A PU serving non-adjacent stages (GPU -> big -> GPU) can only reach the modelled period by
interleaving frames; :func:`stage_offsets_s` then delays the later stage to the first time its PUs are free in
every period (a modulo schedule: the cost model's latency assumes an idle pipeline, this one is the steady
state).

One module (about 500 lines) because the predicted chart (from a point) and the measured one (from a trace)
share the bar model, the merging of narrow blocks and the drawing; splitting them would split one picture.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from matplotlib.patches import Patch

from matplotlib.figure import Figure

from ppexec.dispatch import SmoothWeightedRoundRobin

from ..errors import input_error
from ..mapping.model import ParetoDoc, Point, Stage, stages_text
from ._common import DEFAULT_SOURCE, FIX, save_figure, title_of

log = logging.getLogger(__name__)

__all__ = ["GanttBar", "stage_offsets_s", "gantt_bars", "plot_gantt", "gantt_from_trace", "trace_frame_window",
           "trace_title", "merge_narrow_bars", "trace_bar_texts"]


@dataclass(frozen=True)
class GanttBar:
    """One bar of a Gantt chart: ``pu`` is busy from ``start_s`` to ``end_s`` (s) with ``label`` (a block or
    task name) of ``stage`` for ``frame``; ``kind`` is ``"block"``, ``"input"`` (input transfer) or ``"task"``
    (measured)."""

    pu: str
    start_s: float
    end_s: float
    stage: int
    frame: int
    label: str
    kind: str


def _arcs_overlap(a: float, la: float, b: float, lb: float, period_s: float, eps: float) -> bool:
    """Whether arcs [a, a+la) and [b, b+lb) of a circle of circumference ``period_s`` overlap (beyond eps)."""
    if la <= eps or lb <= eps:
        return False
    return (b - a) % period_s < la - eps or (a - b) % period_s < lb - eps


def stage_offsets_s(stage_time_s: Sequence[float], stage_pus: Sequence[Sequence[str]],
                    period_s: float) -> List[float]:
    """Start of every stage relative to its frame's entry, in a schedule that repeats every ``period_s``.

    Parameters
    ----------
    stage_time_s : sequence of float, shape (n_stages,)
        Stage times (s), input transfer included.
    stage_pus : sequence of sequence of str, shape (n_stages, *)
        PUs of every stage (a PU may appear in several stages).
    period_s : float
        The schedule's period (s), at least the busy time of every PU.

    Returns
    -------
    list of float, shape (n_stages,)
        ``offset[0] = 0``; ``offset[s]`` is the earliest time >= ``offset[s-1] + stage_time_s[s-1]`` at which
        every PU of stage ``s`` is free modulo ``period_s`` (greedy; equal to the sum of the earlier stage
        times when no PU serves two stages). Where no such time exists (a PU busier than the period, or the
        greedy order fails) the plain sum is used and a warning is logged: bars on that PU will overlap.

    Examples
    --------
    >>> stage_offsets_s([2.0, 3.0], [["gpu"], ["big"]], 3.0)
    [0.0, 2.0]
    >>> stage_offsets_s([2.0, 1.0, 1.0], [["gpu"], ["big"], ["gpu"]], 3.0)
    [0.0, 2.0, 5.0]
    """
    eps = 1e-9 * max(period_s, 1e-12)
    placed: Dict[str, List[tuple]] = {}
    offsets: List[float] = []
    ready = 0.0
    for s, (t, pus) in enumerate(zip(stage_time_s, stage_pus)):
        start = ready
        if period_s > 0 and t <= period_s + eps:
            arcs = [arc for pu in pus for arc in placed.get(pu, [])]
            candidates = sorted({ready} | {ready + ((a + la - ready) % period_s) for a, la in arcs})
            for c in candidates:
                if not any(_arcs_overlap(c % period_s, t, a, la, period_s, eps) for a, la in arcs):
                    start = c
                    break
            else:
                log.warning("stage %d: no time in the period where all its PUs (%s) are free; its bars "
                            "overlap other stages on them", s, ", ".join(pus))
        else:
            log.warning("stage %d: time %.6g s exceeds the period %.6g s; its bars overlap the next frame's",
                        s, t, period_s)
        for pu in pus:
            placed.setdefault(pu, []).append((start % period_s if period_s > 0 else 0.0, t))
        offsets.append(start)
        ready = start + t
    return offsets


def _replicas(st: Stage) -> List[Tuple[List[str], float, float]]:
    """``[(pus, share, time_s), ...]`` of a replicated stage's replicas (empty for a plain stage)."""
    return [(list(rep.pus), rep.share, rep.time_s) for rep in st.replicas or []]


def _block_times(st: Stage, block: str, where: str, source: str) -> Tuple[float, float]:
    """Start and finish of ``block`` in stage ``st`` (s, from the end of the stage's input transfer).

    Raises
    ------
    InputError
        The stage records no start or finish for the block, or the block finishes before it starts.
    """
    for key, times in (("block_start_s", st.block_start_s), ("block_finish_s", st.block_finish_s)):
        if block not in times:
            raise input_error(source, f"{where}.{key}.{block}", "missing", FIX)
    b0, b1 = st.block_start_s[block], st.block_finish_s[block]
    if b1 < b0:
        raise input_error(source, f"{where}.block_finish_s.{block}",
                          f"finishes ({b1:.6g} s) before it starts ({b0:.6g} s)", FIX)
    return b0, b1


def gantt_bars(point: Point, n_frames: int = 3, *, source: Optional[str] = None) -> List[GanttBar]:
    """The bars of the modelled pipelined schedule of one point (see the module docstring).

    Parameters
    ----------
    point : parapipe.mapping.Point
        The point to draw, from a validated document (:func:`parapipe.mapping.select_point`).
    n_frames : int
        Consecutive frames to lay out (>= 1).
    source : str, optional
        File name for error messages (default ``"pareto.json"``).

    Returns
    -------
    list of GanttBar
        Per frame and stage: one ``"input"`` bar per PU of the stage when ``input_s > 0``, one ``"block"`` bar
        per block; for a replicated stage, one bar ``"replica r"`` per PU of the replica the frame is dealt to
        (smooth weighted round robin by share, as the executor deals), as long as that replica's time, from when
        the frame arrives or the replica is done with its previous frame. Times in
        seconds from frame 0 entering stage 0.

    Raises
    ------
    InputError
        ``n_frames < 1``; a block of a stage without a start or finish time, or finishing before it starts
        (named by path, ``points[<id>].mapping.stages[<s>].block_start_s.<block>``).
    """
    src = source or DEFAULT_SOURCE
    if isinstance(n_frames, bool) or not isinstance(n_frames, int) or n_frames < 1:
        raise input_error("n_frames", None, f"must be an integer >= 1, got {n_frames!r}",
                          "give a frame count")
    period_s = point.period_s
    stages = point.stages
    times = [st.time_s for st in stages]
    inputs = [st.input_s for st in stages]
    replicas = [_replicas(st) for st in stages]
    if any(replicas):  # PUs are disjoint between stages: each stage starts when its slowest replica is done
        spans = [max(r[2] for r in reps) if reps else t for reps, t in zip(replicas, times)]
        offsets = [sum(spans[:j]) for j in range(len(stages))]
    else:
        offsets = stage_offsets_s(times, [st.pus for st in stages], period_s)
    dealers = [SmoothWeightedRoundRobin([r[1] for r in reps]) if reps else None for reps in replicas]
    free: Dict[Tuple[int, int], float] = {}  # (stage, replica) -> when it is done with its last frame
    bars: List[GanttBar] = []
    for f in range(n_frames):
        for j, st in enumerate(stages):
            w = f"points[{point.id}].mapping.stages[{j}]"
            base = f * period_s + offsets[j]
            dealer = dealers[j]
            if dealer is not None:  # the frame runs whole on the replica the dispatcher deals it to (one bar per PU)
                r = dealer.pick()
                pus, _, t_r = replicas[j][r]
                start = max(base, free.get((j, r), base))  # a busy replica queues the frame
                free[(j, r)] = start + t_r
                bars.extend(GanttBar(pu, start, start + t_r, j, f, f"replica {r}", "block") for pu in pus)
                continue
            if inputs[j] > 0:
                bars.extend(GanttBar(pu, base, base + inputs[j], j, f, "input", "input") for pu in st.pus)
            for block in st.blocks:
                b0, b1 = _block_times(st, block, w, src)
                t0 = base + inputs[j]
                bars.append(GanttBar(st.pu_of(block), t0 + b0, t0 + b1, j, f, str(block), "block"))
    return bars


def _lanes(bars: Iterable[GanttBar], order: Sequence[str] = ()) -> List[str]:
    lanes = list(dict.fromkeys(order))
    for b in bars:
        if b.pu not in lanes:
            lanes.append(b.pu)
    return lanes


#: A block bar narrower than this (pixels at the chart's 1600 px width) is merged with its narrow neighbours of
#: the same PU, stage and frame into one bar labelled with their count: 35 two-pixel bars with white edges read
#: as a barcode. 12 px is below the narrowest bar a label fits in (7 px per character + 6 at 8 pt, as
#: :func:`_draw` writes them), so merging hides no label. Chosen for readability, not from a source.
MERGE_BELOW_PX = 12.0


def merge_narrow_bars(bars: Sequence[GanttBar], px_per_s: float, min_px: float = MERGE_BELOW_PX) -> List[GanttBar]:
    """Merge runs of consecutive ``"block"`` bars of one PU, stage and frame that are each narrower than
    ``min_px`` pixels (and at most ``min_px`` apart) into one bar from the first start to the last end,
    labelled ``"<n> blocks"``; other bars are kept as they are.

    Parameters
    ----------
    bars : sequence of GanttBar
    px_per_s : float
        Pixels per second of the chart.
    min_px : float
        Width below which a bar is merged.

    Returns
    -------
    list of GanttBar
        Sorted by PU, stage, frame and start.

    Examples
    --------
    >>> bs = [GanttBar("big", t, t + 0.001, 0, 0, f"b{i}", "block") for i, t in enumerate((0.0, 0.001, 0.002))]
    >>> [(b.label, b.end_s) for b in merge_narrow_bars(bs + [GanttBar("big", 0.003, 0.1, 0, 0, "b3", "block")], 1000)]
    [('3 blocks', 0.003), ('b3', 0.1)]
    """
    out: List[GanttBar] = []
    run: List[GanttBar] = []

    def flush() -> None:
        if len(run) > 1:
            out.append(GanttBar(run[0].pu, run[0].start_s, max(b.end_s for b in run), run[0].stage, run[0].frame,
                                f"{len(run)} blocks", "block"))
        else:
            out.extend(run)
        run.clear()

    for b in sorted(bars, key=lambda b: (b.pu, b.stage, b.frame, b.kind, b.start_s)):
        narrow = b.kind == "block" and (b.end_s - b.start_s) * px_per_s < min_px
        if run and not (narrow and (b.pu, b.stage, b.frame) == (run[0].pu, run[0].stage, run[0].frame)
                        and (b.start_s - max(r.end_s for r in run)) * px_per_s <= min_px):
            flush()
        if narrow:
            run.append(b)
        else:
            out.append(b)
    flush()
    return out


def _draw(bars: Sequence[GanttBar], lanes: Sequence[str], title: str, path: Any,
          stage_names: Dict[int, str], frame_starts_s: Sequence[float] = (),
          label_of: Optional[Any] = None) -> None:
    """Draw ``bars`` (seconds; shown in ms) on one lane per PU and write the PNG. Narrow block bars are merged
    (:func:`merge_narrow_bars`). ``label_of(bar)`` gives the texts to try in a bar, longest first (default: the
    bar's label); the first that fits is written."""
    t_min = min(b.start_s for b in bars)
    t_max = max(b.end_s for b in bars)
    span_ms = max((t_max - t_min) * 1e3, 1e-9)
    px_per_ms = 16 * 100 * 0.85 / span_ms  # figure px x axes share / x span: whether a label fits its bar
    bars = merge_narrow_bars(bars, px_per_ms * 1e3)
    fig = Figure(figsize=(16, max(3.6, 1.9 + 0.75 * len(lanes))), layout="constrained")
    ax = fig.subplots()
    row = {pu: i for i, pu in enumerate(lanes)}
    groups: Dict[tuple, List[tuple]] = {}  # one broken_barh call per lane, stage, frame parity and kind
    for b in bars:
        y = len(lanes) - 1 - row[b.pu]
        x0 = (b.start_s - t_min) * 1e3
        w = (b.end_s - b.start_s) * 1e3
        groups.setdefault((y, b.stage, b.frame % 2, b.kind), []).append((x0, w))
        if b.kind == "input":
            continue
        merged = b.label.endswith(" blocks")
        texts = [b.label, b.label.split()[0]] if merged else label_of(b) if label_of is not None else [b.label]
        text = next((t for t in texts if w * px_per_ms > 7 * len(t) + 6), None)
        if text:
            ax.text(x0 + w / 2, y, text, ha="center", va="center", fontsize=8, color="white", clip_on=True,
                    zorder=3)
    for (y, stage, odd, kind), spans in groups.items():
        color = f"C{stage % 10}"
        if kind == "input":
            ax.broken_barh(spans, (y - 0.3, 0.6), facecolors="white", edgecolors=color, hatch="////",
                           linewidth=0.8, zorder=2)
        else:
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=color, edgecolors="white", linewidth=0.6,
                           alpha=0.7 if odd else 0.95, zorder=2)
    for f, t in enumerate(frame_starts_s):
        x = (t - t_min) * 1e3
        ax.axvline(x, color="0.3", ls=":", lw=1, zorder=1)
        ax.annotate(f"frame {f} in", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=9, color="0.3")
    ax.set_yticks(range(len(lanes)), labels=list(reversed(lanes)), fontsize=11)
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    ax.set_xlim(0, span_ms * 1.01)
    ax.set_xlabel("time (ms)", fontsize=12)
    ax.set_ylabel("processing unit", fontsize=12)
    ax.tick_params(axis="x", labelsize=11)
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(facecolor=f"C{s % 10}", label=name) for s, name in sorted(stage_names.items())]
    if any(b.frame % 2 for b in bars):
        handles.append(Patch(facecolor="0.55", alpha=0.7, label="odd frames (lighter)"))
    if any(b.kind == "input" for b in bars):
        handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="////", label="input transfer"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=10, framealpha=0.9)
    ax.set_title(title, fontsize=13)
    save_figure(fig, path)


def plot_gantt(doc: ParetoDoc, point: Point, path: Any, n_frames: int = 3, *,
               source: Optional[str] = None) -> None:
    """Write the Gantt chart of one point's modelled pipelined schedule (one lane per PU) as a PNG.

    Bars are coloured by stage (alternate frames lighter), input transfers hatched, block names written
    where they fit; dotted lines mark frames entering the pipeline every ``period_s``. Layout in
    :func:`gantt_bars`.

    Parameters
    ----------
    doc : parapipe.mapping.ParetoDoc
        The document (its model and SoC names title the chart).
    point : parapipe.mapping.Point
        The point to draw, one of ``doc.points``.
    path : str or os.PathLike
        PNG to write (a temp file in the same folder, then renamed); 1600 px wide.
    n_frames : int
        Consecutive frames to draw (>= 1).
    source : str, optional
        File name for error messages (default ``"pareto.json"``).

    Raises
    ------
    InputError
        As :func:`gantt_bars`.
    OSError
        The folder cannot be written.
    """
    bars = gantt_bars(point, n_frames, source=source)
    stages = point.stages
    names = {}
    for j, st in enumerate(stages):
        n = len(st.blocks)
        names[j] = f"stage {j}: {stages_text([st])} ({n} block{'s' if n != 1 else ''})"
    period_s = point.period_s
    title = (f"{title_of(doc)}: point {point.id} ({point.strategy}), modelled schedule — "
             f"period {period_s * 1e3:.2f} ms, latency {point.latency_s * 1e3:.2f} ms")
    lanes = _lanes(bars, [pu for st in stages for pu in st.all_pus()])
    _draw(bars, lanes, title, path, names, [f * period_s for f in range(n_frames)])


def _attr(ev: Any, name: str, i: int) -> Any:
    if isinstance(ev, Mapping):
        if name not in ev:
            raise input_error("trace", f"event[{i}].{name}", "missing", "pass TraceEvent records of a run")
        return ev[name]
    try:
        return getattr(ev, name)
    except AttributeError:
        raise input_error("trace", f"event[{i}].{name}", "missing",
                          "pass TraceEvent records of a run (ppexec.metrics)") from None


#: Frames ``plot --trace`` draws by default when a run holds more (a window from the middle of the run: 200
#: frames make an unreadable barcode at 1600 px).
DEFAULT_TRACE_FRAMES = 20


def trace_frame_window(frames: Sequence[int], window: Optional[Sequence[int]] = None) -> tuple:
    """The frames ``[first, stop)`` to draw of a run with ``frames``: ``window`` if given, else all of them when
    there are at most :data:`DEFAULT_TRACE_FRAMES`, else that many from the middle of the run (the steady
    state, away from the pipeline's fill and drain).

    Raises
    ------
    InputError
        A window that holds none of the run's frames.
    """
    present = sorted(set(int(f) for f in frames))
    if window is not None:
        first, stop = int(window[0]), int(window[1])
        if not any(first <= f < stop for f in present):
            raise input_error("--frames-window", None, f"{first}:{stop} holds none of the run's frames "
                              f"({present[0]}..{present[-1]})", f"choose a window inside {present[0]}:"
                              f"{present[-1] + 1}")
        return first, stop
    if len(present) <= DEFAULT_TRACE_FRAMES:
        return present[0], present[-1] + 1
    first = present[(len(present) - DEFAULT_TRACE_FRAMES) // 2]
    return first, first + DEFAULT_TRACE_FRAMES


def trace_title(info: Mapping, events: Sequence[Any], first: int, stop: int) -> str:
    """Title of a measured run's chart: model, point, measured (and predicted) throughput, frames shown.

    ``info`` is the trace's ``otherData`` (:func:`ppexec.metrics.chrome_trace`: ``model``, ``point``,
    ``throughput_per_s``, ``predicted``; with ``workload``, a workload run's, its throughput in workload frames
    per second); without a throughput there, it is measured on the events themselves
    (frames / time from the first start to the last end, marked ``≈``).
    """
    frames = sorted({int(_attr(e, "frame", i)) for i, e in enumerate(events)})
    throughput = info.get("throughput_per_s")
    workload = bool(info.get("workload"))  # a workload run's throughput counts workload frames
    if isinstance(throughput, (int, float)) and throughput > 0:
        rate = f"{throughput:.1f} {'workload frames/s' if workload else 'inf/s'} measured"
    else:
        span = max(float(_attr(e, "end_s", i)) for i, e in enumerate(events)) - \
            min(float(_attr(e, "start_s", i)) for i, e in enumerate(events))
        rate = f"≈{len(frames) / span:.1f} inf/s measured" if span > 0 else "throughput unknown"
    found = info.get("predicted")
    predicted: Mapping = found if isinstance(found, Mapping) else {}
    if isinstance(predicted.get("throughput_per_s"), (int, float)):
        rate += f", {predicted['throughput_per_s']:.1f} predicted"
        if predicted.get("applies") is False:
            rate += " (PUs substituted)"
    shown = [f for f in frames if first <= f < stop]
    head = f"{info.get('model') or '?'}: {'workload point' if workload else 'point'} {info.get('point') or '?'}"
    return f"{head} — {rate} — frames {shown[0]}–{shown[-1]} of {len(frames)}"


def gantt_from_trace(trace_events: Iterable[Any], path: Any, *, title: Optional[str] = None,
                     frames_window: Optional[Sequence[int]] = None, info: Optional[Mapping] = None) -> None:
    """Write the Gantt chart of a measured run (one lane per PU) as a PNG.

    Parameters
    ----------
    trace_events : iterable of TraceEvent or dict
        Task executions with ``stage``, ``pu``, ``task``, ``frame``, ``start_s``, ``end_s`` (seconds since the
        run started), e.g. :attr:`ppexec.metrics.RunMetrics.trace`. Time 0 of the chart is the earliest start drawn.
        Events of a workload's run (a ``model`` each: :mod:`ppexec.workload`) are coloured by model and stage,
        each bar naming its model.
    path : str or os.PathLike
        PNG to write (a temp file in the same folder, then renamed; the usual file mode); 1600 px wide.
    title : str, optional
        Figure title (default :func:`trace_title`: model, point, throughput, frames shown).
    frames_window : (first, stop), optional
        Draw frames ``first <= frame < stop`` only (default :func:`trace_frame_window`).
    info : mapping, optional
        The trace's ``otherData`` (model, point, throughput) for the default title.

    Raises
    ------
    InputError
        No events, an event without one of the fields, an event that ends before it starts, or a window
        without frames.
    OSError
        The folder cannot be written.
    """
    events = list(trace_events)
    if not events:
        raise input_error("trace", None, "no trace events", "run at least one measured frame with tracing on")
    first, stop = trace_frame_window([_attr(e, "frame", i) for i, e in enumerate(events)], frames_window)
    bars: List[GanttBar] = []
    for i, ev in enumerate(events):
        start, end = float(_attr(ev, "start_s", i)), float(_attr(ev, "end_s", i))
        if end < start:
            raise input_error("trace", f"event[{i}]", f"ends ({end:.6g} s) before it starts ({start:.6g} s)",
                              "pass the trace of one run")
        frame = int(_attr(ev, "frame", i))
        if first <= frame < stop:
            bars.append(GanttBar(str(_attr(ev, "pu", i)), start, end, int(_attr(ev, "stage", i)), frame,
                                 str(_attr(ev, "task", i)), "task"))
    models = [ev.get("model") if isinstance(ev, Mapping) else getattr(ev, "model", None) for ev in events]
    label_of = trace_bar_texts
    if any(m is not None for m in models):  # a workload's trace: each model's stages in colours of their own
        keys: Dict[Tuple[str, int], int] = {}
        bars = []
        for i, ev in enumerate(events):
            frame = int(_attr(ev, "frame", i))  # each event's times were checked above
            if first <= frame < stop:
                key = keys.setdefault((str(models[i]), int(_attr(ev, "stage", i))), len(keys))
                bars.append(GanttBar(str(_attr(ev, "pu", i)), float(_attr(ev, "start_s", i)),
                                     float(_attr(ev, "end_s", i)), key, frame, str(_attr(ev, "task", i)), "task"))
        of = {k: ms for ms, k in keys.items()}

        def label_of(bar: GanttBar) -> List[str]:
            model, stage = of[bar.stage]
            return [f"{model} s{stage} f{bar.frame}", f"s{stage} f{bar.frame}", f"{bar.frame}"]

        stage_name = {k: f"{m} stage {s}" for k, (m, s) in of.items()}
    else:
        stage_name = {}
    bars.sort(key=lambda b: (b.start_s, b.stage, b.pu))
    pus: Dict[int, List[str]] = {}
    for b in bars:
        pus.setdefault(b.stage, [])
        if b.pu not in pus[b.stage]:
            pus[b.stage].append(b.pu)
    names = {s: f"{stage_name.get(s, f'stage {s}')} on {', '.join(pus[s])}" for s in sorted(pus)}
    head = title or trace_title(info or {}, events, first, stop)
    _draw(bars, _lanes(bars), head, path, names, label_of=label_of)


def trace_bar_texts(bar: GanttBar) -> List[str]:
    """Texts for a measured task's bar, longest first: ``"stage 1 on cpu0, frame 12"``, ``"stage 1, frame
    12"``, ``"s1 f12"``, ``"12"`` (the executor's task name ``s1.cpu0.t0`` is not shown; a stage split into
    several tasks on one PU adds ``task k``).

    Examples
    --------
    >>> trace_bar_texts(GanttBar("cpu0", 0.0, 1.0, 1, 12, "s1.cpu0.t0", "task"))
    ['stage 1 on cpu0, frame 12', 'stage 1, frame 12', 's1 f12', '12']
    """
    part = bar.label.rsplit(".", 1)[-1]
    task = f" task {part[1:]}" if part.startswith("t") and part[1:].isdigit() and part != "t0" else ""
    return [f"stage {bar.stage}{task} on {bar.pu}, frame {bar.frame}", f"stage {bar.stage}{task}, frame {bar.frame}",
            f"s{bar.stage} f{bar.frame}", f"{bar.frame}"]
