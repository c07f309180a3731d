"""SSH hosts against a REAL OpenSSH server on loopback (tests/sshd.py), and the agent over SSH."""
from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import pwd
import re
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from parapipe.remote.agent_client import AgentClient, AgentRequestError, agent_path
from parapipe.remote.connection import DEFAULT_REQUEST_TIMEOUT_S, DEFAULT_STEP_TIMEOUT_S
from parapipe.remote.host import RemoteHost
from parapipe.remote.hostspec import HostSpec
from parapipe.remote.liveness import ConnectionLost
from parapipe.errors import HostError, InputError
import sshd
from ssh_faults import FaultProxy, StallingServer, known_hosts_for
from sshd import SHELL_NOISE, free_port, without_shell_noise
from test_agent import model_b64, tiny_conv_model

pytestmark = pytest.mark.ssh
sshd_server = sshd.sshd_server  # the session-scoped loopback sshd fixture
sshd_server_without_sftp = sshd.sshd_server_without_sftp


def spec_for(server, **overrides) -> HostSpec:
    options = dict(identity=server.client_key, known_hosts=server.known_hosts)
    options.update(overrides)
    return HostSpec.parse(server.host, **options)


@pytest.fixture(scope="module")
def host(sshd_server):
    with RemoteHost(spec_for(sshd_server)) as connected:
        yield connected


# ------------------------------------------------------------------------------------------------ HostSpec
@pytest.mark.parametrize("text, user, address, port", [
    ("root@127.0.0.1", "root", "127.0.0.1", 22),
    ("pi@board.local:2222", "pi", "board.local", 2222),
    ("khadas@[fe80::1]:22022", "khadas", "fe80::1", 22022),
    ("a.b-c_d@host-1", "a.b-c_d", "host-1", 22),
])
def test_host_spec_parses(text, user, address, port):
    spec = HostSpec.parse(text, identity="/k", trust_new_host=True)
    assert (spec.user, spec.address, spec.port) == (user, address, port)
    assert str(spec.identity) == "/k" and spec.trust_new_host and spec.known_hosts is None


@pytest.mark.parametrize("text", ["127.0.0.1", "root@", "@host", "root@host:", "root@host:99999",
                                  "root@host:0", "root@ho st", "root@host:22:1", "a@b@c", ""])
def test_host_spec_rejects_bad_forms(text):
    with pytest.raises(InputError) as info:
        HostSpec.parse(text)
    message = str(info.value)
    assert message.startswith("--host: ") and message.endswith("; use user@address[:port]")


# ------------------------------------------------------------------------------------------------ commands
def test_exec_quotes_every_argument(host):
    rc, output = host.exec(["echo", "a  b", "$HOME", ";", "rm", "-rf", "*", "'q'"], timeout_s=30)
    assert rc == 0
    assert SHELL_NOISE in output  # the test server's login shell warns on stderr, as many boards' do
    assert without_shell_noise(output) == "a  b $HOME ; rm -rf * 'q'\n"
    rc, output = host.exec(["sh", "-c", "echo out; echo err >&2; exit 7"], timeout_s=30)
    assert rc == 7 and without_shell_noise(output).splitlines() == ["out", "err"]


def test_exec_reads_large_combined_output_without_deadlock(host):
    code = "import sys; sys.stdout.write('o' * 3000000); sys.stdout.flush(); sys.stderr.write('e' * 3000000)"
    rc, output = host.exec([sys.executable, "-c", code], timeout_s=60)
    assert rc == 0
    output = without_shell_noise(output)
    assert len(output) == 6_000_000 and output.count("o") == 3_000_000


def test_exec_sends_stdin(host):
    data = os.urandom(1 << 20).hex().encode()  # 2 MiB of text
    rc, output = host.exec(["sha256sum"], timeout_s=60, stdin_data=data)
    assert rc == 0 and without_shell_noise(output).split()[0] == hashlib.sha256(data).hexdigest()


