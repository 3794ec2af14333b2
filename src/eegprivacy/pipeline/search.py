"""Study-independent parts of the Optuna search stages (``optuna_study_a``, ``optuna_study_b``).

Both stages search a two-objective trade-off (utility maximised, an attack's success minimised) in a resumable
RDB study, log every trial as an MLflow child run and write the same kind of Pareto outputs. What makes that
machinery correct (masking the storage password, heartbeats so a killed worker's trial is failed, counting only
COMPLETE trials towards the target, an exact 2-D hypervolume) lives here once, so the stages only define their
problem. Objectives are named; a trial keeps ``<name>_per_seed``, ``<name>_ci_low`` and ``<name>_ci_high`` as user
attributes (:func:`set_seed_attrs`), which the callback, the tidy table and the front summary read back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.tracking.runs import log_artifact, log_metrics, start_run

BOUNDS = ("ci_low", "ci_high")


def public_url(url: str) -> str:
    """The storage URL without its password: a PostgreSQL URL must not put a credential into MLflow."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def make_sampler(cfg: Mapping):
    """Multi-objective TPE or NSGA-II from a params section (``sampler``, ``seed``, ``population_size``): with one
    worker a fixed seed proposes the same trials."""
    import optuna

    if cfg["sampler"] == "tpe":
        return optuna.samplers.TPESampler(seed=cfg["seed"])
    if cfg["sampler"] == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=cfg["seed"], population_size=cfg["population_size"])
    raise ValueError(f"sampler must be 'tpe' or 'nsga2', got {cfg['sampler']!r}")


def open_study(url: str, name: str, cfg: Mapping, directions: Sequence[str]):
    """Create the study or load it (``load_if_exists``); heartbeats let a later worker fail trials left RUNNING
    by a killed process instead of counting them forever."""
    import optuna

    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    # Workers starting together on a fresh database would race to create Optuna's schema (PostgreSQL: "duplicate
    # key ... pg_type" for its enum types) and the study: one at a time.
    with _database_lock(url, "schema"), warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(url, heartbeat_interval=cfg["heartbeat_interval"],
                                             grace_period=2 * cfg["heartbeat_interval"])
        return optuna.create_study(study_name=name, storage=storage, sampler=make_sampler(cfg),
                                   directions=list(directions), load_if_exists=True)


def n_complete(study) -> int:
    import optuna

    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


class _TargetReached(Exception):
    """Raised by :class:`_TargetGate` instead of creating a trial once the target is covered."""


@contextlib.contextmanager
def _database_lock(url: str, name: str, engine=None) -> Iterator[None]:
    """Hold the lock ``name`` that every worker on the database at ``url`` takes around a read-then-write step:
    a PostgreSQL transaction-level advisory lock (released when its transaction ends, so a killed worker cannot
    leave it held; on ``engine`` when given, else on a connection of its own), a file lock for sqlite (whose
    workers share a machine; one lock whatever the name); other databases get no lock."""
    if url.startswith("postgresql"):
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        key = int.from_bytes(hashlib.sha256(f"eegprivacy/optuna/{name}".encode()).digest()[:8], "big", signed=True)
        lock_engine = engine or create_engine(url, poolclass=NullPool)
        try:
            with lock_engine.begin() as connection:
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
                yield
        finally:
            if engine is None:
                lock_engine.dispose()
    elif url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        import fcntl
        import tempfile

        # one (empty) lock file per database in the temp dir, not beside the database; its sections never nest
        digest = hashlib.sha256(str(Path(url.removeprefix("sqlite:///")).resolve()).encode()).hexdigest()[:16]
        with open(Path(tempfile.gettempdir()) / f"eegprivacy-optuna-{digest}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    else:
        yield


class _TargetGate:
    """Creates a trial only while the study's COMPLETE, RUNNING and WAITING trials number fewer than the target,
    under :func:`_database_lock`: with several workers on one study the count of COMPLETE trials comes out
    exactly at the target instead of overshooting by the trials in flight (what ``MaxTrialsCallback`` does: each
    worker checks the count after its own trial, then starts another while the others' are still running). A
    FAILed trial frees its slot; a RUNNING one whose worker died is failed first (heartbeats), so it does too.
    Exact on PostgreSQL and sqlite (:func:`_database_lock`); elsewhere workers starting a trial at the same
    moment can still overshoot."""

    def __init__(self, study, n_trials: int):
        self.study, self.n_trials, self.started = study, int(n_trials), 0

    def ask(self, fixed_distributions=None):
        import optuna

        study = self.study
        # Optuna offers no public accessor for a study's storage: the RDB backend is unwrapped from its cache.
        backend = getattr(study._storage, "_backend", None)
        with _database_lock(str(getattr(backend, "url", "")), f"trials/{study.study_name}",
                            getattr(backend, "engine", None)):
            optuna.storages.fail_stale_trials(study)  # a no-op without heartbeats
            taken = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                             optuna.trial.TrialState.RUNNING,
                                                             optuna.trial.TrialState.WAITING))
            if len(taken) >= self.n_trials:
                raise _TargetReached
            trial = type(study).ask(study, fixed_distributions)
        self.started += 1
        return trial


