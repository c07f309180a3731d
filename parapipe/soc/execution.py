"""How a stage runs on a PU: CPU pinning, threads, runtime (ONNX Runtime or another adapter), provider, options."""
from __future__ import annotations

from typing import Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from parapipe.soc.validation import FieldProblem

__all__ = ["SHIPPED_RUNTIMES", "Execution"]


#: Runtime adapters shipped with the executor (``device_agents/ppexec/runtimes.py``). A profile may name another
#: runtime: it is a declared adapter slot that a vendor adapter fills on the board (device_agents/README.md).
SHIPPED_RUNTIMES = ("onnxruntime", "openvino", "ncnn")


class Execution(BaseModel):
    """How a stage runs on a PU.

    Attributes
    ----------
    cpus : tuple of int or None
        CPU ids the stage thread is pinned to (``os.sched_setaffinity``); None = not pinned.
    threads : int
        ``intra_op_num_threads``; defaults to ``len(cpus)`` when cpus are given, else 1.
    runtime : str
        Runtime adapter of the executor: ``onnxruntime`` (default), ``openvino``, ``ncnn`` (sub-models converted
        by pnnx on the host; :mod:`ppexec.ncnn_runtime`), or the name of a vendor adapter
        slot (e.g. a Black Sesame engine: no public runtime exists; see device_agents/README.md).
    runtime_options : dict of str to str
        Options of the runtime adapter (OpenVINO: ``device``, e.g. ``{"device": "CPU"}``; ncnn: ``device``
        ``cpu`` or ``vulkan``, ``precision`` ``fp32`` or ``fp16``, which defaults to the PU's ``precision``).
    provider : str
        ONNX Runtime execution provider name (runtime ``onnxruntime`` only).
    provider_options : dict of str to str
        Options passed with the provider (e.g. ``{"trt_dla_enable": "1", "trt_dla_core": "0"}``).
    devfreq : str or None
        Name of the PU's devfreq device (``/sys/class/devfreq/<name>``, e.g. ``ffe40000.gpu``): its frequency
        domain when ``run``/``deploy`` set an operating point. None: the domain is the cpufreq policy of ``cpus``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpus: Optional[tuple[int, ...]] = None
    threads: int = Field(default=1, ge=1)
    runtime: str = Field(default="onnxruntime", pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    runtime_options: dict[str, str] = {}
    provider: str = Field(default="CPUExecutionProvider", min_length=1)
    provider_options: dict[str, str] = {}
    devfreq: Optional[str] = Field(default=None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _threads_default(cls, data):
        if isinstance(data, Mapping) and data.get("threads") is None and data.get("cpus"):
            data = {**data, "threads": len(data["cpus"])}
        return data

    @field_validator("cpus")
    @classmethod
    def _check_cpus(cls, cpus):
        if cpus is None:
            return None
        if not cpus:
            raise FieldProblem("", "empty CPU list", "list the CPU ids, e.g. [2, 3], or leave cpus out")
        if any(c < 0 for c in cpus) or len(set(cpus)) != len(cpus):
            raise FieldProblem("", f"CPU ids must be distinct and >= 0, got {list(cpus)}",
                               "list each CPU id once, e.g. [2, 3, 4, 5]")
        return tuple(cpus)

    @model_serializer(mode="wrap")
    def _omit_absent_devfreq(self, handler):
        data = handler(self)
        if isinstance(data, dict) and data.get("devfreq") is None:
            data.pop("devfreq", None)  # documents of PUs without a devfreq device stay as they were
        return data

    def __hash__(self) -> int:
        return hash((self.cpus, self.threads, self.runtime, tuple(sorted(self.runtime_options.items())),
                     self.provider, tuple(sorted(self.provider_options.items())), self.devfreq))
