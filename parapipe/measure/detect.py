"""``parapipe soc detect``: write the SoC profile of a machine from measurements taken by the agent on it.

:func:`detect_soc` asks the agent (local or over SSH, :mod:`parapipe.measure.agent_timer`) for its ``hello``,
makes one PU per CPU cluster (CPUs grouped by sysfs ``cpu_capacity`` / ``cpuinfo_max_freq``; or one PU per
core with ``per_core``) and one per accelerator execution provider it reports, and measures on each PU,
through ONNX Runtime:

* peak FLOP/s: a :data:`GEMM_N`-square fp32 MatMul with all the PU's threads (best of the repeats, 2·N³
  FLOPs);
* per-operator overhead: the median run of a one-element Identity;
* memory bandwidth: a :data:`COPY_NBYTES` fp32 tensor multiplied by a scalar (read + write counted, as
  STREAM's Scale);
* the hand-off cost between every two CPU PUs (the agent's ``transfer`` at two sizes, fitted as
  ``alpha + nbytes / beta``).

No power meter is read: powers are placeholders marked ``confidence: low``; efficiencies start at 1.0 (run
``parapipe profile`` and ``parapipe calibrate`` to fit them). The result loads with
:func:`parapipe.soc.loader.load_soc` once saved.
"""
from __future__ import annotations

import logging
import re
from typing import Dict, List, Optional, Tuple

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

from parapipe.deploy.agent_client import AgentRequestError
from parapipe.errors import HostError
from parapipe.calibration.calibrate import fit_transfer
from parapipe.measure.agent_timer import Runner
from parapipe.soc.profile import PU, Provenance, SoC

log = logging.getLogger(__name__)

__all__ = ["detect_soc", "gemm_model", "scale_model", "identity_model", "PROVIDER_KINDS", "GEMM_N",
           "COPY_NBYTES"]

#: Side of the square fp32 MatMul timed for peak FLOP/s (2·N³ = 0.27 GFLOP; a few ms on a desktop core, about
#: 50 ms on a Cortex-A53). Same size as :data:`parapipe.measure.machine.GEMM_N`.
GEMM_N = 512
#: Bytes of the tensor scaled for memory bandwidth (64 MiB: well beyond the last-level cache of the boards in
#: soc_profiles/; a 256+ MiB LLC server would measure cache bandwidth).
COPY_NBYTES = 64 * 2**20
#: Hand-off sizes of the transfer fit, bytes (as :mod:`parapipe.measure.local`).
TRANSFER_NBYTES = (2**10, 4 * 2**20)
#: Above this many CPU PUs (one per core of a large host) only the first two are timed against each other and
#: their cost becomes the default for every pair; below, every ordered pair is timed. A parapipe choice.
MAX_PAIR_PUS = 4
#: Clock used when sysfs gives none, Hz (a round guess, marked low confidence).
FALLBACK_FREQUENCY_HZ = 1e9
#: Placeholder powers, W (no meter; parapipe's round guesses, as in parapipe.measure.local).
PLACEHOLDER_ACTIVE_POWER_W = 5.0
PLACEHOLDER_IDLE_POWER_W = 1.0
PLACEHOLDER_STATIC_POWER_W = 10.0
#: Execution providers that are accelerators, and the PU kind they become (ONNX Runtime provider names).
PROVIDER_KINDS = {
    "CUDAExecutionProvider": "gpu", "TensorrtExecutionProvider": "gpu", "ROCMExecutionProvider": "gpu",
    "MIGraphXExecutionProvider": "gpu", "DmlExecutionProvider": "gpu", "OpenCLExecutionProvider": "gpu",
    "WebGpuExecutionProvider": "gpu", "CoreMLExecutionProvider": "npu", "NnapiExecutionProvider": "npu",
    "QNNExecutionProvider": "npu", "VSINPUExecutionProvider": "npu", "RknpuExecutionProvider": "npu",
    "OpenVINOExecutionProvider": "npu", "VitisAIExecutionProvider": "npu",
}

_SOURCES = {
    "detected": "Measured on the host by parapipe soc detect through the parapipe agent and ONNX Runtime "
                "(MatMul peak, Identity overhead, Scale bandwidth, pinned-thread hand-offs).",
    "sysfs": "Linux sysfs cpufreq/cpuinfo_max_freq of the host, reported by the agent's hello.",
    "parapipe": "parapipe's starting value: efficiency 1.0 for every op class, to be fitted by parapipe "
                "calibrate.",
}
_PLACEHOLDER = Provenance(confidence="low", note="placeholder: no power meter read by parapipe soc detect")


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


def _measure_pu(runner: Runner, probe: PU, repeats: int) -> Tuple[float, float, float]:
    """(peak FLOP/s, overhead s, bandwidth bytes/s) of a PU through the agent."""
    gemm = runner.profile(gemm_model(), probe, "disabled", warmup=2, repeats=repeats)
    ident = runner.profile(identity_model(), probe, "disabled", warmup=5, repeats=max(repeats, 20))
    scale = runner.profile(scale_model(), probe, "disabled", warmup=2, repeats=repeats)
    return 2.0 * GEMM_N ** 3 / gemm["min_s"], ident["median_s"], 2.0 * COPY_NBYTES / scale["min_s"]


