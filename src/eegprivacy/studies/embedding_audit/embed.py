"""The embeddings of the audited windows, per (encoder, weights), cached on disk by a key of everything they
depend on (dataset version, code, windows, encoder config, pretraining schedule).

A self-pretrained encoder first pretrains on the pretraining subjects' member windows (its checkpoint and
record go to ``work/checkpoints``); the masked-reconstruction losses of its member and non-member windows are
kept for the encoder-membership attack, with each window's subject as an integer code (``mia_*_subject``: the
attack's interval resamples subjects; codes, not ids, so no subject id is written to the cache). The same losses of
the encoder at its random initialisation (the weights pretraining starts from, with the decoder head it starts
from) are its matched null: kept as ``mia_control_*`` beside the pretrained ones, and as the random-init cell's
own ``mia_*``, so that baseline runs the same attack. Each encoder pretrains and embeds on one torch / BLAS
thread, so its weights and embeddings depend neither on ``--jobs`` nor on the machine's core count (how a
reduction is split over threads changes its last bits, and 120 optimiser steps carry them into the weights).

A published cell (``published_weights`` names the authors' file) loads it through
:func:`~eegprivacy.embeddings.encoders.published.load_published` into the published architecture instead of
pretraining; its cache key holds the file's sha256. It has no encoder-membership losses: the published pretraining
windows are not ours, so there is no member set to attack (``meta["encoder_membership"]`` says so). The random-init
baseline of an encoder with published weights is built with the published config, so it is the published cell's
matched control.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import numpy as np

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.pipeline.keys import config_key
from eegprivacy.pipeline.sweep import PrefetchedCells
from eegprivacy.studies.embedding_audit.data import AuditData
from eegprivacy.studies.embedding_audit.units import encoder_label, published_entry
from eegprivacy.studies.embedding_audit.workers import one_thread

WINDOW_KNOBS = ("window_s", "windows_per_recording", "pretrain_subjects", "subject_seed")


def uses_published_config(config, encoder: str, weights: str) -> bool:
    """Whether the cell's encoder is built with the published architecture: the published cell, and the
    random-init baseline of an encoder audited with published weights (its matched control)."""
    return published_entry(config, encoder) is not None and weights in ("published", "random_init")


def published_digest(config, encoder: str) -> str:
    """sha256 of ``encoder``'s published file (a missing file or a wrong sha256 stops the stage here, before any
    work, with the error :func:`~eegprivacy.embeddings.encoders.published.load_published` would raise)."""
    from eegprivacy.embeddings.encoders.published import published_sha256

    entry = published_entry(config, encoder)
    return published_sha256(encoder, entry.get("path"), entry.get("sha256"))


def cell_config(config, encoder: str, weights: str) -> dict | None:
    """Constructor overrides of the cell's encoder: the published config (BIOT's channel count read from the
    file) for :func:`uses_published_config` cells, whatever the profile says; else the profile's."""
    from eegprivacy.embeddings.encoders.published import published_config

    if uses_published_config(config, encoder, weights):
        entry = published_entry(config, encoder)
        return published_config(encoder, entry.get("path"), entry.get("sha256"))
    return config.active_profile.configs.get(encoder) or None


def embedding_keys(config, cells: list[tuple[str, str]], dataset_version: str, code: str, cohort) -> dict:
    """Cache key of each cell's embeddings: every knob its numbers depend on (the cohort's design included; for a
    cell built with the published config, that config and the published file's sha256), so a params change
    recomputes exactly what it affects."""
    from eegprivacy.embeddings.encoders.published import PUBLISHED_CONFIGS

    plain, profile = config.to_dict(), config.active_profile.to_dict()
    digests = {e: published_digest(config, e) for e, w in cells if uses_published_config(config, e, w)}

    def key(e, w):
        published = uses_published_config(config, e, w)
        return config_key({"dataset_version": dataset_version, "code": code, "cohort": cohort.to_dict(),
                           **{k: plain[k] for k in WINDOW_KNOBS}, "encoder": e, "weights": w,
                           "config": PUBLISHED_CONFIGS[e] if published else profile["configs"].get(e),
                           "pretrain": profile["pretrain"] if w == "self_pretrained" else None,
                           **({"published_sha256": digests[e]} if published else {})})
    return {(e, w): key(e, w) for e, w in cells}


