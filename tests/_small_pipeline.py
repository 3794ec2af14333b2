"""The small profile: every study-A stage, on the synthetic cohorts, with tiny params, into one folder.

Shared by tests/test_determinism.py (two runs must write identical tables) and tests/test_no_identifier_leaks.py
(nothing identifying may reach any output). Each run gets its own MLflow store, artifact folder and cell cache
under ``root``; stdout, stderr, warnings and every log record go to ``root/logs/pipeline.log``.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

CLINICAL, REST_TASK = "synthetic_clinical", "synthetic_rest_task"

PARAMS = {
    "dp_release": {
        "dp_release": {"clip_norm": 2.0, "delta": 1.0e-5, "epsilons": [1, 10],
                       "mechanisms": ["gaussian_analytic", "laplace_formal"], "noise_seeds": 2,
                       "datasets": {CLINICAL: {"label": "label"}}},
        "dp_utility": {"mechanisms": ["gaussian_analytic", "laplace_formal"], "baseline_mlp_seeds": 1, "nested_seeds": 0,
                       "permutations": 1, "n_jobs": 1, "figure_epsilon": 10, "bootstrap": 200},
    },
    "dp_scaling": {"dp_scaling": {"datasets": [CLINICAL], "public_fraction": 0.3333, "split_seed": 0,
                                  "bounds_margin": 0.1, "mechanisms": ["gaussian_analytic"], "total_epsilons": [50],
                                  "scaling_fraction": 0.2, "noise_seeds": 1, "n_jobs": 1}},
    "table_attacks": {"table_attacks": {
        "mechanisms": ["gaussian_analytic"], "epsilons": [1], "noise_seeds": 1,
        "reidentification": {"datasets": {REST_TASK: {"release_condition": "task", "auxiliary_condition": "rest"}},
                             "metrics": ["euclidean"], "top_k": [1, 5]},
        "membership": {"member_fraction": 0.5, "trials": 5, "scores": ["distance", "likelihood"],
                       "fprs": [0.01]}}},
    "deployment": {"deployment": {"scenarios": ["client_side", "server_side", "decentralised"], "n_hospitals": 3,
                                  "shared_fraction": 0.25, "mechanisms": ["gaussian_analytic"], "epsilons": [10],
                                  "noise_seeds": 1,
                                  "federated": {"backend": "inprocess", "hidden_layer_sizes": [8], "num_rounds": 2,
                                                "local_epochs": 1, "learning_rate_init": 0.01}}},
    "linkage": {"linkage": {"n_records": 60, "overlap": 0.8, "household_rate": 0.2, "format_rate": 0.3,
                            "typo_rates": [0.2], "seeds": [0], "q": 2, "num_bits": 1024, "num_hashes": 10,
                            "fields": [["given_name", "family_name"], "date_of_birth", "sex", "postcode"],
                            "thresholds": [0.6, 0.8], "default_threshold": 0.8}},
    "dp_audit": {"dp_audit": {"mechanisms": ["gaussian_analytic", "laplace_implemented"], "epsilons": [1],
                              "clip_norm": 2.0, "delta": 1.0e-5, "dims": [20], "n_trials": 2000, "seeds": 1,
                              "confidence": 0.95, "n_jobs": 1}},
}


@contextlib.contextmanager
def _captured_logs(path: Path):
    """Everything the stages say (print, warnings, any logger at any level) into one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as log_file, contextlib.redirect_stdout(log_file), contextlib.redirect_stderr(log_file):
        handler = logging.StreamHandler(log_file)
        handler.setLevel(logging.DEBUG)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        with contextlib.ExitStack() as undo:  # every change below is undone on exit, last first
            for lg in (logging.getLogger(), logging.getLogger("flwr")):  # flwr does not propagate to the root
                undo.callback(lg.setLevel, lg.level)
                undo.callback(lg.removeHandler, handler)
                lg.addHandler(handler)
                lg.setLevel(logging.DEBUG)
            undo.callback(logging.captureWarnings, False)
            logging.captureWarnings(True)
            yield


