"""One SSH connection (paramiko): host-key checked, key-authenticated, kept alive, and the one-line errors of a
connection that fails or dies.

Every failure a user can cause (unreachable host, refused key, unknown or changed host key, a host that stops
answering, a dropped connection) becomes a :class:`~parapipe.errors.HostError` whose message is one line: the
cause and the remedy. A connection that dies reads ``"connection to HOST lost during STEP (...)"``
(:class:`~parapipe.remote.liveness.ConnectionLost`), where STEP is what :meth:`SshConnection.step` names.
Host-key checking is always on; trusting a new key is an explicit choice (``trust_new_host``) and the key is
then saved to the known_hosts file.
"""
from __future__ import annotations

import contextlib
import logging
import socket
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import paramiko

from parapipe.errors import HostError, input_error
from parapipe.remote.hostspec import HostSpec
from parapipe.remote.known_hosts import RejectPolicy, TrustAndSavePolicy, UnknownHostKey, fingerprint
from parapipe.remote.liveness import KEEPALIVE_COUNT_MAX, KEEPALIVE_S, ConnectionLost, Keepalive

__all__ = ["SshConnection", "DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_STEP_TIMEOUT_S", "DEFAULT_REQUEST_TIMEOUT_S",
           "PARAMIKO_LOG",
           "PARAMIKO_HANDSHAKE_LOG", "SETTLE_S", "settle_s"]

log = logging.getLogger(__name__)

#: Logger of the connections' paramiko transports. paramiko's transport thread logs a reset socket at ERROR;
#: parapipe reports it as one HostError line, so these records show only when parapipe logs at DEBUG (-vv).
PARAMIKO_LOG = "parapipe.remote.paramiko"
#: paramiko's own transport logger: a transport logs there until connected (when parapipe moves it to
#: PARAMIKO_LOG), e.g. a port that answers but not as an SSH server ("Error reading SSH protocol banner", with
#: two tracebacks, at ERROR), which parapipe reports as one HostError line too.
PARAMIKO_HANDSHAKE_LOG = "paramiko.transport"


class _DebugOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return logging.getLogger("parapipe").isEnabledFor(logging.DEBUG)


for _name in (PARAMIKO_LOG, PARAMIKO_LOG + ".sftp", PARAMIKO_HANDSHAKE_LOG):
    logging.getLogger(_name).addFilter(_DebugOnly())

#: TCP, banner and authentication deadline when neither the caller nor ``HostSpec.timeout_s`` sets one, s.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
#: Deadline of a short remote step (a check, a file operation; a transfer's silence) by default, s.
DEFAULT_STEP_TIMEOUT_S = 60.0
#: Deadline of the server's answer to a channel open or to an exec or subsystem request by default, s, whatever
#: the deadline of the command that follows (a long run keeps its own). Equal to
#: :data:`DEFAULT_CONNECT_TIMEOUT_S`: answering such a request (a session, a fork on the host) is less work for
#: the server than the key exchange and authentication that deadline bounds.
DEFAULT_REQUEST_TIMEOUT_S = DEFAULT_CONNECT_TIMEOUT_S
#: Longest wait for paramiko's transport thread to notice a dead socket after a failed write, s (its reads
#: wake every 0.1 s).
SETTLE_S = 1.0


def settle_s(exc: BaseException) -> float:
    """How long to wait for the transport to notice a dead socket after ``exc``: not at all after a timeout,
    a file error or a refusal the server stated; :data:`SETTLE_S` after a bare socket or EOF error."""
    stated = isinstance(exc, paramiko.SSHException) and str(exc).strip()
    quiet = isinstance(exc, (socket.timeout, TimeoutError, FileNotFoundError, PermissionError))
    return 0.0 if stated or quiet else SETTLE_S


