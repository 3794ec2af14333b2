"""Default settings shipped inside the package, so a tool installed from a wheel (``audit-cohort``) runs from any
folder without a checkout. ``features.yaml`` is a copy of the repository's ``params/features.yaml`` (DVC's params
file for the pipeline's stages); ``tests/test_installed_tool.py`` fails when the two differ."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

FEATURES = "features.yaml"


@contextlib.contextmanager
def default_params(name: str = FEATURES) -> Iterator[Path]:
    """A real path to the packaged params file ``name`` while the context is open (the file may sit in a zip)."""
    with resources.as_file(resources.files(__name__) / name) as path:
        yield Path(path)
