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
    assert "1512 MHz, not 2016 MHz" in report["reason"]


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
