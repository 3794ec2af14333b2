"""Study B, one cell's client-bootstrap replicates: what an interval over subjects+seeds is built from.

The subject is the privacy unit and every subject is one client, so each number of a (model, ε, seed) cell is
also computed on B resamples of whole clients (:mod:`eegprivacy.evaluation.client_bootstrap`; the same resamples
in every cell of a federation, so cells and seeds are paired). Per summary key (attack, attacker, metric) the
cell keeps ONE replicate vector: the mean over its rounds of each round's replicates, exactly as
:func:`eegprivacy.studies.federated.report.across_rounds` averages the values over rounds (rounds whose value is
NaN are left out, as pandas' mean leaves them out). The report crosses the per-seed vectors with a seed resample
(``combine_seeds``) into a percentile interval and a bootstrap p-value.

What is resampled per number:

- RLA, FLA (and their untrained controls): the attacker-test rows (trials), by the client each trial belongs to;
- GLA (sound) per round and pooled (and their controls): the attacker-test updates, by the client that computed
  them (a split by client leaves some clients out of the test half: their draws add no row);
- utility: each client's own metric on its non-members (the utility is the clients' mean);
- losses and gradient norms: the pooled trials by client; the sampled clients' train loss by client.

CLA (its label *is* the client) and GLA (paper) (real updates against Gaussian vectors) have no per-client
reading: they keep no replicates and the report gives them the interval over seeds, labelled ``seeds``.
"""

from __future__ import annotations

import warnings

import numpy as np

from eegprivacy.evaluation import client_bootstrap as cb

__all__ = ["Replicates", "replicate_key"]

SEPARATOR = "|"


def replicate_key(attack: str, attacker: str, metric: str) -> str:
    """The key of one summary number inside a cell: ``attack|attacker|metric`` (empty attack and attacker for
    utility, losses and gradient norms, as the summary fills them)."""
    return SEPARATOR.join([attack or "", attacker or "", metric])


