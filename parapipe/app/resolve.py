"""The one resolution of ``--soc``: a bundled profile name, a profile YAML path, or ``host``.

``host`` is a profile like the others: this machine measured as :func:`parapipe.measure.local.local_soc` does
(one PU per allowed core, pinned, one thread), or, with a remote runner, the board measured by
:func:`parapipe.measure.detect.detect_soc` per core. Every command (optimize, evaluate, profile, calibrate,
import, soc detect) resolves ``--soc`` here; :func:`soc_ref` is how a document names the profile it was computed
for.
"""
from __future__ import annotations

from typing import Optional, Sequence

from parapipe.mapping.model import PURef, SocRef
from parapipe.soc.identity import HOST_SOC, is_host, soc_sha256
from parapipe.soc.profile import SoC

__all__ = ["resolve_soc", "soc_ref"]


def resolve_soc(spec: str, runner=None, pus: Optional[Sequence[str]] = None) -> SoC:
    """The SoC profile named by ``spec``.

    Parameters
    ----------
    spec : str
        ``host``, a bundled profile name (``parapipe socs``) or a path to a profile YAML.
    runner : parapipe.measure.agent_timer.AgentTimer, optional
        With ``host``: a remote runner measures the board (``host@<user@address:port>``); None or a local
        runner measures this machine.
    pus : sequence of str, optional
        Keep only these PUs (``--pus``).

    Raises
    ------
    InputError
        Unknown profile, malformed YAML, unknown PU in ``pus``.
    ExecutionError
        ``host``: a core cannot be pinned.
    """
    if not is_host(spec):
        from parapipe.soc.loader import load_soc

        soc = load_soc(spec)
    elif runner is None or getattr(runner, "host", "local") == "local":
        from parapipe.measure.local import local_soc

        soc = local_soc()
    else:
        from parapipe.measure.detect import detect_soc

        soc = detect_soc(runner, name=f"{HOST_SOC}@{runner.host}", per_core=True)
    return soc.restrict(list(pus)) if pus else soc


def soc_ref(soc: SoC) -> SocRef:
    """The :class:`parapipe.mapping.SocRef` of ``soc``: name, SHA-256 (:func:`parapipe.soc.identity.soc_sha256`)
    and every PU's kind and execution."""
    return SocRef(name=soc.name, sha256=soc_sha256(soc),
                  pus={name: PURef(kind=pu.kind, execution=pu.execution, precision=pu.precision)
                       for name, pu in soc.pus.items()},
                  power_sensor=soc.power_sensor.to_doc() if soc.power_sensor is not None else None)
