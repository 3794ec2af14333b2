"""The stage registry is the one statement of each stage's contract: dvc.yaml, the CLI and the cell-cache code
hashes are held to it, and the stage entry points stay thin (no stage imports another, none over 150 lines)."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
import yaml

from eegprivacy.cli import build_parser
from eegprivacy.pipeline import stages
from eegprivacy.pipeline.stages import STAGES, dvc_mismatches, get_stage

REPO = Path(__file__).resolve().parents[1]
DVC = yaml.safe_load((REPO / "dvc.yaml").read_text())
MAX_STAGE_LINES = 150

# embedding_audit's dvc.yaml deps before the registry: the stage ran attacks/lira.py (LiRA shadows), yet only
# attacks/metrics.py was a dependency, so a change to LiRA neither reran the stage nor invalidated its cells.
EMBEDDING_AUDIT_DEPS_BEFORE = [
    "data/versions/eegmat.json", "src/eegprivacy/data", "src/eegprivacy/signal/preprocess.py",
    "src/eegprivacy/signal/windows.py", "src/eegprivacy/embeddings", "src/eegprivacy/attacks/metrics.py",
    "src/eegprivacy/evaluation/intervals.py", "src/eegprivacy/tracking", "experiments/embedding_audit.py"]


def test_dvc_yaml_agrees_with_the_registry():
    assert dvc_mismatches(DVC) == []


def test_a_code_dependency_missing_from_dvc_yaml_is_caught():
    stale = copy.deepcopy(DVC)
    stale["stages"]["embedding_audit"]["do"]["deps"] = list(EMBEDDING_AUDIT_DEPS_BEFORE)  # a foreach stage now
    problems = dvc_mismatches(stale)
    assert any(p.startswith("embedding_audit: runs src/eegprivacy/attacks ") for p in problems), problems
    assert all(p.startswith("embedding_audit:") for p in problems)
    lira = REPO / "src/eegprivacy/attacks/lira.py"
    assert lira in get_stage("embedding_audit").code_files()  # and the cell cache now hashes it


@pytest.mark.parametrize("mutation, expected", [
    (lambda d: d["stages"]["linkage"]["outs"].pop(), "linkage: writes metrics/linkage.csv"),
    (lambda d: d["stages"]["dp_audit"].pop("params"), "dp_audit: reads params/dp_audit.yaml:dp_audit"),
    (lambda d: d["stages"].pop("federated_lira"), "federated_lira: registered but missing from dvc.yaml"),
    (lambda d: d["stages"].__setitem__("extra", {"cmd": "true"}), "extra: in dvc.yaml but not in the registry"),
])
def test_other_disagreements_are_named(mutation, expected):
    changed = copy.deepcopy(DVC)
    mutation(changed)
    assert any(p.startswith(expected) for p in dvc_mismatches(changed)), dvc_mismatches(changed)


def test_every_stage_is_a_subcommand_with_its_registered_help():
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for stage in STAGES:
        assert stage.command in subcommands
        assert subcommands[stage.command].description.startswith(stage.help)


def test_code_hash_follows_the_sources(tmp_path, monkeypatch):
    stage = get_stage("linkage")
    before = stage.code_hash()
    assert before == stages.code_hash("linkage") and len(before) == 16
    # a copy of the repository's sources with one byte changed in one code dependency hashes differently
    for source in (*stage.code, stage.entry_file):
        target = tmp_path / source
        if (REPO / source).is_dir():
            for path in (REPO / source).rglob("*.py"):
                (tmp_path / path.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / path.relative_to(REPO)).write_bytes(path.read_bytes())
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((REPO / source).read_bytes())
    monkeypatch.setattr(stages, "checkout_root", lambda: tmp_path)
    stages._code_hash.cache_clear()
    assert stage.code_hash() == before
    linkage = tmp_path / "src/eegprivacy/privacy/linkage.py"
    linkage.write_bytes(linkage.read_bytes() + b"\n")
    stages._code_hash.cache_clear()
    assert stage.code_hash() != before
    stages._code_hash.cache_clear()


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names.add("." * node.level + (node.module or ""))
    return names


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("*.py")), ids=lambda p: p.name)
def test_stage_modules_are_thin_and_import_no_other_stage(path):
    imported = _imports(path)
    assert not [m for m in imported if m == "experiments" or m.startswith(("experiments.", "."))], imported
    assert len(path.read_text().splitlines()) <= MAX_STAGE_LINES


@pytest.mark.parametrize("path", sorted((REPO / "tests").glob("*.py")), ids=lambda p: p.name)
def test_tests_import_the_package_not_the_stage_modules(path):
    text = path.read_text()
    assert "sys.path" + ".insert" not in text
    assert not [m for m in _imports(path) if m == "experiments" or m.startswith("experiments.")]


def test_every_stage_module_is_registered():
    entries = {stage.entry_file for stage in STAGES}
    modules = {f"experiments/{p.name}" for p in (REPO / "experiments").glob("*.py") if p.name != "__init__.py"}
    assert modules == entries


def test_stages_without_runs_are_what_make_reproduce_reruns(tmp_path, capsys):
    """A store holding only a linkage run reports every other DVC stage (name@item for foreach stages) as
    missing; a run that is not FINISHED does not count."""
    from mlflow.tracking import MlflowClient

    from eegprivacy.cli import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("probe")
    for stage, status in (("linkage", "FINISHED"), ("dp_audit", "FAILED")):
        run = client.create_run(experiment, tags={"dvc_stage": stage})
        client.set_terminated(run.info.run_id, status)
    missing = stages.stages_without_runs(uri)
    expected = [name for stage in STAGES if stage.in_dvc for name in stage.dvc_names() if name != "linkage"]
    assert missing == expected and "dp_release@msu_schizophrenia" in missing and "dp_audit" in missing
    assert "dp_release@eegmat" not in missing  # eegmat's study A arm runs in the full profile only
    assert main(["stages", "--missing-runs", "--tracking-uri", uri]) == 0
    assert capsys.readouterr().out.split() == expected


FULL_PROFILE = {"profile": {"name": "full", "study_a": ["synthetic_clinical", "eegmat", "msu_schizophrenia"],
                            "study_a_attacks": ["eegmat", "msu_schizophrenia"],
                            "study_b": {"eegmmidb": "data/versions/eegmmidb.json",
                                        "eegmat": "data/versions/eegmat.json",
                                        "synthetic_mi": "src/eegprivacy/data/synthetic.py"}}}


def test_the_profile_decides_each_stages_cohorts(tmp_path, monkeypatch):
    """params/profile.yaml is the one list: the default profile leaves eegmat's study A and B arms out, the full
    profile's lists (the Makefile's PROFILE=full) bring them back; a foreach that fixes its list is caught."""
    from eegprivacy.pipeline import profile

    default = [name for stage in STAGES if stage.in_dvc for name in stage.dvc_names()]
    assert "dp_utility@msu_schizophrenia" in default and "federated_mia@eegmmidb" in default
    assert not [n for n in default if n.split("@")[0] in ("dp_utility", "federated_mia", "table_attacks")
                and n.endswith(("@eegmat", "@synthetic_mi"))]
    assert "embedding_audit@eegmat" in default and "dataset_version@eegmat" in default  # study C keeps eegmat
    makefile = (REPO / "Makefile").read_text()
    for key in ("study_a", "study_a_attacks", "study_b"):
        assert f"params/profile.yaml:{'++' if key == 'study_b' else ''}profile.{key}=" in makefile, key

    full = tmp_path / "profile.yaml"
    full.write_text(yaml.safe_dump(FULL_PROFILE))
    real = profile.cohorts
    monkeypatch.setattr(profile, "cohorts", lambda key, params_file=None: real(key, full))
    names = [name for stage in STAGES if stage.in_dvc for name in stage.dvc_names()]
    assert {"dp_utility@eegmat", "table_attacks@eegmat", "federated_mia@eegmat", "federated_mia@synthetic_mi",
            "csp_exploration@synthetic_mi"} <= set(names)

    fixed = copy.deepcopy(DVC)
    fixed["stages"]["dp_utility"]["foreach"] = ["synthetic_clinical", "eegmat", "msu_schizophrenia"]
    assert any(p.startswith("dp_utility: dvc.yaml runs it for a fixed list") for p in dvc_mismatches(fixed))
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump({"profile": {**FULL_PROFILE["profile"], "study_a": ["bonn"]}}))
    monkeypatch.setattr(profile, "cohorts", lambda key, params_file=None: real(key, unknown))
    with pytest.raises(ValueError, match="cannot run on"):
        get_stage("dp_utility").dvc_names()
