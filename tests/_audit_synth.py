"""Constructed embeddings with a known amount of attribute leakage, for the Study C audit tests."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits


def synth(n_subjects=12, n_windows=30, dim=16, leak=1.0, noise=1.0, subject_offset=0.0, seed=0):
    """(Z, A, groups, t): attribute A (centered, 5 dims) with a subject part and a window part.

    Z = leak * A M + subject_offset * u_subject + noise * e, so leak=0 gives embeddings that carry no
    attribute information (the controls' case) and subject_offset > 0 makes subjects identifiable.
    """
    rng = np.random.default_rng(seed)
    n = n_subjects * n_windows
    groups = np.repeat(np.arange(n_subjects), n_windows)
    t = np.tile(np.arange(n_windows), n_subjects)
    A = 0.5 * rng.standard_normal((n, 5)) + np.repeat(rng.standard_normal((n_subjects, 5)), n_windows, axis=0)
    A -= A.mean(axis=1, keepdims=True)
    M = rng.standard_normal((5, dim))
    U = np.repeat(rng.standard_normal((n_subjects, dim)), n_windows, axis=0)
    Z = leak * A @ M + subject_offset * U + noise * rng.standard_normal((n, dim))
    return Z, A, groups, t


@pytest.fixture(autouse=True)
def single_thread_blas():
    """Small matrices: BLAS threads only add contention (100x slower eigh on a loaded 2-core box)."""
    with threadpool_limits(limits=1):
        yield
