"""How a stage runs on a PU with ONNX Runtime: CPU pinning, threads, execution provider and its options."""
from __future__ import annotations

from typing import Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from parapipe.soc.validation import FieldProblem


class Execution(BaseModel):
    """How a stage runs on a PU with ONNX Runtime.

    Attributes
    ----------
    cpus : tuple of int or None
        CPU ids the stage thread is pinned to (``os.sched_setaffinity``); None = not pinned.
    threads : int
        ``intra_op_num_threads``; defaults to ``len(cpus)`` when cpus are given, else 1.
    provider : str
        ONNX Runtime execution provider name.
    provider_options : dict of str to str
        Options passed with the provider (e.g. ``{"trt_dla_enable": "1", "trt_dla_core": "0"}``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpus: Optional[tuple[int, ...]] = None
    threads: int = Field(1, ge=1)
    provider: str = Field("CPUExecutionProvider", min_length=1)
    provider_options: dict[str, str] = {}

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

    def __hash__(self) -> int:
        return hash((self.cpus, self.threads, self.provider, tuple(sorted(self.provider_options.items()))))
