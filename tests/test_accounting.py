"""Accountants over dp_accounting events (basic, RDP, PLD) and study B's event: exact where a hand count or a
closed form exists, never looser than basic composition, tighter over many steps, and the federated-accounting
stage on a tiny synthetic federation."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import dp_accounting
import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from eegprivacy.cli import main
from eegprivacy.params import ParamsError
from eegprivacy.privacy.accounting import (
    ACCOUNTANTS,
    FederatedSchedule,
    UnsupportedAccountingError,
    expected_rounds,
    federated_event,
    federated_round_event,
    make_accountant,
    per_step_epsilon,
    pld_epsilon_for_delta,
)

REPO = Path(__file__).resolve().parents[1]
DELTA = 1e-5


def laplace(eps: float, count: int = 1):
    event = dp_accounting.LaplaceDpEvent(noise_multiplier=1.0 / eps)
    return event if count == 1 else dp_accounting.SelfComposedDpEvent(event, count)


# ---- basic composition ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps,k", [(0.1, 1), (1.0, 7), (5.0, 400), (0.3, 1000)])
def test_basic_is_k_times_epsilon(eps, k):
    assert make_accountant("basic").epsilon(laplace(eps, k), DELTA).epsilon == pytest.approx(k * eps, rel=1e-12)


def test_basic_sums_mixed_events_and_ignores_delta():
    event = dp_accounting.ComposedDpEvent([laplace(1.0, 3), laplace(0.5, 2), dp_accounting.NoOpDpEvent()])
    basic = make_accountant("basic")
    assert basic.epsilon(event, 1e-3).epsilon == pytest.approx(4.0)
    assert basic.epsilon(event, 1e-9).epsilon == pytest.approx(4.0)
    assert basic.epsilon(dp_accounting.NonPrivateDpEvent(), DELTA).epsilon == math.inf


# ---- RDP and PLD against basic and against closed forms -------------------------------------------------------

# Tolerances. PLD: its pessimistic grid (1e-4 by default) may round each step's loss up by one interval. RDP: its
# conversion to (ε, δ) at the largest order α = 1024 of the default grid costs log(1/(δ·α))/(α − 1) ≈ 0.0045 over
# the order-∞ (pure ε) bound, which shows for a handful of steps (measured: 1.0028 for one ε = 1 step).
RDP_SLACK = math.log(1 / (DELTA * 1024)) / 1023


@pytest.mark.parametrize("eps,k", [(0.1, 1), (1.0, 1), (5.0, 1), (0.5, 10), (2.0, 50), (5.0, 20), (212.0, 3)])
@pytest.mark.parametrize("name", ["rdp", "pld"])
def test_tighter_accountants_never_exceed_basic(name, eps, k):
    bound = make_accountant(name).epsilon(laplace(eps, k), DELTA).epsilon
    tolerance = RDP_SLACK if name == "rdp" else k * 1e-4
    assert 0 <= bound <= k * eps + tolerance


@pytest.mark.parametrize("name", ["rdp", "pld"])
def test_tighter_accountants_are_strictly_tighter_over_many_steps(name):
    basic = 100 * 1.0
    bound = make_accountant(name).epsilon(laplace(1.0, 100), DELTA).epsilon
    assert bound < 0.9 * basic  # advanced-composition regime: well under k·ε at δ > 0


def test_pld_of_one_laplace_step_matches_dp_accounting_closed_form():
    from dp_accounting.pld import privacy_loss_distribution as pld

    for eps in (0.5, 1.0, 5.0):
        ours = make_accountant("pld").epsilon(laplace(eps), 1e-12).epsilon
        direct = pld.from_laplace_mechanism(1.0 / eps, value_discretization_interval=1e-4).get_epsilon_for_delta(1e-12)
        assert ours == pytest.approx(direct, abs=1e-9)
        assert ours == pytest.approx(eps, abs=2e-4)  # pure ε-DP: ε at δ → 0 is the nominal ε


def test_rdp_of_one_laplace_step_follows_mironov():
    # Laplace's RDP at order α (Mironov 2017, Prop. 6), converted at that single order as dp_accounting does
    eps, alpha, delta = 1.0, 4.0, 1e-5
    rdp = math.log(alpha / (2 * alpha - 1) * math.exp((alpha - 1) * eps)
                   + (alpha - 1) / (2 * alpha - 1) * math.exp(-alpha * eps)) / (alpha - 1)
    expected = 3 * rdp + math.log1p(-1 / alpha) - math.log(delta * alpha) / (alpha - 1)
    got = make_accountant("rdp", orders=[alpha]).epsilon(laplace(eps, 3), delta).epsilon
    assert got == pytest.approx(expected, rel=1e-9)


def test_log_space_pld_reading_agrees_with_dp_accounting_and_survives_its_overflow():
    from dp_accounting.pld import PLDAccountant

    for eps, k, delta in [(1.0, 50, 1e-5), (0.5, 200, 1e-6), (2.0, 30, 1e-3)]:
        accountant = PLDAccountant(value_discretization_interval=1e-3).compose(laplace(eps, k))
        assert pld_epsilon_for_delta(accountant._pld, delta) == pytest.approx(accountant.get_epsilon(delta), abs=1e-9)
    # 8 rounds x 20 steps of ε = 5: dp_accounting 0.6.0 returns inf here (overflow), the log-space reading does not
    curve = make_accountant("pld", value_discretization_interval=1e-2).curve(laplace(5.0, 20), range(1, 11), DELTA)
    values = [b.epsilon for b in curve]
    assert all(math.isfinite(v) for v in values) and np.all(np.diff(values) > 0)
    assert all(v <= 100 * r + 1 for r, v in enumerate(values, start=1))


def test_huge_per_step_epsilon_neither_hangs_nor_overflows():
    # 410 = EEGNet's certified per-step ε at nominal ε = 5: a widened grid keeps PLD fast and finite
    started = time.perf_counter()
    for name in ACCOUNTANTS:
        bound = make_accountant(name).epsilon(laplace(410.0, 400), DELTA)
        assert math.isfinite(bound.epsilon) and bound.epsilon <= 410.0 * 400 * (1 + 1e-6)
    pld = make_accountant("pld")
    assert pld.interval_for(laplace(410.0, 400)) == pytest.approx(2 * 410.0 / pld.max_step_points)
    # a hang guard, not a speed target (those live in benchmarks/): generous enough for a loaded 2-core machine
    assert time.perf_counter() - started < 120


def test_pld_is_skipped_with_a_reason_where_dp_accounting_degenerates():
    # at ε = 820 per step dp_accounting's connect-the-dots Laplace PLD is not a distribution: skip, don't crash
    bound = make_accountant("pld").epsilon(laplace(820.0, 60), DELTA)
    assert math.isnan(bound.epsilon) and bound.detail.startswith("skipped") and "degenerates" in bound.detail
    assert math.isfinite(make_accountant("rdp").epsilon(laplace(820.0, 60), DELTA).epsilon)


@pytest.mark.parametrize("name", ["basic", "rdp", "pld"])
def test_unsupported_events_raise_a_clear_error(name):
    unsupported = {"basic": dp_accounting.GaussianDpEvent(1.0), "rdp": dp_accounting.UnsupportedDpEvent(),
                   "pld": dp_accounting.ZCDpEvent(0.1)}[name]
    with pytest.raises(UnsupportedAccountingError, match=f"the '{name}' accountant does not support"):
        make_accountant(name).epsilon(dp_accounting.ComposedDpEvent([laplace(1.0), unsupported]), DELTA)
    with pytest.raises(ValueError, match="unknown accountant"):
        make_accountant("moments")
    with pytest.raises(ValueError, match="delta"):
        make_accountant(name).epsilon(laplace(1.0), 0.0)


# ---- study B's event ------------------------------------------------------------------------------------------

def test_study_b_step_count_matches_a_hand_count_and_the_trainer():
    from eegprivacy.federated.torch_task import TorchTask

    # 40 member trials, batch 16 -> 3 batches per epoch; 3 local epochs -> 9 client steps per round, 2 rounds
    schedule = FederatedSchedule.for_client(num_rounds=2, local_epochs=3, n_members=40, batch_size=16)
    assert (schedule.batches_per_epoch, schedule.steps_per_round("client"), schedule.steps_per_round("example")) \
        == (3, 9, 3)
    basic = make_accountant("basic")
    client = federated_event(1.0, calibration="nominal", unit="client", dim=10, schedule=schedule)
    example = federated_event(1.0, calibration="nominal", unit="example", dim=10, schedule=schedule)
    assert basic.epsilon(client, DELTA).epsilon == pytest.approx(2 * 3 * 3)
    assert basic.epsilon(example, DELTA).epsilon == pytest.approx(2 * 3)
    task = TorchTask("simplenet", (4,), batch_size=16)
    rng = np.random.default_rng(0)
    _, metrics = task.train(task.weights_of(task.build(0)), rng.normal(size=(40, 4)).astype(np.float32),
                            rng.integers(0, 2, 40), epochs=3, seed=0)
    assert metrics["local_steps"] == schedule.steps_per_round("client")  # what one round of training really does


def test_certified_calibration_matches_the_mechanism():
    from eegprivacy.federated.dp import LaplaceGradientDP

    dp, d = LaplaceGradientDP(clip_norm=0.7, epsilon=5.0), 1682
    assert per_step_epsilon(5.0, "certified", d, 0.7) == pytest.approx(dp.calibration(d)["epsilon_certified_per_step"])
    assert per_step_epsilon(5.0, "certified", d) == pytest.approx(2 * math.sqrt(d) * 5.0)
    assert per_step_epsilon(5.0, "nominal", d) == 5.0
    schedule = FederatedSchedule(1, 1, 1)
    step = federated_round_event(5.0, calibration="certified", unit="client", dim=d, schedule=schedule,
                                 clip_norm=0.7).event
    assert step.noise_multiplier == pytest.approx(dp.dp_event(d).noise_multiplier)
    assert isinstance(federated_round_event(math.inf, calibration="nominal", unit="client", dim=d,
                                            schedule=schedule).event, dp_accounting.NonPrivateDpEvent)


def test_expected_rounds_and_bad_schedules():
    assert expected_rounds(20, 8, 23) == 7  # 20·8/23 = 6.96, rounded up
    assert expected_rounds(5, 10, 3) == 5  # cannot sample more clients than there are
    with pytest.raises(ValueError):
        FederatedSchedule(0, 1, 1)
    with pytest.raises(ValueError, match="privacy unit"):
        FederatedSchedule(1, 1, 1).steps_per_round("record")


# ---- the stage ------------------------------------------------------------------------------------------------

def test_stage_runs_on_a_tiny_federation(tmp_path):
    grid = yaml.safe_load((REPO / "params" / "federated_mia.yaml").read_text())
    block = grid["federated_mia"]
    block["datasets"] = {"synthetic_mi": {**block["datasets"]["synthetic_mi"]}}
    block.pop("per_dataset", None)  # the shipped per-dataset protocols name cohorts this grid leaves out
    block["datasets"]["synthetic_mi"]["dataset"] = {"n_subjects": 3, "n_sessions": 1, "n_runs": 2,
                                                    "n_trials_per_class": 10, "seed": 0}
    block.update(models=["simplenet"], epsilons=[math.inf, 2.0], num_rounds=2, local_epochs=2, batch_size=16,
                 clients_per_round=2, attack_rounds="all")  # the default profile's rounds 5 and 10 do not exist here
    acc = yaml.safe_load((REPO / "params" / "federated_accounting.yaml").read_text())
    acc["federated_accounting"]["paper_protocol"] = {"num_rounds": 3, "local_epochs": 2, "epsilons": [1.0]}
    acc["federated_accounting"]["pld"].update(value_discretization_interval=1e-2, max_step_points=10_000)  # fast
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump(acc))
    out = {k: tmp_path / v for k, v in [("out", "m/a.csv"), ("curves", "p/c.csv"), ("summary", "m/a.json"),
                                         ("report", "r/a.md"), ("figure", "r/f/a.png")]}
    flags = [x for k, v in out.items() for x in (f"--{k}", str(v))]
    assert main(["federated-accounting", "--params", str(tmp_path / "acc.yaml"), "--grid",
                 str(tmp_path / "grid.yaml"), *flags]) == 0
    assert all(p.exists() and p.stat().st_size > 0 for p in out.values())

    tidy = pd.read_csv(out["out"])
    curves = pd.read_csv(out["curves"])
    assert set(curves["round"]) == {1, 2, 3} and np.isfinite(curves.value).all()
    assert set(tidy.loc[tidy.metric == "epsilon_cumulative", "round"]) == {2, 3}  # final rounds only
    assert set(tidy.protocol) == {"params", "paper"} and set(tidy.unit) == {"example", "client"}
    assert set(tidy.calibration) == {"nominal", "certified"} and set(tidy.accountant) >= {"basic", "rdp", "pld"}
    # the closing note's ε = 5 is there although paper_protocol listed only ε = 1
    assert sorted(tidy.loc[tidy.protocol == "paper", "epsilon"].unique()) == [1.0, 5.0]
    # 32 members, batch 16: 2 batches x 2 epochs = 4 client steps per round; basic = rounds · steps · ε
    final = tidy[(tidy.metric == "epsilon_cumulative") & (tidy.accountant == "basic") & (tidy["round"] == 3)
                 & (tidy.protocol == "paper") & (tidy.epsilon == 5.0) & (tidy.calibration == "nominal")]
    # Issue 20: CSP is fitted on the client's private trials, so an example pays its client's steps (not 2 per round)
    assert dict(zip(final.unit, final.value)) == pytest.approx({"client": 3 * 4 * 5.0, "example": 3 * 4 * 5.0})
    assert set(final.loc[final.unit == "example", "unit_note"]) == {"= per-client: CSP fitted on the client's "
                                                                    "private trials"}
    per_round = tidy[(tidy.metric == "epsilon_per_round") & (tidy.epsilon == 5.0) & (tidy.accountant == "basic")
                     & (tidy.calibration == "nominal")]
    assert set(per_round.value) == {20.0}
    inf = tidy[(tidy.epsilon == math.inf) & tidy.metric.str.startswith("epsilon")]
    assert len(inf) and np.isinf(inf.value).all()

    summary = json.loads(out["summary"].read_text())
    note = summary["closing_note"]["results"]["synthetic_mi"]["simplenet"]
    assert note["nominal"]["client"]["epsilon_cumulative"]["basic"] == 60.0
    assert note["certified"]["client"]["epsilon_per_step"] == pytest.approx(2 * math.sqrt(450) * 5, abs=1e-3)
    report = out["report"].read_text()
    assert "SYNTHETIC" in report and "per-round ε pld" in report and "cumulative ε pld" in report

    runs = mlflow.search_runs(experiment_names=["study-b-federated-mia"])
    assert len(runs) == 1 + 4  # one parent per dataset, one child per (model, ε): ε ∈ {∞, 2} + paper {1, 5}
    assert set(runs["tags.stage"]) == {"federated_accounting"} and set(runs["tags.synthetic"]) == {"true"}
    child = runs[runs["tags.epsilon"] == "2"].iloc[0]
    assert child["tags.mechanism"] == "laplace_gradient" and child["tags.model"] == "simplenet"
    assert child["metrics.params/nominal/client/basic/epsilon_cumulative"] == pytest.approx(2 * 4 * 2.0)


@pytest.mark.parametrize("key,value,must", [
    ("delta", 0, "a δ strictly between 0 and 1"),
    ("accountants", ["moments"], "a non-empty list of accountants from [basic, rdp, pld]"),
    ("units", [], "a non-empty list of privacy units from [example, client]"),
    ("calibrations", ["exact"], "a non-empty list of calibrations from [nominal, certified]"),
    ("pld.value_discretization_interval", 0, "a positive interval"),
    ("paper_protocol.num_rounds", 0, "a whole number of rounds, at least 1"),
    ("paper_protocol.local_epochs", 1.5, "a whole number of epochs, at least 1"),
    ("paper_protocol.epsilons", [5, -1], "a non-empty list of positive finite ε values (ε > 0)"),
])
def test_bad_accounting_params_stop_the_stage_before_any_work(tmp_path, key, value, must):
    acc = yaml.safe_load((REPO / "params" / "federated_accounting.yaml").read_text())
    *parents, last = key.split(".")
    block = acc["federated_accounting"]
    for part in parents:
        block = block[part]
    block[last] = value
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(acc))
    out = tmp_path / "out"
    with pytest.raises(ParamsError, match=re.escape(f"federated_accounting.{key} = {value!r} is invalid; it must be "
                                                    f"{must}")):
        main(["federated-accounting", "--params", str(path), "--out", str(out / "a.csv"), "--curves",
              str(out / "c.csv"), "--summary", str(out / "a.json"), "--report", str(out / "a.md"), "--figure",
              str(out / "a.png")])
    assert not out.exists()


def test_pld_is_skipped_with_a_reason_where_dp_accounting_cannot_build_the_laplace_pld():
    # at ε = 750 per step (an EEGNet certified ε on eegmmidb) dp_accounting raises while building the Laplace PLD
    # ("deltas are not in non-increasing order"): skip PLD with the reason, never crash the accounting stage
    bound = make_accountant("pld").epsilon(laplace(750.0, 40), DELTA)
    assert math.isnan(bound.epsilon) and bound.detail.startswith("skipped") and "cannot build" in bound.detail
    assert math.isfinite(make_accountant("rdp").epsilon(laplace(750.0, 40), DELTA).epsilon)
