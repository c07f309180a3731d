"""Put the on-device agent on an SSH host and start it: check Python and ONNX Runtime, upload once a version.

The agent goes to ``~/.cache/parapipe/agent-<digest[:12]>/agent.py`` on the host with the executor core next to
it (``ppexec/``: the runtime adapters through which the agent profiles a PU whose profile names another runtime
than ONNX Runtime, e.g. OpenVINO), one folder per version of those files, so hosts shared by several parapipe
versions keep working; ``<digest>`` is :func:`agent_digest`. A ``MANIFEST.sha256`` written after every file says
the folder is complete. The agent runs over an SSH exec channel.
"""
from __future__ import annotations

import hashlib
import logging
import posixpath
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Tuple

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


#: Written last into the agent's folder: ``<digest>`` then one ``<sha256>  <path>`` line per file.
AGENT_MANIFEST = "MANIFEST.sha256"


def agent_files() -> Dict[str, "Path"]:
    """The files the agent needs on a host, relative POSIX path -> local path: ``agent.py`` and ``ppexec/*.py``."""
    local = agent_path()
    files = {"agent.py": local}
    for source in sorted((local.parent / "ppexec").glob("*.py")):
        files[f"ppexec/{source.name}"] = source
    return files


def agent_digest(files: Dict[str, "Path"]) -> Tuple[str, str]:
    """``(digest, manifest text)`` of ``files``: the SHA-256 of the manifest's file lines."""
    lines = "".join(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}\n" for rel, path in files.items())
    digest = hashlib.sha256(lines.encode()).hexdigest()
    return digest, f"{digest}\n{lines}"


def start_agent(host: "RemoteHost", python: str = "python3", timeout_s: float = 60.0) -> AgentClient:
    """Upload the agent and ppexec/ (skipped when the same version is already there) and run the agent over an
    SSH exec channel.

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
    files = agent_files()
    digest, manifest = agent_digest(files)
    folder = posixpath.join(host.home(), AGENT_CACHE_DIR, f"agent-{digest[:12]}")
    remote = posixpath.join(folder, "agent.py")
    marker = posixpath.join(folder, AGENT_MANIFEST)
    manifest_sha = hashlib.sha256(manifest.encode()).hexdigest()
    with host.step("the agent upload"):
        if host.sha256(marker, timeout_s) != manifest_sha:
            host.mkdir_p(posixpath.join(folder, "ppexec"))
            for rel, path in files.items():
                host.upload(path, posixpath.join(folder, rel), sha256=hashlib.sha256(path.read_bytes()).hexdigest())
            with tempfile.TemporaryDirectory() as tmp:
                text = Path(tmp) / AGENT_MANIFEST
                text.write_text(manifest)
                host.upload(text, marker, sha256=manifest_sha)
            log.info("uploaded the agent and ppexec/ to %s:%s", host.spec, folder)
    with host.step("the agent start"):
        return host.open_agent([python, "-u", remote], timeout_s)
