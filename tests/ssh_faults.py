"""Faulty SSH peers on loopback for the liveness tests, bounded in time and stopping by themselves.

* :class:`FaultProxy`: a TCP proxy on 127.0.0.1 in front of the real sshd (tests/sshd.py) that forwards until
  told to :meth:`~FaultProxy.stall` (bytes stop moving both ways, the sockets stay open: a host or network
  that hangs) or to :meth:`~FaultProxy.drop` (both sockets reset: a host that reboots, a cable pulled), or
  until ``drop_after_s`` after its first connection.
* :class:`StallingServer`: a paramiko SSH server on 127.0.0.1 that authenticates like sshd but never answers
  a channel open (``stall="open"``) or an exec request (``stall="exec"``) until released or ``stall_s`` passed.
"""
from __future__ import annotations

import select
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional

import paramiko

#: Longest life of a fault peer, s: it closes everything after this even if a test forgets to.
MAX_LIFE_S = 120.0


def known_hosts_for(path: Path, port: int, key_type: str, key_b64: str) -> Path:
    """Write a known_hosts file naming ``[127.0.0.1]:port`` with that key; returns ``path``."""
    path.write_text(f"[127.0.0.1]:{port} {key_type} {key_b64}\n")
    return path


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.1)
    return sock


class FaultProxy:
    """TCP proxy ``127.0.0.1:port -> 127.0.0.1:target_port`` that can stall or drop its connections."""

    def __init__(self, target_port: int, drop_after_s: Optional[float] = None):
        self.target_port = target_port
        self._drop_after_s = drop_after_s  # drop this long after the first connection arrived
        self._listener = _listen()
        self.port = self._listener.getsockname()[1]
        self._stalled = threading.Event()
        self._closed = threading.Event()
        self._pairs: List[tuple] = []
        self._lock = threading.Lock()
        self._born = time.monotonic()
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def _expired(self) -> bool:
        return self._closed.is_set() or time.monotonic() - self._born > MAX_LIFE_S

    def _accept(self) -> None:
        while not self._expired():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._pairs.append((client, upstream))
                if self._drop_after_s is not None and len(self._pairs) == 1:
                    timer = threading.Timer(self._drop_after_s, self.drop)
                    timer.daemon = True
                    timer.start()
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        self.close()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        try:
            while not self._expired():
                if self._stalled.is_set():
                    time.sleep(0.05)  # nothing moves; the kernel keeps acknowledging what arrives
                    continue
                ready, _, _ = select.select([a, b], [], [], 0.05)
                for sock in ready:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    peer[sock].sendall(data)
        except OSError:
            return
        finally:
            self._reset(a, b)

    @staticmethod
    def _reset(*socks: socket.socket) -> None:
        for sock in socks:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
                sock.close()
            except OSError:
                pass

    def stall(self) -> None:
        """Stop moving bytes (both ways); the connections stay open."""
        self._stalled.set()

    def drop(self) -> None:
        """Reset every connection (the client sees ECONNRESET) and refuse new ones."""
        self._closed.set()
        with self._lock:
            for pair in self._pairs:
                self._reset(*pair)

    def close(self) -> None:
        """Stop the proxy (idempotent)."""
        self.drop()
        try:
            self._listener.close()
        except OSError:
            pass


class _Interface(paramiko.ServerInterface):
    def __init__(self, server: "StallingServer"):
        self._server = server

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = key.get_base64() == self._server.client_key_b64
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if self._server.stall == "open":
            self._server.stalled.set()
            self._server.release.wait(self._server.stall_s)  # the server's transport thread hangs here
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        if self._server.stall == "exec":
            self._server.stalled.set()
            self._server.release.wait(self._server.stall_s)
        return False


class StallingServer:
    """A paramiko SSH server on 127.0.0.1 that hangs on a channel open or an exec request.

    Parameters
    ----------
    client_pub : Path
        The accepted client public key (OpenSSH ``.pub`` file).
    stall : str
        ``"open"`` or ``"exec"``.
    stall_s : float
        Longest hang, s (the hang also ends at :meth:`close`).

    Attributes
    ----------
    port : int
    known_hosts : Path
        A known_hosts file listing this server's host key.
    stalled : threading.Event
        Set once a request hangs.
    """

    def __init__(self, client_pub: Path, stall: str, stall_s: float = 30.0):
        assert stall in ("open", "exec")
        self.stall, self.stall_s = stall, stall_s
        self.client_key_b64 = client_pub.read_text().split()[1]
        self.release = threading.Event()
        self.stalled = threading.Event()
        self._dir = Path(tempfile.mkdtemp(prefix="parapipe-stall-"))
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self._dir / "host")],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._host_key = paramiko.Ed25519Key.from_private_key_file(str(self._dir / "host"))
        self._listener = _listen()
        self.port = self._listener.getsockname()[1]
        self.known_hosts = known_hosts_for(self._dir / "known_hosts", self.port, "ssh-ed25519",
                                           self._host_key.get_base64())
        self._transports: List[paramiko.Transport] = []
        self._born = time.monotonic()
        threading.Thread(target=self._accept, name="stalling-sshd", daemon=True).start()

    def _accept(self) -> None:
        while not self.release.is_set() and time.monotonic() - self._born < MAX_LIFE_S:
            try:
                sock, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            transport = paramiko.Transport(sock)
            transport.add_server_key(self._host_key)
            self._transports.append(transport)
            try:
                transport.start_server(server=_Interface(self))
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()
        self.close()

    def host(self, user: str) -> str:
        return f"{user}@127.0.0.1:{self.port}"

    def close(self) -> None:
        """Release the hang and stop (idempotent)."""
        self.release.set()
        try:
            self._listener.close()
        except OSError:
            pass
        for transport in self._transports:
            transport.close()
