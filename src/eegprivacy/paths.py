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


def checkout_root() -> Path:
    """The checkout this package runs from (where its sources and experiments/ live), whatever the working
    directory; the working directory's repository when the package is installed elsewhere.

    The stage registry hashes the sources under it and the pipeline profile is read from it
    (:mod:`eegprivacy.pipeline.stages`, :mod:`eegprivacy.pipeline.profile`)."""
    import eegprivacy

    root = Path(eegprivacy.__file__).resolve().parents[2]
    return root if (root / "dvc.yaml").exists() else repo_root()


def data_root() -> Path:
    """Root of the real public data: ``$EEGPRIVACY_DATA`` if set, else ``<repo>/data/raw``."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return repo_root() / "data" / "raw"


def in_checkout() -> bool:
    """Whether the working directory lies in a checkout of this repository (a ``dvc.yaml`` above it), as opposed
    to anywhere a user runs the installed tool."""
    return (repo_root() / "dvc.yaml").exists()


def user_cache_dir() -> Path:
    """The per-user cache of an installed tool run outside a checkout: ``$XDG_CACHE_HOME/eegprivacy`` (else
    ``~/.cache/eegprivacy``), so no command writes a ``data/`` folder into whatever folder it is run from."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser().resolve() / "eegprivacy"


def cache_dir() -> Path:
    """Derived-data cache (file hashes, window features): ``$EEGPRIVACY_CACHE``, else ``<repo>/data/cache`` in a
    checkout, else the user cache (:func:`user_cache_dir`)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        path = Path(env).expanduser().resolve()
    else:
        path = repo_root() / "data" / "cache" if in_checkout() else user_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path
