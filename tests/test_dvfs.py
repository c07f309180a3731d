"""Operating points on the board (``ppexec.dvfs``): set, read back, restore, refuse -- on a fake sysfs tree
(tests/fake_sysfs.py), in process and through ``parapipe run`` / ``parapipe deploy`` to the loopback sshd."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fake_sysfs
from ppexec import dvfs

POLICY0 = "devices/system/cpu/cpufreq/policy0"
POLICY2 = "devices/system/cpu/cpufreq/policy2"
GPU_DIR = "class/devfreq/" + fake_sysfs.GPU


@pytest.fixture
def tree(tmp_path, monkeypatch):
    root = fake_sysfs.build(tmp_path / "sys")
    monkeypatch.setenv(dvfs.JOURNAL_ENV, str(tmp_path / "state" / "dvfs-journal.json"))
    return root


def _requests(**pus):
    out = {}
    for pu, (mhz, where) in pus.items():
        out[pu] = dict(where, frequency_hz=mhz * 1e6)
    return out


def test_apply_reads_back_and_restores_cpufreq_and_devfreq(tree):
    before = fake_sysfs.snapshot(tree)
    requests = _requests(big=(1800, {"cpus": [2, 3]}), little=(1000, {"cpus": [0, 1]}),
                         gpu=(285.7, {"devfreq": fake_sysfs.GPU}))
    with dvfs.applied(requests, root=str(tree)) as state:
        assert (tree / POLICY2 / "scaling_governor").read_text() == "userspace"
        assert (tree / POLICY2 / "scaling_setspeed").read_text() == "1800000"
        assert (tree / POLICY2 / "scaling_min_freq").read_text() == "1800000"
        assert (tree / POLICY2 / "scaling_max_freq").read_text() == "1800000"
        assert (tree / GPU_DIR / "userspace/set_freq").read_text() == "285714285"
        assert Path(dvfs.journal_path()).is_file()  # written before the first change
        state.read_back(end=True)
        report = state.report()
    assert report["big"]["status"] == "ok" and report["big"]["readback_hz"] == 1_800_000_000
    assert report["big"]["domain"] == "cpufreq policy2" and report["big"]["mode"] == "userspace"
    assert report["big"]["transition_latency_s"] == pytest.approx(40e-6)
    assert report["little"]["readback_end_hz"] == 1_000_000_000
    assert report["gpu"]["requested_hz"] == 285714285 and report["gpu"]["status"] == "ok"
    after = fake_sysfs.snapshot(tree)
    changed = {k for k in before if before[k] != after[k]}
    assert changed <= {f"{POLICY0}/scaling_setspeed", f"{POLICY2}/scaling_setspeed", f"{GPU_DIR}/userspace/set_freq"}
    for pol in (POLICY0, POLICY2):  # governor, min and max as they were
        for f in ("scaling_governor", "scaling_min_freq", "scaling_max_freq"):
            assert after[f"{pol}/{f}"] == before[f"{pol}/{f}"]
    assert not Path(dvfs.journal_path()).exists()


def test_without_userspace_min_max_pin_in_order(tmp_path, monkeypatch):
    root = fake_sysfs.build(tmp_path / "sys", userspace=False)
    monkeypatch.setenv(dvfs.JOURNAL_ENV, str(tmp_path / "j.json"))
    before = fake_sysfs.snapshot(root)
    writes = []
    real = dvfs._write

    def spy(path, value):
        writes.append((os.path.basename(path), value))
        # min <= max at every step, as the kernel demands
        d = os.path.dirname(path)
        lo = int(value if path.endswith("min_freq") else Path(d, "scaling_min_freq").read_text())
        hi = int(value if path.endswith("max_freq") else Path(d, "scaling_max_freq").read_text())
        assert lo <= hi, writes
        real(path, value)

    monkeypatch.setattr(dvfs, "_write", spy)
    with dvfs.applied(_requests(little=(1200, {"cpus": [0]})), root=str(root)) as state:
        assert state.report()["little"]["mode"] == "limits" and state.report()["little"]["status"] == "ok"
    assert writes[:2] == [("scaling_min_freq", "1200000"), ("scaling_max_freq", "1200000")]
    assert fake_sysfs.snapshot(root) == before


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_restores_after_an_exception_and_ctrl_c(tree, error):
    before = fake_sysfs.snapshot(tree)
    with pytest.raises(error):
        with dvfs.applied(_requests(big=(2208, {"cpus": [2, 3, 4, 5]})), root=str(tree)):
            assert (tree / POLICY2 / "scaling_max_freq").read_text() == "2208000"
            raise error("stop")
    assert fake_sysfs.snapshot(tree) == {**before, f"{POLICY2}/scaling_setspeed": "2208000"}
    assert not Path(dvfs.journal_path()).exists()


def test_a_thermal_cap_is_reported_throttled(tree):
    fake_sysfs.cap(tree, POLICY2, 1_512_000)  # the kernel holds the A73 cluster at 1.512 GHz
    with dvfs.applied(_requests(big=(2016, {"cpus": [2]})), root=str(tree)) as state:
        report = state.report()["big"]
    assert report["status"] == "throttled" and report["readback_hz"] == 1_512_000_000
    assert "1512 MHz, not 2016 MHz, held by a thermal or QoS cap" in report["reason"]


def test_unknown_frequency_is_refused_listing_the_table(tree):
    before = fake_sysfs.snapshot(tree)
    with pytest.raises(dvfs.DvfsRefused) as info:
        with dvfs.applied(_requests(little=(1000, {"cpus": [0]}), big=(1750, {"cpus": [2]})), root=str(tree)):
            pass
    msg = str(info.value)
    assert "\n" not in msg and "1750 MHz is not an operating point of cpufreq policy2" in msg
    assert "1200, 1398, 1512" in msg and "2208 MHz" in msg
    assert fake_sysfs.snapshot(tree) == before and not Path(dvfs.journal_path()).exists()


def test_cpus_across_two_policies_are_refused(tree):
    with pytest.raises(dvfs.DvfsRefused, match=r"PU mixed: its CPUs \[1, 2\] span several frequency domains"):
        dvfs.plan_targets(_requests(mixed=(1200, {"cpus": [1, 2]})), str(tree))


def test_without_write_permission_nothing_changes(tree):
    """Read-only by mode (0444) stops root too: sysfs gives attributes without a store method that mode, and
    ``_writable`` checks the mode bits besides ``os.access`` (which root always passes)."""
    before = fake_sysfs.snapshot(tree)
    fake_sysfs.read_only(tree, [f"{GPU_DIR}/max_freq"])
    with pytest.raises(dvfs.DvfsRefused) as info:
        with dvfs.applied(_requests(big=(1800, {"cpus": [2]}), gpu=(400, {"devfreq": fake_sysfs.GPU})),
                          root=str(tree)):
            raise AssertionError("must not run")
    msg = str(info.value)
    assert "\n" not in msg and f"{GPU_DIR}/max_freq is read-only (mode 0444)" in msg and "--no-dvfs" in msg
    assert fake_sysfs.snapshot(tree) == before and not Path(dvfs.journal_path()).exists()


def test_a_killed_run_is_restored_from_its_journal(tree, tmp_path):
    """SIGKILL leaves the journal; the next process (the agent at start-up) restores from it. SIGTERM restores
    at once."""
    before = fake_sysfs.snapshot(tree)
    script = textwrap.dedent(f"""
        import sys, time
        from ppexec import dvfs
        with dvfs.applied({{"big": {{"frequency_hz": 1.2e9, "cpus": [2]}}}}, root={str(tree)!r}):
            print("set", flush=True)
            time.sleep(60)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
        assert child.stdout.readline() == b"set\n"
        assert (tree / POLICY2 / "scaling_max_freq").read_text() == "1200000"
        child.send_signal(sig)
        child.wait(timeout=30)
        if sig == signal.SIGTERM:
            assert child.returncode == 128 + signal.SIGTERM
            assert (tree / POLICY2 / "scaling_max_freq").read_text() == before[f"{POLICY2}/scaling_max_freq"]
            assert not Path(dvfs.journal_path()).exists()
    assert Path(dvfs.journal_path()).exists()
    assert (tree / POLICY2 / "scaling_governor").read_text() == "userspace"
    assert dvfs.restore_leftover() == [str(tree / POLICY2)]
    assert fake_sysfs.snapshot(tree) == {**before, f"{POLICY2}/scaling_setspeed": "1200000"}
    assert not Path(dvfs.journal_path()).exists()


