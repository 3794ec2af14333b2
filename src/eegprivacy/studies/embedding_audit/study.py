"""Study C end to end on one cohort: embed the audited windows with every encoder, then compute every cell of
every runner.

One :class:`~eegprivacy.pipeline.sweep.SweepRunner` per (encoder, weights) -- an MLflow parent run with a child
per unit (endpoint or defense) and seed -- and one for the cross-encoder bridge over every ordered pair of the
audited encoders (their primary weights). Every run is tagged with its ``cohort`` (the dataset). Cells are cached
under ``cells_dir/embedding_audit/<dataset>``; the
key of each holds the stage's code hash (:func:`eegprivacy.pipeline.stages.code_hash`) and every knob its numbers
depend on, so a params change recomputes exactly what it affects. The encoders embed first, in ``jobs`` worker
processes; then ``jobs`` workers compute the cells of every runner ahead (``PrefetchedCells``), each cell on one
thread, so no number depends on ``jobs``.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.pipeline.keys import config_key
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import Cell, PrefetchedCells, SweepRunner
from eegprivacy.studies.embedding_audit.claims import claims_table, paired_identity_rows
from eegprivacy.studies.embedding_audit.config import EmbeddingAuditConfig
from eegprivacy.studies.embedding_audit.context import Context
from eegprivacy.studies.embedding_audit.data import audit_targets, load_windows
from eegprivacy.studies.embedding_audit.embed import embed_all, embedding_keys
from eegprivacy.studies.embedding_audit.summaries import summarise, tidy_table
from eegprivacy.studies.embedding_audit.units import (
    audited_cells,
    encoder_label,
    primary_weights,
    provenance_text,
    unit_tags,
    units,
)
from eegprivacy.studies.embedding_audit.workers import AuditCells
from eegprivacy.tracking import required_tags

STAGE = "embedding_audit"
# The knobs an encoder's cells depend on beyond its embeddings, and those the bridge's cells depend on.
AUDIT_KNOBS = ("splits", "bootstrap", "permutations", "subject_label_permutations", "window_label_permutations",
               "test_permutations",
               "defense_permutations", "reconstruction_points",
               "utility_threshold", "utility_kept", "defenses", "lira_shadows", "deployment_sigma", "subject_seed")
BRIDGE_KNOBS = ("splits", "bootstrap", "bridge_permutations")


def parent_run_name(dataset: str, *parts: str) -> str:
    """MLflow name of a runner's parent run: ``embedding_audit-<dataset>-<encoder>-<weights>``, or ``-bridge``."""
    return "-".join((STAGE, dataset, *parts))


@dataclass(frozen=True)
class Provenance:
    """Where the rows come from: the dataset, its version, whether it is synthetic, and the code."""

    dataset: str
    version: str
    synthetic: bool
    code: str

    def tags(self, seed: int | None, **extra) -> dict[str, str]:
        return required_tags(study="c", stage=STAGE, dataset=self.dataset, dataset_version=self.version,
                             synthetic=self.synthetic, seed=seed, dvc_stage=f"{STAGE}@{self.dataset}",
                             cohort=self.dataset, **extra)


@dataclass
class AuditRun:
    """What one run of the audit produced; the stage writes it out."""

    config: EmbeddingAuditConfig
    cells: list[tuple[str, str]]
    tidy: pd.DataFrame            # one row per metric, unit and seed
    summary: pd.DataFrame         # mean over seeds with the interval that fits (see ``summaries``)
    meta: dict                    # the headline's description of the run
    encoders_meta: dict           # (encoder, weights) -> describe(), pretraining record, dim, timing
    title: str                    # "<dataset>", "SYNTHETIC <dataset>" for a synthetic cohort
    claims: pd.DataFrame | None = None  # one row per claim and cell: its test, p, Holm family, verdict (claims.py)


