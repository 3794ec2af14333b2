"""Calibration cases of study B's tests and intervals (``reports/study-b.md``, ``reports/federated_control.md``,
``reports/federated_mia_tables.md``, ``reports/federated_lira.md``, ``reports/federated_transfer.md``).

Every case makes per-trial attack scores shaped like the federation the report attacks (eegmmidb: its subjects =
clients, trials per subject, member share, seeds or target models and the stage's bootstrap resamples, all read
from the committed outputs ``metrics/federated_{control,mia,lira,transfer}.csv`` and the stages' params by
:func:`cohort_shape`, never typed here) and runs the function the stage runs on them.

The score model (:data:`SCORE_MODEL`, its parameters documented there) is Gaussian with the structure that
decides whether an interval over subjects is needed:

* a **subject effect** (share ``icc`` of a score's variance) shared by every arm, seed and target model: the
  client's trials sit together whatever model scores them;
* a **trial effect** (share ``trial_share`` of the rest) shared by the arms and models that score one trial: the
  arms of a paired comparison score the same rows;
* a **subject-level membership slope**: a subject's members sit ``δ + s_k`` above its non-members, ``s_k`` varying
  between subjects (SD ``slope_sd``), part shared by the arms of a comparison and part each arm's own. Under the
  null the *population* value is exactly the null value (pooled AUROC 0.5, or attack − control 0 because the two
  arms are exchangeable), while each subject's own value varies around it: the least favourable null of a test
  over subjects, and the one where a test that resamples trials (or that treats a subject's trials as
  independent) rejects too often (``tests/test_calibration_study_b.py`` shows it does).

The planted effects are the differences the reports print, in the report's unit (AUROC points); the truth of a
planted pooled AUROC is its expectation on ``K`` subjects (:func:`pooled_auroc`: the share 1/K of member /
non-member pairs from one subject cancel its subject effect).

Covered (one case each):

* ``study_b.attack_minus_control``: :func:`eegprivacy.studies.federated.control.summarise`, attack −
  preprocessing-only control AUROC, paired subjects+seeds cluster bootstrap, two-sided p (federated_control.md).
* ``study_b.mia_interval``: a federated_mia attack AUROC end to end: the stage's attacker
  (:class:`~eegprivacy.attacks.membership.MembershipAttack`, attacker-train/-test split), the cell's client
  bootstrap replicates (:class:`~eegprivacy.studies.federated.replicates.Replicates`) and the report's interval and
  one-sided p vs chance (:func:`eegprivacy.studies.federated.report.across_rounds`).
* ``study_b.client_utility``: :func:`eegprivacy.studies.federated.report.client_utility`, the per-client binomial
  test ("clients above chance") on the accuracy averaged over seeds, its trials divided by the design effect of
  seeds that resplit the same trials.
* ``study_b.lira_auroc``, ``study_b.lira_tail``: :func:`eegprivacy.studies.federated.lira.pooled.pooled_rows`, the
  pooled AUROC's two-way bootstrap and the TPR at the lowest resolvable FPR (blocked threshold bootstrap).
* ``study_b.lira_tail_below_rule``: the same interval
  (:func:`~eegprivacy.studies.federated.lira.pooled.cluster_bootstrap`) at the FPR the ``resolvable`` rule refuses
  (:data:`~eegprivacy.studies.federated.lira.config.LOWEST_FPR`, fewer than 10 independent non-members beyond): not
  printed; it measures what the rule guards against.
* ``study_b.lira_minus_control``: :func:`eegprivacy.studies.federated.lira.pooled.control_difference_rows`,
  LiRA − control pooled AUROC, paired two-way bootstrap, two-sided p.
* ``study_b.transfer``: :func:`eegprivacy.studies.federated.transfer.summarise`, joined − held-out accuracy,
  subjects+seeds bootstrap, one-sided p.
* federated_audit's one-run ε bound and its DP-SGD attack − control: :mod:`.study_b_audit` (on this score model
  and null federations).

Found and not covered (each printed one is an entry of :mod:`.not_measured`, which
``reports/calibration.md`` lists with its mark):

* federated_mia's ``seeds`` cells (CLA, GLA (paper)): a one-sample t-test of 5 per-seed means against chance with
  a t(4) interval. Its size under a null of iid seed means is exact by construction (t distribution); what it
  leaves out is the subject (the same 16 clients in every seed), which the table labels ``ci_over = seeds``.
  CLA's label *is* the client, so no subject-level null with its structure exists to simulate.
* federated_mia's GLA (sound) cells: the client bootstrap of ``mia_interval`` on 32 updates per round (one member
  and one non-member update per client, attacker-test half by client); the same functions as ``mia_interval``
  on a different shape, left out for cost (20 rounds of a grouped split per seed to be faithful).
* federated_mia's utility rows (``utility_*`` vs chance): :func:`~eegprivacy.evaluation.client_bootstrap.
  mean_replicates` over per-client accuracies, the same bootstrap of a client mean as ``transfer``'s arms.
* ``mia_interval`` simulates one attacked round per seed; the stage averages each seed's 20 rounds' replicates
  (rounds share their trials and clients) before crossing seeds, which this case does not reproduce.
* federated_transfer's other two comparisons (held out − untrained, held out − own data only) and the AUROC
  metric: the same bootstrap and p-value as the case's comparison (one call computes all of them).
* federated_lira's per-seed rows (t-interval over 10 target seeds, ``ci_over = seeds``) and its shadow-as-target
  rows (the pooled functions of ``lira_*`` on shadow masks).
* federated_accounting prints no test or interval (ε arithmetic).

One idea over about 740 lines: one score model of study B's federation and the cases drawn from it. Every case reads
its shape from :func:`cohort_shape` and draws its scores from :class:`_Cohort` under :data:`SCORE_MODEL`, and the
matched interval widths (:data:`SCALES`) are calibrated on those same draws; split by report, each module would
import the others' private cohort and scale.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from eegprivacy.evaluation.calibration import CalibrationCase, Trial, register

METRICS = Path("metrics")
PARAMS = Path("params")

#: The score model's parameters (see the module docstring); :func:`configure` sets them.
#: ``icc``: share of a score's variance between subjects (the client's trials sit together whatever model scores
#: them). ``trial_share``: share of the within-subject variance that is the trial's own (shared by the arms and
#: models that score it). ``slope_sd``: SD between subjects of the members' shift (score SD units), half its
#: variance shared by the two arms of a comparison, half each arm's own.
SCORE_MODEL = {"icc": 0.5, "trial_share": 0.5, "slope_sd": 0.3}

#: The "tiny" shapes (a few subjects, for the seconds-long version in ``tests/``).
TINY = {"subjects": 8, "trials": 12, "members": 8, "nonmembers": 4, "calibration": 0, "seeds": 2,
        "models": 5, "bootstrap": 199, "lira_bootstrap": 40, "attack_test_size": 0.5, "own": 0.3}

REPORT_B = "reports/study-b.md"
COHORT = "eegmmidb"


def _case(name: str, simulate, **fields) -> CalibrationCase:
    """Register ``study_b.<name>`` (``simulate`` and the :class:`CalibrationCase` ``fields``) on the cohort."""
    return register(CalibrationCase(name=f"study_b.{name}", cohort=COHORT, simulate=simulate, **fields))


def configure(**score_model) -> None:
    """Set the score model's parameters (unknown keys are an error)."""
    unknown = set(score_model) - set(SCORE_MODEL)
    if unknown:
        raise ValueError(f"unknown score-model parameter(s) {sorted(unknown)}; known: {sorted(SCORE_MODEL)}")
    SCORE_MODEL.update(score_model)
    for scale in SCALES:
        scale.cache_clear()


