"""Study B accounting: what the per-step Laplace gradient DP adds up to over a whole run.

Every (dataset, model, ε) of params/federated_mia.yaml's grid, plus the paper's protocol (20 rounds × 20 local
epochs; always includes the closing note's per-step ε = 5), is written as dp_accounting events — one Laplace
event per local step, self-composed over a round's steps and over the rounds — for two privacy units (an example,
a client) and two calibrations (nominal: the paper's ε per step; certified: 2·sqrt(d)·ε, what L2 clipping with
coordinate-wise Laplace actually certifies). Each is composed under basic composition, RDP and PLD at the stated
δ. Per-step, per-round and cumulative ε sit side by side in every output; the cumulative ε is given after every
round (the figure's curves) and, labelled as not a guarantee, at the expected number of rounds a client joins.

No training runs: the step count needs only each client's member count (the same ``member_split`` as
federated_mia) and the gradient dimension d, which is counted on a freshly built model whose input shape comes
from one client's CSP, as in :class:`~eegprivacy.studies.federated.mia.Federation`.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.params import Config, param
from eegprivacy.pipeline.keys import epsilon_key
from eegprivacy.privacy.accounting import (
    FederatedSchedule,
    expected_rounds,
    federated_round_event,
    make_accountant,
    per_step_epsilon,
)
from eegprivacy.studies.federated.config import DatasetSpec, FederatedMIAConfig
from eegprivacy.studies.federated.mia import load_trials, mechanism
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run
from eegprivacy.validation import DELTA, EPSILONS, AnyOf, Interval, ListOf, Options, count, subset_of

STAGE = "federated_accounting"
CURVE_COLUMNS = ["protocol", "dataset", "synthetic", "model", "dim", "epsilon", "calibration", "unit", "accountant",
                 "round", "value"]
CLOSING_NOTE_EPSILON = 5.0  # the closing note's configuration: per-step nominal ε = 5, paper protocol
COVERAGE_NOTE = (
    "What a DP client sends: its DP-trained trainable parameters, its number of examples and its node id, nothing "
    "else (no train loss, no gradient norm, no feature moments, no federated evaluation; checked message by "
    "message in tests/test_dp_client_messages.py). The number of examples is public by the protocol: FedAvg weights "
    "by it, and these step counts assume it known. EEGNet's BatchNorm running statistics are computed from the "
    "client's data in the forward pass and are not gradients: with federated_mia.batchnorm_stats = local (FedBN) "
    "each client keeps its own and never sends them; with shared they travel un-noised, and every ε of that "
    "configuration is printed as ∞ (guarantee: none, unnoised_channel names it).")
PER_EXAMPLE_NOTE = ("= per-client: CSP fitted on the client's private trials")
CSP_NOTE = (
    "Per-example ε = per-client ε. Each client fits its CSP filters and standardisation on all of its member trials "
    "before training, outside the DP step: replacing one trial moves every other trial's features "
    "(tests/test_csp_sensitivity.py), so a trial's privacy loss is its whole client's. The example rows therefore "
    "repeat the client's composition (every step of every round the client joins), marked " + repr(PER_EXAMPLE_NOTE)
    + "; a per-trial bound would need the preprocessing fitted on public data or under DP.")
UNIT_NOTE = (
    "Privacy unit the clip protects: the batch. Each step clips the client's batch gradient (not each example's) "
    "to L2 <= C, so replacing one trial or the whole batch moves it by the same <= 2C; an example therefore gets "
    "no more protection than its entire batch, and the noise is not reduced by the batch size as per-example "
    "clipping would allow. An example is in one batch per local epoch (local_epochs steps per round joined); a "
    "client pays every step of every round it joins. With one batch per epoch (members <= batch_size) the two "
    "coincide: a single trial and the whole subject get the same epsilon.")
GRID_KNOBS = ("models", "epsilons", "clip_norm", "test_size", "split_seed", "csp_components", "clients_per_round",
              "num_rounds", "local_epochs", "batch_size",
              "batchnorm_stats")  # the federated_mia keys these numbers depend on


# ---- params ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PldGrid(Config):
    """PLD discretisation (pessimistic, so an upper bound); widened where a step's ε is huge (PldAccountant)."""

    value_discretization_interval: float = param(Interval(0, None, closed="neither", text="a positive interval"),
                                                 default=1e-4, doc="base grid of privacy-loss values")
    max_step_points: int = param(count(1, "points"), default=100_000, doc="interval >= 2·ε_step / this")
    max_total_points: int = param(count(1, "points"), default=20_000_000, doc="interval >= Σε / this")


