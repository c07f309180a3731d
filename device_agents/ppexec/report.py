"""The one report of a verified run: what ``parapipe run``, ``parapipe deploy`` and the benchmarks return.

Standard library only (Python >= 3.8): it is written on the board (``out/report.json``) and read back on the
computer with :meth:`RunReport.from_json`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional

__all__ = ["REPORT_SCHEMA_VERSION", "RunReport", "WorkloadReport"]

#: Version of the report document.
REPORT_SCHEMA_VERSION = 1


@dataclass
class RunReport:
    """Measured next to predicted figures of one mapping run, and whether its outputs matched.

    Times in seconds; throughput in frames per second.

    Attributes
    ----------
    model : dict
        ``{"name", "sha256"}`` of the model.
    point : str
        Point id of the mapping.
    frames, warmup : int
        Measured frames, unmeasured frames pushed through first.
    stages : int
    throughput_per_s : float
        Measured frames / wall time with the pipeline kept full.
    wall_s : float
    latency_p50_s, latency_p90_s, latency_p99_s : float
        Per-frame latency with the pipeline kept full (queueing included).
    idle_latency_s : float
        Median latency of ``idle_frames`` frames sent one at a time through an empty pipeline: what the cost
        model's latency predicts.
    idle_frames : int
    stage_busy_s : list of float
        Per stage, mean makespan per frame.
    pu_busy_s : dict of str to float
        Per PU, task seconds per frame.
    pu_utilisation : dict of str to float
    outputs_match : bool
        Every model output and every handed-over tensor within tolerance of the unsplit model, in frame order.
    max_abs_diff : float
        Largest absolute difference of a model output.
    checked_tensors : int
        Handed-over tensors compared besides the outputs.
    max_scaled_diff : float
        Largest difference of a handed-over tensor relative to its largest magnitude.
    atol, rtol : float
        Requested tolerances (widened per dtype: :func:`ppexec.reference.dtype_tolerance`; ``rtol`` raised for
        tensors that depend on a PU computing below fp32: :func:`ppexec.precision.precision_tolerance`).
    precisions : dict of str to str
        Per PU, the precision its runtime computed in (``"fp32"``, ``"fp16"``, ``"bf16"``), as the runtime
        reported it after loading (:mod:`ppexec.precision`); empty in reports of older boards.
    predicted : dict
        ``throughput_per_s``, ``latency_s``, ``period_s`` of the cost model, and ``applies`` (false when a PU
        was substituted: the prediction is for the profile's binding; or when the board refused or throttled
        an operating point: see ``frequencies``).
    substituted : dict of str to list of int
        PUs run on these CPUs with the CPU provider instead of their profile binding.
    bindings : dict
        How each PU ran: ``cpus``, ``threads``, ``runtime``, ``provider``.
    host : dict
        Facts of the machine that ran it (hostname, machine, Python, onnxruntime, ...).
    energy_j : float or None
        Measured energy per inference where a sensor was read; None otherwise (energies are estimates).
    bundle_id : str or None
        Id of the deploy bundle that ran (:mod:`.bundle_run`); None for a run fed in memory (``parapipe run``).
    energy_unknown : str or None
        Why ``energy_j`` is None although the profile names a power sensor (``"permission denied (...)"``, no
        wrap range, an implausible reading: :class:`ppexec.power.EnergyResult`); None when the energy was
        measured or no sensor was named. Reports of boards older than the field read None.
    energy_warnings : list of str
        Caveats of a measured energy (a window shorter than two sensor updates, nested zones left out).
    dispatch : str or None
        How replicated stages got their frames: ``"pull"`` (each replica takes the next frame when it is free)
        or ``"shares"`` (dealt by the plan's shares); None for a plan without replicated stages. Reports of
        boards older than the field read ``"pull"``.
    spread : float or None
        How much the throughput varied during the run: p90 / median - 1 of the period over
        :data:`ppexec.timing.RUN_WINDOWS` consecutive windows of the measured frames
        (:func:`ppexec.timing.window_spread`); None for too few frames or reports of older boards.
    load : float or None
        Share of the CPUs' time other processes used during the measured frames
        (:func:`ppexec.timing.load_between`); None where unknown or reports of older boards.
    frequencies : dict of str to dict
        Per PU whose operating point was set for the run (:meth:`ppexec.dvfs.Applied.report`):
        ``requested_hz`` (the table entry set), ``readback_hz`` (what the kernel reported once set),
        ``readback_end_hz`` (at the end of the measured frames), ``status`` (``"ok"``, ``"throttled"``: the
        kernel ran it slower, a thermal or QoS cap; ``"refused"``: another frequency), ``domain``
        (``"cpufreq policy4"``, ``"devfreq ffe40000.gpu"``), ``mode`` (``"userspace"`` or ``"limits"``: min =
        max), ``transition_latency_s``, ``reason`` (None when ok). Empty: the board ran at its own settings
        (``--no-dvfs``, no operating point asked, reports of older boards).
    report_file, trace_file : str
        Paths relative to the bundle.
    """

    model: Dict[str, Any]
    point: str
    frames: int
    warmup: int
    stages: int
    throughput_per_s: float
    wall_s: float
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    idle_latency_s: float
    idle_frames: int
    stage_busy_s: List[float]
    pu_busy_s: Dict[str, float]
    pu_utilisation: Dict[str, float]
    outputs_match: bool
    max_abs_diff: float
    checked_tensors: int
    max_scaled_diff: float
    atol: float
    rtol: float
    precisions: Dict[str, str] = field(default_factory=dict)
    predicted: Dict[str, Any] = field(default_factory=dict)
    substituted: Dict[str, List[int]] = field(default_factory=dict)
    bindings: Dict[str, Any] = field(default_factory=dict)
    host: Dict[str, Any] = field(default_factory=dict)
    energy_j: Optional[float] = None
    energy_unknown: Optional[str] = None
    energy_warnings: List[str] = field(default_factory=list)
    bundle_id: Optional[str] = None
    dispatch: Optional[str] = "pull"
    spread: Optional[float] = None
    load: Optional[float] = None
    frequencies: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    report_file: str = "out/report.json"
    trace_file: str = "out/trace.json"
    schema_version: int = REPORT_SCHEMA_VERSION

    @property
    def predicted_throughput_per_s(self) -> Optional[float]:
        """The cost model's throughput for this point (None when unknown)."""
        return self.predicted.get("throughput_per_s")

    @property
    def predicted_latency_s(self) -> Optional[float]:
        """The cost model's latency (idle pipeline) for this point (None when unknown)."""
        return self.predicted.get("latency_s")

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict (every field)."""
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "RunReport":
        """Rebuild a report from :meth:`to_json`'s dict (unknown keys are ignored, so newer boards' reports
        load).

        Raises
        ------
        ValueError
            A required field is missing or ``doc`` is not a dict.
        """
        if not isinstance(doc, dict):
            raise ValueError("a run report must be a JSON object")
        names = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in doc.items() if k in names})
        except TypeError as exc:
            raise ValueError("malformed run report (%s)" % exc)


@dataclass
class WorkloadReport:
    """Measured next to predicted figures of one workload run (several models at once, :mod:`ppexec.workload`).

    Times in seconds; throughputs in workload frames per second (a workload frame is ``rates[m]`` frames of
    each model ``m``).

    Attributes
    ----------
    point : str
        Point id of the workload's mapping.
    rates : dict of str to float
        Frames of each model per workload frame.
    workload_frames, warmup : int
        Measured workload frames; unmeasured frames each model pushed through first.
    throughput_per_s : float
        Workload frames completed over the measured window (first task of any model to the last frame of any
        model leaving its pipeline).
    wall_s, period_s : float
        The window; ``1 / throughput_per_s``.
    pu_busy_s : dict of str to float
        Per PU, task seconds per workload frame summed over the models (what the cost model books for a
        shared PU).
    pu_utilisation : dict of str to float
    outputs_match : bool
        Every model's outputs matched its own unsplit model, in frame order.
    models : dict of str to RunReport
        Each model's report of the same run (its frames, throughput, loaded latency, idle latency measured
        with the other models idle, busy times, outputs check, its own predictions).
    predicted : dict
        The cost model's ``throughput_per_s``, ``period_s`` (s per workload frame), ``energy_j`` (J per
        workload frame), ``latency_s`` (the workload's latency axis), and ``applies``.
    energy_j : float or None
        Measured energy per workload frame where a sensor was read.
    energy_unknown : str or None
        Why ``energy_j`` is None although a sensor was named.
    host : dict
    bundle_id : str or None
    """

    point: str
    rates: Dict[str, float]
    workload_frames: int
    warmup: int
    throughput_per_s: float
    wall_s: float
    period_s: float
    pu_busy_s: Dict[str, float]
    pu_utilisation: Dict[str, float]
    outputs_match: bool
    models: Dict[str, RunReport]
    predicted: Dict[str, Any] = field(default_factory=dict)
    energy_j: Optional[float] = None
    energy_unknown: Optional[str] = None
    host: Dict[str, Any] = field(default_factory=dict)
    bundle_id: Optional[str] = None
    report_file: str = "out/report.json"
    trace_file: str = "out/trace.json"
    schema_version: int = REPORT_SCHEMA_VERSION
    kind: str = "workload"

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict (every field; ``models`` as each model's :meth:`RunReport.to_json`)."""
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "WorkloadReport":
        """Rebuild a report from :meth:`to_json`'s dict (unknown keys ignored).

        Raises
        ------
        ValueError
            A required field is missing or malformed.
        """
        if not isinstance(doc, dict) or not isinstance(doc.get("models"), dict):
            raise ValueError("a workload run report must be a JSON object with 'models'")
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in doc.items() if k in names}
        values["models"] = {str(m): RunReport.from_json(r) for m, r in doc["models"].items()}
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError("malformed workload run report (%s)" % exc)
