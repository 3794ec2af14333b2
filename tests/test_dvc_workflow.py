"""The DVC habits a researcher relies on: every params file drives a stage (so `dvc exp run -S` reruns it), each
study's stages depend on the dataset version, `dvc exp run -S <file>:<key>=<value>` resolves for one param of
every study, and `dvc metrics show` / `dvc plots show` render what dvc.yaml declares."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DVC = shutil.which("dvc", path=str(BIN)) or shutil.which("dvc")


def _stages() -> dict:
    stages = {}
    for name, stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items():
        stages[name] = stage.get("do", stage)
    return stages


def _params_files(stage: dict) -> set[str]:
    return {next(iter(p)) if isinstance(p, dict) else p for p in stage.get("params", [])}


def test_every_params_file_is_declared_by_a_stage():
    declared = set().union(*(_params_files(s) for s in _stages().values()))
    files = {f"params/{p.name}" for p in (REPO / "params").glob("*.yaml")}
    assert files - declared == set(), "params files no stage declares: `dvc exp run -S` would not rerun anything"


def test_each_study_depends_on_its_dataset_version():
    stages = _stages()
    for study, names in {"a": ["dp_release", "dp_utility", "table_attacks"],
                         "b": ["federated_accounting", "federated_lira"], "c": ["embedding_audit"]}.items():
        for name in names:
            assert any(str(d).startswith("data/versions/") for d in stages[name]["deps"]), (study, name)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if DVC is None:
        pytest.fail("dvc is not installed in the test environment (it is pinned in requirements.txt)")
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: dvc experiments need one")
    dest = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(dest)], check=True)
    return dest


def _dvc(args, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}
    return subprocess.run([DVC, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("param, stage", [
    # study A: a stage whose inputs are all in git (a fresh clone has no DVC cache of the feature tables)
    ("params/dp_audit.yaml:dp_audit.n_trials=50000", "dp_audit"),
    ("params/federated_lira.yaml:federated_lira.n_shadows=32", "federated_lira"),
    ("params/embedding_audit.yaml:embedding_audit.bootstrap=2000", "embedding_audit@eegmat"),
])
def test_dvc_exp_run_set_param_reaches_its_stage(clone, param, stage):
    before = (clone / param.split(":")[0]).read_text()
    out = _dvc(["exp", "run", "--dry", "-S", param, stage.split("@")[0]], clone)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"Running stage '{stage}'" in out.stdout + out.stderr
    assert (clone / param.split(":")[0]).read_text() == before  # a dry run leaves the params as they were


def test_dvc_metrics_and_plots_render(clone, tmp_path):
    out = _dvc(["metrics", "show", "--json"], clone)
    assert out.returncode == 0, out.stderr[-2000:]
    shown = json.loads(out.stdout)
    files = set().union(*(entry.get("data", {}).keys() for entry in shown.values()))
    for name in ("metrics/embedding_audit_cohorts.json", "metrics/federated_lira.json", "metrics/dp_release.json"):
        assert name in files, f"{name} not shown by `dvc metrics show`"
    out = _dvc(["plots", "show", "-o", str(tmp_path / "plots")], clone)
    assert out.returncode == 0, out.stderr[-2000:]
    html = (tmp_path / "plots" / "index.html").read_text()
    assert "embedding_audit_eegmat_defenses.png" in html and "federated_lira_roc.png" in html
