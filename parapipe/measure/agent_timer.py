"""Where measurements run: the on-device agent, as a local subprocess or on an SSH host, behind one interface.

A :class:`Runner` wraps one :class:`~parapipe.deploy.agent_client.AgentClient` and the agent's ``hello`` (ONNX
Runtime version, execution providers, CPUs). :func:`open_runner` starts it locally (no host given) or on a
remote host (host key checked, agent uploaded once a version; see :mod:`parapipe.deploy.host`), so profiling,
calibration and ``soc detect`` run the same code whether the board is this machine or one reached over SSH.

:func:`pu_target` turns a PU of a SoC profile into the agent's PU spec (CPU set + thread count, or an
execution provider with options), and :meth:`Runner.check_pus` refuses, before anything is measured, a PU
whose provider the host's onnxruntime lacks or whose CPUs the host does not have.
"""
from __future__ import annotations

import base64
import contextlib
import logging
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence

import onnx

from parapipe.deploy.agent_client import AgentClient
from parapipe.deploy.hostspec import HostSpec
from parapipe.errors import HostError
from parapipe.graph.shapes import skeleton
from parapipe.soc.profile import PU, SoC

log = logging.getLogger(__name__)

__all__ = ["Runner", "open_runner", "pu_target", "encode_model", "INLINE_MODEL_MAX_NBYTES", "LOCAL_HOST"]

#: Value of the ``host`` column for measurements taken by a local agent subprocess.
LOCAL_HOST = "local"
#: Largest serialised model sent with its weights inline, bytes. Above it (a VGG-19 fully connected layer is
#: 411 MB), weights of more than 4096 elements become graph inputs that the agent fills with random numbers:
#: the request stays small, and the time is the same for operators that do not pre-pack constant weights.
#: 32 MiB is a parapipe choice (base64 JSON of that size takes well under a second to send on loopback).
INLINE_MODEL_MAX_NBYTES = 32 * 2**20
#: Deadline of one profile request, s: session creation + warm-up + repeats of one block on a slow board.
PROFILE_TIMEOUT_S = 600.0


def encode_model(model: onnx.ModelProto) -> str:
    """Base64 of the serialised model for the agent's ``model_b64`` field.

    Models above :data:`INLINE_MODEL_MAX_NBYTES` are sent as their skeleton
    (:func:`parapipe.graph.shapes.skeleton`): large weights become inputs, which the agent feeds with seeded
    random values.
    """
    if model.ByteSize() > INLINE_MODEL_MAX_NBYTES:
        model = skeleton(model)
    return base64.b64encode(model.SerializeToString()).decode("ascii")


