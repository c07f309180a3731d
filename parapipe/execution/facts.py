"""The board's facts against a plan's bindings: refuse a run that cannot be what the mapping describes.

Facts are what the agent's ``hello`` reports (``device_agents/README.md``): ``cpus_allowed``, ``providers`` and
``onnxruntime_version`` of its ONNX Runtime, and ``runtimes`` (each runtime adapter's ``available``, ``version``,
``reason``). :func:`local_facts` gathers the same for this machine. :func:`check_board` runs before anything is
uploaded or started, so a mismatch costs nothing but one line.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping

from ppexec.plan import binding_cpu_problem

from parapipe.errors import input_error

__all__ = ["local_facts", "runtime_modules", "facts_probe", "facts_from_probe", "check_board"]

#: Marks the probe's output line among whatever a login shell prints.
PROBE_MARK = "PARAPIPE_FACTS "
#: A self-contained Python program (3.8+) printing a board's facts without uploading anything: the CPUs this
#: process may use, ONNX Runtime's version and providers, and whether each module named in argv imports.
FACTS_PROBE = r"""
import importlib.util, json, os, sys
out = {"cpus_allowed": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
       else list(range(os.cpu_count() or 1))}
try:
    import onnxruntime as ort
    out["onnxruntime_version"] = ort.__version__
    out["providers"] = list(ort.get_available_providers())
except Exception as exc:
    out["onnxruntime_version"], out["providers"] = None, []
out["modules"] = {m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}
import platform
out["hostname"], out["machine"] = platform.node(), platform.machine()
print("PARAPIPE_FACTS " + json.dumps(out))
"""


def local_facts() -> Dict[str, Any]:
    """This machine's facts in the shape of the agent's ``hello`` (CPUs this process may use, ORT, runtimes)."""
    import onnxruntime as ort
    from ppexec.runtimes import probe_all

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return {"cpus_allowed": cpus, "providers": list(ort.get_available_providers()),
            "onnxruntime_version": ort.__version__, "runtimes": probe_all(), "hostname": os.uname().nodename}


def runtime_modules() -> Dict[str, str]:
    """Runtime adapter name -> the Python module it needs on the board, for every adapter this executor ships."""
    from ppexec.runtimes import ADAPTERS

    return {name: getattr(adapter, "module", name) for name, adapter in ADAPTERS.items()}


def facts_probe() -> list:
    """The argv tail that runs :data:`FACTS_PROBE` (``[python, *facts_probe()]`` on the board)."""
    return ["-c", FACTS_PROBE, *sorted(set(runtime_modules().values()))]


def facts_from_probe(output: str, where: str) -> Dict[str, Any]:
    """The facts printed by :data:`FACTS_PROBE`, with ``runtimes`` in the shape of the agent's ``hello``.

    Raises
    ------
    InputError
        No facts line in ``output`` (the probe did not run).
    """
    import json

    line = next((ln for ln in output.splitlines() if ln.startswith(PROBE_MARK)), None)
    if line is None:
        printed = " ".join(output.split())[-200:] or "nothing"
        raise input_error(where, None, f"the facts probe printed no facts ({printed})",
                          "check that the board's Python runs numpy and onnxruntime (--python)")
    facts = json.loads(line[len(PROBE_MARK):])
    modules = facts.pop("modules", {})
    facts["runtimes"] = {name: {"available": bool(modules.get(mod)),
                                "reason": None if modules.get(mod) else f"Python module {mod!r} not installed"}
                         for name, mod in runtime_modules().items()}
    return facts


def check_board(bindings: Mapping[str, Any], facts: Mapping[str, Any], where: str) -> None:
    """Check every PU binding of a plan against the board's facts.

    Checks, per PU: its CPUs are all allowed on the board; it runs no more threads than it has CPUs; its runtime
    adapter exists and is installed there; with ONNX Runtime, the execution provider is in the board's build;
    with ncnn on its Vulkan device, the board has one (``vulkan_devices`` of the ncnn probe, where reported).

    Parameters
    ----------
    bindings : dict of str to ppexec.plan.PUBinding
        The plan's bindings.
    facts : dict
        The board's facts (agent ``hello`` or :func:`local_facts`).
    where : str
        The board, for the message (``"this machine"``, ``"me@board:22"``).

    Raises
    ------
    InputError
        The first mismatch, one line: the PU, what it needs, what the board has, and the fix (``--bind PU=CPUS``
        runs the PU on CPUs instead).
    """
    allowed = sorted(int(c) for c in facts.get("cpus_allowed") or [])
    runtimes = facts.get("runtimes") or {}
    providers = list(facts.get("providers") or [])
    for pu, b in bindings.items():
        alt = f"or run it elsewhere with --bind {pu}=CPUS"
        found = binding_cpu_problem(b, allowed)  # the executor's own check, against the board's CPUs
        if found is not None:
            kind, problem = found
            fix = (f"run on a board that has them (taskset/cgroup limits count), {alt}" if kind == "cpus" else
                   f"set execution.threads <= its CPUs in the profile, or bind more CPUs with --bind {pu}=CPUS")
            raise input_error(where, f"PU {pu}", problem, fix)
        runtime = getattr(b, "runtime", "onnxruntime")
        info = runtimes.get(runtime)
        if info is None:
            have = ", ".join(sorted(runtimes)) or "none"
            raise input_error(where, f"PU {pu}", f"needs runtime adapter {runtime!r}, which the board's executor "
                              f"lacks (it has {have})", "install that adapter on the board "
                              f"(device_agents/README.md, 'Runtime adapters'), {alt}")
        if not info.get("available"):
            raise input_error(where, f"PU {pu}", f"needs runtime {runtime!r}, which is not usable on the board "
                              f"({info.get('reason') or 'not installed'})", f"install it there, {alt}")
        device = str((getattr(b, "runtime_options", None) or {}).get("device", "cpu")).lower()
        if runtime == "ncnn" and device == "vulkan" and info.get("vulkan_devices") == []:
            raise input_error(where, f"PU {pu}", "runtime ncnn: device vulkan asked, but ncnn finds no Vulkan "
                              "device there (ncnn.get_gpu_count() is 0: no Vulkan driver)",
                              f"install the GPU's Vulkan driver there, run the PU on ncnn's CPU device with "
                              f"--bind {pu}=ncnn:cpu, {alt}")
        if runtime == "onnxruntime" and b.provider not in providers:
            raise input_error(where, f"PU {pu}", f"needs execution provider {b.provider}; the board's onnxruntime "
                              f"{facts.get('onnxruntime_version', '?')} has {', '.join(providers) or 'none'}",
                              f"install an onnxruntime build with {b.provider} there, {alt}")

