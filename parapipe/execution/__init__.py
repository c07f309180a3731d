"""What running a mapping needs on the computer side: plans, PU bindings, the board-facts check, reference
outputs, trace reading.

The executor itself is the package :mod:`ppexec` (``device_agents/ppexec``: the same files run on boards inside
deploy bundles); import it directly. Here:

- :mod:`~parapipe.execution.plan`: :func:`build_plan` (a point's stages -> ONNX sub-models per task).
- :mod:`~parapipe.execution.bindings`: :func:`bindings_for` (the PU bindings a point runs with, as its profile
  says, with ``--bind`` substitutions), :func:`parse_binds`.
- :mod:`~parapipe.execution.facts`: :func:`check_board` (the board's CPUs, runtimes and providers vs the plan).
- :mod:`~parapipe.execution.reference`, :mod:`~parapipe.execution.traces`.

Loading a point and running it (``parapipe run``) is the application layer's: :mod:`parapipe.app.run`.
"""
from parapipe.execution.plan import build_plan

__all__ = ["build_plan"]
