"""Client side of the on-device agent protocol (``device_agents/agent.py``): JSON lines with deadlines.

One :class:`AgentClient` talks to one agent process, either a local subprocess (:meth:`AgentClient.local`) or
an agent started over SSH (:meth:`parapipe.remote.host.RemoteHost.start_agent`). Both sit behind a small
transport interface (send bytes, receive bytes with a deadline, keep a tail of the agent's stderr), so every
read has a deadline and a dead or stuck agent becomes a :class:`~parapipe.errors.HostError` instead of a hang.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, Deque, Dict, Optional

from parapipe._paths import data_dir
from parapipe.remote.liveness import ConnectionLost
from parapipe.errors import ExecutionError, HostError

__all__ = ["AgentClient", "AgentRequestError", "ChannelTransport", "agent_path", "STDERR_TAIL_LINES"]

log = logging.getLogger(__name__)

#: Lines of the agent's stderr kept for error messages (enough for a Python traceback's last frames).
STDERR_TAIL_LINES = 20
#: Longest wait of one receive slice; bounds how late a deadline is noticed (seconds).
_SLICE_S = 0.2
#: Bytes read per system call.
_CHUNK_NBYTES = 1 << 16


def agent_path() -> Path:
    """Path of the agent program shipped with parapipe (``device_agents/agent.py``)."""
    return data_dir("device_agents") / "agent.py"


class AgentRequestError(ExecutionError):
    """The agent answered a request with ``ok: false``.

    Attributes
    ----------
    op : str
        The request's op.
    error_type : str
        The agent's error type (``BadRequest``, ``UnknownOp``, ``ProviderUnavailable``, ``PinError``,
        ``ModelError``, ``RunError``, ``Internal``; see ``device_agents/agent.py``).
    """

    def __init__(self, message: str, op: str, error_type: str):
        super().__init__(message)
        self.op = op
        self.error_type = error_type


class _StderrTail:
    """Thread-safe bounded tail of a byte stream, split into lines."""

    def __init__(self) -> None:
        self._lines: Deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._partial = b""
        self._lock = threading.Lock()

    def feed(self, data: bytes) -> None:
        with self._lock:
            data = self._partial + data
            *complete, self._partial = data.split(b"\n")
            for line in complete:
                self._lines.append(line.decode("utf-8", "replace").rstrip())
            self._partial = self._partial[-4096:]

    def text(self) -> str:
        with self._lock:
            lines = list(self._lines)
            if self._partial:
                lines.append(self._partial.decode("utf-8", "replace"))
        return " | ".join(line for line in lines if line.strip())


class _ProcessTransport:
    """A local agent subprocess: stdin/stdout pipes, stderr drained by a thread."""

    def __init__(self, argv: list, env: Optional[Dict[str, str]] = None):
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, env=env)
        except OSError as exc:
            raise HostError(f"cannot start the local agent with {argv[0]}: {exc}; "
                            "pass an existing Python interpreter (python=...)") from None
        # the three pipes exist: Popen was given PIPE for each
        self._stdin, self._stdout, self._stderr = _pipe(self._proc.stdin), _pipe(self._proc.stdout), \
            _pipe(self._proc.stderr)
        os.set_blocking(self._stdin.fileno(), False)  # partial writes, so sends keep their deadline
        self.tail = _StderrTail()
        self._stderr_thread = threading.Thread(target=self._drain_stderr, name="agent-stderr", daemon=True)
        self._stderr_thread.start()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stdout, selectors.EVENT_READ)
        self.where = f"local agent (pid {self._proc.pid})"

    def _drain_stderr(self) -> None:
        for line in iter(self._stderr.readline, b""):
            self.tail.feed(line)
            log.debug("agent: %s", line.decode("utf-8", "replace").rstrip())

    def send(self, data: bytes, deadline: float) -> None:
        fd = self._stdin.fileno()
        view = memoryview(data)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_WRITE)
            while view:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("sending the request")
                if sel.select(min(left, _SLICE_S)):
                    try:
                        written = os.write(fd, view[:_CHUNK_NBYTES])
                    except BlockingIOError:
                        continue
                    view = view[written:]

    def recv(self, wait_s: float) -> Optional[bytes]:
        if not self._selector.select(wait_s):
            return None
        return os.read(self._stdout.fileno(), _CHUNK_NBYTES)

    def exit_status(self) -> Optional[int]:
        return self._proc.poll()

    def lost_reason(self) -> Optional[str]:
        return None  # a local pipe has no connection to lose

    def close(self, timeout_s: float) -> Optional[int]:
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            status = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s did not exit within %g s; killing it", self.where, timeout_s)
            self._proc.kill()
            status = self._proc.wait()
        self._stderr_thread.join(timeout=1.0)
        self._selector.close()
        self._stdout.close()
        self._stderr.close()
        return status


def _pipe(stream: Optional[IO[bytes]]) -> IO[bytes]:
    """A pipe of a Popen given ``PIPE`` (never None then; a None is a bug here, not a user's error)."""
    if stream is None:
        raise RuntimeError("the agent subprocess lacks a pipe that Popen was asked for")
    return stream


class ChannelTransport:
    """An agent on an SSH exec channel (paramiko ``Channel``); stderr is drained on every receive slice."""

    def __init__(self, channel: Any, where: str, lost_reason: Optional[Callable[[], Optional[str]]] = None):
        self._channel = channel
        self.tail = _StderrTail()
        self.where = where
        self._lost_reason = lost_reason

    def lost_reason(self) -> Optional[str]:
        """Why the SSH connection died, or None while it lives (or when nobody can tell)."""
        return self._lost_reason() if self._lost_reason is not None else None

    def _drain_stderr(self) -> None:
        while self._channel.recv_stderr_ready():
            self.tail.feed(self._channel.recv_stderr(_CHUNK_NBYTES))

    def send(self, data: bytes, deadline: float) -> None:
        """Write ``data`` to the agent's stdin by ``deadline`` (a ``time.monotonic()`` value, s); raises
        TimeoutError past it, BrokenPipeError when the channel is closed."""
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("sending the request")
            self._channel.settimeout(min(left, _SLICE_S))
            try:
                sent = self._channel.send(view[:_CHUNK_NBYTES])
            except socket.timeout:
                self._drain_stderr()
                continue
            if sent == 0:
                raise BrokenPipeError("the SSH channel is closed")
            view = view[sent:]

    def recv(self, wait_s: float) -> Optional[bytes]:
        """Up to one chunk of the agent's stdout, waiting at most ``wait_s`` seconds: None when nothing came,
        ``b""`` at end of stream."""
        self._drain_stderr()
        self._channel.settimeout(wait_s)
        try:
            data = self._channel.recv(_CHUNK_NBYTES)
        except socket.timeout:
            return None
        finally:
            self._drain_stderr()
        return data

    def exit_status(self) -> Optional[int]:
        """The agent's exit status, or None while it runs."""
        if self._channel.exit_status_ready():
            return self._channel.recv_exit_status()
        return None

    def close(self, timeout_s: float) -> Optional[int]:
        """Close the agent's stdin, wait up to ``timeout_s`` seconds for its exit status, close the channel;
        the status, or None when none came in time."""
        try:
            self._channel.shutdown_write()
        except (OSError, EOFError):
            pass
        deadline = time.monotonic() + timeout_s
        eof = False
        while not self._channel.exit_status_ready() and time.monotonic() < deadline:
            if eof:
                time.sleep(0.01)  # output ended; the exit status follows in a moment
            elif self.recv(_SLICE_S) == b"":
                eof = True
        status = self.exit_status()
        self._channel.close()
        return status


class AgentClient:
    """Send requests to one on-device agent and read its replies, each with a deadline.

    Build it with :meth:`local` or :meth:`parapipe.remote.host.RemoteHost.start_agent`; use it as a context
    manager (or call :meth:`close`).

    Examples
    --------
    >>> with AgentClient.local() as agent:                      # doctest: +SKIP
    ...     agent.request("hello")["providers"]
    ['CPUExecutionProvider']
    """

    def __init__(self, transport: Any):
        self._transport = transport
        self._buffer = b""
        self._next_id = 1
        self._closed = False

    @property
    def where(self) -> str:
        """Where the agent runs, for messages (``"local agent (pid N)"`` or ``"user@host:port"``)."""
        return self._transport.where

    @classmethod
    def local(cls, python: str = sys.executable, agent: Optional[Path] = None,
              env: Optional[Dict[str, str]] = None) -> "AgentClient":
        """Start the agent as a local subprocess.

        Parameters
        ----------
        python : str
            Interpreter that runs the agent (needs numpy and onnxruntime); default: this one.
        agent : Path, optional
            Agent program; default :func:`agent_path`.
        env : dict, optional
            Environment of the subprocess; default: this process's.

        Raises
        ------
        HostError
            If the interpreter cannot be started.
        """
        argv = [python, "-u", str(agent or agent_path())]
        return cls(_ProcessTransport(argv, env))

    def request(self, op: str, timeout_s: float = 60,
                on_event: Optional[Callable[[Dict[str, Any]], None]] = None, **body: Any) -> Dict[str, Any]:
        """Send one request and return the agent's reply.

        Parameters
        ----------
        op : str
            The op (``"hello"``, ``"profile"``, ``"transfer"``, ``"run_pipeline"``, ``"clean"``, ``"bye"``;
            see ``device_agents/agent.py``).
        timeout_s : float
            Deadline for sending the request and receiving its reply, in seconds. With ``on_event``, every
            event from the agent restarts it: it then bounds the silence, not the whole request.
        on_event : callable(dict), optional
            Called with each event line (``{"id", "event", ...}``) the agent sends for this request before
            its reply (``run_pipeline`` sends progress); without it events are skipped.
        **body
            The op's fields (JSON-serialisable), e.g. ``model_b64=..., pu={"cpus": [0], "threads": 1}``.

        Returns
        -------
        dict
            The reply: ``{"id": int, "ok": True, ...}`` with the op's results.

        Raises
        ------
        AgentRequestError
            (an :class:`~parapipe.errors.ExecutionError`) if the agent answers ``ok: false``.
        HostError
            If the agent is closed, has exited, or does not answer within ``timeout_s`` (the agent is then
            stopped, since its state is unknown). The message ends with the tail of the agent's stderr.
            :class:`~parapipe.remote.liveness.ConnectionLost` if the SSH connection died meanwhile.
        """
        if self._closed:
            raise HostError(f"{self.where}: the agent is closed; start a new one")
        if "id" in body or "op" in body:
            raise TypeError("'id' and 'op' are set by AgentClient.request, not passed as fields")
        request_id = self._next_id
        self._next_id += 1
        line = json.dumps({"op": op, "id": request_id, **body}).encode("utf-8") + b"\n"
        deadline = time.monotonic() + timeout_s
        try:
            self._transport.send(line, deadline)
            reply = self._read_reply(request_id, deadline, timeout_s if on_event else None, on_event)
        except TimeoutError:
            self._abort()
            self._raise_if_lost(op)
            raise HostError(f"{self.where}: the agent did not answer {op!r} within {timeout_s:g} s and was "
                            "stopped; raise timeout_s for slow work or check the host"
                            f"{self._tail()}") from None
        except (BrokenPipeError, ConnectionError, EOFError, OSError) as exc:
            status = self._abort()
            self._raise_if_lost(op)
            raise HostError(f"{self.where}: the agent exited (status {status}) during {op!r}: {exc}; check "
                            f"numpy and onnxruntime on the host{self._tail()}") from None
        if not reply.get("ok"):
            error = reply.get("error") or {}
            error_type = str(error.get("type", "Unknown"))
            raise AgentRequestError(f"{self.where}: agent op {op!r} failed: {error_type}: "
                                    f"{error.get('message', reply)}", op, error_type)
        return reply

    def _read_reply(self, request_id: int, deadline: float, silence_s: Optional[float] = None,
                    on_event: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                raw, self._buffer = self._buffer[:newline], self._buffer[newline + 1:]
                if not raw.strip():
                    continue
                try:
                    reply = json.loads(raw)
                except ValueError:
                    # A remote login script may print text before the agent starts; keep it for messages.
                    log.warning("%s: ignoring a non-JSON line: %.200r", self.where, raw)
                    self._transport.tail.feed(raw + b"\n")
                    continue
                if not isinstance(reply, dict):
                    continue
                if "event" in reply and "ok" not in reply:
                    if reply.get("id") == request_id and on_event is not None:
                        if silence_s is not None:
                            deadline = time.monotonic() + silence_s
                        on_event(reply)
                    continue
                if reply.get("id") == request_id or (reply.get("id") is None and not reply.get("ok")):
                    return reply
                log.debug("%s: skipping a reply to request %r", self.where, reply.get("id"))
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("waiting for the reply")
            data = self._transport.recv(min(left, _SLICE_S))
            if data == b"":
                raise EOFError("end of output")
            if data:
                self._buffer += data

    def _raise_if_lost(self, op: str) -> None:
        reason = self._transport.lost_reason()
        if reason is not None:
            raise ConnectionLost(self.where, f"the agent's {op!r} request", reason) from None

    def _tail(self) -> str:
        tail = self._transport.tail.text()
        return f"; agent stderr: {tail}" if tail else "; the agent wrote nothing to stderr"

    def _abort(self) -> Optional[int]:
        self._closed = True
        try:
            return self._transport.close(timeout_s=1.0)
        except (OSError, EOFError) as exc:
            log.debug("%s: closing after an error: %s", self.where, exc)
            return None

    def close(self, timeout_s: float = 5.0) -> Optional[int]:
        """Say ``bye`` (if the agent still runs), close its input and wait for it to exit.

        Returns
        -------
        int or None
            The agent's exit status (0 after a clean ``bye``), None if unknown. Never raises for a dead agent.
        """
        if self._closed:
            return None
        try:
            self.request("bye", timeout_s=timeout_s)
        except HostError as exc:
            log.debug("%s: bye failed: %s", self.where, exc)
            return None
        self._closed = True
        return self._transport.close(timeout_s=timeout_s)

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
