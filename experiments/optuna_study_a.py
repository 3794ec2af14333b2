"""Stage ``optuna_study_a`` (study A): multi-objective Optuna search over (mechanism, ε, C) of a release, LOSO
AUROC above the matched null ↑ vs same-session re-identification top-1 ↓, and the re-evaluation of its Pareto
front on fresh seeds (the problem: :mod:`eegprivacy.studies.release.search`).

Storage and cooperation: the study lives in an RDB (``storage``, sqlite by default) under a name derived from
everything that determines a trial's numbers (data version, features, label, search space, seeds, sampler and
code), opened with ``load_if_exists=True``. ``n_trials`` is the study's target number of COMPLETE trials, so

- a rerun (or a run after a crash) only adds the missing trials: finished trials are never recomputed, and a
  trial whose process died is marked FAIL by the next worker once its heartbeat is stale;
- N processes or machines running the same command against one shared database cooperate, each adding trials
  until the study has exactly ``n_trials`` complete ones (a trial starts only while fewer are complete or
  running, counted under a database lock: ``pipeline.search.optimize_to_target``), e.g.::

      eegprivacy optuna-study-a --storage postgresql://user@dbhost/optuna --no-progress   # on every machine

  (sqlite works for several processes on one machine; use a server database across machines.) With one worker
  and a fixed ``seed`` the sampler proposes the same trials; with several the order of completions decides.

Re-evaluation: once the study holds its target, every trial on its Pareto front is scored again on
``reevaluation_seeds`` seeds the search never used; the JSON, the CSV (``phase`` reevaluation) and the figure
report those values beside the search-time ones (the search's best are biased upwards by the selection).

MLflow: each invocation opens one parent run in ``study-a-dp-release``; every trial it completes becomes one
child run (params = the trial's params and ``phase`` search, metrics = both objectives and the reported metrics
with their intervals and per-seed values), logged by :class:`MLflowChildRuns`, an Optuna callback that runs in the
main process; every re-evaluated front trial becomes one more child (``phase`` reevaluation). The parent gets the
front summary and the JSON, CSV and figure as artifacts, computed over all trials in the study (every
worker's).
"""

from __future__ import annotations

import pandas as pd

from eegprivacy.pipeline import search
from eegprivacy.reporting.search import release_pareto_figure
from eegprivacy.studies.release import search as study
from eegprivacy.tracking import log_metrics, start_run


def add_arguments(parser) -> None:
    search.add_search_flags(parser, "study_a")


def run(args) -> int:
    import optuna
    from joblib import Parallel

    config = args.config
    problem = study.load_problem(config, args.features_dir)
    windows, url = problem.windows, args.storage or config.storage
    name = args.study_name or (f"study_a-{windows.dataset}-"
                               f"{study.study_fingerprint(problem, config, args.stage.code_hash())}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna_study = search.open_study(url, name, config.to_dict(), study.DIRECTIONS)

    parent_params = {"optuna_study_a": {**config.to_dict(), "storage": search.public_url(url)}, "study_name": name,
                     "n_subjects": problem.n_subjects, "features_hash": windows.features_hash}
    child_params = {"noise_seeds": config.noise_seeds, "sampler": config.sampler, "phase": "search"}
    with start_run(study="a", tags=study.run_tags(windows, config.seed), params=parent_params,
                   run_name=f"{study.STAGE}-{windows.dataset}") as parent:
        children = search.MLflowChildRuns("a", parent.info.run_id, study.trial_tags(windows, config), child_params,
                                          study.OBJECTIVES, study.REPORTED)
        with Parallel(n_jobs=config.n_jobs) as parallel:
            search.optimize_to_target(optuna_study, study.Objective(problem, config, parallel), config.n_trials,
                                      [children], progress=not args.no_progress)
            per_seed = study.reevaluate(optuna_study, optuna_study.best_trials, problem, config, parallel)
        entries = study.front_entries(optuna_study, per_seed, problem, config)
        summary = study.front_summary(optuna_study, entries, problem, config)
        tidy = pd.concat([study.trial_rows(optuna_study, {e["trial"] for e in entries}, problem, config),
                          study.reevaluation_rows(entries, per_seed, optuna_study, problem, config)],
                         ignore_index=True)
        search.write_outputs(summary, tidy, args.metrics, args.trials_csv, args.figure, release_pareto_figure,
                             children.logged)
        log_metrics({"hypervolume_reevaluated": summary["hypervolume_reevaluated"]})
        study.log_reevaluation(parent.info.run_id, entries, per_seed, name, windows, config)
    print(f"{windows.dataset}: study {name}: {children.logged} new trial(s), {summary['n_trials']} complete, "
          f"Pareto front {summary['front_size']} re-evaluated on {config.reevaluation_seeds} fresh seeds, "
          f"hypervolume {summary['hypervolume']:.4f} (search) / {summary['hypervolume_reevaluated']:.4f} "
          f"(re-evaluated) -> {args.metrics}")
    return 0
