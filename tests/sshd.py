"""A real OpenSSH server on loopback for tests (no mocks): its own host key, port, and authorized_keys.

Use the session-scoped fixture :func:`sshd_server` (import it into a test module or ``conftest.py``:
``from sshd import sshd_server``), or :func:`start_sshd` directly. The server runs ``sshd -D -f CONFIG -e``
with ``StrictModes no`` and ``UsePAM no``, listens on a free port of 127.0.0.1 only, accepts one generated
ed25519 client key for the current user, and offers SFTP (unless ``start_sshd(sftp=False)``). Its sessions get
a HOME of their own whose ``.bashrc`` prints :data:`SHELL_NOISE` on stderr before every command, as a board's
start-up files often do; :func:`without_shell_noise` takes that line out of a command's output. It needs the
Debian package ``openssh-server`` (``.ci/apt-packages.txt``); when ``/usr/sbin/sshd`` is missing the fixture
FAILS with the install command instead of skipping.
"""
from __future__ import annotations

import getpass
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

SSHD = os.environ.get("PARAPIPE_TEST_SSHD", "/usr/sbin/sshd")
#: Seconds to wait for sshd to accept connections (it starts in well under a second on the CI machine).
START_TIMEOUT_S = 20.0
#: What the sessions' start-up file prints on stderr before every command (see :func:`start_sshd`).
SHELL_NOISE = ("parapipe-test: a warning from the login shell's start-up files "
               "(pyenv: cannot rehash: shims isn't writable)")


def without_shell_noise(output: str) -> str:
    """``output`` of a command run on a :func:`start_sshd` server, less the line its login shell printed."""
    return "".join(line for line in output.splitlines(keepends=True) if line.rstrip("\n") != SHELL_NOISE)


