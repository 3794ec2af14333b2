"""The full profile (`make reproduce PROFILE=full`) overrides existing default-profile params, each to another value:
a renamed key would otherwise make `dvc exp run -S` add a new key that no stage reads."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def full_profile_overrides() -> list[tuple[str, str, str]]:
    makefile = (REPO / "Makefile").read_text()
    block = re.search(r"^FULL_PROFILE := \\\n((?:\t-S '[^']+'(?: \\)?\n)+)", makefile, re.M)
    assert block, "FULL_PROFILE block not found in the Makefile"
    overrides = re.findall(r"-S '([^:]+):([^=]+)=([^']*)'", block.group(1))
    assert len(overrides) == block.group(1).count("-S")
    return overrides


def test_every_full_profile_override_names_an_existing_param_and_changes_it():
    overrides = full_profile_overrides()
    assert len(overrides) >= 9
    for path, dotted, value in overrides:
        node = yaml.safe_load((REPO / path).read_text())
        # Hydra's `++key=value` replaces the value (a whole mapping, not a merge); the key must still exist.
        for part in dotted.removeprefix("++").split("."):
            assert isinstance(node, dict) and part in node, f"{path}: {dotted} does not exist"
            node = node[part]
        assert str(node) != value, f"{path}: {dotted} is already {value} in the default profile"
        if dotted.startswith("++"):
            assert isinstance(node, dict), f"{path}: {dotted} replaces a mapping; a scalar needs no ++"
