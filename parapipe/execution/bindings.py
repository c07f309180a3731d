"""The PU bindings a pareto.json point runs with, as the SoC profile says, on any board.

Every PU of the point runs as its profile's ``execution`` block (embedded in the document, see
:class:`parapipe.mapping.SocRef`) says: pinned CPUs and thread count, runtime adapter, execution provider and
options. ``--bind PU=CPUS`` substitutes a PU: it runs on those CPUs with ONNX Runtime's CPU provider instead, so a
point computed for one board can be tried on another machine (its prediction then no longer applies).
:func:`bind_soc` makes the same substitution in a SoC profile, for the commands that measure (``profile``,
``calibrate``): what they measure and write is then the bound PUs', so the profile they lead to carries the
bindings and its points run, and are predicted, as measured.

``--bind PU=ncnn:cpu`` (or ``PU=ncnn:cpu@CPUS``) keeps the PU on runtime ncnn but on ncnn's CPU device instead of
its Vulkan GPU (pinned to CPUS when given, else as the profile pins it): a profile's GPU PU then runs, through
the same converted models, on a machine without a Vulkan device (:class:`RuntimeBind`).
"""
from __future__ import annotations

import re
from typing import Dict, Mapping, Optional, Sequence, Set, Tuple

from ppexec.plan import PUBinding

from parapipe.errors import input_error
from parapipe.soc.execution import Execution
from parapipe.mapping.model import ParetoDoc, Point

__all__ = ["RuntimeBind", "parse_binds", "parse_cpus", "bindings_for", "bind_soc"]

#: ``RUNTIME:DEVICE`` pairs ``--bind`` accepts instead of a CPU list.
RUNTIME_BINDS = {"ncnn:cpu": ("ncnn", "cpu")}

_CPUS = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


def parse_cpus(text: str, source: str = "--bind") -> Tuple[int, ...]:
    """CPU ids from ``0``, ``0-3`` or ``0,2,4-5`` (sorted, distinct).

    Raises
    ------
    InputError
        Anything else, or a range that runs backwards.
    """
    if not _CPUS.match(text or ""):
        raise input_error(source, None, f"{text!r} is not a CPU list", "write CPU ids like 0, 0-3 or 0,2")
    cpus: Set[int] = set()
    for part in text.replace(" ", "").split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise input_error(source, None, f"range {part!r} runs backwards", f"write {b}-{a}")
        cpus.update(range(a, b + 1))
    return tuple(sorted(cpus))


class RuntimeBind(tuple):
    """``--bind PU=RUNTIME:DEVICE[@CPUS]``: the PU keeps its profile binding except the runtime and its device
    (``ncnn:cpu``: runtime ncnn on its CPU device). A tuple of the CPU ids given after ``@`` (empty: the
    profile's), so code that reads a bind as CPUs still can; ``runtime`` and ``device`` say the rest."""

    runtime: str
    device: str

    def __new__(cls, runtime: str, device: str, cpus: Sequence[int] = ()) -> "RuntimeBind":
        obj = super().__new__(cls, tuple(cpus))
        obj.runtime, obj.device = runtime, device
        return obj


def parse_binds(items: Optional[Sequence[str]]) -> Dict[str, Tuple[int, ...]]:
    """``["big=0-3", "gpu=1"]`` -> ``{"big": (0, 1, 2, 3), "gpu": (1,)}``; ``"gpu=ncnn:cpu"`` (optionally
    ``@CPUS``) -> a :class:`RuntimeBind`.

    Raises
    ------
    InputError
        An item without ``=``, an empty PU name, a PU given twice, a bad CPU list or runtime:device.
    """
    binds: Dict[str, Tuple[int, ...]] = {}
    for item in items or ():
        pu, eq, cpus = item.partition("=")
        pu = pu.strip()
        if not eq or not pu:
            raise input_error("--bind", None, f"{item!r} is not PU=CPUS", "write e.g. --bind big=0-3")
        if pu in binds:
            raise input_error("--bind", pu, "given twice", "bind each PU once")
        if ":" in cpus:
            pair, at, listed = cpus.partition("@")
            if pair.strip().lower() not in RUNTIME_BINDS:
                raise input_error("--bind", pu, f"{pair.strip()!r} is not a runtime:device this option knows",
                                  f"write {' or '.join(RUNTIME_BINDS)} (optionally @CPUS), or a CPU list")
            runtime, device = RUNTIME_BINDS[pair.strip().lower()]
            binds[pu] = RuntimeBind(runtime, device, parse_cpus(listed, f"--bind {pu}") if at else ())
            continue
        binds[pu] = parse_cpus(cpus, f"--bind {pu}")
    return binds


