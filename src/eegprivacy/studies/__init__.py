"""Studies as importable pipelines (a notebook or a thin stage entry point in ``experiments/`` calls them).

- :mod:`eegprivacy.studies.cohort_audit` — study A's pipeline (features, DP releases with matched nulls, LOSO
  utility, table attacks) on any :class:`~eegprivacy.data.EEGDataset`, as resumable MLflow sweeps.
- :mod:`eegprivacy.studies.cohort_report` — its figures and HTML report (drawing only, no computing).
"""
