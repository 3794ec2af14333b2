"""Calibration cases of study B's privacy audit (stage ``federated_audit``: ``reports/federated_audit.md`` and its
section of ``reports/study-b.md``).

* ``study_b.one_run_bound``: the one-run ε lower bound end to end, on null federations. Each data set is a
  SYNTHETIC federation shaped like the DP-SGD rows' input (the cohort's clients, their training / calibration /
  non-member rows, the CSP feature count; standard-normal features and labels at random, as the rows are
  standardised on the calibration block) trained with the audited no-DP DP-SGD schedule, once per run the stage
  pools, with the stage's canaries drawn and **planted in no training set**
  (:func:`~eegprivacy.studies.federated.audit.plant_canaries` with ``plant=False``): their coins cannot reach the
  model, so the mechanism's ε toward them is 0 and a bound above 0 is a false claim. The stage's code then scores
  the canaries from the updates (:func:`~eegprivacy.studies.federated.audit.canary_arrays`), guesses and pools the
  runs (:func:`~eegprivacy.studies.federated.audit.audit_summary`). The "test" is the bound's positivity: its
  p-value at ε = 0 (:func:`~eegprivacy.attacks.one_run_audit.p_value`) below 1 − confidence. Power: the same
  canaries planted (each with probability ½) in the same federation without DP.
* ``study_b.dp_sgd_minus_control``: the DP-SGD table's attack − control, which is ``federated_control``'s code
  (:func:`~eegprivacy.studies.federated.control.summarise`) on another table: ``study_b.attack_minus_control``'s
  score model (:mod:`.study_b`) with this table's seeds, control AUROC, bootstrap and interval width (read from
  ``metrics/federated_audit_dpsgd.csv`` and ``params/federated_audit.yaml``).

Shapes are read from the committed outputs and params (:func:`audit_shape`, :func:`dp_sgd_shape`), never typed
here; "tiny" is a four-client federation for the seconds-long version in ``tests/``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from eegprivacy.evaluation.calibration import Trial
from eegprivacy.studies.calibration.study_b import (COHORT, CONTROL_MODEL, PARAMS, REPORT_B, SCALES, _case,
                                                    _matched_scale, _read_csv, cohort_shape, control_cells,
                                                    control_trial)

AUDIT_REPORT = "reports/federated_audit.md"
#: The labels a canary (and a null trial) takes: eegmmidb's two motor-imagery classes.
CLASSES = np.array([0, 1])
#: The tiny federation: four clients, two pooled runs of a 5-round schedule.
TINY_AUDIT = {"subjects": 4, "members": 12, "nonmembers": 4, "calibration": 4, "features": 4, "runs": 2,
              "canaries_per_client": 4, "guesses": 4, "num_rounds": 5}


def _configs(**audit_changes):
    """The stage's ``federated_audit`` and eegmmidb's ``federated_mia`` configs (params files), ``audit_changes``
    applied to the first."""
    from eegprivacy.studies.federated.audit import FederatedAuditConfig
    from eegprivacy.studies.federated.config import FederatedMIAConfig

    path = PARAMS / "federated_mia.yaml"
    training = FederatedMIAConfig.load(path, "federated_mia").for_dataset(COHORT, path)
    config = FederatedAuditConfig.load(PARAMS / "federated_audit.yaml", "federated_audit")
    return (replace(config, **audit_changes) if audit_changes else config), training


def _no_dp_schedule(config, training, members: int) -> tuple[dict, object]:
    """(cell, training knobs) of the audited DP-SGD row without DP: the cheapest audited schedule, and under the
    null any schedule gives the same answer (no canary reaches it)."""
    from eegprivacy.studies.federated.audit import settings, training_of

    no_dp = replace(config, paper_epsilons=[math.inf], dp_sgd_epsilons=[math.inf])  # no σ to calibrate
    cell = next(c for c in settings(no_dp, training) if c["protocol"] == "dp_sgd")
    return cell, training_of(cell, training, members)


@functools.lru_cache(maxsize=None)
def audit_shape() -> dict:
    """The audit as the committed outputs say it ran on eegmmidb: runs pooled per setting, canaries and guesses
    (``metrics/federated_audit.csv``, one value over its settings, checked against ``params/federated_audit.yaml``'s
    per-client canaries and per-run guesses), the federation's clients and their training, calibration and
    non-member rows (:func:`~.study_b.cohort_shape`), and the CSP feature count (``params/federated_mia.yaml``)."""
    table = _read_csv("federated_audit.csv")
    table = table[table["dataset"] == COHORT]
    values = {key: table[key].unique() for key in ("runs", "canaries", "guesses", "confidence", "delta")}
    if table.empty or any(len(v) != 1 for v in values.values()):
        raise ValueError("metrics/federated_audit.csv: expected one eegmmidb value of runs, canaries, guesses, "
                         f"confidence and delta over its settings, got {({k: list(v) for k, v in values.items()})}")
    config, training = _configs()
    base = cohort_shape()
    runs, m, r = (int(values[key][0]) for key in ("runs", "canaries", "guesses"))
    if (m, r) != (runs * config.canaries_per_client * base["subjects"], runs * 2 * config.guesses):
        raise ValueError(f"metrics/federated_audit.csv ({m} canaries, {r} guesses over {runs} runs) disagrees with "
                         f"params/federated_audit.yaml ({config.canaries_per_client} canaries per client on "
                         f"{base['subjects']} clients, {config.guesses} + {config.guesses} guesses per run)")
    if (float(values["confidence"][0]), float(values["delta"][0])) != (config.confidence, config.delta):
        raise ValueError("metrics/federated_audit.csv: confidence or delta differ from params/federated_audit.yaml")
    cell, fed = _no_dp_schedule(config, training, base["control_members"])
    return {"subjects": base["subjects"], "members": base["control_members"], "nonmembers": base["nonmembers"],
            "calibration": base["calibration"], "features": int(training.csp_components), "runs": runs,
            "config": config, "cell": cell, "fed": fed}


@functools.lru_cache(maxsize=None)
def _tiny_audit() -> dict:
    t = TINY_AUDIT
    config, training = _configs(canaries_per_client=t["canaries_per_client"], guesses=t["guesses"],
                                dp_sgd_num_rounds=t["num_rounds"])
    cell, fed = _no_dp_schedule(config, replace(training, clients_per_round=t["subjects"]), t["members"])
    return {**t, "config": config, "cell": cell, "fed": fed}


def null_clients(rng, shape: dict):
    """SYNTHETIC clients shaped like the DP-SGD rows' input: per client standard-normal features for its training
    members, calibration block and non-members, labels at random (nothing to learn: the run only carries the
    canaries' scores)."""
    from eegprivacy.studies.federated.control import ClientSet

    d = shape["features"]
    clients, blocks = [], []
    for _ in range(shape["subjects"]):
        Xm, Xn = rng.standard_normal((shape["members"], d)), rng.standard_normal((shape["nonmembers"], d))
        ym, yn = rng.choice(CLASSES, shape["members"]), rng.choice(CLASSES, shape["nonmembers"])
        clients.append((Xm, ym, Xn, yn))
        blocks.append(rng.standard_normal((shape["calibration"], d)))
    return ClientSet(clients, blocks)


def _one_run_bound(seed: int, effect: float, size: str) -> Trial:
    """One null (``effect`` 0: canaries planted nowhere) or planted (``effect`` 1) data set: the stage's runs,
    trained in lock-step (:func:`~eegprivacy.studies.federated.mia.federate_many`, each run's numbers its own
    federation's), scored, pooled and bounded by the stage's code; p = the bound's p-value at ε = 0."""
    from eegprivacy.attacks.one_run_audit import p_value
    from eegprivacy.studies.federated.audit import audit_summary, canary_arrays, plant_canaries
    from eegprivacy.studies.federated.mia import federate_many

    if effect not in (0.0, 1.0):
        raise ValueError(f"study_b.one_run_bound: effect is 0 (canaries never planted) or 1 (planted), got {effect}")
    s = audit_shape() if size == "cohort" else _tiny_audit()
    rng = np.random.default_rng(seed)
    runs, canaries = [], []
    for _ in range(s["runs"]):
        run_seed = int(rng.integers(2**31 - 1))
        drawn, trained = plant_canaries(run_seed, null_clients(rng, s), CLASSES, s["config"], plant=bool(effect))
        runs.append((s["cell"], run_seed, trained))
        canaries.append(drawn)
    done = [(cell, run_seed, canary_arrays(task, result, drawn))
            for (cell, run_seed, _), (task, result), drawn in zip(runs, federate_many(runs, s["fed"]), canaries)]
    key = (s["cell"]["protocol"], float(s["cell"]["epsilon"]))
    row = audit_summary(done, s["config"], {key: {"certified_epsilon_rdp": math.inf}}).iloc[0]
    p = p_value(int(row["canaries"]), int(row["guesses"]), int(row["right"]), 0.0, float(row["delta"]))
    return Trial(p_value=p, estimate=float(row["empirical_epsilon"]))


_case(
    "one_run_bound", _one_run_bound,
    test="federated_audit's one-run ε lower bound end to end: outlier_canaries (coins ½), FedAvg, update_scores "
         "(the server's update-margin score), the k highest / k lowest guesses per run, runs pooled, Steinke–Nasr–"
         "Jagielski Thm 5.2 at the certificates' δ; rejects when the bound is > 0 (its p-value at ε = 0 below "
         "1 − confidence = α)",
    used_in=(AUDIT_REPORT + ": empirical ε beside certified ε", REPORT_B),
    null_model="SYNTHETIC eegmmidb-shaped federations (clients, training / calibration / non-member rows per "
               "client, CSP feature count; standard-normal features, random labels) trained with the audited "
               "DP-SGD schedule without DP, the stage's runs pooled; the stage's canaries drawn and planted in no "
               "training set, so ε toward them is 0",
    effects=(1.0,), effect_unit="1: the same canaries planted (each with probability ½) in the same federation "
                                "without DP; power = share of bounds > 0",
    n_null=1000, n_power=100,
    sided="one-sided (a lower confidence bound on ε: only ε > 0 is ever claimed)")


# -- federated_audit's DP-SGD table: attack − preprocessing-only control -------------------------------------------


@functools.lru_cache(maxsize=None)
def dp_sgd_shape() -> dict:
    """:func:`~.study_b.cohort_shape` with the DP-SGD table's own seeds, median control AUROC and median attack −
    control interval width (``metrics/federated_audit_dpsgd.csv``) and bootstrap (``params/federated_audit.yaml``);
    its split (calibration block, members, non-members) is ``federated_control``'s."""
    table = _read_csv("federated_audit_dpsgd.csv")
    table = table[table["dataset"] == COHORT]
    base = cohort_shape()
    if table.empty or int(table["n_subjects"].max()) != base["subjects"]:
        raise ValueError(f"metrics/federated_audit_dpsgd.csv: no eegmmidb rows on {base['subjects']} subjects")
    arms = table[table["arm"].eq("control") & ~table["attack"].eq("utility_accuracy")]
    tested = table[table["arm"] == "attack_minus_control"]
    config, _ = _configs()
    return {**base, "control_seeds": {CONTROL_MODEL: int(table["n_seeds"].max())},
            "control_bootstrap": int(config.bootstrap),
            "control_arm_auroc": {CONTROL_MODEL: float(arms["value"].median())},
            "control_width": {CONTROL_MODEL: float((tested["ci_high"] - tested["ci_low"]).median())}}


@functools.lru_cache(maxsize=None)
def dp_sgd_scale() -> float:
    """The arms' own scale that gives the null interval the DP-SGD table's median width (as ``control_scale``)."""
    shape = dp_sgd_shape()
    return _matched_scale(lambda seed, effect, own: control_trial(*control_cells(seed, effect, "cohort", own=own,
                                                                                 shape=shape)),
                          shape["control_width"][CONTROL_MODEL])


SCALES.append(dp_sgd_scale)


def _dp_sgd_minus_control(seed: int, effect: float, size: str) -> Trial:
    if size != "cohort":
        return control_trial(*control_cells(seed, effect, size))
    return control_trial(*control_cells(seed, effect, size, own=dp_sgd_scale(), shape=dp_sgd_shape()))


_case(
    "dp_sgd_minus_control", _dp_sgd_minus_control,
    test="federated_control.summarise on federated_audit's DP-SGD cells: attack − preprocessing-only control "
         "pooled AUROC, paired cluster bootstrap over subjects + seeds, two-sided bootstrap p (before Holm)",
    used_in=(AUDIT_REPORT + ": DP-SGD attack − control", REPORT_B),
    null_model="study_b.attack_minus_control's score model (subject and trial effects shared by both arms, "
               "exchangeable subject-level membership slopes) with the DP-SGD table's seeds, median control AUROC "
               "and interval width; the difference's truth is 0",
    effects=(0.01, 0.03), effect_unit="attack − control pooled AUROC",
    n_power=100)