# -- the cohort's shape, from the committed outputs ---------------------------------------------------------------


def _read_csv(name: str):
    import pandas as pd

    path = METRICS / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: study B's calibration reads the federation's shape (subjects, "
                                "trials, seeds, target models) from the committed outputs of its stages "
                                f"(dvc repro {name.split('.')[0]})")
    return pd.read_csv(path, float_precision="round_trip")


def _params(stage: str) -> dict:
    from eegprivacy.params import load_section

    path = PARAMS / f"{stage}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: study B's calibration reads the stage's bootstrap resamples "
                                "and split from it")
    return load_section(path, stage)


@functools.lru_cache(maxsize=None)
def cohort_shape() -> dict:
    """The eegmmidb federation as study B's committed outputs describe it.

    * subjects, trials per subject, members and non-members per subject and target models: the LiRA targets'
      ``n_members``/``n_nonmembers`` rows and pooled ``n_clusters``/``n_models`` (``metrics/federated_lira.csv``);
    * federated_control's seeds per model and subjects (``metrics/federated_control.csv``), its calibration block
      and bootstrap (``params/federated_control.yaml``);
    * federated_mia's seeds of the subjects+seeds cells and attacker-test rows (``metrics/federated_mia.csv``),
      its attacker split and client bootstrap (``params/federated_mia.yaml``);
    * federated_transfer's subjects and seeds (``metrics/federated_transfer.csv``) and bootstrap.
    """
    lira = _read_csv("federated_lira.csv")
    lira = lira[lira["dataset"].fillna(COHORT) == COHORT] if "dataset" in lira else lira
    per_target = lira[lira["metric"].isin(["n_members", "n_nonmembers"])]
    n_members = per_target[per_target["metric"] == "n_members"]["value"]
    n_nonmembers = per_target[per_target["metric"] == "n_nonmembers"]["value"]
    if n_members.empty or n_members.nunique() != 1 or n_nonmembers.nunique() != 1:
        raise ValueError("metrics/federated_lira.csv: expected one n_members and one n_nonmembers per target")
    pooled = lira[lira["scope"].eq("target_pooled") & lira["metric"].eq("auroc")]
    subjects = int(pooled["n_clusters"].iloc[0])
    models = int(pooled["n_models"].iloc[0])
    members, nonmembers = float(n_members.iloc[0]) / subjects, float(n_nonmembers.iloc[0]) / subjects
    if members != int(members) or nonmembers != int(nonmembers):
        raise ValueError(f"metrics/federated_lira.csv: {n_members.iloc[0]:g} members and {n_nonmembers.iloc[0]:g} "
                         f"non-members do not divide over {subjects} subjects")
    members, nonmembers = int(members), int(nonmembers)
    trials = members + nonmembers
    diff = lira[lira["metric"] == "auroc_minus_control"]
    control_auroc = float(lira[lira["scope"].eq("target_pooled") & lira["metric"].eq("auroc")
                               & lira["attack"].eq("lira_online_control")]["value"].median())

    control = _read_csv("federated_control.csv")
    c_params = _params("federated_control")
    seeds = control.groupby("model")["n_seeds"].max().to_dict()
    if int(control["n_subjects"].max()) != subjects:
        raise ValueError(f"metrics/federated_control.csv has {control['n_subjects'].max()} subjects, the LiRA "
                         f"targets {subjects}")
    calibration = int(round(trials * float(c_params["calibration_fraction"])))
    arm_auroc = control[control["arm"].eq("control") & ~control["attack"].eq("utility_accuracy")]
    control_arm = {m: float(part["value"].median()) for m, part in arm_auroc.groupby("model")}
    tested = control[control["arm"] == "attack_minus_control"]
    control_width = {m: float((part["ci_high"] - part["ci_low"]).median()) for m, part in tested.groupby("model")}

    mia = _read_csv("federated_mia.csv")
    m_params = _params("federated_mia")
    cells = mia[(mia["dataset"] == COHORT) & mia["metric"].eq("auroc") & mia["ci_over"].eq("subjects+seeds")
                & mia["attack"].isin(["rla", "fla"])]
    clients = mia[(mia["dataset"] == COHORT) & mia["metric"].eq("n_clients")]["mean"]
    if cells.empty or clients.empty or int(clients.iloc[0]) != subjects:
        raise ValueError("metrics/federated_mia.csv: no eegmmidb RLA/FLA subjects+seeds AUROC cells, or a client "
                         "count that differs from the LiRA targets'")
    attack_test_size = float(m_params["attack_test_size"])
    if int(round(cells["n_test"].iloc[0])) != int(round(subjects * trials * attack_test_size)):
        raise ValueError(f"metrics/federated_mia.csv: {cells['n_test'].iloc[0]:g} attacker-test rows, not "
                         f"{attack_test_size:g} of {subjects} × {trials} trials")

    transfer = _read_csv("federated_transfer.csv")
    transfer = transfer[transfer["dataset"] == COHORT]
    held_out = transfer[transfer["metric"] == "held_out_accuracy"]
    t_params = _params("federated_transfer")
    summary_path = METRICS / "federated_transfer.json"
    if not summary_path.exists():
        raise FileNotFoundError(f"{summary_path} is missing (dvc repro federated_transfer)")
    summary = json.loads(summary_path.read_text())["summary"]
    widths = [v["ci_high"] - v["ci_low"] for key, v in summary.items()
              if key.endswith("accuracy/joined_minus_held_out")]
    transfer_width = float(np.median(widths)) if widths else math.nan
    return {
        "subjects": subjects, "trials": trials, "members": members, "nonmembers": nonmembers,
        # federated_control: the calibration block is taken out of the members
        "control_members": members - calibration, "calibration": calibration,
        "control_seeds": {str(k): int(v) for k, v in seeds.items()},
        "control_bootstrap": int(c_params["bootstrap"]), "control_arm_auroc": control_arm,
        "control_width": control_width,
        "mia_seeds": int(cells["n_seeds"].max()), "attack_test_size": attack_test_size,
        "mia_bootstrap": int(m_params["subject_bootstrap"]),
        "models": models, "lira_bootstrap": int(diff["n_resamples"].max()) if not diff.empty
        else int(_params("federated_lira")["bootstrap"]),
        "lira_control_auroc": control_auroc,
        "lira_diff_width": float((diff["ci_high"] - diff["ci_low"]).median()) if not diff.empty else math.nan,
        "transfer_subjects": int(held_out["subject_index"].nunique()),
        "transfer_seeds": int(held_out["seed"].nunique()),
        "transfer_nonmembers": int(held_out["n"].median()),
        "transfer_accuracy": float(held_out["value"].mean()), "transfer_width": transfer_width,
        "transfer_bootstrap": int(t_params["bootstrap"]),
    }


