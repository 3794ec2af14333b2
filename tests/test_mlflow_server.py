"""A tiny sweep logged to a real ``mlflow server`` on loopback, checked through the server's REST API only.

The rest of the suite uses a sqlite store in-process; this file covers what only a server shows: experiments get
the server's artifact destination (not a path on the client), artifacts go up through the server, and runs, tags,
params, metrics and dataset inputs come back through the REST API the UI itself uses. With a ``chromium`` binary
it also takes the UI's run-comparison screenshot ``reports/figures/mlflow_compare_runs.png``.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from _mlflow_server import serve, ui

from eegprivacy.pipeline.sweep import SweepRunner, expand_grid
from eegprivacy.tracking import EXPERIMENTS, REQUIRED_TAGS, required_tags

REPO = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO / "reports" / "figures" / "mlflow_compare_runs.png"
VERSION = "5e" * 32
FILTER = "tags.mechanism = 'gaussian_analytic' and params.epsilon = '10'"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``mlflow server`` on a free loopback port with a sqlite store and a served artifact destination."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    with serve(f"sqlite:///{folder / 'mlflow.db'}", folder) as base:
        yield base


def _cell(config: dict, seed: int) -> list[dict]:
    value = 1.0 / config["epsilon"] + 0.01 * seed
    return [{"metric": "rmse", "value": value, "ci_low": value - 0.1, "ci_high": value + 0.1}]


def _tags(seed, **extra):
    return required_tags(study="a", stage="dp_release", dataset="synthetic_clinical", dataset_version=VERSION,
                         synthetic=True, seed=seed, dvc_stage="dp_release@server_test", **extra)


@pytest.fixture(scope="module")
def sweep(server, tmp_path_factory):
    """2 ε × 2 seeds under one parent, logged through the server, plus one artifact on the parent."""
    folder = tmp_path_factory.mktemp("sweep")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", server)
        runner = SweepRunner(
            name="server_test", study="a", dataset="synthetic_clinical", out_dir=folder / "cells",
            parent_tags=_tags(None, mechanism="gaussian_analytic"),
            tags_fn=lambda cell: _tags(cell.seed, epsilon=cell.config["epsilon"], mechanism=cell.config["mechanism"]),
            params={"grid": {"epsilon": "1,10"}}, progress=False)
        tidy = runner.run(expand_grid({"epsilon": [1, 10]}, [0, 1], base={"mechanism": "gaussian_analytic"}), _cell)
        parent = mlflow.last_active_run().info.run_id
        note = folder / "sweep_summary.csv"
        tidy.to_csv(note, index=False)
        mlflow.MlflowClient(server).log_artifact(parent, str(note))
    experiment = ui.experiment_id(server, EXPERIMENTS["a"])
    return {"base": server, "experiment": experiment, "parent": parent, "runs": ui.search_runs(server, experiment)}


def test_server_holds_one_parent_and_its_children(sweep):
    runs = sweep["runs"]
    parents = [r for r in runs if "mlflow.parentRunId" not in ui.run_tags(r)]
    children = [r for r in runs if ui.run_tags(r).get("mlflow.parentRunId") == sweep["parent"]]
    assert [p["info"]["run_id"] for p in parents] == [sweep["parent"]]
    assert len(children) == 4 and len(runs) == 5
    for run in children:
        tags = ui.run_tags(run)
        for tag in (*REQUIRED_TAGS, "epsilon", "mechanism"):
            assert tags.get(tag), tag
        assert tags["synthetic"] == "true" and tags["dataset_version"] == VERSION
        assert {m["key"] for m in run["data"]["metrics"]} == {"rmse"}
        assert run["info"]["status"] == "FINISHED"
    assert sorted((ui.run_tags(r)["epsilon"], ui.run_tags(r)["seed"]) for r in children) == \
        [("1", "0"), ("1", "1"), ("10", "0"), ("10", "1")]
    parent_metrics = {m["key"]: m["value"] for m in parents[0]["data"]["metrics"]}
    assert parent_metrics["cells"] == 4
    assert parent_metrics["epsilon_10/rmse_mean"] == pytest.approx(0.105)


def test_filter_string_selects_the_expected_children(sweep):
    expected = sorted(r["info"]["run_id"] for r in sweep["runs"]
                      if ui.run_tags(r).get("epsilon") == "10" and "mlflow.parentRunId" in ui.run_tags(r))
    found = ui.search_runs(sweep["base"], sweep["experiment"], FILTER)
    assert len(expected) == 2
    assert sorted(r["info"]["run_id"] for r in found) == expected


def test_artifacts_are_served_from_the_server_destination(sweep):
    experiment = ui.rest(sweep["base"], f"/api/2.0/mlflow/experiments/get?experiment_id={sweep['experiment']}")
    # created without a client-side path, the experiment stores its artifacts where the server says
    assert experiment["experiment"]["artifact_location"].startswith("mlflow-artifacts:")
    listing = ui.rest(sweep["base"], f"/api/2.0/mlflow/artifacts/list?run_id={sweep['parent']}")
    assert [f["path"] for f in listing["files"]] == ["sweep_summary.csv"]
    assert int(listing["files"][0]["file_size"]) > 0


def test_dataset_inputs_are_in_the_run_json(sweep):
    for run in sweep["runs"]:
        (entry,) = run["inputs"]["dataset_inputs"]
        dataset = entry["dataset"]
        assert dataset["name"] == "synthetic_clinical"
        assert dataset["digest"] == VERSION[:36]
        assert dataset["source_type"] == "eegprivacy"
        assert '"uri": "eegprivacy:synthetic_clinical"' in dataset["source"]
        assert {t["key"]: t["value"] for t in entry["tags"]}["synthetic"] == "true"


def test_compare_page_screenshot(sweep, capsys):
    """The UI's comparison page of the sweep's children, rendered by headless Chromium through the script's CLI,
    as the README shows."""
    if ui.find_chromium() is None:
        pytest.skip("no chromium binary: apt-get install -y --no-install-recommends chromium (.ci/run does this "
                    "when it runs as root)")
    children = sorted(r["info"]["run_id"] for r in sweep["runs"] if "mlflow.parentRunId" in ui.run_tags(r))
    assert ui.main(["--url", sweep["base"], "--experiment", EXPERIMENTS["a"], "--out", str(SCREENSHOT)]) == 0
    printed = capsys.readouterr().out
    assert ui.compare_url(sweep["base"], children, [sweep["experiment"]]) in printed
    # the plot's axes are what differs between the runs (ε, seed) and their metric, as the README says
    assert "parallel-coordinates axes: ['epsilon', 'seed', 'rmse']" in printed
    assert SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert SCREENSHOT.stat().st_size > 20_000
    from PIL import Image

    with Image.open(SCREENSHOT) as image:
        assert image.size == (1600, 1000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the screenshot is (nearly) blank"


def test_compare_url_is_the_uis_route():
    """As the UI builds it (mlflow 3.x ``getCompareRunPageRoute``: JSON lists of run and experiment ids)."""
    import json
    import urllib.parse

    url = ui.compare_url("http://127.0.0.1:5000/", ["r1", "r2"], ["7"])
    route, query = url.split("#", 1)[1].split("?", 1)
    assert route == "/compare-runs" and url.startswith("http://127.0.0.1:5000/#/")
    fields = urllib.parse.parse_qs(query)
    assert json.loads(fields["runs"][0]) == ["r1", "r2"] and json.loads(fields["experiments"][0]) == ["7"]