# ------------------------------------------------------------------------------------------------------------
# parapipe run (in process) and parapipe deploy (loopback sshd): the whole path, fake tree on "the board"
# ------------------------------------------------------------------------------------------------------------

NEEDS_TWO_CPUS = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="mappings use CPUs 0, 1")
POLICY1 = "devices/system/cpu/cpufreq/policy1"


def board_tree(root: Path) -> Path:
    """CPU 0 an A53 policy, CPU 1 an A73 policy (the two PUs of tests/deploy_mappings.py), and the Mali GPU."""
    return fake_sysfs.build(root, policies={0: ((0,), fake_sysfs.A53_KHZ), 1: ((1,), fake_sysfs.A73_KHZ)})


@pytest.fixture(scope="module")
def dvfs_mapping(tmp_path_factory) -> Path:
    from deploy_mappings import two_stage_doc, write_doc

    doc = two_stage_doc("squeezenet")
    doc["soc"]["pus"]["gpu"] = {"kind": "gpu", "execution": {"devfreq": fake_sysfs.GPU}}  # devfreq domain
    return write_doc(doc, tmp_path_factory.mktemp("mapping") / "pareto.json")


def _restored(before, after):
    """The tree as it was, but for setspeed files (written, and only read under userspace)."""
    return {k: v for k, v in after.items() if not k.endswith(("scaling_setspeed", "set_freq"))} == \
        {k: v for k, v in before.items() if not k.endswith(("scaling_setspeed", "set_freq"))}


