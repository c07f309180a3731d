"""Deploy bundles on this machine: manifest and id, the bundle's own agent running it (a local subprocess:
real agent, real executor core, real ORT), tampered files, stale-bundle clean-up, the executor core as
data."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from deploy_mappings import replicated_doc, two_stage_doc, write_doc
from parapipe._paths import data_dir
from parapipe.remote.agent_client import AgentClient, AgentRequestError
from parapipe.deploy.bundle import build_bundle
from parapipe.errors import InputError
import ppexec.metrics
from ppexec.plan import PUBinding
from parapipe.app.run import load_mapping
from parapipe.execution.bindings import bindings_for
from parapipe.mapping import read_pareto

pytestmark = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="host mappings use CPUs 0, 1")


@pytest.fixture(scope="module")
def mapping_file(tmp_path_factory) -> Path:
    return write_doc(two_stage_doc("squeezenet"), tmp_path_factory.mktemp("mapping") / "pareto.json")


@pytest.fixture(scope="module")
def bundle(mapping_file, tmp_path_factory):
    return build_bundle(load_mapping("squeezenet", str(mapping_file), "p0"),
                        tmp_path_factory.mktemp("bundles") / "b")


@pytest.fixture(scope="module")
def agent(bundle):
    client = AgentClient.local(agent=bundle.folder / "agent.py")  # the bundle's copy, next to its ppexec/
    yield client
    assert client.close() == 0


def test_the_executor_parapipe_imports_is_the_one_bundles_ship():
    # one implementation: the ppexec package parapipe imports is the folder bundles copy
    assert Path(ppexec.__file__).parent.resolve() == (data_dir("device_agents") / "ppexec").resolve()


def test_manifest_lists_every_file_with_its_sha256_and_the_id_is_content_addressed(bundle, mapping_file,
                                                                                   tmp_path):
    files = {p.relative_to(bundle.folder).as_posix() for p in bundle.folder.rglob("*") if p.is_file()}
    assert files - set(bundle.manifest["files"]) == {"manifest.json"}
    for rel, entry in bundle.manifest["files"].items():
        data = (bundle.folder / rel).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "nbytes": len(data)}
    agents = data_dir("device_agents")
    assert (bundle.folder / "agent.py").read_bytes() == (agents / "agent.py").read_bytes()
    shipped = {p.name for p in (bundle.folder / "ppexec").iterdir()}
    assert shipped == {p.name for p in (agents / "ppexec").glob("*.py")}
    assert {"plan.json", "reference.onnx", "models/s0.cpu0.t0.onnx", "models/s1.cpu1.t0.onnx"} <= files
    assert json.loads((bundle.folder / "manifest.json").read_text())["bundle_id"] == bundle.bundle_id
    # same mapping -> same id (an interrupted upload resumes into the same folder); another point -> another
    doc = two_stage_doc("squeezenet", (0.5, 0.3))
    other = write_doc(doc, tmp_path / "pareto.json")
    again = build_bundle(load_mapping("squeezenet", str(other), "p0"), tmp_path / "again")
    assert again.bundle_id == bundle.bundle_id
    different = build_bundle(load_mapping("squeezenet", str(other), "p1"), tmp_path / "different")
    assert different.bundle_id != bundle.bundle_id and different.name.startswith("bundle-")
    with pytest.raises(InputError, match="not empty"):
        build_bundle(load_mapping("squeezenet", str(other), "p1"), tmp_path / "different")


def test_the_bundles_agent_runs_it_with_progress_events_and_matching_outputs(bundle, agent):
    events = []
    reply = agent.request("run_pipeline", timeout_s=60, on_event=events.append, bundle=str(bundle.folder),
                          frames=12, warmup=2, distinct_frames=3, progress_interval_s=0.0)
    report = reply["report"]
    assert report["outputs_match"] is True and report["max_abs_diff"] <= 1e-5
    # the tensors handed from stage 0 to stage 1 are checked too (the light models' outputs do not depend on
    # the input)
    assert report["checked_tensors"] >= 1 and report["max_scaled_diff"] <= 1e-5
    assert report["frames"] == 12 and report["stages"] == 2 and report["point"] == "p0"
    assert set(report["pu_utilisation"]) == {"cpu0", "cpu1"}
    phases = [e["phase"] for e in events]
    assert phases[:3] == ["verify", "reference", "start"] and phases[-1] == "done"
    assert [e["frames_done"] for e in events if e["phase"] == "run"] == list(range(1, 13))
    assert all(e["id"] == reply["id"] and e["event"] == "progress" for e in events)
    on_disk = json.loads((bundle.folder / "out" / "report.json").read_text())
    assert on_disk == report
    trace = json.loads((bundle.folder / "out" / "trace.json").read_text())
    assert len(ppexec.metrics.trace_events_from_chrome(trace)) == 24
    assert not list(bundle.folder.rglob("__pycache__"))  # the agent leaves no bytecode in the bundle
    # a second request on the same agent works (the lock was released)
    assert agent.request("run_pipeline", timeout_s=60, bundle=str(bundle.folder), frames=2,
                         warmup=0)["report"]["outputs_match"] is True


def test_the_agent_takes_the_replica_dispatch_and_refuses_an_unknown_one(bundle, agent, tmp_path):
    doc = write_doc(replicated_doc("squeezenet"), tmp_path / "replicated.json")
    replicated = build_bundle(load_mapping("squeezenet", str(doc), "r1"), tmp_path / "r")
    with AgentClient.local(agent=replicated.folder / "agent.py") as own:
        report = own.request("run_pipeline", timeout_s=60, bundle=str(replicated.folder), frames=4, warmup=0,
                             idle_frames=0, dispatch="shares")["report"]
    assert report["dispatch"] == "shares" and report["outputs_match"] is True
    # a plan without replicated stages records no policy
    assert agent.request("run_pipeline", timeout_s=60, bundle=str(bundle.folder), frames=2, warmup=0,
                         dispatch="shares")["report"]["dispatch"] is None
    with pytest.raises(AgentRequestError) as info:
        agent.request("run_pipeline", timeout_s=60, bundle=str(bundle.folder), frames=3, dispatch="random")
    assert info.value.error_type == "BadRequest"
    assert "dispatch" in str(info.value) and "'random'" in str(info.value) and "\n" not in str(info.value)
    # the refused request left the agent serving, and the bundle unlocked
    assert agent.request("run_pipeline", timeout_s=60, bundle=str(bundle.folder), frames=2,
                         warmup=0)["report"]["outputs_match"] is True


def test_a_tampered_file_is_refused_naming_it(mapping_file, tmp_path):
    b = build_bundle(load_mapping("squeezenet", str(mapping_file), "p0"), tmp_path / "b")
    model = b.folder / "models" / "s1.cpu1.t0.onnx"
    data = bytearray(model.read_bytes())
    data[-1] ^= 1
    model.write_bytes(bytes(data))
    with AgentClient.local(agent=b.folder / "agent.py") as agent:
        with pytest.raises(AgentRequestError) as info:
            agent.request("run_pipeline", timeout_s=60, bundle=str(b.folder), frames=2)
        assert agent.request("hello")["ok"]  # the agent keeps serving
    assert info.value.error_type == "BadRequest"
    expected = "manifest.json: models/s1.cpu1.t0.onnx: the file on the host differs from the bundle"
    assert expected in str(info.value)


def test_clean_removes_stale_bundles_but_not_live_kept_or_foreign_folders(agent, tmp_path):
    root = tmp_path / "root with space"
    for name in ("bundle-stale", "bundle-live", "bundle-kept", "bundle-mine", "not-a-bundle"):
        (root / name / "models").mkdir(parents=True)
        (root / name / "models" / "x.onnx").write_bytes(b"x")
    (root / "bundle-kept" / ".keep").write_text("")
    (root / "bundle-stale" / ".lock").write_text("12345")  # its run died: the lock file stays, unlocked
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               "f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('locked', flush=True); time.sleep(60)",
                               str(root / "bundle-live" / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        reply = agent.request("clean", timeout_s=30, root=str(root), keep=["bundle-mine"], wait_s=0.3)
        waited = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    assert reply["removed"] == ["bundle-stale"] and reply["busy"] == ["bundle-live"]
    assert reply["kept"] == ["bundle-kept", "bundle-mine"]
    assert sorted(os.listdir(root)) == ["bundle-kept", "bundle-live", "bundle-mine", "not-a-bundle"]
    assert waited >= 0.3
    # once its run has ended, the live one is stale too
    again = agent.request("clean", timeout_s=30, root=str(root), keep=[], wait_s=5.0)
    assert again["removed"] == ["bundle-live", "bundle-mine"]
    assert agent.request("clean", root=str(tmp_path / "absent"), keep=[]) == {
        "id": again["id"] + 1, "ok": True, "removed": [], "busy": [], "kept": []}


def test_the_agent_alone_cannot_run_a_bundle_and_says_why(bundle, tmp_path):
    # agent.py without ppexec/ next to it: an error reply, the agent keeps serving
    lone = tmp_path / "agent.py"
    lone.write_bytes((data_dir("device_agents") / "agent.py").read_bytes())
    with AgentClient.local(agent=lone) as plain:
        with pytest.raises(AgentRequestError, match="ppexec/ is not next to"):
            plain.request("run_pipeline", bundle=str(bundle.folder))
        assert plain.request("bye")["ok"]  # it keeps serving


def test_bindings_come_from_the_profile_in_the_document_and_bind_substitutes(mapping_file):
    doc = read_pareto(str(mapping_file))
    point = doc.points[0]
    bindings, substituted = bindings_for(doc, point)
    assert bindings == {"cpu0": PUBinding(cpus=(0,)), "cpu1": PUBinding(cpus=(1,))} and substituted == {}
    bindings, substituted = bindings_for(doc, point, {"cpu1": (0, 1)})
    assert bindings["cpu1"] == PUBinding(cpus=(0, 1), threads=2) and substituted == {"cpu1": (0, 1)}
    with pytest.raises(InputError, match=r"--bind: gpu: no PU 'gpu' in SoC 'host'"):
        bindings_for(doc, point, {"gpu": (0,)})


def test_a_stage_computing_something_else_is_caught_though_the_model_output_is_not(mapping_file, tmp_path):
    # stage 0 adds 1 to the tensor it hands on. The light zoo models have constant weights, so the model's own
    # output (a softmax over equal logits) stays the same: only the handed-over tensor shows the error.
    mapping = load_mapping("squeezenet", str(mapping_file), "p0")
    (task,) = mapping.plan.stages[0]
    graph = task.model.graph
    out = task.outputs[0]
    for node in graph.node:
        node.output[:] = [o + "_raw" if o == out else o for o in node.output]
    graph.initializer.append(numpy_helper.from_array(np.ones((), np.float32), "one"))
    graph.node.append(helper.make_node("Add", [out + "_raw", "one"], [out], name="off_by_one"))
    b = build_bundle(mapping, tmp_path / "b")
    with AgentClient.local(agent=b.folder / "agent.py") as agent:
        reply = agent.request("run_pipeline", timeout_s=60, bundle=str(b.folder), frames=3, warmup=0)
    report = reply["report"]
    assert report["max_abs_diff"] <= 1e-5  # the model output alone would say "match"
    assert report["max_scaled_diff"] > report["rtol"] and report["outputs_match"] is False