@dataclass(frozen=True)
class PaperProtocol(Config):
    """The paper's protocol, always reported beside the params grid (ε = 5 is added if missing)."""

    num_rounds: int = param(count(1, "rounds"))
    local_epochs: int = param(count(1, "epochs"))
    epsilons: list = param(EPSILONS, doc="per-step nominal ε")


@dataclass(frozen=True)
class FederatedAccountingConfig(Config):
    """``federated_accounting``: accountants, δ, privacy units and calibrations of study B's cumulative ε."""

    delta: float = param(DELTA, doc="δ for RDP and PLD (basic is pure ε)")
    accountants: list = param(subset_of(("basic", "rdp", "pld"), "accountants"))
    units: list = param(subset_of(("example", "client"), "privacy units"))
    calibrations: list = param(subset_of(("nominal", "certified"), "calibrations"))
    paper_protocol: PaperProtocol = param(doc="the paper's rounds, local epochs and per-step ε")
    rdp_orders: list | None = param(AnyOf((Options((None,)), ListOf(Interval(1, None, closed="neither"))),
                                          text="null (dp_accounting's default orders) or a non-empty list of "
                                               "RDP orders α > 1"), default=None)
    pld: PldGrid = param(default=PldGrid())

    def make_accountants(self) -> dict:
        """The configured accountants by name, with their options (RDP orders, PLD grid)."""
        options = {"rdp": {"orders": self.rdp_orders}, "pld": self.pld.to_dict()}
        return {name: make_accountant(name, **options.get(name, {})) for name in self.accountants}


def selected_datasets(grid: FederatedMIAConfig, requested: list | None, source) -> list[str]:
    """``requested`` (default: every dataset of the grid), each checked against the grid's datasets."""
    datasets = requested or list(grid.datasets)
    for name in datasets:
        grid.dataset_spec(name, source)
    return datasets


# ---- inputs: step counts and dimensions, no training -----------------------------------------------------------

def federation_shape(name: str, spec: DatasetSpec, grid: FederatedMIAConfig) -> dict:
    """Member counts per client and each model's gradient dimension d (trainable parameters; the DP step noises
    exactly those) for one dataset of the grid, split and CSP'd as federated_mia does."""
    from eegprivacy.federated.splits import member_split
    from eegprivacy.federated.torch_task import TorchTask
    from eegprivacy.signal.csp import MODEL_INPUT, ClientCSP

    dataset, trials = load_trials(name, spec)
    member = member_split(trials.y, trials.metadata["subject"], grid.test_size, grid.split_seed)
    subjects = trials.metadata["subject"].to_numpy()
    rows_of = [subjects == s for s in trials.subjects()]  # subject ids stay here; clients are indices
    members = [int((rows & member).sum()) for rows in rows_of]
    first = rows_of[0] & member
    models = {}
    for model in grid.models:
        csp = ClientCSP(n_components=grid.csp_components, output=MODEL_INPUT[model])
        shape = csp.fit(trials.X[first], trials.y[first]).transform(trials.X[first][:1]).shape[1:]
        net = TorchTask(model, shape).build(0)
        models[model] = {
            "dim": int(sum(p.numel() for p in net.parameters() if p.requires_grad)),
            "input_shape": [int(s) for s in shape],
            "unnoised_buffer_values": int(sum(b.numel() for b in net.buffers() if b.is_floating_point()))}
    return {"version": dataset.version(), "synthetic": bool(trials.synthetic), "n_clients": len(members),
            "members_min": min(members), "members_max": max(members), "models": models}


