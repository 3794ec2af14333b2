"""The stage registry: every pipeline stage declared once, and everything else derived from it.

A :class:`Stage` says what a DVC stage is: its name and help, its params section and typed config, the sources
its numbers depend on (``code``), the sources that shape its files but not its numbers (``support``: pipeline
machinery, MLflow helpers, drawing), its outputs and its entry point in ``experiments/``. From :data:`STAGES`:

- the CLI builds one subcommand per stage, with the shared flags declared once (:func:`add_stage_parsers`);
- each stage's cell-cache key hashes exactly its ``code`` plus its entry module (:meth:`Stage.code_hash`), so a
  change to, say, ``attacks/lira.py`` invalidates every cached cell that ran it;
- ``tests/test_stage_registry.py`` holds ``dvc.yaml`` to the registry (:func:`dvc_mismatches`): a source a
  stage runs but DVC does not watch, an output or a params section DVC does not know, is a failing test;
- ``make reproduce`` asks which stages left no MLflow run in the store (:func:`stages_without_runs`) and
  reruns those (a fresh clone's DVC skips stages whose git-tracked outputs already match ``dvc.lock``).

Numerical stability (``tolerance``): 0 means the stage's numbers are bit-identical on any machine with the pinned
stack (pure NumPy/PyTorch on one thread, no summation whose order depends on the BLAS build); a positive value is
the relative tolerance within which they are stable across machines (floating-point sums whose order differs
between BLAS builds: the Welch PSD features, and what is computed from them). ``scripts/compare_metrics.py``
compares two runs with these tolerances.

One idea over about 600 lines: the stage list is the one declaration of the pipeline, long because the pipeline has
some thirty stages; what is derived from it (parsers, code hashes, the dvc.yaml check) reads that list and nothing
else, so it stays beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from eegprivacy.paths import checkout_root, repo_root

SRC = "src/eegprivacy"


@dataclass(frozen=True)
class Stage:
    """One pipeline stage (see the module docstring)."""

    name: str                       # DVC stage name; the CLI command is the same with dashes
    help: str
    entry: str                      # module under experiments/ with run(args) -> int (+ optional add_arguments)
    section: str | None = None      # params section read into ``config``
    params_file: str | None = None
    config: str | None = None       # "module:Class" of the section's typed config
    section_keys: tuple[str, ...] = ()  # the keys of its section its outputs depend on, when not all of them
    code: tuple[str, ...] = ()      # repo-relative sources (files or folders) its numbers depend on
    support: tuple[str, ...] = ()   # sources that shape its files but not its numbers (dvc deps, not hashed)
    inputs: tuple[str, ...] = ()    # data it reads (other stages' outputs, version files); "{item}" per item
    outs: tuple[str, ...] = ()      # everything it writes; "{item}" per item
    reads: tuple[str, ...] = ()     # params it reads from other sections, "file:dotted.key"
    items: tuple[str, ...] = ()     # foreach items (datasets) it can run on; empty for a single stage
    profile_list: str | None = None  # the params/profile.yaml list its items come from in the active profile
    flags: tuple[str, ...] = ()     # shared CLI flags: dataset, progress, cells, features_dir, out
    tolerance: float = 0.0          # 0: bit-stable across machines; else relative tolerance (module docstring)
    in_dvc: bool = True             # False for commands run on a user's own data (not in dvc.yaml)

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    @property
    def entry_file(self) -> str:
        return f"experiments/{self.entry.rsplit('.', 1)[-1]}.py"

    def active_items(self) -> tuple[str, ...]:
        """The items the active profile runs it on (``params/profile.yaml``), else every item."""
        if self.profile_list is None:
            return self.items
        from eegprivacy.pipeline.profile import cohorts

        active = cohorts(self.profile_list)
        unknown = sorted(set(active) - set(self.items))
        if unknown:
            raise ValueError(f"params/profile.yaml: profile.{self.profile_list} names {unknown}, which stage "
                             f"{self.name} cannot run on (it runs on {', '.join(self.items)})")
        return active

    def dvc_names(self) -> list[str]:
        """The DVC stage names in the active profile (``name@item`` for a foreach stage)."""
        return [f"{self.name}@{item}" for item in self.active_items()] if self.items else [self.name]

    def config_type(self):
        if self.config is None:
            return None
        module, _, attribute = self.config.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def load_config(self, params_path: str | Path | None = None):
        """The stage's section read into its typed config (errors name the file and key)."""
        config_type = self.config_type()
        if config_type is None:
            return None
        return config_type.load(params_path or self.params_file, self.section)

    def code_files(self) -> list[Path]:
        """Every source file behind ``code`` (folders expanded to their ``*.py``) and the entry module."""
        root = checkout_root()
        files: set[Path] = set()
        for source in (*self.code, self.entry_file):
            path = _source_path(root, source)
            if source == self.entry_file and not path.exists():
                continue  # the library used without a checkout's experiments/ (e.g. a notebook elsewhere)
            if path.is_dir():
                files.update(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)
            elif path.exists():
                files.add(path)
            else:
                raise FileNotFoundError(f"stage {self.name}: code dependency {source} does not exist")
        return sorted(files)

    def code_hash(self) -> str:
        """sha256 (16 hex) over the stage's code files, by repo-relative path and content: the cell-cache key's
        code part (a cached cell is never reused after any source its numbers depend on changed)."""
        return _code_hash(self.name, tuple(self.code), self.entry_file)


