"""Issue 36 (5): MLflow opens on the runs. Experiments carry the machine-learning kind, numbers are logged in one
text form (``params.epsilon = '10'`` finds ε = 10.0), an interrupted sweep's rerun reopens its FAILED runs instead of
leaving duplicates, and child runs are named by their config and seed."""

from __future__ import annotations

import math

import mlflow
import numpy as np
import pytest

from eegprivacy.pipeline.sweep import Cell, SweepRunner, expand_grid, run_names
from eegprivacy.tracking import EXPERIMENTS, required_tags, start_run, tracking_uri
from eegprivacy.tracking.runs import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, owner_tags, param_text


def _tags(seed=None, **extra):
    return required_tags(study="a", stage="toy", dataset="toy", dataset_version="v1", synthetic=True, seed=seed,
                         dvc_stage="toy@test", **extra)


def _runner(tmp_path, params=None, version="v1"):
    def tags(cell):
        return required_tags(study="a", stage="toy", dataset="toy", dataset_version=version, synthetic=True,
                             seed=cell.seed, dvc_stage="toy@test", epsilon=cell.config["epsilon"],
                             mechanism=cell.config["mechanism"])
    return SweepRunner(name="toy-sweep", study="a", dataset="toy", out_dir=tmp_path / "cells",
                       parent_tags=required_tags(study="a", stage="toy", dataset="toy", dataset_version=version,
                                                 synthetic=True, seed=None, dvc_stage="toy@test"),
                       tags_fn=tags, params=params or {"grid": {"epsilon": [1.0, 10.0]}, "seeds": 2}, progress=False)


CELLS = expand_grid({"mechanism": ["gaussian_analytic"], "epsilon": [1.0, 10.0]}, seeds=[0, 1])


def _score(config, seed):
    return [{"metric": "score", "value": config["epsilon"] + seed}]


def _interrupted(at: int):
    """A cell function that raises KeyboardInterrupt (Ctrl-C) in its ``at``-th call."""
    calls = []

    def cell_fn(config, seed):
        calls.append(seed)
        if len(calls) == at:
            raise KeyboardInterrupt
        return _score(config, seed)
    return cell_fn


def _runs():
    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENTS["a"])
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