def _shape(size: str) -> dict:
    if size == "tiny":
        s = dict(TINY)
        return {**s, "control_members": s["members"], "control_seeds": {"simplenet": s["seeds"]},
                "control_bootstrap": s["bootstrap"], "control_arm_auroc": {"simplenet": 0.55},
                "mia_seeds": s["seeds"], "mia_bootstrap": s["bootstrap"], "lira_control_auroc": 0.9,
                "transfer_subjects": s["subjects"], "transfer_seeds": s["seeds"],
                "transfer_nonmembers": s["nonmembers"],
                "transfer_bootstrap": s["bootstrap"]}
    if size != "cohort":
        raise ValueError(f"size must be 'cohort' or 'tiny', got {size!r}")
    return cohort_shape()


# -- the score model ----------------------------------------------------------------------------------------------


def pooled_auroc(shift: float, n_subjects: int, slope_var: float, within_var: float, total_var: float) -> float:
    """Expected pooled AUROC of members shifted by ``shift`` (subject slopes of variance ``slope_var``) over
    non-members, on ``n_subjects`` subjects with equal member shares: the 1/K of member / non-member pairs from one
    subject differ by the within-subject variance (``within_var`` per score), the rest by the total."""
    k = float(n_subjects)
    return float(stats.norm.cdf(shift / math.sqrt(2 * within_var + slope_var)) / k
                 + (1 - 1 / k) * stats.norm.cdf(shift / math.sqrt(2 * total_var + slope_var)))


