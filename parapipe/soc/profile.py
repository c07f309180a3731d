"""SoC profiles in memory: processing units (PUs), how to run on them, and the transfer costs between them.

These are the types every other module codes against. They hold plain SI numbers (seconds, bytes, watts, hertz,
FLOP/s); the YAML files they come from also carry a source for each number, kept in :attr:`SoC.provenance` so that
:func:`parapipe.soc.loader.soc_to_yaml_dict` can write it back. Build them with
:func:`parapipe.soc.loader.load_soc` (a bundled name or a YAML path) or
:meth:`SoC.from_values` (numbers from Python, e.g. a profile measured on the host).

Transfer cost between PUs (the alpha-beta, i.e. latency-bandwidth, model):
``comm(src, dst, nbytes) = alpha_s + nbytes / beta_bytes_per_s``, zero on the same PU.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator,
                      model_validator)

from parapipe.errors import input_error
from parapipe.soc.execution import Execution
from parapipe.soc.op_classes import OP_CLASSES
from parapipe.soc.operating_points import OperatingPoints
from parapipe.soc.pipeline import PipelineParams, PowerSensor
from parapipe.soc.validation import NAME_PATTERN, FieldProblem, to_input_error

logger = logging.getLogger(__name__)

#: The type of a PU kind: a CPU cluster (big/LITTLE) or core, GPU, NPU, DLA, DSP.
PUKind = Literal["cpu", "gpu", "npu", "dla", "dsp"]
#: PU kinds a profile may declare (the values of :data:`PUKind`).
PU_KINDS: Tuple[PUKind, ...] = ("cpu", "gpu", "npu", "dla", "dsp")
#: Native precisions a PU may run a model in (``ppexec.precision.PRECISIONS``, what the runtime adapters set).
PRECISIONS = ("fp32", "fp16", "bf16", "int8")

_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

__all__ = ["Execution", "PU", "Transfer", "TransferPair", "Transfers", "Provenance", "SoC", "PUKind",
           "PU_KINDS", "PRECISIONS"]


class PU(BaseModel):
    """One processing unit: a CPU cluster (or core), a GPU, an NPU/DLA or a DSP.

    Attributes
    ----------
    name : str
        Unique within its SoC, e.g. ``"big"``.
    kind : {"cpu", "gpu", "npu", "dla", "dsp"}
    cores : int
        Cores (or shader cores / engines) the PU has.
    frequency_hz : float
        Clock frequency, Hz (> 0).
    peak_flops : float
        Peak FLOP/s at ``precision`` (> 0).
    precision : {"fp32", "fp16", "bf16", "int8"}
        Precision the PU runs the model in: its runtime adapter is set to compute in it where the runtime has a
        setting for it (device_agents/ppexec/precision.py), and a run checks outputs at the tolerance of the
        precision the runtime reports.
    memory_bandwidth_bytes_per_s : float
        Bandwidth the PU achieves to DRAM, bytes/s (> 0): the memory roof of the roofline.
    efficiency : dict of str to float
        Achieved fraction of ``peak_flops`` per op class (:data:`~parapipe.soc.op_classes.OP_CLASSES`), each in
        (0, 1]. ``other`` is required; classes left out take its value, so all seven keys are present.
    op_overhead_s : float
        Fixed launch/dispatch cost per operator, s (>= 0).
    active_power_w, idle_power_w : float
        Whole-PU power while busy / while idle, W (>= 0, idle <= active).
    supported_ops : frozenset of str or None
        Op types the PU can run: ONNX op types, and operators of other domains by their qualified name
        (``com.example.MyOp``, see :func:`parapipe.graph.support.qualified_op_type`). None = every operator of
        the standard domains (ONNX, ONNX-ML, ONNX Runtime's ``com.microsoft``), no custom-domain one.
    execution : Execution
    memory_bytes : float or None
        Memory the PU can fill with model weights, bytes (> 0); None (default) = no limit. Each replica of a
        replicated stage holds its own copy of its blocks' weights (:mod:`parapipe.cost.replication`).
    operating_points : OperatingPoints or None
        The frequencies the PU's domain can run at and what each costs (:mod:`parapipe.soc.operating_points`);
        the highest equals ``frequency_hz``. None (default): one operating point, ``frequency_hz``.
    """

    model_config = _CONFIG
    name: str = Field(pattern=NAME_PATTERN)
    kind: PUKind
    cores: int = Field(ge=1)
    frequency_hz: float = Field(gt=0)
    peak_flops: float = Field(gt=0)
    precision: Literal["fp32", "fp16", "bf16", "int8"]
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    efficiency: dict[str, float]
    op_overhead_s: float = Field(ge=0)
    active_power_w: float = Field(ge=0)
    idle_power_w: float = Field(ge=0)
    supported_ops: Optional[frozenset[str]] = None
    execution: Execution = Execution()
    memory_bytes: Optional[float] = Field(default=None, gt=0)
    operating_points: Optional[OperatingPoints] = None

    @field_validator("efficiency")
    @classmethod
    def _check_efficiency(cls, efficiency: dict[str, float]) -> dict[str, float]:
        for key, value in efficiency.items():
            if key not in OP_CLASSES:
                raise FieldProblem(key, f"unknown op class '{key}'", f"use {', '.join(OP_CLASSES)}")
            if not (0.0 < value <= 1.0) or math.isnan(value):
                raise FieldProblem(key, f"must be in (0, 1], got {value!r}",
                                   "give the achieved fraction of peak_flops, e.g. 0.4")
        if "other" not in efficiency:
            raise FieldProblem("other", "missing field",
                               "add efficiency.other: the fraction for every op class not listed")
        return {key: efficiency.get(key, efficiency["other"]) for key in OP_CLASSES}

    @field_validator("supported_ops")
    @classmethod
    def _check_ops(cls, ops: Optional[frozenset[str]]) -> Optional[frozenset[str]]:
        if ops is None:
            return None
        if not ops:
            raise FieldProblem("", "empty op list", "list the ONNX op types the PU runs, or write 'all'")
        import difflib

        import onnx.defs

        for op in sorted(ops):
            if "." in op.strip(".") and op.rpartition(".")[2]:
                continue  # a domain-qualified operator (a custom op a vendor provider implements)
            if not onnx.defs.has(op):
                close = difflib.get_close_matches(op, [s.name for s in onnx.defs.get_all_schemas()], n=1)
                raise FieldProblem("", f"unknown ONNX op type '{op}'",
                                   (f"did you mean '{close[0]}'? " if close else "") +
                                   "use op type names from the ONNX operator list (case matters)")
        return frozenset(ops)

    @model_validator(mode="after")
    def _check_power(self) -> "PU":
        if self.idle_power_w > self.active_power_w:
            raise FieldProblem("idle_power_w",
                               f"must be <= active_power_w ({self.active_power_w!r}), got {self.idle_power_w!r}",
                               "idle draw cannot exceed busy draw; check both values")
        ops = self.operating_points
        if ops is not None and abs(ops.max_frequency_hz - self.frequency_hz) > 1e-6 * self.frequency_hz:
            raise FieldProblem("operating_points.frequency_hz",
                               f"highest point {ops.max_frequency_hz:g} Hz differs from frequency_hz "
                               f"{self.frequency_hz:g}", "the profile's other numbers are at the highest point: "
                               "make the last frequency equal frequency_hz")
        return self

    def frequencies_hz(self) -> Tuple[float, ...]:
        """The PU's operating-point frequencies, Hz, ascending (``(frequency_hz,)`` without a table)."""
        return self.operating_points.frequency_hz if self.operating_points is not None else (self.frequency_hz,)

    @model_validator(mode="before")
    @classmethod
    def _ncnn_precision(cls, data: Any) -> Any:
        """An ncnn PU computes at its ``precision``: ``execution.runtime_options.precision`` defaults to it
        (``fp32`` or ``fp16``; ncnn's own default would be fp16 storage and arithmetic)."""
        if not isinstance(data, Mapping):
            return data
        ex, precision = data.get("execution"), data.get("precision")
        if precision not in ("fp32", "fp16") or ex is None:
            return data
        if isinstance(ex, Execution):
            if ex.runtime == "ncnn" and "precision" not in ex.runtime_options:
                ex = ex.model_copy(update={"runtime_options": {**ex.runtime_options, "precision": precision}})
                return {**data, "execution": ex}
        elif isinstance(ex, Mapping) and ex.get("runtime") == "ncnn":
            options = dict(ex.get("runtime_options") or {})
            if "precision" not in options:
                return {**data, "execution": {**ex, "runtime_options": {**options, "precision": precision}}}
        return data

    def supports(self, op_type: str) -> bool:
        """True if this PU can run operators of type ``op_type`` (qualified with its domain outside ONNX's).

        A PU whose runtime is ``ncnn`` runs only the op types pnnx converts into ncnn models that compute what
        ONNX Runtime computes (:data:`parapipe.soc.ncnn_ops.NCNN_OPS`), within its ``supported_ops``."""
        if self.execution.runtime == "ncnn":
            from parapipe.soc.ncnn_ops import NCNN_OPS

            if op_type not in NCNN_OPS:
                return False
        if self.supported_ops is None:
            from parapipe.graph.support import is_custom

            return not is_custom(op_type)
        return op_type in self.supported_ops

    def __hash__(self) -> int:
        fields = tuple(getattr(self, f) for f in type(self).model_fields if f != "efficiency")
        return hash(fields + (tuple(sorted(self.efficiency.items())),))


class Transfer(BaseModel):
    """Cost of handing a tensor from one PU to another: ``alpha_s + nbytes / beta_bytes_per_s``."""

    model_config = _CONFIG
    alpha_s: float = Field(ge=0)
    beta_bytes_per_s: float = Field(gt=0)


class TransferPair(Transfer):
    """Transfer cost of one PU pair; directed unless ``symmetric`` (then it also covers ``dst`` → ``src``)."""

    src: str
    dst: str
    symmetric: bool = False


class Transfers(BaseModel):
    """The ``default`` transfer cost and the ``pairs`` that override it."""

    model_config = _CONFIG
    default: Transfer
    pairs: tuple[TransferPair, ...] = ()


class Provenance(BaseModel):
    """Where one number of a profile comes from: a key of :attr:`SoC.sources`, or a low-confidence estimate."""

    model_config = _CONFIG
    source: Optional[str] = None
    confidence: Optional[Literal["low"]] = None
    note: Optional[str] = None


class SoC(BaseModel):
    """A heterogeneous SoC: its PUs (in file order), transfer costs, static power and memory bandwidth.

    Attributes
    ----------
    name, description : str
    static_power_w : float
        Board/SoC baseline power drawn whatever the PUs do, W (>= 0).
    memory_bandwidth_bytes_per_s : float
        Peak DRAM bandwidth of the SoC, bytes/s (> 0), shared by all PUs.
    pus : dict of str to PU
        Insertion order = file order = the order of :attr:`pu_names` and of the matrices.
    transfers : Transfers
    sources : dict of str to str
        Citation of each source key used in :attr:`provenance`.
    provenance : dict of str to Provenance
        Dotted field path (``"pus.big.peak_flops"``) → where that number comes from.
    pipeline : PipelineParams or None
        Pipeline-level terms of the cost model fitted on measured runs (None: the plain model).
    power_sensor : PowerSensor or None
        What the executor reads to measure energy (None: energies are estimates).
    path : Path or None
        The YAML file the profile was loaded from.
    """

    model_config = _CONFIG
    name: str = Field(min_length=1)
    description: str = ""
    static_power_w: float = Field(ge=0)
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    pus: dict[str, PU]
    transfers: Transfers
    sources: dict[str, str] = {}
    provenance: dict[str, Provenance] = {}
    pipeline: Optional[PipelineParams] = None
    power_sensor: Optional[PowerSensor] = None
    path: Optional[Path] = None
    _costs: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> "SoC":
        if not self.pus:
            raise FieldProblem("pus", "no PU defined", "define at least one PU under pus:")
        for key, pu in self.pus.items():
            if pu.name != key:
                raise FieldProblem(f"pus.{key}.name", f"PU stored under '{key}' is named '{pu.name}'",
                                   "use the same name for the key and the PU")
        seen: dict[tuple[str, str], int] = {}
        for i, pair in enumerate(self.transfers.pairs):
            for end in ("src", "dst"):
                if getattr(pair, end) not in self.pus:
                    raise FieldProblem(f"transfers.pairs.{i}.{end}", f"unknown PU '{getattr(pair, end)}'",
                                       f"choose from {', '.join(self.pus)}")
            if pair.src == pair.dst:
                raise FieldProblem(f"transfers.pairs.{i}", f"src and dst are both '{pair.src}'",
                                   "a PU hands tensors to itself for free; remove this pair")
            directions = [(pair.src, pair.dst)] + ([(pair.dst, pair.src)] if pair.symmetric else [])
            for direction in directions:
                if direction in seen:
                    raise FieldProblem(f"transfers.pairs.{i}", f"{direction[0]} -> {direction[1]} is already given "
                                       f"by transfers.pairs.{seen[direction]}", "give each direction once")
                seen[direction] = i
        for section in ("overlap", "invoke_s"):
            for pu_name in (getattr(self.pipeline, section) if self.pipeline is not None else {}):
                if pu_name not in self.pus:
                    raise FieldProblem(f"pipeline.{section}.{pu_name}", f"unknown PU '{pu_name}'",
                                       f"choose from {', '.join(self.pus)}")
        return self

    def model_post_init(self, __context) -> None:
        costs = {}
        for pair in self.transfers.pairs:
            costs[(pair.src, pair.dst)] = (pair.alpha_s, pair.beta_bytes_per_s)
            if pair.symmetric:
                costs[(pair.dst, pair.src)] = (pair.alpha_s, pair.beta_bytes_per_s)
        self._costs.update(costs)

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.pus.values()), self.transfers.default, self.transfers.pairs))

    @property
    def pu_names(self) -> list[str]:
        """PU names in file order (the order of :meth:`alpha_matrix` rows and columns)."""
        return list(self.pus)

    def transfer(self, src: str, dst: str) -> tuple[float, float]:
        """``(alpha_s, beta_bytes_per_s)`` for handing a tensor from ``src`` to ``dst``.

        Returns ``(0.0, inf)`` when ``src == dst``; a listed pair (either direction if symmetric) otherwise;
        else the default.

        Raises
        ------
        KeyError
            If ``src`` or ``dst`` is not a PU of this SoC (a caller bug: names come from :attr:`pu_names`).
        """
        for name in (src, dst):
            if name not in self.pus:
                raise KeyError(f"SoC {self.name!r} has no PU {name!r}; PUs: {', '.join(self.pus)}")
        if src == dst:
            return 0.0, math.inf
        default = self.transfers.default
        return self._costs.get((src, dst), (default.alpha_s, default.beta_bytes_per_s))

    def alpha_matrix(self) -> np.ndarray:
        """Fixed transfer cost, s, shape ``(n_pus, n_pus)`` in :attr:`pu_names` order; zero diagonal."""
        names = self.pu_names
        return np.array([[self.transfer(s, d)[0] for d in names] for s in names], dtype=float)

    def beta_matrix(self) -> np.ndarray:
        """Transfer bandwidth, bytes/s, shape ``(n_pus, n_pus)`` in :attr:`pu_names` order; ``inf`` diagonal."""
        names = self.pu_names
        return np.array([[self.transfer(s, d)[1] for d in names] for s in names], dtype=float)

    def restrict(self, pu_names: Sequence[str]) -> "SoC":
        """The same SoC with only the PUs in ``pu_names`` (kept in file order) and the pairs between them.

        Raises
        ------
        InputError
            ``"--pus: unknown PU 'x'; choose from big, little, ..."`` for a name not in the SoC; also for an
            empty list or a name given twice.
        """
        choices = ", ".join(self.pus)
        if not pu_names:
            raise input_error("--pus", None, "no PU given", f"choose one or more of {choices}")
        for i, name in enumerate(pu_names):
            if name not in self.pus:
                raise input_error("--pus", None, f"unknown PU '{name}'", f"choose from {choices}")
            if name in pu_names[:i]:
                raise input_error("--pus", None, f"PU '{name}' given twice", "list each PU once")
        keep = [n for n in self.pus if n in pu_names]
        pairs: list[TransferPair] = []
        new_index: dict[str, str] = {}
        for i, pair in enumerate(self.transfers.pairs):
            if pair.src in keep and pair.dst in keep:
                new_index[str(i)] = str(len(pairs))
                pairs.append(pair)
        provenance = {}
        for key, prov in self.provenance.items():
            parts = key.split(".")
            if parts[0] == "pus" and parts[1] not in keep:
                continue
            if parts[:2] in (["pipeline", "overlap"], ["pipeline", "invoke_s"]) and parts[2] not in keep:
                continue
            if parts[:2] == ["transfers", "pairs"]:
                if parts[2] not in new_index:
                    continue
                key = ".".join(parts[:2] + [new_index[parts[2]]] + parts[3:])
            provenance[key] = prov
        fields = {f: getattr(self, f) for f in type(self).model_fields}
        if self.pipeline is not None:
            fields["pipeline"] = self.pipeline.model_copy(
                update={"overlap": {p: v for p, v in self.pipeline.overlap.items() if p in keep},
                        "invoke_s": {p: v for p, v in self.pipeline.invoke_s.items() if p in keep}})
        return type(self).model_validate({
            **fields, "pus": {n: self.pus[n] for n in keep}, "provenance": provenance,
            "transfers": Transfers(default=self.transfers.default, pairs=tuple(pairs)),
        })

    @classmethod
    def from_values(cls, name: str, pus: Sequence[Union[PU, Mapping]], static_power_w: float,
                    memory_bandwidth_bytes_per_s: float,
                    default_transfer: Optional[tuple[float, float]] = None,
                    pair_transfers: Optional[Mapping[tuple[str, str], tuple[float, float]]] = None,
                    description: str = "") -> "SoC":
        """Build a SoC from numbers given in Python (e.g. a profile measured on the host).

        Parameters
        ----------
        name : str
        pus : sequence of PU or mapping
            The PUs in order; a mapping is validated as a :class:`PU` (its errors then name the field).
        static_power_w : float
            Baseline power, W.
        memory_bandwidth_bytes_per_s : float
            Peak DRAM bandwidth, bytes/s.
        default_transfer : (alpha_s, beta_bytes_per_s), optional
            Cost between PUs without a pair entry; default ``(0.0, memory_bandwidth_bytes_per_s)``: PUs that
            share memory hand off with no fixed cost, copying at the memory bandwidth.
        pair_transfers : mapping of (src, dst) to (alpha_s, beta_bytes_per_s), optional
            Directed per-pair costs.
        description : str

        Raises
        ------
        InputError
            ``"SoC '<name>': <field>: <problem>; <fix>"`` for a bad value (e.g. a non-positive bandwidth).
        """
        alpha, beta = default_transfer if default_transfer is not None else (0.0, memory_bandwidth_bytes_per_s)
        pairs = [{"src": s, "dst": d, "alpha_s": a, "beta_bytes_per_s": b}
                 for (s, d), (a, b) in (pair_transfers or {}).items()]
        pu_map: dict[str, Union[PU, Mapping]] = {}
        for i, pu in enumerate(pus):
            pu_name = pu.name if isinstance(pu, PU) else pu.get("name", f"#{i}") if isinstance(pu, Mapping) else i
            pu_map[str(pu_name)] = pu
        data = {"name": name, "description": description, "static_power_w": static_power_w,
                "memory_bandwidth_bytes_per_s": memory_bandwidth_bytes_per_s, "pus": pu_map,
                "transfers": {"default": {"alpha_s": alpha, "beta_bytes_per_s": beta}, "pairs": pairs}}
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise to_input_error(err, f"SoC {name!r}", cls) from None