def pu_target(pu: PU, cpus_allowed: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The agent's PU spec for ``pu`` (``device_agents/agent.py``, op ``profile``, field ``pu``).

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
        "runtime_options": {...}, "threads": n}`` (plus ``cpus``) for another runtime adapter.
    """
    ex = pu.execution
    spec: Dict[str, Any] = {"threads": ex.threads}
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


class Runner:
    """One started agent and what it said about its host.

    Attributes
    ----------
    agent : AgentClient
    hello : dict
        The agent's ``hello`` reply (``onnxruntime_version``, ``providers``, ``cpus_allowed``,
        ``cpu_clusters``, ``hostname``, ...).
    host : str
        ``"local"`` or ``user@address:port``: the ``host`` column of the measurements taken here.
    """

    def __init__(self, agent: AgentClient, host: str):
        self.agent = agent
        self.host = host
        self.hello = agent.request("hello", timeout_s=60)
        if not self.hello.get("onnxruntime_version"):
            raise HostError(f"{host}: onnxruntime does not import for the agent; install onnxruntime>=1.19 "
                            "there (pip install onnxruntime)")

    @property
    def ort_version(self) -> str:
        """ONNX Runtime version on the host (the ``ort_version`` of the measurements)."""
        return str(self.hello["onnxruntime_version"])

    @property
    def cpus_allowed(self) -> List[int]:
        """CPUs the agent may run on."""
        return [int(c) for c in self.hello.get("cpus_allowed") or []]

    def check_pus(self, soc: SoC, pus: Sequence[str]) -> None:
        """Refuse PUs this host cannot run, before anything is measured.

        The same check as ``run``/``deploy`` make (:func:`parapipe.runtime.facts.check_board`), so a PU is
        profiled exactly as it will run.

        Raises
        ------
        InputError
            One line naming the PU and what the host lacks (CPUs, runtime adapter, execution provider), with the
            remedy.
        """
        from parapipe.runtime.facts import check_board

        facts = dict(self.hello)
        facts.setdefault("cpus_allowed", list(self.cpus_allowed))
        if "runtimes" not in facts:  # an agent from before runtime adapters: ONNX Runtime only
            facts["runtimes"] = {"onnxruntime": {"available": True}}
        check_board({name: soc.pus[name].execution for name in pus}, facts, str(self.host))

    def target(self, pu: PU) -> Dict[str, Any]:
        """:func:`pu_target` with this host's CPUs."""
        return pu_target(pu, self.cpus_allowed)

    def profile(self, model: onnx.ModelProto, pu: PU, optimization: str, warmup: int, repeats: int,
                timeout_s: float = PROFILE_TIMEOUT_S) -> Dict[str, Any]:
        """Time ``model`` on ``pu`` with the agent's ``profile`` op.

        Parameters
        ----------
        model : onnx.ModelProto
            Single-operator, block or stage sub-model.
        pu : PU
        optimization : {"disabled", "all"}
            ``"disabled"`` for single operators (nothing fused away), ``"all"`` for blocks and stages.
        warmup, repeats : int
            Untimed and timed runs.
        timeout_s : float
            Deadline of the request, s.

        Returns
        -------
        dict
            The agent's reply: ``median_s``, ``p90_s``, ``min_s``, ``repeats``, ``provider``, ...

        Raises
        ------
        AgentRequestError
            The agent could not build or run the model on that PU (e.g. the provider rejects an op).
        HostError
            The agent died or did not answer in time.
        """
        return self.agent.request("profile", timeout_s=timeout_s, model_b64=encode_model(model),
                                  pu=self.target(pu), optimization=optimization, warmup=warmup,
                                  repeats=repeats)

    def transfer(self, nbytes: int, src_cpus: Sequence[int], dst_cpus: Sequence[int], warmup: int = 3,
                 repeats: int = 20, timeout_s: float = 120.0) -> Dict[str, Any]:
        """Time handing ``nbytes`` from a thread on ``src_cpus`` to one on ``dst_cpus`` (agent op
        ``transfer``)."""
        return self.agent.request("transfer", timeout_s=timeout_s, nbytes=int(nbytes),
                                  src_cpus=list(src_cpus),
                                  dst_cpus=list(dst_cpus), warmup=warmup, repeats=repeats)


@contextlib.contextmanager
def open_runner(host: Optional[HostSpec] = None, python: Optional[str] = None) -> Iterator[Runner]:
    """Start the agent here (``host`` None) or on an SSH host, and stop it (and the connection) afterwards.

    Parameters
    ----------
    host : HostSpec, optional
        The board; None runs a local agent subprocess with this interpreter.
    python : str, optional
        Interpreter on the host (default ``python3`` on its login PATH; locally: this interpreter).

    Yields
    ------
    Runner

    Raises
    ------
    HostError
        Unreachable host, refused key, unknown host key (unless trusted), Python older than 3.8, numpy or
        onnxruntime missing: one line with the cause and the remedy.
    """
    if host is None:
        with AgentClient.local(python=python or sys.executable) as agent:
            yield Runner(agent, LOCAL_HOST)
        return
    from parapipe.deploy.host import RemoteHost

    with RemoteHost(host) as remote:
        agent = remote.start_agent(python=python or "python3")
        yield Runner(agent, str(host))
