"""The cohort audit's parts: study A's pipeline on a user's own labelled cohort, one job per module.

- :mod:`~eegprivacy.studies.cohort.config` — the audit's knobs (``AuditConfig``) and their mapping onto study A's
  ``dp_release``/``dp_utility`` configs.
- :mod:`~eegprivacy.studies.cohort.loading` — the cohort: label checks, window features, the canonical patient table
  and the re-identification tables.
- :mod:`~eegprivacy.studies.cohort.cells` — the table-attack cells (re-identification, membership).
- :mod:`~eegprivacy.studies.cohort.sweeps` — the plan of sweeps (study A's utility sweeps, then the attacks), their
  runners, cache and idempotency keys, and running them.
- :mod:`~eegprivacy.studies.cohort.summary` — the tidy summary rows (study A's utility summary plus the attacks) and
  the metrics logged from them.
- :mod:`~eegprivacy.studies.cohort.verdict` — ``summary.json``: guarantees, mechanism flags, caveats and the verdict's
  headline.

:mod:`eegprivacy.studies.cohort_audit` composes them (``run_audit``). Nothing is re-exported here: import each name
from its module.
"""