def encoder_runner(prov: Provenance, config, cohort, cell: tuple[str, str], meta: dict, key: str, cells_dir: Path,
                   progress: bool) -> tuple[str, SweepRunner, list[Cell]]:
    """The runner of one (encoder, weights) cell and its (unit, seed) cells."""
    e, w = cell
    plain = config.to_dict()
    base = {"dataset_version": prov.version, "code_hash": prov.code, "encoder": e, "weights": w,
            "embedding_key": key, "audit_knobs": config_key({**{k: plain[k] for k in AUDIT_KNOBS},
                                                             "cohort": cohort.to_dict()})}

    describe = meta["describe"]
    # Which weights, and the file they came from: study C's own tags beside the convention's (required_tags
    # admits only the tracking module's OPTIONAL_TAGS as extras).
    weight_tags = {"weights": w, **({"checkpoint_sha256": describe["checkpoint_sha256"]}
                                    if describe.get("checkpoint_sha256") else {})}

    def tags(unit, seed):
        return {**prov.tags(seed, encoder=e, model=e,
                            **({"split": "all", "defense": "all"} if unit is None else unit_tags(unit))),
                **weight_tags}

    run_params = {STAGE: {**{k: v for k, v in plain.items() if k not in ("profiles", "cohorts")},
                          "profile_config": plain["profiles"][config.profile], "cohort": prov.dataset,
                          "cohort_config": cohort.to_dict()},
                  "encoder": {k: v for k, v in describe.items() if k not in ("channels", "channel_mapping")},
                  "channel_mapping": describe["channel_mapping"], "weights_source": w,
                  "provenance": provenance_text(e, w, meta),
                  "pretrain": meta.get("pretrain") or {}, "published": meta.get("published") or {},
                  "encoder_membership": meta.get("encoder_membership") or {"status": "run"},
                  "synthetic": prov.synthetic}
    runner = SweepRunner(name=parent_run_name(prov.dataset, e, w), study="c", dataset=prov.dataset,
                         out_dir=cells_dir / STAGE / prov.dataset / f"{e}-{w}", parent_tags=tags(None, None),
                         tags_fn=lambda c: tags(c.config["unit"], c.seed), params=run_params, progress=progress)
    return encoder_label(e, w), runner, [Cell({**base, "unit": u}, s) for u, seeds in units(config, w, cohort)
                                         for s in seeds]


def bridge_runner(prov: Provenance, config, cohort, names: list[str], encoders_meta: dict, cells_dir: Path,
                  progress: bool) -> tuple[str, SweepRunner, list[Cell]]:
    """The runner of the bridge: one cell per ordered pair of ``names``."""
    plain = config.to_dict()
    base = {"dataset_version": prov.version, "code_hash": prov.code,
            "bridge_knobs": config_key({k: plain[k] for k in BRIDGE_KNOBS}),
            "embedding_keys": config_key({n: encoders_meta[(n, primary_weights(n, config))]["describe"]
                                          for n in names}),
            "cohort_key": config_key(cohort.to_dict())}

    def tags(seed, encoder="all"):
        return prov.tags(seed, encoder=encoder, split="subject_disjoint", attack="bridge")

    runner = SweepRunner(name=parent_run_name(prov.dataset, "bridge"), study="c", dataset=prov.dataset,
                         out_dir=cells_dir / STAGE / prov.dataset / "bridge", parent_tags=tags(None),
                         tags_fn=lambda c: tags(c.seed, f"{c.config['source']}->{c.config['target']}"),
                         params={STAGE: {k: plain[k] for k in ("bootstrap", "bridge_permutations", "splits")},
                                 "synthetic": prov.synthetic}, progress=progress)
    return "bridge", runner, [Cell({**base, "source": s, "target": t}, 0) for s in names for t in names if s != t]


def compute(plan: list, contexts: dict, bridge: dict, jobs: int) -> list[pd.DataFrame]:
    """Every runner's rows; the pending cells of all runners are computed ahead in ``jobs`` processes."""
    frames = []
    with tempfile.TemporaryDirectory(prefix="embedding_audit-") as folder, \
            AuditCells(contexts, bridge, Path(folder)) as cell_fn:
        ahead = PrefetchedCells(cell_fn, [(c.config, c.seed) for _, runner, cells in plan
                                          for c in runner.pending(cells)], n_jobs=jobs)
        for name, runner, cells in plan:
            t0 = time.perf_counter()
            frame = runner.run(cells, ahead)
            if name == "bridge":  # encoder/weights columns carry source/target for the bridge rows
                frame["encoder"], frame["weights"] = frame["source"], frame["target"]
                frame = frame.drop(columns=["source", "target"])
            frames.append(frame)
            print(f"{name}: {len(cells)} cells done ({time.perf_counter() - t0:.0f} s)")
    return frames


