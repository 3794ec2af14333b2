"""federated_mia's params for a tiny SYNTHETIC motor-imagery cohort, shared by the study-B tests that train one."""

from __future__ import annotations

import math


def tiny_federated_mia(n_trials_per_class: int = 10, **changes) -> dict:
    """The ``federated_mia`` section for the ``synthetic_mi`` cohort (4 subjects, one session and run,
    ``n_trials_per_class`` trials per class), SimpleNet without DP for 2 rounds of 1 local epoch, one seed;
    ``changes`` replace or add keys."""
    dataset = {"n_subjects": 4, "n_sessions": 1, "n_runs": 1, "n_trials_per_class": n_trials_per_class, "seed": 0}
    return {"datasets": {"synthetic_mi": {"paradigm": "left_right_imagery", "epoch_s": 2.0, "resample": 64.0,
                                         "dataset": dataset}},
            "models": ["simplenet"], "epsilons": [math.inf], "clip_norm": 1.0, "seeds": 1, "test_size": 0.2,
            "split_seed": 0, "csp_components": 4, "clients_per_round": 8, "num_rounds": 2, "local_epochs": 1,
            "learning_rate": 0.001, "batch_size": 32, "attackers": ["lr"], "rf_estimators": 10,
            "attack_test_size": 0.5, "cla_components": 16, **changes}
