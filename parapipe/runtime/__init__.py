"""The computer side of running a mapping: plans of per-PU sub-models, bindings, the board-facts check, runs.

The executor itself is the package :mod:`ppexec` (``device_agents/ppexec``: the same files run on boards inside
deploy bundles); import it directly. Here:

- :mod:`~parapipe.runtime.plan`: :class:`StageSpec`, :func:`build_plan` (ONNX sub-models per task).
- :mod:`~parapipe.runtime.mapping`: :func:`load_mapping` (a pareto.json point -> plan bound as its profile says,
  with ``--bind`` substitutions).
- :mod:`~parapipe.runtime.facts`: :func:`check_board` (the board's CPUs, runtimes and providers vs the plan).
- :mod:`~parapipe.runtime.run`: :func:`run_local` (``parapipe run``: the deploy bundle run on this machine).
- :mod:`~parapipe.runtime.reference`, :mod:`~parapipe.runtime.traces`.
"""
from parapipe.runtime.plan import StageSpec, build_plan

__all__ = ["StageSpec", "build_plan"]
