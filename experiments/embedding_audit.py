"""Stage ``embedding_audit`` (study C): is releasing frozen-encoder embeddings of EEG windows safe?

Every endpoint runs under the split that can falsify it (``shared/spec/study-c-protocol.md``):

- subjects: ``pretrain_subjects`` of the dataset never enter an audit split; half of them pretrain each neural
  encoder (masked-patch reconstruction, :mod:`eegprivacy.audit.pretrain`), the other half are the non-members of
  the encoder-membership attack. The remaining subjects are audited; a seeded half of them (``head`` subjects)
  trains the downstream rest-vs-arithmetic head whose membership is attacked, the other half (``release``) is what
  the DP-SGD head releases.
- per (encoder, weights) cell: raw-copy check, centered-PSD attribute leakage L_A under the temporal-gap and the
  subject-disjoint split (Gaussian and split-local permutation controls, subject bootstrap CI, permutation p),
  BPID@1 with rest windows as enrollment and arithmetic windows as queries, loss-threshold membership against the
  head and the pretrained encoder, held-out-subject reconstruction R², AEDS, the deployment check (rest vs
  arithmetic of held-out subjects, clean and noised) and the defenses (noise with a naive and a Wiener attacker,
  PCA bottleneck, coordinate dropout, DP-SGD head), each with the head's balanced accuracy.
- the cross-encoder bridge for every ordered pair of the audited encoders (their primary weights).

MLflow: one parent run per (encoder, weights) and one for the bridge, a child per unit (split / endpoint /
defense) and seed. Cells are cached in ``data/sweeps/embedding_audit`` (resumable); embeddings, pretraining
records and checkpoints in ``data/embedding_audit``. The encoders embed in the main process; then ``--jobs``
worker processes compute the cells of every runner ahead (``PrefetchedCells``), each cell on one thread.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.atomic import atomic_path, write_text_atomic  # noqa: E402
from eegprivacy.params import ParamsError, load_params  # noqa: E402
from eegprivacy.tracking import required_tags  # noqa: E402
from eegprivacy.tracking.runs import log_to_named_run  # noqa: E402
from eegprivacy.tracking.sweep import Cell, PrefetchedCells, SweepRunner, aggregate, config_key  # noqa: E402

NAME = "embedding-audit"
HELP = ("Study C: split-controlled audit of frozen EEG-encoder embeddings (BIOT, LaBraM, EEGPT, band power): "
        "attribute, identity, membership and reconstruction endpoints with negative controls, AEDS, the "
        "cross-encoder bridge and defenses (noise, PCA, dropout, DP-SGD head).")
STAGE = "embedding_audit"
NEURAL = ("biot", "labram", "eegpt")
TEXT_COLUMNS = ("endpoint", "split", "defense", "attacker", "encoder", "weights", "unit")


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/embedding_audit.yaml")
    parser.add_argument("--out", default="metrics/embedding_audit.csv", help="tidy rows, one per metric")
    parser.add_argument("--json", default="metrics/embedding_audit.json", help="headline per encoder")
    parser.add_argument("--report", default="reports/embedding_audit.md", help="markdown tables")
    parser.add_argument("--figures", default="reports/figures", help="folder for embedding_audit_*.png")
    parser.add_argument("--work", default="data/embedding_audit",
                        help="checkpoints, pretraining records and cached embeddings")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes computing cells ahead (default: min(2, CPUs)); the numbers do not "
                             "depend on it: each cell is a pure function of its config and seed, computed on one "
                             "BLAS/torch thread")


def validate(params: dict, source) -> None:
    def bad(key, must):
        raise ParamsError(f"{source}: embedding_audit.{key} = {params.get(key)!r} is invalid; it must be {must}. "
                          f"Fix it in {source} and run the stage again (nothing was computed or written)")

    profiles = params.get("profiles") or {}
    if params.get("profile") not in profiles:
        bad("profile", f"one of {sorted(profiles)}")
    from eegprivacy.audit.encoders import ENCODERS

    if not params.get("encoders") or not set(params["encoders"]) <= set(ENCODERS):
        bad("encoders", f"a non-empty subset of {sorted(ENCODERS)}")
    for key, low in (("windows_per_recording", 6), ("pretrain_subjects", 2), ("bootstrap", 1000),
                     ("permutations", 1), ("defense_permutations", 0), ("lira_shadows", 0),
                     ("bridge_permutations", 0), ("reconstruction_points", 1)):
        if not isinstance(params.get(key), int) or params[key] < low:
            bad(key, f"a whole number >= {low}")
    if not 0 < float(params.get("utility_threshold", 0)) < 1:
        bad("utility_threshold", "a balanced accuracy strictly between 0 and 1")
    dp = params["defenses"]["dp_head"]
    if not all(isinstance(e, (int, float)) and e > 0 for e in dp["epsilons"]):
        bad("defenses.dp_head.epsilons", "a list of ε > 0 (.inf for no DP)")
    if not 0 < float(dp["delta"]) < 1:
        bad("defenses.dp_head.delta", "in (0, 1)")


# ----------------------------------------------------------------------------------------------------- data

@dataclass
class AuditData:
    """Windows of one dataset with the metadata every split needs (subjects stay inside this process)."""

    X: np.ndarray            # (n, channels, samples), volts, at the dataset's rate
    subject: np.ndarray      # per window
    state: np.ndarray        # 0 rest, 1 arithmetic
    order: np.ndarray        # window index within its recording (time order)
    role: np.ndarray         # pretrain_member / pretrain_nonmember / pretrain_gap / audit
    sfreq: float
    ch_names: list[str]

    def select(self, role: str) -> np.ndarray:
        return np.flatnonzero(self.role == role)


def assign_roles(subjects, n_pretrain: int, seed: int) -> dict[str, str]:
    """Seeded draw of the pretraining subjects; everyone else is audited."""
    subjects = sorted(subjects)
    if len(subjects) < n_pretrain + 8:
        raise ParamsError(f"{len(subjects)} subjects leave fewer than 8 to audit after {n_pretrain} pretraining ones")
    order = np.random.default_rng(seed).permutation(len(subjects))
    return {subjects[i]: "pretrain" if rank < n_pretrain else "audit" for rank, i in enumerate(order)}


def window_roles(subject_role, recording, order, gap: int = 2) -> np.ndarray:
    """Pretraining subjects' windows: the first half of each recording pretrains the encoder (members), the last
    part after a ``gap`` of windows is held out (non-members) -- the same subjects and recordings on both sides
    (ours), so the encoder-membership attack measures memorisation rather than a between-subject shift."""
    roles = np.asarray(subject_role, dtype=object).copy()
    for rec in np.unique(recording[roles == "pretrain"]):
        idx = np.flatnonzero(recording == rec)
        half = (order[idx].max() + 1) // 2
        roles[idx] = np.where(order[idx] < half, "pretrain_member",
                              np.where(order[idx] >= half + gap, "pretrain_nonmember", "pretrain_gap"))
    return roles.astype(str)


def load_windows(dataset, params: dict) -> AuditData:
    from eegprivacy.audit.pretrain import dataset_windows

    roles = assign_roles(dataset.subjects(), int(params["pretrain_subjects"]), int(params["subject_seed"]))
    X, subj, recs, sfreq, names = dataset_windows(dataset, None, window_s=float(params["window_s"]),
                                                  max_windows_per_recording=int(params["windows_per_recording"]))
    labels = {(r.subject, r.recording): int(r.meta["label"]) for r in dataset.recordings()}
    subj, recs = np.asarray(subj), np.asarray(recs)
    state = np.array([labels[(s, r)] for s, r in zip(subj, recs)])
    order = pd.Series(np.arange(len(recs))).groupby(recs).cumcount().to_numpy()
    role = window_roles(np.array([roles[s] for s in subj]), recs, order)
    return AuditData(X=X, subject=subj, state=state, order=order, role=role,
                     sfreq=float(sfreq), ch_names=list(names))


def downsampled_waveform(X: np.ndarray, points: int) -> np.ndarray:
    """Reconstruction target: each channel average-pooled to ``points`` samples, in µV, flattened."""
    n, c, t = X.shape
    usable = (t // points) * points
    return (X[:, :, :usable].reshape(n, c, points, -1).mean(-1) * 1e6).reshape(n, -1)


# ----------------------------------------------------------------------------------------------- encoders

def code_hash() -> str:
    """Sources whose change must invalidate cached embeddings and cells."""
    import eegprivacy.audit as audit

    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(Path(audit.__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def embed_cell(name: str, weights: str, data: AuditData, params: dict, work: Path, key: str) -> dict:
    """Embeddings of the audit windows (+ the encoder-membership losses when self-pretrained), cached by key."""
    from eegprivacy.audit.encoders import make_encoder, time_embedding
    from eegprivacy.audit.pretrain import masked_losses, pretrain

    cache = work / "embeddings" / f"{name}-{weights}-{key}.npz"
    meta_path = cache.with_suffix(".json")
    if cache.exists() and meta_path.exists():
        with np.load(cache) as saved:
            out = {k: saved[k] for k in saved.files}
        out["meta"] = json.loads(meta_path.read_text())
        return out
    profile = params["profiles"][params["profile"]]
    encoder = make_encoder(name, data.ch_names, data.sfreq, float(params["window_s"]),
                           config=profile["configs"].get(name) or None, seed=int(params["subject_seed"]))
    audit, members, nonmembers = data.select("audit"), data.select("pretrain_member"), data.select("pretrain_nonmember")
    meta: dict = {"pretrain": None}
    out: dict = {}
    if weights == "self_pretrained":
        pre = profile["pretrain"]
        (work / "checkpoints").mkdir(parents=True, exist_ok=True)
        record = pretrain(encoder, data.X[members], data.subject[members],
                          audit_subjects=set(data.subject[audit]),
                          checkpoint_path=work / "checkpoints" / f"{name}.pt", budget_s=float(pre["budget_s"]),
                          max_steps=int(pre["max_steps"][name]), batch_size=int(pre["batch_size"]),
                          lr=float(pre["lr"]), seed=int(params["subject_seed"]))
        if record.steps < int(pre["max_steps"][name]):
            print(f"WARNING {name}: the {pre['budget_s']} s budget stopped pretraining after {record.steps} of "
                  f"{pre['max_steps'][name]} steps; the weights now depend on this machine's speed")
        record.write_json(work / "checkpoints" / f"{name}.json")
        meta["pretrain"] = {k: v for k, v in record.to_dict().items()
                            if k not in ("losses", "subject_hashes", "encoder_description")}
        out["pretrain_losses"] = np.asarray(record.losses)
        out["mia_members"] = masked_losses(encoder, record, data.X[members], seed=int(params["subject_seed"]))
        out["mia_nonmembers"] = masked_losses(encoder, record, data.X[nonmembers], seed=int(params["subject_seed"]))
    timing = time_embedding(encoder, data.X[audit[:32]])
    t0 = time.perf_counter()
    out["Z"] = encoder.transform(data.X[audit]).astype(np.float64)
    meta.update(describe=encoder.describe(), embed_s=time.perf_counter() - t0,
                ms_per_window=1000 * timing["seconds"] / max(1, timing["n_windows"]))
    cache.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(cache) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **out)
    write_text_atomic(meta_path, json.dumps(meta, indent=1, default=str))
    out["meta"] = meta
    return out


def _embed_job(config: dict, seed: int, data: AuditData, params: dict, work: Path) -> tuple[dict, float]:
    """One (encoder, weights) embedding job for :class:`PrefetchedCells` (``seed`` is unused: the encoders are
    seeded from params)."""
    started = time.perf_counter()
    weights = "random_init" if config["weights"] == "random_init" else config["weights"]
    with one_thread():
        emb = embed_cell(config["encoder"], weights, data, params, work, config["key"])
    return emb, time.perf_counter() - started


def embed_all(cells: list[tuple[str, str]], keys: dict, data: AuditData, params: dict, work: Path,
              n_jobs: int = 1) -> dict:
    """Every (encoder, weights) cell's embeddings. Each encoder pretrains and embeds on one torch / BLAS thread,
    so its weights and embeddings depend neither on ``n_jobs`` nor on the machine's core count (how a reduction
    is split over threads changes its last bits, and 120 optimiser steps carry them into the weights); the
    encoders run side by side in ``n_jobs`` processes, the ones that pretrain first."""
    order = sorted(cells, key=lambda cell: cell[1] != "self_pretrained")  # stable: the long jobs start first
    jobs = [({"encoder": e, "weights": w, "key": keys[(e, w)]}, 0) for e, w in order]
    compute = PrefetchedCells(functools.partial(_embed_job, data=data, params=params, work=work), jobs,
                              n_jobs=n_jobs)
    out = {}
    for config, seed in jobs:
        emb, seconds = compute(config, seed)
        out[(config["encoder"], config["weights"])] = emb
        print(f"{_label(config['encoder'], config['weights'])}: {emb['Z'].shape[1]}-d embeddings ready "
              f"({seconds:.0f} s on one thread)")
    return out


# ----------------------------------------------------------------------------------------------- endpoints

def _row(endpoint, split, metric, value, *, defense="none", attacker="none", ci=(np.nan, np.nan), chance=np.nan,
         n=np.nan) -> dict:
    return {"endpoint": endpoint, "split": split, "defense": defense, "attacker": attacker, "metric": metric,
            "value": float(value), "ci_low": float(ci[0]), "ci_high": float(ci[1]), "chance": float(chance),
            "n": float(n)}


def leakage_rows(result, split, defense="none", attacker="ridge") -> list[dict]:
    common = {"defense": defense, "attacker": attacker, "n": result.n_test_windows}
    return [_row("attribute", split, "gain", result.gain, ci=result.ci, chance=0.0, **common),
            _row("attribute", split, "score", result.score, **common),
            _row("attribute", split, "control_gaussian", result.control_gaussian, **common),
            _row("attribute", split, "control_permuted", result.control_permuted, **common),
            _row("attribute", split, "p_value", result.p_value, **common)]


def utility_rows(result, split, defense="none", endpoint="utility") -> list[dict]:
    common = {"defense": defense, "attacker": "logistic_head", "n": result.n_windows}
    return [_row(endpoint, split, "balanced_accuracy", result.balanced_accuracy, ci=result.ci, chance=0.5, **common),
            _row(endpoint, split, "control_gaussian", result.control_gaussian, chance=0.5, **common),
            _row(endpoint, split, "control_permuted", result.control_permuted, chance=0.5, **common)]


def audit_targets(data: AuditData, params: dict) -> tuple[np.ndarray, np.ndarray]:
    """What the decoders predict from an embedding, the same for every encoder: the audited windows' centred
    log-PSD (the attributes) and their downsampled waveforms (reconstruction). Computed once and shared, so the
    pickled contexts hold one copy."""
    from eegprivacy.audit.attributes import centered_psd

    audit = data.select("audit")
    return (centered_psd(data.X[audit], data.sfreq),
            downsampled_waveform(data.X[audit], int(params["reconstruction_points"])))


class Context:
    """Everything a cell of one (encoder, weights) needs, with a memo so AEDS reuses the endpoints it combines."""

    def __init__(self, Z, data: AuditData, params: dict, emb: dict, targets: tuple | None = None):
        audit = data.select("audit")
        self.Z, self.params, self.emb = Z, params, emb
        self.groups = data.subject[audit]
        self.state = data.state[audit]
        self.order = data.order[audit]
        self.A, self.X_down = targets if targets is not None else audit_targets(data, params)
        # recordings: (subject, state) -> time order within it
        self.recording = np.char.add(self.groups.astype(str), self.state.astype(str))
        subjects = np.unique(self.groups)
        half = np.random.default_rng(int(params["subject_seed"]) + 1).permutation(subjects)[: subjects.size // 2]
        self.head_rows = np.isin(self.groups, half)
        self.memo: dict = {}
        self.shared: Path | None = None  # set in worker processes: a folder the workers share memo results in

    def memoized(self, key: tuple, compute):
        """``compute()`` once per stage run. In worker processes the result goes through ``shared``: the worker
        that claims a key first computes it, any other one waits for its file, so AEDS neither recomputes the
        subject-disjoint leakage nor gets other numbers than the cell that reported it."""
        if key in self.memo:
            return self.memo[key]
        if self.shared is None:
            self.memo[key] = compute()
            return self.memo[key]
        import pickle

        path = self.shared / ("-".join(map(str, key)) + ".pkl")
        failed = path.with_suffix(".failed")
        try:
            os.close(os.open(path.with_suffix(".claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:  # another worker computes it
            while not path.exists():
                if failed.exists():
                    raise RuntimeError(f"the worker computing {key} failed") from None
                time.sleep(0.05)
            self.memo[key] = pickle.loads(path.read_bytes())
            return self.memo[key]
        try:
            self.memo[key] = compute()
        except BaseException:
            failed.touch()
            raise
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(pickle.dumps(self.memo[key]))
        return self.memo[key]

    def splitter(self, name: str, seed: int = 0, groups=None):
        from eegprivacy.audit.splits import SubjectDisjointSplit, TemporalGapSplit

        cfg = self.params["splits"][name]
        if name == "temporal_gap":
            return TemporalGapSplit(int(cfg["n_splits"]), int(cfg["gap"]), times=self.times())
        n_subjects = np.unique(self.groups if groups is None else groups).size
        return SubjectDisjointSplit(min(int(cfg["n_splits"]), n_subjects), random_state=seed)

    def times(self):
        # time order within a subject: the rest recording first, then arithmetic, windows in order
        return self.state * 10_000 + self.order

    def leakage(self, split: str, seed: int = 0):
        from eegprivacy.audit.endpoints import attribute_leakage

        return self.memoized(("leakage", split, seed), lambda: attribute_leakage(
            self.Z, self.A, self.groups, self.splitter(split, seed), n_bootstrap=int(self.params["bootstrap"]),
            n_permutations=int(self.params["permutations"]), random_state=seed))

    def bpid(self):
        from eegprivacy.audit.endpoints import bpid_at_1
        from eegprivacy.audit.splits import ReferenceSetSplit

        def compute():
            ref, qry = next(ReferenceSetSplit(parts=self.state, reference_part=0, query_part=1)
                            .split(self.Z, groups=self.groups))
            return bpid_at_1(self.Z[ref], self.groups[ref], self.Z[qry], self.groups[qry])
        return self.memoized(("bpid",), compute)

    def head_lira(self, head, n_shadows: int, seed: int) -> np.ndarray:
        """LiRA (online, global variance) against the head: shadow heads trained like it on random halves of the
        audited subjects (subject-level IN/OUT, independent of the target's half); φ = logit confidence of the
        true state. Higher score = more likely a member."""
        from sklearn.base import clone

        from eegprivacy.attacks.lira import LiRA, logit_confidence_from_proba

        rng = np.random.default_rng(seed + 7919)
        subjects = np.unique(self.groups)
        phis, masks = [], []
        for _ in range(n_shadows):
            half = rng.permutation(subjects)[: subjects.size // 2]
            inside = np.isin(self.groups, half)
            shadow = clone(head).fit(self.Z[inside], self.state[inside])
            phis.append(logit_confidence_from_proba(shadow.predict_proba(self.Z), self.state))
            masks.append(inside)
        lira = LiRA(mode="online", variance="global").fit(np.array(phis), np.array(masks))
        return lira.score_samples(logit_confidence_from_proba(head.predict_proba(self.Z), self.state))

    def membership(self):
        """Loss-threshold attacks: on the rest/arithmetic head (members = its training subjects' windows) and,
        where the encoder was pretrained here, on the encoder (members = its pretraining windows)."""
        from eegprivacy.audit.defenses import default_head
        from eegprivacy.audit.endpoints import membership_auc

        def compute():
            head = default_head()
            head.fit(self.Z[self.head_rows], self.state[self.head_rows])
            proba = np.clip(head.predict_proba(self.Z)[np.arange(len(self.Z)), self.state], 1e-12, 1.0)
            loss = -np.log(proba)
            seed = int(self.params["subject_seed"])
            results = {"head": membership_auc(loss[self.head_rows], loss[~self.head_rows],
                                              int(self.params["bootstrap"]), random_state=seed)}
            if int(self.params.get("lira_shadows", 0)) > 0:
                score = self.head_lira(head, int(self.params["lira_shadows"]), seed)
                results["head_lira"] = membership_auc(-score[self.head_rows], -score[~self.head_rows],
                                                      int(self.params["bootstrap"]), random_state=seed)
            if "mia_members" in self.emb:
                results["encoder"] = membership_auc(self.emb["mia_members"], self.emb["mia_nonmembers"],
                                                    int(self.params["bootstrap"]), random_state=seed)
            return results
        return self.memoized(("membership",), compute)


# Who the members and non-members of each membership attack are.
MEMBERSHIP_SPLITS = {"head": "head_subjects_vs_release_subjects",
                     "dp_head": "head_subjects_vs_release_subjects",
                     "encoder": "pretrain_windows_vs_later_windows_same_subjects"}


def _membership_rows(results: dict, defense="none") -> list[dict]:
    rows = []
    for target, res in results.items():
        attacker = "lira_online" if target.endswith("_lira") else "loss_threshold"
        target = target.removesuffix("_lira")
        common = {"defense": defense, "attacker": attacker, "n": res.n_members + res.n_nonmembers}
        split = MEMBERSHIP_SPLITS[target]
        rows += [_row(f"membership_{target}", split, "auc", res.auc, ci=res.ci, chance=0.5, **common),
                 _row(f"membership_{target}", split, "residual", res.residual, chance=0.0, **common)]
    return rows


def _noise(Z, sigma, seed):
    from eegprivacy.audit.defenses import GaussianNoiseDefense

    return GaussianNoiseDefense(sigma=sigma, random_state=seed).fit(Z).transform(Z)


def core_rows(unit: str, seed: int, ctx: Context) -> list[dict]:
    from eegprivacy.audit.defenses import utility_with_controls
    from eegprivacy.audit.endpoints import aeds, raw_copy_fraction, reconstruction_r2

    p = ctx.params
    if unit == "raw_copy":
        # Cosine after removing the mean embedding (ours): a common offset (e.g. log powers of ~1e-11 V²) would
        # otherwise make every pair of windows look like a copy.
        frac = raw_copy_fraction(ctx.Z - ctx.Z.mean(axis=0), ctx.recording, ctx.order)
        return [_row("raw_copy", "adjacent_windows", "fraction_cosine_ge_0.99", frac, n=len(ctx.Z))]
    if unit.startswith("attribute/"):
        return leakage_rows(ctx.leakage(unit.split("/")[1], seed), unit.split("/")[1])
    if unit == "identity":
        b = ctx.bpid()
        common = {"attacker": "centroid_cosine", "n": b.n_queries}
        return [_row("identity", "reference_set_rest_to_arithmetic", "bpid_at_1", b.accuracy, ci=b.ci,
                     chance=b.chance, **common),
                _row("identity", "reference_set_rest_to_arithmetic", "residual", b.residual, chance=0.0, **common)]
    if unit == "membership":
        return _membership_rows(ctx.membership())
    if unit == "reconstruction":
        r = reconstruction_r2(ctx.Z, ctx.X_down, ctx.groups, ctx.splitter("subject_disjoint", seed),
                              random_state=seed)
        return [_row("reconstruction", "subject_disjoint", "r2", r.r2, chance=0.0, n=len(ctx.Z))]
    if unit == "aeds":
        la = ctx.leakage("subject_disjoint", seed)
        mem = max(ctx.membership().values(), key=lambda m: m.residual)
        b = ctx.bpid()
        res = aeds(la, mem, b, n_bootstrap=int(p["bootstrap"]), random_state=seed)
        return [_row("aeds", "subject_disjoint+reference_set", "aeds", res.value, ci=res.ci, chance=0.0),
                _row("aeds", "subject_disjoint+reference_set", "l_a", la.gain, ci=la.ci, chance=0.0),
                _row("aeds", "subject_disjoint+reference_set", "r_m", mem.residual, chance=0.0),
                _row("aeds", "subject_disjoint+reference_set", "r_i", b.residual, chance=0.0)]
    if unit.startswith("deployment/"):
        sigma = float(unit.split("/")[1])
        Z = ctx.Z if sigma == 0 else _noise(ctx.Z, sigma, seed)
        u = utility_with_controls(Z, ctx.state, ctx.groups, ctx.splitter("subject_disjoint", seed),
                                  n_bootstrap=int(p["bootstrap"]), random_state=seed)
        return utility_rows(u, "subject_disjoint", defense=f"noise_{sigma:g}" if sigma else "none",
                            endpoint="deployment_state")
    raise KeyError(f"unknown unit {unit!r}")


def defense_rows(unit: str, seed: int, ctx: Context) -> list[dict]:
    """One defense at one seed: L_A of what is released (subject-disjoint) next to the head's balanced accuracy,
    and whether it closes the channel."""
    from eegprivacy.audit.defenses import (CoordinateDropout, PCABottleneck, WienerAttacker, closes_channel,
                                           utility_with_controls)
    from eegprivacy.audit.endpoints import attribute_leakage, membership_auc

    p = ctx.params
    kind, value = unit.split("/")[1], float(unit.split("/")[2])
    boot, perms = int(p["bootstrap"]), int(p["defense_permutations"])
    threshold = float(p["utility_threshold"])
    rows: list[dict] = []
    if kind == "dp_head":
        from eegprivacy.audit.dp_head import DPSGDHead

        cfg = p["defenses"]["dp_head"]
        head = DPSGDHead(epsilon=value, delta=float(cfg["delta"]), max_grad_norm=float(cfg["max_grad_norm"]),
                         hidden=int(cfg["hidden"]), epochs=int(cfg["epochs"]), batch_size=int(cfg["batch_size"]),
                         random_state=seed)
        fit, rel = ctx.head_rows, ~ctx.head_rows
        head.fit(ctx.Z[fit], ctx.state[fit])
        released, groups = head.transform(ctx.Z[rel]), ctx.groups[rel]
        split = ctx.splitter("subject_disjoint", seed, groups)
        la = attribute_leakage(released, ctx.A[rel], groups, split, n_bootstrap=boot, n_permutations=perms,
                               random_state=seed)
        from eegprivacy.audit.defenses import UtilityResult, balanced_accuracy_ci

        truth = ctx.state[rel]
        # The head's own held-out accuracy (it was trained on the other half), beside the controls of a
        # logistic read-out of its released representation.
        acc, ci = balanced_accuracy_ci(truth, head.predict(ctx.Z[rel]), groups, boot, random_state=seed)
        util = utility_with_controls(released, truth, groups, split, n_bootstrap=boot, random_state=seed)
        util = UtilityResult(acc, ci, util.control_gaussian, util.control_permuted, util.n_windows, util.n_subjects)
        losses_in = head.sample_losses(ctx.Z[fit], ctx.state[fit])
        losses_out = head.sample_losses(ctx.Z[rel], truth)
        mia = membership_auc(losses_in, losses_out, boot, random_state=seed)
        defense = f"dp_head_eps{value:g}"
        rows += leakage_rows(la, "subject_disjoint_release_half", defense)
        rows += utility_rows(util, "subject_disjoint_release_half", defense)
        rows += _membership_rows({"dp_head": mia}, defense)
        if math.isfinite(head.epsilon_):  # no row for the non-private head (an ∞ would poison the means)
            rows.append(_row("defense", "subject_disjoint_release_half", "epsilon_spent", head.epsilon_,
                             defense=defense))
        rows.append(_row("defense", "subject_disjoint_release_half", "closes_channel",
                         closes_channel(la, util.balanced_accuracy, threshold), defense=defense))
        return rows
    split = ctx.splitter("subject_disjoint", seed)
    if kind == "noise":
        released = _noise(ctx.Z, value, seed)
        defense = f"noise_{value:g}"
        attackers = {"ridge": (None, None), "wiener": (WienerAttacker(sigma=value, random_state=seed), ctx.Z)}
    elif kind == "pca":
        released = PCABottleneck(int(value), random_state=seed).fit(ctx.Z).transform(ctx.Z)
        defense, attackers = f"pca_{int(value)}", {"ridge": (None, None)}
    elif kind == "dropout":
        released = CoordinateDropout(value, random_state=seed).fit(ctx.Z).transform(ctx.Z)
        defense, attackers = f"dropout_{value:g}", {"ridge": (None, None)}
    else:
        raise KeyError(f"unknown defense {kind!r}")
    util = utility_with_controls(released, ctx.state, ctx.groups, split, n_bootstrap=boot, random_state=seed)
    rows += utility_rows(util, "subject_disjoint", defense)
    closed = True
    for attacker, (decoder, Z_fit) in attackers.items():
        # The Wiener attacker trains on clean shadow embeddings (the encoder is public) and decodes the release.
        la = attribute_leakage(released, ctx.A, ctx.groups, split, decoder=decoder, Z_fit=Z_fit, n_bootstrap=boot,
                               n_permutations=perms, random_state=seed)
        rows += leakage_rows(la, "subject_disjoint", defense, attacker)
        closed &= closes_channel(la, util.balanced_accuracy, threshold)
    rows.append(_row("defense", "subject_disjoint", "closes_channel", float(closed), defense=defense,
                     attacker="strongest"))
    return rows


def units(params: dict, weights: str) -> list[tuple[str, list[int]]]:
    """(unit, seeds) of one (encoder, weights) cell: the core endpoints once, the defenses per noise seed."""
    seeds = [int(s) for s in params["defense_seeds"]]
    out = [("raw_copy", [0]), ("attribute/temporal_gap", [0]), ("attribute/subject_disjoint", [0]),
           ("identity", [0]), ("membership", [0]), ("reconstruction", [0]), ("aeds", [0]),
           ("deployment/0", [0]), (f"deployment/{float(params['deployment_sigma']):g}", seeds)]
    if weights == "random_init":
        return out  # the explicit baseline row: endpoints only
    d = params["defenses"]
    out += [(f"defense/noise/{s:g}", seeds) for s in d["noise_sigmas"]]
    out += [(f"defense/pca/{int(k)}", [0]) for k in d["pca_components"]]
    out += [(f"defense/dropout/{r:g}", seeds) for r in d["dropout_rates"]]
    out += [(f"defense/dp_head/{float(e):g}", seeds) for e in d["dp_head"]["epsilons"]]
    return out


def unit_tags(unit: str) -> dict:
    """The optional MLflow tags a unit's child run carries (split / defense / mechanism / ε)."""
    parts = unit.split("/")
    if parts[0] == "defense":
        kind, value = parts[1], float(parts[2])
        if kind == "dp_head":
            return {"split": "subject_disjoint_release_half", "defense": f"dp_head_eps{value:g}",
                    "mechanism": "dp_sgd_gaussian" if math.isfinite(value) else "none", "epsilon": f"{value:g}",
                    "delta": "1e-05"}
        return {"split": "subject_disjoint", "defense": f"{kind}_{value:g}",
                "mechanism": "gaussian_embedding_noise" if kind == "noise" else "none"}
    split = {"raw_copy": "adjacent_windows", "identity": "reference_set", "membership": "members_vs_nonmembers",
             "reconstruction": "subject_disjoint", "aeds": "subject_disjoint+reference_set"}.get(parts[0])
    if parts[0] == "attribute":
        split = parts[1]
    if parts[0] == "deployment":
        split = "subject_disjoint"
        noised = float(parts[1]) > 0
        return {"split": split, "defense": f"noise_{float(parts[1]):g}" if noised else "none",
                "mechanism": "gaussian_embedding_noise" if noised else "none"}
    return {"split": split, "defense": "none", "mechanism": "none"}


@contextlib.contextmanager
def one_thread():
    """A cell runs on one BLAS / OpenMP / torch thread, in the main process and in a worker alike. Two workers then
    do not oversubscribe two cores (a BLAS thread waiting for a descheduled sibling slows ridge fits many times),
    and the numbers depend neither on ``--jobs`` nor on the machine's core count: how a BLAS reduction is split
    over threads changes the last bits of ridge and PCA results."""
    import scipy.linalg  # noqa: F401  (load every BLAS and OpenMP library first, so the limit reaches them)
    import sklearn.linear_model  # noqa: F401
    import torch
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


# What a process has loaded from an ``AuditCells`` file (only the latest one): a worker reads the contexts once and
# keeps each Context's memo across the cells it computes.
_LOADED: dict[str, dict] = {}


class AuditCells:
    """The cell function of every runner (audit units and bridge pairs) for ``PrefetchedCells``.

    It pickles as the path of a file holding the contexts, so a worker loads the embeddings once instead of
    receiving them with every cell."""

    def __init__(self, contexts: dict, bridge: dict, folder: Path):
        import joblib

        self.path = str(Path(folder) / "contexts.joblib")
        shared = {"contexts": contexts, "bridge": bridge}
        joblib.dump(shared, self.path)
        _LOADED.clear()
        _LOADED[self.path] = shared

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]

    def _shared(self) -> dict:
        if self.path not in _LOADED:
            import joblib

            shared = joblib.load(self.path)
            for (encoder, weights), ctx in shared["contexts"].items():
                ctx.shared = Path(self.path).parent / f"{encoder}-{weights}"
                ctx.shared.mkdir(exist_ok=True)
            _LOADED.clear()
            _LOADED[self.path] = shared
        return _LOADED[self.path]

    def __call__(self, config: dict, seed: int) -> list[dict]:
        shared = self._shared()
        with one_thread():
            if "unit" not in config:  # a bridge pair
                return bridge_rows(config, seed, **shared["bridge"])
            ctx = shared["contexts"][(config["encoder"], config["weights"])]
            unit = config["unit"]
            rows = defense_rows(unit, seed, ctx) if unit.startswith("defense/") else core_rows(unit, seed, ctx)
        for r in rows:
            r["unit"] = unit
        return rows


def bridge_rows(config: dict, seed: int, embeddings: dict, A, groups, params: dict, splitter) -> list[dict]:
    from eegprivacy.audit.bridge import bridge_transfer

    res = bridge_transfer(embeddings[config["source"]], embeddings[config["target"]], A, groups, splitter,
                          n_bootstrap=int(params["bootstrap"]), n_permutations=int(params["bridge_permutations"]),
                          random_state=seed)
    d = res.as_dict()
    rows = [_row("bridge", "subject_disjoint", "gain", d["gain"], ci=(d["ci_low"], d["ci_high"]), chance=0.0)]
    for k in ("score", "control_gaussian", "control_permuted", "p_value", "beta", "tau2", "bridge_error", "rho0",
              "bound"):
        rows.append(_row("bridge", "subject_disjoint", k, d[k]))
    for r in rows:
        r["unit"] = "bridge"
    return rows


# ----------------------------------------------------------------------------------------------- outputs

def bootstrap_ci_metrics(summary: pd.DataFrame, encoder: str, weights: str) -> dict[str, float]:
    """The subject-bootstrap CIs of the rows computed once, under the names of the sweep's own aggregates
    (``<unit/endpoint/...>/<metric>_ci_low``): the parent's t-interval over one seed is empty, so these replace it
    and the parent run carries every headline number with its interval."""
    from eegprivacy.tracking.sweep import metric_name

    keys = ["unit", "endpoint", "split", "defense", "attacker"]
    part = summary[(summary["encoder"] == encoder) & (summary["weights"] == weights) & (summary["seeds"] == 1)]
    out = {}
    for record in part.to_dict("records"):
        for stat in ("ci_low", "ci_high"):
            if np.isfinite(record[stat]):
                out[metric_name(record, keys, stat)] = record[stat]
    return out


def _label(encoder: str, weights: str) -> str:
    return {"bandpower": "band power"}.get(encoder, {"biot": "BIOT", "labram": "LaBraM", "eegpt": "EEGPT"}
                                          .get(encoder, encoder)) + ("" if weights in ("none", "self_pretrained")
                                                                     else f" ({weights.replace('_', ' ')})")


def _get(summary: pd.DataFrame, **where) -> pd.Series | None:
    mask = np.ones(len(summary), bool)
    for k, v in where.items():
        mask &= (summary[k].astype(str) == str(v)).to_numpy()
    part = summary[mask]
    return None if part.empty else part.iloc[0]


def _fmt(row, digits=2, ci=True) -> str:
    if row is None or not np.isfinite(row["value"]):
        return "–"
    text = f"{row['value']:.{digits}f}"
    if ci and np.isfinite(row.get("ci_low", np.nan)):
        text += f" [{row['ci_low']:.{digits}f}, {row['ci_high']:.{digits}f}]"
    return text


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (encoder, weights, unit, endpoint, split, defense, attacker, metric). Rows computed once
    keep their bootstrap CI; rows repeated over noise seeds get the t-interval across seeds, and the mean of the
    per-seed bootstrap bounds is kept in ``boot_low``/``boot_high``."""
    keys = ["encoder", "weights", "unit", "endpoint", "split", "defense", "attacker"]
    agg = aggregate(tidy, keys)
    boot = tidy.groupby(keys + ["metric"], dropna=False).agg(boot_low=("ci_low", "mean"),
                                                             boot_high=("ci_high", "mean"),
                                                             seeds=("seed", "nunique")).reset_index()
    out = agg.merge(boot, on=keys + ["metric"], how="left")
    single = out["seeds"] == 1
    out.loc[single, "ci_low"] = out.loc[single, "boot_low"]
    out.loc[single, "ci_high"] = out.loc[single, "boot_high"]
    return out


def figures(summary: pd.DataFrame, cells: list[tuple[str, str]], folder: Path, title: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    labels = [_label(e, w) for e, w in cells]
    # 1. attribute leakage vs controls
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(cells) + 2), sharey=True)
    for ax, split in zip(axes, ("temporal_gap", "subject_disjoint")):
        for i, (e, w) in enumerate(cells):
            get = lambda m: _get(summary, encoder=e, weights=w, unit=f"attribute/{split}", metric=m)  # noqa: E731
            score, g, perm = get("score"), get("control_gaussian"), get("control_permuted")
            gain = get("gain")
            if score is None:
                continue
            ax.plot([g["value"]], [i], "s", color="0.6", label="Gaussian control" if i == 0 else None)
            ax.plot([perm["value"]], [i], "^", color="0.3", label="permuted control" if i == 0 else None)
            ax.plot([score["value"]], [i], "o", color="C0", label="real embeddings" if i == 0 else None)
            ax.errorbar([gain["value"]], [i + 0.25], xerr=[[gain["value"] - gain["ci_low"]],
                                                          [gain["ci_high"] - gain["value"]]],
                        fmt="D", color="C3", ms=4, label="gain L_A [95% CI]" if i == 0 else None)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_title(split.replace("_", " "))
        ax.set_xlabel("mean Pearson r (centered PSD)")
    axes[0].set_yticks(range(len(cells)), labels)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{title}: attribute leakage vs negative controls")
    fig.tight_layout()
    paths.append(folder / "embedding_audit_leakage.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    # 2. AEDS per cell
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cells) + 1.8))
    for i, (e, w) in enumerate(cells):
        for j, (metric, marker, name) in enumerate((("aeds", "D", "AEDS [95% CI]"), ("l_a", "o", "L_A"),
                                                    ("r_m", "s", "R_M"), ("r_i", "^", "R_I"))):
            r = _get(summary, encoder=e, weights=w, unit="aeds", metric=metric)
            if r is None:
                continue
            err = None if metric != "aeds" else [[r["value"] - r["ci_low"]], [r["ci_high"] - r["value"]]]
            ax.errorbar([r["value"]], [i + 0.15 * j], xerr=err, fmt=marker, color=f"C{j}", ms=5,
                        label=name if i == 0 else None)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_yticks(range(len(cells)), labels)
    ax.set_xlabel("score (AEDS = L_A − max(R_M, R_I))")
    ax.legend(fontsize=7)
    ax.set_title(f"{title}: AEDS per encoder")
    fig.tight_layout()
    paths.append(folder / "embedding_audit_aeds.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    # 3. bridge matrix
    bridge = summary[summary["unit"] == "bridge"]
    if not bridge.empty:
        names = sorted(set(bridge["encoder"]) | set(bridge["weights"]))
        M = np.full((len(names), len(names)), np.nan)
        text = [["" for _ in names] for _ in names]
        for _, r in bridge[bridge["metric"] == "gain"].iterrows():
            i, j = names.index(r["encoder"]), names.index(r["weights"])  # encoder = source, weights = target
            M[i, j] = r["value"]
            bound = _get(bridge, encoder=r["encoder"], weights=r["weights"], metric="bound")
            text[i][j] = (f"{r['value']:.2f}\n[{r['ci_low']:.2f}, {r['ci_high']:.2f}]\nbound "
                          f"{bound['value']:.2f}" if bound is not None else "")
        fig, ax = plt.subplots(figsize=(1.9 * len(names) + 2, 1.5 * len(names) + 1.5))
        lim = np.nanmax(np.abs(M)) if np.isfinite(M).any() else 1.0
        im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim)
        for i in range(len(names)):
            for j in range(len(names)):
                ax.text(j, i, text[i][j] or ("—" if i == j else ""), ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(names)), [_label(n, "none") for n in names])
        ax.set_yticks(range(len(names)), [_label(n, "none") for n in names])
        ax.set_xlabel("target encoder t (its held-out subjects are decoded)")
        ax.set_ylabel("source encoder s (decoder D_s)")
        fig.colorbar(im, ax=ax, label="bridged gain over matched control")
        ax.set_title(f"{title}: cross-encoder bridge")
        fig.tight_layout()
        paths.append(folder / "embedding_audit_bridge.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    # 4. defense curves
    families = (("noise", "noise σ (× per-dim std)"), ("pca", "PCA components"), ("dropout", "dropout rate"),
                ("dp_head", "DP-SGD head ε (∞ plotted at 32)"))
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharey="row")
    for k, (family, xlabel) in enumerate(families):
        for c, (e, w) in enumerate(cells):
            part = summary[(summary["encoder"] == e) & (summary["weights"] == w)
                           & summary["unit"].str.startswith(f"defense/{family}/")]
            if part.empty:
                continue
            xs = sorted({float(u.split("/")[2]) for u in part["unit"]})
            for attacker, style in (("ridge", "-o"), ("wiener", "--x")):
                pts = [(_get(part, unit=f"defense/{family}/{x:g}", metric="gain", attacker=attacker), x) for x in xs]
                pts = [(r, x) for r, x in pts if r is not None]
                if pts:
                    X = [min(x, 32.0) for _, x in pts]
                    axes[0, k].errorbar(X, [r["value"] for r, _ in pts],
                                        yerr=[[r["value"] - r["ci_low"] for r, _ in pts],
                                              [r["ci_high"] - r["value"] for r, _ in pts]],
                                        fmt=style, color=f"C{c}", ms=4, capsize=2,
                                        label=f"{_label(e, w)}" + (" (Wiener)" if attacker == "wiener" else ""))
            pts = [(_get(part, unit=f"defense/{family}/{x:g}", metric="balanced_accuracy"), x) for x in xs]
            pts = [(r, x) for r, x in pts if r is not None]
            axes[1, k].errorbar([min(x, 32.0) for _, x in pts], [r["value"] for r, _ in pts],
                                yerr=[[r["value"] - r["ci_low"] for r, _ in pts],
                                      [r["ci_high"] - r["value"] for r, _ in pts]],
                                fmt="-o", color=f"C{c}", ms=4, capsize=2)
        if family in ("noise", "dp_head"):
            axes[0, k].set_xscale("log")
            axes[1, k].set_xscale("log")
        axes[0, k].axhline(0, color="k", lw=0.6)
        axes[1, k].axhline(0.5, color="0.5", lw=0.6, ls=":")
        axes[1, k].set_xlabel(xlabel)
    axes[0, 0].set_ylabel("attribute leakage gain L_A [95% CI]")
    axes[1, 0].set_ylabel("rest vs arithmetic balanced accuracy")
    axes[0, 0].legend(fontsize=6)
    fig.suptitle(f"{title}: defenses (top: leakage, bottom: utility; dotted = chance)")
    fig.tight_layout()
    paths.append(folder / "embedding_audit_defenses.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def report_md(summary: pd.DataFrame, cells, meta: dict, encoders_meta: dict) -> str:
    lines = [f"# Study C: embedding audit on {meta['dataset']}", "",
             f"{meta['n_audit_subjects']} audited subjects ({meta['n_audit_windows']} windows of "
             f"{meta['window_s']:g} s: rest and mental arithmetic), {meta['n_pretrain_subjects']} further subjects "
             f"for the encoders' pretraining and the encoder-membership attack. Profile `{meta['profile']}`. "
             "Every interval is a 95 % subject-level bootstrap CI unless marked as across seeds; every leakage value "
             "sits next to its Gaussian and split-local-permutation controls. Source: MLflow experiment "
             "`study-c-embedding-audit` (parents named `embedding_audit-<dataset>-<encoder>-<weights>`).", "",
             "## Encoders", "",
             "| encoder | weights | parameters | dim | config | pretraining | checkpoint sha256 | channels "
             "| ms/window (1 thread) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (e, w) in cells:
        m = encoders_meta[(e, w)]
        d = m["describe"]
        pre = m.get("pretrain") or {}
        pre_text = (f"{pre['steps']} steps, loss {pre['loss_first']:.3f} → {pre['loss_last']:.3f}, "
                    f"{pre['wall_s']:.0f} s on {pre['n_windows']} windows of {pre['n_subjects']} subjects"
                    if pre else "–")
        flags = d["channel_mapping"].get("flags") or []
        lines.append(f"| {_label(e, 'none')} | {w} | {d['n_params']:,} | {m['dim']} | "
                     f"{json.dumps(d['config']) if d['config'] else 'published'} | {pre_text} | "
                     f"{(pre.get('checkpoint_sha256') or '–')[:12]} | {len(d['channels'])}"
                     f"{' (' + ', '.join(map(str, flags)) + ')' if flags else ''} | {m['ms_per_window']:.1f} |")
    lines += ["", "## Headline per encoder", "",
              "| encoder | raw-copy | L_A temporal gap | L_A subject-disjoint (controls G / P) | BPID@1 (chance) | "
              "MIA AUC head: loss / LiRA | MIA AUC encoder | recon. R² | AEDS |", "|---|---|---|---|---|---|---|---|---|"]
    for (e, w) in cells:
        g = lambda unit, metric, **kw: _get(summary, encoder=e, weights=w, unit=unit, metric=metric, **kw)  # noqa
        sd = g("attribute/subject_disjoint", "gain")
        ctrl = (f" ({g('attribute/subject_disjoint', 'control_gaussian')['value']:.2f} / "
                f"{g('attribute/subject_disjoint', 'control_permuted')['value']:.2f})" if sd is not None else "")
        b = g("identity", "bpid_at_1")
        lines.append(
            f"| {_label(e, w)} | {_fmt(g('raw_copy', 'fraction_cosine_ge_0.99'), 3, False)} | "
            f"{_fmt(g('attribute/temporal_gap', 'gain'))} | {_fmt(sd)}{ctrl} | "
            f"{_fmt(b)} ({b['chance']:.3f}) | "
            f"{_fmt(g('membership', 'auc', endpoint='membership_head', attacker='loss_threshold'))} / "
            f"{_fmt(g('membership', 'auc', endpoint='membership_head', attacker='lira_online'))} | "
            f"{_fmt(g('membership', 'auc', endpoint='membership_encoder'))} | "
            f"{_fmt(g('reconstruction', 'r2'), 3, False)} | {_fmt(g('aeds', 'aeds'))} |")
    lines += ["", "AEDS = L_A (subject-disjoint) − max(R_M, R_I); R_M = max(0, 2·AUC − 1) of the stronger membership "
              "attack, R_I = max(0, (BPID@1 − 1/K)/(1 − 1/K)). AEDS > 0 with its CI above 0: attribute leakage is the "
              "deciding risk even where the other endpoints look safe. Membership: the head's members are the "
              "windows of the subjects it was trained on, its non-members those of the other audited subjects "
              "(chance 0.5; a between-subject shift can also separate them, so read it as an upper bound); the "
              "encoder's members are its pretraining windows, its non-members the later windows of the same "
              "recordings. BPID@1 has K candidates = audited subjects with both recordings.", "",
              "## Deployment relevance: rest vs arithmetic of held-out subjects", "",
              f"| encoder | clean (controls G / P) | noised σ = {meta['deployment_sigma']:g} × std "
              f"(mean over seeds [t-CI]) |", "|---|---|---|"]
    for (e, w) in cells:
        clean = _get(summary, encoder=e, weights=w, unit="deployment/0", metric="balanced_accuracy")
        cg = _get(summary, encoder=e, weights=w, unit="deployment/0", metric="control_gaussian")
        cp = _get(summary, encoder=e, weights=w, unit="deployment/0", metric="control_permuted")
        noisy = _get(summary, encoder=e, weights=w, unit=f"deployment/{meta['deployment_sigma']:g}",
                     metric="balanced_accuracy")
        lines.append(f"| {_label(e, w)} | {_fmt(clean)} ({cg['value']:.2f} / {cp['value']:.2f}) | {_fmt(noisy)} |")
    lines += ["", "## Defenses (subject-disjoint; noise, dropout and DP-SGD rows: mean over "
              f"{meta['defense_seeds']} noise seeds with the t-interval across seeds)", "",
              "| encoder | defense | L_A ridge | L_A Wiener | balanced accuracy | MIA AUC (DP head) | ε spent | "
              "closes the channel |", "|---|---|---|---|---|---|---|---|"]
    closing = []
    for (e, w) in cells:
        part = summary[(summary["encoder"] == e) & (summary["weights"] == w)
                       & summary["unit"].str.startswith("defense/")]
        for unit in sorted(part["unit"].unique(), key=lambda u: (u.split("/")[1], float(u.split("/")[2]))):
            g = lambda metric, **kw: _get(part, unit=unit, metric=metric, **kw)  # noqa: E731
            closes = g("closes_channel")
            verdict = "–" if closes is None else ("yes, every seed" if closes["value"] == 1 else
                                                  "no" if closes["value"] == 0 else
                                                  f"{closes['value']:.0%} of seeds")
            if closes is not None and closes["value"] == 1:
                closing.append(f"{_label(e, w)} {closes['defense']}")
            eps = g("epsilon_spent")
            lines.append(f"| {_label(e, w)} | {g('gain', attacker='ridge')['defense']} | "
                         f"{_fmt(g('gain', attacker='ridge'))} | {_fmt(g('gain', attacker='wiener'))} | "
                         f"{_fmt(g('balanced_accuracy'))} | {_fmt(g('auc'))} | "
                         f"{_fmt(eps, 2, False) if eps is not None else '–'} | {verdict} |")
    lines += ["", f"A defense closes the channel when L_A's CI reaches 0 for every attacker while balanced accuracy "
              f"stays ≥ {meta['utility_threshold']:g}. Closing defenses: "
              f"{', '.join(closing) if closing else 'none'}.", ""]
    bridge = summary[summary["unit"] == "bridge"]
    if not bridge.empty:
        lines += ["## Cross-encoder bridge (decoder on s, ridge bridge t → s, scored on t's held-out subjects)", "",
                  "| source s | target t | gain [CI] | score | matched control ρ0 | β | τ_t² | ε_br | bound |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for (s, t), part in bridge.groupby(["encoder", "weights"]):
            g = lambda m: _get(part, metric=m)  # noqa: E731
            lines.append(f"| {_label(s, 'none')} | {_label(t, 'none')} | {_fmt(g('gain'))} | "
                         f"{g('score')['value']:.2f} | {g('rho0')['value']:.2f} | {g('beta')['value']:.2f} | "
                         f"{g('tau2')['value']:.2f} | {g('bridge_error')['value']:.2f} | {g('bound')['value']:.2f} |")
        lines += ["", "bound = sqrt(β / (1 + τ_t²)) − ε_br − ρ0 (protocol); the measured gain sits beside it.", ""]
    lines += ["## Figures", "", "![leakage](figures/embedding_audit_leakage.png)", "",
              "![AEDS](figures/embedding_audit_aeds.png)", "", "![bridge](figures/embedding_audit_bridge.png)", "",
              "![defenses](figures/embedding_audit_defenses.png)", ""]
    return "\n".join(lines)


def headline(summary: pd.DataFrame, cells, meta: dict) -> dict:
    out = {"meta": meta, "encoders": {}}
    for (e, w) in cells:
        g = lambda unit, metric, **kw: _get(summary, encoder=e, weights=w, unit=unit, metric=metric, **kw)  # noqa

        def val(r):
            if r is None:
                return None
            return {k: float(r[k]) if np.isfinite(r[k]) else None for k in ("value", "ci_low", "ci_high")}

        out["encoders"][f"{e}/{w}"] = {
            "l_a_subject_disjoint": val(g("attribute/subject_disjoint", "gain")),
            "l_a_ci_lower_bound": (val(g("attribute/subject_disjoint", "gain")) or {"ci_low": None})["ci_low"],
            "l_a_temporal_gap": val(g("attribute/temporal_gap", "gain")),
            "bpid_at_1": val(g("identity", "bpid_at_1")),
            "mia_auc_head": val(g("membership", "auc", endpoint="membership_head", attacker="loss_threshold")),
            "mia_auc_head_lira": val(g("membership", "auc", endpoint="membership_head", attacker="lira_online")),
            "mia_auc_encoder": val(g("membership", "auc", endpoint="membership_encoder")),
            "reconstruction_r2": val(g("reconstruction", "r2")),
            "aeds": val(g("aeds", "aeds")),
            "raw_copy_fraction": val(g("raw_copy", "fraction_cosine_ge_0.99")),
            "deployment_balanced_accuracy": val(g("deployment/0", "balanced_accuracy")),
        }
    closes = summary[(summary["metric"] == "closes_channel") & (summary["value"] == 1)]
    out["defenses_closing_the_channel"] = sorted(f"{r.encoder}/{r.weights}:{r.defense}" for r in closes.itertuples())
    return out


# ----------------------------------------------------------------------------------------------- run

def run(args) -> int:
    from eegprivacy.data import get_dataset

    start = time.perf_counter()
    params = load_params(args.params, STAGE)
    validate(params, args.params)
    dataset = get_dataset(params["dataset"])
    version = dataset.version()
    synthetic = bool(getattr(dataset, "synthetic", False))
    label = "SYNTHETIC " if synthetic else ""
    data = load_windows(dataset, params)
    n_audit = int((data.role == "audit").sum())
    print(f"{label}{params['dataset']}: {len(data.X)} windows; {n_audit} audited windows of "
          f"{np.unique(data.subject[data.role == 'audit']).size} subjects")
    code = code_hash()
    work = Path(args.work)
    profile = params["profiles"][params["profile"]]
    cells = []
    for e in params["encoders"]:
        if e == "bandpower":
            cells.append((e, "none"))
        else:
            cells.append((e, "self_pretrained"))
    if params.get("random_init_baseline"):
        cells += [(e, "random_init") for e in params["encoders"] if e in NEURAL]
    common = {k: params[k] for k in ("window_s", "windows_per_recording", "pretrain_subjects", "subject_seed")}
    # Every knob a cell's numbers depend on is in its key, so a params change recomputes exactly what it affects.
    audit_knobs = config_key({k: params[k] for k in ("splits", "bootstrap", "permutations", "defense_permutations",
                                                     "reconstruction_points", "utility_threshold", "defenses", "lira_shadows",
                                                     "deployment_sigma", "subject_seed")})
    # Embed every encoder first (pretraining included, in --jobs workers), then compute all runners' cells ahead
    # in --jobs workers.
    keys = {(e, w): config_key({"dataset_version": version, "code": code, **common, "encoder": e, "weights": w,
                                "config": profile["configs"].get(e), "pretrain": profile["pretrain"]
                                if w == "self_pretrained" else None}) for e, w in cells}
    embedded = embed_all(cells, keys, data, params, work, n_jobs=args.jobs)
    targets = audit_targets(data, params)
    embeddings, encoders_meta, contexts, plan = {}, {}, {}, []
    for e, w in cells:
        key, emb = keys[(e, w)], embedded[(e, w)]
        Z = emb["Z"]
        meta = emb["meta"]
        meta["dim"] = int(Z.shape[1])
        encoders_meta[(e, w)] = meta
        if w != "random_init":
            embeddings[e] = Z
        contexts[(e, w)] = Context(Z, data, params, emb, targets)
        describe = meta["describe"]
        base = {"dataset_version": version, "code_hash": code, "encoder": e, "weights": w, "embedding_key": key,
                "audit_knobs": audit_knobs}

        def tags(unit, seed, e=e, w=w):
            return required_tags(study="c", stage=STAGE, dataset=params["dataset"], dataset_version=version,
                                 synthetic=synthetic, seed=seed, dvc_stage=STAGE, encoder=e, model=e,
                                 **({"split": "all", "defense": "all"} if unit is None else unit_tags(unit)))

        run_params = {STAGE: {**{k: v for k, v in params.items() if k != "profiles"}, "profile_config": profile},
                      "encoder": {k: v for k, v in describe.items() if k not in ("channels", "channel_mapping")},
                      "channel_mapping": describe["channel_mapping"], "weights_source": w,
                      "pretrain": meta.get("pretrain") or {}, "synthetic": synthetic}
        name = f"{STAGE}-{params['dataset']}-{e}-{w}"
        runner = SweepRunner(name=name, study="c", dataset=params["dataset"],
                             out_dir=Path(args.cells) / STAGE / params["dataset"] / f"{e}-{w}",
                             parent_tags=tags(None, None),
                             tags_fn=lambda cell, t=tags: t(cell.config["unit"], cell.seed),
                             params=run_params, progress=not args.no_progress)
        plan.append((_label(e, w), runner,
                     [Cell({**base, "unit": u}, s) for u, seeds in units(params, w) for s in seeds]))

    # Cross-encoder bridge over every ordered pair of the primary encoders.
    from eegprivacy.audit.splits import SubjectDisjointSplit

    audit = data.select("audit")
    A, groups = targets[0], data.subject[audit]
    splitter = SubjectDisjointSplit(int(params["splits"]["subject_disjoint"]["n_splits"]), random_state=0)
    names = list(embeddings)
    pairs = [(s, t) for s in names for t in names if s != t]
    if pairs:
        base = {"dataset_version": version, "code_hash": code,
                "bridge_knobs": config_key({k: params[k] for k in ("splits", "bootstrap", "bridge_permutations")}),
                "embedding_keys": config_key({n: encoders_meta[(n, "none" if n == "bandpower" else
                                                                "self_pretrained")]["describe"] for n in names})}
        runner = SweepRunner(name=f"{STAGE}-{params['dataset']}-bridge", study="c", dataset=params["dataset"],
                             out_dir=Path(args.cells) / STAGE / params["dataset"] / "bridge",
                             parent_tags=required_tags(study="c", stage=STAGE, dataset=params["dataset"],
                                                       dataset_version=version, synthetic=synthetic, seed=None,
                                                       dvc_stage=STAGE, encoder="all", split="subject_disjoint",
                                                       attack="bridge"),
                             tags_fn=lambda cell: required_tags(
                                 study="c", stage=STAGE, dataset=params["dataset"], dataset_version=version,
                                 synthetic=synthetic, seed=cell.seed, dvc_stage=STAGE,
                                 encoder=f"{cell.config['source']}->{cell.config['target']}",
                                 split="subject_disjoint", attack="bridge"),
                             params={STAGE: {"bootstrap": params["bootstrap"],
                                             "bridge_permutations": params["bridge_permutations"],
                                             "splits": params["splits"]}, "synthetic": synthetic},
                             progress=not args.no_progress)
        plan.append(("bridge", runner, [Cell({**base, "source": s, "target": t}, 0) for s, t in pairs]))

    bridge = {"embeddings": embeddings, "A": A, "groups": groups, "params": params, "splitter": splitter}
    frames = []
    with tempfile.TemporaryDirectory(prefix="embedding_audit-") as folder:
        cell_fn = AuditCells(contexts, bridge, Path(folder))
        try:
            compute = PrefetchedCells(cell_fn, [(c.config, c.seed) for _, runner, jobs in plan
                                                for c in runner.pending(jobs)], n_jobs=args.jobs)
            for name, runner, jobs in plan:
                t0 = time.perf_counter()
                frame = runner.run(jobs, compute)
                if name == "bridge":  # encoder/weights columns carry source/target for the bridge rows
                    frame["encoder"], frame["weights"] = frame["source"], frame["target"]
                    frame = frame.drop(columns=["source", "target"])
                frames.append(frame)
                print(f"{name}: {len(jobs)} cells done ({time.perf_counter() - t0:.0f} s)")
        finally:
            _LOADED.pop(cell_fn.path, None)

    tidy = pd.concat(frames, ignore_index=True)
    for column in TEXT_COLUMNS:
        tidy[column] = tidy[column].fillna("none").astype(str)
    tidy["synthetic"] = synthetic
    tidy = tidy.drop(columns=[c for c in ("dataset_version", "code_hash", "embedding_key", "embedding_keys",
                                          "audit_knobs", "bridge_knobs") if c in tidy])
    summary = summarise(tidy)
    meta = {"dataset": params["dataset"], "profile": params["profile"], "synthetic": synthetic,
            "n_audit_subjects": int(np.unique(groups).size), "n_audit_windows": int(audit.size),
            "n_pretrain_subjects": int(params["pretrain_subjects"]), "window_s": float(params["window_s"]),
            "deployment_sigma": float(params["deployment_sigma"]),
            "utility_threshold": float(params["utility_threshold"]),
            "defense_seeds": len(params["defense_seeds"]), "dataset_version": version}
    out, js, md = Path(args.out), Path(args.json), Path(args.report)
    for path in (out, js, md):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tidy.to_csv(tmp, index=False)
    title = f"{label}{params['dataset']}"
    paths = figures(summary, cells, Path(args.figures), title)
    write_text_atomic(md, report_md(summary, cells, meta, encoders_meta))
    meta["wall_time_s"] = round(time.perf_counter() - start, 1)
    write_text_atomic(js, json.dumps(headline(summary, cells, meta), indent=2, sort_keys=True, allow_nan=False,
                                     default=float) + "\n")
    for e, w in cells:
        log_to_named_run("c", f"{STAGE}-{params['dataset']}-{e}-{w}", bootstrap_ci_metrics(summary, e, w),
                         [out, js, md, *paths])
    print(f"{title}: {len(tidy)} rows -> {out}; {md}; {len(paths)} figures ({meta['wall_time_s']} s)")
    return 0
