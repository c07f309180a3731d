"""Put the on-device agent on an SSH host and start it: check Python and ONNX Runtime, upload once a version.

The agent goes to ``~/.cache/parapipe/agent-<digest[:12]>/agent.py`` on the host (the folder
:func:`host_cache_dir` names: ``$PARAPIPE_HOST_CACHE_DIR`` when set) with the executor core next to
it (``ppexec/``: the runtime adapters through which the agent profiles a PU whose profile names another runtime
than ONNX Runtime, e.g. OpenVINO), one folder per version of those files, so hosts shared by several parapipe
versions keep working; ``<digest>`` is :func:`agent_digest`. A ``MANIFEST.sha256`` written after every file says
the folder is complete. The agent runs over an SSH exec channel (:class:`AgentLauncher`).
"""
from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from parapipe.errors import HostError
from parapipe.remote.agent_client import AgentClient, ChannelTransport, agent_path
from parapipe.remote.connection import SETTLE_S, SshConnection
from parapipe.remote.host_files import HostFiles
from parapipe.remote.ssh_channels import ExecChannels, said

__all__ = ["AgentLauncher", "MIN_PYTHON", "MIN_ONNXRUNTIME", "AGENT_CACHE_DIR", "HOST_CACHE_ENV", "AGENT_MANIFEST",
           "agent_files", "agent_digest", "host_cache_dir"]

log = logging.getLogger(__name__)

#: Oldest Python the agent supports (device_agents/agent.py): onnxruntime 1.19.2 is the newest release with
#: Python 3.8 wheels for aarch64 on PyPI (https://pypi.org/project/onnxruntime/1.19.2/#files).
MIN_PYTHON = (3, 8)
#: Oldest ONNX Runtime the agent supports: 1.19, the newest line with Python 3.8 aarch64 wheels (as above).
MIN_ONNXRUNTIME = (1, 19)
#: Remote folder (relative to the remote home) that holds one agent folder per agent version.
AGENT_CACHE_DIR = ".cache/parapipe"
#: Environment variable (read here, on the machine running parapipe) naming another folder for
#: :data:`AGENT_CACHE_DIR` on every host: absolute, or relative to the remote home (the test suite points it
#: at a temporary folder so that it never writes into the account's cache).
HOST_CACHE_ENV = "PARAPIPE_HOST_CACHE_DIR"


def host_cache_dir() -> str:
    """The folder on SSH hosts that holds parapipe's agent copies (and, by default, deploy bundles):
    ``$PARAPIPE_HOST_CACHE_DIR`` when set and not blank, else :data:`AGENT_CACHE_DIR`; absolute, or relative
    to the remote home (``~/`` allowed)."""
    return os.environ.get(HOST_CACHE_ENV, "").strip() or AGENT_CACHE_DIR


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


