"""Where things live. Every path the toolkit touches is derived here, never hard-coded elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "EEGPRIVACY_DATA"
CACHE_ENV = "EEGPRIVACY_CACHE"


def repo_root() -> Path:
    """The project root: the nearest parent holding ``dvc.yaml`` or ``pyproject.toml``, else the cwd."""
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "dvc.yaml").exists() or (candidate / "pyproject.toml").exists():
            return candidate
    return here


def data_root() -> Path:
    """Root of the real public data: ``$EEGPRIVACY_DATA`` if set, else ``<repo>/data/raw``."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return repo_root() / "data" / "raw"


def cache_dir() -> Path:
    """Derived-data cache (file hashes, window features): ``$EEGPRIVACY_CACHE`` else ``<repo>/data/cache``."""
    env = os.environ.get(CACHE_ENV)
    path = Path(env).expanduser().resolve() if env else repo_root() / "data" / "cache"
    path.mkdir(parents=True, exist_ok=True)
    return path
