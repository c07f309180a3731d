"""Blocks and sub-models timed on this machine, in process, the way the pipelined executor runs them.

A *sub-model* is a set of blocks run as one ONNX model (:func:`~parapipe.graph.extract.extract_submodel`): a
single block, a single-PU stage's contiguous range, or a task of a multi-PU stage
(:func:`parapipe.cost.tasks.stage_submodels`). Each is loaded by the PU's runtime adapter
(:func:`ppexec.timing.time_model`: an ORT session made by :func:`ppexec.session.create_session`, one thread, no
spinning, ``ORT_ENABLE_ALL``) on a thread pinned to one core, fed the model's feeds (one seeded frame by
default), the real values of the integer and boolean tensors handed between blocks, and seeded random values
elsewhere. The cores of one machine are taken as identical: everything is measured on the first allowed core and
the time holds for every PU of the ``host`` profile (:func:`parapipe.measure.local.local_soc`).

* :func:`measure_local`: the host profile and every block's time (``--soc host``), reusing the profile database's
  rows of kind ``"block"``;
* :func:`measure_submodels`: stage-level times, the form of
  :attr:`parapipe.cost.problem.MappingProblem.submodel_time_s` (one PU's entry).
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, TypeVar

import numpy as np
import onnx
import onnxruntime as ort

from ppexec import timing
from ppexec.frames import FrameInput, draw_frames
from ppexec.plan import PUBinding
from ppexec.session import create_session, pin_current_thread

from parapipe.cost.problem import SubmodelBlocks, is_block_range
from parapipe.errors import ExecutionError, input_error
from parapipe.graph.coarsen import Block, BlockGraph
from parapipe.graph.extract import extract_submodel
from parapipe.graph.opgraph import OpGraph
from parapipe.measure.local import allowed_cpus, local_soc
from parapipe.measure.timer import LOCAL_HOST
from parapipe.measure.trust import MeasureLog
from parapipe.profiledb.catalog import block_signature
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.records import Measurement, utc_now_iso
from parapipe.soc.identity import HOST_SOC
from parapipe.soc.profile import SoC

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["LocalProfile", "measure_local", "measure_submodels", "STAGE_MIN_S"]

#: Seconds of runs per sub-model and pass that the stage timing of ``optimize --soc host`` asks of
#: :func:`measure_submodels`: ten runs of a 3 ms sub-model span 30 ms, short enough for one transient on a shared
#: machine to move their median; 0.15 s of runs is about fifty. Measured: squeezenet's whole model timed loaded
#: three times in a row with 10 runs and ``min_s=0`` gave medians 4.49, 3.10 and 3.14 ms (re-measure with
#: ``measure_submodels(coarsen(og), [tuple(range(n))], loaded=True, min_s=0.0)`` called three times).
STAGE_MIN_S = 0.15


def _start_pinned(cpu: int, fn: Callable[[], T]) -> tuple[threading.Thread, dict]:
    """Start ``fn`` in a daemon thread pinned to ``cpu``; the dict gets ``result`` or ``error``."""
    box: dict = {}

    def target() -> None:
        try:
            pin_current_thread(f"cpu{cpu}", (cpu,))
            box["result"] = fn()
        except BaseException as exc:  # carried back to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"parapipe-local-cpu{cpu}", daemon=True)
    thread.start()
    return thread, box


@dataclass(frozen=True)
class LocalProfile:
    """This machine's SoC with measured block times.

    Attributes
    ----------
    soc : SoC
        Named ``"host"``; PUs ``cpu<i>`` for the allowed cores ``i`` (see :func:`local_soc`).
    block_time_s : dict of (str, str) to float
        ``(block name, PU name)`` -> median time of the block on that PU, s; every block × every PU.
    measure_s : float
        Wall time :func:`measure_local` took, s.
    """

    soc: SoC
    block_time_s: dict[tuple[str, str], float]
    measure_s: float


def _random_feeds(og: OpGraph, names: Sequence[str], given: Optional[dict] = None,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """The inputs of a sub-model whose inputs are ``names``: ``given`` values (the user's feeds, the real index
    values) where there are some, else seeded values drawn by :func:`ppexec.frames.draw_frames` (floats standard
    normal, booleans 0/1, integers 0: no range bounds an inner tensor)."""
    given = given or {}
    drawn = draw_frames([FrameInput(n, og.tensors[n].shape, og.tensors[n].dtype) for n in names if n not in given],
                        1, seed)[0]
    return {name: np.asarray(given[name]) if name in given else drawn[name] for name in names}


def _real_index_values(bg: BlockGraph, feeds: Optional[dict]) -> dict[str, np.ndarray]:
    """``feeds`` (default: one seeded frame) plus the values of the integer and boolean tensors that cross
    blocks, from one run of the whole model: random values there would be wrong shapes or indices.

    Raises
    ------
    InputError
        The whole model fails on these inputs (a feed error naming the inputs that reach the failing node and
        the ``--feeds`` remedy, :func:`parapipe.graph.feeds.feed_error`); run only when integer or boolean values
        matter (such a tensor crosses blocks, or the model has such an input).
    """
    from parapipe.graph.feeds import feed_error, input_specs
    from ppexec.reference import reference_outputs

    og = bg.opgraph
    values = dict(feeds) if feeds is not None else draw_frames(input_specs(og), 1)[0]
    wanted = sorted({t for _, _, ts in bg.graph.edges(data="tensors") for t in ts
                     if t in og.tensors and np.dtype(og.tensors[t].dtype).kind in "iub"
                     and not og.tensors[t].sequence})
    if wanted or any(np.dtype(og.tensors[n].dtype).kind in "iub" for n in og.inputs):
        probe = onnx.ModelProto()
        probe.CopyFrom(og.model)
        present = {o.name for o in probe.graph.output}
        probe.graph.output.extend(og.value_info(t) for t in wanted if t not in present)
        try:
            (ran,) = reference_outputs(probe, [values])
        except Exception as exc:  # the inputs are wrong, not the model: ORT runs it on others
            raise feed_error(og, exc, "--feeds" if feeds is not None else "generated inputs",
                             generated=feeds is None) from exc
        values.update({t: ran[t] for t in wanted})
    return values


def _time_block(og: OpGraph, block: Block, binding: PUBinding, repeats: int, warmup: int,
                given: Optional[dict] = None, record: Optional[MeasureLog] = None) -> list[float]:
    """Times of ``repeats`` runs of the block's sub-model on ``binding``, s (:func:`_time_ops`)."""
    return _time_ops(og, block.ops, block.name, binding, repeats, warmup, given, record=record)


