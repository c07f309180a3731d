"""``parapipe deploy`` against a REAL OpenSSH server on loopback (tests/sshd.py): real bundles of zoo models,
real uploads over SFTP, the real agent running the pipelined executor, real dropped connections."""
from __future__ import annotations

import json
import os
import sys
import socket
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import sshd
from ssh_faults import StallingServer
from deploy_mappings import replicated_doc, two_stage_doc, write_doc
from parapipe.cli import main
from parapipe.deploy.bundle import build_bundle
from parapipe.app.deploy import DeployOptions, deploy_bundle, deploy_mapping, remote_files, upload_bundle
from parapipe.remote.host import RemoteHost
from parapipe.remote.hostspec import HostSpec
from parapipe.errors import ExecutionError, HostError, InputError
from parapipe.app.run import load_mapping

NEEDS_TWO_CPUS = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="mappings use CPUs 0, 1")
pytestmark = [pytest.mark.ssh, pytest.mark.slow, NEEDS_TWO_CPUS]
sshd_server = sshd.sshd_server  # the session-scoped loopback sshd fixture
sshd_server_without_sftp = sshd.sshd_server_without_sftp

FRAMES = "6"  # a few frames: enough to fill and drain a two-stage pipeline


def spec_for(server, **overrides) -> HostSpec:
    options = dict(identity=server.client_key, known_hosts=server.known_hosts)
    options.update(overrides)
    return HostSpec.parse(server.host, **options)