def protocols(grid: FederatedMIAConfig, config: FederatedAccountingConfig) -> list[dict]:
    """The params grid's (rounds, epochs, ε) and the paper protocol, which always carries the closing-note ε."""
    paper = config.paper_protocol
    paper_eps = sorted({float(e) for e in paper.epsilons} | {CLOSING_NOTE_EPSILON}, reverse=True)
    return [{"protocol": "params", "num_rounds": grid.num_rounds, "local_epochs": grid.local_epochs,
             "epsilons": [float(e) for e in grid.epsilons]},
            {"protocol": "paper", "num_rounds": paper.num_rounds, "local_epochs": paper.local_epochs,
             "epsilons": paper_eps}]


# ---- accounting ----------------------------------------------------------------------------------------------

class CurveCache:
    """Curves depend only on (accountant, per-step ε, steps per round, rounds, δ); datasets, models and units
    share many of them (e.g. example = client with one batch per epoch), so each is computed once."""

    def __init__(self, accountants: dict, delta: float):
        self.accountants, self.delta, self._memo = accountants, delta, {}

    def curve(self, name: str, event, key: tuple):
        if (name, key) not in self._memo:
            rounds = key[-1]
            self._memo[(name, key)] = self.accountants[name].curve(event, list(range(1, rounds + 1)), self.delta)
        return self._memo[(name, key)]


def unnoised_channel(model_info: dict, batchnorm_stats: str) -> str:
    """What travels un-noised beside the DP weights for one model: its BatchNorm running statistics when they are
    shared and it has any, else nothing ("")."""
    return "batchnorm_running_stats" if batchnorm_stats == "shared" and model_info["unnoised_buffer_values"] else ""


def no_guarantee(rows: list[dict], channel: str) -> list[dict]:
    """A private configuration with an un-noised channel certifies nothing: every ε is ∞, ``guarantee`` none."""
    return [{**row, "value": math.inf, "guarantee": "none", "unnoised_channel": channel,
             "detail": f"no guarantee: {channel} sent un-noised; composed value withheld"} for row in rows]


def cell_rows(cache: CurveCache, base: dict, *, epsilon: float, dim: int, calibration: str, unit: str,
              schedule: FederatedSchedule, rounds_expected: int, clip_norm: float, channel: str = "") -> list[dict]:
    """Per-step ε, then per accountant: per-round ε, cumulative ε after every round, and at the expected
    participation. The example unit composes as the client does (:data:`CSP_NOTE`); with an un-noised
    ``channel`` (and DP), every value is ∞ (:func:`no_guarantee`)."""
    step_eps = per_step_epsilon(epsilon, calibration, dim, clip_norm)
    composed = "client" if unit == "example" else unit  # CSP on the client's private trials: example = client
    steps = schedule.steps_per_round(composed)
    event = federated_round_event(epsilon, calibration=calibration, unit=composed, dim=dim, schedule=schedule,
                                  clip_norm=clip_norm)
    common = {**base, "epsilon": epsilon, "dim": dim, "calibration": calibration, "unit": unit,
              "num_rounds": schedule.num_rounds, "local_epochs": schedule.local_epochs,
              "batches_per_epoch": schedule.batches_per_epoch, "steps_per_round": steps,
              "unit_note": PER_EXAMPLE_NOTE if unit == "example" else "", "unnoised_channel": "",
              "guarantee": "per_step_laplace" if math.isfinite(epsilon) else "none"}
    rows = [{**common, "metric": "epsilon_per_step", "accountant": "none", "round": float("nan"),
             "value": step_eps, "rounds_basis": "none", "detail": "one local step"}]
    for name in cache.accountants:
        curve = cache.curve(name, event, (step_eps, steps, schedule.num_rounds))
        for r, bound in enumerate(curve, start=1):
            rows.append({**common, "metric": "epsilon_cumulative", "accountant": name, "round": r,
                         "value": bound.epsilon, "rounds_basis": "worst_case", "detail": bound.detail,
                         "seconds": bound.seconds})
            if r == 1:  # one round's steps: the per-round ε, reported beside the cumulative one
                rows.append({**rows[-1], "metric": "epsilon_per_round"})
        expected = curve[rounds_expected - 1]
        rows.append({**common, "metric": "epsilon_cumulative_expected", "accountant": name,
                     "round": rounds_expected, "value": expected.epsilon, "rounds_basis": "expected",
                     "detail": "NOT a guarantee: mean participation, no sampling amplification; " + expected.detail,
                     "seconds": expected.seconds})
    if channel and math.isfinite(epsilon):
        return no_guarantee(rows, channel)
    return rows


