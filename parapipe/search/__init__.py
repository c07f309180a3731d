"""The mapping search: dynamic programmes over stage cuts and PU groups (:mod:`.dp`, :mod:`.passes`), list
scheduling and CP-SAT inside a stage (:mod:`.listsched`, :mod:`.cpsat`, :mod:`.polish`), replicated stages
(:mod:`.replicate`, its PU partitions :mod:`.partitions`), lower bounds (:mod:`.bounds`, :mod:`.relaxation`,
:mod:`.lagrangian`, :mod:`.stage_bound`, :mod:`.reuse_bound`) and the mappings read off the relaxation
(:mod:`.relaxed_sequences`), the Pareto filter (:mod:`.pareto`) and
the baselines and their operating-point variants (:mod:`.op_variants`); :func:`.api.search` is the entry point (its options:
:class:`.options.SearchOptions`), returning :class:`.points.SearchResult`. Deterministic: work budgets, not clocks (:mod:`.budget`)."""
