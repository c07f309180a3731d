"""ppexec: the pipelined executor of parapipe, as one self-contained package (stdlib, numpy, onnxruntime).

It is the ONE implementation of the executor. It lives in ``device_agents/`` so that ``parapipe deploy`` can
ship it to a board inside a bundle, next to the agent (which imports it from its own folder); ``pip install
parapipe`` installs it as the ordinary top-level package ``ppexec``, which parapipe imports. Its errors are
:class:`PipelineError` (a run failed) and :class:`PlanError` (a bad plan, frame or option); parapipe's CLI turns
them into its one-line messages. Keep it to Python 3.8 and onnxruntime 1.19 APIs, and never import parapipe
here; at import time it needs only the standard library, numpy and onnxruntime (the tests check both); an
optional runtime (``openvino``) is imported lazily inside its adapter.

- :mod:`.plan`: :class:`PUBinding`, :class:`Task`, :class:`ExecutionPlan`, :func:`validate_plan`,
  :func:`plan_to_doc`, :func:`plan_from_doc`.
- :mod:`.runtimes`: runtime adapters (``onnxruntime``, ``openvino``): :data:`ADAPTERS`,
  :func:`get_adapter`, :func:`probe_all`.
- :mod:`.session`: ONNX Runtime provider resolution, pinning, session options.
- :mod:`.executor`: :class:`PipelineExecutor`, :func:`run_pipeline` (workers in :mod:`.worker`; the replicas of
  a replicated stage pull frames from one queue, or take them as :mod:`.dispatch` deals them).
- :mod:`.queues`: :class:`~.queues.BoundedQueue`, the stage queues.
- :mod:`.metrics`: :class:`RunMetrics`, :class:`TraceEvent`, :func:`compute_metrics`, Chrome traces.
- :mod:`.reference`: :func:`reference_outputs`, :func:`max_abs_diff`, :func:`within_tolerance`.
- :mod:`.report`: :class:`RunReport`, the one report of a verified run.
- :mod:`.bundle_run`: run a deploy bundle on the board (used by the agent's ``run_pipeline`` op).
"""
from .errors import DEFAULT_ERRORS, ErrorKinds, PipelineError, PlanError
from .executor import PipelineExecutor, run_pipeline
from .metrics import RunMetrics, TraceEvent, chrome_trace, compute_metrics, write_chrome_trace
from .plan import ExecutionPlan, PUBinding, Task, plan_from_doc, plan_to_doc, validate_plan
from .reference import max_abs_diff, reference_outputs, within_tolerance
from .report import RunReport
from .runtimes import ADAPTERS, get_adapter, probe_all
from . import bundle_run  # noqa: E402  (imports the modules above)

__all__ = [
    "DEFAULT_ERRORS", "ErrorKinds", "PipelineError", "PlanError", "PipelineExecutor", "run_pipeline",
    "RunMetrics", "TraceEvent", "chrome_trace", "compute_metrics", "write_chrome_trace", "ExecutionPlan",
    "PUBinding", "Task", "plan_from_doc", "plan_to_doc", "validate_plan", "max_abs_diff", "reference_outputs",
    "within_tolerance", "RunReport", "bundle_run", "ADAPTERS", "get_adapter", "probe_all",
]