def _probe(name: str, kind: str, execution: dict, cores: int) -> PU:
    """A placeholder PU that only carries ``execution`` (for :meth:`Runner.profile`)."""
    return PU(name=name, kind=kind, cores=cores, frequency_hz=1.0, peak_flops=1.0, precision="fp32",
              memory_bandwidth_bytes_per_s=1.0, efficiency={"other": 1.0}, op_overhead_s=0.0,
              active_power_w=0.0,
              idle_power_w=0.0, execution=execution)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_") or "host"


def detect_soc(runner: Runner, name: Optional[str] = None, per_core: bool = False, repeats: int = 5) -> SoC:
    """Measure the profile of the machine the agent runs on (see the module docstring).

    Parameters
    ----------
    runner : Runner
    name : str, optional
        Profile name (default ``"detected_<hostname>"``).
    per_core : bool
        One PU per CPU core (``cpu<i>``, one thread) instead of one per cluster (``cpu``; ``big``/``little``;
        ``cluster<i>``, all the cluster's threads).
    repeats : int
        Timed runs per micro-benchmark.

    Returns
    -------
    SoC
        Valid profile; every number's provenance is ``detected``, ``sysfs`` or a low-confidence placeholder.

    Raises
    ------
    HostError
        No usable CPU; the agent died.
    """
    hello = runner.hello
    name = name or f"detected_{_slug(str(hello.get('hostname') or 'host'))}"
    pus: List[PU] = []
    provenance: Dict[str, Provenance] = {}
    measured = Provenance(source="detected")
    cpu_specs = _cpu_pus(hello, per_core)
    accelerators = [(p, PROVIDER_KINDS[p]) for p in hello.get("providers") or [] if p in PROVIDER_KINDS]
    cache: Dict[tuple, Tuple[float, float, float]] = {}
    for pu_name, cpus, freq in cpu_specs:
        execution = {"cpus": tuple(cpus), "threads": len(cpus)}
        key = (len(cpus), freq) if per_core else (tuple(cpus),)
        if key not in cache:  # cores of one cluster are alike: measure the first of each
            cache[key] = _measure_pu(runner, _probe(pu_name, "cpu", execution, len(cpus)), repeats)
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
    for provider, kind in accelerators:
        pu_name = kind if kind not in taken else f"{kind}{len(taken)}"
        execution = {"provider": provider, "threads": 1}
        try:
            peak, overhead, bandwidth = _measure_pu(runner, _probe(pu_name, kind, execution, 1), repeats)
        except AgentRequestError as exc:
            log.warning("%s: skipping %s (%s)", runner.host, provider, exc)
            continue
        taken.add(pu_name)
        pus.append(PU(name=pu_name, kind=kind, cores=1, frequency_hz=FALLBACK_FREQUENCY_HZ, peak_flops=peak,
                      precision="fp32", memory_bandwidth_bytes_per_s=bandwidth, efficiency={"other": 1.0},
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
    pairs, default = _transfers(runner, cpu_specs, max(p.memory_bandwidth_bytes_per_s for p in pus))
    provenance["static_power_w"] = _PLACEHOLDER
    provenance["memory_bandwidth_bytes_per_s"] = measured
    default_prov = measured if default[2] else Provenance(confidence="low",
                                                          note="one CPU: no hand-off measured")
    provenance["transfers.default.alpha_s"] = provenance["transfers.default.beta_bytes_per_s"] = default_prov
    for i in range(len(pairs)):
        for field in ("alpha_s", "beta_bytes_per_s"):
            provenance[f"transfers.pairs.{i}.{field}"] = measured
    soc = SoC.from_values(name, pus, static_power_w=PLACEHOLDER_STATIC_POWER_W,
                          memory_bandwidth_bytes_per_s=max(p.memory_bandwidth_bytes_per_s for p in pus),
                          default_transfer=default[:2], pair_transfers=pairs,
                          description=f"{hello.get('hostname') or 'host'} ({hello.get('machine', '?')}, "
                                      f"onnxruntime {runner.ort_version}), detected by parapipe soc detect; "
                                      "powers are placeholders")
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    return SoC.model_validate({**fields, "sources": dict(_SOURCES), "provenance": provenance})


def _handoff(runner: Runner, src: List[int], dst: List[int], bandwidth: float) -> Tuple[float, float]:
    sizes, times = [], []
    for nbytes in TRANSFER_NBYTES:
        reply = runner.transfer(nbytes, src, dst, repeats=50)
        sizes.append(nbytes)
        times.append(reply["median_s"])
    fit = fit_transfer(sizes, times, bandwidth)
    return fit.alpha_s, fit.beta_bytes_per_s


def _transfers(runner: Runner, cpu_specs, bandwidth: float):
    """Pair costs between CPU PUs (both directions) and the default (their mean; between two cores of the
    one cluster when there is a single CPU PU; zero-cost at the memory bandwidth on a one-CPU host)."""
    pairs: Dict[Tuple[str, str], Tuple[float, float]] = {}
    many = len(cpu_specs) > MAX_PAIR_PUS
    specs = cpu_specs[:2] if many else cpu_specs
    for a, cpus_a, _ in specs:
        for b, cpus_b, _ in specs:
            if a != b:
                pairs[(a, b)] = _handoff(runner, cpus_a[:1], cpus_b[:1], bandwidth)
    if pairs:
        alphas, betas = zip(*pairs.values())
        default = (float(np.mean(alphas)), float(np.mean(betas)), True)
        return ({} if many else pairs), default
    cpus = cpu_specs[0][1]
    if len(cpus) >= 2:
        alpha, beta = _handoff(runner, cpus[:1], cpus[1:2], bandwidth)
        return {}, (alpha, beta, True)
    return {}, (0.0, bandwidth, False)
