"""The one builder of a measured machine's SoC profile (``parapipe soc detect`` and the measured ``host`` profile).

:func:`measured_soc` asks a :class:`~parapipe.measure.timer.Timer` (the agent, local or over SSH, or this process:
both run :mod:`ppexec.timing`) for the machine's facts, makes one PU per CPU cluster (CPUs grouped by sysfs
``cpu_capacity`` / ``cpuinfo_max_freq``; or one PU per core with ``per_core``) and, if asked, one per accelerator
execution provider it reports, per OpenVINO GPU or NPU device and per ncnn Vulkan device
(:func:`runtime_bindings`; ``parapipe soc detect`` picks per core or per cluster with :func:`cpu_grouping`, and
names the runtimes it found with :func:`runtime_findings`), and measures on each PU, through its runtime adapter:

* peak FLOP/s: a :data:`GEMM_N`-square fp32 MatMul with all the PU's threads (best of the repeats, 2·N³
  FLOPs);
* per-operator overhead: the median run of a one-element Identity;
* memory bandwidth: a :data:`COPY_NBYTES` fp32 tensor multiplied by a scalar (read + write counted, as
  STREAM's Scale);
* the hand-off cost between every two CPU PUs (:meth:`~parapipe.measure.timer.Timer.time_handoff` at
  :data:`TRANSFER_NBYTES`, fitted as ``alpha + nbytes / beta`` by :func:`parapipe.calibration.calibrate.fit_transfer`).

No power meter is read: powers are placeholders marked ``confidence: low``; efficiencies start at 1.0 (run
``parapipe profile`` and ``parapipe calibrate`` to fit them). :func:`detect_soc` is ``parapipe soc detect``;
:func:`parapipe.measure.local.local_soc` builds the ``host`` profile with the same function. The result loads
with :func:`parapipe.soc.loader.load_soc` once saved.
"""
from __future__ import annotations

import logging
import re
from typing import Callable, Dict, List, Literal, Optional, Tuple

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

from parapipe.remote.agent_client import AgentRequestError
from parapipe.errors import HostError
from parapipe.calibration.calibrate import fit_transfer
from parapipe.measure.timer import Timer
from parapipe.soc.execution import Execution
from parapipe.soc.profile import PU, Provenance, PUKind, SoC

log = logging.getLogger(__name__)

#: A PU's precision (:attr:`parapipe.soc.profile.PU.precision`).
Precision = Literal["fp32", "fp16", "int8"]

__all__ = ["detect_soc", "measured_soc", "fit_handoff", "gemm_model", "scale_model", "identity_model",
           "PROVIDER_KINDS", "GEMM_N", "COPY_NBYTES", "TRANSFER_NBYTES", "TRANSFER_REPEATS", "MAX_PAIR_PUS",
           "PLACEHOLDER_ACTIVE_POWER_W", "PLACEHOLDER_IDLE_POWER_W", "PLACEHOLDER_STATIC_POWER_W",
           "FALLBACK_FREQUENCY_HZ", "runtime_findings", "runtime_bindings", "OPENVINO_DEVICE_KINDS"]

