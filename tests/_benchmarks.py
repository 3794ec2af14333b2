"""Load a module of benchmarks/ by file path: opacus installs its own top-level `benchmarks` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module of its own (never the `benchmarks` package opacus ships)."""
    spec = importlib.util.spec_from_file_location(f"_eegprivacy_bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