class _Cohort:
    """One simulated federation: subject and trial effects and the subjects' membership slopes (common part and
    each arm's own), fixed across the seeds or target models that score it.

    A score is ``subject + trial + own·noise + member·(shift + common slope + own·arm slope)``: ``own`` scales
    what is each arm's (or model's) own, the only part in which two arms scoring one trial differ."""

    def __init__(self, rng, n_subjects: int, trials: int, arms=("attack", "control"), own: float = 1.0,
                 slopes: bool = True):
        icc, share, tau2 = SCORE_MODEL["icc"], SCORE_MODEL["trial_share"], SCORE_MODEL["slope_sd"] ** 2 * slopes
        self.rng, self.k, self.t, self.own = rng, n_subjects, trials, float(own)
        self.subject = rng.standard_normal(n_subjects) * math.sqrt(icc)
        self.trial = rng.standard_normal((n_subjects, trials)) * math.sqrt((1 - icc) * share)
        self.noise_sd = math.sqrt((1 - icc) * (1 - share)) * self.own
        common = rng.standard_normal(n_subjects) * math.sqrt(tau2 / 2)
        self.slope = {arm: common + rng.standard_normal(n_subjects) * math.sqrt(tau2 / 2) * self.own
                      for arm in arms}

    @staticmethod
    def variances(own: float = 1.0, slopes: bool = True) -> dict:
        """Within-subject and total variance of a score and the variance of an arm's slope, at ``own``."""
        icc, share, tau2 = SCORE_MODEL["icc"], SCORE_MODEL["trial_share"], SCORE_MODEL["slope_sd"] ** 2 * slopes
        within = (1 - icc) * share + (1 - icc) * (1 - share) * own ** 2
        return {"within_var": within, "total_var": icc + within, "slope_var": tau2 / 2 * (1 + own ** 2)}

    @classmethod
    def auroc(cls, shift: float, n_subjects: int, own: float = 1.0, slopes: bool = True) -> float:
        """:func:`pooled_auroc` of an arm of this model."""
        return pooled_auroc(shift, n_subjects, **cls.variances(own, slopes))

    @classmethod
    def shift_for(cls, auroc: float, n_subjects: int, own: float = 1.0, slopes: bool = True) -> float:
        """The members' shift whose expected pooled AUROC (:meth:`auroc`) is ``auroc``."""
        if not 0.0 < auroc < 1.0:
            raise ValueError(f"an AUROC in (0, 1), got {auroc}")
        return float(optimize.brentq(lambda d: cls.auroc(d, n_subjects, own, slopes) - auroc, -30.0, 30.0,
                                     xtol=1e-12))

    def split(self, members: int, nonmembers: int, skip: int = 0) -> np.ndarray:
        """(K, T) 1 member, 0 non-member, −1 neither (a calibration block of ``skip`` trials): a per-subject split,
        as :func:`~eegprivacy.federated.splits.member_split` draws one per seed."""
        rank = np.argsort(self.rng.random((self.k, self.t)), axis=1).argsort(axis=1)
        out = np.full((self.k, self.t), -1, dtype=int)
        out[rank < members] = 1
        out[(rank >= members + skip) & (rank < members + skip + nonmembers)] = 0
        return out

    def scores(self, role: np.ndarray, arm: str | None, shift: float) -> np.ndarray:
        """(K, T) scores of one model/seed on the trials: subject + trial effect + the members' shift and the
        subject's slope in ``arm`` (None: no membership signal) + this model's own noise."""
        z = self.subject[:, None] + self.trial + self.rng.standard_normal((self.k, self.t)) * self.noise_sd
        if arm is not None:
            z = z + (role == 1) * (shift + self.slope[arm][:, None])
        return z


def _matched_scale(simulate, target_width: float, n_pilot: int = 8) -> float:
    """``own`` such that the null interval's median width matches ``target_width`` (the committed table's median):
    the arms differ only in their own parts, so the width of a difference is proportional to ``own``; a pilot of
    ``n_pilot`` null data sets at ``own = 1`` (fixed seeds) gives the ratio."""
    widths = [simulate(10_000 + i, 0.0, 1.0) for i in range(n_pilot)]
    widths = [t.high - t.low for t in widths if np.isfinite(t.high - t.low)]
    if not widths or not np.isfinite(target_width) or target_width <= 0:
        return 1.0
    return float(target_width / np.median(widths))


# -- federated_control: attack − preprocessing-only control -------------------------------------------------------

CONTROL_MODEL = "simplenet"


def control_cells(seed: int, effect: float, size: str, model: str = CONTROL_MODEL, own: float | None = None,
                  shape: dict | None = None) -> tuple[list, int, int, float]:
    """One federated_control table's cells for one (model, preprocessing, ε) and the loss attack: (cells, K, B,
    truth) as :func:`~eegprivacy.studies.federated.control.summarise` takes them. Attack and control share the
    members' shift that makes the control's pooled AUROC the cohort's median control AUROC, and their subjects'
    slopes exchangeably; ``effect`` raises the attack's pooled AUROC above the control's by that much. ``own``
    (None: :func:`control_scale` on "cohort", ``TINY["own"]`` on "tiny") scales what is each arm's own.
    ``shape`` (on "cohort"): another table of the same code, in :func:`cohort_shape`'s keys (its seeds, control
    AUROC and bootstrap; the DP-SGD rows of ``federated_audit``); its ``own`` must then be given."""
    s = shape if shape is not None and size == "cohort" else _shape(size)
    own = (control_scale(model) if size == "cohort" else TINY["own"]) if own is None else own
    k, seeds = s["subjects"], s["control_seeds"][model]
    base = _Cohort.shift_for(s["control_arm_auroc"][model], k, own)
    control_auroc = _Cohort.auroc(base, k, own)
    shift = _Cohort.shift_for(control_auroc + effect, k, own) if effect else base
    truth = _Cohort.auroc(shift, k, own) - control_auroc
    rng = np.random.default_rng(seed)
    cohort = _Cohort(rng, k, s["trials"], own=own)
    clients = np.repeat(np.arange(k)[:, None], s["trials"], axis=1)
    cells = []
    for index in range(seeds):
        role = cohort.split(s["control_members"], s["nonmembers"], s.get("calibration", 0))
        kept = role >= 0
        arrays = {}
        for arm, arm_shift in (("attack", shift), ("control", base), ("untrained", 0.0)):
            z = cohort.scores(role, arm if arm != "untrained" else None, arm_shift)
            arrays[f"{arm}/loss/scores"] = z[kept]
            arrays[f"{arm}/loss/member"] = role[kept]
            arrays[f"{arm}/loss/client"] = clients[kept]
            arrays[f"{arm}/accuracy"] = 0.5 + 0.05 * rng.standard_normal(k)
        cells.append(({"model": model, "preprocessing": "member_csp", "epsilon": math.inf}, index, arrays))
    return cells, k, s["control_bootstrap"], truth


@functools.lru_cache(maxsize=None)
def control_scale(model: str = CONTROL_MODEL) -> float:
    """The arms' own scale that gives the null attack − control interval the committed table's median width for
    ``model`` (``metrics/federated_control.csv``; :func:`_matched_scale`)."""
    return _matched_scale(lambda seed, effect, own: control_trial(*control_cells(seed, effect, "cohort", model, own)),
                          cohort_shape()["control_width"][model])