#: Side of the square fp32 MatMul timed for peak FLOP/s (2·N³ = 0.27 GFLOP; a few ms on a desktop core, about
#: 50 ms on a Cortex-A53).
GEMM_N = 512
#: Bytes of the tensor scaled for memory bandwidth (64 MiB: well beyond the last-level cache of the boards in
#: soc_profiles/; a 256+ MiB LLC server would measure cache bandwidth).
COPY_NBYTES = 64 * 2**20
#: Hand-off sizes of the transfer fit, bytes (1 KiB: the fixed cost; 4 MiB: a large activation).
TRANSFER_NBYTES = (2**10, 4 * 2**20)
#: Timed hand-offs per size (median taken): the 4 MiB cost has a load-dependent tail on a shared machine, and 50
#: keep its median steady at a few milliseconds per size. A parapipe choice.
TRANSFER_REPEATS = 50
#: Above this many CPU PUs (one per core of a large host) only the first two are timed against each other and
#: their cost becomes the default for every pair; below, every ordered pair is timed. A parapipe choice.
MAX_PAIR_PUS = 4
#: Clock used when sysfs gives none, Hz (a round guess, marked low confidence).
FALLBACK_FREQUENCY_HZ = 1e9
#: Placeholder powers, W: no power meter is read. 5 W per busy core, 1 W idle and 10 W for the rest of the
#: system are parapipe's round guesses for a server core, not measurements.
PLACEHOLDER_ACTIVE_POWER_W = 5.0
PLACEHOLDER_IDLE_POWER_W = 1.0
PLACEHOLDER_STATIC_POWER_W = 10.0
#: Execution providers that are accelerators, and the PU kind they become (ONNX Runtime provider names).
PROVIDER_KINDS: Dict[str, PUKind] = {
    "CUDAExecutionProvider": "gpu", "TensorrtExecutionProvider": "gpu", "ROCMExecutionProvider": "gpu",
    "MIGraphXExecutionProvider": "gpu", "DmlExecutionProvider": "gpu", "OpenCLExecutionProvider": "gpu",
    "WebGpuExecutionProvider": "gpu", "CoreMLExecutionProvider": "npu", "NnapiExecutionProvider": "npu",
    "QNNExecutionProvider": "npu", "VSINPUExecutionProvider": "npu", "RknpuExecutionProvider": "npu",
    "OpenVINOExecutionProvider": "npu", "VitisAIExecutionProvider": "npu",
}

#: OpenVINO device names (before any ``.N`` index) that become PUs, and their kind. ``CPU`` is left out: the CPU
#: cores are PUs through ONNX Runtime already.
OPENVINO_DEVICE_KINDS: Dict[str, PUKind] = {"GPU": "gpu", "NPU": "npu"}

#: Source key and text of what ``soc detect`` measures.
DETECTED_SOURCE = ("detected", "Measured on the host by parapipe soc detect through the parapipe agent and ONNX "
                               "Runtime (MatMul peak, Identity overhead, Scale bandwidth, pinned-thread hand-offs).")
_SOURCES = {
    "sysfs": "Linux sysfs cpufreq/cpuinfo_max_freq of the machine, reported with its facts (the agent's hello).",
    "parapipe": "parapipe's starting value: efficiency 1.0 for every op class, to be fitted by parapipe "
                "calibrate.",
}
_PLACEHOLDER = Provenance(confidence="low", note="placeholder: no power meter read")


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "detect", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", 13)], producer_name="parapipe")
    model.ir_version = 7  # ONNX Runtime 1.19 reads IR <= 10; 7 keeps old builds happy too
    return model


def gemm_model(n: int = GEMM_N) -> onnx.ModelProto:
    """``c = a @ b`` on fp32 ``[n, n]`` inputs (the agent feeds random values)."""
    f32 = TensorProto.FLOAT
    return _model([helper.make_node("MatMul", ["a", "b"], ["c"], name="gemm")],
                  [helper.make_tensor_value_info(k, f32, [n, n]) for k in ("a", "b")],
                  [helper.make_tensor_value_info("c", f32, [n, n])])


def scale_model(nbytes: int = COPY_NBYTES) -> onnx.ModelProto:
    """``y = x · 2`` on an fp32 vector of ``nbytes`` bytes: reads and writes ``nbytes`` each."""
    f32, n = TensorProto.FLOAT, nbytes // 4
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    return _model([helper.make_node("Mul", ["x", "two"], ["y"], name="scale")],
                  [helper.make_tensor_value_info("x", f32, [n])], [helper.make_tensor_value_info("y", f32,
                                                                                                 [n])],
                  [two])


def identity_model() -> onnx.ModelProto:
    """A one-element Identity (the cost of one session run of one operator)."""
    f32 = TensorProto.FLOAT
    return _model([helper.make_node("Identity", ["x"], ["y"], name="identity")],
                  [helper.make_tensor_value_info("x", f32, [1])], [helper.make_tensor_value_info("y", f32,
                                                                                                 [1])])