def _cached(cache: Path) -> dict | None:
    meta_path = cache.with_suffix(".json")
    if not (cache.exists() and meta_path.exists()):
        return None
    with np.load(cache) as saved:
        out = {k: saved[k] for k in saved.files}
    out["meta"] = json.loads(meta_path.read_text())
    return out


def _membership_windows(data: AuditData) -> dict:
    """The encoder-membership windows and their subjects as integer codes (index among the pretraining
    subjects)."""
    members, nonmembers = data.select("pretrain_member"), data.select("pretrain_nonmember")
    subjects = np.unique(data.subject[np.r_[members, nonmembers]])
    return {"members": members, "nonmembers": nonmembers,
            "mia_members_subject": np.searchsorted(subjects, data.subject[members]),
            "mia_nonmembers_subject": np.searchsorted(subjects, data.subject[nonmembers])}


def _untrained_losses(encoder, data: AuditData, config, prefix: str, out: dict) -> None:
    """The masked-patch losses of ``encoder`` as it stands (random init) on the membership windows -> ``out``."""
    from eegprivacy.embeddings.pretrain import untrained_masked_losses

    rows, seed = _membership_windows(data), config.subject_seed
    out[f"{prefix}_members"] = untrained_masked_losses(encoder, data.X[rows["members"]], seed=seed)
    out[f"{prefix}_nonmembers"] = untrained_masked_losses(encoder, data.X[rows["nonmembers"]], seed=seed)
    out["mia_members_subject"], out["mia_nonmembers_subject"] = (rows["mia_members_subject"],
                                                                 rows["mia_nonmembers_subject"])


def _pretrain(encoder, name: str, data: AuditData, config, work: Path, out: dict) -> dict:
    """Pretrain ``encoder`` on the member windows; its losses (and, first, those of its random init: the control)
    go to ``out``, its record (sans subjects) back."""
    from eegprivacy.embeddings.pretrain import masked_losses, pretrain

    pre, seed = config.active_profile.pretrain, config.subject_seed
    _untrained_losses(encoder, data, config, "mia_control", out)  # before pretraining moves the weights
    rows = _membership_windows(data)
    members, nonmembers = rows["members"], rows["nonmembers"]
    (work / "checkpoints").mkdir(parents=True, exist_ok=True)
    record = pretrain(encoder, data.X[members], data.subject[members],
                      # pretrain: run -- the audited subjects' other runs pretrain, by design (data.py)
                      audit_subjects=(set(data.subject[data.select("audit")]) if data.pretrain_subject_disjoint
                                      else set()),
                      checkpoint_path=work / "checkpoints" / f"{name}.pt", budget_s=float(pre.budget_s),
                      max_steps=pre.max_steps[name], batch_size=pre.batch_size, lr=float(pre.lr), seed=seed)
    if record.steps < pre.max_steps[name]:
        print(f"WARNING {name}: the {pre.budget_s} s budget stopped pretraining after {record.steps} of "
              f"{pre.max_steps[name]} steps; the weights now depend on this machine's speed")
    record.write_json(work / "checkpoints" / f"{name}.json")
    out["pretrain_losses"] = np.asarray(record.losses)
    out["mia_members"] = masked_losses(encoder, record, data.X[members], seed=seed)
    out["mia_nonmembers"] = masked_losses(encoder, record, data.X[nonmembers], seed=seed)
    return {k: v for k, v in record.to_dict().items() if k not in ("losses", "subject_hashes", "encoder_description")}


