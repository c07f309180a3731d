"""SSH liveness: a keepalive that wants answers, deadlines on paramiko's blocking requests, lost connections.

paramiko waits without a deadline for the answer to a channel request (``exec``, ``subsystem``: its
``Channel._wait_for_event``), and its own keepalive (``Transport.set_keepalive``) asks for no answer, so a server
that stops answering while the TCP connection stays up hangs the client forever
(https://github.com/paramiko/paramiko/issues/1815).
:class:`Keepalive` does what OpenSSH's ``ServerAliveInterval``/``ServerAliveCountMax`` do: it sends
``keepalive@openssh.com`` with want-reply every interval and closes the transport when no answer came for
``count_max`` intervals, so every blocked wait on that connection ends. :func:`call_with_deadline` bounds one
blocking call. :class:`ConnectionLost` is the one-line error of a connection that died during a step.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from parapipe.errors import HostError

__all__ = ["ConnectionLost", "Keepalive", "call_with_deadline", "KEEPALIVE_S", "KEEPALIVE_COUNT_MAX"]

log = logging.getLogger(__name__)

#: Seconds between keepalive requests (the common ``ServerAliveInterval 15`` of OpenSSH client configurations).
KEEPALIVE_S = 15.0
#: Unanswered intervals after which the connection counts as lost (OpenSSH's ``ServerAliveCountMax`` default).
KEEPALIVE_COUNT_MAX = 3
#: Longest wait of one slice of the keepalive thread (bounds how late a stop or an answer is noticed), s.
_SLICE_S = 0.1


class ConnectionLost(HostError):
    """The SSH connection to a host died during a step: ``"connection to HOST lost during STEP (REASON); ..."``.

    Attributes
    ----------
    host : str
        ``user@address:port``.
    step : str
        What was going on, e.g. ``"the Python check"``, ``"the upload"``, ``"the run"``.
    reason : str
        Why it counts as lost (the transport's error, or unanswered keepalives).
    """

    def __init__(self, host: str, step: str, reason: str,
                 remedy: str = "check the host and the network, then try again"):
        super().__init__(f"connection to {host} lost during {step} ({reason}); {remedy}")
        self.host, self.step, self.reason = host, step, reason


def call_with_deadline(call: Callable[[], Any], timeout_s: float, on_timeout: Callable[[], None]) -> Any:
    """Run a blocking call in a helper thread and give up after ``timeout_s`` seconds.

    Parameters
    ----------
    call : callable
        The blocking call (e.g. ``lambda: channel.exec_command(cmd)``); its exception is re-raised here.
    timeout_s : float
        Deadline, s.
    on_timeout : callable
        Called when the deadline passes; it must make ``call`` return (closing the channel wakes paramiko's
        wait), so the helper thread ends.

    Returns
    -------
    Whatever ``call`` returns.

    Raises
    ------
    TimeoutError
        If ``call`` did not return within ``timeout_s``.
    """
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    helper = threading.Thread(target=target, name="ssh-request", daemon=True)
    helper.start()
    helper.join(max(0.0, timeout_s))
    if helper.is_alive():
        on_timeout()
        helper.join(1.0)
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class Keepalive:
    """Keepalive requests that want an answer; the transport is closed after ``count_max`` silent intervals.

    Parameters
    ----------
    transport : paramiko.Transport
        An active, authenticated client transport.
    interval_s : float
        Seconds between requests (default :data:`KEEPALIVE_S`).
    count_max : int
        Intervals without an answer after which the connection is closed as lost (default
        :data:`KEEPALIVE_COUNT_MAX`).

    Attributes
    ----------
    lost_reason : str or None
        Set when this keepalive closed the connection, e.g. ``"no answer to keepalives for 45 s"``.
    """

    def __init__(self, transport: Any, interval_s: float = KEEPALIVE_S, count_max: int = KEEPALIVE_COUNT_MAX):
        if interval_s <= 0 or count_max < 1:
            raise ValueError(f"keepalive interval {interval_s} s and count {count_max} must be positive")
        self._transport = transport
        self.interval_s = float(interval_s)
        self.count_max = int(count_max)
        self.lost_reason: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ssh-keepalive", daemon=True)

    def start(self) -> "Keepalive":
        """Start the keepalive thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending keepalives (the thread ends within a slice, or when the transport closes)."""
        self._stop.set()

    def _probe(self, answered: threading.Event) -> None:
        try:
            # Returns at the answer (OpenSSH and Dropbear answer "failure": any answer proves the peer lives),
            # or once the transport is closed.
            self._transport.global_request("keepalive@openssh.com", wait=True)
        except Exception as exc:  # a transport closing under the request; the main loop sees it inactive
            log.debug("keepalive request failed: %s", exc)
        answered.set()

    def _run(self) -> None:
        silent_s = self.interval_s * self.count_max
        while not self._stop.wait(self.interval_s):
            if not self._transport.is_active():
                return
            answered = threading.Event()
            threading.Thread(target=self._probe, args=(answered,), name="ssh-keepalive-probe",
                             daemon=True).start()
            sent = time.monotonic()
            while not answered.wait(_SLICE_S):
                if self._stop.is_set() or not self._transport.is_active():
                    return
                if time.monotonic() - sent >= silent_s:
                    self.lost_reason = (f"no answer to keepalives for {silent_s:g} s: the host or the "
                                        "network stopped")
                    log.info("%s; closing the connection", self.lost_reason)  # the caller's error says it
                    self._transport.close()
                    return
