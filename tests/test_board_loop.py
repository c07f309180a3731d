"""The loop on a board, end to end: a profile YAML -> optimize -> deploy to a real OpenSSH server on loopback (or
run here), each PU bound as its profile says, a second runtime adapter (OpenVINO) on one PU, the run recorded in
the profile database; refusals before anything is uploaded; --bind substitutions of a real board's point."""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

import sshd
from parapipe._paths import data_dir
from parapipe.cli import main

sshd_server = sshd.sshd_server  # the session-scoped loopback sshd fixture

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0),
                                                   reason="the two-PU profile pins CPUs 0 and 1")]


def two_pu_profile(tmp_path: Path, b_execution: dict) -> Path:
    """A profile with PU ``a`` (ONNX Runtime, CPU 0) and PU ``b`` (``b_execution``), both A53-like cores."""
    raw = yaml.safe_load((data_dir("soc_profiles") / "amlogic_a311d.yaml").read_text())
    little = raw["pus"]["little"]
    a, b = copy.deepcopy(little), copy.deepcopy(little)
    a["cores"] = b["cores"] = 1
    a["execution"] = {"cpus": [0], "threads": 1}
    b["execution"] = b_execution
    for pu in (a, b):
        pu.pop("operating_points", None)
    raw.pop("pipeline", None)
    raw.update(name="two_cores", pus={"a": a, "b": b})
    raw["transfers"] = {"default": raw["transfers"]["default"]}
    path = tmp_path / "two_cores.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def cli(capsys, *argv):
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def ssh_args(server):
    return ["--host", server.host, "--identity", server.client_key, "--known-hosts", server.known_hosts,
            "--python", sys.executable]  # the remote interpreter by explicit path, never the login shell's


def point_using(doc: dict, pus: set) -> str:
    """Id of the first point whose stages use exactly ``pus``."""
    for p in doc["points"]:
        if {pu for st in p["mapping"]["stages"] for pu in st["pus"]} == pus:
            return p["id"]
    raise AssertionError(f"no point uses {sorted(pus)}: {[p['id'] for p in doc['points']]}")


