"""The small profile run twice (two cell caches, two MLflow stores, two random linkage keys) writes identical
metric tables, headline JSONs and plot data."""

from __future__ import annotations

import json

import pandas as pd
import pytest


def _tables(root):
    return sorted(p.relative_to(root) for folder in ("metrics", "plots") for p in (root / folder).rglob("*")
                  if p.suffix in {".csv", ".json"})


@pytest.mark.slow
def test_small_profile_twice_gives_identical_tables(small_pipeline):
    first, second = small_pipeline("a").root, small_pipeline("b").root
    tables = _tables(first)
    assert tables == _tables(second)
    names = {p.name for p in tables}
    for stage in ("dp_release_synthetic_clinical.csv", "dp_utility_synthetic_clinical.csv", "dp_release.json",
                  "dp_scaling_synthetic_clinical.csv", "dp_scaling.json", "table_attacks_synthetic_rest_task.csv",
                  "dp_scenarios_synthetic_clinical.csv", "linkage.csv", "dp_audit.csv", "dp_audit.json",
                  "dp_balanced_accuracy.csv", "features_synthetic_clinical.json"):
        assert stage in names, stage

    for name in tables:
        if name.suffix == ".csv":
            a = pd.read_csv(first / name, float_precision="round_trip")
            b = pd.read_csv(second / name, float_precision="round_trip")
            assert len(a) > 0, name
            pd.testing.assert_frame_equal(a, b, check_exact=True, obj=str(name))
        else:
            assert json.loads((first / name).read_text()) == json.loads((second / name).read_text()), name
        # byte for byte, too: DVC hashes the files
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