def control_trial(cells: list, n_clients: int, n_resamples: int, truth: float) -> Trial:
    """``control.summarise`` on the cells: its attack − control row as a :class:`Trial`."""
    from eegprivacy.studies.federated.control import summarise

    out = summarise(cells, n_clients, n_resamples=n_resamples, confidence=0.95)
    row = out[out["arm"] == "attack_minus_control"].iloc[0]
    return Trial(p_value=float(row["p_value"]), low=float(row["ci_low"]), high=float(row["ci_high"]), truth=truth,
                 estimate=float(row["value"]))


def _attack_minus_control(seed: int, effect: float, size: str) -> Trial:
    return control_trial(*control_cells(seed, effect, size))


_case(
    "attack_minus_control", _attack_minus_control,
    test="federated_control.summarise: attack − preprocessing-only control pooled AUROC, paired cluster bootstrap "
         "over subjects (client_resample_counts) + seeds, two-sided bootstrap p (before Holm)",
    used_in=("reports/federated_control.md: attack − control tables", REPORT_B),
    null_model="eegmmidb-shaped federation (subjects = clients, members / calibration / non-members per subject, "
               "SimpleNet's seeds, each seed its own split): per-trial loss-attack scores with a subject effect and "
               "a trial effect shared by both arms, both arms with the same members' shift (the cohort's median "
               "control AUROC) and exchangeable subject-level membership slopes; the difference's truth is 0",
    effects=(0.01, 0.09), effect_unit="attack − control pooled AUROC",
    n_power=100)


# -- federated_mia: an attack AUROC's subjects+seeds interval and its p-value vs chance ---------------------------


def _mia(seed: int, effect: float, size: str) -> Trial:
    """Per seed (its own per-subject split), RLA-like record scores of every trial; the stage's LR attacker on
    its attacker-train half scores the attacker-test half; the cell's client-bootstrap replicates
    (:meth:`Replicates.attack`, as ``Scoring._evaluate`` collects them) and the report's interval and one-sided
    bootstrap p vs chance (:func:`~eegprivacy.studies.federated.report.across_rounds`). ``effect``: the members'
    pooled AUROC above 0.5."""
    import pandas as pd

    from eegprivacy.attacks.membership import MembershipAttack
    from eegprivacy.studies.federated.replicates import Replicates
    from eegprivacy.studies.federated.report import across_rounds

    s = _shape(size)
    k = s["subjects"]
    shift = _Cohort.shift_for(0.5 + effect, k) if effect else 0.0
    rng = np.random.default_rng(seed)
    cohort = _Cohort(rng, k, s["trials"], arms=("attack",))
    owner = np.repeat(np.arange(k)[:, None], s["trials"], axis=1)
    rows, replicates = [], {}
    for index in range(s["mia_seeds"]):
        role = cohort.split(s["members"], s["nonmembers"])
        z = cohort.scores(role, "attack", shift)
        X = np.concatenate([z[role == 1], z[role == 0]])[:, None]
        y = np.concatenate([np.ones((role == 1).sum(), int), np.zeros((role == 0).sum(), int)])
        clients = np.concatenate([owner[role == 1], owner[role == 0]])
        attack = MembershipAttack(attacker="lr", random_state=int(rng.integers(2**31)))
        scores = attack.evaluate(X, y, test_size=s["attack_test_size"])
        reps = Replicates(k, s["mia_bootstrap"])
        reps.attack(attack, X, y, clients, scores, "rla", "lr", ("auroc",))
        arrays = reps.arrays()
        replicates[(COHORT, "simplenet", "inf", index)] = dict(zip((str(x) for x in arrays["replicate_keys"]),
                                                                   arrays["replicates"]))
        rows.append({"dataset": COHORT, "synthetic": False, "model": "simplenet", "epsilon": math.inf,
                     "attack": "rla", "attacker": "lr", "metric": "auroc", "seed": index, "round": 1,
                     "value": scores["auroc"], "chance": 0.5})
    out = across_rounds(pd.DataFrame(rows), replicates)
    row = out.iloc[0]
    if row["ci_over"] != "subjects+seeds":
        raise RuntimeError("across_rounds did not use the client-bootstrap replicates")
    return Trial(p_value=float(row["p_value"]), low=float(row["ci_low"]), high=float(row["ci_high"]),
                 truth=_Cohort.auroc(shift, k), estimate=float(row["mean"]))


_case(
    "mia_interval", _mia,
    test="federated_mia RLA/FLA AUROC: MembershipAttack (lr) on the attacker-train half, Replicates.attack "
         "(auroc_replicates over client_resample_counts) on the attacker-test half, report.across_rounds: "
         "subjects+seeds percentile interval and bootstrap p of AUROC − 0.5 (one-sided)",
    used_in=("reports/federated_mia_tables.md: attack tables (p_Holm vs chance)", REPORT_B),
    null_model="eegmmidb-shaped federation (subjects = clients, 80/20 members per subject, federated_mia's seeds, "
               "each its own split, attacker-test half of the stage's size): one record score per trial with a "
               "subject and a trial effect and subject-level membership slopes of mean 0; the pooled AUROC's "
               "truth is 0.5. One attacked round per seed (the stage averages 20 rounds' replicates)",
    effects=(0.03, 0.1), effect_unit="pooled attack AUROC − 0.5",
    n_null=600, n_power=100,
    why_fewer="an LR attacker fit and 2,000 client-bootstrap replicates per seed and the report's pandas summary: "
              "~0.2–0.3 s per data set on one core (600 null data sets ≈ 2–3 min)",
    sided="one-sided (the claim is 'the attack leaks': AUROC above chance; report.py tests score − chance ≤ 0)")


# -- federated_mia: clients above chance (per-client binomial test, seeds averaged, design effect) ------------