def _time_ops(og: OpGraph, ops: Sequence[str], name: str, binding: PUBinding, repeats: int, warmup: int,
              given: Optional[dict] = None, min_s: float = 0.0, record: Optional[MeasureLog] = None) -> list[float]:
    """Times of ``repeats`` runs of the sub-model of ``ops`` on ``binding`` (:func:`ppexec.timing.time_model`,
    on a thread pinned to its CPUs), s (more runs until they add up to ``min_s``); their spread and the load
    go to ``record``."""
    try:
        sub = extract_submodel(og, ops, name=name, check=False)
        feeds = _random_feeds(og, sub.inputs, given)
        timed = timing.time_model(sub.model, binding, warmup, repeats, lambda specs: feeds, min_s)
        if record is not None:
            record.add_times(timed["times_s"], timed.get("load"))
        return timed["times_s"]
    except Exception as exc:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ExecutionError(f"measuring block {name!r} of {og.name!r} on this machine failed: {detail}; "
                             "check that the model runs in ONNX Runtime on its own") from exc


def measure_local(bg: BlockGraph, repeats: int = 10, warmup: int = 3, db: Optional[ProfileDB] = None,
                 progress: Optional[Callable[[int, int], None]] = None,
                 feeds: Optional[dict] = None, record: Optional[MeasureLog] = None,
                 soc_progress: Optional[Callable[[int, int], None]] = None,
                 soc: Optional[SoC] = None) -> LocalProfile:
    """Build :func:`local_soc` (or take ``soc``, one it built before) and time every block of ``bg`` on it.

    Each distinct block (by :func:`block_signature`) is run ``warmup`` times, then timed ``repeats`` times
    with ``time.perf_counter`` in one thread pinned to the first allowed core, in a session made exactly as
    the executor makes it (:func:`ppexec.session.create_session`, one thread); the median is its
    time on every PU (the cores are taken as identical).

    Parameters
    ----------
    bg : BlockGraph
        Blocks of ``bg.opgraph``.
    repeats : int
        Timed runs per block (>= 1; default 10).
    warmup : int
        Unmeasured runs first (>= 0; default 3: ORT allocates on the first runs).
    db : ProfileDB, optional
        Rows of kind ``"block"`` (soc ``"host"``, PU of the measured core, this ORT version) are reused
        instead of measuring again; each new measurement is stored as soon as it is taken (one row per
        distinct block, for the measured PU only), so an interrupted run resumes where it stopped.
    progress : callable (done, total), optional
        Called in the calling thread after each block, ``total = len(bg.blocks)``.
    feeds : dict of str to numpy.ndarray, optional
        Values of the model's data inputs (one frame of ``--feeds``; default one seeded frame,
        :func:`ppexec.frames.draw_frames`). Blocks read them, and the real values of every integer or
        boolean tensor handed between blocks (shape vectors, indices, masks: :func:`_real_index_values`, one run
        of the whole model); other block inputs get seeded standard-normal values.
    record : MeasureLog, optional
        Gets the spread and load of every measurement taken (micro-benchmarks of the profile and blocks).
    soc_progress : callable (done, total), optional
        Called while the host profile is measured (:func:`parapipe.measure.local.local_soc`).
    soc : SoC, optional
        This machine's profile from an earlier :func:`parapipe.measure.local.local_soc` (its transfer and power
        figures are the machine's, whatever the model): not measured again.

    Returns
    -------
    LocalProfile
        ``block_time_s`` has an entry for every block × every PU of ``soc``.

    Raises
    ------
    InputError
        ``repeats`` < 1 or ``warmup`` < 0.
    ExecutionError
        A block's sub-model cannot be built or run (message names the block), or the core cannot be pinned.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise input_error("measure_local", "repeats", f"must be an integer >= 1, got {repeats!r}", "use 10")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise input_error("measure_local", "warmup", f"must be an integer >= 0, got {warmup!r}", "use 3")
    start = time.perf_counter()
    soc = soc if soc is not None else local_soc(record=record, progress=soc_progress)
    og = bg.opgraph
    measured_pu = soc.pu_names[0]
    pinned = soc.pus[measured_pu].execution.cpus
    if not pinned:  # local_soc pins every PU to its core
        raise ExecutionError(f"PU {measured_pu!r} of the host profile is not pinned to a core")
    cpu = pinned[0]
    binding = PUBinding(cpus=(cpu,), threads=1)
    batch = og.tensors[og.inputs[0]].shape[0] if og.inputs and og.tensors[og.inputs[0]].shape else 1
    batch = batch if isinstance(batch, int) and batch >= 1 else 1
    feeds = _real_index_values(bg, feeds)
    by_signature: dict[str, float] = {}
    block_time_s: dict[tuple[str, str], float] = {}
    new_rows: list[Measurement] = []
    for done, block in enumerate(bg.blocks, start=1):
        sig = block_signature(og, block)
        if sig not in by_signature:
            row = None if db is None else db.get(HOST_SOC, measured_pu, sig, batch, "block",
                                                 ort.__version__)
            if row is None:
                times = _time_block(og, block, binding, repeats, warmup, feeds, record)
                median, p90 = float(np.median(times)), float(np.percentile(times, 90))
                summary = "+".join(dict.fromkeys(block.op_types))[:200]
                row = Measurement(HOST_SOC, measured_pu, sig, summary, batch, ort.__version__, median,
                                  max(p90, median), repeats, utc_now_iso(), LOCAL_HOST, "block",
                                  int(block.in_nbytes + block.out_nbytes))
                new_rows.append(row)
                if db is not None:
                    db.put([row])  # one transaction per block: a run killed half-way keeps what it measured
            by_signature[sig] = row.median_s
        for pu in soc.pu_names:
            block_time_s[(block.name, pu)] = by_signature[sig]
        if progress is not None:
            progress(done, len(bg.blocks))
    measure_s = time.perf_counter() - start
    logger.info("local profile of %s: %d block(s), %d measured, %.2f s", og.name, len(bg.blocks),
                len(new_rows), measure_s)
    return LocalProfile(soc=soc, block_time_s=block_time_s, measure_s=measure_s)


@contextlib.contextmanager
def _load_other_cores(og: OpGraph, ops: Sequence[str], name: str, cpu: int,
                      given: Optional[dict]) -> Iterator[None]:
    """Keep every allowed core but ``cpu`` running the sub-model of ``ops`` (own session, one thread, pinned)
    until the block ends; enter once each has run it once."""
    stop, ready = threading.Event(), []

    def spin(core: int) -> Callable[[], None]:
        def body() -> None:
            sub = extract_submodel(og, ops, name=name, check=False)
            sess = create_session(sub.model, PUBinding(cpus=(core,), threads=1), "CPUExecutionProvider")
            feeds = _random_feeds(og, sub.inputs, given)
            sess.run(sub.outputs, feeds)
            flag.set()
            while not stop.is_set():
                sess.run(sub.outputs, feeds)
        flag = threading.Event()
        ready.append(flag)
        return body

    started = [_start_pinned(core, spin(core)) for core in allowed_cpus() if core != cpu]
    try:
        for (thread, _), flag in zip(started, ready):
            while not flag.wait(0.05) and thread.is_alive():
                pass
        yield
    finally:
        stop.set()
        for thread, box in started:
            thread.join()
            if "error" in box:
                logger.warning("loading another core while timing %s failed (%s); timed without that load",
                               name, box["error"])


def _submodel_name(bg: BlockGraph, blocks: SubmodelBlocks) -> str:
    """``first..last`` for a contiguous range of blocks, else the blocks' names joined by ``;`` (for logs)."""
    if is_block_range(blocks):
        return f"{bg.blocks[blocks[0]].name}..{bg.blocks[blocks[-1]].name}"
    return ";".join(bg.blocks[v].name for v in blocks)


