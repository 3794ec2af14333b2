"""The notebooks in notebooks/ are committed without outputs; the study notebooks run top to bottom against a copy
of the small profile's MLflow store (study A's runs) with hand-made study B and C sweeps added, so every notebook
draws its figures, and against an empty store, where each must print its 'no runs' message."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
STUDY_NOTEBOOKS = ["study_a.ipynb", "study_b.ipynb", "study_c.ipynb"]  # 01_features needs the real eegmat features


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_is_stripped(path):
    notebook = json.loads(path.read_text())
    assert "widgets" not in notebook.get("metadata", {}), "widget state is committed"
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name} has outputs"


def test_study_notebooks_exist():
    assert all((NOTEBOOKS / name).exists() for name in STUDY_NOTEBOOKS)


def _execute(name: str) -> str:
    """Run one notebook; fail on any error output; return its printed text."""
    import nbclient
    import nbformat

    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    assert not any(o.get("output_type") == "error" for c in notebook.cells for o in c.get("outputs", [])), name
    return "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A python3 kernel spec of this interpreter, written for the test, so a user-level 'python3' spec elsewhere
    cannot pick another Python."""
    pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(tmp_path / "jupyter" / "kernels" / "python3")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("MPLBACKEND", "Agg")


@pytest.mark.slow
def test_study_notebooks_execute(small_pipeline, kernel, tmp_path, monkeypatch):
    from _hand_made_runs import hand_made_b_and_c

    store = tmp_path / "mlflow.db"
    shutil.copy(small_pipeline("a").root / "mlflow.db", store)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    hand_made_b_and_c()
    seconds = {}
    for name in STUDY_NOTEBOOKS:
        started = time.perf_counter()
        text = _execute(name)
        seconds[name] = round(time.perf_counter() - started, 1)
        assert "parent runs from" in text and "No finished" not in text, name
    print("notebook execution seconds:", seconds)


def test_study_notebooks_on_an_empty_store(kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'empty.db'}")
    for name in STUDY_NOTEBOOKS:
        assert "No finished" in _execute(name), name