@pytest.mark.parametrize("value, text", [
    (10.0, "10"), (10, "10"), (0.5, "0.5"), (math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan"),
    (1e-05, "1e-05"), (1 / 3, "0.3333333333333333"), (1e16, "1e+16"), (-0.0, "0"), (np.float64(10.0), "10"),
    (np.float32(0.1), "0.1"), (np.int64(4), "4"), (True, "True"), (None, "None"), ("10.0", "10.0"),
    ([1.0, 10.0, "a"], "[1, 10, 'a']"), ((2.0,), "(2,)"), ({"b": 2.0}, "{'b': 2}"),
])
def test_param_text_writes_each_number_one_way(value, text):
    assert param_text(value) == text
    if isinstance(value, float) and not math.isnan(value):
        assert float(param_text(value)) == value  # read back exactly


def test_epsilon_is_logged_as_the_readme_filters_it(tmp_path):
    """``params.epsilon = '10'`` (README) finds a run whose config held 10.0; ε and δ tags are canonical too, also
    when given as text."""
    with start_run(study="a", tags={**_tags(0, epsilon=10.0, delta=1e-5), "mechanism": "gaussian_analytic"},
                   params={"epsilon": 10.0, "delta": 1e-5, "grid": {"epsilons": [1.0, 10.0]}}) as run:
        pass
    with start_run(study="a", tags={**_tags(0), "epsilon": "1.0", "delta": "0.0"}) as other:
        pass
    client = mlflow.MlflowClient(tracking_uri())
    stored = client.get_run(run.info.run_id)
    assert stored.data.params == {"epsilon": "10", "delta": "1e-05", "grid.epsilons": "[1, 10]"}
    assert stored.data.tags["epsilon"] == "10" and stored.data.tags["delta"] == "1e-05"
    assert client.get_run(other.info.run_id).data.tags["epsilon"] == "1"
    assert client.get_run(other.info.run_id).data.tags["delta"] == "0"
    found = client.search_runs([stored.info.experiment_id],
                               "tags.mechanism = 'gaussian_analytic' and params.epsilon = '10'")
    assert [r.info.run_id for r in found] == [run.info.run_id]
    assert float(stored.data.params["epsilon"]) == 10.0


def test_experiments_open_on_the_runs_table(tmp_path):
    """New experiments get ``mlflow.experimentKind = custom_model_development``; an existing one without it gets
    it on the next run; a kind a person chose is kept."""
    client = mlflow.MlflowClient(tracking_uri())
    client.create_experiment(EXPERIMENTS["b"])  # made before the kind was set, e.g. by an older version
    client.create_experiment(EXPERIMENTS["c"], tags={EXPERIMENT_KIND_TAG: "genai_development"})
    for study in ("a", "b", "c"):
        with start_run(study=study, tags=_tags()):
            pass
    kinds = {s: client.get_experiment_by_name(EXPERIMENTS[s]).tags.get(EXPERIMENT_KIND_TAG) for s in "abc"}
    assert kinds == {"a": EXPERIMENT_KIND, "b": EXPERIMENT_KIND, "c": "genai_development"}
    assert EXPERIMENT_KIND == "custom_model_development"


def test_interrupted_sweep_reruns_into_its_own_runs(tmp_path):
    """Ctrl-C in the third cell leaves the parent and that cell's child KILLED; the rerun reopens both, so the store
    holds one parent and one child per cell, all FINISHED."""
    runner = _runner(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        runner.run(CELLS, _interrupted(at=3))
    client, parents, children = _runs()
    assert sorted(r.info.status for r in parents + children) == ["FINISHED", "FINISHED", "KILLED", "KILLED"]

    tidy = runner.run(CELLS, _score)
    client, parents, children = _runs()
    assert len(parents) == 1 and len(children) == len(CELLS) and len(tidy) == len(CELLS)
    assert {r.info.status for r in parents + children} == {"FINISHED"}
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert len({r.info.run_name for r in children}) == len(CELLS)
    parent = parents[0]
    assert parent.data.tags["resumed"] == "1" and parent.data.metrics["cells_resumed"] == 2
    assert sorted(r.data.tags.get("resumed", "0") for r in children) == ["0", "0", "0", "1"]
    interrupted = next(r for r in children if r.data.tags.get("resumed"))
    assert interrupted.info.run_name == "toy-sweep · mechanism=gaussian_analytic ε=10 seed=0"
    assert interrupted.data.params == {"mechanism": "gaussian_analytic", "epsilon": "10", "seed": "0"}
    assert interrupted.data.metrics["score"] == 10.0
    assert len(client.get_run(interrupted.info.run_id).inputs.dataset_inputs) == 1  # not logged twice

    # a finished sweep is never reopened: its rerun is a new parent (as before), and that one, interrupted twice,
    # is reopened each time with its one recomputed cell
    (tmp_path / "cells" / f"{CELLS[-1].key}.csv").unlink()
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            runner.run(CELLS, _interrupted(at=1))
    runner.run(CELLS, _score)
    client, parents, children = _runs()
    assert {r.info.status for r in parents + children} == {"FINISHED"}
    rerun = next(r for r in parents if r.info.run_id != parent.info.run_id)
    assert len(parents) == 2 and rerun.data.tags["resumed"] == "2"
    [child] = [r for r in children if r.data.tags["mlflow.parentRunId"] == rerun.info.run_id]
    assert child.data.tags["resumed"] == "2" and child.info.run_name.endswith("ε=10 seed=1")


def test_a_different_config_starts_new_runs(tmp_path):
    """A rerun whose parent params or convention tags differ does not reopen the FAILED runs; they stay."""
    with pytest.raises(KeyboardInterrupt):
        _runner(tmp_path).run(CELLS, _interrupted(at=2))
    _runner(tmp_path / "other", params={"grid": {"epsilon": [1.0, 10.0]}, "seeds": 3}).run(CELLS, _score)
    _, parents, children = _runs()
    assert sorted(r.info.status for r in parents) == ["FINISHED", "KILLED"]
    assert sorted(r.info.status for r in children) == ["FINISHED"] * (len(CELLS) + 1) + ["KILLED"]
    assert not any("resumed" in r.data.tags for r in parents + children)

    # another dataset version: same name and params, other tags
    with start_run(study="a", tags=_tags(), run_name="one", params={"epsilon": 1.0}):
        pass
    with pytest.raises(RuntimeError), start_run(study="a", tags=_tags(), run_name="two", params={"x": 1}):
        raise RuntimeError("a crash ends the run FAILED")
    with start_run(study="a", tags={**_tags(), "dataset_version": "v2"}, run_name="two", params={"x": 1}) as run:
        pass
    assert "resumed" not in run.data.tags
    # a param that differs
    with start_run(study="a", tags=_tags(), run_name="two", params={"x": 2}) as run:
        pass
    assert "resumed" not in run.data.tags
    # the same run again: reopened (an equal param logged again is fine)
    with start_run(study="a", tags=_tags(), run_name="two", params={"x": 1}) as run:
        pass
    assert run.data.tags["resumed"] == "1"
    client, _, _ = _runs()
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_a_failed_run_of_a_live_process_is_not_taken_over(tmp_path):
    """A FAILED run whose owner is another live process (pid 1 never exits) or another host is left alone."""
    with start_run(study="a", tags=_tags()):  # creates the experiment
        pass
    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENTS["a"]).experiment_id
    mine = owner_tags()
    for name, owner in (("live", {**mine, "owner_pid": "1", "owner_start": ""}),
                        ("elsewhere", {**mine, "owner_host": "0" * 16}), ("nobody", {})):
        run = client.create_run(experiment, tags={**_tags(), **owner}, run_name=name)
        client.set_terminated(run.info.run_id, status="FAILED")
        with start_run(study="a", tags=_tags(), run_name=name) as again:
            pass
        assert again.info.run_id != run.info.run_id, name


def test_child_run_names_are_readable_and_unique():
    names = run_names("audit_cohort-bids-utility-gaussian_analytic", expand_grid(
        {"mechanism": ["gaussian_analytic"], "epsilon": [1.0, 10.0, math.inf]}, seeds=[3],
        base={"clip_norm": 1.0, "code_hash": "f" * 40, "grid": [1, 2]}))
    assert sorted(names.values()) == [f"audit_cohort-bids-utility-gaussian_analytic · mechanism=gaussian_analytic "
                                      f"ε={e} seed=3" for e in ("1", "10", "inf")]
    # keys that vary between cells are named too; values too long to read are left out, and cells that would share
    # a name get their key's first 6 characters
    cells = [Cell({"protocol": "loso", "path": "a" * 30}, 0), Cell({"protocol": "kfold", "path": "a" * 30}, 0),
             Cell({"protocol": "loso", "path": "b" * 30}, 1), Cell({"protocol": "loso", "path": "c" * 30}, 1)]
    names = run_names("s", cells)
    assert names[cells[0].key] == "s · protocol=loso seed=0" and names[cells[1].key] == "s · protocol=kfold seed=0"
    assert names[cells[2].key] == f"s · protocol=loso seed=1 #{cells[2].key[:6]}"
    assert len(set(names.values())) == len(cells)
    assert all(len(n) <= 250 for n in run_names("x" * 300, cells).values())
