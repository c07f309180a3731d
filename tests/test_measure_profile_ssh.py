"""Profiling and ``soc detect`` over SSH against a REAL OpenSSH server on loopback (tests/sshd.py), and the
one-line refusals of a host that cannot be used (the database stays as it was)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sshd
from ssh_faults import FaultProxy, StallingServer, known_hosts_for
from parapipe.cli import main
from parapipe.remote.hostspec import HostSpec
from parapipe.profiledb.db import ProfileDB
from parapipe.app.profiling import profile_job
from parapipe.measure.profile import ProfileOptions
from parapipe.soc.loader import load_soc

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
sshd_server = sshd.sshd_server  # the session-scoped loopback sshd fixture

REPO = Path(__file__).resolve().parent.parent
OPTIONS = ProfileOptions(pus=["cpu0"], warmup=2, repeats=5, blocks=False, transfers=False)


def host_args(server, **overrides):
    options = {"--identity": str(server.client_key), "--known-hosts": str(server.known_hosts)}
    options.update(overrides)
    args = ["--host", server.host, "--python", sys.executable]  # never the login shell's python3
    for key, value in options.items():
        if value is not None:
            args += [key, value]
    return args


@pytest.fixture(scope="module")
def shared_db(sshd_server, tmp_path_factory):
    """One database holding a local and a remote (loopback SSH) profile of squeezenet on core 0."""
    path = tmp_path_factory.mktemp("sshprof") / "profile.sqlite"
    local = profile_job("squeezenet", "host", path, options=OPTIONS)
    spec = HostSpec.parse(sshd_server.host, identity=sshd_server.client_key,
                          known_hosts=sshd_server.known_hosts)
    remote = profile_job("squeezenet", "host", path, host=spec, python=sys.executable, options=OPTIONS)
    return path, local, remote, sshd_server


def test_remote_profile_lands_in_the_same_database(shared_db):
    path, local, remote, server = shared_db
    assert local.measured == remote.measured == 38 and not remote.failed
    assert remote.host == str(HostSpec.parse(server.host)) and remote.soc == f"host@{remote.host}"
    with ProfileDB(path) as db:
        rows = db.all()
    assert {r.soc for r in rows} == {"host", remote.soc}
    assert {r.host for r in rows if r.soc == remote.soc} == {remote.host}
    assert {r.host for r in rows if r.soc == "host"} == {"local"}


def test_remote_profile_measures_what_the_local_run_measures(shared_db):
    """Same machine, same core, same options: over SSH the agent times the same works the same way (same
    signatures, operator types, PU, batch, bytes, repeats and ONNX Runtime). The times themselves are not
    compared: on a shared machine two runs may differ by any factor."""
    path, _, remote, _ = shared_db
    with ProfileDB(path) as db:
        here = {r.signature: r for r in db.all("host")}
        there = {r.signature: r for r in db.all(remote.soc)}
    assert set(here) == set(there) and len(here) == 38

    def what(row):
        return row.op_type, row.pu, row.batch, row.kind, row.nbytes, row.repeats, row.ort_version

    assert {s: what(r) for s, r in there.items()} == {s: what(r) for s, r in here.items()}
    assert {r.repeats for r in here.values()} == {OPTIONS.repeats}
    assert all(0 < r.median_s <= r.p90_s for r in [*here.values(), *there.values()])


def test_second_remote_run_measures_nothing(shared_db):
    path, _, remote, server = shared_db
    spec = HostSpec.parse(server.host, identity=server.client_key, known_hosts=server.known_hosts)
    again = profile_job("squeezenet", "host", path, host=spec, python=sys.executable, options=OPTIONS)
    assert again.measured == 0 and again.skipped == remote.planned


def test_calibrate_times_stages_over_ssh(shared_db, capsys):
    path, _, remote, server = shared_db
    rc = main(["calibrate", "--soc", "host", "--db", str(path), "--model", "squeezenet", "--pus", "cpu0",
               "--splits", "1", "--rounds", "1", "--repeats", "3", "--json"] + host_args(server))
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["soc"] == remote.soc and report["stages_measured"] == 1
    with ProfileDB(path) as db:
        stages = [r for r in db.all(remote.soc) if r.kind == "stage"]
    assert len(stages) == 1 and stages[0].host == remote.host


def test_soc_detect_over_ssh_writes_a_loadable_profile(sshd_server, tmp_path, capsys):
    out = tmp_path / "remote.yaml"
    rc = main(["soc", "detect", "--out", str(out), "--name", "loopback"] + host_args(sshd_server))
    assert rc == 0, capsys.readouterr().err
    soc = load_soc(str(out))
    assert soc.name == "loopback" and soc.pus
    assert all(pu.peak_flops > 1e8 and pu.execution.cpus for pu in soc.pus.values())
    assert "wrote" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ bad hosts
def _refused(capsys, args, db):
    rc = main(["profile", "squeezenet", "--soc", "host", "--db", str(db), "--pus", "cpu0"] + args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _fake_python(tmp_path, name, body):
    script = tmp_path / name
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_unknown_host_key_is_refused_and_the_database_untouched(sshd_server, tmp_path, capsys, shared_db):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    path = shared_db[0]
    before = path.read_bytes()
    line = _refused(capsys, host_args(sshd_server, **{"--known-hosts": str(empty)}), path)
    assert "--trust-new-host" in line and "not in" in line
    assert path.read_bytes() == before and empty.read_text() == ""


def test_refused_key(sshd_server, tmp_path, capsys):
    db = tmp_path / "k.sqlite"
    line = _refused(capsys, host_args(sshd_server, **{"--identity": str(sshd_server.other_key)}), db)
    assert "authentication failed" in line and "authorized_keys" in line
    assert not db.exists()


def test_unreachable_host(tmp_path, capsys):
    db = tmp_path / "u.sqlite"
    line = _refused(capsys, ["--host", f"nobody@127.0.0.1:{sshd.free_port()}"], db)
    assert "cannot connect" in line and not db.exists()


def test_host_without_onnxruntime(sshd_server, tmp_path, capsys):
    db = tmp_path / "o.sqlite"
    bare = _fake_python(tmp_path, "bare-python3", f'exec {sys.executable} -S "$@"')
    line = _refused(capsys, host_args(sshd_server) + ["--python", bare], db)
    assert "pip install onnxruntime" in line and not db.exists()


def test_host_with_too_old_python(sshd_server, tmp_path, capsys):
    db = tmp_path / "old.sqlite"
    old = _fake_python(tmp_path, "python3.6", 'echo "Python 3.6.9"')
    line = _refused(capsys, host_args(sshd_server) + ["--python", old], db)
    assert "older than 3.8" in line and not db.exists()


def test_host_that_stalls_on_the_exec_request_fails_at_the_ssh_timeout(sshd_server, tmp_path, capsys):
    server = StallingServer(sshd_server.client_key.with_name(sshd_server.client_key.name + ".pub"), "exec")
    try:
        db = tmp_path / "stall.sqlite"
        start = time.monotonic()
        line = _refused(capsys, ["--host", server.host(sshd_server.user), "--identity", str(sshd_server.client_key),
                                 "--known-hosts", str(server.known_hosts), "--python", sys.executable,
                                 "--ssh-timeout", "2"], db)
        elapsed = time.monotonic() - start
    finally:
        server.close()
    assert server.stalled.is_set()
    assert f"no answer to the request to run {sys.executable!r} within 2 s during the Python check" in line
    assert "--ssh-timeout" in line and not db.exists()
    assert elapsed < 30  # the bug: no end (> 45 s)


def test_ssh_timeout_must_be_positive(sshd_server, tmp_path, capsys):
    line = _refused(capsys, host_args(sshd_server) + ["--ssh-timeout", "0"], tmp_path / "t.sqlite")
    assert line.startswith("parapipe: error: --ssh-timeout: must be a positive number of seconds, got 0.0")


def _cli_subprocess(args):
    """``python -m parapipe ARGS`` from the checkout (its logging set up as users get it)."""
    return subprocess.run([sys.executable, "-m", "parapipe", *args], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def test_connection_dropped_while_profiling_is_one_line_on_stderr(sshd_server, tmp_path):
    proxy = FaultProxy(sshd_server.port, drop_after_s=1.5)  # in the checks, the agent upload or the measuring
    key_type, key_b64 = sshd_server.host_key_line.split()[1:3]
    known = known_hosts_for(tmp_path / "known_hosts", proxy.port, key_type, key_b64)
    host = f"{sshd_server.user}@127.0.0.1:{proxy.port}"
    try:
        done = _cli_subprocess(["profile", "squeezenet", "--soc", "host", "--db", str(tmp_path / "drop.sqlite"),
                                "--pus", "cpu0", "--host", host, "--identity", str(sshd_server.client_key),
                                "--known-hosts", str(known), "--python", sys.executable])
    finally:
        proxy.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr  # no paramiko log line, no traceback
    assert lines[0].startswith(f"parapipe: error: connection to {host} lost during "), lines
    assert "does not run" not in lines[0]


def test_host_that_stalls_on_a_channel_open_is_one_line_on_stderr(sshd_server, tmp_path):
    server = StallingServer(sshd_server.client_key.with_name(sshd_server.client_key.name + ".pub"), "open")
    try:
        done = _cli_subprocess(["soc", "detect", "--out", str(tmp_path / "x.yaml"), "--host",
                                server.host(sshd_server.user), "--identity", str(sshd_server.client_key),
                                "--known-hosts", str(server.known_hosts), "--python", sys.executable,
                                "--ssh-timeout", "2"])
    finally:
        server.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "no answer to opening an SSH channel within 2 s during the Python check" in lines[0]
    assert not (tmp_path / "x.yaml").exists()