def test_command_killed_by_a_signal_is_exit_minus_one_on_a_live_connection(host):
    rc, output = host.exec(["sh", "-c", "echo before; kill -9 $$"], timeout_s=30)
    assert (rc, without_shell_noise(output)) == (-1, "before\n")
    assert host.is_connected()


def test_exec_deadline(host):
    with pytest.raises(HostError, match=r"did not finish within 0.5 s"):
        host.exec(["sleep", "30"], timeout_s=0.5)
    assert host.exec(["true"], timeout_s=30)[0] == 0  # the connection is still usable


# ------------------------------------------------------------------------------------------host keys / auth
def test_unknown_host_key_is_refused_with_the_remedy(sshd_server, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    with pytest.raises(HostError) as info:
        RemoteHost(spec_for(sshd_server, known_hosts=known_hosts)).connect()
    message = str(info.value)
    assert message.startswith(f"{sshd_server.host}: host key (ssh-ed25519 SHA256:")
    assert f"not in {known_hosts}; verify it and pass --trust-new-host, or add it with ssh-keyscan" in message
    assert known_hosts.read_text() == ""


def test_trust_new_host_saves_the_key_then_plain_checking_accepts_it(sshd_server, tmp_path):
    known_hosts = tmp_path / "new" / "known_hosts"
    with RemoteHost(spec_for(sshd_server, known_hosts=known_hosts, trust_new_host=True)) as remote:
        assert remote.exec(["true"], timeout_s=30)[0] == 0
    assert known_hosts.read_text().split() == sshd_server.host_key_line.split()
    with RemoteHost(spec_for(sshd_server, known_hosts=known_hosts)) as remote:
        rc, output = remote.exec(["echo", "again"], timeout_s=30)
        assert (rc, without_shell_noise(output)) == (0, "again\n")


def test_changed_host_key_is_refused_even_with_trust_new_host(sshd_server, tmp_path):
    other_pub = (sshd_server.other_key.parent / (sshd_server.other_key.name + ".pub")).read_text().split()
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{sshd_server.port} {other_pub[0]} {other_pub[1]}\n")
    before = known_hosts.read_text()
    with pytest.raises(HostError, match=r"host key changed .*ssh-keygen -R"):
        RemoteHost(spec_for(sshd_server, known_hosts=known_hosts, trust_new_host=True)).connect()
    assert known_hosts.read_text() == before


def test_wrong_identity_is_a_host_error(sshd_server):
    with pytest.raises(HostError) as info:
        RemoteHost(spec_for(sshd_server, identity=sshd_server.other_key)).connect()
    message = str(info.value)
    assert "authentication failed" in message and "authorized_keys" in message and "\n" not in message


def test_missing_identity_file_is_an_input_error(sshd_server, tmp_path):
    with pytest.raises(InputError, match=r"^--identity: .*does not exist"):
        RemoteHost(spec_for(sshd_server, identity=tmp_path / "no_key")).connect()


def test_dead_port_is_a_host_error_without_waiting_for_the_timeout(sshd_server):
    spec = HostSpec.parse(f"{sshd_server.user}@127.0.0.1:{free_port()}", identity=sshd_server.client_key,
                          known_hosts=sshd_server.known_hosts)
    with pytest.raises(HostError) as info:
        RemoteHost(spec, connect_timeout_s=30).connect()
    message = str(info.value)
    assert "cannot connect" in message and "refused" in message.lower()  # refused at once, not timed out
    assert f"sshd listens on port {spec.port}" in message


# ------------------------------------------------------------------------------------------------ files
def test_upload_mkdir_sha256_remove_with_spaces_in_the_path(host, tmp_path):
    local = tmp_path / "local file.bin"
    local.write_bytes(os.urandom(300_000))
    local.chmod(0o640)
    root = posixpath.join(str(tmp_path), "remote dir")
    folder = posixpath.join(root, "sub dir", "it's here")
    host.mkdir_p(folder)
    host.mkdir_p(folder)  # idempotent
    remote = posixpath.join(folder, "copy of file.bin")
    host.upload(local, remote)
    assert host.sha256(remote) == hashlib.sha256(local.read_bytes()).hexdigest()
    assert stat.S_IMODE(host.sftp().stat(remote).st_mode) == 0o640
    rc, output = host.exec(["wc", "-c", remote], timeout_s=30)
    assert rc == 0 and without_shell_noise(output).split()[0] == "300000"
    assert [n for n in host.sftp().listdir(folder)] == ["copy of file.bin"]  # no temporary left behind
    host.remove_tree(root)
    assert host.sha256(remote) is None
    assert not os.path.exists(root)
    with pytest.raises(ValueError, match="refusing"):
        host.remove_tree("~")


# ------------------------------------------------------------------------------------------------ agent
@pytest.mark.slow
def test_agent_over_ssh_matches_the_local_agent(host, caplog):
    from parapipe.remote.remote_agent import agent_digest, agent_files, host_cache_dir

    digest, _ = agent_digest(agent_files())
    # the agent's folder is under PARAPIPE_HOST_CACHE_DIR (tests/conftest.py: a temporary folder, never ~/.cache)
    assert os.environ["PARAPIPE_HOST_CACHE_DIR"] == host_cache_dir() and posixpath.isabs(host_cache_dir())
    folder = posixpath.join(host_cache_dir(), f"agent-{digest[:12]}")
    host.remove_tree(folder)
    b64 = model_b64(tiny_conv_model(channels_out=16, size=64))
    body = dict(model_b64=b64, pu={"cpus": [0], "threads": 1}, warmup=3, repeats=15)
    with caplog.at_level(logging.INFO, logger="parapipe.remote.remote_agent"):
        agent = host.start_agent(python=sys.executable)
    assert sum("uploaded the agent" in r.getMessage() for r in caplog.records) == 1
    assert host.sha256(posixpath.join(folder, "agent.py")) == hashlib.sha256(agent_path().read_bytes()).hexdigest()
    try:
        hello = agent.request("hello", timeout_s=60)
        assert hello["protocol_version"] == 1 and "CPUExecutionProvider" in hello["providers"]
        # ppexec/ travelled with the agent: its runtime adapters serve a PU profiled through OpenVINO
        assert hello["runtimes"]["openvino"]["available"] is True, hello["runtimes"]
        ov = agent.request("profile", timeout_s=120, **dict(body, pu={"cpus": [0], "threads": 1,
                                                                       "runtime": "openvino"}))
        assert ov["runtime"] == "openvino" and ov["runtime_info"]["device"] == "CPU" and ov["median_s"] > 0
        remote = agent.request("profile", timeout_s=120, **body)
        with pytest.raises(AgentRequestError) as info:  # an error reply, and the agent keeps serving
            agent.request("nope", timeout_s=30)
        assert info.value.error_type == "UnknownOp"
        assert agent.request("hello", timeout_s=60)["ok"]
    finally:
        assert agent.close() == 0
    with AgentClient.local() as local_agent:
        local = local_agent.request("profile", timeout_s=120, **body)
    assert remote["provider"] == local["provider"] == "CPUExecutionProvider"
    assert remote["inputs"] == local["inputs"]
    # Same model, same request: the same number of timed runs, each a positive duration (no wall-clock bound:
    # the machine is shared, so the two medians may differ by any factor)
    assert remote["repeats"] == local["repeats"] == body["repeats"]
    assert 0 < remote["median_s"] <= remote["p90_s"] and 0 < local["median_s"] <= local["p90_s"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="parapipe.remote.remote_agent"):
        again = host.start_agent(python=sys.executable)  # same version already there: no upload
    assert not any("uploaded the agent" in r.getMessage() for r in caplog.records)
    assert again.request("hello")["ok"]
    again.close()


def _fake_python(tmp_path, name, body):
    script = tmp_path / name
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_start_agent_without_onnxruntime_names_the_remedy(host, tmp_path):
    # -S: no site-packages, so numpy and onnxruntime do not import (a bare board).
    bare = _fake_python(tmp_path, "bare python3", f'exec {sys.executable} -S "$@"')
    with pytest.raises(HostError) as info:
        host.start_agent(python=bare)
    message = str(info.value)
    assert "do not import" in message
    assert message.endswith("install onnxruntime>=1.19 on 127.0.0.1: pip install onnxruntime")


def test_start_agent_refuses_an_old_python(host, tmp_path):
    old = _fake_python(tmp_path, "python3.6", 'echo "Python 3.6.9"')
    with pytest.raises(HostError, match=r"Python 3\.6\.9, older than 3\.8; install Python >= 3\.8"):
        host.start_agent(python=old)
    with pytest.raises(HostError, match=r"does not run .*install Python >= 3\.8"):
        host.start_agent(python="/nonexistent/python3")


# ------------------------------------------------------------------------------------------------ liveness
@pytest.fixture
def stalling(sshd_server):
    """Factory of paramiko servers that hang on a channel open or an exec request (released at teardown)."""
    servers = []

    def make(stall):
        server = StallingServer(sshd_server.client_key.with_name(sshd_server.client_key.name + ".pub"), stall)
        servers.append(server)
        return server, HostSpec.parse(server.host(sshd_server.user), identity=sshd_server.client_key,
                                      known_hosts=server.known_hosts)

    yield make
    for server in servers:
        server.close()


@pytest.fixture
def proxy_to(tmp_path):
    """Factory: a FaultProxy in front of a loopback sshd, and the HostSpec that reaches sshd through it."""
    proxies = []

    def make(server, **spec_options):
        fault = FaultProxy(server.port)
        proxies.append(fault)
        key_type, key_b64 = server.host_key_line.split()[1:3]
        known = known_hosts_for(tmp_path / f"known_hosts_{fault.port}", fault.port, key_type, key_b64)
        spec = HostSpec.parse(f"{server.user}@127.0.0.1:{fault.port}", identity=server.client_key,
                              known_hosts=known, **spec_options)
        return fault, spec

    yield make
    for fault in proxies:
        fault.close()


@pytest.fixture
def proxy(sshd_server, proxy_to):
    """A FaultProxy in front of the loopback sshd, and the HostSpec that reaches sshd through it."""
    return proxy_to(sshd_server)


def _after(seconds, action):
    timer = threading.Timer(seconds, action)
    timer.daemon = True
    timer.start()
    return timer


def test_exec_request_stall_fails_at_the_command_deadline(stalling):
    server, spec = stalling("exec")
    with RemoteHost(spec) as stalled:
        start = time.monotonic()
        with pytest.raises(HostError) as info:
            stalled.exec(["true"], timeout_s=2)
        elapsed = time.monotonic() - start
    assert server.stalled.is_set()  # the request reached the server and hung there
    message = str(info.value)
    assert message.startswith(f"{spec}: no answer to the request to run 'true' within 2 s") and "\n" not in message
    assert elapsed < 30  # did not hang (the bug: > 45 s)


def test_channel_open_stall_fails_at_the_step_deadline_not_the_connect_timeout(stalling):
    server, spec = stalling("open")
    with RemoteHost(spec, connect_timeout_s=20) as stalled:
        with pytest.raises(HostError) as info:
            stalled.exec(["true"], timeout_s=2)
    assert server.stalled.is_set()
    assert str(info.value).startswith(f"{spec}: no answer to opening an SSH channel within 2 s")


def test_exec_request_stall_in_the_python_check_names_the_step(stalling):
    _, spec = stalling("exec")
    with RemoteHost(spec) as stalled:
        with pytest.raises(HostError, match=r"within 1\.5 s during the Python check; the SSH server stalls"):
            stalled.check_python(sys.executable, timeout_s=1.5)


def test_dropped_connection_is_a_lost_connection_not_exit_minus_one(proxy, tmp_path):
    fault, spec = proxy
    slow = _fake_python(tmp_path, "slow python3", 'sleep 5; echo "Python 3.10.0"')
    with RemoteHost(spec) as remote:
        rc, output = remote.exec(["echo", "through the proxy"], timeout_s=30)
        assert (rc, without_shell_noise(output)) == (0, "through the proxy\n")
        _after(0.5, fault.drop)
        with pytest.raises(ConnectionLost) as info:
            remote.check_python(slow, timeout_s=30)
        assert not remote.is_connected()
    message = str(info.value)
    assert message.startswith(f"connection to {spec} lost during the Python check (")
    assert "does not run" not in message and "exit -1" not in message and "\n" not in message
    assert message.endswith("; check the host and the network, then try again")


def test_dropped_connection_during_a_plain_command(proxy):
    fault, spec = proxy
    with RemoteHost(spec) as remote:
        _after(0.5, fault.drop)
        with pytest.raises(ConnectionLost, match=rf"^connection to {re.escape(str(spec))} lost during the "
                                                 r"command 'sleep' \("):
            remote.exec(["sleep", "10"], timeout_s=30)
        with pytest.raises(ConnectionLost):  # later calls say the same, at once
            remote.exec(["true"], timeout_s=30)


def test_stalled_connection_is_found_by_the_keepalive_before_the_command_deadline(proxy):
    fault, spec = proxy
    with RemoteHost(spec, keepalive_s=0.5, keepalive_count=4) as remote:
        assert remote.exec(["true"], timeout_s=30)[0] == 0
        time.sleep(2.5)  # keepalives are answered while the proxy forwards: the connection stays
        assert remote.is_connected()
        _after(0.3, fault.stall)
        with pytest.raises(ConnectionLost) as info:
            remote.exec(["sleep", "25"], timeout_s=28)
    assert "lost during the command 'sleep' (no answer to keepalives for 2 s" in str(info.value)


def test_sftp_upload_that_stalls_fails_after_the_step_timeout(sshd_server, proxy_to, tmp_path):
    fault, spec = proxy_to(sshd_server, timeout_s=1.5)
    local = tmp_path / "payload.bin"
    local.write_bytes(os.urandom(20_000_000))  # more than the channel window and the socket buffers
    with RemoteHost(spec) as remote:
        assert remote.file_transport == "SFTP"  # the SFTP channel is open before the stall
        fault.stall()
        with pytest.raises(HostError, match=r"cannot upload .*: no answer within 1\.5 s during the upload of "
                                            r"payload\.bin; the host or the network stalls"):
            remote.upload(local, str(tmp_path / "copy.bin"))
    assert not (tmp_path / "copy.bin").exists()


class _StallAfterFirstChunk:
    """A binary stream that stalls the proxy once its first chunk is read (a transfer that stops mid-way)."""

    def __init__(self, fault):
        self._fault, self._reads = fault, 0

    def read(self, nbytes):
        self._reads += 1
        if self._reads == 2:
            self._fault.stall()
        return b"x" * nbytes if self._reads < 50 else b""


def test_exec_channel_transfer_that_stalls_fails_after_its_silence_deadline(sshd_server_without_sftp, proxy_to):
    fault, spec = proxy_to(sshd_server_without_sftp, timeout_s=1.5)
    with RemoteHost(spec) as remote:
        assert remote.file_transport == "exec channel"
        with pytest.raises(HostError, match=r"did not finish within 1\.5 s of silence"):
            remote.run(["sh", "-c", "cat > /dev/null"], timeout_s=1.5, stdin=_StallAfterFirstChunk(fault),
                       idle=True)
        with pytest.raises(HostError, match=r"no answer to opening an SSH channel within 1\.5 s during the "
                                            r"upload of payload\.bin"):
            remote.write_bytes("payload.bin", b"data")  # the next transfer: the server still does not answer


def test_agent_request_over_a_dropped_connection(proxy):
    fault, spec = proxy
    with RemoteHost(spec) as remote:
        agent = remote.start_agent(python=sys.executable)
        assert agent.request("hello", timeout_s=60)["ok"]
        fault.drop()
        with pytest.raises(ConnectionLost) as info:
            agent.request("hello", timeout_s=30)
    assert str(info.value).startswith(f"connection to {spec} lost during the agent's 'hello' request (")


# ------------------------------------------------------------------------------------------------ no SFTP
@pytest.fixture(scope="module")
def bare_host(sshd_server_without_sftp):
    with RemoteHost(spec_for(sshd_server_without_sftp)) as connected:
        yield connected


def test_host_without_sftp_moves_files_through_exec_channels(bare_host, sshd_server_without_sftp, tmp_path):
    assert bare_host.file_transport == "exec channel"
    with pytest.raises(HostError, match=r"SFTP unavailable; enable 'Subsystem sftp'"):
        bare_host.sftp()
    # the home the server gives the user (its passwd entry, as sshd reads it), not this process's $HOME
    assert bare_host.home() == pwd.getpwnam(sshd_server_without_sftp.user).pw_dir
    local = tmp_path / "local file.bin"
    local.write_bytes(os.urandom(3_000_000))  # many channel windows
    local.chmod(0o750)
    folder = posixpath.join(str(tmp_path), "remote dir", "it's here")
    bare_host.mkdir_p(folder)
    bare_host.mkdir_p(folder)
    remote = posixpath.join(folder, "copy of file.bin")
    bare_host.upload(local, remote)
    assert Path(remote).read_bytes() == local.read_bytes()
    assert stat.S_IMODE(os.stat(remote).st_mode) == 0o750
    assert bare_host.sha256(remote) == hashlib.sha256(local.read_bytes()).hexdigest()
    assert os.listdir(folder) == ["copy of file.bin"]  # no temporary left behind
    back = tmp_path / "back.bin"
    bare_host.download(remote, back)
    assert back.read_bytes() == local.read_bytes()
    bare_host.write_bytes(posixpath.join(folder, "mark"), b"kept\n")
    assert Path(folder, "mark").read_bytes() == b"kept\n"
    bare_host.remove(remote)
    bare_host.remove(remote)  # absent is fine
    assert bare_host.sha256(remote) is None
    with pytest.raises(HostError, match="exists and is not a folder|cannot create"):
        bare_host.mkdir_p(posixpath.join(folder, "mark", "sub"))


def test_exec_channel_upload_keeps_the_old_file_when_the_sha256_differs(bare_host, tmp_path):
    remote = tmp_path / "target.bin"
    remote.write_bytes(b"old content")
    local = tmp_path / "new.bin"
    local.write_bytes(b"new content")
    with pytest.raises(HostError) as info:
        bare_host.upload(local, str(remote), sha256=hashlib.sha256(b"something else").hexdigest())
    message = str(info.value)
    assert "arrived with SHA-256 " + hashlib.sha256(b"new content").hexdigest()[:16] in message
    assert remote.read_bytes() == b"old content" and sorted(os.listdir(tmp_path)) == ["new.bin", "target.bin"]


def test_agent_starts_on_a_host_without_sftp(bare_host):
    agent = bare_host.start_agent(python=sys.executable)
    try:
        assert agent.request("hello", timeout_s=60)["ok"]
    finally:
        assert agent.close() == 0


@pytest.mark.parametrize("behaviour", ["garbage", "close", "silent"])
def test_a_port_that_is_not_ssh_is_one_line_without_paramiko_tracebacks(tmp_path, behaviour):
    # a TCP peer that sends something else, closes at once, or says nothing: deploy ends with one error line
    # naming the port (paramiko's transport logged "Error reading SSH protocol banner" with two tracebacks)
    import socket
    import subprocess

    from deploy_mappings import two_stage_doc, write_doc

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(30)
    port = listener.getsockname()[1]
    held = []

    def serve():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        if behaviour == "garbage":
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 20)
            conn.close()
        elif behaviour == "close":
            conn.close()
        else:
            held.append(conn)  # silent: keep it open until the test ends

    threading.Thread(target=serve, daemon=True).start()
    mapping = write_doc(two_stage_doc("squeezenet"), tmp_path / "pareto.json")
    key = tmp_path / "id"
    key.write_text("not used: the connection fails before authentication\n")
    try:
        proc = subprocess.run([sys.executable, "-m", "parapipe", "deploy", "squeezenet", "--mapping", str(mapping),
                               "--host", f"nobody@127.0.0.1:{port}", "--identity", str(key), "--known-hosts",
                               str(tmp_path / "known_hosts"), "--ssh-timeout", "2", "--db", "",
                               "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "paramiko" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("parapipe: error: ") and f"port {port} did not answer as an SSH server" in last, last
    assert [line for line in proc.stderr.strip().splitlines() if not line.startswith("parapipe: ")] == []


# ------------------------------------------------------------------------------- stalls at default deadlines
def test_channel_open_stall_is_named_at_the_request_deadline_not_the_command_deadline(stalling):
    # the command may take its 60 s; the server's answer to the channel open may not
    server, spec = stalling("open")
    with RemoteHost(spec) as stalled:
        start = time.monotonic()
        with pytest.raises(HostError) as info:
            stalled.exec(["true"], timeout_s=DEFAULT_STEP_TIMEOUT_S)
        elapsed = time.monotonic() - start
    assert server.stalled.is_set()
    message = str(info.value)
    assert message.startswith(f"{spec}: no answer to opening an SSH channel within "
                              f"{DEFAULT_REQUEST_TIMEOUT_S:g} s during the command 'true'; the SSH server "
                              "stalls"), message
    assert "\n" not in message
    assert elapsed < DEFAULT_STEP_TIMEOUT_S / 2  # before: the 60 s of the command


def test_exec_request_stall_is_named_at_the_request_deadline_not_the_command_deadline(stalling):
    server, spec = stalling("exec")
    with RemoteHost(spec) as stalled:
        start = time.monotonic()
        with pytest.raises(HostError) as info:
            with stalled.step("the board check"):
                stalled.exec(["uname", "-m"], timeout_s=120)  # deploy's command deadline
        elapsed = time.monotonic() - start
    assert server.stalled.is_set()
    assert str(info.value).startswith(f"{spec}: no answer to the request to run 'uname' within "
                                      f"{DEFAULT_REQUEST_TIMEOUT_S:g} s during the board check; the SSH "
                                      "server stalls"), str(info.value)
    assert elapsed < DEFAULT_STEP_TIMEOUT_S / 2


def test_host_that_stalls_after_the_handshake_is_named_at_the_request_deadline(proxy):
    # the proxy forwards the handshake and authentication, then stops: SFTP's channel never opens (before:
    # the 60 s step deadline, cut short only by the keepalive after 45 s)
    fault, spec = proxy
    with RemoteHost(spec) as remote:
        fault.stall()
        start = time.monotonic()
        with pytest.raises(HostError) as info:
            remote.upload(Path(__file__), "never.py")
        elapsed = time.monotonic() - start
    message = str(info.value)
    assert message.startswith(f"{spec}: no answer to opening an SSH channel within {DEFAULT_REQUEST_TIMEOUT_S:g} "
                              f"s during the upload of {Path(__file__).name}"), message
    assert not isinstance(info.value, ConnectionLost)
    assert elapsed < DEFAULT_STEP_TIMEOUT_S / 2


def test_request_deadline_does_not_bound_the_command(host, tmp_path):
    # a command and a transfer that last longer than the request deadline keep their own deadlines
    connection = host.connection
    saved, connection.request_timeout_s = connection.request_timeout_s, 0.5
    try:
        rc, output = host.exec(["sh", "-c", "sleep 1.5; echo done"], timeout_s=60)
        assert (rc, without_shell_noise(output)) == (0, "done\n")
        rc, out, _ = host.run(["sh", "-c", "sleep 1.5; wc -c"], timeout_s=60, stdin=b"x" * 100_000, idle=True)
        assert (rc, out.split()) == (0, [b"100000"])
        channel = host.open_exec_channel(["sh", "-c", "sleep 1.5; echo started"], timeout_s=60)
        assert channel.recv_exit_status() == 0 and channel.makefile().read() == b"started\n"
        channel.close()
    finally:
        connection.request_timeout_s = saved


# ------------------------------------------------------------------------------- SFTP without posix-rename
def _no_posix_rename_command() -> str:
    from sftp_no_posix_rename import sftp_server_path

    if sftp_server_path() is None:
        pytest.fail("OpenSSH's sftp-server is missing; install it with 'apt-get install -y openssh-sftp-server'",
                    pytrace=False)
    return f"{sys.executable} {Path(__file__).with_name('sftp_no_posix_rename.py')}"


@pytest.fixture(scope="module")
def no_posix_rename_server():
    """A loopback sshd whose SFTP server lacks posix-rename@openssh.com (exec channels work)."""
    yield from sshd._serve(sftp_command=_no_posix_rename_command())


@pytest.fixture(scope="module")
def sftp_only_no_posix_rename_server():
    """The same, as an SFTP-only account: every exec request runs the SFTP server instead (ForceCommand)."""
    command = _no_posix_rename_command()
    yield from sshd._serve(sftp_command=command, force_command=command)


@pytest.mark.parametrize("kind", ["exec", "sftp-only"])
def test_upload_replaces_files_on_an_sftp_server_without_posix_rename(kind, request, tmp_path, caplog):
    server = request.getfixturevalue("no_posix_rename_server" if kind == "exec"
                                     else "sftp_only_no_posix_rename_server")
    folder = tmp_path / "remote dir"
    folder.mkdir()
    target = folder / "model file.onnx"
    local = tmp_path / "local.bin"
    with RemoteHost(spec_for(server)) as remote:
        assert remote.file_transport == "SFTP"
        with pytest.raises(OSError, match="unsupported"):  # the server really lacks it
            remote.sftp().posix_rename(str(tmp_path / "a"), str(tmp_path / "b"))
        with caplog.at_level(logging.INFO, logger="parapipe.remote.remote_fs"):
            for content, mode in ((b"first", 0o640), (b"second, longer", 0o750), (b"third", 0o600)):
                local.write_bytes(content)
                local.chmod(mode)
                remote.upload(local, str(target))  # new, then replacing
                assert target.read_bytes() == content and stat.S_IMODE(target.stat().st_mode) == mode
                assert os.listdir(folder) == [target.name]  # no temporary or old copy left behind
        remote.write_bytes(str(target), b"bytes")
        assert target.read_bytes() == b"bytes"
        assert sum("lacks the posix-rename@openssh.com extension" in r.getMessage() for r in caplog.records) == 1
        (folder / "sub").mkdir()
        with pytest.raises(HostError, match=r"cannot upload to .*sub': it is a folder; move it away"):
            remote.upload(local, str(folder / "sub"))
        assert sorted(os.listdir(folder)) == [target.name, "sub"]


@pytest.mark.parametrize("kind", ["exec", "sftp-only"])
def test_failed_fallback_rename_names_the_missing_extension(kind, request, tmp_path):
    import subprocess

    server = request.getfixturevalue("no_posix_rename_server" if kind == "exec"
                                     else "sftp_only_no_posix_rename_server")
    target = tmp_path / "locked.bin"
    target.write_bytes(b"old")
    local = tmp_path / "new.bin"
    local.write_bytes(b"new")
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here (the test runs as root, whom permissions do not stop)")
    try:
        with RemoteHost(spec_for(server)) as remote:
            with pytest.raises(HostError) as info:
                remote.upload(local, str(target))
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    message = str(info.value)
    assert "\n" not in message
    if kind == "exec":  # mv ran and refused
        assert message.startswith(f"{server.host}: cannot replace {str(target)!r} with mv -f, used as the SFTP "
                                  "server lacks the posix-rename@openssh.com extension (mv: "), message
    else:
        assert f"cannot upload {local} to {str(target)!r}" in message
        assert "the SFTP server lacks the posix-rename@openssh.com extension and the fallback rename failed" in message
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["locked.bin", "new.bin"]