def bind_soc(soc, binds: Optional[Mapping[str, Sequence[int]]]):
    """``soc`` (a :class:`parapipe.soc.profile.SoC`) with each PU named in ``binds`` run on those CPUs with ONNX
    Runtime's CPU provider, one thread per CPU (the substitution of ``--bind``); its name, costs and powers are
    kept, so measurements are recorded as that PU's. ``soc`` itself when ``binds`` is empty.

    Raises
    ------
    InputError
        A bound PU the profile does not have.
    """
    if not binds:
        return soc
    for pu in binds:
        if pu not in soc.pus:
            raise input_error("--bind", pu, f"no PU {pu!r} in SoC {soc.name!r}",
                              f"bind one of {', '.join(soc.pus)}")
    pus = {name: (pu.model_copy(update={"execution": _bound_execution(pu.execution, binds[name])})
                  if name in binds else pu) for name, pu in soc.pus.items()}
    fields = {f: getattr(soc, f) for f in type(soc).model_fields}
    return type(soc).model_validate({**fields, "pus": pus, "path": None})


def _bound_execution(ex: Execution, bind: Sequence[int]) -> Execution:
    """The execution of a PU bound with ``bind`` (CPUs, or a :class:`RuntimeBind` over ``ex``)."""
    if not isinstance(bind, RuntimeBind):
        return Execution(cpus=tuple(int(c) for c in bind), threads=len(bind))
    options = dict(ex.runtime_options) if ex.runtime == bind.runtime else {}
    options["device"] = bind.device
    cpus = tuple(int(c) for c in bind) or ex.cpus
    return Execution(cpus=cpus, threads=len(bind) if bind else ex.threads, runtime=bind.runtime,
                     runtime_options=options)


def bindings_for(doc: ParetoDoc, point: Point, binds: Optional[Mapping[str, Sequence[int]]] = None,
                 source: str = "mapping") -> Tuple[Dict[str, PUBinding], Dict[str, Tuple[int, ...]]]:
    """The binding of every PU the point uses, and the substituted PUs.

    A PU named in ``binds`` runs on those CPUs with ONNX Runtime's CPU provider, one thread per CPU, in fp32 (a
    :class:`RuntimeBind`: as its profile says, on that runtime and device); every other PU as
    ``doc.soc.pus[pu].execution`` says, at the profile's ``precision``.

    Raises
    ------
    InputError
        A PU the document's profile does not describe, or a bound PU that neither the point nor the profile has.
    """
    binds = dict(binds or {})
    used = point.used_pus()
    known = set(doc.soc.pus) | set(used)
    for pu in binds:
        if pu not in known:
            raise input_error("--bind", pu, f"no PU {pu!r} in SoC {doc.soc.name!r}",
                              f"bind one of {', '.join(sorted(known))}")
    bindings: Dict[str, PUBinding] = {}
    substituted: Dict[str, Tuple[int, ...]] = {}
    for pu in used:
        if pu in binds and isinstance(binds[pu], RuntimeBind) and pu in doc.soc.pus:
            ex = _bound_execution(doc.soc.pus[pu].execution, binds[pu])
            bindings[pu] = PUBinding(cpus=ex.cpus, threads=ex.threads, runtime=ex.runtime,
                                     runtime_options=dict(ex.runtime_options))
            substituted[pu] = tuple(ex.cpus or ())
            continue
        if pu in binds:
            cpus = tuple(int(c) for c in binds[pu])
            bindings[pu] = PUBinding(cpus=cpus, threads=len(cpus))
            substituted[pu] = cpus
            continue
        ref = doc.soc.pus.get(pu)
        if ref is None:
            raise input_error(source, "soc.pus", f"PU {pu!r} of point {point.id} has no execution binding",
                              f"re-run 'parapipe optimize', or run it elsewhere with --bind {pu}=CPUS")
        ex = ref.execution
        bindings[pu] = PUBinding(cpus=ex.cpus, threads=ex.threads, provider=ex.provider,
                                 provider_options=dict(ex.provider_options), runtime=ex.runtime,
                                 runtime_options=dict(ex.runtime_options), precision=ref.precision)
    return bindings, substituted
