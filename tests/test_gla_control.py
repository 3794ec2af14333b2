"""Study B's sound GLA: its untrained-model control and its test pooled over every attacked round.

Unit tests on SYNTHETIC update vectors (a membership direction in the trained updates, data-independent noise in
the control's), then one tiny SYNTHETIC federation (4 subjects, 2 rounds, 1 local epoch, SimpleNet) through
``mia.cell_rows``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from _federated_params import tiny_federated_mia

from eegprivacy.studies.federated import gla_sound as gs
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.config import FederatedMIAConfig

TINY = tiny_federated_mia()


def _rounds(rng, n_rounds: int, n_clients: int, dim: int = 12, effect: float = 1.5) -> list[gs.SoundRound]:
    """Rounds of SYNTHETIC sound updates: member updates shifted along one direction (a membership signal), the
    control's member and non-member updates both pure noise (independent of the data)."""
    direction = np.zeros(dim)
    direction[0] = effect
    out = []
    for rnd in range(1, n_rounds + 1):
        clients = rng.choice(16, n_clients, replace=False)
        out.append(gs.SoundRound(rnd, clients, rng.normal(size=(n_clients, dim)) + direction,
                                 rng.normal(size=(n_clients, dim)), rng.normal(size=(n_clients, dim)),
                                 rng.normal(size=(n_clients, dim))))
    return out


def test_min_detectable_auroc_says_four_against_four_cannot_detect_anything():
    assert gs.min_detectable_auroc(4, 4) > 1.0  # one round's attacker-test half: no AUROC is detectable
    pooled = gs.min_detectable_auroc(80, 80)  # 20 rounds x 8 clients, half of them tested
    assert 0.55 < pooled < 0.7
    sizes = [gs.min_detectable_auroc(n, n) for n in (4, 10, 40, 160)]
    assert all(a > b for a, b in zip(sizes, sizes[1:]))
    assert math.isnan(gs.min_detectable_auroc(0, 5))
    with pytest.raises(ValueError, match="alpha and power"):
        gs.min_detectable_auroc(5, 5, alpha=0.0)


def test_pooled_test_uses_every_attacked_round():
    rounds = _rounds(np.random.default_rng(0), 5, 3) + _rounds(np.random.default_rng(1), 2, 6)
    X, y, groups = gs.pooled_data(rounds)
    n = sum(len(r.clients) for r in rounds)  # 5 x 3 + 2 x 6 updates of each kind
    assert X.shape == (2 * n, 12) and y.sum() == n and (y == 0).sum() == n
    np.testing.assert_array_equal(groups[:n], np.concatenate([r.clients for r in rounds]))
    kw = {"attacker": "lr", "n_estimators": 10, "random_state": 0}
    scores = gs.pooled_scores(rounds, kw, 0.5)
    assert scores["n_members"] + scores["n_nonmembers"] == scores["n_test"] and scores["n_test"] > 2 * 4
    (power,) = gs.power_rows(scores, gs.POOLED, "lr")
    assert power["value"] == gs.min_detectable_auroc(scores["n_members"], scores["n_nonmembers"])
    assert gs.rounds_row(rounds)["value"] == 7 and gs.rounds_row(rounds)["n"] == n
    with pytest.raises(ValueError, match="no attacked round"):
        gs.pooled_data([])


def test_control_on_data_independent_updates_sits_at_chance_while_the_signal_is_found():
    trained, control = [], []
    for seed in range(12):
        rounds = _rounds(np.random.default_rng(seed), 10, 8)
        kw = {"attacker": "lr", "n_estimators": 10, "random_state": seed}
        trained.append(gs.pooled_scores(rounds, kw, 0.5)["auroc"])
        control.append(gs.pooled_scores(rounds, kw, 0.5, control=True)["auroc"])
    assert abs(np.mean(control) - 0.5) < 0.06  # no signal in the control's updates: chance
    assert np.mean(trained) > 0.7  # the same attacker, split and size find the membership direction


def test_cell_rows_report_the_control_beside_the_sound_gla_and_pool_every_attacked_round():
    config = FederatedMIAConfig.from_mapping(TINY, "tiny.yaml", "federated_mia.")
    _, trials = mia.load_trials("synthetic_mi", config.datasets["synthetic_mi"])
    rows = pd.DataFrame(mia.cell_rows({"model": "simplenet", "epsilon": math.inf}, 0, trials, config))
    rows["attacker"] = rows["attacker"].fillna("")
    auc = rows[rows["metric"] == "auroc"].set_index(["attack", "round"])["value"]
    for rnd in (1, 2):
        assert (gs.CONTROL, rnd) in auc.index and (gs.ATTACK, rnd) in auc.index
    # Round 1 starts from the untrained model: the control is the same updates, the same split, the same score.
    assert auc[(gs.CONTROL, 1)] == auc[(gs.ATTACK, 1)]
    pooled = rows[rows["attack"].isin([gs.POOLED, gs.POOLED_CONTROL])]
    assert set(pooled["attack"]) == {gs.POOLED, gs.POOLED_CONTROL} and pooled["round"].isna().all()
    assert rows.loc[rows["metric"] == gs.N_ROUNDS, "value"].tolist() == [2]
    assert pooled.loc[pooled["metric"] == "min_detectable_auroc", "value"].notna().all()
    assert {"accuracy", "auroc", "tpr_at_fpr_0.01"} <= set(pooled["metric"])
    one = pd.DataFrame(mia.cell_rows({"model": "simplenet", "epsilon": math.inf}, 0, trials,
                                     config.replace(attack_rounds=[2])))
    assert one.loc[one["metric"] == gs.N_ROUNDS, "value"].tolist() == [1]