def optimize_to_target(study, objective, n_trials: int, callbacks: Sequence = (), progress: bool = False) -> int:
    """Run trials until the study holds ``n_trials`` COMPLETE ones (every worker's count): a rerun adds only the
    missing trials, and concurrent workers on one storage stop exactly at the target (:class:`_TargetGate`;
    PostgreSQL or sqlite). Returns how many trials this call started."""
    import optuna

    todo = max(0, int(n_trials) - n_complete(study))
    if not todo:
        return 0
    gate = _TargetGate(study, n_trials)
    # Study.optimize creates every trial through ``study.ask()``; the instance attribute routes that through the gate
    study.ask = gate.ask
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.optimize(objective, n_trials=todo, show_progress_bar=progress, callbacks=list(callbacks))
    except _TargetReached:
        pass
    finally:
        del study.ask
    return gate.started


def unit_bound(value):
    """An interval bound clipped to [0, 1]: every objective and reported metric of these searches is a rate or an
    AUROC, and a t-interval over two or three seeds easily reaches past the range (NaN and None pass through)."""
    if value is None or not np.isfinite(value):
        return value
    return float(min(max(value, 0.0), 1.0))


def set_seed_attrs(trial, name: str, values: Sequence[float]) -> float:
    """Keep one metric's per-seed values and t-interval (clipped to [0, 1]) on the trial; return the mean over
    seeds."""
    from eegprivacy.evaluation.intervals import mean_ci

    values = [float(v) for v in values]
    mean, low, high = mean_ci(values)
    trial.set_user_attr(f"{name}_per_seed", values)
    trial.set_user_attr(f"{name}_ci_low", unit_bound(low))
    trial.set_user_attr(f"{name}_ci_high", unit_bound(high))
    return mean


def metric_value(trial, name: str, objectives: Sequence[str]):
    """An objective's value, or the mean of a reported (non-objective) metric kept as a user attribute."""
    if name in objectives:
        return trial.values[list(objectives).index(name)] if trial.values else np.nan
    return trial.user_attrs.get(name, np.nan)


