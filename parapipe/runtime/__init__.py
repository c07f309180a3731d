"""Pipelined execution of mappings with ONNX Runtime: per-PU sub-models, pinned worker threads, metrics.

- :mod:`~parapipe.runtime.plan`: :class:`PUBinding`, :class:`Task`, :class:`ExecutionPlan`,
  :class:`StageSpec`, :func:`build_plan`, :func:`validate_plan`.
- :mod:`~parapipe.runtime.executor`: :class:`PipelineExecutor`, :func:`run_pipeline`.
- :mod:`~parapipe.runtime.metrics`: :class:`RunMetrics`, :class:`TraceEvent`, :func:`write_chrome_trace`.
- :mod:`~parapipe.runtime.reference`: :func:`reference_outputs`, :func:`max_abs_diff`.
"""
from parapipe.runtime.executor import PipelineExecutor, run_pipeline
from parapipe.runtime.metrics import RunMetrics, TraceEvent, chrome_trace, write_chrome_trace
from parapipe.runtime.plan import ExecutionPlan, PUBinding, StageSpec, Task, build_plan, validate_plan
from parapipe.runtime.reference import max_abs_diff, reference_outputs

__all__ = [
    "PipelineExecutor", "run_pipeline", "RunMetrics", "TraceEvent", "chrome_trace", "write_chrome_trace",
    "ExecutionPlan", "PUBinding", "StageSpec", "Task", "build_plan", "validate_plan",
    "max_abs_diff", "reference_outputs",
]
