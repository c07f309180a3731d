"""Commands on SSH exec channels with deadlines: :class:`ExecChannels` opens channels on one
:class:`~parapipe.remote.connection.SshConnection`, sends exec requests and streams a command's stdin, stdout and
stderr.

paramiko waits without a deadline for the answer to an exec request; here opening the channel, the request
and the command share one deadline, and the server's answers to the channel open and to the request must
also come within the connection's ``request_timeout_s`` (10 s by default), so a server that stalls is named
within seconds whatever the command's own deadline. stdout and stderr are read while stdin is written
(reading them only at the end deadlocks on large outputs: https://github.com/paramiko/paramiko/issues/448 and
https://github.com/paramiko/paramiko/issues/1778), and a command that
ends without an exit status because the connection died raises
:class:`~parapipe.remote.liveness.ConnectionLost` instead of returning -1.
"""
from __future__ import annotations

import logging
import select
import shlex
import socket
import time
from typing import Any, List, Optional, Tuple

import paramiko

from parapipe.errors import HostError
from parapipe.remote.connection import SETTLE_S, SshConnection, settle_s
from parapipe.remote.liveness import call_with_deadline

__all__ = ["ExecChannels", "said"]

log = logging.getLogger(__name__)

_CHUNK_NBYTES = 1 << 16


