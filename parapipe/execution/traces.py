"""Reading the Chrome traces that runs write (``parapipe run --trace``, ``parapipe deploy``).

The trace format and the metrics are the executor's (:mod:`ppexec.metrics`); this module only turns a file into
:class:`ppexec.metrics.TraceEvent` objects with parapipe's one-line errors.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

from ppexec.metrics import TraceEvent, trace_events_from_chrome

from parapipe.errors import input_error

__all__ = ["read_chrome_trace", "read_run_trace"]


def read_run_trace(path) -> Tuple[List[TraceEvent], Dict[str, Any]]:
    """The task executions of a Chrome trace file written by :func:`ppexec.metrics.write_chrome_trace`, and its
    ``otherData`` (model, point, measured throughput ...; empty for traces without it).

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
    info = doc.get("otherData")
    return events, dict(info) if isinstance(info, dict) else {}


def read_chrome_trace(path) -> List[TraceEvent]:
    """The task executions of a Chrome trace file (:func:`read_run_trace` without the run's facts).

    Raises
    ------
    InputError
        As :func:`read_run_trace`.
    """
    return read_run_trace(path)[0]
