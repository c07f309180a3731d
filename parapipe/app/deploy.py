"""``parapipe deploy``: run one mapping on an SSH host (a board) through the agent, and bring the results back.

Steps (each remote command shell-quoted, host-key checking on, every wait bounded):

1. build the bundle locally (:func:`parapipe.deploy.bundle.build_bundle`), every PU bound as the mapping's SoC
   profile says (or substituted with ``--bind``);
2. connect, check Python/numpy/onnxruntime on the host;
3. upload the agent and the executor core into ``<remote_dir>/bundle-<id>/``, start the agent from there, check
   the board's facts (its ``hello``: allowed CPUs, runtimes, ONNX Runtime providers) against every PU of the
   plan (:func:`parapipe.execution.facts.check_board`) before any model is uploaded, and let it remove stale
   bundles (left by a dropped connection: their lock is free) under ``<remote_dir>``;
4. upload the rest: a file whose SHA-256 already matches on the host is skipped (an interrupted upload
   resumes), a file the manifest does not list (an interrupted upload's temporary) is removed;
5. run the plan through the agent's ``run_pipeline`` op, which verifies every file against the manifest and
   streams progress events;
6. fetch ``out/report.json`` and ``out/trace.json`` into the local output folder;
7. remove the bundle (or mark it ``.keep`` with ``keep=True``), whatever happened, while the connection lives.

A dropped connection or a failure on the host is one :class:`~parapipe.errors.HostError` or
:class:`~parapipe.errors.ExecutionError` line. A dropped connection also ends the remote run (the agent's
next progress event finds its pipe closed), and the next deploy to that host removes the folder it left.
"""
from __future__ import annotations

import logging
import posixpath
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import paramiko

from parapipe.remote.agent_client import AgentClient, AgentRequestError
from parapipe.deploy.bundle import Bundle, build_bundle
from parapipe.remote.host import RemoteHost
from parapipe.remote.hostspec import HostSpec
from parapipe.remote.liveness import ConnectionLost
from parapipe.remote.remote_agent import host_cache_dir
from parapipe.deploy.upload import fetch, remote_abs, remote_files, remove_strays, upload_bundle
from parapipe.errors import ExecutionError, HostError, input_error
from parapipe.execution.facts import check_board, facts_from_probe, facts_probe
from parapipe.app.run import check_dispatch, frequency_warnings
from ppexec import bundle_run
from ppexec.report import RunReport, WorkloadReport

log = logging.getLogger(__name__)

__all__ = ["DeployOptions", "DeployReport", "deploy", "deploy_mapping", "deploy_workload", "deploy_bundle", "describe_event",
           "with_ssh_timeout", "DEFAULT_REMOTE_DIR", "default_remote_dir"]

#: Default folder of bundles on the host, relative to the remote home (when ``$PARAPIPE_HOST_CACHE_DIR`` is not set;
#: :func:`default_remote_dir`).
DEFAULT_REMOTE_DIR = ".cache/parapipe/deploy"


def default_remote_dir() -> str:
    """Default folder of bundles on the host: ``deploy/`` in :func:`~parapipe.remote.remote_agent.host_cache_dir`
    (:data:`DEFAULT_REMOTE_DIR` unless ``$PARAPIPE_HOST_CACHE_DIR`` names another folder)."""
    return posixpath.join(host_cache_dir(), "deploy")

#: Bundle files the agent needs to start (uploaded before the clean-up of stale bundles).
AGENT_FILES_PREFIXES = ("agent.py", "ppexec/")


