"""Study A figures on a small hand-made (synthetic) aggregate table: structure, labelling and the inf contract."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from eegprivacy.reporting.release_figures import (
    BASELINE_LABEL,
    CHANCE_LABEL,
    MECHANISM_COLOURS,
    confusion_matrices,
    intrinsic_vs_epsilon,
    plot_data,
    utility_vs_epsilon,
)

# SYNTHETIC: invented numbers, only the shape of the aggregate table is real.
EPS = (0.1, 1.0, 10.0)
MECHS = ("gaussian_analytic", "laplace_implemented", "laplace_formal")
COUNTS = {"none": (10.0, 2.0, 1.0, 4.0), "gaussian_analytic": (8.4, 3.6, 2.2, 2.8),
          "laplace_implemented": (9.0, 3.0, 2.5, 2.5), "laplace_formal": (11.8, 0.2, 4.6, 0.4)}


def _row(mech, eps, protocol, metric, value, ci=0.05, chance=np.nan, dataset="synthetic_cohort"):
    low, high = (value - ci, value + ci) if ci is not None else (np.nan, np.nan)
    return dict(dataset=dataset, mechanism=mech, epsilon=eps, protocol=protocol, metric=metric, value=value,
                ci_low=low, ci_high=high, n=5, chance=chance)


def synthetic_agg(dataset="synthetic_cohort") -> pd.DataFrame:
    rows = []
    for protocol in ("optimistic", "nested"):
        rows.append(_row("none", np.inf, protocol, "balanced_accuracy", 0.8, chance=0.5, dataset=dataset))
        rows += [_row("none", np.inf, protocol, m, c, ci=None, dataset=dataset)
                 for m, c in zip(("tn", "fp", "fn", "tp"), COUNTS["none"])]
        for mech in MECHS:
            for eps in EPS:
                # laplace_formal has no CI anywhere: must draw a line without a band
                ci = None if mech == "laplace_formal" else 0.05
                rows.append(_row(mech, eps, protocol, "balanced_accuracy", 0.5 + 0.02 * np.log10(eps) + 0.2,
                                 ci=ci, chance=0.5, dataset=dataset))
                if eps == 10.0:
                    rows += [_row(mech, eps, protocol, m, c, ci=None, dataset=dataset)
                             for m, c in zip(("tn", "fp", "fn", "tp"), COUNTS[mech])]
    rows.append(_row("none", np.inf, "intrinsic", "correlation", 1.0, ci=None, dataset=dataset))
    rows.append(_row("none", np.inf, "intrinsic", "snr_db", np.inf, ci=None, dataset=dataset))
    for mech in MECHS:
        for eps in EPS:
            rows.append(_row(mech, eps, "intrinsic", "correlation", eps / (1 + eps), dataset=dataset))
            rows.append(_row(mech, eps, "intrinsic", "snr_db", 10 * np.log10(eps), dataset=dataset))
    return pd.DataFrame(rows)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _labels(ax) -> list[str]:
    return [line.get_label() for line in ax.lines]


def _save(fig, path):
    fig.savefig(path, dpi=60)
    assert path.stat().st_size > 0


@pytest.mark.parametrize("synthetic", [True, False])
def test_utility_vs_epsilon(tmp_path, synthetic):
    fig = utility_vs_epsilon(synthetic_agg(), title="balanced accuracy", synthetic=synthetic)
    assert len(fig.axes) == 2
    assert ("[SYNTHETIC DATA]" in fig._suptitle.get_text()) is synthetic
    for ax in fig.axes:
        labels = _labels(ax)
        for mech in MECHS:
            assert labels.count(mech) == 1
            line = ax.lines[labels.index(mech)]
            np.testing.assert_allclose(line.get_xdata(), EPS)
            assert line.get_color() == MECHANISM_COLOURS[mech]
        assert labels.count(BASELINE_LABEL) == 1 and labels.count(CHANCE_LABEL) == 1
        assert ax.lines[labels.index(CHANCE_LABEL)].get_ydata()[0] == 0.5
        assert ax.get_xscale() == "log"
        np.testing.assert_allclose(ax.get_xticks(), EPS)
        assert ax.get_legend() is None
    assert len(fig.legends) == 1  # legend once, at figure level
    _save(fig, tmp_path / "utility.png")


def test_nan_ci_draws_no_band():
    agg = synthetic_agg()
    only_formal = agg[(agg["mechanism"] == "laplace_formal") & (agg["protocol"] == "optimistic")]
    ax = utility_vs_epsilon(only_formal, protocols=("optimistic",)).axes[0]
    assert _labels(ax) == ["laplace_formal", CHANCE_LABEL]  # no baseline rows in this subset
    assert len(ax.collections) == 0 and len(ax.patches) == 0
    ax = utility_vs_epsilon(agg, protocols=("optimistic",)).axes[0]
    assert len(ax.collections) == 2  # bands for the two mechanisms with CIs; laplace_formal has none


def test_missing_protocols_and_mechanisms_are_skipped():
    agg = synthetic_agg()
    agg = agg[(agg["protocol"] != "nested") & (agg["mechanism"] != "laplace_implemented")]
    fig = utility_vs_epsilon(agg, protocols=("optimistic", "nested", "no_such_protocol"))
    assert len(fig.axes) == 1
    assert "laplace_implemented" not in _labels(fig.axes[0])
    with pytest.raises(ValueError, match="no rows"):
        utility_vs_epsilon(agg, protocols=("nested",))


@pytest.mark.parametrize("synthetic", [True, False])
def test_intrinsic_vs_epsilon(tmp_path, synthetic):
    fig = intrinsic_vs_epsilon(synthetic_agg(), title="intrinsic", synthetic=synthetic)
    assert len(fig.axes) == 2
    assert ("[SYNTHETIC DATA]" in fig._suptitle.get_text()) is synthetic
    corr, snr = fig.axes
    for ax in fig.axes:
        assert all(_labels(ax).count(m) == 1 for m in MECHS)
        assert ax.get_xscale() == "log"
    assert BASELINE_LABEL in _labels(corr)  # correlation 1.0 is finite: drawn
    assert BASELINE_LABEL not in _labels(snr)  # SNR inf: left out
    _save(fig, tmp_path / "intrinsic.png")


@pytest.mark.parametrize("synthetic", [True, False])
def test_confusion_matrices(tmp_path, synthetic):
    fig = confusion_matrices(synthetic_agg(), epsilon=10.0, protocol="optimistic", title="cm", synthetic=synthetic)
    assert len(fig.axes) == 1 + len(MECHS)
    assert ("[SYNTHETIC DATA]" in fig._suptitle.get_text()) is synthetic
    for ax, mech in zip(fig.axes, ("none", *MECHS)):
        tn, fp, fn, tp = COUNTS[mech]
        assert [t.get_text() for t in ax.texts] == [f"{v:.1f}" for v in (tn, fp, fn, tp)]
        assert ax.get_xlabel() == "predicted"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1"]
        assert ("ε = ∞" if mech == "none" else f"{mech}\nε = 10") in ax.get_title()
    assert fig.axes[0].get_ylabel() == "true"
    _save(fig, tmp_path / "confusion.png")


def test_confusion_matrices_skip_mechanisms_without_counts():
    fig = confusion_matrices(synthetic_agg(), epsilon=1.0)  # counts exist only at ε = 10: baseline alone
    assert len(fig.axes) == 1
    with pytest.raises(ValueError):
        confusion_matrices(synthetic_agg(), epsilon=1.0, protocol="no_such_protocol")


def test_plot_data_has_no_inf():
    agg = synthetic_agg()
    table = plot_data(agg, "balanced_accuracy", "optimistic")
    assert list(table.columns) == ["dataset", "mechanism", "epsilon", "value", "ci_low", "ci_high"]
    assert len(table) == 1 + len(MECHS) * len(EPS)
    numeric = table[["epsilon", "value", "ci_low", "ci_high"]].to_numpy(float)
    assert not np.isinf(numeric).any()
    assert table.loc[table["mechanism"] == "none", "epsilon"].isna().all()
    snr = plot_data(agg, "snr_db", "intrinsic")
    assert not np.isinf(snr[["epsilon", "value"]].to_numpy(float)).any()


@pytest.mark.parametrize("plot", [utility_vs_epsilon, intrinsic_vs_epsilon, confusion_matrices])
def test_mixed_datasets_raise(plot):
    mixed = pd.concat([synthetic_agg("cohort_a"), synthetic_agg("cohort_b")], ignore_index=True)
    with pytest.raises(ValueError, match="several datasets"):
        plot(mixed)


def test_duplicate_cells_raise():
    agg = synthetic_agg()
    with pytest.raises(ValueError, match="several rows"):
        utility_vs_epsilon(pd.concat([agg, agg.iloc[[5]]]))


def _utility_summary() -> pd.DataFrame:
    """A dp_utility summary of one dataset: baseline, the scaled and clipped table, control, a release and its null
    at three ε, a horizon."""
    rows = [("baseline", "none", np.inf, 0.8), ("clipped", "none", np.inf, 0.79),
            ("permuted", "permuted_labels", np.inf, 0.5)]
    rows += [(arm, "gaussian_analytic", e, v) for e, rel in ((1, 0.55), (5, 0.7), (20, 0.78))
             for arm, v in (("release", rel), ("matched_null", 0.5))]
    frame = pd.DataFrame([{"dataset": "msu_schizophrenia", "arm": a, "mechanism": m, "epsilon": e,
                           "protocol": p, "metric": metric, "value": v, "ci_low": v - 0.05, "ci_high": v + 0.05}
                          for a, m, e, v in rows
                          for p, metric in (("threshold_free", "auroc"), ("nested", "balanced_accuracy"))])
    horizon = {"dataset": "msu_schizophrenia", "arm": "horizon", "mechanism": "gaussian_analytic", "epsilon": np.inf,
               "protocol": "threshold_free", "metric": "auroc_horizon_epsilon", "value": 5.0, "ci_low": np.nan,
               "ci_high": np.nan}
    return pd.concat([frame, pd.DataFrame([horizon])], ignore_index=True)


def test_release_vs_null_draws_release_null_levels_and_horizon():
    from eegprivacy.reporting.release_figures import CLIPPED_LABEL, NULL_LABEL, release_vs_null

    fig = release_vs_null(_utility_summary())
    assert len(fig.axes) == 2  # AUROC and nested balanced accuracy for the one mechanism
    labels = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert {"release", NULL_LABEL, "non-private baseline", "label-permuted control", "utility horizon",
            CLIPPED_LABEL} <= labels
    top = fig.axes[0]
    release_line = next(line for line in top.lines if line.get_label() == "release")
    assert list(release_line.get_ydata()) == [0.55, 0.7, 0.78]
    assert any(line.get_label() == "utility horizon" and line.get_xdata()[0] == 5.0 for line in top.lines)
    with pytest.raises(ValueError, match="no release rows"):
        release_vs_null(_utility_summary().query("arm != 'release'"))
