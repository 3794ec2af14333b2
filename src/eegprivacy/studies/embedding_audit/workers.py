"""How study C's cells run in worker processes with the same numbers as in one: one thread per cell, and the
contexts shipped to each worker once.

:class:`AuditCells` is the cell function of every runner for :class:`~eegprivacy.pipeline.sweep.PrefetchedCells`.
It pickles as the path of a file holding the contexts, so a worker loads the embeddings once instead of receiving
them with every cell, and keeps each context's memo across the cells it computes.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from eegprivacy.studies.embedding_audit.cells import bridge_rows, core_rows, defense_rows


@contextlib.contextmanager
def one_thread():
    """A cell runs on one BLAS / OpenMP / torch thread, in the main process and in a worker alike. Two workers then
    do not oversubscribe two cores (a BLAS thread waiting for a descheduled sibling slows ridge fits many times),
    and the numbers depend neither on ``--jobs`` nor on the machine's core count: how a BLAS reduction is split
    over threads changes the last bits of ridge and PCA results."""
    import scipy.linalg  # noqa: F401  (load every BLAS and OpenMP library first, so the limit reaches them)
    import sklearn.linear_model  # noqa: F401
    import torch
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


# What a process has loaded from an ``AuditCells`` file (only the latest one): a worker reads the contexts once and
# keeps each Context's memo across the cells it computes.
_LOADED: dict[str, dict] = {}


class AuditCells:
    """The cell function of every runner (audit units and bridge pairs) for ``PrefetchedCells``.

    It pickles as the path of a file holding the contexts, so a worker loads the embeddings once instead of
    receiving them with every cell. Use it as a context manager: leaving it drops this process's copy."""

    def __init__(self, contexts: dict, bridge: dict, folder: Path):
        import joblib

        self.path = str(Path(folder) / "contexts.joblib")
        shared = {"contexts": contexts, "bridge": bridge}
        joblib.dump(shared, self.path)
        _LOADED.clear()
        _LOADED[self.path] = shared

    def __enter__(self) -> AuditCells:
        return self

    def __exit__(self, *exc) -> None:
        _LOADED.pop(self.path, None)

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]

    def _shared(self) -> dict:
        if self.path not in _LOADED:
            import joblib

            shared = joblib.load(self.path)
            for (encoder, weights), ctx in shared["contexts"].items():
                ctx.shared = Path(self.path).parent / f"{encoder}-{weights}"
                ctx.shared.mkdir(exist_ok=True)
            _LOADED.clear()
            _LOADED[self.path] = shared
        return _LOADED[self.path]

    def __call__(self, config: dict, seed: int) -> list[dict]:
        shared = self._shared()
        with one_thread():
            if "unit" not in config:  # a bridge pair
                return bridge_rows(config, seed, **shared["bridge"])
            ctx = shared["contexts"][(config["encoder"], config["weights"])]
            unit = config["unit"]
            rows = defense_rows(unit, seed, ctx) if unit.startswith("defense/") else core_rows(unit, seed, ctx)
        for r in rows:
            r["unit"] = unit
        return rows
