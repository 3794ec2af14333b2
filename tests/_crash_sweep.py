"""A tiny sweep that tests/test_crash_safety.py runs in a child process and kills with SIGKILL.

Run as a script, it finishes the first ``BLOCK_AT`` cells, then touches the marker file and hangs inside the
next cell (its MLflow child run open), so the kill lands at a known point instead of racing the sweep.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from eegprivacy.pipeline.sweep import SweepRunner, expand_grid
from eegprivacy.tracking import required_tags

CELLS = expand_grid({"epsilon": [1.0, 10.0], "mechanism": ["gaussian_analytic", "laplace_formal"]}, seeds=[0, 1])
BLOCK_AT = 3


def make_runner(out_dir: Path) -> SweepRunner:
    def tags(cell):
        return required_tags(study="a", stage="crash_test", dataset="toy", dataset_version="v1", synthetic=True,
                             seed=cell.seed, epsilon=cell.config.get("epsilon"),
                             mechanism=cell.config.get("mechanism"))

    return SweepRunner(name="crash-sweep", study="a", dataset="toy", out_dir=out_dir,
                       parent_tags=required_tags(study="a", stage="crash_test", dataset="toy", dataset_version="v1",
                                                 synthetic=True, seed=None),
                       tags_fn=tags, params={"cells": len(CELLS)}, progress=False)


def rows(config: dict, seed: int) -> list[dict]:
    """Deterministic rows with floats that do not survive a careless text round trip (1/3, 0.1 + 0.2)."""
    base = config["epsilon"] / 3 + seed + (0.1 + 0.2) * (config["mechanism"] == "laplace_formal")
    return [{"metric": "score", "value": base, "chance": 0.5},
            {"metric": "noise", "value": 1 / (base + 7), "n": 17}]


def main(out_dir: str, marker: str) -> None:
    done = []

    def cell_fn(config, seed):
        if len(done) == BLOCK_AT:
            Path(marker).touch()
            time.sleep(600)  # killed here
        done.append(seed)
        return rows(config, seed)

    make_runner(Path(out_dir)).run(CELLS, cell_fn)


if __name__ == "__main__":
    main(*sys.argv[1:3])
