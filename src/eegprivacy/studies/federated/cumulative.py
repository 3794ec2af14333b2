"""Cumulative ε of study B's runs, read back from federated-accounting's rows for the reports."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd


class Cumulative:
    """Cumulative ε after the run's rounds, read from federated-accounting's rows: per example, worst case (a
    client may join every round), the tightest of the accountants that gave a number, for both calibrations.
    Without the rows every lookup says so ("n/a") rather than inventing a number."""

    def __init__(self, path: str | None):
        self.rows = None
        if path and Path(path).exists():
            rows = pd.read_csv(path)
            rows = rows[rows["metric"].isin(["epsilon_cumulative", "epsilon_per_round"])
                        & (rows["protocol"] == "params")
                        & (rows["unit"] == "example") & (rows["rounds_basis"] == "worst_case")]
            self.rows = rows
            self.delta = float(rows["delta"].iloc[0]) if len(rows) else float("nan")

    def value(self, dataset: str, model: str, eps: float, calibration: str,
              metric: str = "epsilon_cumulative") -> float:
        """``metric``: "epsilon_cumulative" (after all rounds) or "epsilon_per_round" (one round's steps)."""
        if self.rows is None:
            return float("nan")
        hit = self.rows[(self.rows["metric"] == metric) & (self.rows["dataset"] == dataset)
                        & (self.rows["model"] == model)
                        & (self.rows["calibration"] == calibration)
                        & np.isclose(self.rows["epsilon"].astype(float), float(eps))]
        if not math.isfinite(float(eps)):
            return math.inf
        values = hit["value"].dropna()
        return float(values.min()) if len(values) else float("nan")  # an un-noised channel: every value is ∞

    def channel(self, dataset: str, model: str) -> str:
        """The un-noised channel that voids a model's guarantee ("" when none), from the accounting rows."""
        if self.rows is None or "unnoised_channel" not in self.rows:
            return ""
        hit = self.rows[(self.rows["dataset"] == dataset) & (self.rows["model"] == model)]
        names = sorted({str(c) for c in hit["unnoised_channel"].dropna() if str(c)})
        return ",".join(names)

    def text(self, dataset: str, model: str, eps: float, calibration: str = "nominal",
             metric: str = "epsilon_cumulative") -> str:
        v = self.value(dataset, model, eps, calibration, metric)
        if v == math.inf and math.isfinite(float(eps)):
            return f"∞ (none: {self.channel(dataset, model) or 'un-noised channel'})"
        return "∞" if v == math.inf else "n/a" if not math.isfinite(v) else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    def note(self) -> str:
        if self.rows is None:
            return "Cumulative ε: n/a (run `eegprivacy federated-accounting` first)."
        return ("ε per round = one round's local steps composed (nominal); "
                f"Σε = cumulative ε after all rounds at δ = {self.delta:g}, per example (one trial) = per client (CSP "
                "and its scaling are fitted on the client's private trials, so one trial moves all its client's "
                "features), worst case (the client joins every round), the tightest of basic/RDP/PLD "
                "(reports/federated_accounting.md); nominal takes the paper's per-step ε at face value, certified "
                "is what the noise guarantees (2·√d·ε per step, d = parameter count). A DP client sends only its "
                "noised trainable parameters and its example count; EEGNet's BatchNorm statistics stay on the "
                "client (FedBN). ∞ (none: channel) marks a configuration where a channel travels un-noised.")