@dataclass
class SshServer:
    """A running loopback sshd.

    Attributes
    ----------
    address, port : str, int
        Where it listens (127.0.0.1 and a free port).
    user : str
        The user it accepts (the one running the tests).
    client_key : Path
        Private key (ed25519, no passphrase) in its authorized_keys.
    other_key : Path
        Another private key, NOT authorized (for "wrong identity" tests).
    known_hosts : Path
        A known_hosts file that lists this server's host key (under ``[127.0.0.1]:port``).
    host_key_line : str
        That known_hosts line.
    workdir : Path
        Temporary folder with the config, keys and log.
    process : subprocess.Popen
        The ``sshd -D`` process.
    """

    address: str
    port: int
    user: str
    client_key: Path
    other_key: Path
    known_hosts: Path
    host_key_line: str
    workdir: Path
    process: subprocess.Popen

    @property
    def host(self) -> str:
        """``user@127.0.0.1:port``, the form ``HostSpec.parse`` reads."""
        return f"{self.user}@{self.address}:{self.port}"

    def log_tail(self, nbytes: int = 3000) -> str:
        """The end of sshd's log (stderr), for failure messages."""
        path = self.workdir / "sshd.log"
        return path.read_text(errors="replace")[-nbytes:] if path.exists() else ""

    def stop(self) -> None:
        """Stop sshd (SIGTERM, then SIGKILL after 5 s) and remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def start_sshd(extra_path: Optional[str] = None, sftp: bool = True, sftp_command: Optional[str] = None,
               force_command: Optional[str] = None) -> SshServer:
    """Start a loopback sshd and wait until it accepts connections.

    Parameters
    ----------
    extra_path : str, optional
        Folder put first on the sessions' PATH (``SetEnv``), e.g. the test interpreter's ``bin``.
    sftp : bool
        Offer SFTP (``Subsystem sftp internal-sftp``); False leaves the line out, as on Dropbear images
        without ``sftp-server``: the server then refuses the subsystem.
    sftp_command : str, optional
        Command line of the SFTP subsystem instead of ``internal-sftp`` (run by the user's shell), e.g. the
        server of ``tests/sftp_no_posix_rename.py``.
    force_command : str, optional
        ``ForceCommand``: every exec and subsystem request runs this instead (an SFTP-only account).

    Raises
    ------
    RuntimeError
        If sshd is not installed (with the apt-get command) or does not start (with its log).
    """
    if not os.path.exists(SSHD):
        raise RuntimeError(f"{SSHD} is missing: the SSH tests need a real OpenSSH server; install it with "
                           "'apt-get install -y openssh-server' (listed in .ci/apt-packages.txt)")
    if shutil.which("ssh-keygen") is None:
        raise RuntimeError("ssh-keygen is missing; install it with 'apt-get install -y openssh-client'")
    workdir = Path(tempfile.mkdtemp(prefix="parapipe-sshd-"))
    os.chmod(workdir, 0o700)
    host_key = workdir / "ssh_host_ed25519_key"
    client_key = workdir / "client_ed25519"
    other_key = workdir / "other_ed25519"
    _keygen(host_key, "parapipe-test-host")
    _keygen(client_key, "parapipe-test-client")
    _keygen(other_key, "parapipe-test-other")
    authorized = workdir / "authorized_keys"
    authorized.write_text((workdir / "client_ed25519.pub").read_text())
    os.chmod(authorized, 0o600)
    if os.geteuid() == 0:
        # sshd refuses to start without its privilege-separation folder (Debian creates it at boot only).
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    # The sessions' HOME: its .bashrc (which Debian's bash reads for every SSH command) warns on stderr each time,
    # as a board's start-up files often do (pyenv on a read-only shims folder prints "cannot rehash"). So no test
    # depends on the account's own start-up files, and every remote step must keep such noise out of what it parses.
    home = workdir / "home"
    home.mkdir(mode=0o700)
    (home / ".bashrc").write_text(f"echo {shlex.quote(SHELL_NOISE)} >&2\n")
    port = free_port()
    path = os.pathsep.join(p for p in (extra_path, "/usr/local/bin", "/usr/bin", "/bin") if p)
    config = workdir / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        f"PidFile {workdir / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized}",
        "StrictModes no",
        "UsePAM no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        f"AllowUsers {getpass.getuser()}",
        *([f"Subsystem sftp {sftp_command or 'internal-sftp'}"] if sftp else []),
        *([f"ForceCommand {force_command}"] if force_command else []),
        # One SetEnv line (sshd keeps only the first): the sessions' HOME and caches (ONNX Runtime's device files,
        # matplotlib's font list) are this server's folders, not the account's ~ and ~/.cache.
        f"SetEnv HOME={home} PATH={path} XDG_CACHE_HOME={workdir / 'cache'} MPLCONFIGDIR={workdir / 'matplotlib'}",
        "MaxSessions 20",
        "LogLevel VERBOSE",
        "",
    ]))
    check = subprocess.run([SSHD, "-t", "-f", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check.returncode != 0:
        raise RuntimeError(f"sshd rejects the test config: {check.stdout.decode(errors='replace').strip()}")
    log = open(workdir / "sshd.log", "wb")
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log,
                               stdin=subprocess.DEVNULL)
    log.close()
    host_pub = (workdir / "ssh_host_ed25519_key.pub").read_text().split()
    host_key_line = f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}"
    known_hosts = workdir / "known_hosts"
    known_hosts.write_text(host_key_line + "\n")
    server = SshServer("127.0.0.1", port, getpass.getuser(), client_key, other_key, known_hosts,
                       host_key_line, workdir, process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            tail = server.log_tail()
            server.stop()
            raise RuntimeError(f"sshd exited with status {process.returncode}: {tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                if sock.recv(4).startswith(b"SSH-"):
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            tail = server.log_tail()
            server.stop()
            raise RuntimeError(f"sshd did not accept connections within {START_TIMEOUT_S:g} s: {tail}")
        time.sleep(0.05)


def _serve(**options) -> Iterator[SshServer]:
    try:
        server = start_sshd(**options)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd_server() -> Iterator[SshServer]:
    """Session-scoped loopback sshd. Its sessions' PATH has only the system folders: tests start remote programs
    by explicit path (``--python sys.executable``), never through the login shell's PATH. Fails without sshd."""
    yield from _serve()


@pytest.fixture(scope="session")
def sshd_server_without_sftp() -> Iterator[SshServer]:
    """Session-scoped loopback sshd with no ``Subsystem sftp`` line (a Dropbear image without sftp-server)."""
    yield from _serve(sftp=False)
