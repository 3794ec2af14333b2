"""All-or-nothing file writes: a stage that fails, or is killed, leaves its previous outputs or none, never half.

Each output is written to a hidden temporary file beside it (same folder, so the final ``os.replace`` is an atomic
rename on one file system) and moved into place only when every output of the block was written.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _temporary(path: Path) -> Path:
    # Same suffix as the target, since writers such as matplotlib pick the format from it.
    return path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.tmp{path.suffix}")


@contextmanager
def atomic_paths(*paths: str | Path) -> Iterator[list[Path]]:
    """Temporary paths to write ``paths`` to; on success each replaces its target, on any error all are removed."""
    targets = [Path(p) for p in paths]
    temps = [_temporary(t) for t in targets]
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield temps
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise
    missing = [str(t) for t, tmp in zip(targets, temps) if not tmp.exists()]
    if missing:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise RuntimeError(f"nothing was written for {missing}; no output was replaced")
    for tmp, target in zip(temps, targets):
        os.replace(tmp, target)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """One temporary path for ``path`` (see :func:`atomic_paths`)."""
    with atomic_paths(path) as (tmp,):
        yield tmp


def write_text_atomic(path: str | Path, text: str) -> Path:
    """``Path.write_text`` that never leaves a truncated file behind."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


__all__ = ["atomic_path", "atomic_paths", "write_text_atomic"]