@dataclass
class Accounting:
    """Everything the stage writes: every row (``tidy``), each dataset's shape, the accountants and timings."""

    tidy: pd.DataFrame
    shapes: dict
    accountants: dict
    timings: dict


def dataset_rows(cache: CurveCache, name: str, shape: dict, grid: FederatedMIAConfig,
                 config: FederatedAccountingConfig) -> list[dict]:
    """Every protocol × model × ε × calibration × unit of one dataset (its own rounds and local epochs when the
    grid overrides them per dataset); notes the expected rounds in ``shape``."""
    grid = grid.for_dataset(name)
    clip_norm = float(grid.clip_norm)
    rows, rounds_of = [], {}
    for proto in protocols(grid, config):
        schedule = FederatedSchedule.for_client(proto["num_rounds"], proto["local_epochs"], shape["members_max"],
                                                grid.batch_size)
        rounds_expected = rounds_of[proto["protocol"]] = expected_rounds(proto["num_rounds"], grid.clients_per_round,
                                                                        shape["n_clients"])
        for model, info in shape["models"].items():
            base = {"study": "b", "dataset": name, "dataset_version": shape["version"],
                    "synthetic": shape["synthetic"], "protocol": proto["protocol"], "model": model,
                    "delta": config.delta, "clip_norm": clip_norm, "n": shape["n_clients"], "ci_low": float("nan"),
                    "ci_high": float("nan")}
            for eps in proto["epsilons"]:
                for calibration in config.calibrations:
                    for unit in config.units:
                        rows += cell_rows(cache, base, epsilon=eps, dim=info["dim"], calibration=calibration,
                                          unit=unit, schedule=schedule, rounds_expected=rounds_expected,
                                          clip_norm=clip_norm,
                                          channel=unnoised_channel(info, grid.batchnorm_stats))
    shape.update(expected_rounds=rounds_of, batch_size=grid.batch_size, clients_per_round=grid.clients_per_round,
                 batchnorm_stats=grid.batchnorm_stats,
                 unnoised_channels={m: unnoised_channel(i, grid.batchnorm_stats) for m, i in shape["models"].items()})
    return rows


