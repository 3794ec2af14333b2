"""The balanced shadow design: which trials each shadow federation trains on (:func:`shadow_membership`), and
which shadows shadow-as-target leaves out together (:func:`loo_group_size`) so that every trial keeps the same
number of IN and OUT fitting shadows. Pure arithmetic on counts and masks; nothing here trains.
"""

from __future__ import annotations

import math

import numpy as np


def shadow_in_count(n_shadows: int, in_fraction: float) -> int:
    """How many shadows every trial is IN: n_shadows · in_fraction rounded half up, kept in 1..n_shadows − 1 (a
    trial needs an IN and an OUT shadow)."""
    if not 0.0 < float(in_fraction) < 1.0:
        raise ValueError(f"in_fraction must lie strictly between 0 and 1, got {in_fraction!r}")
    n = int(n_shadows)
    return min(max(int(np.floor(n * float(in_fraction) + 0.5)), 1), n - 1)


def loo_group_size(n_shadows: int, n_in: int) -> int:
    """Shadows the shadow-as-target check leaves out together: g = n_shadows / gcd(n_shadows, n_out), the
    smallest block of consecutive shadows of :func:`shadow_membership` in which every trial is OUT the same
    number of times (n_out / gcd), so the shadows left to fit LiRA hold every trial IN (and OUT) equally often.
    2 at ``in_fraction`` 0.5 (complementary pairs), 5 at 0.8 when 5 divides n_shadows."""
    n, n_out = int(n_shadows), int(n_shadows) - int(n_in)
    return n // math.gcd(n, n_out)


def loo_counts(n_shadows: int, n_in: int) -> tuple[int, int]:
    """(IN, OUT) shadows every trial keeps once one group of :func:`loo_group_size` leaves."""
    n, n_out = int(n_shadows), int(n_shadows) - int(n_in)
    g = loo_group_size(n, n_in)
    out_in_group = n_out // (n // g)
    return int(n_in) - (g - out_in_group), n_out - out_in_group


def loo_feasible(n_shadows: int, n_in: int) -> bool:
    """Whether shadow-as-target can run: at least two groups, and two IN and two OUT shadows per trial left once
    a group leaves (a Gaussian fit on each side)."""
    kept_in, kept_out = loo_counts(n_shadows, n_in)
    return int(n_shadows) // loo_group_size(n_shadows, n_in) >= 2 and min(kept_in, kept_out) >= 2


def _cyclic_position(n_shadows: int, n_in: int) -> np.ndarray:
    """Each shadow's position on the cycle of the design: shadow group·g + t sits at group + t·s (s = n / g), so
    the g shadows of one leave-out group are spread evenly round the cycle."""
    g = loo_group_size(n_shadows, n_in)
    s = int(n_shadows) // g
    j = np.arange(int(n_shadows))
    return (j // g) + (j % g) * s


def shadow_membership(y, subjects, n_shadows: int, seed: int, in_fraction: float = 0.5) -> np.ndarray:
    """(n_shadows, n_trials) IN mask, balanced: every trial is IN in exactly k = :func:`shadow_in_count` shadows,
    and every shadow holds k/n_shadows of each (subject, label) group to within one trial (each shadow client
    keeps both classes, which its CSP needs, and about the target's member share of them).

    A cyclic design, drawn per (subject, label) group of m trials: the group's trials in a seeded random order,
    trial p starting at offset ⌊p·n/m⌋ plus a seeded rotation of the group, IN in the k cycle positions from its
    offset on (mod n). Any k consecutive positions then hold ⌊km/n⌋ or ⌈km/n⌉ of the group's offsets, so every
    shadow's share of the group is within one trial of k/n. Shadows sit on the cycle as
    :func:`_cyclic_position` says, so that every block of :func:`loo_group_size` consecutive shadows holds each
    trial IN the same number of times (at 0.5: complementary pairs 2i, 2i + 1, Carlini et al.'s design).

    Why balanced: with a per-trial IN count that varies (the earlier block design at 0.8 gave 12 or 13 OUT
    shadows per trial), the count itself predicted a held-out shadow's membership (AUROC ≈ 0.83) and so leaked
    the answer into the shadow-as-target check. A constant count carries nothing (AUROC exactly 0.5)."""
    y = np.asarray(y).ravel()
    subjects = np.asarray(subjects).ravel()
    n = int(n_shadows)
    k = shadow_in_count(n, in_fraction)
    rng = np.random.default_rng(int(seed))
    position = _cyclic_position(n, k)
    mask = np.zeros((n, y.size), dtype=bool)
    labels, names = y.astype(str), subjects.astype(str)
    for subject, label in sorted({(str(s), str(c)) for s, c in zip(subjects, y)}):
        rows = rng.permutation(np.flatnonzero((names == subject) & (labels == label)))
        offsets = (np.arange(rows.size) * n // rows.size + int(rng.integers(n))) % n
        mask[:, rows] = (position[:, None] - offsets[None, :]) % n < k
    return mask

