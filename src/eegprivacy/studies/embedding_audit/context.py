"""What every cell of one (encoder, weights) pair needs, and the endpoints several cells share.

AEDS combines the subject-disjoint leakage, the membership and the BPID@1 results that other cells report. A
:class:`Context` computes each of them once per stage run and hands every asker the same object -- across the
worker processes too (:meth:`Context.memoized`), so AEDS neither recomputes them nor gets other numbers than the
cells that reported them.
"""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import numpy as np

from eegprivacy.atomic import atomic_path
from eegprivacy.studies.embedding_audit.data import AuditData, audit_targets


TESTS = "tests"  # the key of :meth:`Context.membership`'s permutation tests (not an attack)


class Context:
    """Everything a cell of one (encoder, weights) needs, with a memo so AEDS reuses the endpoints it combines."""

    def __init__(self, Z, data: AuditData, config, emb: dict, targets: tuple | None = None, cohort=None):
        audit = data.select("audit")
        self.Z, self.config, self.emb = Z, config, emb
        # the cohort's design (identity parts, temporal split); eegmat's where none is given
        self.cohort = cohort if cohort is not None else config.cohort("eegmat")
        self.groups = data.subject[audit]
        self.state = data.state[audit]
        self.order = data.order[audit]
        self.block = data.block[audit]   # the window's recording (rank within its subject)
        self.part = data.part[audit]     # identity: 0 enrolls, 1 queries, -1 neither
        self.A, self.X_down = targets if targets is not None else audit_targets(data, config)
        # recordings: (subject, block) -> time order within it
        self.recording = np.char.add(self.groups.astype(str), self.block.astype(str))
        # the encoder-membership losses name their subjects by index among these (embed._membership_windows): on
        # eegmmidb they are the audited subjects themselves (run 4 pretrains), elsewhere held-out ones
        rows = np.r_[data.select("pretrain_member"), data.select("pretrain_nonmember")]
        self.pretrain_subjects = np.unique(data.subject[rows])
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

    def head_rows_for(self, seed: int) -> np.ndarray:
        """Audited windows of the head's training half for ``seed``: half of the audited subjects, drawn from
        (``config.subject_seed``, ``seed``). The head-membership attacks and the DP-SGD head use it, so each seed
        redraws who the members are and results pooled over seeds pool over member draws **(ours)**; the other
        half is the release half (the attacks' non-members)."""
        subjects = np.unique(self.groups)
        rng = np.random.default_rng([self.config.subject_seed + 1, int(seed)])
        return np.isin(self.groups, rng.permutation(subjects)[: subjects.size // 2])

    def splitter(self, name: str, seed: int = 0, groups=None):
        """The ``name`` split of ``config.splits`` over the audited windows (or ``groups``)."""
        from eegprivacy.embeddings.splits import SubjectDisjointSplit, TemporalGapSplit

        split = getattr(self.config.splits, name)
        if name == "temporal_gap" and self.cohort.temporal == "runs":
            # leave one run out within each subject; runs lie minutes apart, so no gap window is needed
            return TemporalGapSplit(np.unique(self.block).size, 0, times=self.times(), parts=self.block)
        if name == "temporal_gap":
            return TemporalGapSplit(split.n_splits, split.gap, times=self.times())
        n_subjects = np.unique(self.groups if groups is None else groups).size
        return SubjectDisjointSplit(min(split.n_splits, n_subjects), random_state=seed)

    def times(self):
        # time order within a subject: its recordings in order (eegmat: rest, then arithmetic), windows in order
        return self.block * 10_000 + self.order

    def leakage(self, split: str, seed: int = 0):
        from eegprivacy.embeddings.endpoints.attribute import attribute_leakage

        return self.memoized(("leakage", split, seed), lambda: attribute_leakage(
            self.Z, self.A, self.groups, self.splitter(split, seed), n_bootstrap=self.config.bootstrap,
            n_permutations=self.config.permutations, random_state=seed))

    def bpid(self):
        """BPID@1 of the undefended embeddings (memoized): :meth:`bpid_of` ``(Z)``."""
        return self.memoized(("bpid",), lambda: self.bpid_of(self.Z))

    def bpid_of(self, Z, rows=None):
        """BPID@1 from the enrolling part (``part == 0``: eegmat's rest recordings, MSU's first half, eegmmidb's
        earlier audited run) to the querying part (``part == 1``). ``Z`` holds the embeddings of the audited
        windows ``rows`` (an index or mask; all of them by default), in that order. The interval is a bootstrap of
        the query subjects (seeded by ``config.subject_seed``)."""
        from eegprivacy.embeddings.endpoints.identity import bpid_at_1
        from eegprivacy.embeddings.splits import ReferenceSetSplit

        rows = np.arange(len(self.groups)) if rows is None else np.asarray(rows)
        groups, part = self.groups[rows], self.part[rows]
        if len(Z) != groups.size:
            raise ValueError(f"{len(Z)} embeddings for {groups.size} audited windows")
        ref, qry = next(ReferenceSetSplit(parts=part, reference_part=0, query_part=1).split(Z, groups=groups))
        return bpid_at_1(Z[ref], groups[ref], Z[qry], groups[qry], n_bootstrap=self.config.bootstrap,
                         random_state=self.config.subject_seed)

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

    def membership(self, seed: int = 0) -> dict:
        """Membership attacks of seed ``seed``, every interval a subject bootstrap, and under :data:`TESTS` the
        head attacks' subject-label permutation tests (:func:`~eegprivacy.evaluation.permutation.
        membership_permutation_test`):

        - ``head`` (and ``head_lira``): the rest/arithmetic head trained on :meth:`head_rows_for` ``(seed)``;
          members = its training subjects' windows, non-members = the release half's (subject-disjoint classes,
          resampled separately);
        - ``encoder``, where the cell has encoder-membership losses: members = the encoder's pretraining windows,
          non-members = the interleaved held-out blocks of the same recordings (the same subjects on both sides,
          resampled jointly). A self-pretrained cell also carries ``encoder_random_init``: the same attack on the
          encoder at its random initialisation (its matched null), with the same subject resamples so the two
          can be differenced draw by draw.
        """
        from eegprivacy.embeddings.heads import default_head
        from eegprivacy.embeddings.endpoints.membership import membership_auc
        from eegprivacy.evaluation.permutation import membership_permutation_test

        perm = {"n_permutations": self.config.test_permutations, "random_state": seed}

        def compute():
            boot = self.config.bootstrap
            inside = self.head_rows_for(seed)
            head = default_head()
            head.fit(self.Z[inside], self.state[inside])
            proba = np.clip(head.predict_proba(self.Z)[np.arange(len(self.Z)), self.state], 1e-12, 1.0)
            loss = -np.log(proba)
            groups = {"groups_members": self.groups[inside], "groups_nonmembers": self.groups[~inside]}
            results = {"head": membership_auc(loss[inside], loss[~inside], boot, random_state=seed, **groups)}
            # the claim's test: which subjects are members permuted, scores fixed (exact under the null; the
            # percentile bootstrap undercovers with 14-16 subjects a side)
            tests = {"head": membership_permutation_test(loss[inside], loss[~inside], **groups, **perm)}
            if self.config.lira_shadows > 0:
                score = self.head_lira(head, self.config.lira_shadows, seed)
                results["head_lira"] = membership_auc(-score[inside], -score[~inside], boot, random_state=seed,
                                                      **groups)
                tests["head_lira"] = membership_permutation_test(-score[inside], -score[~inside], **groups, **perm)
            results.update(self._encoder_membership(seed))
            results[TESTS] = tests
            return results
        return self.memoized(("membership", seed), compute)

    def _encoder_membership(self, seed: int) -> dict:
        from eegprivacy.embeddings.endpoints.membership import membership_auc

        if "mia_members" not in self.emb:
            return {}
        if "mia_members_subject" not in self.emb:
            raise ValueError("the encoder-membership losses carry no subjects (embeddings cached by older code?): "
                             "the attack's interval must resample subjects; delete the cached embeddings and rerun")
        groups = {"groups_members": self.emb["mia_members_subject"],
                  "groups_nonmembers": self.emb["mia_nonmembers_subject"]}
        boot = self.config.bootstrap
        out = {"encoder": membership_auc(self.emb["mia_members"], self.emb["mia_nonmembers"], boot,
                                         random_state=seed, **groups)}
        if "mia_control_members" in self.emb:
            out["encoder_random_init"] = membership_auc(self.emb["mia_control_members"],
                                                        self.emb["mia_control_nonmembers"], boot,
                                                        random_state=seed, **groups)
        return out