class SshConnection:
    """The SSH connection to one host: connect, keep alive, name the step in progress, explain failures.

    Parameters
    ----------
    spec : HostSpec
        The host and the credentials.
    connect_timeout_s : float, optional
        Deadline for the TCP connection, the SSH banner and authentication, s (default ``spec.timeout_s``,
        else :data:`DEFAULT_CONNECT_TIMEOUT_S`).
    keepalive_s, keepalive_count : float, int
        A keepalive that wants an answer goes out every ``keepalive_s`` seconds; after ``keepalive_count``
        silent intervals the connection counts as lost (OpenSSH's ServerAliveInterval/CountMax; defaults 15 s
        and 3, see :mod:`parapipe.remote.liveness`).

    Attributes
    ----------
    step_timeout_s : float
        Deadline of each short step (file operations, channel requests; a transfer's longest silence), s:
        ``spec.timeout_s`` or :data:`DEFAULT_STEP_TIMEOUT_S`.
    request_timeout_s : float
        Longest wait for the answer to a channel open, an exec or a subsystem request, s (a step's deadline
        caps it when shorter): ``spec.timeout_s`` or :data:`DEFAULT_REQUEST_TIMEOUT_S`. A server that
        accepted the connection but stalls is found after this, not after the step's deadline.
    """

    def __init__(self, spec: HostSpec, connect_timeout_s: Optional[float] = None,
                 keepalive_s: float = KEEPALIVE_S, keepalive_count: int = KEEPALIVE_COUNT_MAX):
        self.spec = spec
        self.connect_timeout_s = float(connect_timeout_s or spec.timeout_s or DEFAULT_CONNECT_TIMEOUT_S)
        self.step_timeout_s = float(spec.timeout_s or DEFAULT_STEP_TIMEOUT_S)
        self.request_timeout_s = float(spec.timeout_s or DEFAULT_REQUEST_TIMEOUT_S)
        self.keepalive_s, self.keepalive_count = keepalive_s, keepalive_count
        self._client: Optional[paramiko.SSHClient] = None
        self._keepalive: Optional[Keepalive] = None
        self._step: Optional[str] = None
        self._lost: Optional[str] = None

    def connect(self) -> None:
        """Open the connection (host key checked, key authentication) and start the keepalive.

        Raises
        ------
        HostError
            Unreachable host, timeout, unknown or changed host key, refused key (one line: cause; remedy).
        InputError
            If the identity file does not exist, or the known_hosts file cannot be read.
        """
        spec = self.spec
        if spec.identity is not None and not Path(spec.identity).is_file():
            raise input_error("--identity", None, f"{spec.identity} does not exist",
                              "pass the private key file that the host accepts")
        client = paramiko.SSHClient()
        known_hosts = spec.known_hosts_path
        if known_hosts.is_file():
            try:
                client.load_host_keys(str(known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise input_error(str(known_hosts), None, f"cannot be read ({exc})",
                                  "fix or move the known_hosts file") from None
        client.set_missing_host_key_policy(TrustAndSavePolicy(known_hosts) if spec.trust_new_host
                                           else RejectPolicy())
        timeout = self.connect_timeout_s
        kwargs: Dict[str, Any] = {"hostname": spec.address, "port": spec.port, "username": spec.user,
                                  "timeout": timeout, "banner_timeout": timeout, "auth_timeout": timeout,
                                  "channel_timeout": timeout}
        if spec.identity is not None:
            kwargs.update(key_filename=str(spec.identity), look_for_keys=False, allow_agent=False)
        try:
            client.connect(**kwargs)
        except (UnknownHostKey, paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            raise _connect_error(exc, spec, known_hosts, timeout) from None
        self._client = client
        transport = client.get_transport()
        transport.set_log_channel(PARAMIKO_LOG)
        self._keepalive = Keepalive(transport, self.keepalive_s, self.keepalive_count).start()
        log.info("connected to %s", spec)

    def close(self) -> None:
        """Stop the keepalive and close the connection (idempotent)."""
        if self._keepalive is not None:
            self._keepalive.stop()
        if self._client is not None:
            self._client.close()
            self._client = None

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Name what the following remote calls do, for messages (``"connection to HOST lost during NAME"``)."""
        previous, self._step = self._step, name
        try:
            yield
        finally:
            self._step = previous

    def in_step(self, name: str) -> "contextlib.AbstractContextManager[None]":
        """:meth:`step` with the caller's step if one is set, else with ``name``."""
        return self.step(self._step or name)

    @property
    def current_step(self) -> Optional[str]:
        """The step named by the innermost :meth:`step`, or None."""
        return self._step

    def during(self) -> str:
        """``" during STEP"`` for messages, or ``""`` outside any step."""
        return f" during {self._step}" if self._step else ""

    def is_connected(self) -> bool:
        """Whether the SSH connection is open and alive (False once closed or lost)."""
        transport = self._client.get_transport() if self._client is not None else None
        return transport is not None and transport.is_active()

    def lost_reason(self, settle_s: float = 0.0) -> Optional[str]:
        """Why the connection died (None while it lives, or before :meth:`connect`).

        ``settle_s``: after a failed call, wait up to this long for paramiko's transport thread to notice a
        dead socket (a write can fail a moment before it does).
        """
        end = time.monotonic() + settle_s
        while self._client is not None and self.is_connected() and time.monotonic() < end:
            time.sleep(0.02)
        if self._client is None or self.is_connected():
            return None
        if self._lost is None:
            transport = self._client.get_transport()
            exc = transport.get_exception() if transport is not None else None
            kept = self._keepalive.lost_reason if self._keepalive is not None else None
            self._lost = kept or (" ".join(str(exc).split()) if exc is not None and str(exc).strip() else
                                  "closed by the host or the network")
        return self._lost

    def failure(self, exc: BaseException, what: str, remedy: str, default_step: str = "the command") -> HostError:
        """The one-line error for ``exc`` raised by a remote call: :class:`ConnectionLost` if the connection
        died, a stall message for a timeout, else ``"HOST: WHAT (exc); REMEDY"``."""
        reason = self.lost_reason(settle_s(exc))
        if reason is not None:
            return ConnectionLost(str(self.spec), self._step or default_step, reason)
        detail = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return HostError(f"{self.spec}: {what}: no answer within {self.step_timeout_s:g} s{self.during()}; "
                             "the host or the network stalls: check them, or raise --ssh-timeout")
        return HostError(f"{self.spec}: {what} ({detail}); {remedy}")

    def transport(self, default_step: str = "the command") -> paramiko.Transport:
        """The live transport.

        Raises
        ------
        HostError
            Not connected; :class:`ConnectionLost` (naming the step, else ``default_step``) once it died.
        """
        if self._client is None:
            raise HostError(f"{self.spec}: not connected; connect first")
        reason = self.lost_reason()
        if reason is not None:
            raise ConnectionLost(str(self.spec), self._step or default_step, reason)
        return self._client.get_transport()


def _connect_error(exc: BaseException, spec: HostSpec, known_hosts: Path, timeout: float) -> HostError:
    """The one-line error of a failed :meth:`SshConnection.connect`."""
    name = str(spec)
    if isinstance(exc, UnknownHostKey):
        return HostError(f"{name}: host key ({exc}) not in {known_hosts}; verify it and pass --trust-new-host, "
                         f"or add it with ssh-keyscan -p {spec.port} {spec.address}")
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostError(f"{name}: host key changed ({exc.key.get_name()} {fingerprint(exc.key)} is not the one "
                         f"in {known_hosts}); if the host was reinstalled, remove the old key with ssh-keygen -R "
                         f"'{spec.host_key_name}' -f {known_hosts}, else do not connect")
    if isinstance(exc, paramiko.PasswordRequiredException):
        return HostError(f"{name}: the key {spec.identity} is encrypted; load it into ssh-agent and pass no "
                         "identity, or pass an unencrypted key")
    if isinstance(exc, paramiko.AuthenticationException):
        key = spec.identity or "the default keys"
        return HostError(f"{name}: authentication failed with {key} ({exc}); check the user name and add the "
                         f"public key to ~{spec.user}/.ssh/authorized_keys on the host")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = sorted({(e.strerror or str(e)) for e in exc.errors.values()}) or ["refused"]
        return HostError(f"{name}: cannot connect ({'; '.join(reasons)}); check the address and that sshd "
                         f"listens on port {spec.port}")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return HostError(f"{name}: no answer within {timeout:g} s; check the address, the network and the "
                         "firewall, or raise the connect timeout")
    if isinstance(exc, socket.gaierror):
        return HostError(f"{name}: cannot resolve {spec.address!r} ({exc.strerror}); check the host name")
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, paramiko.SSHException) and ("protocol banner" in reason or "No existing session" in reason):
        # a TCP peer that closed, sent something else, or said nothing: paramiko's "No existing session"
        # follows a banner that did not come within the timeout
        return HostError(f"{name}: port {spec.port} did not answer as an SSH server within {timeout:g} s "
                         f"({reason}); check the port and that sshd listens on it")
    return HostError(f"{name}: cannot connect ({reason}); check the address and that sshd listens on port "
                     f"{spec.port}")
