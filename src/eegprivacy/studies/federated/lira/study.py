"""The ``federated_lira`` stage on one dataset, in the order it runs (:class:`LiRAStudy`): the shadows' φ, each
ε's target cells through the sweep runner, what is pooled over them, the tidy table and what the report states.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.attacks.reference import REFERENCE_ATTACKS
from eegprivacy.pipeline.keys import config_key, epsilon_key
from eegprivacy.pipeline.sweep import SweepRunner, expand_grid, run_prefetched
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.config import DatasetSpec, FederatedMIAConfig
from eegprivacy.studies.federated.lira.config import (
    ALPHA,
    ATTACK_KNOBS,
    CONTROL_SUFFIX,
    DIFF_METRIC,
    MIN_BEYOND,
    NOTE,
    STAGE,
    TRAINING_KNOBS,
    UNTRAINED,
    FederatedLiRAConfig,
)
from eegprivacy.studies.federated.lira.design import loo_feasible, loo_group_size, shadow_in_count, shadow_membership
from eegprivacy.studies.federated.lira.federations import shadow_phis
from eegprivacy.studies.federated.lira.pooled import control_difference_rows, holm_control_cells, pooled_rows
from eegprivacy.studies.federated.lira.scoring import independent_nonmembers, score_rows
from eegprivacy.studies.federated.lira.targets import (
    MEMBER_KEY,
    TargetContext,
    references_of,
    shadow_loo,
    target_cell,
    target_member,
)
from eegprivacy.tracking import required_tags


@dataclass
class Plan:
    """One ε's target cells and the sweep runner (MLflow parent run, cell cache) that computes them."""

    epsilon: float
    mechanism: str
    name: str
    runner: SweepRunner
    cells: list