def _client_utility(seed: int, effect: float, size: str) -> Trial:
    """Per seed, each client's last-round accuracy on its non-members (its own split of the subject's trials);
    a trial's correctness is 1[trial effect + seed noise > −shift]: a trial wrong in one seed tends to be wrong in
    the next, as one trial scored by similar models is. :func:`~eegprivacy.studies.federated.report.
    client_utility` as the report calls it; the Trial's p is the smallest Holm p over the clients (the report's
    "clients above chance" count is nonzero), its interval client 0's Clopper–Pearson interval."""
    import pandas as pd

    from eegprivacy.studies.federated.report import client_utility

    s = _shape(size)
    k, share = s["subjects"], SCORE_MODEL["trial_share"]
    shift = stats.norm.ppf(0.5 + effect)  # P(correct) = Φ(shift): trial effect + noise has variance 1
    rng = np.random.default_rng(seed)
    trial = rng.standard_normal((k, s["trials"])) * math.sqrt(share)
    rows = []
    for index in range(s["mia_seeds"]):
        rank = np.argsort(rng.random((k, s["trials"])), axis=1).argsort(axis=1)
        held = rank >= s["trials"] - s["nonmembers"]
        correct = (trial + rng.standard_normal(trial.shape) * math.sqrt(1 - share) + shift) > 0
        for client in range(k):
            rows.append({"dataset": COHORT, "synthetic": False, "model": "simplenet", "epsilon": math.inf,
                         "test_size": s["nonmembers"] / s["trials"],
                         "seed": index, "round": 1, "client": client, "metric": "client_accuracy",
                         "value": float(correct[client, held[client]].mean()), "n": float(held[client].sum())})
    out = client_utility(pd.DataFrame(rows))
    first = out[out["client"] == 0].iloc[0]
    return Trial(p_value=float(out["p_holm"].min()), low=float(first["ci_low"]), high=float(first["ci_high"]),
                 truth=0.5 + effect, estimate=float(first["accuracy"]))


_case(
    "client_utility", _client_utility,
    test="report.client_utility: per client, last-round non-member accuracy averaged over seeds, read as a count "
         "on one seed's trials over the design effect 1/S + (1 − 1/S)·f, one-sided binomial test vs 0.5, Holm over "
         "the clients (Trial p: the smallest p_Holm, i.e. 'any client above "
         "chance'); interval: Clopper–Pearson of client 0",
    used_in=("reports/federated_mia_tables.md: clients above chance", REPORT_B),
    null_model="eegmmidb-shaped clients (trials per subject, non-members per seed, federated_mia's seeds, each "
               "seed its own split): every client at chance, a trial's correctness correlated across seeds through "
               "a trial effect (share trial_share of a probit); truth 0.5",
    effects=(0.15,), effect_unit="every client's accuracy − 0.5",
    sided="one-sided (a client above chance; below chance is not utility)")


# -- federated_lira: pooled AUROC, TPR at the resolvable FPR, and LiRA − control ----------------------------------


def lira_per_model(seed: int, effect: float, size: str, base_auroc: float = 0.5, own: float = 1.0,
                   with_control: bool = False, slopes: bool = True) -> tuple[dict, np.ndarray, dict]:
    """{(attack, ""): [(member, scores) per target model]} as the LiRA stage pools them, the trials' subject codes
    and the truth. Every target draws its own per-subject split; a trial's score shares its subject and trial
    effect across targets (the same shadows score it). The attack's pooled AUROC is ``base_auroc + effect``; with
    ``with_control`` a control arm at ``base_auroc`` scores the same trials (exchangeable with the attack at
    ``effect`` = 0). ``slopes=False``: no subject-level membership slopes (membership carries no signal at all
    under the null, so a TPR's truth is its FPR; with mean-zero slopes the members' scores are wider than the
    non-members' and the TPR at a low FPR exceeds it although the AUROC is 0.5)."""
    from eegprivacy.studies.federated.lira.config import CONTROL_SUFFIX

    s = _shape(size)
    k = s["subjects"]
    base = _Cohort.shift_for(base_auroc, k, own, slopes) if base_auroc != 0.5 else 0.0
    shift = (_Cohort.shift_for(_Cohort.auroc(base, k, own, slopes) + effect, k, own, slopes) if effect else base)
    rng = np.random.default_rng(seed)
    cohort = _Cohort(rng, k, s["trials"], own=own, slopes=slopes)
    per_model = {("lira_online", ""): [], ("lira_online" + CONTROL_SUFFIX, ""): []}
    for _ in range(s["models"]):
        role = cohort.split(s["members"], s["nonmembers"])
        member = role.ravel()
        per_model[("lira_online", "")].append((member, cohort.scores(role, "attack", shift).ravel()))
        if with_control:
            per_model[("lira_online" + CONTROL_SUFFIX, "")].append((member, cohort.scores(role, "control",
                                                                                          base).ravel()))
    if not with_control:
        del per_model[("lira_online" + CONTROL_SUFFIX, "")]
    v = _Cohort.variances(own, slopes)
    truth = {"auroc": _Cohort.auroc(shift, k, own, slopes), "difference": _Cohort.auroc(shift, k, own, slopes)
             - _Cohort.auroc(base, k, own, slopes), "shift": shift, **v}
    return per_model, np.repeat(np.arange(k), s["trials"]), truth


def _tpr_truth(fpr: float, truth: dict) -> float:
    """The population TPR at ``fpr`` (infinitely many subjects): non-members N(0, total), members N(shift,
    total + slope)."""
    z = math.sqrt(truth["total_var"]) * stats.norm.ppf(1 - fpr)
    return float(1 - stats.norm.cdf((z - truth["shift"]) / math.sqrt(truth["total_var"] + truth["slope_var"])))