def run_audit(config: EmbeddingAuditConfig, dataset_name: str, *, work: Path, cells_dir: Path, jobs: int = 1,
              progress: bool = True) -> AuditRun:
    """The whole audit of cohort ``dataset_name``: embeddings cached in ``work``, cells in ``cells_dir``."""
    from eegprivacy.data import get_dataset
    from eegprivacy.embeddings.splits import SubjectDisjointSplit

    cohort = config.cohort(dataset_name)
    dataset = get_dataset(dataset_name, **cohort.dataset)
    prov = Provenance(dataset_name, dataset.version(), bool(getattr(dataset, "synthetic", False)),
                      code_hash(STAGE))
    title = f"{'SYNTHETIC ' if prov.synthetic else ''}{dataset_name}"
    data = load_windows(dataset, config, cohort)
    audit = data.select("audit")
    groups = data.subject[audit]
    n_pretrain = int(np.unique(data.subject[data.role != "audit"]).size)
    print(f"{title}: {len(data.X)} windows; {audit.size} audited windows of {np.unique(groups).size} subjects "
          f"(task: {cohort.task_text})")
    cells = audited_cells(config)
    keys = embedding_keys(config, cells, prov.version, prov.code, cohort)
    embedded = embed_all(cells, keys, data, config, work / dataset_name, n_jobs=jobs)
    targets = audit_targets(data, config)
    embeddings, encoders_meta, contexts, plan = {}, {}, {}, []
    for cell in cells:
        emb = embedded[cell]
        emb["meta"]["dim"] = int(emb["Z"].shape[1])
        encoders_meta[cell] = emb["meta"]
        if cell[1] == primary_weights(cell[0], config):  # the bridge reads each encoder's primary cell
            embeddings[cell[0]] = emb["Z"]
        contexts[cell] = Context(emb["Z"], data, config, emb, targets, cohort=cohort)
        plan.append(encoder_runner(prov, config, cohort, cell, emb["meta"], keys[cell], cells_dir, progress))
    if len(embeddings) > 1:
        plan.append(bridge_runner(prov, config, cohort, list(embeddings), encoders_meta, cells_dir, progress))
    splitter = SubjectDisjointSplit(config.splits.subject_disjoint.n_splits, random_state=0)
    bridge = {"embeddings": embeddings, "A": targets[0], "groups": groups, "audit_config": config,
              "splitter": splitter}
    frames = compute(plan, contexts, bridge, jobs)
    # pretraining adds identity? Each encoder's primary cell against its random-init twin (same architecture)
    frames.append(pd.DataFrame(
        [r | {"encoder": e, "weights": w} for (e, w) in cells
         if (e, "random_init") in contexts and w == primary_weights(e, config) and w != "random_init"
         for r in paired_identity_rows(contexts[(e, w)], contexts[(e, "random_init")], config)]))
    tidy = tidy_table(frames, prov.synthetic)
    tidy.insert(0, "cohort", dataset_name)
    design = cohort.describe()
    design["pretrain_text"] = (
        f"run {cohort.pretrain_run} of every subject pretrains the encoders (interleaved member / held-out blocks: "
        "the encoder-membership attack); the other runs are audited, so the self-pretrained encoders have seen "
        "other runs of the audited subjects" if cohort.pretrain == "run" else
        f"{n_pretrain} further subjects pretrain the encoders (interleaved member / held-out blocks: the "
        "encoder-membership attack) and never enter an audit split")
    meta = {"dataset": dataset_name, "profile": config.profile, "synthetic": prov.synthetic,
            "n_audit_subjects": int(np.unique(groups).size), "n_audit_windows": int(audit.size),
            "n_pretrain_subjects": n_pretrain if cohort.pretrain == "subjects" else 0,
            "n_pretrain_windows": int((data.role == "pretrain_member").sum()),
            "window_s": float(config.window_s), "cohort": design,
            "deployment_sigma": float(config.deployment_sigma),
            "utility_threshold": float(config.utility_threshold), "utility_kept": float(config.utility_kept),
            "defense_seeds": len(config.defense_seeds), "dataset_version": prov.version}
    meta["provenance"] = {f"{e}/{w}": provenance_text(e, w, {**encoders_meta[(e, w)], **meta})
                          for e, w in cells}
    claims = claims_table(tidy, dataset_name, cells, design, {c: encoder_label(*c) for c in cells},
                          {c: meta["provenance"][f"{c[0]}/{c[1]}"] for c in cells},
                          first_seed=config.defense_seeds[0] if config.defense_seeds else 0)
    return AuditRun(config=config, cells=cells, tidy=tidy, summary=summarise(tidy), meta=meta,
                    encoders_meta=encoders_meta, title=title, claims=claims)