def _cpu_pus(hello: dict, per_core: bool) -> List[Tuple[str, List[int], Optional[float]]]:
    """``(name, cpus, max_freq_hz)`` per CPU PU, fastest cluster first."""
    allowed = set(int(c) for c in hello.get("cpus_allowed") or [])
    clusters = []
    for cluster in hello.get("cpu_clusters") or []:
        cpus = sorted(c for c in cluster.get("cpus", []) if c in allowed)
        if cpus:
            clusters.append((cpus, cluster.get("max_freq_hz")))
    if not clusters:
        raise HostError("the agent reported no usable CPU; check the host's CPU affinity")
    if per_core:
        return [(f"cpu{c}", [c], f) for cpus, f in clusters for c in cpus]
    names = ["cpu"] if len(clusters) == 1 else ["big", "little"] if len(clusters) == 2 else \
        [f"cluster{i}" for i in range(len(clusters))]
    return [(name, cpus, f) for name, (cpus, f) in zip(names, clusters)]


def cpu_grouping(hello: dict) -> Tuple[bool, str]:
    """``(per_core, why)``: the default grouping of :func:`detect_soc` for the machine whose facts are ``hello``.
    One PU per cluster where there are several clusters (a big.LITTLE board: a pipeline across them); one PU per
    core where all cores form one cluster, since a single PU leaves nothing to pipeline.

    Raises
    ------
    HostError
        No usable CPU.
    """
    clusters = _cpu_pus(hello, False)
    if len(clusters) > 1:
        return False, (f"one PU per CPU cluster ({len(clusters)} clusters of different cores; --per-core for one "
                       "PU per core)")
    cores = len(clusters[0][1])
    if cores > 1:
        return True, (f"one PU per core (the {cores} cores form one cluster: one PU for all of them would leave "
                      "nothing to pipeline; --per-cluster for that one PU)")
    return False, "one PU: the machine lets parapipe use one core only"


def runtime_findings(facts: dict) -> List[str]:
    """One line per runtime a machine's facts (the agent's ``hello``: ``providers`` and ``runtimes``) report: ONNX
    Runtime and its providers, OpenVINO and its devices, ncnn with or without a Vulkan device, or why each is
    missing."""
    runtimes = facts.get("runtimes") or {}
    ort = runtimes.get("onnxruntime") or {}
    providers = ort.get("providers") or facts.get("providers") or []
    lines = [f"onnxruntime {ort.get('version') or facts.get('onnxruntime_version') or '?'}: providers "
             + (", ".join(providers) or "none")]
    ov = runtimes.get("openvino")
    if ov is not None:
        lines.append(f"openvino {ov.get('version')}: devices " + (", ".join(ov.get("devices") or []) or "none")
                     if ov.get("available") else f"openvino: not usable ({ov.get('reason') or 'not installed'})")
    nc = runtimes.get("ncnn")
    if nc is not None:
        if not nc.get("available"):
            lines.append(f"ncnn: not usable ({nc.get('reason') or 'not installed'})")
        elif int(nc.get("gpu_count") or 0) > 0:
            lines.append(f"ncnn {nc.get('version')}: {nc['gpu_count']} Vulkan device(s) "
                         + ", ".join(nc.get("gpus") or []))
        else:
            lines.append(f"ncnn {nc.get('version')}: no Vulkan device (a Vulkan net would run on the CPU; install "
                         "the board's Vulkan driver, e.g. Mesa panvk for Mali)")
    return lines


