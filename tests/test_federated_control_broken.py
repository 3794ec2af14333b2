"""Study B's control, run through its real code path (``control.cell_arrays``) on a tiny SYNTHETIC federation, and
broken on purpose: every way of making the control differ from the attack in more than membership must make a
named check fail.

The checks:

- **planted null** (:func:`check_frozen_model_scores_every_arm_alike`): a model frozen at its initialisation
  (learning rate 1e-12) that still scores every client through the client's member-fitted preprocessing. Training
  cannot leak, the preprocessing does (the raw attacks are far from 0.5): the attack and control arms must score
  every row alike, so attack − control is 0. For EEGNet, every arm must also compute its BatchNorm statistics from
  the client's calibration block (the same normalisation in both arms).
- **planted leak** (:func:`check_memorising_model_leaks`): a SimpleNet that memorises its members (large learning
  rate, many epochs, 66 tangent-space features): the loss attack − control is positive and its subject interval
  lies above 0.
- **cross-fitting** (:func:`check_attackers_never_see_the_client_they_score`): membership written into a feature
  only the attacked client has; an attacker that never saw that client cannot read it.

Synthetic data everywhere below is labelled SYNTHETIC (the ``synthetic_mi`` cohort)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from eegprivacy.studies.federated import control
from eegprivacy.studies.federated.config import FederatedMIAConfig

SUBJECTS = {"n_subjects": 6, "n_sessions": 1, "n_runs": 1, "n_trials_per_class": 10, "seed": 0}
TRAINING = {"datasets": {"synthetic_mi": {"paradigm": "left_right_imagery", "epoch_s": 2.0, "resample": 64.0,
                                         "dataset": SUBJECTS}},
            "models": ["simplenet"], "epsilons": [math.inf], "clip_norm": 1.0, "seeds": 1, "test_size": 0.2,
            "split_seed": 0, "csp_components": 4, "clients_per_round": 8, "num_rounds": 1, "local_epochs": 1,
            "learning_rate": 1e-12, "batch_size": 32, "attackers": ["lr"], "rf_estimators": 10,
            "attack_test_size": 0.5, "cla_components": 16, "batchnorm_stats": "local"}
CONTROL = {"dataset": "synthetic_mi", "models": ["simplenet", "eegnet"], "preprocessing": ["member_csp"],
           "epsilons": [math.inf], "seeds": 1, "num_rounds": 1, "local_epochs": 1, "control_folds": 3,
           "attack_folds": 2, "bootstrap": 500}
ROW_ATTACKS = ("loss", "rla_lr", "fla_lr")  # scored per row from the arm's own outputs


@pytest.fixture(scope="module")
def cohort():
    from eegprivacy.studies.federated import mia

    training = FederatedMIAConfig.from_mapping(TRAINING, "test", "federated_mia.")
    return mia.load_trials("synthetic_mi", training.datasets["synthetic_mi"])[1]


def _configs(learning_rate: float, num_rounds: int, local_epochs: int):
    training = FederatedMIAConfig.from_mapping({**TRAINING, "learning_rate": learning_rate}, "test",
                                               "federated_mia.")
    config = control.FederatedControlConfig.from_mapping(
        {**CONTROL, "num_rounds": num_rounds, "local_epochs": local_epochs}, "test", "federated_control.")
    return training, config


def _auroc(arm: dict, attack: str) -> float:
    scores, _, member = arm["scores"][attack]
    return control.pooled_auroc(scores, member)


# ---- the checks (each a plain function, so the broken variants below can run them) ------------------------

def check_frozen_model_scores_every_arm_alike(trials, model: str, monkeypatch) -> None:
    """Planted null: see the module docstring."""
    from eegprivacy.federated.torch_task import TorchTask

    training, config = _configs(1e-12, 1, 1)
    seen, calibrations = {}, []
    real_preprocessing, real_calibrate = control.client_preprocessing, TorchTask.calibrate

    def spy_preprocessing(*args, **kwargs):
        seen["clients"] = real_preprocessing(*args, **kwargs)
        return seen["clients"]

    def spy_calibrate(self, weights, X):
        calibrations.append(np.asarray(X))
        return real_calibrate(self, weights, X)

    monkeypatch.setattr(control, "client_preprocessing", spy_preprocessing)
    monkeypatch.setattr(TorchTask, "calibrate", spy_calibrate)
    arms = control.cell_arrays({"model": model, "preprocessing": "member_csp", "epsilon": math.inf}, 0, trials,
                               training, config)
    attack, ctrl = arms["attack"], arms["control"]
    if model == "simplenet":  # an untrained EEGNet's outputs are too flat to show it; its check is the normalisation
        assert max(abs(_auroc(attack, a) - 0.5) for a in ("rla_lr", "fla_lr")) > 0.1, \
            "the planted null needs a preprocessing that leaks"
    for name in (*ROW_ATTACKS, "gla_lr"):
        for part in (1, 2):  # the same clients and the same membership, row for row
            np.testing.assert_array_equal(attack["scores"][name][part], ctrl["scores"][name][part])
        assert _auroc(attack, name) == pytest.approx(_auroc(ctrl, name), abs=1e-9), name
    for name in ROW_ATTACKS:
        np.testing.assert_allclose(attack["scores"][name][0], ctrl["scores"][name][0], atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(attack["accuracy"], ctrl["accuracy"])
    if model == "eegnet":  # every arm's statistics: each client's calibration block through its preprocessing
        blocks = [block.reshape(len(block), -1) for block in seen["clients"].calibration]
        assert len(calibrations) == len(control.ARMS) * len(blocks)
        for i, X in enumerate(calibrations):
            np.testing.assert_array_equal(X.reshape(len(X), -1), blocks[i % len(blocks)])


def check_memorising_model_leaks(trials) -> None:
    """Planted leak: see the module docstring."""
    training, config = _configs(0.05, 4, 50)
    cell = {"model": "simplenet", "preprocessing": "tangent_space", "epsilon": math.inf}
    arms = control.cell_arrays(cell, 0, trials, training, config)
    arrays = {}
    for arm, result in arms.items():
        arrays[f"{arm}/accuracy"] = result["accuracy"]
        for attack, (scores, client, member) in result["scores"].items():
            arrays.update({f"{arm}/{attack}/scores": scores, f"{arm}/{attack}/client": client,
                           f"{arm}/{attack}/member": member})
    summary = control.summarise([(cell, 0, arrays)], len(trials.subjects()), n_resamples=500)
    diff = summary[(summary["arm"] == "attack_minus_control") & (summary["attack"] == "loss")].iloc[0]
    assert diff["value"] > 0.05 and diff["ci_low"] > 0.0, diff.to_dict()


def check_attackers_never_see_the_client_they_score() -> None:
    """Cross-fitting: membership is written into one feature per client (the client's own column); an attacker
    fitted without that client has no weight on its column and scores its rows at chance, client by client."""
    rng = np.random.default_rng(0)  # SYNTHETIC rows
    n_clients, per_client = 8, 20
    client = np.repeat(np.arange(n_clients), per_client)
    member = np.tile(np.arange(per_client) % 2, n_clients)
    features = np.zeros((client.size, n_clients))
    features[np.arange(client.size), client] = member + 0.1 * rng.normal(size=client.size)
    scores = control.cross_fitted(features, member, client, "lr", n_folds=4, seed=0)
    for k in range(n_clients):
        rows = client == k
        assert control.pooled_auroc(scores[rows], member[rows]) < 0.75, f"client {k} was seen by its attacker"


# ---- the unbroken path passes --------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["simplenet", "eegnet"])
def test_a_frozen_model_scores_the_attack_and_control_arms_alike(cohort, torch_one_thread, monkeypatch, model):
    check_frozen_model_scores_every_arm_alike(cohort, model, monkeypatch)


def test_a_memorising_model_shows_a_positive_attack_minus_control(cohort, torch_one_thread):
    check_memorising_model_leaks(cohort)


def test_attackers_never_see_the_client_they_score():
    check_attackers_never_see_the_client_they_score()


# ---- broken controls: each makes its named check fail --------------------------------------------------

def _nth_call(monkeypatch, name: str, n: int, change):
    """Patch ``control.<name>`` so that its ``n``-th call (0: the attack arm, 1: the control arm) goes through
    ``change(args) -> args``."""
    real, calls = getattr(control, name), itertools.count()

    def patched(*args, **kwargs):
        return real(*(change(args) if next(calls) == n else args), **kwargs)

    monkeypatch.setattr(control, name, patched)


def _nth_result(monkeypatch, name: str, n: int, change):
    """Patch ``control.<name>`` so that its ``n``-th call's result goes through ``change(result) -> result``."""
    real, calls = getattr(control, name), itertools.count()

    def patched(*args, **kwargs):
        result = real(*args, **kwargs)
        return change(result) if next(calls) == n else result

    monkeypatch.setattr(control, name, patched)


def _with_clients(args, clients):
    return (args[0], args[1], clients, *args[3:])


def _statistics_from(part: int):
    """A normalisation that computes the arm's BatchNorm statistics from the clients' members (0) or
    non-members (2) instead of their calibration blocks."""
    def change(args):
        task, weights, clients = args
        blocks = [c[part] for c in clients.clients]
        return task, weights, control.ClientSet(clients.clients, blocks)
    return change


def _rotate_fold_federations(monkeypatch):
    real = control.federations

    def federations(*args, **kwargs):
        runs = real(*args, **kwargs)
        return [runs[0], *runs[2:], runs[1]]  # fold f's clients get the federation that left out fold f + 1

    monkeypatch.setattr(control, "federations", federations)


def _attacker_fitted_on_everyone(monkeypatch):
    from eegprivacy.attacks.membership import MembershipAttack

    def cross_fitted(features, member, clients, attacker, n_folds, seed, n_estimators=100):
        return MembershipAttack(attacker=attacker, random_state=seed).fit(features, member).decision_function(
            features)

    monkeypatch.setattr(control, "cross_fitted", cross_fitted)


BROKEN = {
    # The control federations train on every client, the attacked one included.
    "control_trains_on_the_target": ("leak", lambda mp: mp.setattr(control.ClientSet, "subset",
                                                                    lambda self, keep: self)),
    # Each client is scored by the control federation of another fold (one that trained on it).
    "control_folds_misassigned": ("leak", lambda mp: _rotate_fold_federations(mp)),
    # The control arm scores the clients through other preprocessing (another scaling of the features).
    "control_through_other_preprocessing": ("null", lambda mp: _nth_call(
        mp, "arm_scores", 1, lambda args: _with_clients(
            args, [(Xm * 1.5, ym, Xn * 1.5, yn) for Xm, ym, Xn, yn in args[2]]))),
    # Members and non-members swapped in the control arm's record and feature attacks.
    "members_swapped_in_the_control": ("null", lambda mp: _nth_result(
        mp, "_arm_outputs", 1, lambda out: {**out, "member": 1 - out["member"]})),
    # The membership attackers are fitted on every client, the one they score included.
    "attacker_fitted_on_the_attacked_client": ("crossfit", _attacker_fitted_on_everyone),
    # The attack arm normalises with statistics from the client's members (as FedBN's kept statistics are).
    "attack_statistics_from_members": ("null_eegnet", lambda mp: _nth_call(mp, "normalisation", 0,
                                                                           _statistics_from(0))),
    # The control arm normalises with statistics from the client's non-members.
    "control_statistics_from_non_members": ("null_eegnet", lambda mp: _nth_call(mp, "normalisation", 1,
                                                                               _statistics_from(2))),
}


@pytest.mark.parametrize("variant", list(BROKEN))
def test_each_broken_control_fails_its_named_check(cohort, torch_one_thread, monkeypatch, variant):
    check, breaks = BROKEN[variant]
    breaks(monkeypatch)
    with pytest.raises(AssertionError):
        if check == "leak":
            check_memorising_model_leaks(cohort)
        elif check == "crossfit":
            check_attackers_never_see_the_client_they_score()
        else:
            check_frozen_model_scores_every_arm_alike(cohort, "eegnet" if check == "null_eegnet" else "simplenet",
                                                      monkeypatch)
