"""Run metrics of the pipelined executor: task trace, throughput, latency percentiles, busy times, Chrome
trace.

The implementation is the executor core's (``device_agents/ppexec/metrics.py``, see
:mod:`parapipe.runtime._core`). All times are seconds from ``time.perf_counter()``, relative to the start of
the run they belong to.
"""
from __future__ import annotations

import json
from typing import List

from parapipe.errors import input_error
from parapipe.runtime._core import core

TraceEvent = core.metrics.TraceEvent
RunMetrics = core.metrics.RunMetrics
compute_metrics = core.metrics.compute_metrics
chrome_trace = core.metrics.chrome_trace
write_chrome_trace = core.metrics.write_chrome_trace

trace_events_from_chrome = core.metrics.trace_events_from_chrome

__all__ = ["TraceEvent", "RunMetrics", "compute_metrics", "chrome_trace", "write_chrome_trace",
           "trace_events_from_chrome", "read_chrome_trace"]


def read_chrome_trace(path) -> List[TraceEvent]:
    """The task executions of a Chrome trace file written by :func:`write_chrome_trace` (``parapipe run
    --trace``, ``parapipe deploy``).

    Raises
    ------
    InputError
        The file cannot be read, is not JSON, is not a parapipe trace, or holds no task event.
    """
    fix = "pass a trace written by 'parapipe run --trace' or 'parapipe deploy'"
    try:
        with open(path) as handle:
            doc = json.load(handle)
    except OSError as exc:
        raise input_error(str(path), None, f"cannot read the trace ({exc.strerror or exc})", fix) from None
    except ValueError as exc:
        raise input_error(str(path), None, f"not valid JSON ({exc})", fix) from None
    try:
        events = trace_events_from_chrome(doc)
    except ValueError as exc:
        raise input_error(str(path), "traceEvents", str(exc), fix) from None
    if not events:
        raise input_error(str(path), "traceEvents", "no task events", fix)
    return events