def runtime_bindings(facts: dict) -> List[Tuple[PUKind, Execution, str]]:
    """``[(kind, execution, what), ...]``: the accelerator PUs a machine's facts let parapipe bind, in this order:
    each ONNX Runtime provider of :data:`PROVIDER_KINDS`, each OpenVINO device of :data:`OPENVINO_DEVICE_KINDS`
    (``runtime: openvino``, ``runtime_options: {device: NAME}``), one ncnn Vulkan GPU (``runtime: ncnn``,
    ``runtime_options: {device: vulkan}``) where ncnn reports a Vulkan device; ``what`` names it for messages."""
    out: List[Tuple[PUKind, Execution, str]] = []
    for provider in facts.get("providers") or []:
        if provider in PROVIDER_KINDS:
            out.append((PROVIDER_KINDS[provider], Execution(provider=provider, threads=1), provider))
    runtimes = facts.get("runtimes") or {}
    ov = runtimes.get("openvino") or {}
    for device in ov.get("devices") or [] if ov.get("available") else []:
        kind = OPENVINO_DEVICE_KINDS.get(str(device).split(".")[0])
        if kind is not None:
            out.append((kind, Execution(runtime="openvino", runtime_options={"device": str(device)}, threads=1),
                        f"OpenVINO {device}"))
    nc = runtimes.get("ncnn") or {}
    if nc.get("available") and int(nc.get("gpu_count") or 0) > 0:
        out.append(("gpu", Execution(runtime="ncnn", runtime_options={"device": "vulkan"}, threads=1),
                    "ncnn Vulkan " + ((nc.get("gpus") or ["device 0"])[0])))
    return out


def _measure_pu(timer: Timer, probe: PU, repeats: int) -> Tuple[float, float, float]:
    """(peak FLOP/s, overhead s, bandwidth bytes/s) of a PU."""
    gemm = timer.time_model(gemm_model(), probe, "disabled", warmup=2, repeats=repeats)
    ident = timer.time_model(identity_model(), probe, "disabled", warmup=5, repeats=max(repeats, 20))
    scale = timer.time_model(scale_model(), probe, "disabled", warmup=2, repeats=repeats)
    return 2.0 * GEMM_N ** 3 / gemm["min_s"], ident["median_s"], 2.0 * COPY_NBYTES / scale["min_s"]


def _probe(name: str, kind: PUKind, execution: Execution, cores: int, precision: Precision = "fp32") -> PU:
    """A placeholder PU that only carries ``execution`` (for :meth:`Timer.time_model`)."""
    return PU(name=name, kind=kind, cores=cores, frequency_hz=1.0, peak_flops=1.0, precision=precision,
              memory_bandwidth_bytes_per_s=1.0, efficiency={"other": 1.0}, op_overhead_s=0.0,
              active_power_w=0.0,
              idle_power_w=0.0, execution=execution)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_") or "host"


def detect_soc(timer: Timer, name: Optional[str] = None, per_core: Optional[bool] = None, repeats: int = 5,
               progress: Optional[Callable[[int, int], None]] = None) -> SoC:
    """``parapipe soc detect``: :func:`measured_soc` of the machine ``timer`` measures, with its accelerators.

    Parameters
    ----------
    timer : Timer
    name : str, optional
        Profile name (default ``"detected_<hostname>"``).
    per_core : bool, optional
        One PU per CPU core (``cpu<i>``, one thread) instead of one per cluster (``cpu``; ``big``/``little``;
        ``cluster<i>``, all the cluster's threads); None (default): as :func:`cpu_grouping` chooses.
    repeats : int
        Timed runs per micro-benchmark.
    progress : callable (done, total), optional
        As :func:`measured_soc`.

    Raises
    ------
    HostError
        No usable CPU; the agent died.
    """
    facts = timer.facts
    if per_core is None:
        per_core = cpu_grouping(facts)[0]
    name = name or f"detected_{_slug(str(facts.get('hostname') or 'host'))}"
    return measured_soc(timer, name, per_core=per_core, repeats=repeats, accelerators=True,
                        source=DETECTED_SOURCE, progress=progress,
                        description=f"{facts.get('hostname') or 'host'} ({facts.get('machine', '?')}, onnxruntime "
                                    f"{timer.ort_version}), detected by parapipe soc detect; powers are placeholders")