@lru_cache(maxsize=None)
def _code_hash(name: str, code: tuple, entry_file: str) -> str:
    stage = STAGE_BY_NAME[name]
    root = checkout_root()
    digest = hashlib.sha256()
    for path in stage.code_files():
        digest.update(_source_name(root, path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _package_dir() -> Path:
    import eegprivacy

    return Path(eegprivacy.__file__).resolve().parent


def _source_path(root: Path, source: str) -> Path:
    """A registry source (``src/eegprivacy/...``, repo-relative) on disk: in the checkout, else in the installed
    package (a wheel has no checkout; the library's code hashes must still work, e.g. in ``audit-cohort``)."""
    path = root / source
    if not path.exists() and source.startswith(f"{SRC}/"):
        installed = _package_dir() / source.removeprefix(f"{SRC}/")
        if installed.exists():
            return installed
    return path


def _source_name(root: Path, path: Path) -> str:
    """The name a source file is hashed under: its repo-relative path, the same whether it was read from the
    checkout or from an installed package (so both give one code hash for the same code)."""
    package = _package_dir()
    if path.is_relative_to(package):
        return f"{SRC}/{path.relative_to(package).as_posix()}"
    return path.relative_to(root).as_posix()


# ---- The sources, by role ----------------------------------------------------------------------------------
MACHINERY = (f"{SRC}/pipeline", f"{SRC}/tracking", f"{SRC}/params.py", f"{SRC}/validation.py")
REPORTING = (f"{SRC}/reporting",)
# batched: LOSOEvaluation fits the paper's MLP with eegprivacy.batched.AdamMLP (issue 37)
RELEASE = (f"{SRC}/signal/table.py", f"{SRC}/privacy", f"{SRC}/evaluation", f"{SRC}/batched", f"{SRC}/studies/release")
FEDERATED = (f"{SRC}/data", f"{SRC}/signal", f"{SRC}/federated", f"{SRC}/models", f"{SRC}/attacks",
             f"{SRC}/evaluation", f"{SRC}/studies/federated")
EEGMAT_VERSION = ("data/versions/eegmat.json",)
EEGMMIDB_VERSION = ("data/versions/eegmmidb.json",)
STUDY_C = ("eegmat", "msu_schizophrenia", "eegmmidb")  # embedding_audit's cohorts (params: embedding_audit.datasets)
# The calibration stage runs every study's tests (their code) and reads each cohort's shape from the stages' outputs.
CALIBRATION = (f"{SRC}/data", f"{SRC}/signal", f"{SRC}/embeddings", f"{SRC}/attacks", f"{SRC}/evaluation",
               f"{SRC}/batched", f"{SRC}/federated", f"{SRC}/models", f"{SRC}/privacy", f"{SRC}/studies")
CALIBRATION_INPUTS = (*(f"metrics/embedding_audit_{c}{ext}" for c in STUDY_C for ext in (".csv", ".json")),
                      *(f"data/versions/{c}.json" for c in STUDY_C), "metrics/dp_utility", "metrics/dp_scaling",
                      "metrics/dp_end_to_end_summary_msu_schizophrenia.csv",
                      *(f"metrics/federated_{s}.csv" for s in ("control", "mia", "lira", "transfer")))
STUDY_B = ("eegmmidb", "eegmat", "synthetic_mi")  # federated_mia's cohorts: eegmmidb first (the paper's protocol)
STUDY_A = ("synthetic_clinical", "eegmat", "msu_schizophrenia")
SCALING_DATASETS = ("synthetic_clinical", "eegmat", "msu_schizophrenia")  # dp_scaling runs per dataset on these
END_TO_END_DATASETS = ("msu_schizophrenia",)  # dp_end_to_end's cohorts (params: dp_end_to_end.datasets)
# What the end-to-end stages read of study A's other params (the cohort, the clip norm, δ, the interval's level, the
# public/private split): dp_end_to_end adds the bootstrap, dp_sample_size the end-to-end section itself.
# A per-cohort study A stage's inputs (the cohort's features and its version) and flags.
COHORT_FEATURES = ("data/features/{item}.parquet", "data/versions/{item}.json")
COHORT_FLAGS = ("dataset", "progress", "cells", "out", "features_dir")
END_TO_END_READS = ("params/dp_release.yaml:dp_release.datasets", "params/dp_release.yaml:dp_release.clip_norm",
                    "params/dp_release.yaml:dp_release.delta", "params/dp_release.yaml:dp_utility.confidence",
                    "params/dp_scaling.yaml:dp_scaling.public_fraction", "params/dp_scaling.yaml:dp_scaling.split_seed")


STAGES: tuple[Stage, ...] = (
    Stage("dataset_version", "Hash a dataset's files (checked against its manifest) into its version file, so "
          "every downstream stage reruns when the data changes.",
          entry="experiments.dataset_version", code=(f"{SRC}/data",), support=MACHINERY,
          outs=("data/versions/{item}.json",),
          reads=("params/features.yaml:features.datasets", "params/federated_mia.yaml:federated_mia.datasets"),
          items=(*STUDY_A, "eegmmidb")),
    Stage("features", "Preprocess (band-pass, 50 Hz notch, average reference), cut 2-s windows with 50% overlap "
          "and compute the 11 window features per channel of a dataset (cached per dataset version and feature "
          "config); parquet table, metrics JSON, a figure and an MLflow run.",
          entry="experiments.features", section="features", params_file="params/features.yaml",
          config="eegprivacy.signal.table:FeaturesParams",
          section_keys=("preprocess", "window", "welch", "datasets", "per_dataset"),
          code=(f"{SRC}/data", f"{SRC}/signal"), support=(*MACHINERY, *REPORTING),
          inputs=("data/versions/{item}.json",),
          outs=("data/features/{item}.parquet", "metrics/features_{item}.json", "reports/figures/features_{item}.png"),
          items=STUDY_A, profile_list="study_a", flags=("dataset", "progress"), tolerance=1e-9),
    # ---- Study A: DP feature release -------------------------------------------------------------------------
    Stage("dp_release", "Study A: release the patient-level feature table with each DP mechanism at each ε over "
          "many noise seeds; per-seed intrinsic utility (tidy CSV), one MLflow parent run per mechanism.",
          entry="experiments.dp_release", section="dp_release", params_file="params/dp_release.yaml",
          config="eegprivacy.studies.release.config:DPReleaseConfig", code=RELEASE, support=MACHINERY,
          inputs=COHORT_FEATURES,
          outs=("metrics/dp_release/dp_release_{item}.csv",), items=STUDY_A, profile_list="study_a",
          flags=COHORT_FLAGS,
          tolerance=1e-9),
    Stage("dp_utility", "Study A: LOSO utility (MLP; AUROC, the nested and the paper's optimistic threshold "
          "protocols, one grid) of the non-private table, a permuted-label control, every DP release and its matched "
          "null; intervals over patients and seeds, release − null, utility horizons.",
          entry="experiments.dp_utility", section="dp_utility", params_file="params/dp_release.yaml",
          config="eegprivacy.studies.release.config:DPUtilityConfig", code=RELEASE, support=MACHINERY,
          section_keys=("mechanisms", "baseline_mlp_seeds", "nested_seeds", "nested_inner_folds", "permutations",
                        "n_jobs", "bootstrap", "confidence"),
          inputs=COHORT_FEATURES,
          outs=("metrics/dp_utility/dp_utility_{item}.csv", "metrics/dp_utility/dp_utility_summary_{item}.csv"),
          reads=("params/dp_release.yaml:dp_release",), items=STUDY_A, profile_list="study_a",
          flags=COHORT_FLAGS, tolerance=1e-9),
    Stage("dp_aggregate", "Study A: each dataset's headline (release vs matched null, utility horizons), the "
          "per-seed aggregate and the figures.",
          entry="experiments.dp_aggregate", section="dp_utility", params_file="params/dp_release.yaml",
          config="eegprivacy.studies.release.config:DPUtilityConfig", section_keys=("figure_epsilon",), code=RELEASE,
          support=(*MACHINERY, *REPORTING),
          # Folders: a profile's cohorts (params/profile.yaml) decide which files they hold.
          inputs=("metrics/dp_release", "metrics/dp_utility"),
          outs=("metrics/dp_release.csv", "metrics/dp_release.json", "reports/figures/dp_aggregate",
                "plots/dp_balanced_accuracy.csv"),
          reads=("params/dp_release.yaml:dp_release.datasets", "params/profile.yaml:profile.study_a"),
          tolerance=1e-9),
    Stage("table_attacks", "Study A: re-identification (eegmat: task release vs resting-state auxiliary, "
          "cross-condition; MSU: first vs second half of each recording, same-session halves) and membership "
          "inference on the released tables, per mechanism, ε and noise seed.",
          entry="experiments.table_attacks", section="table_attacks", params_file="params/table_attacks.yaml",
          config="eegprivacy.studies.release.config:TableAttacksConfig",
          code=(*RELEASE, f"{SRC}/attacks"), support=(*MACHINERY, *REPORTING),
          inputs=COHORT_FEATURES,
          outs=("metrics/table_attacks_{item}.csv", "metrics/table_attacks_{item}.json",
                "reports/figures/table_attacks_{item}.png"),
          reads=("params/dp_release.yaml:dp_release.clip_norm", "params/dp_release.yaml:dp_release.delta",
                 "params/dp_release.yaml:dp_release.common_random_numbers"), items=("eegmat", "msu_schizophrenia"),
          profile_list="study_a_attacks", flags=COHORT_FLAGS,
          tolerance=1e-9),
    Stage("dp_scenarios", "Study A: deployment scenarios (client-side, server-side with HMAC GlobalIDs, "
          "decentralised Flower FedAvg) of the DP release, scored under LOSO.",
          entry="experiments.dp_scenarios", section="deployment", params_file="params/deployment.yaml",
          config="eegprivacy.studies.release.config:DeploymentConfig",
          code=(*RELEASE, f"{SRC}/federated", f"{SRC}/attacks"), support=(*MACHINERY, *REPORTING),
          inputs=COHORT_FEATURES,
          outs=("metrics/dp_scenarios_{item}.csv", "metrics/dp_scenarios_{item}.json",
                "reports/figures/dp_scenarios_{item}.png"),
          reads=("params/dp_release.yaml:dp_release.clip_norm", "params/dp_release.yaml:dp_release.delta",
                 "params/dp_release.yaml:dp_release.datasets",
                 "params/dp_release.yaml:dp_release.common_random_numbers"),
          items=("eegmat", "msu_schizophrenia"), profile_list="study_a_attacks",
          flags=COHORT_FLAGS, tolerance=1e-9),
    Stage("optuna_study_a", "Study A: multi-objective Optuna search over (mechanism, ε, C) on MSU: LOSO AUROC of "
          "the release minus its matched null vs same-session re-identification top-1; the Pareto front re-evaluated "
          "on fresh seeds.",
          entry="experiments.optuna_study_a", section="optuna_study_a", params_file="params/optuna.yaml",
          config="eegprivacy.studies.release.config:OptunaStudyAConfig",
          code=(*RELEASE, f"{SRC}/attacks", f"{SRC}/pipeline/search.py"), support=(*MACHINERY, *REPORTING),
          inputs=("data/features/msu_schizophrenia.parquet", "data/versions/msu_schizophrenia.json"),
          outs=("data/optuna/study_a.db", "metrics/optuna_study_a_trials.csv", "metrics/optuna_study_a.json",
                "reports/figures/optuna_pareto_study_a.png"), flags=("progress", "features_dir"), tolerance=1e-9),
    Stage("linkage", "Record linkage quality on SYNTHETIC identity tables: exact GlobalID (HMAC) vs keyed "
          "Bloom-filter linkage, over typo rates and thresholds.",
          entry="experiments.linkage", section="linkage", params_file="params/linkage.yaml",
          config="eegprivacy.studies.release.config:LinkageConfig",
          code=(f"{SRC}/privacy/linkage.py", f"{SRC}/evaluation", f"{SRC}/studies/release"),
          support=(*MACHINERY, *REPORTING),
          outs=("metrics/linkage.csv", "metrics/linkage.json", "reports/figures/linkage_precision_recall.png"),
          flags=("progress", "cells", "out")),
    Stage("dp_audit", "Mechanism audit: empirical lower bounds on ε of each mechanism from worst-case neighbours "
          "(Clopper-Pearson); no data enters.",
          entry="experiments.dp_audit", section="dp_audit", params_file="params/dp_audit.yaml",
          config="eegprivacy.studies.release.config:MechanismAuditConfig",
          code=(f"{SRC}/attacks/mechanism_audit.py", f"{SRC}/privacy", f"{SRC}/evaluation",
                f"{SRC}/studies/release"), support=(*MACHINERY, *REPORTING),
          outs=("metrics/dp_audit.csv", "metrics/dp_audit.json", "reports/figures/dp_audit.png"),
          flags=("progress", "cells", "out")),
    Stage("dp_scaling", "Study A: end-to-end DP of the scaling step: private (paper) vs public-reference vs "
          "DP-quantile scaling statistics at matched total ε, each release beside its matched null (LOSO AUROC); "
          "intervals over patients and seeds, release − null and the cost against private scaling.",
          entry="experiments.dp_scaling", section="dp_scaling", params_file="params/dp_scaling.yaml",
          config="eegprivacy.studies.release.config:DPScalingConfig", code=RELEASE, support=MACHINERY,
          inputs=COHORT_FEATURES,
          outs=("metrics/dp_scaling/dp_scaling_{item}.csv", "metrics/dp_scaling/dp_scaling_summary_{item}.csv"),
          reads=("params/dp_release.yaml:dp_release.datasets", "params/dp_release.yaml:dp_release.clip_norm",
                 "params/dp_release.yaml:dp_release.delta", "params/dp_release.yaml:dp_release.common_random_numbers",
                 "params/dp_release.yaml:dp_utility.bootstrap", "params/dp_release.yaml:dp_utility.confidence"),
          items=SCALING_DATASETS, profile_list="study_a",
          flags=COHORT_FLAGS, tolerance=1e-9),
    Stage("dp_scaling_aggregate", "Study A: the scaling alternatives' summaries (AUROC vs matched null, cost vs "
          "private scaling), their figure and JSON.",
          entry="experiments.dp_scaling_aggregate", section="dp_scaling", params_file="params/dp_scaling.yaml",
          config="eegprivacy.studies.release.config:DPScalingConfig", section_keys=("datasets",), code=RELEASE,
          support=(*MACHINERY, *REPORTING),
          inputs=("metrics/dp_scaling",), outs=("metrics/dp_scaling.json", "reports/figures/dp_scaling.png",
                                                "plots/dp_scaling.csv"),
          reads=("params/profile.yaml:profile.study_a",), tolerance=1e-9),
    Stage("dp_end_to_end", "Study A beyond the paper: releases private end to end (public PCA/PLS projections, "
          "DP-PCA, DP synthetic patients; the paper's mechanism with public scaling as reference), each beside its "
          "matched null, LOSO AUROC on the private patients, a fixed-sequence utility horizon per design.",
          entry="experiments.dp_end_to_end", section="dp_end_to_end", params_file="params/dp_end_to_end.yaml",
          config="eegprivacy.studies.release.config:DPEndToEndConfig", code=RELEASE, support=MACHINERY,
          inputs=COHORT_FEATURES,
          outs=("metrics/dp_end_to_end_{item}.csv", "metrics/dp_end_to_end_summary_{item}.csv"),
          reads=(*END_TO_END_READS, "params/dp_release.yaml:dp_utility.bootstrap"), items=END_TO_END_DATASETS,
          flags=COHORT_FLAGS, tolerance=1e-9),
    Stage("dp_sample_size", "Study A (SYNTHETIC): the end-to-end designs on synthetic private cohorts of 56 to 896 "
          "patients calibrated to the real one: the ε horizon against n and the patients a private release needs.",
          entry="experiments.dp_sample_size", section="dp_sample_size", params_file="params/dp_sample_size.yaml",
          config="eegprivacy.studies.release.config:DPSampleSizeConfig",
          code=(*RELEASE, f"{SRC}/data/feature_generator.py"), support=MACHINERY,
          inputs=("data/features/{item}.parquet", "data/versions/{item}.json",
                  "metrics/dp_end_to_end_summary_{item}.csv"),
          outs=("metrics/dp_sample_size_{item}.csv", "metrics/dp_sample_size_summary_{item}.csv"),
          reads=("params/dp_end_to_end.yaml:dp_end_to_end", *END_TO_END_READS), items=END_TO_END_DATASETS,
          flags=COHORT_FLAGS, tolerance=1e-9),
    # ---- Study B: federated membership inference ------------------------------------------------------------
    Stage("federated_mia", "Study B: per-subject FedAvg (per-client CSP, SimpleNet/EEGNet) with per-step Laplace "
          "gradient DP, record/feature/gradient/client-level membership attacks every attacked round.",
          entry="experiments.federated_mia", section="federated_mia", params_file="params/federated_mia.yaml",
          config="eegprivacy.studies.federated.config:FederatedMIAConfig", code=FEDERATED, support=MACHINERY,
          inputs=("data/versions/{item}.json",),
          outs=("metrics/federated_mia/federated_mia_{item}.csv", "data/federated_mia/{item}"), items=STUDY_B,
          profile_list="study_b",
          flags=("dataset", "progress", "out", "cells")),
    Stage("federated_mia_report", "Study B: the per-round attack rows summarised (intervals over seeds, "
          "cumulative ε beside each per-step ε), the paper-shaped tables and figures.",
          entry="experiments.federated_mia_report", code=FEDERATED, support=(*MACHINERY, *REPORTING),
          inputs=("metrics/federated_mia", "data/federated_mia", "metrics/federated_accounting.csv"),
          reads=("params/profile.yaml:profile.study_b",),
          outs=("metrics/federated_mia.csv", "reports/federated_mia_tables.md", "metrics/federated_mia.json",
                *(f"reports/figures/federated_mia_{f}.png" for f in ("rla_rounds", "grad_norms", "client_accuracy",
                                                                      "loss_gap")))),
    Stage("federated_accounting", "Study B: cumulative ε of the per-step Laplace gradient DP (basic, RDP, PLD) "
          "per example and per client, nominal and certified calibrations.",
          entry="experiments.federated_accounting", section="federated_accounting",
          params_file="params/federated_accounting.yaml",
          config="eegprivacy.studies.federated.accounting:FederatedAccountingConfig",
          code=(*FEDERATED, f"{SRC}/privacy/accounting.py"),
          support=(*MACHINERY, *REPORTING),
          inputs=(*EEGMMIDB_VERSION, *EEGMAT_VERSION, "metrics/federated_audit.csv"),
          outs=("metrics/federated_accounting.csv", "reports/federated_accounting.md",
                "metrics/federated_accounting.json", "plots/federated_accounting_curves.csv",
                "reports/figures/federated_accounting.png"),
          reads=tuple(f"params/federated_mia.yaml:federated_mia.{k}" for k in (
              "datasets", "models", "epsilons", "test_size", "split_seed", "csp_components", "clients_per_round",
              "num_rounds", "local_epochs", "batch_size", "per_dataset", "batchnorm_stats"))),
    Stage("federated_lira", "Study B, strongest attack: LiRA with shadow federations trained through the same "
          "federated code and knobs as federated_mia, beside RLA with LR/RF/MLP attackers.",
          entry="experiments.federated_lira", section="federated_lira", params_file="params/federated_lira.yaml",
          config="eegprivacy.studies.federated.lira.config:FederatedLiRAConfig", code=FEDERATED,
          support=(*MACHINERY, *REPORTING), inputs=(*EEGMMIDB_VERSION, "metrics/federated_accounting.csv"),
          outs=("metrics/federated_lira.csv", "reports/federated_lira.md", "metrics/federated_lira.json",
                "reports/figures/federated_lira_roc.png"),
          reads=tuple(f"params/federated_mia.yaml:federated_mia.{k}" for k in (
              "datasets.eegmmidb", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
              "local_epochs", "learning_rate", "batch_size", "per_dataset", "batchnorm_stats")),
          flags=("dataset", "progress")),
    Stage("federated_transfer", "Study B transfer check: leave-one-subject-out over the federation, the held-out "
          "subject scored beside the joined clients, its own-data-only CSP+LDA and the untrained model.",
          entry="experiments.federated_transfer", section="federated_transfer",
          params_file="params/federated_transfer.yaml",
          config="eegprivacy.studies.federated.transfer:FederatedTransferConfig", code=FEDERATED,
          support=(*MACHINERY, *REPORTING), inputs=EEGMMIDB_VERSION,
          outs=("metrics/federated_transfer.csv", "reports/federated_transfer.md", "metrics/federated_transfer.json",
                "reports/figures/federated_transfer.png"),
          reads=tuple(f"params/federated_mia.yaml:federated_mia.{k}" for k in (
              "datasets.eegmmidb", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
              "local_epochs", "learning_rate", "batch_size", "clip_norm", "per_dataset", "batchnorm_stats")),
          flags=("progress", "cells")),
    Stage("federated_control", "Study B's controlled membership table: every attack on the trained federation "
          "beside a preprocessing-only control (the federation trained without the attacked client's fold), for "
          "member-fitted, calibration-fitted and DP CSP and (EEGNet) no CSP, at every per-step ε.",
          entry="experiments.federated_control", section="federated_control",
          params_file="params/federated_control.yaml",
          config="eegprivacy.studies.federated.control:FederatedControlConfig",
          code=(*FEDERATED, f"{SRC}/privacy/mechanisms.py", f"{SRC}/privacy/accounting.py"),
          support=(*MACHINERY, *REPORTING), inputs=EEGMMIDB_VERSION,
          outs=("metrics/federated_control.csv", "reports/federated_control.md",
                "reports/figures/federated_control.png"),
          reads=tuple(f"params/federated_mia.yaml:federated_mia.{k}" for k in (
              "datasets.eegmmidb", "test_size", "split_seed", "csp_components", "clients_per_round",
              "learning_rate", "batch_size", "clip_norm", "batchnorm_stats", "rf_estimators")),
          flags=("progress", "cells")),
    Stage("federated_audit", "Study B's one-run canary audit (empirical ε lower bound beside certified ε) of the "
          "paper's per-step Laplace grid and of record-level DP-SGD at a total per-record ε, with DP-SGD's utility "
          "and attack − control.",
          entry="experiments.federated_audit", section="federated_audit", params_file="params/federated_audit.yaml",
          config="eegprivacy.studies.federated.audit:FederatedAuditConfig",
          code=(*FEDERATED, f"{SRC}/privacy/accounting.py"),
          support=(*MACHINERY, *REPORTING), inputs=EEGMMIDB_VERSION,
          outs=("metrics/federated_audit.csv", "metrics/federated_audit_dpsgd.csv", "reports/federated_audit.md",
                "reports/figures/federated_audit.png"),
          reads=(*(f"params/federated_mia.yaml:federated_mia.{k}" for k in (
              "datasets.eegmmidb", "test_size", "split_seed", "csp_components", "clients_per_round", "num_rounds",
              "local_epochs", "learning_rate", "batch_size", "clip_norm", "batchnorm_stats", "rf_estimators")),
              *(f"params/federated_control.yaml:federated_control.{k}" for k in (
                  "calibration_fraction", "control_folds", "attackers", "attack_folds", "confidence",
                  "dp_csp_epsilon", "dp_csp_delta"))),
          flags=("progress", "cells")),
    Stage("optuna_study_b", "Study B: multi-objective Optuna search (per-step ε, C, local epochs) of the DP "
          "federation: non-member AUROC vs record-level attack TPR at 1% FPR.",
          entry="experiments.optuna_study_b", section="optuna_study_b", params_file="params/optuna.yaml",
          config="eegprivacy.studies.federated.config:OptunaStudyBConfig",
          code=(*FEDERATED, f"{SRC}/pipeline/search.py"), support=(*MACHINERY, *REPORTING), inputs=EEGMMIDB_VERSION,
          outs=("data/optuna/study_b.db", "metrics/optuna_study_b_trials.csv", "metrics/optuna_study_b.json",
                "reports/figures/optuna_pareto_study_b.png"),
          reads=tuple(f"params/federated_mia.yaml:federated_mia.{k}" for k in (
              "datasets.eegmmidb", "test_size", "split_seed", "csp_components", "clients_per_round",
              "learning_rate", "batch_size", "attackers", "rf_estimators")), flags=("progress",)),
    Stage("csp_exploration", "Study B inputs before training: PCA of the per-client CSP features and the top-10 "
          "feature-label correlations.",
          entry="experiments.csp_exploration", code=FEDERATED, support=(*MACHINERY, *REPORTING),
          outs=("metrics/csp_correlations_{item}.csv", "reports/figures/csp_pca_{item}.png"),
          reads=tuple(f"params/federated_mia.yaml:federated_mia.{k}" for k in (
              "datasets", "test_size", "split_seed", "csp_components")),
          items=STUDY_B, profile_list="study_b", flags=("dataset",)),
    # ---- Study C: embedding audit ---------------------------------------------------------------------------
    Stage("embedding_audit", "Study C on one cohort: split-controlled audit of frozen EEG-encoder embeddings "
          "(BIOT, LaBraM, EEGPT, random-init and band-power references): attribute, identity, membership, "
          "reconstruction and (on a diagnosis cohort) subject-label endpoints with controls, AEDS, the bridge and "
          "the defenses judged by the cohort's task.",
          entry="experiments.embedding_audit", section="embedding_audit", params_file="params/embedding_audit.yaml",
          config="eegprivacy.studies.embedding_audit.config:EmbeddingAuditConfig",
          code=(f"{SRC}/data", f"{SRC}/signal", f"{SRC}/embeddings", f"{SRC}/attacks", f"{SRC}/evaluation",
                f"{SRC}/batched", f"{SRC}/studies/embedding_audit"), support=(*MACHINERY, *REPORTING),
          inputs=("data/versions/{item}.json",),
          outs=("metrics/embedding_audit_{item}.csv", "metrics/embedding_audit_{item}_claims.csv",
                "reports/embedding_audit_{item}.md",
                "data/embedding_audit/{item}", "metrics/embedding_audit_{item}.json",
                *(f"reports/figures/embedding_audit_{{item}}_{f}.png" for f in ("leakage", "aeds", "bridge",
                                                                               "defenses"))),
          items=STUDY_C, flags=("dataset", "progress", "cells")),
    Stage("embedding_audit_cohorts", "Study C across cohorts: per cohort and encoder, is the task or diagnosis, "
          "the identity and the PSD attribute decodable above its control; AEDS and the defense verdicts side by "
          "side, one table per cohort and a cross-cohort figure.",
          entry="experiments.embedding_audit_cohorts", code=(f"{SRC}/studies/embedding_audit",),
          support=(*MACHINERY, *REPORTING),
          inputs=tuple(f"metrics/embedding_audit_{c}{ext}" for c in STUDY_C
                       for ext in (".csv", "_claims.csv", ".json")),
          outs=("metrics/embedding_audit_cohorts.json", "reports/embedding_audit_cohorts.md",
                "reports/figures/embedding_audit_cohorts.png")),
    # ---- Calibration of every test the reports print ------------------------------------------------------------
    Stage("calibration", "Every test and interval the reports print, run through the project's own code on "
          "synthetic data sets shaped like its cohort where the answer is known: size at α = 0.05, coverage of "
          "95 % intervals and power, one row and one MLflow run per test.",
          entry="experiments.calibration", section="calibration", params_file="params/calibration.yaml",
          config="eegprivacy.studies.calibration.config:CalibrationConfig",
          code=CALIBRATION, support=(*MACHINERY, *REPORTING), inputs=CALIBRATION_INPUTS,
          reads=tuple(f"params/federated_{s}.yaml:federated_{s}" for s in ("control", "mia", "lira", "transfer")),
          outs=("metrics/calibration.csv", "metrics/calibration.json", "reports/calibration.md",
                "reports/figures/calibration.png")),
    # Your own cohort is not a stage: `eegprivacy audit-cohort` (eegprivacy.commands.audit_cohort) ships inside the
    # package and runs on data the repository does not hold.
)

STAGE_BY_NAME: dict[str, Stage] = {stage.name: stage for stage in STAGES}


def get_stage(name: str) -> Stage:
    """The registered stage called ``name`` (DVC or CLI spelling)."""
    key = name.replace("-", "_").split("@")[0]
    if key not in STAGE_BY_NAME:
        raise KeyError(f"unknown stage {name!r}; stages: {', '.join(STAGE_BY_NAME)}")
    return STAGE_BY_NAME[key]


def code_hash(name: str) -> str:
    """Shorthand for ``get_stage(name).code_hash()``."""
    return get_stage(name).code_hash()


# ---- The CLI, built from the registry ----------------------------------------------------------------------
def _add_shared_flags(parser: argparse.ArgumentParser, stage: Stage) -> None:
    if stage.config is not None:
        parser.add_argument("--params", default=stage.params_file,
                            help=f"params file with the [{stage.section}] section (default: %(default)s)")
    if "dataset" in stage.flags:
        items = f" ({', '.join(stage.items)} in the pipeline)" if stage.items else ""
        parser.add_argument("--dataset", required=not stage.items or len(stage.items) > 1,
                            default=stage.items[0] if len(stage.items) == 1 else None,
                            help=f"registered dataset to run on{items}")
    if "out" in stage.flags:
        parser.add_argument("--out", default=None, help=f"main output (default: {stage.outs[0]})")
    if "cells" in stage.flags:
        parser.add_argument("--cells", default="data/sweeps",
                            help="resumable per-cell cache folder; finished cells are not recomputed "
                                 "(default: %(default)s)")
    if "features_dir" in stage.flags:
        parser.add_argument("--features-dir", default="data/features",
                            help="where the features stage wrote its tables (default: %(default)s)")
    if "progress" in stage.flags:
        parser.add_argument("--no-progress", action="store_true", help="no progress bars (e.g. under DVC)")


def experiments_dir() -> Path | None:
    for candidate in (checkout_root() / "experiments", repo_root() / "experiments"):
        if (candidate / "__init__.py").exists():
            return candidate
    return None


def entry_module(stage: Stage):
    """Import the stage's entry module from ``experiments/`` (the checkout this package runs from)."""
    folder = experiments_dir()
    if folder is None:
        raise ModuleNotFoundError("experiments/ not found: stage commands run from a checkout of the repository")
    if str(folder.parent) not in sys.path:
        sys.path.insert(0, str(folder.parent))
    return importlib.import_module(stage.entry)


def run_stage(stage: Stage, args: argparse.Namespace) -> int:
    """Read the stage's typed config (``args.config``) and call its entry's ``run(args)``."""
    args.config = stage.load_config(getattr(args, "params", None)) if stage.config else None
    args.stage = stage
    return int(entry_module(stage).run(args) or 0)


def add_stage_parsers(subparsers) -> None:
    """One subcommand per registered stage: shared flags from the registry, the stage's own from its entry."""
    if experiments_dir() is None:
        return
    for stage in STAGES:
        module = entry_module(stage)
        description = stage.help + (f"\n\nparams: [{stage.section}] of {stage.params_file}" if stage.section else "")
        # No help=: `eegprivacy --help` lists the stages in a group of their own (cli.py), apart from user commands.
        parser = subparsers.add_parser(stage.command, description=description,
                                       formatter_class=argparse.RawDescriptionHelpFormatter,
                                       conflict_handler="resolve")  # an entry may refine a shared flag
        _add_shared_flags(parser, stage)
        if hasattr(module, "add_arguments"):
            module.add_arguments(parser)
        parser.set_defaults(func=lambda args, stage=stage: run_stage(stage, args))


# ---- dvc.yaml, held to the registry --------------------------------------------------------------------------
def _dvc_body(entry: dict) -> dict:
    return entry.get("do", entry)


def _paths(entries) -> list[str]:
    return [e if isinstance(e, str) else next(iter(e)) for e in entries or []]


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


def _norm(text: str) -> str:
    return text.replace("${item}", "{item}").replace("${key}", "{item}")


def dvc_mismatches(dvc: dict, stages: tuple[Stage, ...] = STAGES) -> list[str]:
    """Every way ``dvc`` (the parsed ``dvc.yaml``) disagrees with the registry, one sentence each; empty when
    they agree. A code or support source the registry names must be a dep (itself or a folder above it), and so
    must the entry module and every input; every output must be an out, metric or plot; the stage's params
    section and every key it reads from other sections must be declared."""
    problems = []
    declared = dvc.get("stages", {})
    for stage in stages:
        if not stage.in_dvc:
            if stage.name in declared:
                problems.append(f"{stage.name}: registered as not a DVC stage, yet dvc.yaml has it")
            continue
        if stage.name not in declared:
            problems.append(f"{stage.name}: registered but missing from dvc.yaml")
            continue
        entry = declared[stage.name]
        body = _dvc_body(entry)
        items = entry.get("foreach")
        if isinstance(items, str):  # ${profile.<list>}: the profile decides
            listed = items.strip().removeprefix("${profile.").removesuffix("}")
            if listed != stage.profile_list:
                problems.append(f"{stage.name}: dvc.yaml runs it for {items}, the registry for "
                                f"{'${profile.' + stage.profile_list + '}' if stage.profile_list else list(stage.items)}")
            items = []
        elif stage.profile_list is not None:
            problems.append(f"{stage.name}: dvc.yaml runs it for a fixed list {items}; the registry reads its cohorts "
                            f"from params/profile.yaml (foreach: ${{profile.{stage.profile_list}}})")
        items = list(items) if isinstance(items, (list, dict)) else []
        if stage.items and (items and sorted(items) != sorted(stage.items)):
            problems.append(f"{stage.name}: dvc.yaml runs it for {items}, the registry for {list(stage.items)}")
        deps = [_norm(d) for d in _paths(body.get("deps"))]
        for source in (*stage.code, *stage.support, stage.entry_file):
            if not _covered(source, deps):
                problems.append(f"{stage.name}: runs {source} but dvc.yaml does not list it (or a folder above it) "
                                "as a dependency, so a change to it would not rerun the stage")
        for data in stage.inputs:
            if data not in deps and "{item}" not in deps:  # "${item}": the profile names each cohort's file
                problems.append(f"{stage.name}: reads {data} but dvc.yaml does not list it as a dependency")
        outs = {_norm(o) for key in ("outs", "metrics", "plots") for o in _paths(body.get(key))}
        for out in stage.outs:
            if out not in outs:
                problems.append(f"{stage.name}: writes {out} but dvc.yaml does not declare it")
        for out in sorted(outs - set(stage.outs)):
            problems.append(f"{stage.name}: dvc.yaml declares {out}, which the registry does not say it writes")
        params = {}
        for block in body.get("params") or []:
            if isinstance(block, dict):
                for file, keys in block.items():
                    params.setdefault(file, set()).update(keys)
        own = [f"{stage.section}.{key}" for key in stage.section_keys] or [stage.section]
        wanted = [f"{stage.params_file}:{key}" for key in own] if stage.section else []
        for want in (*wanted, *stage.reads):
            file, _, key = want.partition(":")
            have = params.get(file, set())
            if not any(key == k or key.startswith(k + ".") for k in have):
                problems.append(f"{stage.name}: reads {file}:{key} but dvc.yaml does not declare that param")
    for name in declared:
        if name not in STAGE_BY_NAME:
            problems.append(f"{name}: in dvc.yaml but not in the registry (src/eegprivacy/pipeline/stages.py)")
    return problems


# ---- Which stages left no MLflow run ---------------------------------------------------------------------------
def stages_without_runs(tracking_uri: str) -> list[str]:
    """DVC stage names (``name@item`` for foreach stages) with no run tagged ``dvc_stage`` = that name in the
    store: what a fresh clone's ``dvc repro`` skipped because its git-tracked outputs already matched
    ``dvc.lock``. ``make reproduce`` reruns these so the MLflow store is complete."""
    from eegprivacy.tracking.runs import dvc_stages_with_runs

    present = dvc_stages_with_runs(tracking_uri)
    return [name for stage in STAGES if stage.in_dvc for name in stage.dvc_names() if name not in present]