class Replicates:
    """One cell's replicate vectors, collected per key and round and averaged over rounds by :meth:`arrays`.

    Parameters
    ----------
    n_clients : int
        The federation's clients (subjects).
    n_resamples : int
        B, the client resamples (``federated_mia.subject_bootstrap``).
    """

    def __init__(self, n_clients: int, n_resamples: int):
        self.counts = cb.client_resample_counts(n_clients, n_resamples)
        self.n_clients = int(n_clients)
        self._entries: dict[str, list[tuple[float, np.ndarray]]] = {}

    def add(self, key: str, value: float, vector: np.ndarray) -> None:
        """One round's (or the cell's one) value of ``key`` and its B replicates."""
        vector = np.asarray(vector, dtype=float)
        if vector.shape != (self.counts.shape[0],):
            raise ValueError(f"{key}: {vector.shape} replicates, expected ({self.counts.shape[0]},)")
        self._entries.setdefault(key, []).append((float(value), vector))

    def mean(self, key: str, values, clients) -> None:
        """The mean of ``values`` (one per row, ``clients`` its client) and its replicates."""
        values = np.asarray(values, dtype=float)
        self.add(key, float(np.nanmean(values)) if np.isfinite(values).any() else float("nan"),
                 cb.mean_replicates(values, clients, self.counts))

    def attack(self, attack, X, y, clients, scores: dict, name: str, attacker: str, metrics) -> None:
        """Replicates of every attack ``metrics`` entry present in ``scores`` (``MembershipAttack.evaluate``'s
        dict): the fitted ``attack`` re-scores its attacker-test rows (``attack.test_index_``), each row
        resampled with its client (``clients``: one per row of ``X``)."""
        test = np.asarray(attack.test_index_)
        proba = attack.predict_proba(np.asarray(X, dtype=float)[test])
        classes = attack.classes_
        labels = np.asarray(y).ravel()[test]
        owner = np.asarray(clients).ravel()[test]
        positive = (labels == classes[-1]).astype(int)
        score, pred = proba[:, -1], classes[proba.argmax(1)]
        for metric in metrics:
            if metric not in scores:
                continue
            if metric == "accuracy":
                vector = cb.accuracy_replicates(pred, labels, owner, self.counts)
            elif metric == "balanced_accuracy":
                vector = cb.balanced_accuracy_replicates((pred == classes[-1]).astype(int), positive, owner,
                                                         self.counts)
            elif metric == "auroc":
                vector = cb.auroc_replicates(score, positive, owner, self.counts)
            elif metric.startswith("tpr_at_fpr_"):
                vector = cb.tpr_at_fpr_replicates(score, positive, owner, self.counts,
                                                  float(metric.rsplit("_", 1)[1]))
            else:
                continue
            self.add(replicate_key(name, attacker, metric), scores[metric], vector)

    def utility(self, per_client: list[dict], metrics) -> None:
        """The utility rows' replicates: each client's own metric, averaged over resampled clients (and
        ``client_accuracy``, the same clients' accuracies)."""
        clients = np.arange(len(per_client))
        for metric in metrics:
            self.mean(replicate_key("", "", f"utility_{metric}"), [c[metric] for c in per_client], clients)
        self.mean(replicate_key("", "", "client_accuracy"), [c["accuracy"] for c in per_client], clients)

    def losses(self, member_loss, member_clients, nonmember_loss, nonmember_clients) -> None:
        """``train_loss``, ``test_loss`` (the pooled member and non-member losses) and their ``loss_gap``."""
        train = cb.mean_replicates(member_loss, member_clients, self.counts)
        test = cb.mean_replicates(nonmember_loss, nonmember_clients, self.counts)
        self.add(replicate_key("", "", "train_loss"), float(np.mean(member_loss)), train)
        self.add(replicate_key("", "", "test_loss"), float(np.mean(nonmember_loss)), test)
        self.add(replicate_key("", "", "loss_gap"), float(np.mean(nonmember_loss) - np.mean(member_loss)),
                 test - train)

    def client_train_loss(self, value: float, losses: dict, sizes: dict) -> None:
        """The sampled clients' train loss weighted by their trials (``losses``/``sizes`` per client index)."""
        if not losses or not np.isfinite(value):
            return
        clients = np.array(sorted(losses))
        n = np.array([int(sizes[c]) for c in clients])
        values = np.repeat([losses[c] for c in clients], n)
        self.add(replicate_key("", "", "client_train_loss"), value,
                 cb.mean_replicates(values, np.repeat(clients, n), self.counts))

    def grad_norms(self, norms: dict, clients: dict, quantiles=None) -> None:
        """Mean and median gradient norm of members and non-members (``norms[who]``, ``clients[who]``), and
        with ``quantiles`` (the last round) those quantiles, keyed as :func:`~eegprivacy.studies.federated.mia.
        grad_norm_rows` names them."""
        for who, g in norms.items():
            g = np.asarray(g, dtype=float)
            self.add(replicate_key("", "", f"grad_norm_{who}_mean"), float(g.mean()),
                     cb.mean_replicates(g, clients[who], self.counts))
            self.add(replicate_key("", "", f"grad_norm_{who}_median"), float(np.median(g)),
                     cb.quantile_replicates(g, clients[who], self.counts, 0.5))
            for q in quantiles if quantiles is not None else ():
                self.add(replicate_key("", "", f"grad_norm_{who}_q{int(round(q * 100)):03d}"),
                         float(np.quantile(g, q)), cb.quantile_replicates(g, clients[who], self.counts, q))

    def arrays(self) -> dict[str, np.ndarray]:
        """``replicate_keys`` (n_keys,) and ``replicates`` (n_keys, B): per key the mean over its rounds of the
        replicates of the rounds whose value is finite (all-NaN where none is), for the cell's npz."""
        keys = sorted(self._entries)
        rows = []
        for key in keys:
            kept = [v for value, v in self._entries[key] if np.isfinite(value)]
            if kept:
                with warnings.catch_warnings():  # "mean of empty slice" where every round's b is NaN: b stays NaN
                    warnings.simplefilter("ignore", RuntimeWarning)
                    rows.append(np.nanmean(np.stack(kept), axis=0))
            else:
                rows.append(np.full(self.counts.shape[0], np.nan))
        replicates = np.stack(rows) if rows else np.empty((0, self.counts.shape[0]))
        # float32: a replicate is read for percentiles and sign counts; half the size of ~150 keys × B per cell
        return {"replicate_keys": np.array(keys, dtype=str), "replicates": replicates.astype(np.float32)}

