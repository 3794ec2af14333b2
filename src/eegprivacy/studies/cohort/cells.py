"""The audit's table-attack cells: re-identification and membership inference on the released patient table, each
a pure function of (config, seed) so any process computes it with the same rows. The utility cells are study A's
own (:func:`eegprivacy.studies.release.utility.utility_cell`).

The releases and the re-identification scoring are study A's (:func:`~eegprivacy.studies.release.table_attacks.
release_rows`, :func:`~eegprivacy.studies.release.table_attacks.reidentification_rows`); the audit keeps its own
noise streams (:func:`_stream`: one per purpose, mechanism, ε and seed) and its membership loop, whose member count
leaves at least one non-member and which scores AUROC only.
"""

from __future__ import annotations

import zlib

import numpy as np

from eegprivacy.attacks.metrics import auroc as attack_auroc
from eegprivacy.attacks.table import TableMembershipInference
from eegprivacy.privacy import NO_NOISE
from eegprivacy.studies.release.table_attacks import CONTROL_STREAM, release_rows, reidentification_rows

# Seed streams of the attacks (mixed with the cell seed and a hash of (mechanism, ε)), kept apart from each other;
# the shuffled-identity control draws from study A's CONTROL_STREAM and the cell seed.
_REID_STREAM = 0x52454944
_MEMBERSHIP_STREAM = 0x4D454D42
# The audit's re-identification: one distance, top-1 only; its rows keep these columns, in this order.
_REID_COLUMNS = ("metric", "value", "ci_low", "ci_high", "n", "chance")


def _stream(tag: int, mechanism: str, epsilon: float, seed: int) -> np.random.Generator:
    """Independent stream per (purpose, mechanism, ε, seed)."""
    code = zlib.crc32(f"{mechanism}|{float(epsilon)!r}".encode())
    return np.random.default_rng([tag, code, int(seed)])


def _release(X: np.ndarray, config: dict, rng: np.random.Generator):
    """Scale -> clip -> noise with ``rng`` (study A's :func:`~eegprivacy.studies.release.table_attacks.release_rows`;
    ``none``: the noiseless scaled-and-clipped table); returns (released, calibration or None)."""
    return release_rows(X, config["mechanism"], float(config["epsilon"]), config.get("delta", 0.0),
                        config["clip_norm"], rng)


def reidentification_cell(config: dict, seed: int, *, release_base: np.ndarray, auxiliary: np.ndarray) -> list[dict]:
    """Nearest-neighbour linkage of each released row (first recording/half) to the attacker's vectors of the
    same subjects (second recording/half): top-1 accuracy with a Wilson interval over the K subjects, and the
    shuffled-identity control.

    Parameters
    ----------
    config : dict
        The cell's ``mechanism``, ``epsilon``, ``clip_norm`` and (for a noisy mechanism) ``delta``.
    seed : int
        The noise seed.
    release_base, auxiliary : numpy.ndarray
        The released subjects' vectors and the attacker's vectors of the same subjects, rows aligned.

    Returns
    -------
    list of dict
        ``top1_accuracy`` (with ``ci_low``/``ci_high``) and ``top1_accuracy_shuffled_control``, each with ``n`` and
        ``chance``.
    """
    mechanism, epsilon = config["mechanism"], float(config["epsilon"])
    released, _ = _release(release_base, config, _stream(_REID_STREAM, mechanism, epsilon, seed))
    rows = reidentification_rows(released, auxiliary, ("euclidean",), (1,), config["clip_norm"],
                                 np.random.default_rng([CONTROL_STREAM, seed]))
    return [{column: row[column] for column in _REID_COLUMNS if column in row} for row in rows]


def membership_cell(config: dict, seed: int, *, population: np.ndarray, trials: int,
                    member_fraction: float) -> list[dict]:
    """Each trial releases a random subset of the patients; an attacker who knows every patient's true vector scores
    each as member or not (distance; and the likelihood under the known noise). AUROC over all trials' scores.

    Parameters
    ----------
    config : dict
        The cell's ``mechanism``, ``epsilon``, ``clip_norm`` and (for a noisy mechanism) ``delta``.
    seed : int
        The noise seed (also the seed of the member draws, shared by every mechanism and ε).
    population : numpy.ndarray
        Every patient's vector, the attacker's knowledge.
    trials : int
        Releases per cell.
    member_fraction : float
        Share of the patients each release holds (at least 2, at most all but one).

    Returns
    -------
    list of dict
        One ``auroc`` row per attacker score (``distance``, and ``likelihood`` for a noisy mechanism).
    """
    mechanism, epsilon, clip_norm = config["mechanism"], float(config["epsilon"]), config["clip_norm"]
    n = len(population)
    n_members = min(n - 1, max(2, int(round(member_fraction * n))))
    draws = np.random.default_rng([_MEMBERSHIP_STREAM, seed])
    noise = _stream(_MEMBERSHIP_STREAM, mechanism, epsilon, seed)
    scores = ["distance"] if mechanism == NO_NOISE else ["distance", "likelihood"]
    attackers = {s: TableMembershipInference(score=s, clip_norm=clip_norm).fit(population) for s in scores}
    labels, values = [], {s: [] for s in scores}
    for _ in range(trials):
        members = draws.choice(n, size=n_members, replace=False)
        is_member = np.zeros(n, dtype=int)
        is_member[members] = 1
        released, calibration = _release(population[members], config, noise)
        labels.append(is_member)
        for s, attacker in attackers.items():
            values[s].append(attacker.decision_function(released, population, calibration))
    y = np.concatenate(labels)
    return [{"metric": "auroc", "attacker": s, "value": attack_auroc(y, np.concatenate(v)), "chance": 0.5,
             "n": len(y)} for s, v in values.items()]


def audit_cell(config: dict, seed: int, *, cohort_arrays: dict, audit: dict) -> list[dict]:
    """An attack cell, by ``config["kind"]`` (utility cells are study A's
    :func:`~eegprivacy.studies.release.utility.utility_cell`); a pure function of (config, seed) so any process can
    compute it."""
    kind = config["kind"]
    if kind == "reidentification":
        return reidentification_cell(config, seed, release_base=cohort_arrays["reid_release"],
                                     auxiliary=cohort_arrays["reid_auxiliary"])
    if kind == "membership":
        return membership_cell(config, seed, population=cohort_arrays["X"], trials=audit["membership_trials"],
                               member_fraction=audit["member_fraction"])
    raise ValueError(f"unknown cell kind {kind!r}")
