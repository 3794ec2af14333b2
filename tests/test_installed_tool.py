"""``eegprivacy audit-cohort`` as a data steward gets it: a wheel built from this checkout, installed into a fresh
virtual environment and run from an empty folder, with no checkout, no params/ folder and no repository around it.

The fresh environment gets the wheel alone (``pip install --no-deps``); its dependencies (torch, MNE, MLflow, ...)
come from this project's environment through a ``.pth`` line, which adds their folder to ``sys.path`` without
running the editable install's finder there, so ``import eegprivacy`` resolves to the wheel (asserted). Installing
the full stack from the registries again would cost minutes and gigabytes on every CI run and test nothing of ours.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from _cohort_audit_data import TREE_KEY, MiniMSU

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--epsilons", "1", "10", "--mechanisms", "gaussian_analytic", "--noise-seeds", "2", "--baseline-seeds", "2",
         "--permutations", "3", "--nested-seeds", "1", "--bootstrap", "400", "--membership-trials", "4", "--jobs", "2",
         "--no-progress"]


def test_packaged_feature_params_are_the_pipelines():
    """The installed tool's feature settings (``eegprivacy/defaults/features.yaml``) are the pipeline's
    ``params/features.yaml``, byte for byte: copy the latter over the former after editing it."""
    from eegprivacy.defaults import default_params

    with default_params() as packaged:
        assert packaged.read_bytes() == (REPO / "params" / "features.yaml").read_bytes(), (
            "src/eegprivacy/defaults/features.yaml differs from params/features.yaml; copy params/features.yaml over it")


# Third-party modules the user commands import only for a feature they do not use by default: the wheel need not
# install them (each names the feature; a steward who wants it installs it).
OPTIONAL_IMPORTS = {"ray": "sweeps on a Ray cluster (--executor ray)",
                    "opendp": "exact samplers for releasing real data (sampler='opendp')",
                    "dp_accounting": "the DP-SGD accounting of study B's federated training"}
# The modules behind the user commands audit-cohort and to-bids (everything they import, at any depth).
USER_COMMANDS = ("eegprivacy.commands.audit_cohort", "eegprivacy.data.bids")


def _third_party_imports(roots: tuple[str, ...]) -> dict[str, set[str]]:
    """Top-level third-party module -> the package modules importing it (at module level or inside a function),
    over every package module ``roots`` import, at any depth; read from the sources, nothing is imported."""
    import ast

    source = REPO / "src"
    seen, found, todo = set(), {}, list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = source.joinpath(*name.split("."))
        path = path / "__init__.py" if (path / "__init__.py").exists() else path.with_suffix(".py")
        if not path.exists():  # an attribute imported from a module (``from eegprivacy.x import y``)
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for imported in names:
                top = imported.split(".")[0]
                if top == "eegprivacy":
                    todo.append(imported)
                elif top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(name)
    return found


def _installed_with_the_wheel() -> set[str]:
    """The distributions ``pip install`` of the wheel brings: pyproject's dependencies and, read from this
    environment's metadata, everything they require (extras left out), normalised names."""
    import importlib.metadata as metadata
    import re
    import tomllib

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    def name_of(requirement: str) -> str:
        return norm(re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0])

    todo = [name_of(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    closure = set()
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [name_of(r) for r in requires if "extra ==" not in r]
    return closure


def test_the_wheel_installs_what_the_user_commands_import():
    """``pip install`` of the wheel alone gives a working audit-cohort and to-bids (issue 49: diffprivlib, which the
    default Gaussian mechanism calibrates with, was missing, and the audit stopped with ModuleNotFoundError): every
    third-party module their code imports is installed with the wheel, except the optional ones listed with their
    feature. The fresh environment of the test below borrows this checkout's packages, so it cannot see this."""
    import importlib.metadata as metadata

    installed = _installed_with_the_wheel()
    modules = metadata.packages_distributions()
    missing = {}
    for module, users in sorted(_third_party_imports(USER_COMMANDS).items()):
        if module in OPTIONAL_IMPORTS:
            continue
        dists = {d.lower().replace("_", "-") for d in modules.get(module, [module])}
        if not dists & installed:
            missing[module] = sorted(users)[:3]
    assert missing == {}, f"imported by the user commands, not installed with the wheel: {missing}"
    assert "diffprivlib" in _third_party_imports(USER_COMMANDS)  # the scan reads lazy imports too


def _fresh_environment(tmp: Path) -> Path:
    """Build the wheel from a copy of the sources (the checkout gets no build/ folder) and install it alone into a
    new virtual environment; returns its bin/ folder."""
    source = tmp / "source"
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    [wheel] = (tmp / "dist").glob("eegprivacy-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, timeout=300)
    bin_dir = tmp / "venv" / "bin"
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    site = Path(subprocess.run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    (site / "_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return bin_dir


@pytest.mark.realdata
@pytest.mark.slow
def test_wheel_installs_and_audits_a_bids_tree_from_an_empty_folder(tmp_path, data_root):
    from eegprivacy.data.bids import to_bids

    bin_dir = _fresh_environment(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EEGPRIVACY_DATA", str(data_root))
        to_bids(MiniMSU(3), tmp_path / "bids", format="EDF", key=TREE_KEY)
    empty, home, out = tmp_path / "empty", tmp_path / "home", tmp_path / "results"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "EEGPRIVACY_CACHE", "EEGPRIVACY_DATA", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), MPLBACKEND="Agg",
               PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")

    where = subprocess.run([str(bin_dir / "python"), "-c", "import eegprivacy; print(eegprivacy.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True).stdout
    assert Path(where).resolve().is_relative_to((tmp_path / "venv").resolve()), where

    helped = subprocess.run([str(bin_dir / "eegprivacy"), "--help"], cwd=empty, env=env, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and "audit-cohort" in helped.stdout
    assert "only in a checkout of the repository" in helped.stdout  # no stage without params/ and experiments/

    done = subprocess.run([str(bin_dir / "eegprivacy"), "audit-cohort", str(tmp_path / "bids"), str(out), "group",
                           "--label", "label", *SMALL], cwd=empty, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    assert list(empty.iterdir()) == [], "the audit wrote into the folder it was run from"
    assert {"report.html", "rows.csv", "summary.json", "mlflow.db"} <= {p.name for p in out.iterdir()}
    # the private work folder is in the user cache, not beside the shareable results
    assert not (out / "work").exists() and list((home / ".cache" / "eegprivacy" / "audit-cohort").iterdir())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cohort"]["n_patients"] == 6 and summary["dataset"] == "mini_msu"
    import mlflow

    run = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}").get_run(summary["mlflow_summary_run"])
    assert run.data.tags["git_commit"].startswith("eegprivacy==")  # the installed version, not "unknown"
    assert run.data.params["audit.features_params"] == "None"  # the packaged defaults

    listed = subprocess.run([str(bin_dir / "eegprivacy"), "datasets"], cwd=empty, env=env, capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert list(empty.iterdir()) == [], "`eegprivacy datasets` wrote into the folder it was run from"
