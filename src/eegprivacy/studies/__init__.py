"""Studies as importable compositions of the layers (a notebook or a thin stage entry point in ``experiments/``
calls them).

- :mod:`eegprivacy.studies.release` — study A, the DP feature release (utility, scenarios, scaling, attacks on
  the table, linkage, the mechanism audit, the Optuna search) and its typed params.
- :mod:`eegprivacy.studies.federated` — study B, federated membership inference (attacks, LiRA, accounting).
- :mod:`eegprivacy.studies.embedding_audit` — study C, the split-controlled audit of encoder embeddings.
- :mod:`eegprivacy.studies.cohort_audit` — study A's pipeline on any labelled
  :class:`~eegprivacy.data.EEGDataset` (your own cohort), as resumable MLflow sweeps: ``run_audit`` composes the
  parts in :mod:`eegprivacy.studies.cohort` (cohort loading, attack cells, sweeps, summary, verdict); its report is
  drawn by :mod:`eegprivacy.reporting.cohort`, which the caller hands to ``run_audit`` (reporting sits above the
  studies).
"""