@dataclass(frozen=True)
class DeployOptions:
    """Options of :func:`deploy`.

    Attributes
    ----------
    frames : int
        Measured frames on the host (>= 1).
    warmup : int
        Unmeasured frames first (>= 0).
    seed : int
        Seed of the random frames (drawn on the host).
    distinct_frames : int
        Distinct frames, fed cyclically; the unsplit model runs once on each for the output check.
    atol : float
        Largest absolute difference of a model output to the unsplit model's that counts as a match (1e-5, the
        bound ``parapipe run`` checks outputs against).
    rtol : float
        Largest difference of a tensor handed between tasks, relative to its largest magnitude, that counts
        as a match (1e-5, the same order as ``atol``; these activations reach 1e4 in the light zoo models).
    keep : bool
        Leave the bundle on the host (marked ``.keep`` so that later clean-ups leave it too).
    remote_dir : str
        Folder of bundles on the host (absolute, ``~/...`` or relative to the remote home; default
        :func:`default_remote_dir`).
    python : str
        Interpreter on the host.
    idle_frames : int
        Frames sent one at a time through the empty pipeline after the run, for the idle latency.
    dispatch : str
        How a replicated stage's frames reach its replicas on the host: ``"pull"`` (each replica takes the next
        frame when it is free) or ``"shares"`` (dealt by the plan's shares).
    progress_interval_s : float
        Least seconds between two progress events from the host.
    silence_timeout_s : float
        Longest wait for any message from the host during the run, s (sessions of large models take seconds
        to build; 120 s leaves room on slow boards).
    clean_wait_s : float
        How long the clean-up waits for each stale bundle's run to end, s.
    connect_timeout_s : float
        TCP, banner and authentication deadline, s.
    command_timeout_s : float
        Deadline of each short remote command (checks, hashing, removal), s.
    """

    frames: int = 200
    warmup: int = 5
    seed: int = 0
    distinct_frames: int = 8
    atol: float = 1e-5
    rtol: float = 1e-5
    keep: bool = False
    remote_dir: str = field(default_factory=default_remote_dir)
    python: str = "python3"
    idle_frames: int = 10
    dispatch: str = "pull"
    progress_interval_s: float = 0.5
    silence_timeout_s: float = 120.0
    clean_wait_s: float = 10.0
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 120.0


@dataclass(frozen=True)
class DeployReport:
    """What a deploy did and measured.

    Attributes
    ----------
    host : str
        ``user@address:port``.
    bundle_id : str
    remote_folder : str
        Bundle folder on the host (removed unless ``kept``).
    report : ppexec.report.RunReport or ppexec.report.WorkloadReport
        The host's run report (measured next to predicted figures, outputs check, board facts); of a workload
        point, every model's report of the same run and the workload's figures.
    report_path, trace_path : Path
        Local copies of the report and the Chrome trace.
    uploaded, skipped : list of str
        Bundle files sent, and those already on the host with the same SHA-256.
    removed_stale : list of str
        Stale bundle folders the clean-up removed.
    kept : bool
        Whether the bundle was left on the host.
    """

    host: str
    bundle_id: str
    remote_folder: str
    report: RunReport  # a WorkloadReport for a workload bundle (deploy_workload)
    report_path: Path
    trace_path: Path
    uploaded: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    removed_stale: List[str] = field(default_factory=list)
    kept: bool = False

    def to_json(self) -> Dict[str, Any]:
        """The report's figures plus where things went (JSON-ready)."""
        doc = self.report.to_json()
        # where the report and the trace are here (absolute); the board's report names them in its bundle
        for key, path in (("report_file", self.report_path), ("trace_file", self.trace_path)):
            doc[key] = str(Path(path).resolve()) if Path(path).is_file() else None
        doc["deploy"] = {"host": self.host, "bundle_id": self.bundle_id, "remote_folder": self.remote_folder,
                         "report_path": str(self.report_path), "trace_path": str(self.trace_path),
                         "uploaded": self.uploaded, "skipped": self.skipped,
                         "removed_stale": self.removed_stale, "kept": self.kept}
        return doc


Progress = Optional[Callable[[Dict[str, Any]], None]]


def with_ssh_timeout(options: DeployOptions, timeout_s: Optional[float]) -> DeployOptions:
    """``options`` with the deadlines ``--ssh-timeout S`` sets: ``connect_timeout_s`` and ``command_timeout_s`` =
    ``timeout_s`` s (``options`` as they are for None: their defaults are 10 s and 120 s)."""
    if timeout_s is None:
        return options
    return replace(options, connect_timeout_s=float(timeout_s), command_timeout_s=float(timeout_s))


def _check_options(options: DeployOptions) -> None:
    for name, low in (("frames", 1), ("warmup", 0), ("distinct_frames", 1), ("idle_frames", 0)):
        value = getattr(options, name)
        if not isinstance(value, int) or value < low:
            raise input_error(f"--{name.replace('_', '-')}", None,
                              f"must be an integer >= {low}, got {value!r}", "give a valid count")
    check_dispatch(options.dispatch)
    if not options.remote_dir.strip():
        raise input_error("--remote-dir", None, "is empty", "give a folder on the host, e.g. ~/parapipe")


