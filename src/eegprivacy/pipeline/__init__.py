"""pipeline layer: the machinery every stage runs on, apart from what any study computes.

``stages`` is the registry (one declaration per DVC stage: params section and typed config, code it depends on,
outputs, entry point) from which the CLI, the cell-cache code hashes and the ``dvc.yaml`` check are derived;
``stage_script`` holds the common shape of a stage script in ``experiments/`` (flags, params, runs, outputs), so
each script states only what differs; ``sweep`` expands a grid × seeds into resumable, hashed cells; ``executors``
computes cells in local processes or on a Ray cluster; ``search`` runs Optuna studies with exact trial counts across
workers. MLflow itself (tags, runs, the identifier guard) stays in ``tracking``.
"""