@NEEDS_TWO_CPUS
def test_run_sets_reads_back_records_and_restores(dvfs_mapping, tmp_path, monkeypatch, capsys, caplog):
    from parapipe.cli import main
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import list_runs

    root = board_tree(tmp_path / "sys")
    fake_sysfs.cap(root, POLICY1, 1_512_000)  # a thermal cap on CPU 1's cluster
    monkeypatch.setenv(dvfs.SYSFS_ROOT_ENV, str(root))
    monkeypatch.setenv(dvfs.JOURNAL_ENV, str(tmp_path / "journal.json"))
    before = fake_sysfs.snapshot(root)
    db = tmp_path / "runs.sqlite"
    rc = main(["run", "squeezenet", "--mapping", str(dvfs_mapping), "--point", "p0", "--frames", "3", "--json",
               "--db", str(db), "--frequency", "cpu0=1398", "--frequency", "cpu1=2016", "--frequency", "gpu=400"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(captured.out)
    f = doc["frequencies"]
    assert f["cpu0"]["status"] == "ok" and f["cpu0"]["readback_hz"] == 1_398_000_000
    assert f["gpu"]["readback_end_hz"] == 400_000_000 and f["gpu"]["domain"] == "devfreq " + fake_sysfs.GPU
    assert f["cpu1"]["status"] == "throttled" and f["cpu1"]["readback_hz"] == 1_512_000_000
    assert doc["predicted"]["applies"] is False
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "cpu1" in r.getMessage()]
    assert len(warnings) == 1 and "asked 2016 MHz" in warnings[0] and "prediction does not apply" in warnings[0]
    assert _restored(before, fake_sysfs.snapshot(root)) and not (tmp_path / "journal.json").exists()
    with ProfileDB(db) as pdb:
        (row,) = list_runs(pdb)
    assert row.frequencies["cpu0"]["readback_hz"] == 1_398_000_000 and row.prediction_applies is False
    assert row.frequencies["cpu1"]["status"] == "throttled"


def test_run_refuses_an_unknown_frequency_and_no_dvfs_sets_nothing(dvfs_mapping, tmp_path, monkeypatch, capsys):
    from parapipe.cli import main

    root = board_tree(tmp_path / "sys")
    monkeypatch.setenv(dvfs.SYSFS_ROOT_ENV, str(root))
    monkeypatch.setenv(dvfs.JOURNAL_ENV, str(tmp_path / "journal.json"))
    before = fake_sysfs.snapshot(root)
    rc = main(["run", "squeezenet", "--mapping", str(dvfs_mapping), "--point", "p0", "--frames", "2", "--db", "",
               "--frequency", "cpu1=1750"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("parapipe: error:")]
    assert rc == 2 and len(lines) == 1 and "1750 MHz is not an operating point of cpufreq policy1" in lines[0]
    assert "available: 1200, 1398" in lines[0] and "Traceback" not in err
    assert main(["run", "squeezenet", "--mapping", str(dvfs_mapping), "--point", "p0", "--frames", "2", "--db", "",
                 "--frequency", "cpu1=1800", "--no-dvfs"]) == 2
    assert "--no-dvfs: contradicts --frequency" in capsys.readouterr().err
    assert fake_sysfs.snapshot(root) == before


# --- deploy ---------------------------------------------------------------------------------------------------

sshd = pytest.importorskip("sshd")
sshd_server = sshd.sshd_server  # the session-scoped loopback sshd fixture (shared with tests/test_deploy.py)


def _board_python(tmp_path: Path, root: Path, journal: Path) -> Path:
    """The Python the deploy runs on the "board": this interpreter with the fake tree as its sysfs root."""
    import shlex

    wrapper = tmp_path / "board-python"
    wrapper.write_text(f"#!/bin/sh\nexport {dvfs.SYSFS_ROOT_ENV}={shlex.quote(str(root))} "
                       f"{dvfs.JOURNAL_ENV}={shlex.quote(str(journal))}\n"
                       f"exec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def _agent_pids(remote: str) -> list:
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if remote in cmdline and "agent.py" in cmdline:
                pids.append(int(pid))
    return pids


def _wait_no_agents(remote: str, timeout_s: float = 20.0) -> list:
    import time

    deadline = time.monotonic() + timeout_s
    while _agent_pids(remote) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _agent_pids(remote)


@pytest.mark.ssh
@pytest.mark.slow
@NEEDS_TWO_CPUS
def test_deploy_sets_and_restores_and_refuses_without_permission(sshd_server, dvfs_mapping, tmp_path, capsys):
    from parapipe.cli import main

    root, journal = board_tree(tmp_path / "sys"), tmp_path / "board-state" / "journal.json"
    python = _board_python(tmp_path, root, journal)
    before = fake_sysfs.snapshot(root)
    common = ["deploy", "--python", str(python), "squeezenet", "--mapping", str(dvfs_mapping), "--point", "p0",
              "--host", sshd_server.host, "--identity", str(sshd_server.client_key), "--known-hosts",
              str(sshd_server.known_hosts), "--frames", "4", "--remote-dir", str(tmp_path / "remote"),
              "--out", str(tmp_path / "out"), "--frequency", "cpu0=1000", "--frequency", "cpu1=2208",
              "--frequency", "gpu=285.7"]
    rc = main(common + ["--db", str(tmp_path / "db.sqlite")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "frequencies: cpu0 1000 MHz asked, 1000 MHz ran (cpufreq policy0, ok)" in captured.out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["frequencies"]["cpu1"]["readback_hz"] == 2_208_000_000
    assert report["frequencies"]["gpu"]["readback_end_hz"] == 285_714_285
    assert report["predicted"]["applies"] is True
    assert _restored(before, fake_sysfs.snapshot(root)) and not journal.exists()
    # without write permission: refused in one line before anything runs, nothing changed
    before = fake_sysfs.snapshot(root)
    fake_sysfs.read_only(root, [f"{POLICY1}/scaling_governor"])
    rc = main(common + ["--db", ""])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("parapipe: error:")]
    assert rc == 2 and len(lines) == 1, err
    assert f"{root / POLICY1 / 'scaling_governor'} is read-only (mode 0444)" in lines[0]
    assert "running the unsplit model" not in err and "pipeline started" not in err  # nothing ran
    assert fake_sysfs.snapshot(root) == before and not journal.exists()


@pytest.mark.ssh
@pytest.mark.slow
@NEEDS_TWO_CPUS
def test_deploy_restores_after_ctrl_c_a_killed_agent_and_a_failed_run(sshd_server, dvfs_mapping, tmp_path):
    from parapipe.app.deploy import DeployOptions, deploy_bundle, deploy_mapping
    from parapipe.app.run import load_mapping
    from parapipe.deploy.bundle import build_bundle
    from parapipe.errors import ExecutionError, HostError
    from parapipe.remote.host import RemoteHost
    from parapipe.remote.hostspec import HostSpec
    from test_deploy import _make_fail_at_run_time

    root, journal = board_tree(tmp_path / "sys"), tmp_path / "board-state" / "journal.json"
    python = _board_python(tmp_path, root, journal)
    before = fake_sysfs.snapshot(root)
    remote = str(tmp_path / "remote")
    spec = HostSpec.parse(sshd_server.host, identity=sshd_server.client_key, known_hosts=sshd_server.known_hosts)
    freqs = {"cpu0": 1.2e9, "cpu1": 1.8e9}
    bundle = build_bundle(load_mapping("squeezenet", str(dvfs_mapping), "p0", frequencies_hz=freqs),
                          tmp_path / "bundle")
    options = DeployOptions(python=str(python), frames=100_000, remote_dir=remote, warmup=0)
    (tmp_path / "out").mkdir()
    seen = {}

    def interrupt(event):  # Ctrl-C on the computer while the board runs at the asked frequencies
        if event.get("event") == "progress" and event.get("phase") == "run":
            seen["during"] = (root / POLICY1 / "scaling_max_freq").read_text()
            raise KeyboardInterrupt

    with RemoteHost(spec) as host:
        with pytest.raises(KeyboardInterrupt):
            deploy_bundle(host, bundle, tmp_path / "out", options, on_event=interrupt)
    assert seen["during"] == "1800000"
    assert _wait_no_agents(remote) == []
    assert _restored(before, fake_sysfs.snapshot(root)) and not journal.exists()

    def kill_agent(event):  # the agent dies outright (SIGKILL: no handler runs), e.g. the OOM killer
        if event.get("event") == "progress" and event.get("phase") == "run" and "killed" not in seen:
            seen["killed"] = _agent_pids(remote)
            for pid in seen["killed"]:
                os.kill(pid, signal.SIGKILL)

    with RemoteHost(spec) as host:
        with pytest.raises((HostError, ExecutionError)):
            deploy_bundle(host, bundle, tmp_path / "out", options, on_event=kill_agent)
    assert seen["killed"] and journal.exists()  # left set; its journal says how to undo it
    assert (root / POLICY1 / "scaling_max_freq").read_text() == "1800000"
    # the next deploy's agent restores at start-up; that run's stage fails, and its frequencies are restored too
    failing = load_mapping("squeezenet", str(dvfs_mapping), "p0", frequencies_hz={"gpu": 5e8})
    _make_fail_at_run_time(failing.plan.stages[1][0].model)

    def at_start(event):  # the agent has started, the run not yet: the killed run's settings are back already
        if event.get("event") == "uploaded":
            seen["at_start"] = (_restored(before, fake_sysfs.snapshot(root)), journal.exists())

    with pytest.raises(ExecutionError, match="failed while running"):
        deploy_mapping(failing, spec, tmp_path / "out", DeployOptions(python=str(python), frames=4, warmup=0,
                                                                      remote_dir=remote), on_event=at_start)
    assert seen["at_start"] == (True, False)
    assert _wait_no_agents(remote) == []
    assert _restored(before, fake_sysfs.snapshot(root)) and not journal.exists()


# --- profile --frequencies ------------------------------------------------------------------------------------

def test_profile_measures_blocks_at_each_operating_point_and_restores(tmp_path, monkeypatch, capsys):
    from parapipe.cli import main
    from parapipe.profiledb.db import BOARD_FREQUENCY, ProfileDB

    root = board_tree(tmp_path / "sys")
    monkeypatch.setenv(dvfs.SYSFS_ROOT_ENV, str(root))  # the local agent (a subprocess) inherits it
    monkeypatch.setenv(dvfs.JOURNAL_ENV, str(tmp_path / "journal.json"))
    before = fake_sysfs.snapshot(root)
    db = tmp_path / "p.sqlite"
    rc = main(["profile", "squeezenet", "--soc", "host", "--db", str(db), "--pus", "cpu0", "--budget", "0.05",
               "--repeats", "2", "--warmup", "0", "--no-transfers", "--frequencies", "cpu0=1000,1800"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "cpu0: blocks measured at 1000, 1800 MHz" in out
    with ProfileDB(db) as pdb:
        assert pdb.frequencies("host") == {"cpu0": [1.0e9, 1.8e9]}
        base = {r.signature for r in pdb.all("host") if r.kind == "block"}
        at = {hz: {r.signature for r in pdb.all("host", frequency_hz=hz)} for hz in (1.0e9, 1.8e9)}
        assert pdb.all("host", frequency_hz=BOARD_FREQUENCY) == pdb.all("host")
    assert at[1.0e9] and at[1.0e9] == at[1.8e9] and at[1.0e9] <= base  # the blocks, at each point
    assert _restored(before, fake_sysfs.snapshot(root)) and not (tmp_path / "journal.json").exists()
    # a frequency outside the table is refused in one line, and nothing is set
    rc = main(["profile", "squeezenet", "--soc", "host", "--db", str(db), "--pus", "cpu0", "--budget", "0.05",
               "--repeats", "2", "--warmup", "0", "--no-transfers", "--frequencies", "cpu0=1300"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("parapipe: error:")]
    assert rc == 2 and len(lines) == 1 and "1300 MHz is not an operating point of cpufreq policy0" in lines[0]
    assert _restored(before, fake_sysfs.snapshot(root))


def test_schema_3_measurements_migrate_to_the_board_frequency(tmp_path):
    import dataclasses
    import sqlite3

    from parapipe.profiledb import db as dbmod
    from parapipe.profiledb.records import Measurement

    path = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(str(path))
    v3 = dbmod._MEASUREMENTS.replace("    frequency_hz REAL NOT NULL DEFAULT 0 CHECK (frequency_hz >= 0),\n", "") \
        .replace(", frequency_hz)", ")")
    for statement in (v3, dbmod._OP_CATALOG, dbmod._WORK_CATALOG,
                      dbmod._RUNS.replace(",\n    frequencies TEXT NOT NULL DEFAULT '{}'", "")):
        conn.execute(statement)
    row = Measurement("a311d", "big", "block:x", "Conv", 1, "1.19", 0.01, 0.012, 10, "2026-01-01T00:00:00+00:00",
                      "local", "block", 0)
    names = [n for n in Measurement.field_names() if n != "frequency_hz"]  # a version-3 row has none
    conn.execute(f"INSERT INTO measurements ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                 dataclasses.astuple(row)[:len(names)])
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with dbmod.ProfileDB(path) as pdb:
        assert pdb.all() == [row] and pdb.frequencies() == {}
        faster = dataclasses.replace(row, median_s=0.005, p90_s=0.006)
        pdb.put([faster], frequency_hz=1.8e9)  # same key, another operating point: a row of its own
        at = dataclasses.replace(faster, frequency_hz=1.8e9)  # read back with the frequency it was stored at
        assert pdb.all() == [row] and pdb.all(frequency_hz=1.8e9) == [at]
        assert pdb.get("a311d", "big", "block:x", kind="block", frequency_hz=1.8e9) == at
        assert pdb.frequencies("a311d") == {"big": [1.8e9]}


@NEEDS_TWO_CPUS
def test_run_sets_the_points_own_operating_points_by_default(tmp_path, monkeypatch, capsys):
    """A point whose stages state frequencies (pareto.json ``frequency_hz``) runs at them without --frequency;
    --no-dvfs leaves the board alone."""
    first, second = _stage_pus()
    run = _point_run(tmp_path, monkeypatch, capsys, {0: {first: 1.398e9}, 1: {second: 2.016e9}})
    before = fake_sysfs.snapshot(run.root)
    f = run()["frequencies"]
    assert {pu: (v["requested_hz"], v["readback_hz"], v["status"]) for pu, v in f.items()} == {
        first: (1.398e9, 1_398_000_000, "ok"), second: (2.016e9, 2_016_000_000, "ok")}
    after = fake_sysfs.snapshot(run.root)
    assert _restored(before, after)
    assert not run("--no-dvfs").get("frequencies") and fake_sysfs.snapshot(run.root) == after


def _stage_pus() -> tuple:
    """The PU of each stage of tests/deploy_mappings.py's two-stage squeezenet point, in stage order."""
    from deploy_mappings import two_stage_doc

    return tuple(st["pus"][0] for st in two_stage_doc("squeezenet")["points"][0]["mapping"]["stages"])


def _point_run(tmp_path, monkeypatch, capsys, frequencies: dict, read_only: tuple = ()):
    """``run(*options)``: ``parapipe run --json`` of the two-stage squeezenet point whose stage ``s`` states the
    operating points ``frequencies[s]`` ({pu: Hz}), on a fake sysfs tree (``run.root``; ``read_only``: its files
    made read-only); returns the report as a dict, asserting exit 0."""
    from deploy_mappings import two_stage_doc, write_doc

    from parapipe.cli import main

    doc = two_stage_doc("squeezenet")
    for s, freqs in frequencies.items():
        doc["points"][0]["mapping"]["stages"][s]["frequency_hz"] = freqs
    mapping = write_doc(doc, tmp_path / "pareto.json")
    root = board_tree(tmp_path / "sys")
    fake_sysfs.read_only(root, list(read_only))
    monkeypatch.setenv(dvfs.SYSFS_ROOT_ENV, str(root))
    monkeypatch.setenv(dvfs.JOURNAL_ENV, str(tmp_path / "journal.json"))

    def run(*options: str) -> dict:
        rc = main(["run", "squeezenet", "--mapping", str(mapping), "--point", "p0", "--frames", "2", "--json",
                   "--db", "", *options])
        captured = capsys.readouterr()
        assert rc == 0, captured.err
        return json.loads(captured.out)

    run.root = root  # type: ignore[attr-defined]
    return run


@NEEDS_TWO_CPUS
def test_a_board_that_cannot_set_the_points_operating_points_runs_at_its_own_settings(tmp_path, monkeypatch,
                                                                                       capsys, caplog):
    """The point's own operating points on a board without write access: the run goes ahead at the board's
    settings, says so, marks the PUs refused and the prediction as not applying; nothing changes. An operating
    point asked for with --frequency is refused instead (test_run_refuses_an_unknown_frequency_...)."""
    first = _stage_pus()[0]
    run = _point_run(tmp_path, monkeypatch, capsys, {0: {first: 1.398e9}},
                     read_only=("devices/system/cpu/cpufreq/policy0/scaling_max_freq",))
    before = fake_sysfs.snapshot(run.root)
    rep = run()
    f = rep["frequencies"][first]
    assert f["status"] == "refused" and f["readback_hz"] is None and "scaling_max_freq" in f["reason"]
    assert rep["predicted"]["applies"] is False and fake_sysfs.snapshot(run.root) == before
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "were not set" in r.getMessage()]
    assert len(warned) == 1 and "board's own settings" in warned[0] and "None" not in warned[0]
