"""Reproduction of the published evaluation: sweeps of models x SoC profiles, tables, figures and a report.

Run ``python -m experiments.reproduce [--config FILE] [--out DIR] [--quick] [--scheduler ADDRESS]`` from the
repository root (README.md in this folder). Modules: :mod:`.config` (the sweep configuration),
:mod:`.sweep` (the jobs, one per model x SoC, run on local processes or a Dask cluster; the job itself is
:mod:`parapipe.app.sweep`, installed with parapipe so that Dask workers need no checkout), :mod:`.tables` (points,
energy efficiency, search times, break-even), :mod:`.markdown` (report.md), :mod:`.reproduce` (the command).
"""