def measure_submodels(bg: BlockGraph, submodels: Sequence[Sequence[int]], *, loaded: bool, passes: int = 1,
                      repeats: int = 10, warmup: int = 3, feeds: Optional[Mapping[str, np.ndarray]] = None,
                      cpu: Optional[int] = None, min_s: float = 0.0, record: Optional[MeasureLog] = None,
                      progress: Optional[Callable[[int, int], None]] = None) -> Dict[SubmodelBlocks, float]:
    """Stage-level times: each set of blocks of ``bg`` in ``submodels`` run as ONE sub-model, as the executor runs
    a single-PU stage or a task (:func:`ppexec.session.create_session`, one thread, ``ORT_ENABLE_ALL``, no
    spinning) on a thread pinned to ``cpu`` (default the first allowed core).

    Per pass every sub-model is timed once: the median of ``repeats`` runs after ``warmup`` (more runs until they
    add up to ``min_s`` seconds); the result is the median of its ``passes`` passes' medians. Interleaved passes
    let a disturbance of a shared machine land on one pass of a few sub-models, not on every measurement of one
    candidate mapping (one 10-run median of inception_v1 came out 8 % slow, enough to rank a shared-core pipeline
    above the replicated model it ran 9 % slower than).

    A sub-model keeps the fusions and layout changes ONNX Runtime makes across its blocks (and pays one session
    call), which isolated block times miss: the blocks' sum was 0.7-1.4x the stage's own time on the zoo models
    (``python benchmarks/fidelity.py`` prints both). The result, for every PU of the ``host`` profile alike, goes
    to :attr:`parapipe.cost.problem.MappingProblem.submodel_time_s`.

    ``loaded``: while a sub-model is timed, every other allowed core runs the same sub-model in its own pinned
    session, as in a saturated pipeline or replicated stage, where all cores compute at once and share caches,
    the memory bus and the package's all-core clock (a whole model ran 1.00-1.06x slower so: median 1.02 over
    squeezenet, inception_v1 and resnet50, 3 repeats each); for a cost model without a co-running term of its own
    (:meth:`parapipe.cost.pipeline_terms.PipelineTerms.models_corunning`). Alone otherwise.

    ``record`` gets each timing's spread and load; ``progress(done, total)`` is called after each sub-model of
    each pass (``total = passes * len(submodels)``).

    Returns
    -------
    dict of tuple of int to float
        Seconds per sub-model, keyed by its sorted block indices (:data:`parapipe.cost.problem.SubmodelBlocks`),
        in the order of their first appearance in ``submodels`` (repeats are timed once).

    Raises
    ------
    InputError
        ``passes`` < 1, or an empty sub-model or a block index outside ``0..len(bg.blocks)-1``.
    ExecutionError
        A sub-model cannot be built or run (naming its blocks).
    """
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise input_error("measure_submodels", "passes", f"must be an integer >= 1, got {passes!r}", "use 3")
    n = len(bg.blocks)
    keys: Dict[SubmodelBlocks, None] = {}
    for blocks in submodels:
        key = tuple(sorted({int(v) for v in blocks}))
        if not key or key[0] < 0 or key[-1] >= n:
            raise input_error("measure_submodels", f"sub-model {list(blocks)}", f"empty or not blocks of 0:{n}",
                              "give block indices 0 <= v < the number of blocks")
        keys[key] = None
    runs: Dict[SubmodelBlocks, List[float]] = {key: [] for key in keys}
    total = passes * len(keys)

    def tick(done: int) -> None:
        if progress is not None:
            progress(done, total)

    for index in range(passes):
        for key, t in _time_submodels(bg, list(keys), repeats, warmup, feeds, cpu, loaded, min_s, record,
                                      lambda k: tick(index * len(keys) + k)).items():
            runs[key].append(t)
    return {key: float(np.median(ts)) for key, ts in runs.items()}


