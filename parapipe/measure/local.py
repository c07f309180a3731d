"""This machine, measured in process: the :class:`LocalTimer` and the ``host`` profile (``--soc host``).

:class:`LocalTimer` is the in-process :class:`~parapipe.measure.timer.Timer`: its facts, model timings and
hand-offs come from :mod:`ppexec.timing`, the code the agent's ``hello``, ``profile`` and ``transfer`` run, so
the ``--soc host`` profile, ``soc detect`` and ``profile`` measure alike.

:func:`local_soc` builds the SoC of ``--soc host`` with :func:`parapipe.measure.detect.measured_soc` (the builder
``soc detect`` uses): every core in ``os.sched_getaffinity(0)`` becomes a PU ``cpu<i>`` (kind ``cpu``, one core,
pinned with ``execution.cpus = (i,)``, one ORT thread, all op types, fp32); peak FLOP/s, per-operator overhead,
memory bandwidth and the hand-off cost between every two cores are measured on the spot; the clock comes from
sysfs. No power meter is read, so the powers are placeholders marked ``confidence: low``: energy figures computed
with them are illustrative only.

The blocks and sub-models of a model are timed on this machine by :mod:`parapipe.measure.submodels`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import onnx

from ppexec import timing
from ppexec.frames import draw_frames, inputs_from_doc
from ppexec.plan import PUBinding

from parapipe.errors import ExecutionError, input_error
from parapipe.measure.detect import measured_soc
from parapipe.measure.timer import LOCAL_HOST, Timer, check_timer_pus, pu_target
from parapipe.soc.identity import HOST_SOC
from parapipe.soc.profile import PU, Provenance, SoC

if TYPE_CHECKING:
    from parapipe.measure.trust import MeasureLog

__all__ = ["LocalTimer", "local_soc", "allowed_cpus", "LOCAL_PRIOR_TERMS", "SOC_REPEATS"]

#: Source key and text of the numbers :func:`local_soc` measures.
LOCAL_SOURCE = ("measured", "Measured on this machine by parapipe.measure.local when the profile was built "
                            "(ppexec.timing: ONNX Runtime MatMul peak, Identity overhead, Scale bandwidth, "
                            "hand-offs between pinned threads).")
#: Source of the prior pipeline terms (:data:`LOCAL_PRIOR_TERMS`).
_FIDELITY = ("Pipeline terms fitted by benchmarks/fidelity.py (calibrate --runs on 165 pipeline runs of squeezenet, "
             "shufflenet and inception_v1) on parapipe's reference 2-core x86 virtual machine: a prior for this "
             "machine until 'calibrate --runs' or 'optimize --refine' fits its own.")
#: Pipeline terms of the host profile (:mod:`parapipe.cost.pipeline_terms`) before this machine's runs are fitted:
#: what ``python benchmarks/fidelity.py`` fitted on parapipe's reference 2-core x86 virtual machine (leave-one-out
#: period MAPE 4.0 % with them, 12.6 % without). Without them a plain host model ranks pipelines whose cores
#: serve several stages with the replicated model (inception_v1 there: predicted 71.3/s vs 71.2/s, measured
#: 63.7/s vs 69.6/s): it misses the executor's cost per stage hop and the cache refill of a shared core. Overlap
#: is per PU and left out.
LOCAL_PRIOR_TERMS = {"dispatch_s": 122e-6, "handoff_s": 140e-6, "slowdown": 1.031, "sharing": 0.047}
#: Timed runs per micro-benchmark of :func:`local_soc` (as ``soc detect``'s default).
SOC_REPEATS = 5


def allowed_cpus() -> List[int]:
    """CPU ids this process may run on (:func:`ppexec.timing.allowed_cpus`)."""
    return timing.allowed_cpus()


def _timing_error(exc: "timing.TimingError") -> ExecutionError:
    return ExecutionError(" ".join(exc.message.split()))


class LocalTimer:
    """The in-process :class:`~parapipe.measure.timer.Timer` (:mod:`ppexec.timing` called directly).

    Parameters
    ----------
    cpus : sequence of int, optional
        The CPUs to measure on (default: all of ``os.sched_getaffinity(0)``); the facts' ``cpus_allowed``.

    Raises
    ------
    ExecutionError
        From :meth:`time_model` / :meth:`time_handoff`: a CPU that cannot be pinned, a model that does not load
        or run (one line naming it).
    """

    host = LOCAL_HOST

    def __init__(self, cpus: Optional[Sequence[int]] = None):
        self.facts: Dict[str, Any] = timing.machine_facts()
        if cpus is not None:
            self.facts["cpus_allowed"] = sorted(int(c) for c in cpus)

    @property
    def ort_version(self) -> str:
        """ONNX Runtime version in this process."""
        return str(self.facts["onnxruntime_version"])

    @property
    def cpus_allowed(self) -> List[int]:
        """CPUs the measurements use."""
        return list(self.facts["cpus_allowed"])

    def check_pus(self, soc: SoC, pus: Sequence[str]) -> None:
        """Refuse PUs this machine cannot run (:func:`~parapipe.measure.timer.check_timer_pus`)."""
        check_timer_pus(self.facts, self.host, soc, pus)

    def target(self, pu: PU) -> Dict[str, Any]:
        """:func:`~parapipe.measure.timer.pu_target` with this machine's CPUs."""
        return pu_target(pu, self.cpus_allowed)

    def time_model(self, model: onnx.ModelProto, pu: PU, optimization: str, warmup: int, repeats: int,
                   timeout_s: float = math.inf, frequency: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Time ``model`` on ``pu`` with :func:`ppexec.timing.time_model`, fed one seeded frame
        (:func:`ppexec.bundle_run.make_frames`, seed 0; dynamic dimensions 1); the agent's ``profile`` reply
        fields (``timeout_s`` is not enforced in process); ``frequency`` as the agent's (set on this machine for
        the measurement, :func:`ppexec.dvfs.applied`)."""
        spec = self.target(pu)
        options = dict(spec.get("runtime_options") or {})
        runtime = spec.get("runtime", "onnxruntime")
        if runtime == "onnxruntime":
            options.update(optimization=optimization, allow_spinning=False)
        cpus = spec.get("cpus")
        binding = PUBinding(cpus=None if cpus is None else tuple(cpus), threads=int(spec["threads"]),
                            provider=spec.get("provider", "CPUExecutionProvider"),
                            provider_options=dict(spec.get("provider_options") or {}), runtime=runtime,
                            runtime_options=options, precision=str(spec.get("precision", "fp32")))

        def feeds_for(specs) -> dict:
            inputs = {name: {"shape": [d if isinstance(d, int) and d > 0 else 1 for d in shape],
                             "dtype": dtype or "float32"} for name, shape, dtype in specs}
            return draw_frames(inputs_from_doc(inputs), 1, 0)[0]

        source: Any = model
        if runtime == "ncnn":  # the converted model (pnnx), as run and deploy execute it
            from parapipe.execution.ncnn_convert import convert

            source = str(convert(model, f"{model.graph.name} on PU {pu.name}"))
        from ppexec import dvfs

        try:
            with dvfs.applied({pu.name: dict(frequency)} if frequency else {}) as state:
                timed = timing.time_model(source, binding, warmup, repeats, feeds_for)
                state.read_back(end=True)
        except timing.TimingError as exc:
            raise _timing_error(exc) from None
        reply = timing.stats(timed["times_s"])
        if frequency:
            reply["frequency"] = state.report()[pu.name]
        info = timed["runtime_info"]
        reply.update(runtime=runtime, runtime_info=info, provider=info.get("provider"), cpus=timed["cpus"],
                     threads=binding.threads, onnxruntime_version=self.ort_version, load=timed.get("load"))
        return reply

    def time_handoff(self, nbytes: int, src_cpus: Sequence[int], dst_cpus: Sequence[int], warmup: int = 3,
                     repeats: int = 20, timeout_s: float = math.inf) -> Dict[str, Any]:
        """Time handing ``nbytes`` between the CPU sets with :func:`ppexec.timing.handoff_costs`; the agent's
        ``transfer`` reply fields."""
        try:
            costs = timing.handoff_costs(int(nbytes), list(src_cpus), list(dst_cpus), warmup, repeats)
        except timing.TimingError as exc:
            raise _timing_error(exc) from None
        reply = timing.stats(costs)
        reply.update(nbytes=int(nbytes), src_cpus=list(src_cpus), dst_cpus=list(dst_cpus),
                     bandwidth_bytes_per_s=nbytes / reply["median_s"] if reply["median_s"] > 0 else None)
        return reply


def local_soc(n_cpus: Optional[int] = None, transfer: Optional[Tuple[float, float]] = None,
              record: Optional["MeasureLog"] = None, progress: Optional[Callable[[int, int], None]] = None) -> SoC:
    """Build the SoC of this machine (``--soc host``), measuring it as ``soc detect --per-core`` does.

    Parameters
    ----------
    n_cpus : int, optional
        Use the first ``n_cpus`` allowed cores (default: all of ``os.sched_getaffinity(0)``).
    transfer : (alpha_s, beta_bytes_per_s), optional
        Default transfer cost between cores; measured between every two cores (up to
        :data:`parapipe.measure.detect.MAX_PAIR_PUS` cores, else the first two) when None.
    record : MeasureLog, optional
        Gets the spread and load of every micro-benchmark (:class:`parapipe.measure.trust.RecordingTimer`).
    progress : callable (done, total), optional
        Called after each micro-benchmark and hand-off (:func:`parapipe.measure.detect.measured_soc`).

    Returns
    -------
    SoC
        Name ``"host"``; one PU ``cpu<i>`` per core ``i`` used with ``execution.cpus = (i,)``, ``threads = 1``,
        ``cores = 1``, all op types, fp32: :func:`parapipe.measure.detect.measured_soc` with ``per_core`` and no
        accelerators (peak FLOP/s of a 512-square fp32 MatMul, overhead of a one-element Identity, bandwidth of a
        64 MiB Scale, all in ONNX Runtime on one pinned thread; the cores are taken as identical; the clock from
        sysfs, else a 1 GHz guess; placeholder powers, ``confidence: low``); ``power_sensor`` the readable RAPL
        or INA3221 sensor, if any (:func:`ppexec.power.detect_sensor`); ``pipeline`` the prior terms
        :data:`LOCAL_PRIOR_TERMS` (``confidence: low``).

    Raises
    ------
    InputError
        ``n_cpus`` < 1 or above the allowed cores, or a ``transfer`` with alpha < 0 or beta <= 0.
    ExecutionError
        A core cannot be pinned.
    """
    cpus = allowed_cpus()
    if n_cpus is not None and not 1 <= n_cpus <= len(cpus):
        raise input_error("--soc host", "n_cpus", f"must be between 1 and {len(cpus)} (the cores this "
                          f"process may use: {cpus}), got {n_cpus}", "give fewer cores or widen the affinity")
    cpus = cpus[:n_cpus] if n_cpus is not None else cpus
    if transfer is not None:
        alpha, beta = (float(v) for v in transfer)
        if not (math.isfinite(alpha) and alpha >= 0 and beta > 0):
            raise input_error("local_soc", "transfer", f"must be (alpha_s >= 0, beta_bytes_per_s > 0), got "
                              f"{tuple(transfer)}", "give seconds and bytes/s, or None to measure them")
        transfer = (alpha, beta)
    from parapipe.measure.trust import RecordingTimer

    timer: Timer = LocalTimer(cpus)
    if record is not None:
        timer = RecordingTimer(timer, record)
    soc = measured_soc(timer, HOST_SOC, per_core=True, repeats=SOC_REPEATS, accelerators=False,
                       source=LOCAL_SOURCE, transfer=transfer, progress=progress,
                       description=f"this machine, {len(cpus)} core(s) measured by parapipe; powers are "
                                   "placeholders")
    from parapipe.soc.pipeline import PipelineParams
    from ppexec.power import detect_sensor

    provenance = dict(soc.provenance)
    for name in LOCAL_PRIOR_TERMS:
        provenance[f"pipeline.{name}"] = Provenance(source="fidelity", confidence="low",
                                                    note="prior from the reference machine, not this one")
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    sensor = detect_sensor()  # RAPL or a Jetson's INA3221 where readable: run/deploy then measure energy
    return SoC.model_validate({**fields, "pipeline": PipelineParams.model_validate(LOCAL_PRIOR_TERMS),
                               "sources": {**soc.sources, "fidelity": _FIDELITY}, "provenance": provenance,
                               "power_sensor": sensor})
