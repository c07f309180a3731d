"""ppexec: the pipelined executor of parapipe, as one self-contained package (stdlib, numpy, onnxruntime).

It is the ONE implementation of the executor. It lives in ``device_agents/`` so that ``parapipe deploy`` can
ship it to a board inside a bundle, next to the agent (which imports it from its own folder); ``pip install
parapipe`` installs it as the ordinary top-level package ``ppexec``, which parapipe imports. Its errors are
:class:`.errors.PlanError` (a bad plan, frame or option) and :class:`.errors.PipelineError` (a run failed);
parapipe's CLI turns them into its one-line messages. Keep it to Python 3.8 and onnxruntime 1.19 APIs, and never
import parapipe here; its modules need only the standard library, numpy and onnxruntime (the tests check both);
an optional runtime (``openvino``) is imported lazily inside its adapter.

This file imports nothing: importing a light module (:mod:`.dispatch`, :mod:`.metrics`, :mod:`.frames`,
:mod:`.plan`, :mod:`.errors`) does not import onnxruntime. Import the module you need:

- :mod:`.plan`: :class:`~.plan.PUBinding`, :class:`~.plan.Task`, :class:`~.plan.ExecutionPlan`,
  :func:`~.plan.validate_plan`, :func:`~.plan.plan_to_doc`, :func:`~.plan.plan_from_doc`.
- :mod:`.errors`: :class:`~.errors.PlanError`, :class:`~.errors.PipelineError`.
- :mod:`.frames`: :func:`~.frames.draw_frames`, the one rule for seeded random inputs.
- :mod:`.runtimes`: runtime adapters (``onnxruntime``, ``openvino``): ``ADAPTERS``, ``get_adapter``,
  ``probe_all``.
- :mod:`.precision`: the precisions a PU may compute in, how adapters report what ran, and the output
  tolerance of each (``precision_tolerance``).
- :mod:`.session`: ONNX Runtime provider resolution, pinning, session options.
- :mod:`.executor`: :class:`~.executor.PipelineExecutor`, :func:`~.executor.run_pipeline` (workers in
  :mod:`.worker`; the replicas of a replicated stage pull frames from one queue, or take them as
  :mod:`.dispatch` deals them).
- :mod:`.queues`: :class:`~.queues.BoundedQueue`, the stage queues.
- :mod:`.metrics`: :class:`~.metrics.RunMetrics`, :class:`~.metrics.TraceEvent`, ``compute_metrics``, Chrome
  traces.
- :mod:`.reference`: ``reference_outputs``, ``max_abs_diff``, ``within_tolerance``.
- :mod:`.report`: :class:`~.report.RunReport`, the one report of a verified run.
- :mod:`.dvfs`: operating points (cpufreq policies, devfreq devices) set for a run or a measurement, read back
  and restored (standard library only): :func:`~.dvfs.applied`, :func:`~.dvfs.restore_leftover`.
- :mod:`.bundle_run`: run a deploy bundle on the board (used by the agent's ``run_pipeline`` op); its
  run-and-verify, ``run_verified``, also runs ``parapipe run``'s plan in memory.
"""
