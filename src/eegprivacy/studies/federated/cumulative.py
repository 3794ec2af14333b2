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
        return float(values.min()) if len(values) else float("nan")

    def text(self, dataset: str, model: str, eps: float, calibration: str = "nominal",
             metric: str = "epsilon_cumulative") -> str:
        v = self.value(dataset, model, eps, calibration, metric)
        return "∞" if v == math.inf else "n/a" if not math.isfinite(v) else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    def note(self) -> str:
        if self.rows is None:
            return "Cumulative ε: n/a (run `eegprivacy federated-accounting` first)."
        return ("ε per round = one round's local steps composed (nominal); "
                f"Σε = cumulative ε after all rounds at δ = {self.delta:g}, per example (one trial), worst case "
                "(its "
                "client joins every round), the tightest of basic/RDP/PLD (reports/federated_accounting.md); "
                "nominal takes the paper's per-step ε at face value, certified is what the noise guarantees "
                "(2·√d·ε per step, d = parameter count). Neither covers EEGNet's un-noised BatchNorm statistics.")