def _time_submodels(bg: BlockGraph, submodels: List[SubmodelBlocks], repeats: int, warmup: int,
                    feeds: Optional[Mapping[str, np.ndarray]], cpu: Optional[int], loaded: bool,
                    min_s: float, record: Optional[MeasureLog] = None,
                    tick: Optional[Callable[[int], None]] = None) -> Dict[SubmodelBlocks, float]:
    """``{blocks: median seconds}`` of each sub-model run alone on ``cpu`` (one pass of :func:`measure_submodels`)."""
    og = bg.opgraph
    cpu = allowed_cpus()[0] if cpu is None else int(cpu)
    binding = PUBinding(cpus=(cpu,), threads=1)
    given = _real_index_values(bg, None if feeds is None else dict(feeds))
    topo = {op: i for i, op in enumerate(og.topo_order)}
    out: Dict[SubmodelBlocks, float] = {}
    names = {blocks: _submodel_name(bg, blocks) for blocks in submodels}
    for blocks in submodels:
        ops = sorted((op for v in blocks for op in bg.blocks[v].ops), key=topo.__getitem__)
        with _load_other_cores(og, ops, names[blocks], cpu, given) if loaded else contextlib.nullcontext():
            times = _time_ops(og, ops, names[blocks], binding, repeats, warmup, given, min_s, record)
        out[blocks] = float(np.median(times))
        if tick is not None:
            tick(len(out))
    logger.info("stage-level times of %s: %s", og.name, {names[b]: round(t * 1e3, 3) for b, t in out.items()})
    return out