def embed_cell(name: str, weights: str, data: AuditData, config, work: Path, key: str) -> dict:
    """Embeddings of the audit windows (+ the encoder-membership losses when self-pretrained), cached by key."""
    from eegprivacy.embeddings.encoders.published import load_published
    from eegprivacy.embeddings.encoders.registry import make_encoder, time_embedding

    cache = work / "embeddings" / f"{name}-{weights}-{key}.npz"
    cached = _cached(cache)
    if cached is not None:
        return cached
    encoder = make_encoder(name, data.ch_names, data.sfreq, float(config.window_s),
                           config=cell_config(config, name, weights), seed=config.subject_seed)
    audit = data.select("audit")
    out: dict = {}
    meta: dict = {"pretrain": _pretrain(encoder, name, data, config, work, out)
                  if weights == "self_pretrained" else None}
    if weights == "published":
        entry = published_entry(config, name)
        load_published(encoder, entry["path"], entry.get("sha256"))
        meta["published"] = _published_meta(name, entry, encoder)
        meta["encoder_membership"] = _membership_skipped(name)
    if weights == "random_init" and data.select("pretrain_member").size:
        _untrained_losses(encoder, data, config, "mia", out)  # the random-init baseline runs the same attack
    timing = time_embedding(encoder, data.X[audit[:32]])
    t0 = time.perf_counter()
    out["Z"] = encoder.transform(data.X[audit]).astype(np.float64)
    meta.update(describe=encoder.describe(), embed_s=time.perf_counter() - t0,
                ms_per_window=1000 * timing["seconds"] / max(1, timing["n_windows"]))
    cache.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(cache) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **out)
    write_text_atomic(cache.with_suffix(".json"), json.dumps(meta, indent=1, default=str))
    out["meta"] = meta
    return out


def _published_meta(name: str, entry: dict, encoder) -> dict:
    from eegprivacy.embeddings.encoders.published import PUBLISHED_PRETRAINING_OVERLAP

    return {"path": str(entry["path"]), "sha256": encoder.checkpoint_sha256,
            "sha256_pinned": entry.get("sha256") is not None, "config": dict(encoder.config),
            "pretraining_overlap": list(PUBLISHED_PRETRAINING_OVERLAP.get(name, ()))}


def _membership_skipped(name: str) -> dict:
    """Why a published cell has no encoder-membership rows (the head-membership attack still runs)."""
    from eegprivacy.embeddings.encoders.published import PUBLISHED_PRETRAINING_OVERLAP

    overlap = PUBLISHED_PRETRAINING_OVERLAP.get(name, ())
    reason = ("published weights: their pretraining windows are not ours, so there is no member / non-member split "
              "of our windows to attack; the encoder-membership attack is skipped (no row, not a chance-level 0.5)")
    if overlap:
        reason += (f". Note: {', '.join(overlap)} is in this encoder's published pretraining data "
                   "(the published-weights README), so on that cohort every audited subject may be a training member")
    return {"status": "skipped", "reason": reason}


def _embed_job(job: dict, seed: int, data: AuditData, config, work: Path) -> tuple[dict, float]:
    """One (encoder, weights) embedding job for :class:`PrefetchedCells` (``seed`` is unused: the encoders are
    seeded from the config)."""
    started = time.perf_counter()
    with one_thread():
        emb = embed_cell(job["encoder"], job["weights"], data, config, work, job["key"])
    return emb, time.perf_counter() - started


def embed_all(cells: list[tuple[str, str]], keys: dict, data: AuditData, config, work: Path,
              n_jobs: int = 1) -> dict:
    """Every (encoder, weights) cell's embeddings, computed side by side in ``n_jobs`` processes, the ones that
    pretrain first (see the module docstring for why each runs on one thread)."""
    order = sorted(cells, key=lambda cell: cell[1] != "self_pretrained")  # stable: the long jobs start first
    jobs = [({"encoder": e, "weights": w, "key": keys[(e, w)]}, 0) for e, w in order]
    compute = PrefetchedCells(functools.partial(_embed_job, data=data, config=config, work=work), jobs,
                              n_jobs=n_jobs)
    out = {}
    for job, seed in jobs:
        emb, seconds = compute(job, seed)
        out[(job["encoder"], job["weights"])] = emb
        print(f"{encoder_label(job['encoder'], job['weights'])}: {emb['Z'].shape[1]}-d embeddings ready "
              f"({seconds:.0f} s on one thread)")
    return out