def _lira_rows(seed: int, effect: float, size: str, slopes: bool) -> tuple[dict, dict]:
    from eegprivacy.studies.federated.lira.pooled import pooled_rows

    s = _shape(size)
    per_model, codes, truth = lira_per_model(seed, effect, size, slopes=slopes)
    rows, _ = pooled_rows(per_model, s["lira_bootstrap"], int(seed) % 2**31, "target_pooled", 1, codes, codes)
    return {r["metric"]: r for r in rows}, truth


def _lira_auroc(seed: int, effect: float, size: str) -> Trial:
    rows, truth = _lira_rows(seed, effect, size, slopes=True)
    r = rows["auroc"]
    return Trial(low=float(r["ci_low"]), high=float(r["ci_high"]), truth=truth["auroc"], estimate=float(r["value"]))


def _lira_tail(seed: int, effect: float, size: str) -> Trial:
    rows, truth = _lira_rows(seed, effect, size, slopes=False)
    r = rows["tpr_at_resolvable_fpr"]
    if not r["resolvable"]:
        return Trial()
    return Trial(low=float(r["ci_low"]), high=float(r["ci_high"]), truth=_tpr_truth(float(r["fpr"]), truth),
                 estimate=float(r["value"]))


def below_rule_fpr(n_independent: int) -> float:
    """The FPR one step below the lowest the ``resolvable`` rule allows on the 1-2-5 grid (0.01 where 0.02 is
    the lowest resolvable): the rule's boundary, fewer than 10 independent non-members beyond its threshold."""
    from eegprivacy.studies.federated.lira.config import LOWEST_FPR
    from eegprivacy.studies.federated.lira.scoring import resolvable_fpr

    lowest = resolvable_fpr(LOWEST_FPR, n_independent)
    mantissa, exponent = f"{lowest:.0e}".split("e")
    step = {"1": (5.0, int(exponent) - 1), "2": (1.0, int(exponent)), "5": (2.0, int(exponent))}[mantissa]
    return float(f"{step[0] * 10.0 ** step[1]:.12g}")


def _lira_tail_below_rule(seed: int, effect: float, size: str) -> Trial:
    """The blocked threshold bootstrap (:func:`~eegprivacy.studies.federated.lira.pooled.cluster_bootstrap`, as
    ``pooled_rows`` calls it) at :func:`below_rule_fpr`, which the ``resolvable`` rule refuses on this pool."""
    from eegprivacy.studies.federated.lira.pooled import _stack, cluster_bootstrap
    from eegprivacy.studies.federated.lira.scoring import independent_nonmembers, resolvable, tpr_at_threshold

    s = _shape(size)
    per_model, codes, truth = lira_per_model(seed, effect, size, slopes=False)
    members, scores = _stack(per_model[("lira_online", "")])
    n_independent = independent_nonmembers(members)
    fpr = below_rule_fpr(n_independent)
    if resolvable(fpr, n_independent):
        raise RuntimeError(f"the pool resolves {fpr:g}: this case measures an FPR the rule refuses")
    low, high = cluster_bootstrap(members, scores, codes, {"tpr": fpr}, s["lira_bootstrap"], int(seed) % 2**31,
                                  with_auroc=False)["tpr"]
    return Trial(low=low, high=high, truth=_tpr_truth(fpr, truth),
                 estimate=tpr_at_threshold(members.ravel(), scores.ravel(), fpr))


LIRA_REPORT = "reports/federated_lira.md"
LIRA_NULL = ("eegmmidb-shaped LiRA pool (subjects, trials per subject, the stage's target models, each with its own "
             "80/20 split per subject): per (target, trial) scores with a subject and a trial effect shared across "
             "targets")
LIRA_SLOPES = ", and subject-level membership slopes of mean 0"
LIRA_FEWER = ("interval only (no test, so no size to decide): 500 data sets put the coverage within about ±0.02 "
              "(Wilson); 0.09 s per data set")

_case(
    "lira_auroc", _lira_auroc,
    test="lira.pooled_rows: pooled AUROC over target models, two-way percentile bootstrap (target models × "
         "subjects); interval only (no test)",
    used_in=(LIRA_REPORT + ": pooled AUROC",),
    null_model=LIRA_NULL + LIRA_SLOPES + "; the pooled AUROC's truth is 0.5",
    effects=(0.4,), effect_unit="pooled AUROC − 0.5 (0.4: the cohort's LiRA, 0.9)",
    n_null=500, n_power=100, why_fewer=LIRA_FEWER)

_case(
    "lira_tail", _lira_tail,
    test="lira.pooled_rows: TPR at the lowest FPR the pool resolves (resolvable_fpr, ≥ 10 independent "
         "non-members beyond), blocked threshold bootstrap over target models × subjects; interval only",
    used_in=(LIRA_REPORT + ": pooled TPR at the resolvable FPR",),
    null_model=LIRA_NULL + ", membership without signal (no slopes: mean-zero slopes widen the members' scores, "
               "so TPR > FPR in the tail although the AUROC is 0.5); the TPR's truth is the FPR",
    effects=(0.4,), effect_unit="pooled AUROC − 0.5 (TPR truth: the population TPR)",
    n_null=500, n_power=100, why_fewer=LIRA_FEWER)

_case(
    "lira_tail_below_rule", _lira_tail_below_rule,
    test="lira.cluster_bootstrap (blocked threshold bootstrap) one 1-2-5 step below the lowest FPR the resolvable "
         "rule allows (1 % on the cohort's pool: ~6 independent non-members beyond): not printed; measures what "
         "the rule guards against",
    used_in=(LIRA_REPORT + ": the 'not resolvable' TPR cells (the rule's reason)",),
    null_model=LIRA_NULL + ", membership without signal; the TPR's truth is the FPR",
    effects=(), n_null=500, n_power=0, why_fewer=LIRA_FEWER)


