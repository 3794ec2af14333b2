"""The notebooks in notebooks/ are committed without outputs, and the study notebooks run top to bottom against
the small profile's MLflow store (study A runs; B and C empty, so they must print their 'no runs' message)."""

from __future__ import annotations

import json
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


@pytest.mark.slow
def test_study_notebooks_execute(small_pipeline, tmp_path, monkeypatch):
    """Run each study notebook in a python3 kernel of this interpreter (a kernel spec written for the test, so a
    user-level 'python3' spec elsewhere cannot pick another Python); no cell may raise."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(tmp_path / "jupyter" / "kernels" / "python3")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{small_pipeline('a').root / 'mlflow.db'}")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    seconds = {}
    for name in STUDY_NOTEBOOKS:
        notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
        started = time.perf_counter()
        nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        seconds[name] = round(time.perf_counter() - started, 1)
        text = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
        assert not any(o.get("output_type") == "error" for c in notebook.cells for o in c.get("outputs", []))
        if name == "study_a.ipynb":
            assert "parent runs from" in text
        else:
            assert "No finished" in text, name
    print("notebook execution seconds:", seconds)