def agents_running(root: str) -> list:
    """Command lines of live processes running an agent from under ``root`` (the host is this machine)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if root in cmdline and "agent.py" in cmdline:
                found.append(cmdline)
    return found


def wait_for_no_agents(root: str, timeout_s: float = 20.0) -> list:
    deadline = time.monotonic() + timeout_s
    while agents_running(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    return agents_running(root)


@pytest.fixture(scope="module")
def inception_mapping(tmp_path_factory) -> Path:
    return write_doc(two_stage_doc("inception_v1"), tmp_path_factory.mktemp("mapping") / "pareto.json")


@pytest.fixture(scope="module")
def squeezenet_mapping(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mapping") / "pareto.json"
    return write_doc(two_stage_doc("squeezenet", (0.4, 0.6)), path)


def test_deploy_two_stage_inception_v1_outputs_match_and_leaves_nothing(sshd_server, inception_mapping,
                                                                        tmp_path, capsys):
    remote = tmp_path / "remote root" / "it's got spaces"  # quoting: spaces and a quote in the remote path
    out = tmp_path / "local out"
    rc = main(["deploy", "--python", sys.executable, "--db", "", "inception_v1", "--mapping", str(inception_mapping), "--point", "p0",
               "--host", sshd_server.host, "--identity", str(sshd_server.client_key),
               "--known-hosts", str(sshd_server.known_hosts), "--frames", FRAMES, "--remote-dir", str(remote),
               "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["outputs_match"] is True and doc["max_abs_diff"] <= 1e-5
    assert doc["dispatch"] is None  # no replicated stage
    assert doc["frames"] == int(FRAMES) and doc["stages"] == 2 and doc["point"] == "p0"
    assert doc["throughput_per_s"] > 0 and doc["latency_p50_s"] > 0
    assert doc["predicted"]["throughput_per_s"] == pytest.approx(50.0) and doc["idle_latency_s"] > 0
    assert set(doc["pu_busy_s"]) == {"cpu0", "cpu1"}
    assert "run " in captured.err and "upload done" in captured.err  # progress streamed to stderr
    # the report and the trace came back; the trace has one lane per PU and every measured task
    # --json names the report and the trace where they are here, absolute
    assert doc["report_file"] == str((out / "report.json").resolve())
    assert doc["trace_file"] == str((out / "trace.json").resolve())
    report = json.loads((out / "report.json").read_text())
    assert report["outputs_match"] is True and report["bundle_id"] == doc["deploy"]["bundle_id"]
    trace = json.loads((out / "trace.json").read_text())
    lanes = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and "tid" in e}
    assert lanes == {"cpu0", "cpu1"}
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == 2 * int(FRAMES)
    # the bundle folder is gone from the host, and no agent runs on
    assert os.listdir(remote) == []
    assert wait_for_no_agents(str(remote)) == []


def test_deploy_passes_the_replica_dispatch_to_the_host(sshd_server, tmp_path, capsys):
    mapping = write_doc(replicated_doc("squeezenet"), tmp_path / "pareto.json")
    rc = main(["deploy", "--python", sys.executable, "--db", "", "squeezenet", "--mapping", str(mapping), "--point",
               "r0", "--host", sshd_server.host, "--identity", str(sshd_server.client_key), "--known-hosts",
               str(sshd_server.known_hosts), "--frames", "8", "--remote-dir", str(tmp_path / "remote"),
               "--out", str(tmp_path / "out"), "--replica-dispatch", "shares", "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["dispatch"] == "shares" and doc["outputs_match"] is True  # the host's executor dealt by shares


def test_unknown_host_key_is_refused_before_anything_is_sent(sshd_server, inception_mapping, tmp_path,
                                                             capsys):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    remote = tmp_path / "remote"
    rc = main(["deploy", "--python", sys.executable, "--db", "", "inception_v1", "--mapping", str(inception_mapping), "--host", sshd_server.host,
               "--identity", str(sshd_server.client_key), "--known-hosts", str(empty), "--frames", FRAMES,
               "--remote-dir", str(remote), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [line for line in err.splitlines() if line.startswith("parapipe: error:")]
    assert len(lines) == 1 and "host key" in lines[0] and "--trust-new-host" in lines[0]
    assert "Traceback" not in err
    assert not remote.exists() and empty.read_text() == ""


def test_a_mapping_of_the_old_schema_is_an_input_error(sshd_server, tmp_path, capsys):
    doc = two_stage_doc("squeezenet")
    doc.update(schema_version=1, soc="host")  # what parapipe 0.1 wrote: no bindings inside
    path = write_doc(doc, tmp_path / "pareto.json")
    rc = main(["deploy", "--python", sys.executable, "--db", "", "squeezenet", "--mapping", str(path),
               "--host", sshd_server.host, "--identity", str(sshd_server.client_key),
               "--known-hosts", str(sshd_server.known_hosts)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{path}: schema_version: expected 2, got 1" in err and "re-run 'parapipe optimize'" in err


@pytest.mark.parametrize("server_fixture, files_over", [("sshd_server", "SFTP"),
                                                        ("sshd_server_without_sftp", "exec channel")])
def test_interrupted_upload_resumes_and_keep_leaves_the_bundle(server_fixture, files_over, squeezenet_mapping,
                                                               tmp_path, request):
    server = request.getfixturevalue(server_fixture)  # without SFTP (Dropbear images): exec-channel uploads
    mapping = load_mapping("squeezenet", str(squeezenet_mapping), "p0")
    bundle = build_bundle(mapping, tmp_path / "bundle")
    remote = str(tmp_path / "remote dir")
    folder = os.path.join(remote, bundle.name)
    with RemoteHost(spec_for(server)) as host:
        assert host.file_transport == files_over
        # an upload that stopped half-way: the code and the first stage model arrived, plus a part file
        half = upload_bundle(host, bundle, folder, {}, only=("agent.py", "ppexec/", "models/s0"))[0]
        assert "models/s0.cpu0.t0.onnx" in half and "models/s1.cpu1.t0.onnx" not in half
        Path(folder, "models", ".s1.cpu1.t0.onnx.part123").write_bytes(b"truncated")
        (tmp_path / "out").mkdir()
        options = DeployOptions(python=sys.executable, frames=4, remote_dir=remote, keep=True)
        report = deploy_bundle(host, bundle, tmp_path / "out", options)
        assert report.report.outputs_match is True
        assert set(half) <= set(report.skipped)
        assert "models/s1.cpu1.t0.onnx" in report.uploaded and "models/s0.cpu0.t0.onnx" not in report.uploaded
        # kept: every bundle file is there (the part file is gone), marked .keep, and matches its digest
        assert report.kept and os.path.exists(os.path.join(folder, ".keep"))
        present = remote_files(host, folder, python=sys.executable)
        assert present == {rel: e["sha256"] for rel, e in bundle.manifest["files"].items()} | {
            "manifest.json": present["manifest.json"]}
        # a second deploy of the same bundle sends nothing but finds everything in place
        again = deploy_bundle(host, bundle, tmp_path / "out", DeployOptions(python=sys.executable, frames=4, remote_dir=remote))
        assert again.uploaded == [] and again.report.outputs_match is True
    assert os.listdir(remote) == []


def test_connection_killed_mid_run_is_one_line_and_the_next_deploy_leaves_the_host_clean(
        sshd_server, squeezenet_mapping, tmp_path):
    remote = str(tmp_path / "remote")
    out = tmp_path / "out"
    out.mkdir()
    first = build_bundle(load_mapping("squeezenet", str(squeezenet_mapping), "p0"), tmp_path / "b0")
    with RemoteHost(spec_for(sshd_server)) as host:
        def kill_on_first_frames(event):
            if event.get("event") == "progress" and event.get("phase") == "run":
                host.connection.transport().sock.shutdown(socket.SHUT_RDWR)  # the network goes away mid-run

        with pytest.raises(HostError) as info:
            deploy_bundle(host, first, out, DeployOptions(python=sys.executable, frames=100_000, remote_dir=remote),
                          on_event=kill_on_first_frames)
    msg = str(info.value)
    assert "\n" not in msg and "next 'parapipe deploy'" in msg
    assert msg.startswith(f"connection to {spec_for(sshd_server)} lost during the run (")
    assert os.listdir(remote) == [first.name]  # left behind, until the next deploy
    assert wait_for_no_agents(remote) == []  # the orphaned run ended by itself: its pipe was closed
    # the next deploy (another mapping) removes the stale bundle and its own
    second = build_bundle(load_mapping("squeezenet", str(squeezenet_mapping), "p1"), tmp_path / "b1")
    assert second.bundle_id != first.bundle_id
    with RemoteHost(spec_for(sshd_server)) as host:
        report = deploy_bundle(host, second, out, DeployOptions(python=sys.executable, frames=4, remote_dir=remote))
    assert report.removed_stale == [first.name] and report.report.outputs_match is True
    assert os.listdir(remote) == []


def test_connection_lost_during_an_exec_channel_upload_names_the_upload(sshd_server_without_sftp,
                                                                        squeezenet_mapping, tmp_path):
    bundle = build_bundle(load_mapping("squeezenet", str(squeezenet_mapping), "p0"), tmp_path / "bundle")
    (tmp_path / "out").mkdir()
    with RemoteHost(spec_for(sshd_server_without_sftp)) as host:
        def drop_at_the_models(event):
            if event.get("event") == "upload" and event["file"].startswith("models/"):
                host.connection.transport().sock.shutdown(socket.SHUT_RDWR)

        with pytest.raises(HostError) as info:
            deploy_bundle(host, bundle, tmp_path / "out",
                          DeployOptions(python=sys.executable, frames=2, remote_dir=str(tmp_path / "remote")),
                          on_event=drop_at_the_models)
    msg = str(info.value)
    assert msg.startswith(f"connection to {spec_for(sshd_server_without_sftp)} lost during the upload (")
    assert "\n" not in msg


def _make_fail_at_run_time(model: onnx.ModelProto) -> None:
    """Route the first graph input through Reshape to [997, -1] and back: the element count of the real
    activations is not a multiple of 997, so every run fails. The input's dimensions are made symbolic, so
    ONNX Runtime cannot see this when it builds the session: the stage fails while running, not loading."""
    graph = model.graph
    name = graph.input[0].name
    for i, dim in enumerate(graph.input[0].type.tensor_type.shape.dim):
        dim.dim_param = f"d{i}"
    del graph.value_info[:]
    for node in graph.node:
        for i, x in enumerate(node.input):
            if x == name:
                node.input[i] = name + "_checked"
    graph.initializer.extend([numpy_helper.from_array(np.array([997, -1], np.int64), "bad_shape")])
    graph.node.insert(0, helper.make_node("Shape", [name], [name + "_shape"], name="fail_shape"))
    graph.node.insert(1, helper.make_node("Reshape", [name, "bad_shape"], [name + "_997"],
                                          name="fail_reshape"))
    graph.node.insert(2, helper.make_node("Reshape", [name + "_997", name + "_shape"], [name + "_checked"],
                                          name="fail_back"))


def test_a_failing_stage_ends_the_run_with_a_clear_error_and_nothing_left(sshd_server, squeezenet_mapping,
                                                                          tmp_path):
    mapping = load_mapping("squeezenet", str(squeezenet_mapping), "p0")
    (task,) = mapping.plan.stages[1]
    _make_fail_at_run_time(task.model)
    remote = str(tmp_path / "remote")
    with pytest.raises(ExecutionError) as info:
        deploy_mapping(mapping, spec_for(sshd_server), tmp_path / "out",
                       DeployOptions(python=sys.executable, frames=4, warmup=0, remote_dir=remote))
    msg = str(info.value)
    assert "\n" not in msg
    assert "RunError" in msg and "stage 1, PU 'cpu1', task 's1.cpu1.t0' failed while running frame 0" in msg
    assert "Reshape" in msg or "reshape" in msg
    assert os.listdir(remote) == []
    assert wait_for_no_agents(remote) == []


def test_a_mapping_for_cpus_the_host_lacks_is_refused_before_the_models_are_sent(sshd_server, tmp_path):
    doc = two_stage_doc("squeezenet")
    doc["soc"]["pus"]["cpu4095"] = {"kind": "cpu", "execution": {"cpus": [4095], "threads": 1}}
    for stage, pu in zip(doc["points"][0]["mapping"]["stages"], ("cpu0", "cpu4095")):
        stage["pus"], stage["assignment"] = [pu], {b: pu for b in stage["blocks"]}
    path = write_doc(doc, tmp_path / "pareto.json")
    remote = tmp_path / "remote"
    with pytest.raises(InputError) as info:
        deploy_mapping(load_mapping("squeezenet", str(path), "p0"), spec_for(sshd_server), tmp_path / "out",
                       DeployOptions(python=sys.executable, frames=2, remote_dir=str(remote)))
    msg = str(info.value)
    assert "PU cpu4095: is pinned to CPUs [4095]" in msg and "--bind cpu4095=CPUS" in msg and "\n" not in msg
    assert not remote.exists()  # checked before anything was uploaded


def test_deploy_to_a_host_that_stalls_on_exec_fails_at_the_ssh_timeout(sshd_server, squeezenet_mapping, tmp_path,
                                                                        capsys):
    server = StallingServer(sshd_server.client_key.with_name(sshd_server.client_key.name + ".pub"), "exec")
    try:
        rc = main(["deploy", "--python", sys.executable, "--db", "", "squeezenet", "--mapping",
                   str(squeezenet_mapping), "--host", server.host(sshd_server.user), "--identity",
                   str(sshd_server.client_key), "--known-hosts", str(server.known_hosts), "--ssh-timeout", "2",
                   "--out", str(tmp_path / "out")])
    finally:
        server.close()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("parapipe: error:")]
    assert rc == 2 and len(lines) == 1 and server.stalled.is_set(), err
    assert f"no answer to the request to run {sys.executable!r} within 2 s during the Python check" in lines[0]


def test_a_workload_point_deploys_each_model_checked_and_leaves_nothing(sshd_server, squeezenet_mapping, tmp_path):
    """Two models' points (squeezenet cut at 40 % and 60 %, rates 1 and 2) in one bundle, run at once by the
    board's WorkloadExecutor: each model's outputs checked, the workload's figures reported."""
    from ppexec.report import WorkloadReport

    from parapipe.app.deploy import deploy_workload
    from parapipe.app.workload_run import WorkloadMember, load_workload, workload_predicted
    from parapipe.graph.zoo import load_model
    from parapipe.mapping import read_pareto

    doc = read_pareto(str(squeezenet_mapping))
    lm = load_model("squeezenet")
    members = [WorkloadMember("a", lm, doc, doc.points[0], 1.0), WorkloadMember("b", lm, doc, doc.points[1], 2.0)]
    remote = str(tmp_path / "remote")
    rep = deploy_workload(load_workload(members), {"a": 1.0, "b": 2.0}, "w0", workload_predicted(members),
                          spec_for(sshd_server), tmp_path / "out",
                          DeployOptions(python=sys.executable, frames=3, warmup=1, idle_frames=1, remote_dir=remote))
    assert isinstance(rep.report, WorkloadReport) and rep.report.outputs_match
    assert {m: r.frames for m, r in rep.report.models.items()} == {"a": 3, "b": 6}
    assert rep.report.throughput_per_s > 0 and rep.report.bundle_id == rep.bundle_id
    trace = json.loads(rep.trace_path.read_text())
    assert {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"} == {"model a",
                                                                                                    "model b"}
    assert os.listdir(remote) == []
    assert wait_for_no_agents(remote) == []