def said(output: Any, rc: int, limit: int = 300) -> str:
    """What a remote command printed, for a one-line message: ``output`` (str or UTF-8 bytes) with every run of
    whitespace, newlines included, made one space, cut to its last ``limit`` characters; ``"exit RC"`` if it
    printed nothing. Start-up files of the login shell may have printed lines before the command's own (a
    warning on stderr): they stay, so the reader sees them, but the command's last words are kept."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
    text = " ".join(text.split())
    return text[-limit:] if text else f"exit {rc}"


class ExecChannels:
    """Exec channels (commands) on one SSH connection, every step with a deadline.

    Parameters
    ----------
    connection : SshConnection
        A connected connection; its ``step_timeout_s`` is the default deadline of a step.
    """

    def __init__(self, connection: SshConnection):
        self.connection = connection

    def open_channel(self, timeout_s: float, what: str) -> paramiko.Channel:
        """A new session channel, opened within ``timeout_s`` and the connection's ``request_timeout_s``
        (the shorter); ``what`` names the step for messages when the connection names none.

        Raises
        ------
        HostError
            No answer in time, a refusal (the host's MaxSessions), :class:`ConnectionLost`.
        """
        conn = self.connection
        transport = conn.transport(what)
        timeout_s = min(timeout_s, conn.request_timeout_s)
        try:
            return transport.open_session(timeout=max(timeout_s, 0.001))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if conn.lost_reason(settle_s(exc)) is not None:
                raise conn.failure(exc, "", "", what) from None
            if "timeout" in str(exc).lower():
                raise HostError(f"{conn.spec}: no answer to opening an SSH channel within {timeout_s:g} s"
                                f"{conn.during() or ' during ' + what}; the SSH server stalls: check the host, "
                                "or raise the timeout (--ssh-timeout)") from None
            raise HostError(f"{conn.spec}: cannot open an SSH channel ({exc}); check the host's MaxSessions "
                            "and that it is still up") from None

    def request(self, channel: paramiko.Channel, kind: str, arg: str, deadline: float, what: str,
                timeout_s: float) -> None:
        """Send an exec or subsystem request on ``channel`` and wait for the answer until ``deadline``
        (``time.monotonic()``; ``timeout_s`` is the step's whole deadline, for the message), and at most the
        connection's ``request_timeout_s``."""
        conn = self.connection
        call = channel.exec_command if kind == "exec" else channel.invoke_subsystem
        left = deadline - time.monotonic()
        if left > conn.request_timeout_s:
            left = timeout_s = conn.request_timeout_s
        try:
            call_with_deadline(lambda: call(arg), left, channel.close)
        except TimeoutError:
            raise HostError(f"{conn.spec}: no answer to the request to run {what} within {timeout_s:g} s"
                            f"{conn.during()}; the SSH server stalls: check the host, or raise the timeout "
                            "(--ssh-timeout)") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            if conn.lost_reason(settle_s(exc)) is not None:
                raise conn.failure(exc, "", "", f"the start of {what}") from None
            raise HostError(f"{conn.spec}: cannot start {what} ({exc}); check the host") from None

    def open_exec_channel(self, argv: List[str], timeout_s: Optional[float] = None) -> paramiko.Channel:
        """Start a long-running command (arguments shell-quoted) and return its channel, stderr kept apart.

        Opening the channel and the exec request share the deadline ``timeout_s`` (default the connection's
        ``step_timeout_s``), and the server answers each within the connection's ``request_timeout_s``; the
        caller then reads and writes the channel with its own deadlines.

        Raises
        ------
        HostError
            If no channel can be opened, the command is refused, or the server does not answer in time.
        """
        timeout_s = timeout_s or self.connection.step_timeout_s
        deadline = time.monotonic() + timeout_s
        channel = self.open_channel(timeout_s, f"the start of {argv[0]!r}")
        self.request(channel, "exec", _quote(argv), deadline, repr(argv[0]), timeout_s)
        return channel

    # -----------------------------------------------------------------------------------------------commands
    def exec(self, argv: List[str], timeout_s: float, stdin_data: Optional[bytes] = None) -> Tuple[int, str]:
        """Run a command; every argument is shell-quoted, stdout and stderr are read together.

        Parameters
        ----------
        argv : list of str
            Program and arguments (quoted with :func:`shlex.quote`, so no shell syntax is interpreted).
        timeout_s : float
            Deadline for the whole command (opening the channel and the exec request included), s; the
            server's answers to the channel open and to the exec request each come within the connection's
            ``request_timeout_s`` too.
        stdin_data : bytes, optional
            Sent to the command's stdin, which is then closed (it is closed at once without data).

        Returns
        -------
        (int, str)
            Exit status (-1 if the command died of a signal) and the combined output (UTF-8, undecodable
            bytes replaced).

        Raises
        ------
        HostError
            The command does not finish within ``timeout_s``; :class:`ConnectionLost` if the connection dies.
        """
        rc, output, _ = self.run(argv, timeout_s, stdin=stdin_data, combine=True)
        return rc, output.decode("utf-8", "replace")

    def run(self, argv: List[str], timeout_s: float, stdin: Any = None, combine: bool = False,
            idle: bool = False) -> Tuple[int, bytes, bytes]:
        """Run a command and return ``(exit status, stdout, stderr)`` as bytes (see :meth:`exec`).

        Parameters
        ----------
        stdin : bytes or binary file, optional
            Streamed to the command's stdin, which is then closed.
        combine : bool
            Read stderr into stdout (stderr is then ``b""``).
        idle : bool
            ``timeout_s`` bounds the silence (no byte sent or received) instead of the whole command: for
            transfers, whose duration grows with their size.

        Raises
        ------
        HostError
            As :meth:`exec`.
        """
        conn = self.connection
        command = _quote(argv)
        what = repr(argv[0])
        default_step = f"the command {what}"
        deadline = time.monotonic() + timeout_s
        channel = self.open_channel(timeout_s, default_step)
        out: List[bytes] = []
        err: List[bytes] = []
        source = _Source(stdin)
        try:
            channel.set_combine_stderr(combine)
            self.request(channel, "exec", command, deadline, what, timeout_s)
            if source.done:
                channel.shutdown_write()
            while not channel.exit_status_ready():
                moved = False
                if not source.done:  # waits at most a slice for the channel's window
                    channel.settimeout(max(0.0, min(deadline - time.monotonic(), 0.05)))
                    try:
                        moved = source.sent(channel.send(source.chunk())) > 0
                    except socket.timeout:
                        pass
                    if source.done:
                        channel.shutdown_write()
                moved = _drain(channel, out, err) or moved
                if idle and moved:
                    deadline = time.monotonic() + timeout_s
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                conn.transport(default_step)
                if not moved and source.done:
                    select.select([channel], [], [], min(left, 0.2))
            # Output may still be in flight after the status: read until EOF (short, bounded wait).
            end = min(deadline, time.monotonic() + 1.0)
            while not (channel.eof_received or channel.closed) and time.monotonic() < end:
                if not _drain(channel, out, err):
                    select.select([channel], [], [], 0.05)
            _drain(channel, out, err)
            rc = channel.recv_exit_status()
            # No status and no EOF from the server: the connection died (paramiko closes the channels a
            # moment before it marks the transport inactive). Say so instead of returning -1.
            if rc == -1 and conn.lost_reason(0.0 if channel.eof_received else SETTLE_S) is not None:
                conn.transport(default_step)
        except TimeoutError:
            raise HostError(f"{conn.spec}: command {command[:200]!r} did not finish within {timeout_s:g} s"
                            f"{' of silence' if idle else ''}{conn.during()}; raise the timeout or check the "
                            "host") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise conn.failure(exc, f"{what} failed", "check the host and the network", default_step) from None
        finally:
            channel.close()
            source.close()
        log.debug("%s: %s -> %d", conn.spec, command[:200], rc)
        return rc, b"".join(out), b"".join(err)


def _quote(argv: List[str]) -> str:
    return " ".join(shlex.quote(str(arg)) for arg in argv)


def _drain(channel: paramiko.Channel, out: List[bytes], err: List[bytes]) -> bool:
    """Read what the channel holds (stdout, stderr); True if anything came."""
    got = False
    while channel.recv_ready():
        out.append(channel.recv(_CHUNK_NBYTES))
        got = True
    while channel.recv_stderr_ready():
        err.append(channel.recv_stderr(_CHUNK_NBYTES))
        got = True
    return got


class _Source:
    """A command's stdin: bytes, a binary file, or nothing; handed out in chunks."""

    def __init__(self, data: Any):
        self._stream = None if data is None or isinstance(data, (bytes, bytearray, memoryview)) else data
        self._pending = memoryview(b"" if self._stream is not None or data is None else bytes(data))
        self.done = False
        self._refill()

    def _refill(self) -> None:
        if not self._pending and self._stream is not None:
            self._pending = memoryview(self._stream.read(_CHUNK_NBYTES * 16))
        self.done = not self._pending

    def chunk(self) -> memoryview:
        return self._pending[:_CHUNK_NBYTES]

    def sent(self, nbytes: int) -> int:
        self._pending = self._pending[nbytes:]
        self._refill()
        return nbytes

    def close(self) -> None:
        self._pending = memoryview(b"")


