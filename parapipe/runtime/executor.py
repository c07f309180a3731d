"""The pipelined executor: one pinned worker thread per (stage, PU), bounded queues between stages.

The implementation is the executor core's (``device_agents/ppexec/executor.py``: the same files run on
boards inside deploy bundles); this module binds parapipe's errors to it. A bad plan, frame or option raises
:class:`~parapipe.errors.InputError`; a missing provider, bad CPU ids, a session that cannot be created or a
task that fails raises :class:`~parapipe.errors.ExecutionError` naming the stage, PU and task.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from parapipe.runtime._core import PARAPIPE_ERRORS, core
from parapipe.runtime.metrics import RunMetrics, TraceEvent, write_chrome_trace
from parapipe.runtime.plan import ExecutionPlan

__all__ = ["PipelineExecutor", "run_pipeline", "write_chrome_trace", "RunMetrics", "TraceEvent"]


class PipelineExecutor(core.PipelineExecutor):
    __doc__ = core.PipelineExecutor.__doc__

    def __init__(self, plan: ExecutionPlan, queue_depth: int = 2, fallback_provider: Optional[str] = None,
                 poll_s: float = 0.05, join_timeout_s: float = 5.0, serialise_shared_pus: bool = True):
        super().__init__(plan, queue_depth=queue_depth, fallback_provider=fallback_provider, poll_s=poll_s,
                         join_timeout_s=join_timeout_s, errors=PARAPIPE_ERRORS,
                         serialise_shared_pus=serialise_shared_pus)


def run_pipeline(plan: ExecutionPlan, frames: Iterable[Mapping[str, np.ndarray]], warmup: int = 5,
                 queue_depth: int = 2,
                 fallback_provider: Optional[str] = None) -> Tuple[List[Dict[str, np.ndarray]], RunMetrics]:
    """Run ``frames`` through ``plan`` once, after ``warmup`` unmeasured frames; return outputs and metrics.

    See :func:`parapipe._ppexec.run_pipeline` (``device_agents/ppexec/executor.py``) for the parameters.

    Raises
    ------
    InputError
        Bad plan, frame or ``warmup``.
    ExecutionError
        A stage failed (naming stage, PU and task).
    """
    return core.run_pipeline(plan, frames, warmup=warmup, queue_depth=queue_depth,
                             fallback_provider=fallback_provider, errors=PARAPIPE_ERRORS)