def _start_agent(host: RemoteHost, python: str, folder: str) -> AgentClient:
    return host.open_agent([python, "-u", "-B", posixpath.join(folder, "agent.py")])


def _lost(host: RemoteHost, phase: str, exc: BaseException) -> HostError:
    reason = getattr(exc, "reason", None) or host.lost_reason() or " ".join(str(exc).split())
    return ConnectionLost(str(host.spec), phase, reason, "the remote run stops with it, and the next "
                          "'parapipe deploy' to this host removes what it left")


def _finish(host: RemoteHost, folder: str, keep: bool, timeout_s: float) -> None:
    """Remove the bundle folder, or mark it kept; never raises (the connection may be gone)."""
    if not host.is_connected():
        log.info("%s: connection lost; %s stays until the next deploy removes it", host.spec, folder)
        return
    try:
        if keep:
            host.write_bytes(posixpath.join(folder, bundle_run.KEEP), b"kept by parapipe deploy --keep\n")
            log.info("kept %s on %s", folder, host.spec)
        else:
            host.remove_tree(folder, timeout_s=timeout_s)
            log.info("removed %s from %s", folder, host.spec)
    except (HostError, OSError, paramiko.SSHException) as exc:
        log.warning("%s: could not tidy %s (%s); the next deploy removes it", host.spec, folder, exc)


def deploy_mapping(mapping, spec: HostSpec, out_dir: Path, options: Optional[DeployOptions] = None,
                   on_event: Progress = None) -> DeployReport:
    """Deploy an already loaded mapping (see :func:`deploy`); tests use it to deploy edited plans.

    Parameters
    ----------
    mapping : parapipe.app.run.LoadedMapping
    spec, out_dir, options, on_event
        As for :func:`deploy`.

    Raises
    ------
    InputError, HostError, ExecutionError
        As :func:`deploy` (``--out`` not creatable, a host or connection that fails, a run that fails).
    """
    return _build_and_deploy(lambda folder: build_bundle(mapping, folder), spec, out_dir, options, on_event)


def deploy_workload(mappings: Dict[str, Any], rates: Dict[str, float], point: str, predicted: Dict[str, Any],
                    spec: HostSpec, out_dir: Path, options: Optional[DeployOptions] = None,
                    on_event: Progress = None) -> DeployReport:
    """Deploy a workload point (every model's part loaded: :func:`parapipe.app.workload_run.load_workload`) and
    run it on the host (:func:`ppexec.workload_run.run_workload_bundle`): the bundle of
    :func:`parapipe.deploy.bundle.build_workload_bundle`, then the steps of :func:`deploy_mapping`; ``frames``
    of ``options`` counts workload frames. Raises as :func:`deploy`; a failed task names model, stage, PU and
    task."""
    from parapipe.deploy.bundle import build_workload_bundle

    return _build_and_deploy(lambda folder: build_workload_bundle(mappings, rates, point, predicted, folder),
                             spec, out_dir, options, on_event)


def _build_and_deploy(build: Callable[[Path], Bundle], spec: HostSpec, out_dir: Path,
                      options: Optional[DeployOptions], on_event: Progress) -> DeployReport:
    """Create ``out_dir``, build the bundle with ``build(folder)`` in a temporary folder, connect to ``spec``
    and :func:`deploy_bundle` it. Raises as :func:`deploy`."""
    options = options or DeployOptions()
    _check_options(options)
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise input_error("--out", str(out_dir), f"cannot create the output folder ({exc.strerror or exc})",
                          "choose a writable folder") from None
    emit = on_event or (lambda event: None)
    with tempfile.TemporaryDirectory(prefix="parapipe-bundle-") as tmp:
        bundle = build(Path(tmp) / "bundle")
        emit({"event": "bundle", "bundle_id": bundle.bundle_id, "nbytes": bundle.nbytes,
              "files": len(bundle.manifest["files"]) + 1})
        with RemoteHost(spec, connect_timeout_s=options.connect_timeout_s) as host:
            return deploy_bundle(host, bundle, out_dir, options, emit)


