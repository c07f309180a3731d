"""How a SoC profile is identified: the reserved name of a measured machine's profile, and a profile's digest.

Pure data helpers (no measuring): resolving ``--soc`` to a profile, which may measure the machine, is
:func:`parapipe.app.resolve.resolve_soc`. Light: :func:`is_host` loads neither pydantic nor the profile loader
(a command asks it before it imports anything heavy).
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parapipe.soc.profile import SoC

__all__ = ["HOST_SOC", "is_host", "soc_sha256"]

#: ``--soc`` value (and profile name) of the measured profile of the machine the command, or the agent, runs on.
HOST_SOC = "host"


def is_host(spec: str) -> bool:
    """Whether the ``--soc`` value ``spec`` names the measured profile of this machine (:data:`HOST_SOC`)."""
    return str(spec) == HOST_SOC


def soc_sha256(soc: SoC) -> str:
    """SHA-256 (64 hex digits) of the profile's canonical form (its YAML dict as sorted JSON): equal profiles,
    equal digests."""
    from parapipe.soc.loader import soc_to_yaml_dict

    text = json.dumps(soc_to_yaml_dict(soc), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