class MLflowChildRuns:
    """Optuna callback: one MLflow child run per COMPLETE trial under ``parent_run_id`` (what
    optuna-integration's MLflowCallback does, but through ``start_run`` so the project's tag and no-identifier
    policy applies). Optuna calls it in the process that ran ``optimize``, after the trial is stored.

    ``metrics`` names what each child logs: the objectives (in order) and any reported metric kept as a user
    attribute, each with its interval and its per-seed values as a metric history (step = seed)."""

    def __init__(self, study_key: str, parent_run_id: str, tags_fn: Callable, params: dict,
                 objectives: Sequence[str], metrics: Sequence[str] = ()):
        self.study_key, self.parent_run_id, self.tags_fn, self.params = study_key, parent_run_id, tags_fn, params
        self.objectives, self.metrics = tuple(objectives), tuple(objectives) + tuple(metrics)
        self.logged = 0

    def __call__(self, study, trial) -> None:
        import optuna

        if trial.state != optuna.trial.TrialState.COMPLETE:
            return
        params = {**self.params, **trial.params, "trial_number": trial.number, "study_name": study.study_name}
        with start_run(study=self.study_key, tags=self.tags_fn(trial), params=params,
                       run_name=f"trial-{trial.number}", parent_run_id=self.parent_run_id):
            metrics = {name: metric_value(trial, name, self.objectives) for name in self.metrics}
            metrics = {k: v for k, v in metrics.items() if v is not None and np.isfinite(v)}
            for name in self.metrics:
                for bound in BOUNDS:
                    value = trial.user_attrs.get(f"{name}_{bound}")
                    if value is not None and np.isfinite(value):
                        metrics[f"{name}_{bound}"] = value
            metrics["duration_s"] = trial.duration.total_seconds()
            log_metrics(metrics)
            for name in self.metrics:  # per-seed values as a metric history, step = noise seed
                for seed, value in enumerate(trial.user_attrs.get(f"{name}_per_seed", [])):
                    log_metrics({f"{name}_per_seed": value}, step=seed)
        self.logged += 1