def deploy_bundle(host: RemoteHost, bundle: Bundle, out_dir: Path, options: Optional[DeployOptions] = None,
                  on_event: Progress = None) -> DeployReport:
    """Upload a built bundle to a connected host, run it, fetch the results and tidy up (steps 2-7 above).

    Parameters
    ----------
    host : RemoteHost
        Connected; left open.
    bundle : Bundle
        From :func:`parapipe.deploy.bundle.build_bundle`.
    out_dir : Path
        Existing local folder for ``report.json`` and ``trace.json``.
    options : DeployOptions, optional
    on_event : callable(dict), optional
        As for :func:`deploy`.

    Returns
    -------
    DeployReport

    Raises
    ------
    HostError, ExecutionError
        As for :func:`deploy`.
    """
    options = options or DeployOptions()
    emit = on_event or (lambda event: None)
    timeout = options.command_timeout_s
    phase = "the Python check"
    try:
        host.check_python(options.python, timeout)
        phase = "the board check"
        rc, output = host.exec([options.python, *facts_probe()], timeout_s=timeout)
        facts = facts_from_probe(output, str(host.spec))
        check_board(bundle.bindings(), facts, str(host.spec))  # before anything is uploaded
        root = remote_abs(host, options.remote_dir)
        folder = posixpath.join(root, bundle.name)
    except HostError as exc:
        if not host.is_connected():
            raise _lost(host, phase, exc) from None
        raise
    emit({"event": "connected", "host": str(host.spec), "folder": folder})
    agent: Optional[AgentClient] = None
    try:
        phase = "the upload"
        present = remote_files(host, folder, options.python, timeout)
        remove_strays(host, bundle, folder, present)
        uploaded, skipped = upload_bundle(host, bundle, folder, present, only=AGENT_FILES_PREFIXES,
                                          on_event=emit)
        phase = "the clean-up of stale bundles"
        agent = _start_agent(host, options.python, folder)
        hello = agent.request("hello", timeout_s=timeout)
        if "run_pipeline" not in hello.get("ops", []):
            raise HostError(f"{host.spec}: the agent in {folder!r} has no run_pipeline op; remove that "
                            "folder and deploy again")
        cleaned = agent.request("clean", timeout_s=timeout + options.clean_wait_s * 8, root=root,
                                keep=[bundle.name], wait_s=options.clean_wait_s)
        if cleaned["removed"]:
            emit({"event": "clean", "removed": cleaned["removed"]})
        phase = "the upload"
        more_up, more_skipped = upload_bundle(host, bundle, folder, present, on_event=emit)
        uploaded += more_up
        skipped = [rel for rel in skipped + more_skipped if rel not in uploaded]
        emit({"event": "uploaded", "uploaded": len(uploaded), "skipped": len(skipped)})
        phase = "the run"
        reply = agent.request("run_pipeline", timeout_s=options.silence_timeout_s, on_event=emit,
                              bundle=folder, frames=options.frames, warmup=options.warmup, seed=options.seed,
                              distinct_frames=options.distinct_frames, atol=float(options.atol),
                              rtol=float(options.rtol), idle_frames=options.idle_frames,
                              progress_interval_s=float(options.progress_interval_s), dispatch=options.dispatch)
        report: Any
        try:
            doc = reply["report"]
            if isinstance(doc, dict) and doc.get("kind") == "workload":  # several models at once
                report = WorkloadReport.from_json(doc)
            else:
                report = RunReport.from_json(doc)
        except ValueError as exc:
            raise HostError(f"{host.spec}: the agent's report is unreadable ({exc}); deploy again with the "
                            "agent of this parapipe version") from None
        for name, one in (report.models.items() if isinstance(report, WorkloadReport) else [(None, report)]):
            for line in frequency_warnings(one):
                log.warning("%s: %s%s", host.spec, f"model {name}: " if name else "", line)
        phase = "the fetch of the results"
        report_path, trace_path = out_dir / "report.json", out_dir / "trace.json"
        fetch(host, posixpath.join(folder, report.report_file), report_path)
        fetch(host, posixpath.join(folder, report.trace_file), trace_path)
        agent.close(timeout_s=timeout)
        agent = None
        return DeployReport(str(host.spec), bundle.bundle_id, folder, report, report_path, trace_path,
                            uploaded, skipped, list(cleaned["removed"]), options.keep)
    except AgentRequestError:
        raise  # the host answered: a failing stage or a bad bundle, already one line naming the host
    except (HostError, ExecutionError) as exc:
        if not host.is_connected():
            raise _lost(host, phase, exc) from None
        raise
    finally:
        if agent is not None:  # an error or an interrupt: stop the run (its next event finds the pipe closed)
            agent._abort()
        _finish(host, folder, options.keep, timeout)