class LiRAStudy:
    """LiRA and RLA on one dataset: the shadows' φ, each ε's target cells (each on its own member split) and what
    is pooled over them. ``training`` holds the target's knobs (the shadows share them), ``spec`` the dataset's
    spec in it, ``code`` the stage's code hash (part of every cache key). Reads the trials and draws every
    target's member split and the shadows' IN masks."""

    def __init__(self, config: FederatedLiRAConfig, training: FederatedMIAConfig, dataset: str, spec: DatasetSpec,
                 cells_dir: Path, code: str, progress: bool = True):
        from eegprivacy.signal.csp import MODEL_INPUT

        self.config, self.training, self.dataset, self.spec = config, training, dataset, spec
        self.code, self.progress = code, progress
        loaded, self.trials = mia.load_trials(dataset, spec)
        self.version, self.synthetic = loaded.version(), bool(self.trials.synthetic)
        self.output = MODEL_INPUT[config.model]
        self.epsilons = [float(e) for e in config.epsilons]
        subjects = self.trials.metadata["subject"]
        self.target_members = np.stack([target_member(self.trials, training, seed)
                                        for seed in range(config.target_seeds)])
        # Subjects (= clients) as codes for the cluster bootstrap and the pooled rows' n_clusters; the ids
        # themselves stay here.
        self.subject_codes = np.unique(subjects.astype(str).to_numpy(), return_inverse=True)[1]
        self.clusters = self.subject_codes if config.bootstrap_unit == "subjects" else None
        self.masks = shadow_membership(self.trials.y, subjects.to_numpy(), config.n_shadows, config.shadow_seed,
                                       config.shadow_in_fraction)
        self.knobs = {k: getattr(training, k) for k in TRAINING_KNOBS}
        self.attack_knobs = {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v  # rows hold scalars
                             for k, v in ((k, getattr(config, k)) for k in ATTACK_KNOBS)}
        self.root = cells_dir / STAGE / dataset / config.model
        self.scores_dir = self.root / "scores"
        self.shadow_key = config_key({
            "dataset_version": self.version, "code_hash": code, "paradigm": spec.paradigm_text(),
            "model": config.model, "epsilons": [epsilon_key(e) for e in self.epsilons], **self.knobs,
            "n_shadows": config.n_shadows, "shadow_seed": config.shadow_seed,
            "shadow_in_fraction": config.shadow_in_fraction})
        self.phis: dict = {}
        self.curves: dict = {}
        self.parent_metrics: dict = {}
        self._diff_runs: dict = {}  # (ε, attack) -> (MLflow parent run, metric name) of the attack − control cells

    def train_shadows(self) -> None:
        """The shadows' φ at every ε (cached under a key of everything they depend on)."""
        self.phis = shadow_phis(self.trials, self.masks, self.config, self.training, self.epsilons, self.output,
                                self.root / f"shadows-{self.shadow_key}.npz")

    def _tags(self, seed, eps: float, mechanism: str) -> dict:
        return required_tags(study="b", stage=STAGE, dataset=self.dataset, dataset_version=self.version,
                             synthetic=self.synthetic, seed=seed, dvc_stage=STAGE, model=self.config.model,
                             epsilon=epsilon_key(eps), mechanism=mechanism,
                             attack=",".join([*REFERENCE_ATTACKS, "rla"]), split="per_subject_80_20_per_target")

    def plans(self) -> list[Plan]:
        """Each ε's target cells (seeds 0..target_seeds-1) with its runner, in the order they run."""
        config = self.config
        base = {"dataset_version": self.version, "code_hash": self.code, "shadow_key": self.shadow_key,
                "model": config.model, "attackers": ",".join(config.attackers), "paradigm": self.spec.paradigm_text(),
                **self.knobs, **self.attack_knobs}
        plans = []
        for eps in self.epsilons:
            mechanism = mia.mechanism(eps)
            cells = expand_grid({"epsilon": [eps], "mechanism": [mechanism]}, seeds=range(config.target_seeds),
                                base=base)
            name = f"{STAGE}-{self.dataset}-{config.model}-eps{eps:g}"
            runner = SweepRunner(name=name, study="b", dataset=self.dataset, out_dir=self.root / f"eps{eps:g}",
                                 parent_tags=self._tags(None, eps, mechanism),
                                 tags_fn=lambda cell, eps=eps, m=mechanism: self._tags(cell.seed, eps, m),
                                 params={STAGE: {**self.knobs, **self.attack_knobs, "model": config.model,
                                                 "epsilon": eps, "attackers": config.attackers,
                                                 "epsilon_scope": NOTE}, "synthetic": self.synthetic},
                                 progress=self.progress)
            plans.append(Plan(eps, mechanism, name, runner, cells))
        return plans

    def run_targets(self, plans: list[Plan]) -> list[pd.DataFrame]:
        """The target cells of every ε in ``workers`` processes, like the shadows (each is a function of its seed
        alone)."""
        context = TargetContext(self.config, self.training, self.trials, self.output, self.phis, self.masks,
                                self.scores_dir, self.subject_codes)
        return run_prefetched([(p.runner, p.cells) for p in plans], functools.partial(target_cell, ctx=context),
                              n_jobs=self.config.workers)

    def _saved_scores(self, plan: Plan) -> dict:
        """{(attack, attacker): [(member, scores) per target seed]} from the files the cells left (each target's
        own split beside its scores)."""
        per_model: dict = {}
        for cell in plan.cells:
            path = self.scores_dir / f"{cell.key}.npz"
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing while its cell's rows are cached; delete "
                                        f"{plan.runner.out_dir} and run the stage again")
            with np.load(path) as saved:
                member = saved[MEMBER_KEY].astype(int)
                for k in saved.files:
                    if k != MEMBER_KEY:
                        per_model.setdefault(tuple(k.split("|")), []).append((member, saved[k]))
        return per_model

    def pooled(self, plan: Plan) -> pd.DataFrame:
        """One ε's rows pooled over target seeds, and shadow-as-target (per shadow and pooled); their ROC curves
        go to ``curves``, the pooled numbers to ``parent_metrics``."""
        config, key = self.config, epsilon_key(plan.epsilon)
        saved = self._saved_scores(plan)
        rows, roc_t = pooled_rows(saved, config.bootstrap, config.shadow_seed, "target_pooled", config.workers,
                                  self.clusters, self.subject_codes)
        rows += control_difference_rows(saved, config.bootstrap, config.shadow_seed, "target_pooled", config.workers,
                                        self.clusters, self.subject_codes)
        # Shadow-as-target needs two IN and two OUT values per trial once a balanced group leaves (loo_feasible).
        loo = shadow_loo(self.phis, self.masks, key, config.lira_variance) if self.loo_runs() else {}
        rows_l, roc_l = pooled_rows(loo, config.bootstrap, config.shadow_seed, "shadow_loo_pooled", config.workers,
                                    self.clusters, self.subject_codes)
        for attack, groups in loo.items():  # per shadow target, like the per-seed rows of the real targets
            for j, (m, s) in enumerate(groups):
                rows_l += [{**r, "shadow": j, "n_nonmembers": float((m == 0).sum())}
                           for r in score_rows(m.astype(bool), {attack: s}, scope="shadow_loo")]
        extra = pd.DataFrame(rows + rows_l)
        extra["epsilon"], extra["mechanism"], extra["model"] = plan.epsilon, plan.mechanism, config.model
        for (attack, attacker), c in roc_t.items():
            if attack != UNTRAINED and not attack.endswith(CONTROL_SUFFIX) and not references_of(attack):
                # the figure: the attacks on all references
                self.curves[("target_pooled", key, attack, attacker)] = c
        for (attack, attacker), c in roc_l.items():
            self.curves[("shadow_loo", key, attack, attacker)] = c
        for r in rows + [r for r in rows_l if r["scope"] == "shadow_loo_pooled"]:
            if not (r["resolvable"] and np.isfinite(r["value"])):  # an unresolvable cell is no number in MLflow
                continue
            name = f"{r['scope']}/{r['attack']}{'_' + r['attacker'] if r['attacker'] else ''}/{r['metric']}"
            metrics = self.parent_metrics.setdefault(plan.name, {})
            metrics[name] = r["value"]
            if r["metric"] == "tpr_at_resolvable_fpr":
                metrics[f"{name}_fpr"] = r["fpr"]
            for column in ("ci_low", "ci_high"):  # every pooled number with its interval (the study B report)
                if r["metric"] != DIFF_METRIC and np.isfinite(r.get(column, np.nan)):
                    metrics[f"{name}_{column}"] = r[column]
            if r["metric"] == DIFF_METRIC:
                for column in ("ci_low", "ci_high", "p_value", "control_share"):
                    if np.isfinite(r[column]):
                        metrics[f"{name}_{column}"] = r[column]
                self._diff_runs[(plan.epsilon, r["attack"])] = (plan.name, name)
        return extra

    def loo_runs(self) -> bool:
        """Whether the shadow-as-target check runs (:func:`loo_feasible`)."""
        return loo_feasible(self.masks.shape[0], shadow_in_count(self.masks.shape[0], self.config.shadow_in_fraction))

    def tidy(self, frames: list[pd.DataFrame], pooled: list[pd.DataFrame]) -> pd.DataFrame:
        """The target cells' rows, then the pooled and shadow-as-target rows."""
        extra = pd.concat(pooled, ignore_index=True)
        extra["study"], extra["dataset"] = "b", self.dataset
        tidy = pd.concat([pd.concat(frames, ignore_index=True), extra], ignore_index=True)
        tidy["synthetic"] = self.synthetic
        for column in ("attack", "attacker"):
            tidy[column] = tidy[column].fillna("")
        tidy = holm_control_cells(tidy)
        cells = tidy[(tidy["metric"] == DIFF_METRIC) & tidy["p_holm"].notna()]
        for r in cells.to_dict("records"):  # Holm needs every ε's cell: logged once all are pooled
            run, name = self._diff_runs.get((r["epsilon"], r["attack"]), (None, None))
            if run is not None:
                self.parent_metrics.setdefault(run, {})[f"{name}_p_holm"] = float(r["p_holm"])
        return tidy

    def meta(self) -> dict:
        """What the report and the headline JSON say about the run."""
        config, training = self.config, self.training
        members = self.target_members
        return {"dataset": self.dataset, "model": config.model, "synthetic": self.synthetic,
                "split_seed": training.split_seed, "n_trials": int(members.shape[1]),
                "n_members": int(members[0].sum()), "n_nonmembers": int((~members[0]).sum()),
                "n_independent_nonmembers": independent_nonmembers(members),
                "n_clients": len(self.trials.subjects()), "bootstrap_unit": config.bootstrap_unit,
                "target_seeds": config.target_seeds, "n_shadows": config.n_shadows,
                "shadow_in_fraction": config.shadow_in_fraction,
                "shadow_in_count": shadow_in_count(config.n_shadows, config.shadow_in_fraction),
                "loo_group": loo_group_size(config.n_shadows, shadow_in_count(config.n_shadows,
                                                                              config.shadow_in_fraction)),
                "min_beyond": MIN_BEYOND, "lira_variance": config.lira_variance,
                "control_folds": config.control_folds, "alpha": ALPHA,
                "attack_folds": config.attack_folds, "epsilons": self.epsilons,
                "training": ", ".join(f"{k} {getattr(training, k)}" for k in (
                    "num_rounds", "local_epochs", "clients_per_round", "batch_size", "learning_rate", "clip_norm"))}

