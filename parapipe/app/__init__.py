"""The application layer: the library behind each command, below the CLI (:mod:`parapipe.cli`) and above every
other layer. Functions log instead of printing and raise :class:`parapipe.errors.ParapipeError` subclasses for
user errors; the CLI formats what they return.

- :mod:`~parapipe.app.resolve`: ``--soc`` to a profile (:func:`resolve_soc`, which may measure this machine),
  :func:`soc_ref` (how a document names its profile).
- :mod:`~parapipe.app.prepare`: :class:`Prepared`, :func:`prepare` (a model imported, coarsened and costed on a
  profile).
- :mod:`~parapipe.app.stage_timing`: ``--soc host`` stage sub-models timed as the executor runs them.
- :mod:`~parapipe.app.optimize`: ``optimize`` (search, stage timing, pareto.json / pareto.png).
- :mod:`~parapipe.app.refine`: ``optimize --refine N`` (search, run, fit the pipeline terms, search again).
- :mod:`~parapipe.app.profiling`: ``profile``, ``calibrate``, ``import``, ``soc detect``.
- :mod:`~parapipe.app.deploy`: ``deploy`` (a mapping run on an SSH host through the agent).
- :mod:`~parapipe.app.sweep`: one model x SoC job of ``python -m experiments.reproduce`` (what its local
  processes and Dask workers run; installed so that workers need no checkout).

Nothing is imported here: ``import parapipe.app.<module>`` loads only what that command needs.
"""