def run_small_pipeline(root: Path, features_dir: Path, key_file: Path) -> Path:
    """Run every study-A stage into ``root`` (features read from ``features_dir``, which must hold both synthetic
    cohorts' tables) with the linkage key in ``key_file``; returns ``root``."""
    from eegprivacy.cli import main

    root.mkdir(parents=True, exist_ok=True)
    params = {}
    for name, content in PARAMS.items():
        params[name] = root / "params" / f"{name}.yaml"
        params[name].parent.mkdir(parents=True, exist_ok=True)
        params[name].write_text(yaml.safe_dump(content))
    metrics, plots, figures, cells = root / "metrics", root / "plots", root / "reports" / "figures", root / "cells"

    with pytest.MonkeyPatch.context() as mp, _captured_logs(root / "logs" / "pipeline.log"):
        mp.chdir(REPO)  # stages read params/features.yaml for the cohorts' constructor arguments
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        mp.setenv("EEGPRIVACY_CACHE", str(root / "cache"))
        mp.delenv("EEGPRIVACY_LINKAGE_KEY", raising=False)
        mp.setenv("EEGPRIVACY_LINKAGE_KEY_FILE", str(key_file))
        common = ["--cells", str(cells), "--no-progress"]
        # One process for the stages whose --jobs defaults to 2, as the params give n_jobs 1 to the others: the
        # worker pools cost more than these tiny grids, and tests/test_table_attacks.py and tests/test_deployment.py
        # show their rows do not depend on the number of processes.
        serial = [*common, "--jobs", "1"]
        for dataset in (CLINICAL, REST_TASK):
            assert main(["features", "--dataset", dataset, "--params", "params/features.yaml",
                         "--out", str(features_dir / f"{dataset}.parquet"),
                         "--metrics", str(metrics / f"features_{dataset}.json"),
                         "--figure", str(figures / f"features_{dataset}.png"), "--no-progress"]) == 0
        study_a = ["--dataset", CLINICAL, "--features-dir", str(features_dir), *common]
        for stage in ("dp_release", "dp_utility"):
            assert main([stage.replace("_", "-"), "--params", str(params["dp_release"]),
                         "--out", str(metrics / stage / f"{stage}_{CLINICAL}.csv"), *study_a]) == 0
        aggregate = ["--metrics-dir", str(metrics), "--figures-dir", str(figures), "--plots-dir", str(plots)]
        assert main(["dp-aggregate", "--params", str(params["dp_release"]), *aggregate]) == 0
        assert main(["dp-scaling", "--params", str(params["dp_scaling"]), "--release-params", str(params["dp_release"]),
                     "--out", str(metrics / "dp_scaling" / f"dp_scaling_{CLINICAL}.csv"), *study_a]) == 0
        assert main(["dp-scaling-aggregate", "--params", str(params["dp_scaling"]), *aggregate]) == 0
        assert main(["table-attacks", "--dataset", REST_TASK, "--params", str(params["table_attacks"]),
                     "--release-params", str(params["dp_release"]),
                     "--out", str(metrics / f"table_attacks_{REST_TASK}.csv"),
                     "--metrics", str(metrics / f"table_attacks_{REST_TASK}.json"),
                     "--figure", str(figures / f"table_attacks_{REST_TASK}.png"),
                     "--features-dir", str(features_dir), *serial]) == 0
        assert main(["dp-scenarios", "--params", str(params["deployment"]),
                     "--release-params", str(params["dp_release"]),
                     "--out", str(metrics / f"dp_scenarios_{CLINICAL}.csv"),
                     "--metrics", str(metrics / f"dp_scenarios_{CLINICAL}.json"),
                     "--figure", str(figures / f"dp_scenarios_{CLINICAL}.png"), *study_a, "--jobs", "1"]) == 0
        assert main(["linkage", "--params", str(params["linkage"]), "--out", str(metrics / "linkage.csv"),
                     "--summary", str(metrics / "linkage.json"),
                     "--figure", str(figures / "linkage_precision_recall.png"), *common]) == 0
        assert main(["dp-audit", "--params", str(params["dp_audit"]), "--out", str(metrics / "dp_audit.csv"),
                     "--summary", str(metrics / "dp_audit.json"), "--figure", str(figures / "dp_audit.png"),
                     *common]) == 0
    return root
