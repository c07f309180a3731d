"""The :class:`~parapipe.measure.timer.Timer` that measures through the on-device agent, as a local subprocess or
on an SSH host.

An :class:`AgentTimer` wraps one :class:`~parapipe.remote.agent_client.AgentClient` and the agent's ``hello`` (its
facts: ONNX Runtime version, execution providers, CPUs). :func:`open_agent_timer` starts the agent locally (no
host given) or on a remote host (host key checked, agent and ``ppexec/`` uploaded once a version; see
:mod:`parapipe.remote.host`), so profiling, calibration and ``soc detect`` run the same code whether the board is
this machine or one reached over SSH; the agent's ops run :mod:`ppexec.timing`, as the in-process
:class:`~parapipe.measure.local.LocalTimer` does. :meth:`AgentTimer.check_pus` refuses, before anything is
measured, a PU whose provider the host's onnxruntime lacks or whose CPUs the host does not have.
"""
from __future__ import annotations

import base64
import contextlib
import logging
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence

import onnx

from parapipe.remote.agent_client import AgentClient
from parapipe.remote.hostspec import HostSpec
from parapipe.errors import HostError
from parapipe.graph.shapes import skeleton
from parapipe.measure.timer import LOCAL_HOST, check_timer_pus, pu_target
from parapipe.soc.profile import PU, SoC

log = logging.getLogger(__name__)

__all__ = ["AgentTimer", "open_agent_timer", "encode_model", "INLINE_MODEL_MAX_NBYTES", "PROFILE_TIMEOUT_S"]
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


class AgentTimer:
    """A :class:`~parapipe.measure.timer.Timer` over one started agent.

    Attributes
    ----------
    agent : AgentClient
    facts : dict
        The agent's ``hello`` reply (``onnxruntime_version``, ``providers``, ``cpus_allowed``,
        ``cpu_clusters``, ``hostname``, ...).
    host : str
        ``"local"`` or ``user@address:port``: the ``host`` column of the measurements taken here.

    Raises
    ------
    HostError
        From the constructor: onnxruntime does not import for the agent.
    """

    def __init__(self, agent: AgentClient, host: str):
        self.agent = agent
        self.host = host
        self.facts = agent.request("hello", timeout_s=60)
        if not self.facts.get("onnxruntime_version"):
            raise HostError(f"{host}: onnxruntime does not import for the agent; install onnxruntime>=1.19 "
                            "there (pip install onnxruntime)")

    @property
    def ort_version(self) -> str:
        """ONNX Runtime version on the host (the ``ort_version`` of the measurements)."""
        return str(self.facts["onnxruntime_version"])

    @property
    def cpus_allowed(self) -> List[int]:
        """CPUs the agent may run on."""
        return [int(c) for c in self.facts.get("cpus_allowed") or []]

    def check_pus(self, soc: SoC, pus: Sequence[str]) -> None:
        """Refuse PUs this host cannot run, before anything is measured (:func:`check_timer_pus`)."""
        check_timer_pus(dict(self.facts, cpus_allowed=self.cpus_allowed), str(self.host), soc, pus)

    def target(self, pu: PU) -> Dict[str, Any]:
        """:func:`pu_target` with this host's CPUs."""
        return pu_target(pu, self.cpus_allowed)

    def time_model(self, model: onnx.ModelProto, pu: PU, optimization: str, warmup: int, repeats: int,
                   timeout_s: float = PROFILE_TIMEOUT_S, frequency: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
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
        frequency : dict, optional
            ``{"frequency_hz", "cpus" | "devfreq"}``: the operating point the agent sets for this measurement
            and restores after it.

        Returns
        -------
        dict
            The agent's reply: ``median_s``, ``p90_s``, ``min_s``, ``repeats``, ``provider``, ...; with
            ``frequency``, what the kernel read back (:meth:`ppexec.dvfs.Applied.report`).

        Raises
        ------
        AgentRequestError
            The agent could not build or run the model on that PU (e.g. the provider rejects an op), or could
            not set the frequency (``BadRequest``: not in the table, no permission).
        HostError
            The agent died or did not answer in time.
        """
        extra: Dict[str, Any] = {} if frequency is None else {"frequency": dict(frequency, pu=pu.name)}
        if pu.execution.runtime == "ncnn":  # converted here (pnnx), sent as a pack the agent's ncnn adapter loads
            from parapipe.execution.ncnn_convert import NcnnConversionError, convert, pack
            from parapipe.remote.agent_client import AgentRequestError

            try:
                payload = base64.b64encode(pack(convert(model, f"{model.graph.name} on PU {pu.name}")))
            except NcnnConversionError as exc:
                raise AgentRequestError(str(exc), "profile", "ModelError") from None
            return self.agent.request("profile", timeout_s=timeout_s, model_b64=payload.decode("ascii"),
                                      pu=self.target(pu), warmup=warmup, repeats=repeats, **extra)
        return self.agent.request("profile", timeout_s=timeout_s, model_b64=encode_model(model),
                                  pu=self.target(pu), optimization=optimization, warmup=warmup,
                                  repeats=repeats, **extra)

    def time_handoff(self, nbytes: int, src_cpus: Sequence[int], dst_cpus: Sequence[int], warmup: int = 3,
                     repeats: int = 20, timeout_s: float = 120.0) -> Dict[str, Any]:
        """Time handing ``nbytes`` from a thread on ``src_cpus`` to one on ``dst_cpus`` (agent op
        ``transfer``)."""
        return self.agent.request("transfer", timeout_s=timeout_s, nbytes=int(nbytes),
                                  src_cpus=list(src_cpus),
                                  dst_cpus=list(dst_cpus), warmup=warmup, repeats=repeats)


@contextlib.contextmanager
def open_agent_timer(host: Optional[HostSpec] = None, python: Optional[str] = None) -> Iterator[AgentTimer]:
    """Start the agent here (``host`` None) or on an SSH host, and stop it (and the connection) afterwards.

    Parameters
    ----------
    host : HostSpec, optional
        The board; None runs a local agent subprocess with this interpreter.
    python : str, optional
        Interpreter on the host (default ``python3`` on its login PATH; locally: this interpreter).

    Yields
    ------
    AgentTimer

    Raises
    ------
    HostError
        Unreachable host, refused key, unknown host key (unless trusted), Python older than 3.8, numpy or
        onnxruntime missing: one line with the cause and the remedy.
    """
    if host is None:
        with AgentClient.local(python=python or sys.executable) as agent:
            yield AgentTimer(agent, LOCAL_HOST)
        return
    from parapipe.remote.host import RemoteHost

    with RemoteHost(host) as remote:
        agent = remote.start_agent(python=python or "python3")
        yield AgentTimer(agent, str(host))