# ---- outputs ---------------------------------------------------------------------------------------------------
def hypervolume(front: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """Area dominated by a front of (maximised, minimised) points inside the box between the reference (e.g.
    chance utility, certain attack success) and the ideal. Exact in 2-D: sweep the minimised axis and take the
    best maximised value reached so far; points worse than the reference add nothing."""
    up_ref, down_ref = reference
    points = sorted((min(down, down_ref), up) for up, down in front)
    area, best = 0.0, up_ref
    for (down, up), nxt in zip(points, [p[0] for p in points[1:]] + [down_ref]):
        best = max(best, up)
        area += (nxt - down) * (best - up_ref)
    return float(area)


def json_number(value):
    """NaN (an interval from a single seed) as null: JSON has no NaN and DVC's metrics reader rejects it."""
    return None if isinstance(value, float) and not np.isfinite(value) else value


def trial_rows(study, objectives: Sequence[str], param_names: Sequence[str], chance: Mapping[str, float],
               front_numbers: set[int], n: int, head: Mapping, metrics: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (trial, metric): mean over seeds, t-interval, per-seed values, chance; ``head`` columns come
    first. Trials that did not complete keep their rows with empty values, so failures stay visible."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        for name in (*objectives, *metrics):
            value = metric_value(trial, name, objectives) if trial.values else np.nan
            rows.append({
                **head, "study_name": study.study_name, "trial": trial.number, "state": trial.state.name,
                **{k: trial.params.get(k) for k in param_names},
                "metric": name, "value": value, "ci_low": unit_bound(attrs.get(f"{name}_ci_low")),
                "ci_high": unit_bound(attrs.get(f"{name}_ci_high")), "n": n, "chance": chance[name],
                "per_seed": json.dumps(attrs.get(f"{name}_per_seed")), "pareto": trial.number in front_numbers,
                "duration_s": trial.duration.total_seconds() if trial.duration else np.nan})
    return pd.DataFrame(rows)


def front_summary(study, objectives: Sequence[str], reference: tuple[float, float], chance: Mapping[str, float],
                  head: Mapping, metrics: Sequence[str] = ()) -> dict:
    """The Pareto front (sorted by the minimised objective) with every metric and interval, the trial counts,
    the front's size in trials and in distinct points, and its hypervolume against ``reference``."""
    front = sorted(study.best_trials, key=lambda t: t.values[1])
    names = (*objectives, *metrics)
    entries = [{"trial": t.number, **t.params, **{name: metric_value(t, name, objectives) for name in names},
                **{f"{name}_{b}": unit_bound(t.user_attrs.get(f"{name}_{b}")) for name in names for b in BOUNDS}}
               for t in front]
    return {
        **head, "n_trials": n_complete(study), "n_trials_all_states": len(study.get_trials(deepcopy=False)),
        "front_size": len(front),
        # configurations with equal objective values are all non-dominated: count the distinct points too
        "front_distinct_points": len({tuple(t.values) for t in front}),
        "hypervolume": hypervolume([tuple(t.values) for t in front], reference),
        "hypervolume_reference": dict(zip(objectives, reference)),
        "chance": dict(chance),
        "front": [{k: json_number(v) for k, v in entry.items()} for entry in entries],
    }


def add_search_flags(parser, name: str) -> None:
    """The flags every search stage ``optuna_<name>`` shares: where its study lives (``--storage``, ``--study-name``)
    and its outputs, the front JSON, the trials CSV and the figure, named after it (:func:`write_outputs`)."""
    parser.add_argument("--storage", help="SQLAlchemy URL of the study database (default: params' storage); give "
                                          "every worker the same URL to share one study")
    parser.add_argument("--study-name", help="study name (default: derived from the config, so a changed config "
                                             "starts a new study instead of mixing incomparable trials)")
    parser.add_argument("--metrics", default=f"metrics/optuna_{name}.json", help="Pareto front JSON")
    parser.add_argument("--trials-csv", default=f"metrics/optuna_{name}_trials.csv", help="tidy table of all trials")
    parser.add_argument("--figure", default=f"reports/figures/optuna_pareto_{name}.png", help="Pareto figure")


def write_outputs(summary: dict, tidy: pd.DataFrame, metrics_path, csv_path, figure_path, draw: Callable,
                  new_trials: int) -> None:
    """Write the front (JSON), the trials (CSV) and the figure (``draw(tidy, summary, path)``), and put them and
    the counts on the active (parent) run."""
    for path in (metrics_path, csv_path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(metrics_path).write_text(json.dumps(summary, indent=1) + "\n")
    tidy.to_csv(csv_path, index=False)
    draw(tidy, summary, figure_path)
    log_metrics({"n_trials": summary["n_trials"], "new_trials": new_trials, "front_size": summary["front_size"],
                 "hypervolume": summary["hypervolume"]})
    for path in (metrics_path, csv_path, figure_path):
        log_artifact(path)


def pareto_figure(tidy: pd.DataFrame, objectives: Sequence[str], group: str, path, *, xlabel: str, ylabel: str,
                  title: str, chance_labels: Mapping[str, str], chance: Mapping[str, float],
                  chance_point: str) -> None:
    """All complete trials (x = the minimised objective, y = the maximised one) coloured by ``group``, the front
    as a step line, both chance levels and the point where they meet (``chance_point``: what it stands for)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    up, down = objectives
    wide = tidy[tidy["state"] == "COMPLETE"].pivot_table(index=["trial", group, "pareto"], columns="metric",
                                                         values="value").reset_index()
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, rows in wide.groupby(group):
        ax.scatter(rows[down], rows[up], s=22, alpha=0.6, label=name)
    front = wide[wide["pareto"]].sort_values(down)
    ax.step(front[down], front[up], where="post", color="black", lw=1)
    ax.scatter(front[down], front[up], s=70, facecolors="none", edgecolors="black",
               label=f"Pareto front ({len(front)})")
    ax.axhline(chance[up], color="grey", ls="--", lw=1, label=chance_labels[up])
    ax.axvline(chance[down], color="grey", ls=":", lw=1, label=chance_labels[down])
    ax.scatter([chance[down]], [chance[up]], marker="*", s=160, color="grey", zorder=3, label=chance_point)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
