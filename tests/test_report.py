"""``eegprivacy report``: every number in a report's table is a metric of the run its row cites, synthetic rows
say so, and a study without runs gets a report that says so (exit 0, a warning)."""

from __future__ import annotations

import re
import shutil

import mlflow
import pytest
from _hand_made_runs import hand_made_b_and_c

from eegprivacy.cli import main
from eegprivacy.reporting.study_reports import LABELS

NUMBER = re.compile(r"-?\d+\.\d+")


def _tables(text: str) -> list[dict[str, str]]:
    """The headline table's rows (the first Markdown table), as header -> cell."""
    lines = []
    for line in text.split("## Runs")[0].splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:  # the first table ended (study A's utility horizons follow in a table of their own)
            break
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def _cited_runs(text: str) -> dict[str, str]:
    """short id -> full id, from the report's Runs section (``runs:/<id>``)."""
    return {full[:8]: full for full in re.findall(r"runs:/([0-9a-f]{32})", text)}


def check_report(path, uri: str) -> int:
    """Every table number is one of the cited run's metrics; every synthetic run's rows are marked. Returns the
    number of table rows. Exceptions the report states: a p_Holm the run does not log (computed from its metrics,
    see the caption) and a bound of an interval marked ``clipped`` (the metric's range)."""
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
        logs_p = any(name.endswith(("_p_holm", "_p_adjusted")) for name in run.data.metrics)
        for header, cell in row.items():
            if header in LABELS:
                continue
            if not logs_p:
                cell = re.sub(r"\(p_(?:Holm|adj) [^)]*\)", "", cell)
            if "clipped" in cell:
                values = [*values, 0.0, 1.0]
            for number in NUMBER.findall(cell):
                assert any(abs(float(number) - v) <= 5e-4 for v in values), (header, cell, row["run"])
    return len(rows)


def test_report_b_c_from_hand_made_runs(tmp_path, monkeypatch, capsys):
    hand_made_b_and_c()
    uri = mlflow.get_tracking_uri()
    out = tmp_path / "reports"
    assert main(["report", "--tracking-uri", uri, "--out-dir", str(out), "--study", "b,c"]) == 0
    assert check_report(out / "study-b.md", uri) == 2
    assert check_report(out / "study-c.md", uri) == 2
    b = (out / "study-b.md").read_text()
    rows = _tables(b)
    assert [r["AUROC cla (lr)"] for r in rows if r["ε"] == "inf"] == ["0.910 [0.870, 0.950]"]
    assert [r["AUROC cla (rf)"] for r in rows if r["ε"] == "inf"] == ["0.810"]  # every attacker, not the strongest
    assert all(r["utility accuracy"] == "0.700 [0.650, 0.750]" for r in rows)  # last round
    assert all(r["CI over"] == "seeds" for r in rows)  # no n logged: no t(n−1), no test
    assert "AUROC rla_untrained_control (lr)" in b and "0.503" in b  # the control next to the attack
    assert "multiple-comparison correction: Holm" in b
    c = (out / "study-c.md").read_text()
    assert all(r["CI over"] == "as logged" for r in _tables(c))  # the hand-made runs do not say
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
    hand_made_b_and_c()
    out = tmp_path / "reports"
    assert main(["report", "--out-dir", str(out)]) == 0
    assert check_report(out / "study-a.md", uri) >= 4
    rows = _tables((out / "study-a.md").read_text())
    assert {(r["mechanism"], r["ε"]) for r in rows} >= {(m, e) for m in ("gaussian_analytic", "laplace_formal")
                                                          for e in ("1", "10")}  # the small profile grid
    text = (out / "study-a.md").read_text()
    assert "matched null AUROC" in text and "− null AUROC" in text and "p_adj" in text
    assert "## Utility horizons" in text and "fixed sequence from the largest ε, α/m per mechanism" in text
    assert "features only: the scaling statistics are fitted on the private patients outside ε" in text
    check_report(out / "study-b.md", uri)
    check_report(out / "study-c.md", uri)


# An absolute path in a committed report is the writer's machine: a sqlite URI with four slashes, a file URI, a
# Windows drive, or a path under the usual top-level folders of a home, a mount or a container.
ABSOLUTE_PATH = re.compile(r"sqlite:////|file:///|\b[A-Za-z]:\\|(?<![\w.~-])/(?:home|root|tmp|work|Users|mnt|srv|"
                           r"var|opt|private|data|scratch|media)/")


def test_committed_reports_name_no_absolute_path():
    """Committed reports read the same on every machine (issue 49): no writer's absolute path in any
    reports/*.md."""
    from pathlib import Path

    reports = sorted((Path(__file__).resolve().parents[1] / "reports").rglob("*.md"))
    assert reports
    found = [f"{path.name}: {match.group(0)!r}" for path in reports
             for match in ABSOLUTE_PATH.finditer(path.read_text(encoding="utf-8"))]
    assert found == []


def test_report_prints_the_store_relative_to_the_repository(tmp_path):
    """The generator writes a store inside the checkout as the conventions name it (``sqlite:///mlflow.db``,
    relative to the repository), a server without its credentials, and anything else as configured."""
    from pathlib import Path

    import pandas as pd

    from eegprivacy.reporting.study_reports import render

    repo = Path(__file__).resolve().parents[1]
    for uri, shown in ((f"sqlite:///{repo / 'mlflow.db'}", "sqlite:///mlflow.db"),
                       (f"sqlite:///{repo / 'stores' / 'a.db'}", "sqlite:///stores/a.db"),
                       ("http://alice:s3cret@127.0.0.1:5000", "http://127.0.0.1:5000"),
                       ("sqlite:///mlflow.db", "sqlite:///mlflow.db")):
        text = render("a", pd.DataFrame(), uri, None)
        assert f"store `{shown}`" in text and f"tracking store {shown}." in text, (uri, text)
        assert str(repo) not in text and "s3cret" not in text