class AgentLauncher:
    """Starts the on-device agent on one connected host, and stops the agents it started.

    Parameters
    ----------
    connection : SshConnection
        The connection (names the steps; its ``step_timeout_s`` is the default deadline).
    channels : ExecChannels
        Exec channels on it (the checks, the agent's own channel).
    files : HostFiles
        The host's files (the agent's upload).
    """

    def __init__(self, connection: SshConnection, channels: ExecChannels, files: HostFiles):
        self.connection, self.channels, self.files = connection, channels, files
        self._started: List[AgentClient] = []

    def check_python(self, python: str = "python3", timeout_s: Optional[float] = None) -> Tuple[str, str]:
        """Check the host's Python (>= 3.8) and that numpy and onnxruntime (>= 1.19) import.

        Parameters
        ----------
        python : str
            Interpreter on the host.
        timeout_s : float, optional
            Deadline of each check, s (default the connection's ``step_timeout_s``).

        Returns
        -------
        (str, str)
            Python version and ONNX Runtime version, e.g. ``("3.8.10", "1.19.2")``.

        Raises
        ------
        HostError
            With the remedy (install Python >= 3.8 / ``pip install onnxruntime``);
            :class:`~parapipe.remote.liveness.ConnectionLost` (``"... lost during the Python check"``) if the
            connection dies.
        """
        with self.connection.step("the Python check"):
            return self._check_python(python, timeout_s or self.connection.step_timeout_s)

    def _check_python(self, python: str, timeout_s: float) -> Tuple[str, str]:
        spec, run = self.connection.spec, self.channels.exec
        rc, output = run([python, "--version"], timeout_s=timeout_s)
        match = re.search(r"Python (\d+)\.(\d+)(?:\.(\d+))?", output)
        if rc != 0 or not match:
            raise HostError(f"{spec}: {python} does not run ({said(output, rc, 200)}); "
                            f"install Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} on {spec.address}")
        python_version = match[0][len("Python "):]
        if (int(match[1]), int(match[2])) < MIN_PYTHON:
            raise HostError(f"{spec}: {python} is Python {python_version}, older than "
                            f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]}; install Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} "
                            f"on {spec.address}")
        remedy = f"install onnxruntime>=1.19 on {spec.address}: pip install onnxruntime"
        probe = "import numpy, onnxruntime; print('onnxruntime', onnxruntime.__version__)"
        rc, output = run([python, "-c", probe], timeout_s=timeout_s)
        found = re.search(r"^onnxruntime (\d+)\.(\d+)\S*", output, re.M)
        if rc != 0 or not found:
            last = (output.strip().splitlines() or [f"exit {rc}"])[-1]
            raise HostError(f"{spec}: numpy/onnxruntime do not import with {python} ({last}); {remedy}")
        ort_version = found[0].split()[1]
        if (int(found[1]), int(found[2])) < MIN_ONNXRUNTIME:
            raise HostError(f"{spec}: onnxruntime {ort_version} is too old; {remedy}")
        return python_version, ort_version

    def open(self, argv: List[str], timeout_s: Optional[float] = None) -> AgentClient:
        """Run an agent command line (``[python, "-u", agent.py]``) on an exec channel and talk to it; the
        caller closes the client."""
        channel = self.channels.open_exec_channel(argv, timeout_s)
        conn = self.connection
        return AgentClient(ChannelTransport(channel, where=str(conn.spec),
                                            lost_reason=lambda: conn.lost_reason(SETTLE_S)))

    def start(self, python: str = "python3", timeout_s: Optional[float] = None) -> AgentClient:
        """Upload the agent and ppexec/ to ``<host_cache_dir()>/agent-<digest[:12]>/`` (skipped when the same
        version is already there) and run the agent over an SSH exec channel; :meth:`close` stops it.

        Parameters
        ----------
        python : str
            Interpreter on the host (default ``python3`` on the login PATH).
        timeout_s : float, optional
            Deadline of each preparatory command, s (default the connection's ``step_timeout_s``).

        Returns
        -------
        AgentClient
            Talking to the agent.

        Raises
        ------
        HostError
            No suitable Python, numpy/onnxruntime missing (remedy: ``pip install onnxruntime``), upload failed.
        """
        timeout_s = timeout_s or self.connection.step_timeout_s
        self.check_python(python, timeout_s)
        files = agent_files()
        digest, manifest = agent_digest(files)
        folder = posixpath.normpath(self.files.abs_path(posixpath.join(host_cache_dir(), f"agent-{digest[:12]}")))
        remote = posixpath.join(folder, "agent.py")
        marker = posixpath.join(folder, AGENT_MANIFEST)
        manifest_sha = hashlib.sha256(manifest.encode()).hexdigest()
        with self.connection.step("the agent upload"):
            if self.files.sha256(marker, timeout_s) != manifest_sha:
                self.files.mkdir_p(posixpath.join(folder, "ppexec"))
                for rel, path in files.items():
                    self.files.upload(path, posixpath.join(folder, rel),
                                      sha256=hashlib.sha256(path.read_bytes()).hexdigest())
                with tempfile.TemporaryDirectory() as tmp:
                    text = Path(tmp) / AGENT_MANIFEST
                    text.write_text(manifest)
                    self.files.upload(text, marker, sha256=manifest_sha)
                log.info("uploaded the agent and ppexec/ to %s:%s", self.connection.spec, folder)
        with self.connection.step("the agent start"):
            agent = self.open([python, "-u", remote], timeout_s)
        self._started.append(agent)
        return agent

    def close(self) -> None:
        """Stop the agents :meth:`start` started (each gets 2 s to say bye and exit)."""
        for agent in self._started:
            agent.close(timeout_s=2.0)
        self._started.clear()
