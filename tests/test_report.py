"""``eegprivacy report``: every number in a report's table is a metric of the run its row cites, synthetic rows
say so, and a study without runs gets a report that says so (exit 0, a warning)."""

from __future__ import annotations

import re
import shutil

import mlflow
import pytest

from eegprivacy.cli import main
from eegprivacy.tracking import log_metrics, required_tags, start_run
from eegprivacy.tracking.report import LABELS

NUMBER = re.compile(r"-?\d+\.\d+")


def _tables(text: str) -> list[dict[str, str]]:
    """The headline table's rows (the first Markdown table), as header -> cell."""
    lines = [line for line in text.split("## Runs")[0].splitlines() if line.startswith("|")]
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def _cited_runs(text: str) -> dict[str, str]:
    """short id -> full id, from the report's Runs section (``runs:/<id>``)."""
    return {full[:8]: full for full in re.findall(r"runs:/([0-9a-f]{32})", text)}


def check_report(path, uri: str) -> int:
    """Every table number is one of the cited run's metrics; every synthetic run's rows are marked. Returns the
    number of table rows."""
    text = path.read_text()
    assert f"]({path.with_suffix('.png').name})" in text and path.with_suffix(".png").stat().st_size > 0
    cited, client = _cited_runs(text), mlflow.MlflowClient(uri)
    rows = _tables(text)
    assert rows
    for row in rows:
        run = client.get_run(cited[row["run"]])  # the row's run is listed in full
        values = [v for v in run.data.metrics.values() if v == v]
        assert (run.data.tags["synthetic"] == "true") == ("SYNTHETIC" in row["dataset"]), row
        assert run.data.tags["dataset_version"][:12] == row["dataset version"]
        for header, cell in row.items():
            if header in LABELS:
                continue
            for number in NUMBER.findall(cell):
                assert any(abs(float(number) - v) <= 5e-4 for v in values), (header, cell, row["run"])
    return len(rows)


def _parent_with_child(study: str, name: str, dataset: str, synthetic: bool, metrics: dict, **tags) -> str:
    """A hand-made sweep: one parent (aggregates) and one child (per-seed value), with the required tags."""
    common = dict(study=study, stage={"b": "federated_mia", "c": "embedding_audit"}[study], dataset=dataset,
                  dataset_version=("synthetic-" if synthetic else "") + "ab" * 32, synthetic=synthetic)
    with start_run(study=study, tags=required_tags(seed=None, **common, **tags), run_name=name) as parent:
        log_metrics(metrics)
        with start_run(study=study, tags=required_tags(seed=0, **common, **tags), run_name=f"{name}/0",
                       parent_run_id=parent.info.run_id):
            log_metrics({k.removesuffix("_mean"): v for k, v in metrics.items() if k.endswith("_mean")})
    return parent.info.run_id


def _hand_made_b_and_c() -> None:
    """A tiny study B (two ε) and study C (a real-data-tagged and a synthetic encoder run) in the current store."""
    for eps, auc in (("inf", 0.91), ("1", 0.55)):
        _parent_with_child("b", f"federated_mia-synthetic_mi-simplenet-eps{eps}", "synthetic_mi", True, {
            "attack_nan/attacker_nan/round_1.0/client_nan/utility_accuracy_mean": 0.61,
            "attack_nan/attacker_nan/round_2.0/client_nan/utility_accuracy_mean": 0.7,
            "attack_nan/attacker_nan/round_2.0/client_nan/utility_accuracy_ci_low": 0.65,
            "attack_nan/attacker_nan/round_2.0/client_nan/utility_accuracy_ci_high": 0.75,
            "attack_cla/attacker_lr/round_nan/client_nan/auroc_mean": auc,
            "attack_cla/attacker_lr/round_nan/client_nan/auroc_ci_low": auc - 0.04,
            "attack_cla/attacker_lr/round_nan/client_nan/auroc_ci_high": auc + 0.04,
            "attack_cla/attacker_rf/round_nan/client_nan/auroc_mean": auc - 0.1,
            "attack_rla_untrained_control/attacker_lr/round_0.0/client_nan/auroc_mean": 0.503,
        }, model="simplenet", epsilon=eps)
    for dataset, synthetic, l_a in (("eegmat", False, 0.42), ("synthetic_rest_task", True, 0.77)):
        base = "endpoint_aeds/split_subject_disjoint_reference_set/defense_none/attacker_none"
        _parent_with_child("c", f"embedding_audit-{dataset}-biot-self_pretrained", dataset, synthetic, {
            f"unit_aeds/{base}/l_a_mean": l_a, f"unit_aeds/{base}/aeds_mean": l_a - 0.3,
            "unit_identity/endpoint_identity/split_x/defense_none/attacker_centroid_cosine/bpid_at_1_mean": 0.163,
            "unit_identity/endpoint_identity/split_x/defense_none/attacker_centroid_cosine/bpid_at_1_ci_low": 0.1,
            "unit_identity/endpoint_identity/split_x/defense_none/attacker_centroid_cosine/bpid_at_1_ci_high": 0.2,
            "unit_membership/endpoint_membership_head/split_h/defense_none/attacker_lira_online/auc_mean": 0.766,
        }, encoder="biot", model="biot")


def test_report_b_c_from_hand_made_runs(tmp_path, monkeypatch, capsys):
    _hand_made_b_and_c()
    uri = mlflow.get_tracking_uri()
    out = tmp_path / "reports"
    assert main(["report", "--tracking-uri", uri, "--out-dir", str(out), "--study", "b,c"]) == 0
    assert check_report(out / "study-b.md", uri) == 2
    assert check_report(out / "study-c.md", uri) == 2
    b = (out / "study-b.md").read_text()
    assert "0.910 [0.870, 0.950] (lr)" in b and "0.700 [0.650, 0.750]" in b  # strongest attacker, last round
    assert "AUROC rla_untrained_control" in b and "0.503" in b  # the control next to the attack
    assert not (out / "study-a.md").exists()


def test_report_without_runs_says_so(tmp_path, capsys):
    out = tmp_path / "reports"
    (out).mkdir()
    (out / "study-b.png").write_bytes(b"stale")
    assert main(["report", "--out-dir", str(out)]) == 0
    for study in "abc":
        text = (out / f"study-{study}.md").read_text()
        assert "**No runs.**" in text and "|" not in text
        assert not (out / f"study-{study}.png").exists()  # a figure of earlier runs is not left to mislead
    assert capsys.readouterr().err.count("has no runs") == 3


def test_report_rejects_unknown_study(tmp_path, capsys):
    assert main(["report", "--out-dir", str(tmp_path), "--study", "a,x"]) == 2
    assert "unknown study" in capsys.readouterr().err


@pytest.mark.slow
def test_report_from_small_profile(small_pipeline, tmp_path, monkeypatch):
    """Study A from the small profile's runs, plus hand-made B and C runs, in a copy of its store."""
    store = tmp_path / "mlflow.db"
    shutil.copy(small_pipeline("a").root / "mlflow.db", store)
    uri = f"sqlite:///{store}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    _hand_made_b_and_c()
    out = tmp_path / "reports"
    assert main(["report", "--out-dir", str(out)]) == 0
    assert check_report(out / "study-a.md", uri) >= 4
    rows = _tables((out / "study-a.md").read_text())
    assert {(r["mechanism"], r["ε"]) for r in rows} >= {(m, e) for m in ("gaussian_analytic", "laplace_formal")
                                                          for e in ("1.0", "10.0")}  # the small profile grid
    check_report(out / "study-b.md", uri)
    check_report(out / "study-c.md", uri)