def test_two_pu_profile_optimize_deploy_openvino_pu_and_runs_row(sshd_server, tmp_path, capsys):
    pytest.importorskip("openvino", reason="the test extra installs openvino")
    # mobilenet_v2 (seeded random weights): the onnx wheel's light zoo models have constant weights, so their
    # 1000 logits are equal up to rounding and a softmax of them is ill-conditioned: OpenVINO's other summation
    # order alone turns a uniform 0.001 into 0.125 on eight classes (measured). Real weights compare fairly.
    profile = two_pu_profile(tmp_path, {"cpus": [1], "threads": 1, "runtime": "openvino",
                                        "runtime_options": {"device": "CPU"}})
    code, out, err = cli(capsys, "optimize", "mobilenet_v2", "--soc", profile, "--out", tmp_path / "o", "--no-plot",
                         "--time-limit", "2")
    assert code == 0, err
    doc = json.loads((tmp_path / "o" / "pareto.json").read_text())
    assert doc["soc"]["pus"]["b"]["execution"]["runtime"] == "openvino"
    point = point_using(doc, {"a", "b"})
    db, remote = tmp_path / "profile.sqlite", tmp_path / "remote"
    code, out, err = cli(capsys, "deploy", "mobilenet_v2", "--mapping", tmp_path / "o" / "pareto.json", "--point",
                         point, *ssh_args(sshd_server), "--frames", 12, "--remote-dir", remote,
                         "--out", tmp_path / "fetched", "--db", db, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["outputs_match"] is True and rep["checked_tensors"] >= 1
    assert rep["bindings"]["b"]["runtime"] == "openvino" and rep["bindings"]["a"]["cpus"] == [0]
    assert rep["substituted"] == {} and rep["predicted"]["applies"] is True
    assert os.listdir(remote) == []  # the bundle was removed
    code, out, err = cli(capsys, "runs", "--db", db, "--json")
    (row,) = json.loads(out)
    assert row["soc"] == "two_cores" and row["point"] == point and row["runner"].endswith(str(sshd_server.port))
    assert row["soc_sha256"] == doc["soc"]["sha256"] and row["outputs_match"] is True
    assert set(row["pu_busy_s"]) == {"a", "b"} and row["frames"] == 12
    # CSV export of the same row
    code, _, err = cli(capsys, "runs", "--db", db, "--csv", tmp_path / "runs.csv")
    assert code == 0 and (tmp_path / "runs.csv").read_text().count("\n") == 2


def test_a_provider_the_board_lacks_is_refused_before_any_upload(sshd_server, tmp_path, capsys):
    profile = two_pu_profile(tmp_path, {"cpus": [1], "threads": 1, "provider": "CUDAExecutionProvider"})
    code, _, err = cli(capsys, "optimize", "squeezenet", "--soc", profile, "--out", tmp_path / "o", "--no-plot",
                       "--time-limit", "1")
    assert code == 0, err
    doc = json.loads((tmp_path / "o" / "pareto.json").read_text())
    point = point_using(doc, {"a", "b"})
    remote = tmp_path / "remote"
    code, out, err = cli(capsys, "deploy", "squeezenet", "--mapping", tmp_path / "o" / "pareto.json", "--point",
                         point, *ssh_args(sshd_server), "--remote-dir", remote, "--db", tmp_path / "db.sqlite")
    assert code == 2 and out == ""
    lines = [ln for ln in err.splitlines() if ln.startswith("parapipe: error:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert "PU b" in lines[0] and "CUDAExecutionProvider" in lines[0] and "--bind b=CPUS" in lines[0]
    assert not remote.exists()  # nothing was uploaded: the board was checked first
    assert not (tmp_path / "db.sqlite").exists()  # no run, no row


def test_a311d_point_runs_here_with_every_pu_bound_to_a_core(tmp_path, capsys):
    code, _, err = cli(capsys, "optimize", "inception_v1", "--soc", "amlogic_a311d", "--out", tmp_path / "o",
                       "--no-plot", "--time-limit", "1")
    assert code == 0, err
    code, out, err = cli(capsys, "run", "inception_v1", "--mapping", tmp_path / "o" / "pareto.json", "--point",
                         "best-throughput", "--bind", "big=0", "--bind", "little=1", "--bind", "gpu=1",
                         "--bind", "npu=0", "--frames", 20, "--json", "--db", tmp_path / "db.sqlite")
    assert code == 0, err
    rep = json.loads(out)
    doc = json.loads((tmp_path / "o" / "pareto.json").read_text())
    best = min((p for p in doc["points"] if p["strategy"] == "parapipe"),
               key=lambda p: (p["period_s"], p["latency_s"], p["energy_j"]))
    used = {pu for st in best["mapping"]["stages"] for pu in st["pus"]}
    assert rep["outputs_match"] is True
    assert set(rep["substituted"]) == used and rep["predicted"]["applies"] is False
    code, out, _ = cli(capsys, "runs", "--db", tmp_path / "db.sqlite", "--json")
    (row,) = json.loads(out)
    assert row["prediction_applies"] is False and set(row["substituted"]) == used


def test_run_under_a_narrower_affinity_is_refused_before_it_starts(tmp_path, capsys):
    """As a user meets it: under ``taskset -c 1`` a point with a PU bound to CPU 0 is refused
    with one line (exit 2), as is the profile's own pinning (CPUs 2-5); nothing runs."""
    import subprocess

    code, _, err = cli(capsys, "optimize", "squeezenet", "--soc", "amlogic_a311d", "--pus", "big", "--out",
                       tmp_path / "o", "--no-plot", "--time-limit", "1")
    assert code == 0, err
    base = ["taskset", "-c", "1", sys.executable, "-m", "parapipe", "run", "squeezenet", "--mapping",
            str(tmp_path / "o" / "pareto.json"), "--point", "best-throughput", "--frames", "5", "--db", ""]
    repo = Path(__file__).resolve().parents[1]  # the code under test, not whatever is installed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "device_agents"),
                                                       os.environ.get("PYTHONPATH", "")]))
    for bind, words in ((["--bind", "big=0"], ["PU big", "pinned to CPUs [0]", "allows 1", "--bind big=CPUS"]),
                        ([], ["PU big", "pinned to CPUs [2, 3, 4, 5]", "allows 1"])):
        proc = subprocess.run(base + bind, capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                              env=env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        for w in words:
            assert w in lines[0], (w, lines[0])


def readme_board_loop() -> tuple:
    """``(variables, commands)`` of README.md's "The loop on a board" block: the shell assignments (``B``,
    ``BIND``) and the ``parapipe`` command lines, comments stripped. Read from the README so that a command the
    code no longer takes fails here."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("### The loop on a board"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    variables, commands = {}, []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if len(words) == 1 and re.match(r"^[A-Z_]+=", words[0]):
            name, _, value = words[0].partition("=")
            variables[name] = value
        else:
            assert words[0] == "parapipe", line
            commands.append(line.split("#")[0].strip())
    return variables, commands


def test_readme_board_loop_parses():
    variables, commands = readme_board_loop()
    assert set(variables) == {"B", "BIND"} and variables["BIND"] == ""
    assert len(commands) == 7
    assert [c.split()[1] for c in commands] == ["profile", "calibrate", "optimize", "deploy", "runs", "calibrate",
                                                "optimize"]
    refine = commands[-1]
    assert "--refine" in refine and "--db board.sqlite" in refine and "$B" in refine
    assert "$BIND" in commands[0] and "$BIND" in commands[1]


#: What the test changes in the README's commands, besides B and BIND, to bound its time: a smaller model than
#: inception_v1 (the same loop; its full profile on four PUs bound to two cores takes minutes), fewer frames per run
#: and a shorter CP-SAT budget. Each is an option the commands take as written.
SPEED = {"model": ("inception_v1", "squeezenet"), "optimize": "--time-limit 2 --no-plot --frames 20",
         "deploy": "--frames 20"}


def test_readme_board_loop_runs_as_written(sshd_server, tmp_path):
    """Every command of README.md's board loop, as written, against the loopback sshd: B is its user@127.0.0.1:PORT
    with the key, known_hosts and this interpreter; BIND binds the A311D's four PUs to this machine's CPUs (the
    README's route for a board that is not an A311D). Each command is a subprocess in a temporary folder, with a
    deadline; each must exit 0."""
    import shlex
    import subprocess

    variables, commands = readme_board_loop()
    cpus = sorted(os.sched_getaffinity(0))
    first, second = cpus[0], cpus[1 % len(cpus)]
    subst = {"$BIND": f"--bind big={first} --bind little={second} --bind gpu={first} --bind npu={second}",
             "$B": f"{sshd_server.host} --identity {sshd_server.client_key} --known-hosts "
                   f"{sshd_server.known_hosts} --python {sys.executable}"}
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "device_agents"),
                                                       os.environ.get("PYTHONPATH", "")]))
    outputs = []
    for command in commands:
        for var in ("$BIND", "$B"):  # $BIND first: $B is its prefix
            command = command.replace(var, subst[var])
        command = command.replace(*SPEED["model"])
        verb = command.split()[1]
        if verb in ("optimize", "deploy"):
            extra = SPEED[verb]
            if verb == "optimize" and "--refine" not in command:
                extra = extra.replace(" --frames 20", "")
            command = f"{command} {extra}"
        argv = [sys.executable, "-m", "parapipe"] + shlex.split(command)[1:]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=str(tmp_path), env=env)
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, proc.stderr
        outputs.append(proc.stdout)
    profile, calibrate, optimize, deploy, runs, calibrate_runs, refine = outputs
    assert f"substituted: big=CPUs {first}" in profile
    from parapipe.soc import load_soc

    bound = load_soc(str(tmp_path / "vim3.yaml"))  # step 2 wrote the bindings the blocks were measured with
    assert bound.pus["big"].execution.cpus == (first,) and bound.pus["npu"].execution.provider == \
        "CPUExecutionProvider"
    assert "outputs_match: true" in deploy and "substituted" not in deploy  # the profile's own bindings
    assert "warning: 1 run(s) for" in calibrate_runs and "wrote vim3-runs.yaml" in calibrate_runs
    assert "stopped after round" in refine and "next: " in refine
    assert "runs recorded in board.sqlite; the search used its measured blocks" in refine
    doc = json.loads((tmp_path / "out" / "vim3" / "pareto.json").read_text())
    info = doc["search"]["refine"]
    assert info["stop_reason"] in ("converged", "rounds", "unchanged")
    assert all(s["mapping"].startswith("m") and len(s["mapping"]) == 7 for s in info["trajectory"])
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import list_runs

    with ProfileDB(tmp_path / "board.sqlite") as db:
        rows = list_runs(db)
    assert len(rows) == 1 + len(info["trajectory"])  # the deploy and every refine run, in the --db given
    assert all(r.outputs_match for r in rows)
    # a prediction applies unless the run could not set the point's operating points (this machine, unlike a
    # board run as root, lets no test write cpufreq files: those runs say so and record why)
    assert all(r.prediction_applies != any(f.get("status") != "ok" for f in r.frequencies.values()) for r in rows)


def test_profile_and_calibrate_bind_a_pu_the_machine_lacks(tmp_path, capsys):
    """``profile --bind`` measures an A311D PU on this machine's CPU 0 (its own, CPUs 2-5, are refused here with a
    message that names --bind), recorded as the profile's PU; ``calibrate --bind`` writes that binding into the
    profile it fits, so its points run where the blocks were measured."""
    import sqlite3

    from parapipe.soc import load_soc

    db = tmp_path / "db.sqlite"
    base = ["profile", "squeezenet", "--soc", "amlogic_a311d", "--pus", "big", "--db", db, "--repeats", 2,
            "--warmup", 1, "--no-transfers"]
    code, _, err = cli(capsys, *base)
    assert code == 2 and "--bind big=CPUS" in err and not db.exists()
    code, out, err = cli(capsys, *base, "--bind", "big=0")
    assert code == 0, err
    assert "substituted: big=CPUs 0 (CPU provider), recorded as amlogic_a311d's PUs" in out
    conn = sqlite3.connect(str(db))
    socs = {tuple(r) for r in conn.execute("SELECT DISTINCT soc, pu FROM measurements")}
    conn.close()
    assert socs == {("amlogic_a311d", "big")}
    code, out, err = cli(capsys, "calibrate", "--soc", "amlogic_a311d", "--pus", "big", "--db", db, "--bind",
                         "big=0", "--out", tmp_path / "bound.yaml")
    assert code == 0, err
    bound = load_soc(str(tmp_path / "bound.yaml"))
    assert bound.pus["big"].execution.cpus == (0,) and bound.pus["big"].execution.threads == 1
    assert bound.pus["little"].execution.cpus == (0, 1)  # not bound: as the profile says
    code, _, err = cli(capsys, "calibrate", "--soc", "amlogic_a311d", "--db", db, "--bind", "dsp=0")
    assert code == 2 and "no PU 'dsp' in SoC 'amlogic_a311d'" in err
