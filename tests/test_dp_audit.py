"""The DP audit's bound is exact where it can be checked (Clopper–Pearson, randomized response, 1-D Laplace),
never exceeds a known ε more often than its confidence allows, and refutes laplace_implemented's claim at d ≥ 50
while the formal mechanisms keep theirs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import beta, binomtest

from eegprivacy.attacks.mechanism_audit import (
    MechanismAudit,
    clopper_pearson,
    epsilon_lower_bound,
    max_certifiable_epsilon,
    neighbour_pair,
    noise_family,
)
from eegprivacy.cli import main
from eegprivacy.privacy import l1_sensitivity_replace_one, l2_sensitivity_replace_one, make_mechanism
from eegprivacy.studies.release.config import DPReleaseConfig, MechanismAuditConfig

REPO = Path(__file__).resolve().parents[1]
C = 2.0


# ---- Clopper–Pearson ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (0, 1), (3, 1000), (997, 1000), (17, 50_000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_clopper_pearson_matches_scipy_exact_interval(k, n, confidence):
    expected = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    low, high = clopper_pearson(k, n, confidence)
    assert low == pytest.approx(expected.low, abs=1e-12)
    assert high == pytest.approx(expected.high, abs=1e-12)


def test_clopper_pearson_hand_checked_values():
    # k = 0: the upper end solves (1 − p)^n = α/2; k = n mirrors it
    assert clopper_pearson(0, 10, 0.95) == pytest.approx((0.0, 1.0 - 0.025 ** 0.1))
    assert clopper_pearson(10, 10, 0.95) == pytest.approx((0.025 ** 0.1, 1.0))
    assert clopper_pearson(0, 10, 0.95)[1] == pytest.approx(0.30849, abs=1e-5)
    for bad in [(-1, 10), (11, 10), (0, 0)]:
        with pytest.raises(ValueError):
            clopper_pearson(*bad)
    with pytest.raises(ValueError):
        clopper_pearson(1, 10, 1.0)


# ---- the ε bound ----------------------------------------------------------------------------------------------

def test_epsilon_bound_follows_its_formula_with_a_bonferroni_split():
    fp, n_neg, fn, n_pos, delta = 30, 10_000, 4_000, 10_000, 1e-5
    fpr_hi = beta.ppf(0.975, fp + 1, n_neg - fp)  # one-sided 97.5 % each: 95 % jointly
    fnr_hi = beta.ppf(0.975, fn + 1, n_pos - fn)
    expected = max(math.log((1 - delta - fnr_hi) / fpr_hi), math.log((1 - delta - fpr_hi) / fnr_hi))
    assert epsilon_lower_bound(fp, n_neg, fn, n_pos, delta, 0.95) == pytest.approx(expected, rel=1e-12)
    # the one-sided 97.5 % bound is the upper end of the two-sided 95 % interval
    assert fpr_hi == pytest.approx(clopper_pearson(fp, n_neg, 0.95)[1])
    # the test run the other way round (swap the roles of x and x') certifies the same ε
    assert epsilon_lower_bound(fn, n_pos, fp, n_neg, delta) == pytest.approx(expected)


def test_perfect_separation_is_bounded_by_the_sample_size():
    for n in (10, 1_000, 100_000):
        upper = 1.0 - 0.025 ** (1.0 / n)
        ceiling = epsilon_lower_bound(0, n, 0, n)
        assert ceiling == pytest.approx(math.log((1.0 - upper) / upper))
        assert ceiling == max_certifiable_epsilon(n)
        assert ceiling < math.log(n)  # ≈ ln(n / ln 40): no audit of n trials certifies more
    assert epsilon_lower_bound(0, 1_000, 0, 1_000) < epsilon_lower_bound(0, 100_000, 0, 100_000)


def test_no_separation_and_degenerate_tests_certify_nothing():
    assert epsilon_lower_bound(500, 1_000, 500, 1_000) == 0.0  # a coin flip
    assert epsilon_lower_bound(0, 1_000, 1_000, 1_000) == 0.0  # never says x: no information
    assert epsilon_lower_bound(1_000, 1_000, 0, 1_000) == 0.0  # always says x


def test_delta_lowers_the_bound_and_can_erase_it():
    fp, fn, n = 5, 9_000, 10_000  # a rare but confident "x": TPR ≈ 0.1 at FPR ≈ 0.0005
    pure = epsilon_lower_bound(fp, n, fn, n, delta=0.0)
    assert pure > 4.0
    assert epsilon_lower_bound(fp, n, fn, n, delta=1e-5) == pytest.approx(pure, abs=1e-3)
    assert epsilon_lower_bound(fp, n, fn, n, delta=0.05) < pure - 0.5
    assert epsilon_lower_bound(fp, n, fn, n, delta=0.2) == 0.0  # δ explains the whole TPR
    with pytest.raises(ValueError):
        epsilon_lower_bound(fp, n, fn, n, delta=1.0)


def _randomized_response_counts(epsilon, n, rng, size=None):
    """Counts of the test "say x when the bit says 1" on randomized response (exactly ε-DP, FPR = FNR)."""
    flip = 1.0 / (1.0 + math.exp(epsilon))
    return rng.binomial(n, flip, size), rng.binomial(n, flip, size)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_randomized_response_bound_is_tight_and_below_the_true_epsilon(epsilon):
    rng = np.random.default_rng(7)
    n = 1_000_000
    fp, fn = _randomized_response_counts(epsilon, n, rng)
    bound = epsilon_lower_bound(int(fp), n, int(fn), n)
    assert 0.9 * epsilon <= bound <= epsilon


def test_bound_exceeds_a_known_epsilon_no_more_often_than_its_confidence_allows():
    rng = np.random.default_rng(11)
    epsilon, n, reps = 1.0, 2_000, 2_000
    fps, fns = _randomized_response_counts(epsilon, n, rng, reps)
    bounds = np.array([epsilon_lower_bound(int(a), n, int(b), n) for a, b in zip(fps, fns)])
    assert (bounds > epsilon).mean() <= 0.05
    assert np.median(bounds) > 0.5 * epsilon  # and it is not vacuous


# ---- pairs ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [1, 2, 50, 363])
def test_worst_case_pairs_sit_on_the_clip_ball_at_the_sensitivity_distance(dim):
    x, x2 = neighbour_pair("gaussian", C, dim)
    assert np.linalg.norm(x) == pytest.approx(C) and np.linalg.norm(x2) == pytest.approx(C)
    assert np.linalg.norm(x - x2) == pytest.approx(l2_sensitivity_replace_one(C))
    x, x2 = neighbour_pair("laplace", C, dim)
    assert np.linalg.norm(x) == pytest.approx(C) and np.linalg.norm(x2) == pytest.approx(C)
    assert np.abs(x - x2).sum() == pytest.approx(l1_sensitivity_replace_one(C, dim))
    assert np.array_equal(neighbour_pair("laplace", C, dim, "axis")[0], neighbour_pair("gaussian", C, dim)[0])


def test_noise_family_and_pair_arguments_are_checked():
    assert noise_family(make_mechanism("gaussian_classic", 1.0)) == "gaussian"
    assert noise_family(make_mechanism("laplace_formal", 1.0)) == "laplace"

    class Exponential:
        name = "exponential_mechanism"

    with pytest.raises(ValueError):
        noise_family(Exponential())
    with pytest.raises(ValueError):
        neighbour_pair("gaussian", C, 3, "corner")
    with pytest.raises(ValueError):
        neighbour_pair("gaussian", C, 0)
    with pytest.raises(ValueError):
        MechanismAudit(n_trials=1).run(make_mechanism("laplace_formal", 1.0), C, 3)


# ---- audits of the real mechanisms ----------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_one_dimensional_laplace_audit_is_valid_and_tight(epsilon):
    # d = 1: b = 2C/ε is exactly ε-DP (Δ1 = Δ2), and the privacy loss reaches ε with probability 1/2
    audit = MechanismAudit(n_trials=40_000, random_state=0).run(make_mechanism("laplace_implemented", epsilon), C, 1)
    assert audit.formal_guarantee_ and audit.claimed_epsilon_ == epsilon and audit.claimed_delta_ == 0.0
    assert 0.5 * epsilon <= audit.epsilon_lower_bound_ <= epsilon
    assert not audit.exceeds_claim_


def test_laplace_implemented_is_refuted_at_high_dimension_and_the_formal_mechanisms_are_not():
    dim, epsilon = 50, 1.0
    results = {name: MechanismAudit(n_trials=40_000, random_state=1).run(make_mechanism(name, epsilon), C, dim)
               for name in ("laplace_implemented", "laplace_formal", "gaussian_analytic")}
    assert results["laplace_implemented"].epsilon_lower_bound_ > 1.5 * epsilon
    assert results["laplace_implemented"].exceeds_claim_ and not results["laplace_implemented"].formal_guarantee_
    for name in ("laplace_formal", "gaussian_analytic"):
        assert results[name].epsilon_lower_bound_ < epsilon and results[name].formal_guarantee_
    assert results["gaussian_analytic"].claimed_delta_ == 1e-5 and results["gaussian_analytic"].pair_ == "axis"
    assert results["laplace_implemented"].pair_ == "diagonal"


def test_audit_is_seeded_and_independent_of_chunking_and_threads():
    mechanism = make_mechanism("laplace_implemented", 2.0)
    base = MechanismAudit(n_trials=5_000, random_state=3).run(mechanism, C, 20).summary()
    same = MechanismAudit(n_trials=5_000, random_state=3, chunk_elements=777, n_jobs=2).run(mechanism, C, 20).summary()
    other = MechanismAudit(n_trials=5_000, random_state=4).run(mechanism, C, 20).summary()
    assert base == same
    assert base != other
    assert base["n_negatives"] == base["n_positives"] == 3_500  # 30 % of the trials chose the threshold
    assert base["max_certifiable_epsilon"] == pytest.approx(max_certifiable_epsilon(3_500))
    assert base["fpr_upper"] >= base["fpr"] and base["fnr_upper"] >= base["fnr"]


# ---- the stage ------------------------------------------------------------------------------------------------

def _stage_argv(folder: Path) -> list[str]:
    """The stage's command line on ``folder/p.yaml``, every output and the cell cache in ``folder``."""
    return ["dp-audit", "--params", str(folder / "p.yaml"), "--out", str(folder / "a.csv"),
            "--summary", str(folder / "a.json"), "--figure", str(folder / "a.png"), "--cells", str(folder / "cells"),
            "--no-progress"]