def deploy(model: str, mapping_path: str, point: str, spec: HostSpec, out_dir: Path,
           options: Optional[DeployOptions] = None, on_event: Progress = None,
           binds: Optional[Dict[str, Any]] = None, input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
           feeds: Optional[str] = None, frequencies_hz: Optional[Mapping[str, float]] = None) -> DeployReport:
    """Run one point of a mapping on an SSH host and fetch its report and trace.

    Parameters
    ----------
    model : str
        Registry name or .onnx path.
    mapping_path : str
        pareto.json computed with ``parapipe optimize`` for the host's SoC profile (a bundled board, a profile
        YAML, or ``host`` measured on a machine like it).
    point : str
        Point id or ``best-throughput`` | ``best-latency`` | ``best-energy``.
    spec : HostSpec
        The host and credentials (``HostSpec.parse("user@address:port", identity=..., known_hosts=...,
        trust_new_host=...)``).
    out_dir : Path
        Local folder for ``report.json`` and ``trace.json`` (created).
    options : DeployOptions, optional
    binds : dict of str to sequence of int, optional
        PUs to run on these CPUs of the host with the CPU provider instead of their profile binding.
    on_event : callable(dict), optional
        Receives progress: ``{"event": "bundle" | "connected" | "upload" | "clean" | "uploaded" |
        "progress", ...}`` (``progress`` events come from the host: ``phase``, ``frames_done``, ``frames``,
        ``throughput_per_s``).
    input_shapes : dict of str to list of int, optional
        ``--input-shape`` values: must equal those stored in the mapping (used when None).
    feeds : str, optional
        An .npz of input frames (``--feeds``), shipped in the bundle and run instead of generated frames.
    frequencies_hz : dict of str to float, optional
        PU -> operating point (Hz) the board sets for the run and restores after it, however the run ends
        (plan.json ``frequencies_hz``; ``ppexec.dvfs``); None or empty: the board's own settings. A frequency the
        board cannot set (not in its table, no permission) is refused before anything runs.

    Returns
    -------
    DeployReport

    Raises
    ------
    InputError
        Bad mapping (model sha256, unknown point, inconsistent document), bad options or ``binds``, missing
        identity file; a board that lacks what a PU needs (CPUs, runtime, provider), before any model is
        uploaded.
    HostError
        Unreachable host, unknown or changed host key, no Python/onnxruntime, lost connection (one line).
    ExecutionError
        The run failed on the host (a stage raised: the message names stage, PU and task).
    """
    from parapipe.app.run import load_mapping

    mapping = load_mapping(model, mapping_path, point, binds, input_shapes, feeds,  # feeds: shipped in the bundle
                           frequencies_hz)
    return deploy_mapping(mapping, spec, out_dir, options, on_event)


def describe_event(event: Dict[str, Any], workload: bool = False) -> Optional[str]:
    """One human line for a deploy event (see :func:`deploy`), or None for events not worth a line.
    ``workload``: the events of a workload run, whose frames and throughput count workload frames."""
    kind = event.get("event")
    if kind == "bundle":
        return f"bundle {event['bundle_id']}: {event['files']} files, {event['nbytes'] / 1e6:.1f} MB"
    if kind == "connected":
        return f"connected to {event['host']}; bundle folder {event['folder']}"
    if kind == "upload":
        return f"uploading {event['file']} ({event['nbytes'] / 1e6:.1f} MB)"
    if kind == "clean":
        return f"removed stale bundle(s) {', '.join(event['removed'])}"
    if kind == "uploaded":
        return f"upload done: {event['uploaded']} file(s) sent, {event['skipped']} already there"
    if kind == "progress":
        phase = event.get("phase")
        frames, rate = ("workload frames", "workload frames/s") if workload else ("frames", "inf/s")
        if phase == "run":
            return (f"run {event['frames_done']}/{event['frames']} {frames}, "
                    f"{event.get('throughput_per_s', 0.0):.1f} {rate}")
        if phase == "done":
            return f"run done: {event['frames']} {frames}, {event.get('throughput_per_s', 0.0):.1f} {rate}"
        if phase is None:
            return None
        return {"verify": "checking the bundle's SHA-256 on the host",
                "reference": "running the unsplit model for the output check",
                "start": "pipeline started",
                "idle": "measuring the idle latency (one frame at a time)"}.get(phase)
    return None