def measured_soc(timer: Timer, name: str, per_core: bool, repeats: int, accelerators: bool,
                 source: Tuple[str, str], description: str,
                 transfer: Optional[Tuple[float, float]] = None,
                 progress: Optional[Callable[[int, int], None]] = None) -> SoC:
    """Measure the profile of the machine ``timer`` measures (see the module docstring).

    Parameters
    ----------
    timer : Timer
    name : str
        Profile name.
    per_core : bool
        One PU per CPU core (``cpu<i>``, one thread) instead of one per cluster.
    repeats : int
        Timed runs per micro-benchmark.
    accelerators : bool
        Also one PU per accelerator the machine reports (:func:`runtime_bindings`: ONNX Runtime providers,
        OpenVINO GPU/NPU devices, an ncnn Vulkan device); one that fails to run the micro-benchmarks is skipped
        with a warning.
    source : (str, str)
        Source key and text of the measured numbers (in ``sources`` and every measured field's provenance).
    description : str
    transfer : (alpha_s, beta_bytes_per_s), optional
        The default hand-off cost to use instead of measuring the pairs.
    progress : callable (done, total), optional
        Called after each PU's micro-benchmarks and each hand-off pair measured.

    Returns
    -------
    SoC
        Valid profile; every number's provenance is ``source``, ``sysfs`` or a low-confidence placeholder.

    Raises
    ------
    HostError
        No usable CPU; the agent died.
    """
    facts = timer.facts
    pus: List[PU] = []
    provenance: Dict[str, Provenance] = {}
    measured = Provenance(source=source[0])
    cpu_specs = _cpu_pus(facts, per_core)
    found = runtime_bindings(facts)
    cache: Dict[tuple, Tuple[float, float, float]] = {}
    keys = {(len(cpus), freq) if per_core else (tuple(cpus),) for _, cpus, freq in cpu_specs}
    n_specs = min(len(cpu_specs), 2) if len(cpu_specs) > MAX_PAIR_PUS else len(cpu_specs)
    steps = {"done": 0, "total": len(keys) + (len(found) if accelerators else 0)
             + (0 if transfer is not None else max(1, n_specs * (n_specs - 1)))}

    def tick() -> None:
        steps["done"] += 1
        if progress is not None:
            progress(min(steps["done"], steps["total"]), steps["total"])

    for pu_name, cpus, freq in cpu_specs:
        execution = Execution(cpus=tuple(cpus), threads=len(cpus))
        key = (len(cpus), freq) if per_core else (tuple(cpus),)
        if key not in cache:  # cores of one cluster are alike: measure the first of each
            cache[key] = _measure_pu(timer, _probe(pu_name, "cpu", execution, len(cpus)), repeats)
            tick()
        peak, overhead, bandwidth = cache[key]
        pus.append(PU(name=pu_name, kind="cpu", cores=len(cpus), frequency_hz=freq or FALLBACK_FREQUENCY_HZ,
                      peak_flops=peak, precision="fp32", memory_bandwidth_bytes_per_s=bandwidth,
                      efficiency={"other": 1.0}, op_overhead_s=overhead,
                      active_power_w=PLACEHOLDER_ACTIVE_POWER_W,
                      idle_power_w=PLACEHOLDER_IDLE_POWER_W, execution=execution))
        provenance[f"pus.{pu_name}.frequency_hz"] = (Provenance(source="sysfs") if freq else
                                                     Provenance(confidence="low",
                                                                note="not in sysfs: 1 GHz guess"))
    taken = {p.name for p in pus}
    for kind, execution, what in found if accelerators else []:
        pu_name = kind if kind not in taken else f"{kind}{len(taken)}"
        # OpenVINO's NPU computes in fp16 (docs.openvino.ai, 'NPU Device'); the rest as measured, in fp32
        precision: Precision = "fp16" if execution.runtime == "openvino" and kind == "npu" else "fp32"
        try:
            peak, overhead, bandwidth = _measure_pu(timer, _probe(pu_name, kind, execution, 1, precision), repeats)
        except AgentRequestError as exc:
            log.warning("%s: skipping %s (%s)", timer.host, what, exc)
            continue
        finally:
            tick()
        taken.add(pu_name)
        pus.append(PU(name=pu_name, kind=kind, cores=1, frequency_hz=FALLBACK_FREQUENCY_HZ, peak_flops=peak,
                      precision=precision, memory_bandwidth_bytes_per_s=bandwidth, efficiency={"other": 1.0},
                      op_overhead_s=overhead, active_power_w=PLACEHOLDER_ACTIVE_POWER_W,
                      idle_power_w=PLACEHOLDER_IDLE_POWER_W, execution=execution))
        provenance[f"pus.{pu_name}.frequency_hz"] = Provenance(confidence="low", note="clock not reported")
    for pu in pus:
        for field in ("peak_flops", "op_overhead_s", "memory_bandwidth_bytes_per_s"):
            provenance[f"pus.{pu.name}.{field}"] = measured
        for field in ("active_power_w", "idle_power_w"):
            provenance[f"pus.{pu.name}.{field}"] = _PLACEHOLDER
        for cls in pu.efficiency:
            provenance[f"pus.{pu.name}.efficiency.{cls}"] = Provenance(source="parapipe")
    bandwidth = max(p.memory_bandwidth_bytes_per_s for p in pus)
    if transfer is None:
        pairs, default = _transfers(timer, cpu_specs, bandwidth, tick)
        default_prov = measured if default[2] else Provenance(confidence="low",
                                                              note="one CPU: no hand-off measured")
    else:
        pairs, default, default_prov = {}, (float(transfer[0]), float(transfer[1]), False), measured
    provenance["static_power_w"] = _PLACEHOLDER
    provenance["memory_bandwidth_bytes_per_s"] = measured
    provenance["transfers.default.alpha_s"] = provenance["transfers.default.beta_bytes_per_s"] = default_prov
    for i in range(len(pairs)):
        for field in ("alpha_s", "beta_bytes_per_s"):
            provenance[f"transfers.pairs.{i}.{field}"] = measured
    soc = SoC.from_values(name, pus, static_power_w=PLACEHOLDER_STATIC_POWER_W,
                          memory_bandwidth_bytes_per_s=bandwidth, default_transfer=default[:2], pair_transfers=pairs,
                          description=description)
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    return SoC.model_validate({**fields, "sources": {source[0]: source[1], **_SOURCES}, "provenance": provenance})