def _lira_minus_control(seed: int, effect: float, size: str, own: float | None = None) -> Trial:
    from eegprivacy.studies.federated.lira.pooled import control_difference_rows

    s = _shape(size)
    own = (lira_scale() if size == "cohort" else TINY["own"]) if own is None else own
    per_model, codes, truth = lira_per_model(seed, effect, size, base_auroc=s["lira_control_auroc"], own=own,
                                             with_control=True)
    row = next(r for r in control_difference_rows(per_model, s["lira_bootstrap"], int(seed) % 2**31,
                                                  "target_pooled", 1, codes, codes) if r["attack"] == "lira_online")
    return Trial(p_value=float(row["p_value"]), low=float(row["ci_low"]), high=float(row["ci_high"]),
                 truth=truth["difference"], estimate=float(row["value"]))


@functools.lru_cache(maxsize=None)
def lira_scale() -> float:
    """The arms' own scale that gives the null LiRA − control interval the committed median width
    (``metrics/federated_lira.csv``; :func:`_matched_scale`)."""
    return _matched_scale(lambda seed, effect, own: _lira_minus_control(seed, effect, "cohort", own),
                          cohort_shape()["lira_diff_width"], n_pilot=4)


_case(
    "lira_minus_control", _lira_minus_control,
    test="lira.control_difference_rows (paired_difference): LiRA − preprocessing-only control pooled AUROC, paired "
         "two-way bootstrap (target models × subjects), two-sided bootstrap p (before Holm)",
    used_in=(LIRA_REPORT + ": LiRA − control table",),
    null_model=LIRA_NULL + LIRA_SLOPES + ", both arms at the cohort's median pooled control AUROC and exchangeable "
               "(a shared and an own slope each); the difference's truth is 0",
    effects=(0.0025, 0.01), effect_unit="LiRA − control pooled AUROC",
    n_null=2000, n_power=100)


# -- federated_transfer: joined − held out ----------------------------------------------------------------------


def _transfer(seed: int, effect: float, size: str, own: float | None = None) -> Trial:
    """Per (seed, subject), each arm's accuracy on the subject's non-members of that seed (a trial correct when
    its probit score exceeds 0): a subject and a trial effect shared by the arms, the arms' subject-level slopes
    exchangeable; ``effect`` raises the joined arm's expected accuracy by that much. Every arm's AUROC row is
    the accuracy's (the case reads the accuracy comparison). :func:`~eegprivacy.studies.federated.transfer.
    summarise` on the tidy rows; its ``joined_minus_held_out`` accuracy row."""
    import pandas as pd

    from eegprivacy.studies.federated.transfer import summarise

    s = _shape(size)
    own = (transfer_scale() if size == "cohort" else TINY["own"]) if own is None else own
    k = s["transfer_subjects"]
    v = _Cohort.variances(own)
    sd = math.sqrt(v["total_var"] + v["slope_var"])  # a non-member's score: no member shift, an arm's slope
    base = sd * stats.norm.ppf(s.get("transfer_accuracy", 0.6))
    rng = np.random.default_rng(seed)
    cohort = _Cohort(rng, k, s["trials"], arms=("held_out", "joined", "own_data_only", "untrained"), own=own)
    shift = {"joined": sd * stats.norm.ppf(stats.norm.cdf(base / sd) + effect) - base}
    rows = []
    for index in range(s["transfer_seeds"]):
        role = cohort.split(s["members"], s["transfer_nonmembers"] if "transfer_nonmembers" in s
                            else s["nonmembers"])
        for arm in ("held_out", "joined", "own_data_only", "untrained"):
            z = cohort.scores(np.zeros_like(role), None, 0.0) + cohort.slope[arm][:, None] + base + shift.get(arm, 0.0)
            correct = z > 0
            for subject in range(k):
                acc = float(correct[subject, role[subject] == 0].mean())
                for metric in ("accuracy", "auroc"):
                    rows.append({"model": "simplenet", "epsilon": math.inf, "seed": index, "subject_index": subject,
                                 "metric": f"{arm}_{metric}", "value": acc, "chance": 0.5, "n": 1})
    out = summarise(pd.DataFrame(rows), n_resamples=s["transfer_bootstrap"], confidence=0.95)
    row = out[(out["arm"] == "joined_minus_held_out") & (out["metric"] == "accuracy")].iloc[0]
    return Trial(p_value=float(row["p_value"]), low=float(row["ci_low"]), high=float(row["ci_high"]),
                 truth=effect if effect else 0.0, estimate=float(row["value"]))


@functools.lru_cache(maxsize=None)
def transfer_scale() -> float:
    """The arms' own scale that gives the null joined − held-out accuracy interval the committed width
    (``metrics/federated_transfer.json``; :func:`_matched_scale`)."""
    return _matched_scale(lambda seed, effect, own: _transfer(seed, effect, "cohort", own),
                          cohort_shape()["transfer_width"])


_case(
    "transfer", _transfer,
    test="federated_transfer.summarise: joined − held-out non-member accuracy, paired by subject and seed, "
         "subjects+seeds bootstrap (bootstrap_indices × seed_indices), one-sided bootstrap p (before Holm)",
    used_in=("reports/federated_transfer.md: comparisons",),
    null_model="eegmmidb-shaped leave-one-subject-out table (subjects, seeds, non-members per subject of each "
               "seed's split): per-trial probit correctness with a subject and a trial effect shared by the arms, "
               "the arms' subject-level slopes exchangeable, the cohort's mean held-out accuracy; truth 0",
    effects=(0.03, 0.1), effect_unit="joined − held-out accuracy",
    n_null=1000, n_power=100,
    sided="one-sided (the report asks whether joining adds accuracy; transfer.COMPARISONS are one-sided by "
          "design)")


#: The cached own-scale matchers :func:`configure` clears (a module adding a case on this score model adds its own).
SCALES = [control_scale, lira_scale, transfer_scale]
