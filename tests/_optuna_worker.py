"""One Optuna worker process for tests/test_postgres_tracking.py: the ``eegprivacy`` CLI's own ``main`` (so the
``optuna-study-a`` stage exactly as a machine runs it), with the test-only patient label ``alternating``
registered (the synthetic cohort has none; tests/test_optuna_study_a.py registers the same one in-process).

    python tests/_optuna_worker.py READY GO -- optuna-study-a --storage postgresql://... ...
    python tests/_optuna_worker.py READY GO -- toy URL STUDY N_TRIALS SEED

It imports every stage, touches READY, then waits (up to 120 s) for GO before running the command: the test
starts all workers, waits for every READY and then creates GO, so their start-up (several seconds of imports)
is over before any opens the study and they really search side by side. ``toy`` runs
:func:`eegprivacy.pipeline.search.optimize_to_target` alone on a 0.25-s objective and prints how many trials it
started.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from eegprivacy import cli


def main(argv: list[str]) -> int:
    ready, go, separator, command = Path(argv[0]), Path(argv[1]), argv[2], argv[3:]
    assert separator == "--", argv
    if command[0] == "toy":
        import optuna  # noqa: F401 - imported before READY, like the stages below
    else:
        import numpy as np
        import pandas as pd

        cli.build_parser()  # imports every stage's entry module under experiments/
        from eegprivacy.studies.release import table as _study_a

        _study_a.METADATA_LABELS["alternating"] = lambda meta: pd.Series(np.arange(len(meta)) % 2, index=meta.index)
    ready.touch()
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            print(f"worker: {go} never appeared", file=sys.stderr)
            return 3
        time.sleep(0.05)
    return toy(*command[1:]) if command[0] == "toy" else cli.main(command)


def toy(url: str, name: str, n_trials: str, seed: str) -> int:
    import optuna

    from eegprivacy.pipeline import search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = {"sampler": "tpe", "seed": int(seed), "population_size": 4, "heartbeat_interval": 20}
    study = search.open_study(url, name, cfg, ["minimize"])

    def objective(trial):
        time.sleep(0.25)
        return trial.suggest_float("x", 0.0, 1.0)

    print(f"started {search.optimize_to_target(study, objective, int(n_trials))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
