"""Run a deploy bundle on the board: verify its files, run its plan, check outputs, write report and trace.

Two parts: :func:`read_bundle` turns a bundle folder into a :class:`RunSpec` (the plan, the reference, the
frames and what the report records), and :func:`run_verified` runs a :class:`RunSpec` and checks it: the one
run-and-verify, used by :func:`run_bundle` on a board and by ``parapipe run`` in process (which builds its
:class:`RunSpec` in memory and writes no bundle).

A bundle is one folder written by ``parapipe deploy`` (:mod:`parapipe.deploy.bundle`)::

    manifest.json        {"schema_version", "bundle_id", "model", "point", "files": {path: {"sha256",
                         "nbytes"}}}: every other file of the bundle with its SHA-256
    plan.json            the execution plan (:func:`.plan.plan_to_doc`) plus "inputs" ({name: {"shape",
                         "dtype", "range"?}}), "check_tensors", "reference_model", "predicted", "substituted",
                         "soc", "model", "point", "feeds"?, "power_sensor"? (:mod:`.power`: the measured
                         run's energy per inference goes into the report), "softmax_inputs"? ({output:
                         [input, "Softmax" | "LogSoftmax"]}: :func:`.reference.softmax_bound`), "frequencies_hz"?
                         ({pu: Hz}: the operating points set for the run, :mod:`.dvfs`) with "frequency_domains" ({pu:
                         {"cpus": [...]} or {"devfreq": name}})
    models/<task>.onnx   one sub-model per task
    feeds.npz            optional: the user's frames (``parapipe run/deploy --feeds``), fed cyclically
    reference.onnx       the unsplit model with the "check_tensors" of plan.json as extra outputs, run
                         once per distinct frame to check the pipeline
    agent.py, ppexec/    the agent and this package
    out/report.json      written by :func:`run_bundle`; out/trace.json: the Chrome trace of the run
    .lock                held (``fcntl.flock``) while a run or a clean-up uses the folder
    .keep                written by ``parapipe deploy --keep``: :func:`clean_stale` leaves the folder alone

Frames are drawn on the board from a seed (:func:`.frames.draw_frames`: ``distinct_frames`` distinct frames,
fed cyclically), so nothing but the bundle travels, and every output is compared on the fly with the
unsplit model's output for the same frame: a frame out of order or a wrong output makes ``outputs_match``
false. Besides the model's outputs, every tensor a task hands on ("check_tensors") is compared, scaled by its
largest magnitude: the light zoo models of the onnx wheel have constant weights, so their final outputs are
the same for every input and would check nothing on their own. Standard library, numpy and onnxruntime
only (Python >= 3.8).

One module (over 450 lines) because it is one concern, a verified run and the folder it runs from: the
bundle's layout, lock and reader feed :func:`run_verified` and nothing else, and :func:`clean_stale` shares
the lock.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import platform
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from . import dvfs
from .errors import PipelineError, PlanError, plan_error
from .executor import DISPATCH_POLICIES, PipelineExecutor
from .files import write_json_atomic
from .frames import draw_frames, inputs_from_doc
from .metrics import chrome_trace
from .plan import ExecutionPlan, PUBinding, plan_from_doc, plan_to_doc
from .power import PowerMeter
from .precision import precision_tolerance
from .reference import max_abs_diff, max_scaled_diff, tensor_precisions, with_outputs, within_tolerance
from .report import RunReport
from .session import create_session
from . import timing

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PLAN = "plan.json"
LOCK = ".lock"
KEEP = ".keep"
OUT_DIR = "out"
REPORT = "out/report.json"
TRACE = "out/trace.json"
#: Prefix of bundle folder names; :func:`clean_stale` only ever removes folders named so.
BUNDLE_PREFIX = "bundle-"
#: Seconds between lock attempts while waiting for another run to let go of a bundle.
LOCK_POLL_S = 0.1
#: Relative tolerance used at least when a task runs on another runtime or provider than the reference (ONNX
#: Runtime on the CPU): other kernels sum in another order. Measured: OpenVINO 2026.4 vs ONNX Runtime 1.32 on
#: mobilenet_v2 (seeded weights) stages differ by up to 1.2e-5 of the tensor's largest value; a wrong split
#: differs by O(1).
CROSS_RUNTIME_RTOL = 1e-4
#: Distinct frames a run draws (seeded) and feeds cyclically unless told otherwise: the unsplit reference runs
#: once on each, and :class:`FrameCheck` checks a repeated frame's output in one memory pass, so 8 keeps the
#: reference's cost small while still feeding different inputs back to back (a parapipe choice, not measured).
DISTINCT_FRAMES = 8
#: Bytes hashed per read when verifying files.
_HASH_CHUNK_NBYTES = 1 << 20


class ReferenceRunError(PlanError):
    """The unsplit reference model failed on the frames (bad inputs, not a bad split); the ONNX Runtime error
    is the ``__cause__``."""


def sha256_file(path: str) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_HASH_CHUNK_NBYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_json(path: str) -> Any:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise plan_error(path, None, "cannot be read as JSON (%s)" % exc,
                           "re-run 'parapipe deploy': the bundle is incomplete")


@contextlib.contextmanager
def bundle_lock(folder: str, wait_s: float) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder/.lock`` (waiting up to ``wait_s`` seconds for it).

    The lock dies with its process, so a run whose SSH connection dropped frees the folder the moment it
    exits.

    Raises
    ------
    PipelineError
        Another process kept the lock for ``wait_s`` seconds (the message gives its pid).
    """
    import fcntl  # POSIX only; imported here so that the module imports anywhere

    fd = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                    raise PipelineError("bundle %s is in use by process %s; wait for that run to end or "
                                           "stop it" % (folder, holder))
                time.sleep(LOCK_POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        yield
    finally:
        os.close(fd)


def verify_files(folder: str, manifest: Dict[str, Any]) -> None:
    """Check every file listed in the manifest against its SHA-256.

    Raises
    ------
    PlanError
        Naming the first missing or different file.
    """
    for rel, entry in sorted(manifest.get("files", {}).items()):
        path = os.path.join(folder, *rel.split("/"))
        if not os.path.isfile(path):
            raise plan_error(MANIFEST, rel, "the file is missing on the host",
                               "re-run 'parapipe deploy' to finish the upload")
        if sha256_file(path) != entry["sha256"]:
            raise plan_error(MANIFEST, rel, "the file on the host differs from the bundle (sha256)",
                               "re-run 'parapipe deploy' to upload it again")


def load_bundle_feeds(path: str) -> List[Dict[str, np.ndarray]]:
    """The frames of a bundle's ``feeds.npz`` (arrays named ``<frame index>/<input name>``), in frame order."""
    frames: Dict[int, Dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            index, _, name = key.partition("/")
            frames.setdefault(int(index), {})[name] = data[key]
    return [frames[i] for i in sorted(frames)]


class FrameCheck:
    """Compare each output frame with the unsplit model's, cheaply enough to run next to the pipeline.

    The full check of a frame (:func:`.reference.max_abs_diff`, :func:`.reference.max_scaled_diff`,
    :func:`.reference.within_tolerance` on every output and handed-over tensor) makes several float64 passes
    over every tensor: 5-60 ms per frame for inception_v1's 3.8 MB of handed-over tensors on a 2-core x86
    machine (time :func:`.reference.max_scaled_diff` on a run's handed-over tensors to re-measure), more than
    a frame's own period, so the caller's check competed with the pipeline for the cores. Frames are fed
    cyclically (``distinct`` different inputs), and a pipeline computes the same bits for the same input (same
    sub-models, same kernels; replicas too): the first output of each distinct input gets the full check, and
    a later one that is bit-identical to it (``numpy.array_equal``: one memory pass) gets the same verdict.
    Any other output (a NaN, a runtime whose kernels are not deterministic, a frame out of order) gets the
    full check again.

    Call it with ``(distinct input index, output tensors)``; it returns ``(max_abs_diff of the model outputs,
    max_scaled_diff of the handed-over tensors, within tolerance)``. ``tolerances`` and ``softmax_inputs``: as
    :func:`.reference.within_tolerance`'s.
    """

    def __init__(self, reference: List[Dict[str, np.ndarray]], outputs: List[str], checked: List[str],
                 atol: float, rtol: float, tolerances: Optional[Dict[str, Tuple[float, float]]] = None,
                 softmax_inputs: Optional[Dict[str, Tuple[str, str]]] = None):
        self.reference, self.outputs, self.checked = reference, list(outputs), list(checked)
        self.atol, self.rtol = float(atol), float(rtol)
        self.tolerances, self.softmax_inputs = dict(tolerances or {}), dict(softmax_inputs or {})
        self._first: Dict[int, tuple] = {}
        self.full_checks = 0

    def __call__(self, index: int, out: Dict[str, np.ndarray]) -> tuple:
        names = self.outputs + self.checked
        first = self._first.get(index)
        if first is not None and all(np.array_equal(out[n], first[0][n]) for n in names):
            return first[1]
        ref = self.reference[index]
        self.full_checks += 1
        verdict = (max_abs_diff([{n: out[n] for n in self.outputs}], [{n: ref[n] for n in self.outputs}]),
                   max_scaled_diff(out, ref, self.checked),
                   within_tolerance(out, ref, names, self.atol, self.rtol, self.tolerances,
                                    self.softmax_inputs))
        if first is None:
            self._first[index] = ({n: out[n] for n in names}, verdict)
        return verdict


def _host_info() -> Dict[str, Any]:
    import onnxruntime as ort
    return {"hostname": platform.node(), "machine": platform.machine(),
            "python_version": platform.python_version(), "onnxruntime_version": ort.__version__,
            "numpy_version": np.__version__, "pid": os.getpid()}


def _idle_latency_s(ex: PipelineExecutor, pool: List[Dict[str, np.ndarray]], count: int) -> float:
    """Median wall time of ``count`` frames sent one at a time through the empty pipeline, s."""
    times = []
    for i in range(count):
        start = time.perf_counter()
        for _ in ex.run([pool[i % len(pool)]]):
            pass
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] if times else 0.0


def _check_options(frames: int, warmup: int, idle_frames: int, dispatch: str, distinct_frames: int = 1) -> None:
    """Refuse a count below its floor or an unknown dispatch policy (PlanError naming the option)."""
    counts = (("frames", frames, 1), ("warmup", warmup, 0), ("distinct_frames", distinct_frames, 1),
              ("idle_frames", idle_frames, 0))
    for name, value, low in counts:
        if int(value) < low:
            raise plan_error("run_pipeline", name, "must be >= %d, got %r" % (low, value),
                             "pass a valid count")
    if dispatch not in DISPATCH_POLICIES:
        raise plan_error("run_pipeline", "dispatch", "unknown policy %r" % (dispatch,),
                         "use one of %s" % ", ".join(DISPATCH_POLICIES))


class _Progress:
    """Emits ``progress`` events (see :func:`run_bundle`), at most one per ``interval_s`` unless forced."""

    def __init__(self, emit: Optional[Callable[[Dict[str, Any]], None]], frames: int, interval_s: float,
                 started_s: Optional[float] = None):
        self.emit, self.frames, self.interval_s = emit, frames, interval_s
        self.started_s = time.perf_counter() if started_s is None else started_s
        self.last_s = float("-inf")

    def __call__(self, phase: str, done: int, force: bool = False, rate: float = 0.0) -> None:
        now = time.perf_counter()
        if self.emit is not None and (force or now - self.last_s >= self.interval_s):
            self.last_s = now
            self.emit({"event": "progress", "phase": phase, "frames_done": done, "frames": self.frames,
                       "elapsed_s": now - self.started_s, "throughput_per_s": rate})


@dataclass(frozen=True)
class RunSpec:
    """What a verified run needs, in memory: the plan, the unsplit reference, the frames, and what the report
    records about them. A bundle folder holds the same on disk (:func:`read_bundle`); ``parapipe run`` builds it
    in memory (``parapipe.app.run``).

    Attributes
    ----------
    plan : ExecutionPlan
        The plan to run; the executor validates it (:func:`.plan.validate_plan`) when the run starts.
    reference_model : onnx.ModelProto, bytes or str
        The unsplit model with ``check_tensors`` as extra outputs (a ModelProto, its bytes or its file's path).
    check_tensors : tuple of str
        Tensors handed between tasks, compared besides the model outputs.
    frames : tuple of dict of str to numpy.ndarray
        The distinct input frames (every model input each), fed cyclically; the reference runs once on each.
    model : dict
        ``{"name", "sha256"}`` of the model.
    point : str
        Point id of the mapping.
    predicted : dict
        The cost model's ``throughput_per_s``, ``latency_s`` (s), ``period_s`` (s), ``energy_j`` (J).
    substituted : dict of str to list of int
        PU -> the CPUs it runs on instead of its profile binding (``--bind``).
    power_sensor : dict, optional
        The board's power sensor (:class:`.power.PowerMeter`): the run measures energy per inference.
    frequencies_hz : dict of str to float
        PU -> the frequency (Hz, an entry of its domain's table) set for the run and restored after it
        (:func:`.dvfs.applied`); empty: the board's own settings.
    frequency_domains : dict of str to dict
        PU -> its frequency domain, ``{"cpus": [ids]}`` (the cpufreq policy holding them) or ``{"devfreq":
        name}``; one for every PU of ``frequencies_hz``.
    frequencies_required : bool
        True (``--frequency``): a frequency the board cannot set refuses the run. False (the point's own operating
        points): the run goes ahead at the board's settings, the report marks those PUs ``refused`` with the
        reason and the prediction as not applying.
    bundle_id : str, optional
        The bundle's id (None for a run built in memory).
    softmax_inputs : dict of str to (str, str)
        Model output -> (its input tensor, ``"Softmax"`` or ``"LogSoftmax"``) for outputs that op produces;
        ``reference_model`` outputs those inputs too, and the output matches within
        :func:`.reference.softmax_bound` of its input's tolerance.
    """

    plan: ExecutionPlan
    reference_model: Any
    check_tensors: Tuple[str, ...]
    frames: Tuple[Dict[str, np.ndarray], ...]
    model: Dict[str, Any]
    point: str
    predicted: Dict[str, Any] = field(default_factory=dict)
    substituted: Dict[str, List[int]] = field(default_factory=dict)
    power_sensor: Optional[Dict[str, Any]] = None
    bundle_id: Optional[str] = None
    softmax_inputs: Dict[str, Tuple[str, str]] = field(default_factory=dict)
    frequencies_hz: Dict[str, float] = field(default_factory=dict)
    frequency_domains: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    frequencies_required: bool = True


def read_bundle(folder: str, seed: int = 0, distinct_frames: int = DISTINCT_FRAMES, verify: bool = True) -> RunSpec:
    """The :class:`RunSpec` of the bundle in ``folder`` (the caller holds :func:`bundle_lock`).

    Parameters
    ----------
    folder : str
        The bundle folder.
    seed, distinct_frames : int
        The frames drawn when the bundle carries none (:func:`.frames.draw_frames`).
    verify : bool
        Check every file's SHA-256 against the manifest first (:func:`verify_files`).

    Raises
    ------
    PlanError
        A missing or different file, an unreadable manifest or plan.json, a plan that does not validate
        (:func:`.plan.plan_from_doc`).
    """
    manifest = _read_json(os.path.join(folder, MANIFEST))
    if verify:
        verify_files(folder, manifest)
    return read_plan_folder(folder, seed, distinct_frames, manifest.get("bundle_id"))


def read_plan_folder(folder: str, seed: int = 0, distinct_frames: int = DISTINCT_FRAMES,
                     bundle_id: Optional[str] = None) -> RunSpec:
    """The :class:`RunSpec` of the ``plan.json`` in ``folder`` and the files it names (a bundle's, or one model's
    part of a workload bundle: :mod:`.workload_run`), its files not checked here.

    Raises
    ------
    PlanError
        An unreadable plan.json, a plan that does not validate.
    """
    doc = _read_json(os.path.join(folder, PLAN))
    plan = plan_from_doc(doc, folder, PLAN)
    if doc.get("feeds"):  # the user's frames (--feeds), fed cyclically
        pool = load_bundle_feeds(os.path.join(folder, doc["feeds"]))
    else:
        pool = draw_frames(inputs_from_doc(doc.get("inputs", {})), distinct_frames, seed)
    return RunSpec(plan=plan, reference_model=os.path.join(folder, doc.get("reference_model", "reference.onnx")),
                   check_tensors=tuple(str(t) for t in doc.get("check_tensors", [])), frames=tuple(pool),
                   model=doc.get("model") or {}, point=str(doc.get("point")),
                   predicted=dict(doc.get("predicted") or {}),
                   substituted={str(k): [int(c) for c in v] for k, v in (doc.get("substituted") or {}).items()},
                   power_sensor=doc.get("power_sensor") or None, bundle_id=bundle_id,
                   softmax_inputs={str(k): (str(v[0]), str(v[1]))
                                   for k, v in (doc.get("softmax_inputs") or {}).items()},
                   frequencies_hz={str(k): float(v) for k, v in (doc.get("frequencies_hz") or {}).items()},
                   frequency_domains={str(k): dict(v) for k, v in (doc.get("frequency_domains") or {}).items()},
                   frequencies_required=bool(doc.get("frequencies_required", True)))


def _bindings_doc(plan: ExecutionPlan) -> Dict[str, Any]:
    """How each PU of ``plan`` runs, as ``plan.json`` writes it (:func:`.plan.plan_to_doc`'s ``bindings``)."""
    return plan_to_doc(dataclasses.replace(plan, stages=[], replica_shares={}), {})["bindings"]


def _loaded_precisions(ex: PipelineExecutor) -> Tuple[Dict[str, str], Dict[str, str]]:
    """``({task: precision}, {PU: precision})`` as each loaded model's ``describe()`` reports it (the loosest of
    a PU's tasks for the PU; :mod:`.precision`)."""
    from .precision import loosest

    tasks: Dict[str, str] = {}
    pus: Dict[str, List[str]] = {}
    for worker in ex.workers:
        for task, model in zip(worker.tasks, worker.models):
            ran = model.describe().get("precision") or worker.binding.precision
            tasks[task.name] = ran
            pus.setdefault(worker.pu, []).append(ran)
    return tasks, {pu: loosest(ran) for pu, ran in pus.items()}


def run_verified(spec: RunSpec, frames: int = 200, warmup: int = 5, atol: float = 1e-5, rtol: float = 1e-5,
                 progress_interval_s: float = 0.5, emit: Optional[Callable[[Dict[str, Any]], None]] = None,
                 idle_frames: int = 10, dispatch: str = "pull",
                 started_s: Optional[float] = None) -> Tuple[RunReport, Dict[str, Any]]:
    """Run ``warmup`` + ``frames`` frames through ``spec.plan``, every output checked against the reference.

    The one run-and-verify of a bundle on a board (:func:`run_bundle`) and of ``parapipe run`` in process.
    Parameters as :func:`run_bundle`'s; ``started_s`` is the ``time.perf_counter()`` the events' ``elapsed_s``
    count from (default: this call).

    Returns
    -------
    (RunReport, dict)
        The report (``bundle_id`` from ``spec``; ``report_file``, ``trace_file`` the bundle's paths) and the
        Chrome trace of the loaded run (:func:`.metrics.chrome_trace`).

    The frequencies of ``spec.frequencies_hz`` are set before anything runs and restored when the run ends,
    however it ends (:func:`.dvfs.applied`); the report's ``frequencies`` records them, and ``predicted["applies"]``
    is false when the board refused or throttled one.

    Raises
    ------
    PlanError
        A bad option or plan (:func:`.plan.validate_plan`, run once, by the executor).
    dvfs.DvfsRefused
        A frequency that cannot be set (not in its domain's table, no permission, no such domain), before
        anything ran or changed; only for frequencies asked for (``spec.frequencies_required``).
    ReferenceRunError
        The unsplit model fails on the frames.
    PipelineError
        A failed stage (naming stage, PU and task).
    """
    _check_options(frames, warmup, idle_frames, dispatch)
    requests = dvfs.requests_from(spec.frequencies_hz, spec.frequency_domains)
    unset = {}  # type: Dict[str, Dict[str, Any]]
    if requests and not spec.frequencies_required:
        try:
            dvfs.plan_targets(requests)
        except dvfs.DvfsRefused as exc:  # the point's own operating points: run at the board's settings
            logger.info("the point's operating points are not set (%s); the run uses the board's own settings, "
                        "so the prediction does not apply", exc)
            unset = {pu: {"requested_hz": float(hz), "readback_hz": None, "readback_end_hz": None,
                          "status": "refused", "domain": None, "mode": None, "transition_latency_s": None,
                          "reason": str(exc)} for pu, hz in spec.frequencies_hz.items()}
            requests = {}
    with dvfs.applied(requests) as state:
        report, trace = _run_verified(spec, state, frames, warmup, atol, rtol, progress_interval_s, emit,
                                      idle_frames, dispatch, started_s)
    if unset:
        report.frequencies.update(unset)
        report.predicted["applies"] = False
    return report, trace


class _Checked(object):
    """A spec made ready for a checked run: the plan with the handed-over tensors as outputs, the reference
    outputs of every distinct frame, and what :class:`FrameCheck` needs."""

    def __init__(self, spec: RunSpec, atol: float, rtol: float):
        self.outputs, self.checked = list(spec.plan.model_outputs), list(spec.check_tensors)
        self.plan = plan = with_outputs(spec.plan, self.checked)
        if any(b.runtime != "onnxruntime" or b.provider != "CPUExecutionProvider" for b in plan.bindings.values()):
            rtol = max(float(rtol), CROSS_RUNTIME_RTOL)
        self.atol, self.rtol = float(atol), float(rtol)
        self.pool = list(spec.frames)
        ref_session = create_session(spec.reference_model, PUBinding(cpus=None, threads=1), "CPUExecutionProvider")
        self.softmax_inputs = {k: v for k, v in spec.softmax_inputs.items() if k in self.outputs}
        fetched = list(plan.model_outputs) + sorted({v[0] for v in self.softmax_inputs.values()}
                                                    - set(plan.model_outputs))
        self.reference = []  # type: List[Dict[str, np.ndarray]]
        for f in self.pool:
            try:
                values = ref_session.run(fetched, {n: f[n] for n in plan.model_inputs})
            except Exception as exc:  # onnxruntime's own error types
                raise ReferenceRunError("the unsplit model fails on the frames: %s" % exc) from exc
            self.reference.append(dict(zip(fetched, values)))
        del ref_session
        self.worst = self.scaled = 0.0
        self.matched = True
        self.precisions = {}  # type: Dict[str, str]
        self.check = None  # type: Optional[FrameCheck]

    def start(self, ex: PipelineExecutor) -> None:
        """Read what precision each loaded task runs in (``ex`` started) and build the frame check."""
        task_precisions, self.precisions = _loaded_precisions(ex)
        tolerances = {name: precision_tolerance(p, self.atol, self.rtol)
                      for name, p in tensor_precisions(self.plan, task_precisions).items()}
        self.check = FrameCheck(self.reference, self.outputs, self.checked, self.atol, self.rtol, tolerances,
                                self.softmax_inputs)

    def __call__(self, i: int, out: Dict[str, np.ndarray]) -> None:
        """Check the outputs of frame ``i`` (fed cyclically from the pool)."""
        assert self.check is not None, "start() first"
        diff, scaled_diff, ok = self.check(i % len(self.pool), out)
        self.worst, self.scaled, self.matched = max(self.worst, diff), max(self.scaled, scaled_diff), self.matched and ok

    def report(self, spec: RunSpec, metrics: Any, warmup: int, idle_s: float, idle_count: int,
               frequencies: Dict[str, Dict[str, Any]], dispatch: str, energy: Any = None,
               energy_j: Optional[float] = None, spread: Optional[float] = None,
               load: Optional[float] = None) -> RunReport:
        """The :class:`.report.RunReport` of the run measured in ``metrics`` (a :class:`.metrics.RunMetrics`)."""
        plan = self.plan
        predicted = dict(spec.predicted)
        substituted = {str(k): [int(c) for c in v] for k, v in spec.substituted.items()}
        predicted["applies"] = not substituted and all(f["status"] == "ok" for f in frequencies.values())
        return RunReport(
            model=dict(spec.model), point=spec.point, frames=metrics.frames, warmup=warmup,
            stages=len(plan.stages), throughput_per_s=metrics.throughput_per_s, wall_s=metrics.wall_s,
            latency_p50_s=metrics.latency_p50_s, latency_p90_s=metrics.latency_p90_s,
            latency_p99_s=metrics.latency_p99_s, idle_latency_s=idle_s, idle_frames=idle_count,
            stage_busy_s=list(metrics.stage_busy_s), pu_busy_s=dict(metrics.pu_busy_s),
            pu_utilisation=dict(metrics.pu_utilisation), outputs_match=bool(self.matched), max_abs_diff=self.worst,
            checked_tensors=len(self.checked), max_scaled_diff=self.scaled, atol=self.atol, rtol=self.rtol,
            precisions=self.precisions, predicted=predicted, substituted=substituted, bindings=_bindings_doc(plan),
            host=_host_info(), energy_j=energy_j, energy_unknown=energy.unknown if energy is not None else None,
            energy_warnings=list(energy.warnings) if energy is not None else [], bundle_id=spec.bundle_id,
            dispatch=dispatch if plan.replicated() else None, frequencies=frequencies, spread=spread, load=load,
            report_file=REPORT, trace_file=TRACE)


def _run_verified(spec: RunSpec, state: dvfs.Applied, frames: int, warmup: int, atol: float, rtol: float,
                  progress_interval_s: float, emit: Optional[Callable[[Dict[str, Any]], None]], idle_frames: int,
                  dispatch: str, started_s: Optional[float]) -> Tuple[RunReport, Dict[str, Any]]:
    """:func:`run_verified`'s run, with the frequencies of ``state`` in force."""
    progress = _Progress(emit, frames, progress_interval_s, started_s)
    progress("reference", 0, force=True)
    checked = _Checked(spec, atol, rtol)
    pool = checked.pool
    meter = PowerMeter(spec.power_sensor) if spec.power_sensor else None
    with PipelineExecutor(checked.plan, dispatch=dispatch) as ex:
        checked.start(ex)
        progress("start", 0, force=True)
        if warmup:
            for _ in ex.run(pool[i % len(pool)] for i in range(warmup)):
                pass
        run_start = time.perf_counter()
        before = timing.cpu_sample()
        done_s = []
        if meter is not None:
            meter.start()
        for i, out in enumerate(ex.run(pool[i % len(pool)] for i in range(frames))):
            done_s.append(time.perf_counter())
            checked(i, out)
            progress("run", i + 1, rate=(i + 1) / max(time.perf_counter() - run_start, 1e-9))
        energy = meter.stop() if meter is not None else None
        state.read_back(end=True)  # what ran at the end of the measured frames (a cap may have come meanwhile)
        load = timing.load_between(before, timing.cpu_sample())
        energy_j = energy.energy_j / frames if energy is not None and energy.energy_j is not None else None
        metrics = ex.metrics
        progress("idle", frames, force=True, rate=metrics.throughput_per_s)
        idle_count = min(int(idle_frames), int(frames))
        idle_s = _idle_latency_s(ex, pool, idle_count)
    progress("done", frames, force=True, rate=metrics.throughput_per_s)
    report = checked.report(spec, metrics, warmup, idle_s, idle_count, state.report(), dispatch, energy, energy_j,
                            timing.window_spread(run_start, done_s), None if load is None else load["load"])
    info = {"model": report.model.get("name"), "point": report.point, "frames": report.frames,
            "throughput_per_s": report.throughput_per_s, "predicted": report.predicted,
            "outputs_match": report.outputs_match}
    return report, chrome_trace(metrics, info)


def run_bundle(folder: str, frames: int = 200, warmup: int = 5, seed: int = 0,
               distinct_frames: int = DISTINCT_FRAMES, atol: float = 1e-5, rtol: float = 1e-5,
               progress_interval_s: float = 0.5, emit: Optional[Callable[[Dict[str, Any]], None]] = None,
               verify: bool = True, lock_wait_s: float = 30.0, idle_frames: int = 10,
               dispatch: str = "pull") -> RunReport:
    """Run the bundle in ``folder``: ``warmup`` + ``frames`` frames through its plan, outputs checked.

    Reads the bundle (:func:`read_bundle`) and runs it (:func:`run_verified`) while holding its lock.

    Parameters
    ----------
    folder : str
        The bundle folder.
    frames : int
        Measured frames (>= 1).
    warmup : int
        Unmeasured frames pushed through first (>= 0).
    seed : int
        Seed of the frames (:func:`.frames.draw_frames`).
    distinct_frames : int
        Distinct frames fed cyclically (>= 1); the unsplit model runs once on each.
    atol, rtol : float
        A tensor (model output or handed-over tensor) matches the unsplit model's when
        ``max|out - ref| <= atol + rtol * max|ref|``, both widened to the tensor's dtype
        (:func:`.reference.dtype_tolerance`: an fp16 tensor one ulp off matches; integers must be equal);
        ``rtol`` is at least :data:`CROSS_RUNTIME_RTOL` when a PU runs another runtime or provider than the
        reference's (ONNX Runtime, CPU), and at least :data:`.precision.PRECISION_RTOL` of the loosest
        precision the runtimes of the tensor's task and of every task upstream of it reported
        (``describe()["precision"]``: what actually ran, not what the profile asked for). A Softmax or
        LogSoftmax model output also matches within :func:`.reference.softmax_bound` of its input's
        tolerance (``softmax_inputs`` of plan.json).
    progress_interval_s : float
        Least seconds between two progress events.
    emit : callable(dict), optional
        Receives events ``{"event": "progress", "phase": "verify" | "reference" | "start" | "run" | "idle" |
        "done", "frames_done", "frames", "elapsed_s", "throughput_per_s"}``. An exception it raises (a closed
        connection) stops the run and propagates.
    verify : bool
        Check every file's SHA-256 against the manifest first.
    lock_wait_s : float
        How long to wait for another process that holds the bundle.
    idle_frames : int
        Frames sent one at a time through the empty pipeline after the measured run, for ``idle_latency_s``
        (0 to skip; at most ``frames``).
    dispatch : str
        How a replicated stage's frames reach its replicas (:data:`.executor.DISPATCH_POLICIES`): ``"pull"``
        (default: each replica takes the next frame when it is free) or ``"shares"`` (dealt by the plan's
        ``replica_shares``); recorded in the report (None there for a plan without replicated stages).

    Returns
    -------
    RunReport
        Also written to ``out/report.json``; the Chrome trace of the loaded run to ``out/trace.json``.

    Raises
    ------
    PlanError, PipelineError
        A bad bundle or option; a failed stage (naming stage, PU and task).
    """
    _check_options(frames, warmup, idle_frames, dispatch, distinct_frames)
    folder = os.path.abspath(folder)
    started = time.perf_counter()
    with bundle_lock(folder, lock_wait_s):
        if verify:
            _Progress(emit, frames, progress_interval_s, started)("verify", 0, force=True)
        spec = read_bundle(folder, seed, distinct_frames, verify)
        report, trace = run_verified(spec, frames=frames, warmup=warmup, atol=atol, rtol=rtol,
                                     progress_interval_s=progress_interval_s, emit=emit,
                                     idle_frames=idle_frames, dispatch=dispatch, started_s=started)
        write_json_atomic(trace, os.path.join(folder, *TRACE.split("/")))
        write_json_atomic(report.to_json(), os.path.join(folder, *REPORT.split("/")))
        return report


def clean_stale(root: str, keep: List[str], wait_s: float = 10.0) -> Dict[str, List[str]]:
    """Remove the bundle folders under ``root`` that no run uses, except ``keep`` and those marked ``.keep``.

    A folder is stale when its ``.lock`` can be taken: the process that ran it (e.g. after a dropped
    connection) has exited. A folder still locked after ``wait_s`` seconds belongs to a live run and is left.

    Parameters
    ----------
    root : str
        Folder holding ``bundle-*`` folders (nothing else is touched).
    keep : list of str
        Folder names to leave alone (the bundle about to run).
    wait_s : float
        Seconds to wait for each locked folder's run to end.

    Returns
    -------
    dict
        ``{"removed": [...], "busy": [...], "kept": [...]}`` folder names.
    """
    result = {"removed": [], "busy": [], "kept": []}  # type: Dict[str, List[str]]
    if not os.path.isdir(root):
        return result
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not name.startswith(BUNDLE_PREFIX) or not os.path.isdir(path) or os.path.islink(path):
            continue
        if name in keep or os.path.exists(os.path.join(path, KEEP)):
            result["kept"].append(name)
            continue
        try:
            with bundle_lock(path, wait_s):
                shutil.rmtree(path)
        except (PipelineError, PlanError) as exc:
            logger.warning("leaving %s: %s", path, exc)
            result["busy"].append(name)
            continue
        logger.info("removed the stale bundle %s", path)
        result["removed"].append(name)
    return result
