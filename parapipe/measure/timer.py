"""The one timing interface of parapipe: what a measurement asks of the machine it measures.

A :class:`Timer` times a sub-model on a PU (:meth:`Timer.time_model`), times a hand-off of ``nbytes`` between
two CPU sets (:meth:`Timer.time_handoff`) and reports the machine's facts (:attr:`Timer.facts`). Two
implementations run the same board-side code (:mod:`ppexec.timing`):

* :class:`parapipe.measure.agent_timer.AgentTimer`: through the on-device agent (``device_agents/agent.py``), as a
  local subprocess or on an SSH host (``parapipe profile``, ``calibrate``, ``soc detect``, ``--soc host`` with
  ``--host``);
* :class:`parapipe.measure.local.LocalTimer`: in this process (the measured ``host`` profile, ``--soc host``).

Replies are the agent's: ``median_s``, ``p90_s``, ``min_s``, ``spread``, ``repeats`` (seconds), and for a model
``provider``, ``cpus``, ``inputs``; for a hand-off ``nbytes`` and ``bandwidth_bytes_per_s``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence

import onnx

from parapipe.errors import HostError
from parapipe.soc.profile import PU, SoC

__all__ = ["Timer", "pu_target", "check_timer_pus", "LOCAL_HOST"]

#: Value of the ``host`` column for measurements taken on this machine (a local agent subprocess or in process).
LOCAL_HOST = "local"


class Timer(Protocol):
    """What measuring needs from a machine (see the module docstring)."""

    #: ``"local"`` or ``user@address:port``: the ``host`` column of the measurements taken.
    host: str
    #: The machine's facts, as the agent's ``hello`` reports them (:func:`ppexec.timing.machine_facts`).
    facts: Dict[str, Any]

    @property
    def ort_version(self) -> str:
        """ONNX Runtime version there (the ``ort_version`` of the measurements)."""

    @property
    def cpus_allowed(self) -> List[int]:
        """CPUs the measurements may use."""

    def check_pus(self, soc: SoC, pus: Sequence[str]) -> None:
        """Refuse PUs the machine cannot run (:func:`check_timer_pus`)."""

    def target(self, pu: PU) -> Dict[str, Any]:
        """The agent's PU spec of ``pu`` (:func:`pu_target`)."""

    def time_model(self, model: onnx.ModelProto, pu: PU, optimization: str, warmup: int, repeats: int,
                   timeout_s: float = ..., frequency: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Time ``model`` on ``pu`` (``optimization``: ``"disabled"`` or ``"all"``); the agent's ``profile``
        reply. ``frequency`` (``{"frequency_hz", "cpus" | "devfreq"}``): the PU's operating point, set for the
        measurement and restored after it (:func:`ppexec.dvfs.applied`); the reply's ``frequency`` then says
        what the kernel read back."""

    def time_handoff(self, nbytes: int, src_cpus: Sequence[int], dst_cpus: Sequence[int], warmup: int = 3,
                     repeats: int = 20, timeout_s: float = ...) -> Dict[str, Any]:
        """Time handing ``nbytes`` from a thread on ``src_cpus`` to one on ``dst_cpus``; the agent's ``transfer``
        reply."""


def check_timer_pus(facts: Dict[str, Any], where: str, soc: SoC, pus: Sequence[str]) -> None:
    """Refuse PUs a machine with these ``facts`` cannot run, before anything is measured: the same check as
    ``run``/``deploy`` make (:func:`parapipe.execution.facts.check_board`), so a PU is profiled as it will run.

    Raises
    ------
    InputError
        One line naming the PU and what the machine lacks (CPUs, runtime adapter, execution provider), with the
        remedy.
    """
    from parapipe.execution.facts import check_board

    facts = dict(facts)
    facts.setdefault("cpus_allowed", [])
    if "runtimes" not in facts:  # an agent from before runtime adapters: ONNX Runtime only
        facts["runtimes"] = {"onnxruntime": {"available": True}}
    check_board({name: soc.pus[name].execution for name in pus}, facts, where)


def pu_target(pu: PU, cpus_allowed: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The agent's PU spec for ``pu`` (``device_agents/agent.py``, op ``profile``, field ``pu``); the
    in-process :class:`~parapipe.measure.local.LocalTimer` reads the same spec.

    Parameters
    ----------
    pu : PU
        A PU of a SoC profile; its ``execution`` says how to run on it.
    cpus_allowed : sequence of int, optional
        CPUs of the host (from ``hello``), used for a CPU-provider PU that names no CPUs.

    Returns
    -------
    dict
        ``{"cpus": [...], "threads": n}`` for the CPU provider; ``{"provider": name, "provider_options":
        {...}, "threads": n}`` (plus ``cpus`` when given) for another provider; ``{"runtime": name,
        "runtime_options": {...}, "threads": n}`` (plus ``cpus``) for another runtime adapter; each with
        ``"precision"`` when the PU's is not fp32.

    Raises
    ------
    HostError
        A CPU-provider PU that names no CPUs on a host that reported none.
    """
    ex = pu.execution
    spec: Dict[str, Any] = {"threads": ex.threads}
    if pu.precision != "fp32":  # the runtime adapter computes in it where it can (ppexec/precision.py)
        spec["precision"] = pu.precision
    if ex.runtime != "onnxruntime":  # measured through the PU's runtime adapter, as run/deploy execute it
        spec.update(runtime=ex.runtime, runtime_options=dict(ex.runtime_options))
        if ex.cpus is not None:
            spec["cpus"] = list(ex.cpus)
        return spec
    if ex.provider == "CPUExecutionProvider":
        cpus = list(ex.cpus) if ex.cpus is not None else list(cpus_allowed or [])
        if not cpus:
            raise HostError(f"PU {pu.name!r} names no CPUs and the host reported none; give execution.cpus")
        spec["cpus"] = cpus
        return spec
    spec["provider"] = ex.provider
    spec["provider_options"] = dict(ex.provider_options)
    if ex.cpus is not None:
        spec["cpus"] = list(ex.cpus)
    return spec
