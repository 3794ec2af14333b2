"""Issue 20 (study B): why per-example ε must equal per-client ε while CSP is fitted on a client's private trials.

Each client fits its CSP filters and their standardisation on all of its member trials. Replacing ONE trial then
moves the features of every OTHER trial, so one trial's influence reaches the whole client's training data and the
privacy loss of a trial is that of its client. The accounting must say so: its per-example rows equal its
per-client rows, marked as such. Synthetic trials throughout (Gaussian noise with a class-dependent channel gain).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from eegprivacy.privacy.accounting import FederatedSchedule, make_accountant
from eegprivacy.signal.csp import ClientCSP
from eegprivacy.studies.federated import accounting


def _synthetic_trials(n=24, n_chans=8, n_times=128, seed=0):
    """SYNTHETIC: class 1 has a stronger first channel, class 0 a stronger second one."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.normal(size=(n, n_chans, n_times))
    X[y == 1, 0] *= 3.0
    X[y == 0, 1] *= 3.0
    return X, y


@pytest.mark.parametrize("output", ["logvar", "signals"])
def test_replacing_one_trial_moves_every_other_trials_csp_features(output):
    X, y = _synthetic_trials()
    replaced = X.copy()
    replaced[0] = np.random.default_rng(1).normal(size=X.shape[1:]) * 5.0  # a different trial, same label
    before = ClientCSP(n_components=4, output=output).fit(X, y).transform(X[1:])
    after = ClientCSP(n_components=4, output=output).fit(replaced, y).transform(X[1:])
    moved = np.abs(after - before).reshape(len(before), -1).max(axis=1)
    # every one of the 23 untouched trials' features changed: trial 0 reaches them all through the fit
    assert (moved > 1e-6 * np.abs(before).max()).all()


def _cache():
    return accounting.CurveCache({"basic": make_accountant("basic")}, 1e-5)


def _rows(unit, schedule, channel=""):
    base = {"study": "b", "dataset": "synthetic", "model": "eegnet"}
    return accounting.cell_rows(_cache(), base, epsilon=5.0, dim=100, calibration="nominal", unit=unit,
                                schedule=schedule, rounds_expected=2, clip_norm=1.0, channel=channel)


def test_per_example_epsilon_equals_per_client_epsilon_when_members_exceed_the_batch():
    schedule = FederatedSchedule.for_client(3, 2, 40, 16)  # 3 batches per epoch: one trial is in 1 of 3 steps
    example = {(r["metric"], str(r["round"])): r["value"] for r in _rows("example", schedule)}
    client = {(r["metric"], str(r["round"])): r["value"] for r in _rows("client", schedule)}
    assert example.keys() == client.keys()
    assert example == pytest.approx(client)
    assert {r["unit_note"] for r in _rows("example", schedule)} == {accounting.PER_EXAMPLE_NOTE}


def test_an_unnoised_channel_prints_no_guarantee():
    schedule = FederatedSchedule.for_client(3, 2, 40, 16)
    channel = accounting.unnoised_channel({"unnoised_buffer_values": 32}, "shared")
    assert channel == "batchnorm_running_stats"
    assert accounting.unnoised_channel({"unnoised_buffer_values": 32}, "local") == ""
    assert accounting.unnoised_channel({"unnoised_buffer_values": 0}, "shared") == ""
    rows = _rows("client", schedule, channel)
    assert rows and all(math.isinf(r["value"]) for r in rows)
    assert {r["guarantee"] for r in rows} == {"none"} and {r["unnoised_channel"] for r in rows} == {channel}