def fit_handoff(timer: Timer, src: List[int], dst: List[int], bandwidth: float,
                repeats: int = TRANSFER_REPEATS) -> Tuple[float, float]:
    """``(alpha_s, beta_bytes_per_s)`` of the hand-off from ``src`` to ``dst`` CPUs: the medians of ``repeats``
    hand-offs at each of :data:`TRANSFER_NBYTES`, fitted by :func:`~parapipe.calibration.calibrate.fit_transfer`
    (``bandwidth``, bytes/s, where the sizes give no slope)."""
    sizes, times = [], []
    for nbytes in TRANSFER_NBYTES:
        reply = timer.time_handoff(nbytes, src, dst, repeats=repeats)
        sizes.append(nbytes)
        times.append(reply["median_s"])
    fit = fit_transfer(sizes, times, bandwidth)
    log.info("hand-off %s->%s: alpha %.1f us, beta %.3g B/s", src, dst, fit.alpha_s * 1e6, fit.beta_bytes_per_s)
    return fit.alpha_s, fit.beta_bytes_per_s


def _transfers(timer: Timer, cpu_specs, bandwidth: float, tick: Callable[[], None] = lambda: None):
    """Pair costs between CPU PUs (both directions) and the default (their mean; between two cores of the
    one cluster when there is a single CPU PU; zero-cost at the memory bandwidth on a one-CPU host)."""
    pairs: Dict[Tuple[str, str], Tuple[float, float]] = {}
    many = len(cpu_specs) > MAX_PAIR_PUS
    specs = cpu_specs[:2] if many else cpu_specs
    for a, cpus_a, _ in specs:
        for b, cpus_b, _ in specs:
            if a != b:
                pairs[(a, b)] = fit_handoff(timer, cpus_a[:1], cpus_b[:1], bandwidth)
                tick()
    if pairs:
        alphas, betas = zip(*pairs.values())
        default = (float(np.mean(alphas)), float(np.mean(betas)), True)
        return ({} if many else pairs), default
    cpus = cpu_specs[0][1]
    if len(cpus) >= 2:
        alpha, beta = fit_handoff(timer, cpus[:1], cpus[1:2], bandwidth)
        tick()
        return {}, (alpha, beta, True)
    return {}, (0.0, bandwidth, False)
