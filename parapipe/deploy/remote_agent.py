"""Put the on-device agent on an SSH host and start it: check Python and ONNX Runtime, upload once a version.

The agent goes to ``~/.cache/parapipe/agent-<sha256[:12]>/agent.py`` on the host (one folder per agent
version, so hosts shared by several parapipe versions keep working) and runs over an SSH exec channel.
"""
from __future__ import annotations

import hashlib
import logging
import posixpath
import re
from typing import TYPE_CHECKING, Tuple

from parapipe.deploy.agent_client import AgentClient, agent_path
from parapipe.errors import HostError

if TYPE_CHECKING:  # pragma: no cover
    from parapipe.deploy.host import RemoteHost

log = logging.getLogger(__name__)

#: Oldest Python the agent supports (device_agents/agent.py; the last aarch64 onnxruntime wheel, 1.19.2, is
#: built for Python 3.8: GUIDE section 6).
MIN_PYTHON = (3, 8)
#: Oldest ONNX Runtime the agent supports (the last aarch64 wheel for Python 3.8; GUIDE section 6).
MIN_ONNXRUNTIME = (1, 19)
#: Remote folder (relative to the remote home) that holds one agent folder per agent version.
AGENT_CACHE_DIR = ".cache/parapipe"


def check_python(host: "RemoteHost", python: str = "python3", timeout_s: float = 60.0) -> Tuple[str, str]:
    """Check the host's Python (>= 3.8) and that numpy and onnxruntime (>= 1.19) import.

    Parameters
    ----------
    host : RemoteHost
        A connected host.
    python : str
        Interpreter on the host.
    timeout_s : float
        Deadline of each check, in seconds.

    Returns
    -------
    (str, str)
        Python version and ONNX Runtime version, e.g. ``("3.8.10", "1.19.2")``.

    Raises
    ------
    HostError
        With the remedy (install Python >= 3.8 / ``pip install onnxruntime``);
        :class:`~parapipe.deploy.liveness.ConnectionLost` (``"... lost during the Python check"``) if the
        connection dies.
    """
    with host.step("the Python check"):
        return _check_python(host, python, timeout_s)


def _check_python(host: "RemoteHost", python: str, timeout_s: float) -> Tuple[str, str]:
    spec = host.spec
    rc, output = host.exec([python, "--version"], timeout_s=timeout_s)
    match = re.search(r"Python (\d+)\.(\d+)(?:\.(\d+))?", output)
    if rc != 0 or not match:
        raise HostError(f"{spec}: {python} does not run ({output.strip()[-200:] or f'exit {rc}'}); "
                        f"install Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} on {spec.address}")
    python_version = match[0][len("Python "):]
    if (int(match[1]), int(match[2])) < MIN_PYTHON:
        raise HostError(f"{spec}: {python} is Python {python_version}, older than "
                        f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]}; install Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} "
                        f"on {spec.address}")
    remedy = f"install onnxruntime>=1.19 on {spec.address}: pip install onnxruntime"
    probe = "import numpy, onnxruntime; print('onnxruntime', onnxruntime.__version__)"
    rc, output = host.exec([python, "-c", probe], timeout_s=timeout_s)
    found = re.search(r"^onnxruntime (\d+)\.(\d+)\S*", output, re.M)
    if rc != 0 or not found:
        last = (output.strip().splitlines() or [f"exit {rc}"])[-1]
        raise HostError(f"{spec}: numpy/onnxruntime do not import with {python} ({last}); {remedy}")
    ort_version = found[0].split()[1]
    if (int(found[1]), int(found[2])) < MIN_ONNXRUNTIME:
        raise HostError(f"{spec}: onnxruntime {ort_version} is too old; {remedy}")
    return python_version, ort_version


def start_agent(host: "RemoteHost", python: str = "python3", timeout_s: float = 60.0) -> AgentClient:
    """Upload the agent (skipped when the same SHA-256 is already there) and run it over an SSH exec channel.

    Parameters
    ----------
    host : RemoteHost
        A connected host.
    python : str
        Interpreter on the host (default ``python3`` on the login PATH).
    timeout_s : float
        Deadline of each preparatory command, in seconds.

    Returns
    -------
    AgentClient
        Talking to the agent; close it (or the host) when done.

    Raises
    ------
    HostError
        No suitable Python, numpy/onnxruntime missing (remedy: ``pip install onnxruntime``), upload failed.
    """
    check_python(host, python, timeout_s)
    local = agent_path()
    digest = hashlib.sha256(local.read_bytes()).hexdigest()
    folder = posixpath.join(host.home(), AGENT_CACHE_DIR, f"agent-{digest[:12]}")
    remote = posixpath.join(folder, "agent.py")
    with host.step("the agent upload"):
        if host.sha256(remote, timeout_s) != digest:
            host.mkdir_p(folder)
            host.upload(local, remote, sha256=digest)
            log.info("uploaded the agent to %s:%s", host.spec, remote)
    with host.step("the agent start"):
        return host.open_agent([python, "-u", remote], timeout_s)
