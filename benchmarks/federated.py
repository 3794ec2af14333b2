"""Federated training: the in-process backend against Flower's Ray simulation, same config, same seeds.

The config is study A's decentralised scenario (3 hospitals, an MLP with 100 hidden units on d = 209 eegmat-sized
features, 5 local epochs per round, federated standardisation), on seeded synthetic partitions. Rounds per second
*including* start-up is rounds / (wall time of ``run_fedavg``), the cost a sweep cell pays; *excluding* start-up it
is rounds / (time inside FedAvg's round loop), timed by wrapping the strategy's ``start`` (Ray's start-up, node
registration and shutdown fall outside it). Flower gets one untimed warm-up run first, so library imports count
for neither side. Both backends must end with the same weights and losses (tolerance below: Ray returns replies in
arrival order, so FedAvg may sum them in another order).
"""

from __future__ import annotations

import functools
import time

import numpy as np

from benchmarks._common import timed

NAME = "federated"
DESCRIPTION = "FedAvg rounds/s: in-process backend vs Flower's Ray simulation engine, same config and seeds"
TARGET_RATIO = 10.0
RTOL, ATOL = 1e-10, 1e-12
SIZES, DIM, SEED = (14, 15, 16), 209, 3


def _partitions():
    rng = np.random.default_rng(SEED)
    parts = []
    for k, n in enumerate(SIZES):
        y = (rng.random(n) < 0.3).astype(int)
        y[:2] = [0, 1]
        parts.append((rng.normal(loc=0.2 * k, size=(n, DIM)) + 0.5 * y[:, None], y))
    return parts


def _run(backend: str, rounds: int) -> tuple[float, float, object]:
    """(wall seconds, seconds inside the round loop, result) of one federation."""
    from eegprivacy.federated import MLPTask, fedavg_strategy, run_fedavg

    loop = {}

    def strategy(num_clients):  # the default strategy, with its round loop timed
        plain = fedavg_strategy(num_clients)
        start = plain.start

        def timed_start(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return start(*args, **kwargs)
            finally:
                loop["s"] = time.perf_counter() - t0

        plain.start = timed_start
        return plain

    task = functools.partial(MLPTask, DIM, hidden_layer_sizes=(100,), learning_rate_init=1e-3)
    wall, result = timed(lambda: run_fedavg(task, _partitions(), num_rounds=rounds, local_epochs=5, seed=SEED,
                                            backend=backend, standardize=True, strategy_factory=strategy))
    return wall, loop["s"], result


def _best(backend: str, rounds: int, repeats: int):
    runs = [_run(backend, rounds) for _ in range(repeats)]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2]


def run(quick: bool = False) -> dict:
    rounds = 3 if quick else 10
    _run("inprocess", 1)
    _run("flower", 1)  # warm-up: imports and first-touch costs count for neither side
    fast_s, fast_loop, fast = _best("inprocess", rounds, repeats=1 if quick else 5)
    ray_s, ray_loop, ray = _best("flower", rounds, repeats=1 if quick else 2)

    same_weights = len(fast.weights) == len(ray.weights) and all(
        np.allclose(a, b, rtol=RTOL, atol=ATOL) for a, b in zip(fast.weights, ray.weights))
    same_losses = bool(np.allclose([h["train_loss"] for h in fast.history], [h["train_loss"] for h in ray.history],
                                   rtol=RTOL, atol=ATOL))
    same = bool(same_weights and same_losses)
    ratio = ray_s / fast_s
    return {
        "project_s": round(fast_s, 4), "baseline_s": round(ray_s, 3), "ratio": round(ratio, 2),
        "target_ratio": TARGET_RATIO, "passed": bool(ratio >= TARGET_RATIO and same),
        "same_numbers": same, "tolerance": {"rtol": RTOL, "atol": ATOL},
        "max_abs_weight_difference": max(float(np.max(np.abs(a - b))) for a, b in zip(fast.weights, ray.weights)),
        "rounds": rounds, "clients": len(SIZES), "rows_per_client": list(SIZES), "features": DIM,
        "hidden_layer_sizes": [100], "local_epochs": 5,
        "rounds_per_s": {"inprocess": round(rounds / fast_s, 2), "flower": round(rounds / ray_s, 3)},
        "excluding_startup": {
            "inprocess_loop_s": round(fast_loop, 4), "flower_loop_s": round(ray_loop, 4),
            "rounds_per_s": {"inprocess": round(rounds / fast_loop, 2), "flower": round(rounds / ray_loop, 3)},
            "ratio": round(ray_loop / fast_loop, 2),
            "flower_startup_s": round(ray_s - ray_loop, 3),
        },
        "note": "ratio = rounds/s including start-up (what a sweep cell pays); excluding_startup times FedAvg's "
                f"round loop only; best of {1 if quick else 5} in-process and {1 if quick else 2} Flower runs",
    }
