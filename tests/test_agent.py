"""The on-device agent (device_agents/agent.py) over a local subprocess, and its client (AgentClient)."""
from __future__ import annotations

import ast
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

from parapipe.remote.agent_client import AgentClient, AgentRequestError, agent_path
from parapipe.errors import ExecutionError, HostError

AGENT = agent_path()


def tiny_conv_model(channels_out: int = 8, size: int = 32) -> onnx.ModelProto:
    """Conv (3 -> channels_out, 3x3, pad 1) with a dynamic batch dimension ``N``; named nodes."""
    weight = np.random.RandomState(0).randn(channels_out, 3, 3, 3).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], name="conv0")], "tiny_conv",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels_out, size, size])],
        [numpy_helper.from_array(weight, "W")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def model_b64(model: onnx.ModelProto) -> str:
    return base64.b64encode(model.SerializeToString()).decode("ascii")


@pytest.fixture(scope="module")
def agent():
    client = AgentClient.local()
    yield client
    assert client.close() == 0


@pytest.fixture(scope="module")
def conv_b64() -> str:
    return model_b64(tiny_conv_model())


def test_hello_describes_the_host(agent):
    reply = agent.request("hello")
    assert reply["ok"] is True and isinstance(reply["id"], int)
    assert reply["protocol_version"] == 1
    assert reply["onnxruntime_version"] == ort.__version__
    assert "CPUExecutionProvider" in reply["providers"]
    assert reply["python_version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}")
    clustered = sorted(c for cluster in reply["cpu_clusters"] for c in cluster["cpus"])
    assert set(reply["cpus_allowed"]) <= set(clustered)
    assert reply["cpu_count"] == os.cpu_count()
    assert reply["memory_bytes"] > 2**28
    assert reply["machine"] and reply["platform"]
    assert {"hello", "profile", "transfer", "bye"} <= set(reply["ops"])


def test_profile_tiny_conv_on_one_cpu(agent, conv_b64):
    reply = agent.request("profile", model_b64=conv_b64, pu={"cpus": [0], "threads": 1}, warmup=2, repeats=7)
    assert reply["provider"] == "CPUExecutionProvider"
    assert reply["cpus"] == [0]
    assert reply["threads"] == 1
    assert reply["repeats"] == 7
    assert 0 < reply["min_s"] <= reply["median_s"] <= reply["p90_s"]
    assert reply["spread"] == pytest.approx(reply["p90_s"] / reply["median_s"] - 1)
    assert reply["inputs"] == {"x": {"shape": [1, 3, 32, 32], "dtype": "float32"}}  # dynamic N -> 1
    assert reply["optimization"] == "disabled"


def test_profile_from_a_path_with_shape_override_and_full_optimisation(agent, tmp_path):
    path = tmp_path / "model dir" / "conv.onnx"
    path.parent.mkdir()
    onnx.save(tiny_conv_model(), str(path))
    cpus = sorted(os.sched_getaffinity(0))
    reply = agent.request("profile", model_path=str(path), pu={"cpus": cpus}, optimization="all", repeats=3,
                          inputs={"x": {"shape": [2, 3, 32, 32]}})
    assert reply["inputs"]["x"]["shape"] == [2, 3, 32, 32]
    assert reply["threads"] == len(cpus)
    assert reply["optimization"] == "all"


def test_missing_provider_is_an_error_reply_naming_it(agent, conv_b64):
    with pytest.raises(AgentRequestError) as info:
        agent.request("profile", model_b64=conv_b64, pu={"provider": "NoSuchExecutionProvider"})
    assert info.value.error_type == "ProviderUnavailable"
    assert "NoSuchExecutionProvider" in str(info.value) and "CPUExecutionProvider" in str(info.value)
    assert isinstance(info.value, ExecutionError)
    assert agent.request("hello")["ok"]  # still serving


def test_accelerator_profiling_never_falls_back_to_cpu(agent, conv_b64):
    others = [p for p in ort.get_available_providers() if p != "CPUExecutionProvider"]
    if not others:
        pytest.skip("this onnxruntime build has no provider besides the CPU one")
    # No such provider runs Conv here; with session.disable_cpu_ep_fallback=1 the session must be refused
    # rather than silently timed on the CPU.
    with pytest.raises(AgentRequestError) as info:
        agent.request("profile", model_b64=conv_b64, pu={"provider": others[0]})
    assert info.value.error_type == "ModelError"
    assert "fallback" in str(info.value).lower()


def test_bad_requests_get_precise_errors(agent, conv_b64):
    cases = [
        (dict(model_b64=conv_b64, pu={"cpus": [10_000]}), "PinError", "10000"),
        (dict(model_b64=conv_b64, pu={"cpus": [0]}, repeats="ten"), "BadRequest", "repeats"),
        (dict(model_b64=conv_b64, pu={"cpus": [0]}, optimization="some"), "BadRequest", "optimization"),
        (dict(model_b64="not base64!", pu={"cpus": [0]}), "BadRequest", "base64"),
        (dict(model_path="/nonexistent/model.onnx", pu={"cpus": [0]}), "ModelError", "/nonexistent"),
        (dict(pu={"cpus": [0]}), "BadRequest", "model_b64"),
        (dict(model_b64=model_b64(onnx.ModelProto()) + "AAAA", pu={"cpus": [0]}), "ModelError", "session"),
        (dict(model_b64=conv_b64, pu={"cpus": [0]}, inputs={"nope": {}}), "BadRequest", "nope"),
    ]
    for body, error_type, word in cases:
        with pytest.raises(AgentRequestError) as info:
            agent.request("profile", **body)
        assert info.value.error_type == error_type, body
        assert word in str(info.value), (word, str(info.value))
        assert "\n" not in str(info.value)


def test_transfer_between_cpu_sets(agent):
    cpus = sorted(os.sched_getaffinity(0))
    nbytes = 1 << 20
    reply = agent.request("transfer", nbytes=nbytes, src_cpus=[cpus[0]], dst_cpus=[cpus[-1]], repeats=8)
    assert reply["nbytes"] == nbytes and reply["repeats"] == 8
    assert reply["src_cpus"] == [cpus[0]] and reply["dst_cpus"] == [cpus[-1]]
    # a cost is clipped at 0 (ppexec.timing.handoff_costs) when the consumer's own cached re-read took longer than
    # the hand-off, e.g. descheduled on a busy machine: a zero minimum is a measurement, the median is not
    assert 0 <= reply["min_s"] <= reply["median_s"] <= reply["p90_s"] and reply["median_s"] > 0
    assert reply["bandwidth_bytes_per_s"] == pytest.approx(nbytes / reply["median_s"])
    with pytest.raises(AgentRequestError, match="nbytes"):
        agent.request("transfer", nbytes=0, src_cpus=[cpus[0]], dst_cpus=[cpus[0]])


def test_unknown_op_is_an_error_reply(agent):
    with pytest.raises(AgentRequestError) as info:
        agent.request("run_everything")
    assert info.value.error_type == "UnknownOp"
    assert "run_everything" in str(info.value) and "profile" in str(info.value)


def _raw_agent():
    return subprocess.Popen([sys.executable, str(AGENT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_malformed_lines_never_crash_the_agent():
    proc = _raw_agent()
    lines = [b"this is not json\n", b"[1, 2]\n", b"\xff\xfe\n", b'{"op": 3, "id": 9}\n', b"\n",
             b'{"op": "hello", "id": "last"}\n']
    out, err = proc.communicate(b"".join(lines), timeout=60)
    assert proc.returncode == 0, err.decode()
    replies = [json.loads(line) for line in out.decode().splitlines()]
    assert [r["ok"] for r in replies] == [False, False, False, False, True]
    assert [r["error"]["type"] for r in replies[:4]] == ["BadRequest"] * 3 + ["UnknownOp"]
    assert replies[3]["id"] == 9 and replies[4]["id"] == "last"


def test_exits_cleanly_when_stdin_closes_and_after_bye():
    proc = _raw_agent()
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    proc.stdout.close()
    proc.stderr.close()
    proc = _raw_agent()
    out, err = proc.communicate(b'{"op": "bye", "id": 1}\n{"op": "hello", "id": 2}\n', timeout=60)
    assert proc.returncode == 0, err.decode()
    assert [json.loads(line)["id"] for line in out.decode().splitlines()] == [1]  # nothing after bye


def test_client_deadline_stops_a_stuck_agent(conv_b64):
    client = AgentClient.local()
    with pytest.raises(HostError, match="did not answer 'profile' within 0.5 s"):
        client.request("profile", timeout_s=0.5, model_b64=conv_b64, pu={"cpus": [0]}, repeats=10_000_000)
    with pytest.raises(HostError, match="closed"):
        client.request("hello")
    assert client.close() is None


def test_client_reports_a_dead_agent_with_its_stderr(tmp_path):
    dying = tmp_path / "dying_agent.py"
    dying.write_text("import sys\nsys.stderr.write('numpy is broken here\\n')\nsys.exit(3)\n")
    client = AgentClient.local(agent=dying)
    with pytest.raises(HostError) as info:
        client.request("hello", timeout_s=30)
    message = str(info.value)
    assert "status 3" in message and "numpy is broken here" in message
    assert "\n" not in message


def test_client_reports_a_missing_interpreter():
    with pytest.raises(HostError, match="cannot start the local agent"):
        AgentClient.local(python="/nonexistent/python3")


def test_cpu_clusters_from_sysfs(tmp_path):
    from ppexec import timing as module  # what the agent's hello reports
    (tmp_path / "online").write_text("0-5\n")
    for cpu in range(6):
        base = tmp_path / f"cpu{cpu}" / "cpufreq"
        base.mkdir(parents=True)
        big = cpu >= 2  # an A311D-like layout: 2 LITTLE then 4 big cores
        (base / "cpuinfo_max_freq").write_text("2208000\n" if big else "1800000\n")
        (base.parent / "cpu_capacity").write_text("1024\n" if big else "592\n")
    clusters, source = module.cpu_clusters(str(tmp_path))
    assert source == "cpu_capacity+cpuinfo_max_freq"
    assert clusters == [
        {"cpus": [2, 3, 4, 5], "capacity": 1024, "max_freq_hz": 2_208_000_000},
        {"cpus": [0, 1], "capacity": 592, "max_freq_hz": 1_800_000_000},
    ]
    for cpu in range(6):
        (tmp_path / f"cpu{cpu}" / "cpu_capacity").unlink()
    clusters, source = module.cpu_clusters(str(tmp_path))
    assert source == "cpuinfo_max_freq" and [c["cpus"] for c in clusters] == [[2, 3, 4, 5], [0, 1]]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "online").write_text("0-1,3\n")
    clusters, source = module.cpu_clusters(str(empty))
    assert source == "fallback" and clusters == [{"cpus": [0, 1, 3], "capacity": None, "max_freq_hz": None}]


def test_stats_use_nearest_rank_p90():
    from ppexec.timing import stats as timing_stats  # what the agent's profile and transfer reply

    stats = timing_stats([0.010 + 0.001 * i for i in range(10)])  # 10 ms .. 19 ms
    assert stats["median_s"] == pytest.approx(0.0145)
    assert stats["p90_s"] == pytest.approx(0.018)
    assert stats["min_s"] == pytest.approx(0.010)
    assert stats["spread"] == pytest.approx(0.018 / 0.0145 - 1)


DEVICE_FILES = sorted(AGENT.parent.rglob("*.py"))  # the agent and the executor core (ppexec/) shipped with it


def _imports(nodes) -> set:
    imported = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:  # relative imports stay in ppexec
            imported.add((node.module or "").split(".")[0])
    return imported


def test_device_files_import_only_stdlib_numpy_onnxruntime_and_each_other():
    # At import time: the standard library, numpy, onnxruntime and ppexec. Inside functions (lazily, by the
    # runtime adapter that needs it) also an optional runtime: openvino, ncnn.
    assert AGENT in DEVICE_FILES and len(DEVICE_FILES) > 5
    allowed = set(sys.stdlib_module_names) | {"numpy", "onnxruntime", "ppexec"}
    for path in DEVICE_FILES:
        tree = ast.parse(path.read_text())
        lazy = {n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                for n in ast.walk(f)}
        eager = [n for n in ast.walk(tree) if n not in lazy]
        assert sorted(m for m in _imports(eager) if m not in allowed) == [], path
        assert sorted(m for m in _imports(lazy) if m not in allowed | {"openvino", "ncnn"}) == [], path


def test_device_files_need_nothing_newer_than_python_3_8():
    # vermin has no __main__ module: call its console-script entry point (vermin:main) in this interpreter.
    runner = "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())"
    flags = ["-t=3.8-", "--no-tips", "--eval-annotations", "--violations"]
    result = subprocess.run([sys.executable, "-c", runner, *flags, *map(str, DEVICE_FILES)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "No module named 'vermin'" in result.stdout:
        pytest.fail("vermin is missing: pip install -e '.[test]' (or pip install vermin)", pytrace=False)
    assert result.returncode == 0, result.stdout


@pytest.mark.slow
def test_profile_a_zoo_model_whose_weights_are_constant_of_shape_outputs(agent):
    # The onnx wheel's light models (IR 3, opset 9) list their weights as graph inputs produced by
    # ConstantOfShape nodes; the agent must feed only the real data input.
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    reply = agent.request("profile", timeout_s=300, model_path=str(path), pu={"cpus": [0], "threads": 1},
                          optimization="all", warmup=1, repeats=3)
    assert reply["inputs"] == {"data_0": {"shape": [1, 3, 224, 224], "dtype": "float32"}}
    assert reply["provider"] == "CPUExecutionProvider" and reply["repeats"] == 3
    assert 0 < reply["min_s"] <= reply["median_s"] <= reply["p90_s"]


def test_ctrl_c_while_a_pinned_timing_runs_waits_for_it_then_passes_on(tmp_path):
    """``ppexec.timing.run_pinned``: a KeyboardInterrupt while its thread times is raised once the thread has
    finished (an interpreter exiting under a running ONNX Runtime session aborts with -6 instead of exit 130).
    In a subprocess: the SIGINT must not reach this test session."""
    script = tmp_path / "interrupt.py"
    script.write_text(
        "import signal, threading, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # a background job starts with SIGINT ignored
        "from ppexec.timing import run_pinned\n"
        "done, sent = [], threading.Event()\n"
        "def work():\n"
        "    sent.wait(60)\n"  # the work outlasts the signal however late a loaded machine sends it
        "    time.sleep(0.3)\n"
        "    done.append(True)\n"
        "def send():\n"
        "    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)\n"
        "    sent.set()\n"
        "threading.Timer(0.2, send).start()\n"
        "try:\n"
        "    run_pinned(None, work)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after the work finished' if done else 'interrupted while the work ran')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "interrupted after the work finished"), done.stderr