def account(config: FederatedAccountingConfig, grid: FederatedMIAConfig, datasets: list[str]) -> Accounting:
    """The cumulative ε of every cell of every dataset (loading each only for its shape)."""
    accountants = config.make_accountants()
    cache = CurveCache(accountants, config.delta)
    timings, shapes, rows = {}, {}, []
    for name in datasets:
        started = time.perf_counter()
        shape = shapes[name] = federation_shape(name, grid.datasets[name], grid)
        timings[f"load_{name}"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        rows += dataset_rows(cache, name, shape, grid, config)
        timings[f"accounting_{name}"] = round(time.perf_counter() - started, 2)
    return Accounting(pd.DataFrame(rows), shapes, accountants, timings)


def headline_and_curves(tidy: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy rows without the intermediate rounds (per-step, per-round, final, expected), and the finite
    cumulative ε after every round (the plot data)."""
    curve = tidy.metric == "epsilon_cumulative"
    headline = tidy[~curve | (tidy["round"] == tidy["num_rounds"])]
    return headline, tidy.loc[curve & np.isfinite(tidy.value), CURVE_COLUMNS]


def finals(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per cell with per-step, per-round (per accountant), cumulative (per accountant, last round) and
    expected-participation ε."""
    keys = ["protocol", "dataset", "synthetic", "model", "dim", "epsilon", "calibration", "unit", "num_rounds",
            "local_epochs", "steps_per_round"]
    tidy = tidy.assign(**{c: tidy[c].fillna("") if c in tidy else "" for c in ("unit_note", "unnoised_channel")})
    keys += ["unit_note", "unnoised_channel"]
    last = tidy[(tidy.metric == "epsilon_cumulative") & (tidy["round"] == tidy["num_rounds"])]
    wide = last.pivot_table(index=keys, columns="accountant", values="value", aggfunc="first")
    wide.columns = [f"cumulative_{c}" for c in wide.columns]
    per_round = tidy[tidy.metric == "epsilon_per_round"].pivot_table(index=keys, columns="accountant",
                                                                     values="value", aggfunc="first")
    per_round.columns = [f"per_round_{c}" for c in per_round.columns]
    expected = tidy[tidy.metric == "epsilon_cumulative_expected"].pivot_table(
        index=keys, columns="accountant", values=["value", "round"], aggfunc="first")
    expected_cols = {f"expected_{c}": expected[("value", c)] for c in expected["value"].columns}
    expected_cols["expected_rounds"] = expected["round"].iloc[:, 0]
    step = tidy[tidy.metric == "epsilon_per_step"].set_index(keys)["value"].rename("per_step")
    return pd.concat([step, per_round, wide, pd.DataFrame(expected_cols)], axis=1).reset_index()


# ---- MLflow ----------------------------------------------------------------------------------------------------

def _child_metrics(cells: pd.DataFrame, names: list[str]) -> dict[str, float]:
    """A (model, ε) child's final numbers, finite ones only (no ∞ for no DP, no skipped accountant)."""
    metrics = {}
    for row in cells.itertuples(index=False):
        key = f"{row.protocol}/{row.calibration}/{row.unit}"
        metrics[f"{key}/epsilon_per_step"] = row.per_step
        for n in names:
            metrics[f"{key}/{n}/epsilon_per_round"] = getattr(row, f"per_round_{n}")
            metrics[f"{key}/{n}/epsilon_cumulative"] = getattr(row, f"cumulative_{n}")
    return {k: v for k, v in metrics.items() if math.isfinite(v)}


def log_to_mlflow(tidy: pd.DataFrame, summary: dict, config: FederatedAccountingConfig, grid: FederatedMIAConfig,
                  artifacts: list[tuple[str, str]]) -> None:
    """One parent run per dataset (``artifacts``: (path, folder) pairs), one child per (model, ε) with its final
    numbers as metrics."""
    table = finals(tidy)
    params = {STAGE: config.to_dict(), "federated_mia_grid": {k: getattr(grid, k) for k in GRID_KNOBS}}
    names = list(summary["accountants"])
    for ds, info in summary["datasets"].items():
        tags = functools.partial(required_tags, study="b", stage=STAGE, dataset=ds, dataset_version=info["version"],
                                 synthetic=info["synthetic"], seed=None, dvc_stage=STAGE,
                                 delta=f"{summary['delta']:g}")
        with start_run(study="b", tags=tags(), run_name=f"{STAGE}-{ds}", params=params):
            log_metrics({"n_clients": info["n_clients"], "members_max": info["members_max"]})
            for path, folder in artifacts:
                log_artifact(path, folder)
            for (model, eps), cells in table[table.dataset == ds].groupby(["model", "epsilon"], sort=False):
                with start_run(study="b", run_name=f"{STAGE}-{ds}-{model}-eps{eps:g}",
                               tags=tags(model=model, epsilon=epsilon_key(eps), mechanism=mechanism(eps)),
                               params={"dim": int(cells["dim"].iloc[0])}):
                    finite = _child_metrics(cells, names)
                    if finite:
                        log_metrics(finite)


AUDIT_COLUMNS = ("empirical_epsilon", "empirical_confidence", "audit_certified_epsilon", "empirical_over_certified",
                 "audit_note")


def attach_audit(headline: pd.DataFrame, audit: pd.DataFrame) -> pd.DataFrame:
    """The one-run audit (``federated_audit``'s rows) beside the certified cumulative ε: the paper grid's rows
    (certified calibration, unit example, at the last round, RDP and PLD) get the empirical lower bound at the
    same per-step ε, and DP-SGD's audited rows are appended as protocol ``dp_sgd``.

    The canaries skip the preprocessing, so a bound is compared with the certificate of the training alone
    (``audit_certified_epsilon``); where the row's own value composes more (the member-fitted CSP makes a trial's
    ε its client's), the row keeps its value and says so in ``audit_note``."""
    out = headline.copy()
    for column in AUDIT_COLUMNS:
        out[column] = np.nan if column != "audit_note" else ""
    if audit is None or audit.empty:
        return out
    audit = audit[audit["dataset"].isin(set(out["dataset"]))]  # only the cohorts this accounting covers
    paper = audit[audit["protocol"].eq("paper_laplace")]
    rows = (out["calibration"].eq("certified") & out["unit"].eq("example") & out["metric"].eq("epsilon_cumulative")
            & out["accountant"].isin(["rdp", "pld"]) & out["model"].eq("simplenet"))
    for _, r in paper.iterrows():
        match = rows & out["dataset"].eq(r["dataset"]) & np.isclose(out["epsilon"].astype(float), r["epsilon"])
        for index in out.index[match]:
            certificate = float(r[f"certified_epsilon_{out.at[index, 'accountant']}"])
            out.loc[index, ["empirical_epsilon", "empirical_confidence", "audit_certified_epsilon"]] = [
                r["empirical_epsilon"], r["confidence"], certificate]
            out.at[index, "empirical_over_certified"] = (r["empirical_epsilon"] / certificate
                                                         if math.isfinite(certificate) else np.nan)
            out.at[index, "audit_note"] = (f"one-run audit, {int(r['right'])}/{int(r['guesses'])} right of "
                                           f"{int(r['canaries'])} canaries; canaries skip the preprocessing, so the "
                                           "bound is compared with the training's own per-record certificate")
    extra = []
    for _, r in audit[audit["protocol"].eq("dp_sgd")].iterrows():
        for accountant in ("rdp", "pld"):
            certificate = float(r[f"certified_epsilon_{accountant}"])
            extra.append({"study": "b", "dataset": r["dataset"], "dataset_version": r["dataset_version"],
                          "synthetic": r["synthetic"], "protocol": "dp_sgd", "model": "simplenet",
                          "delta": r["delta"], "epsilon": r["epsilon"], "calibration": "gaussian_example",
                          "unit": "example", "metric": "epsilon_cumulative", "accountant": accountant,
                          "round": r.get("num_rounds", np.nan), "num_rounds": r.get("num_rounds", np.nan),
                          "value": certificate, "guarantee": "training only",
                          "unnoised_channel": r["epsilon_excludes"], "empirical_epsilon": r["empirical_epsilon"],
                          "empirical_confidence": r["confidence"], "audit_certified_epsilon": certificate,
                          "empirical_over_certified": (r["empirical_epsilon"] / certificate
                                                       if math.isfinite(certificate) else np.nan),
                          "audit_note": f"one-run audit, {int(r['right'])}/{int(r['guesses'])} right of "
                                        f"{int(r['canaries'])} canaries; σ = {r['noise_multiplier']:.4g}"})
    return pd.concat([out, pd.DataFrame(extra)], ignore_index=True) if extra else out