def test_audit_params_match_the_release_params():
    audit = MechanismAuditConfig.load(REPO / "params/dp_audit.yaml", "dp_audit")
    release = DPReleaseConfig.load(REPO / "params/dp_release.yaml", "dp_release")
    assert audit.clip_norm == release.clip_norm and audit.delta == release.delta
    assert set(audit.mechanisms) <= set(release.mechanisms)


@pytest.mark.slow
def test_stage_writes_rows_headline_figure_and_tagged_runs(tmp_path):
    params = {"mechanisms": ["gaussian_analytic", "laplace_implemented"], "epsilons": [1], "clip_norm": C,
              "delta": 1e-5, "dims": [50], "n_trials": 4_000, "seeds": 2, "confidence": 0.95, "n_jobs": 1}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"dp_audit": params}))
    argv = _stage_argv(tmp_path)
    assert main(argv) == 0

    rows = pd.read_csv(tmp_path / "a.csv")
    bounds = rows[rows.metric == "epsilon_lower_bound"]
    assert len(bounds) == 2 * 2 and set(bounds["seed"]) == {0, 1} and (bounds["chance"] == 0).all()
    assert (bounds["n"] == 2_800).all() and (bounds["dataset"] == "none").all()
    summary = json.loads((tmp_path / "a.json").read_text())
    record = summary["results"]["laplace_implemented"]["d_50"]["epsilon_1"]
    assert record["claimed_epsilon"] == 1.0 and record["n_seeds"] == 2 and not record["formal_guarantee"]
    assert summary["results"]["gaussian_analytic"]["d_50"]["epsilon_1"]["claimed_delta"] == 1e-5
    assert (tmp_path / "a.png").stat().st_size > 10_000

    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("study-a-dp-release")
    children = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 4
    for child in children:
        tags = child.data.tags
        assert tags["stage"] == "dp_audit" and tags["dataset"] == "none" and tags["synthetic"] == "false"
        assert tags["epsilon"] == "1" and tags["mechanism"] in params["mechanisms"]
        assert tags["delta"] == ("0" if tags["mechanism"] == "laplace_implemented" else "1e-05")

    # a second run finds every cell on disk
    assert main(argv) == 0
    assert pd.read_csv(tmp_path / "a.csv").equals(rows)


@pytest.mark.slow
def test_stage_rows_do_not_depend_on_the_number_of_processes(tmp_path):
    tables = {}
    for n_jobs in (1, 2):
        params = {"mechanisms": ["gaussian_analytic", "laplace_implemented"], "epsilons": [1, 5], "clip_norm": C,
                  "delta": 1e-5, "dims": [50], "n_trials": 4_000, "seeds": 2, "confidence": 0.95, "n_jobs": n_jobs}
        folder = tmp_path / f"jobs{n_jobs}"
        folder.mkdir()
        (folder / "p.yaml").write_text(yaml.safe_dump({"dp_audit": params}))
        assert main(_stage_argv(folder)) == 0
        tables[n_jobs] = pd.read_csv(folder / "a.csv")
    assert tables[1]["seed"].nunique() == 2 and len(tables[1]) > 0
    pd.testing.assert_frame_equal(tables[1], tables[2])
    assert (tmp_path / "jobs1" / "a.json").read_text() == (tmp_path / "jobs2" / "a.json").read_text()
