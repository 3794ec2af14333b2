"""Where a sweep's cells are computed: local processes (the default) or a Ray cluster.

A sweep's cells are pure functions ``cell_fn(config, seed) -> rows``. An executor only computes them and yields
each cell's rows in job order; the process that runs the sweep (the driver) keeps writing the cell files and the
MLflow runs itself (:class:`~eegprivacy.pipeline.sweep.PrefetchedCells`). So the workers never need the tracking
store or the linkage key, and the rows are identical whichever executor computed them: each cell runs on one
BLAS / OpenMP / torch thread in either, and is seeded by its config alone.

Choosing the executor
    One process-wide setting: :func:`configure`, which the ``eegprivacy`` command sets from its top-level flags
    ``--executor {local,ray}`` and ``--address``, so every stage that sweeps follows it without a flag of its own.
    Left unset (e.g. a stage run from Python), ``$EEGPRIVACY_EXECUTOR`` (``local`` or ``ray``) and
    ``$RAY_ADDRESS`` decide, which is also how ``dvc repro`` passes the choice on to its stage commands.

Local (:class:`LocalExecutor`)
    ``n_jobs`` loky processes (one BLAS thread each), or the driver itself when ``n_jobs`` is 1: the code path the
    sweeps always had.

Ray (:class:`RayExecutor`)
    Each cell is one Ray task declaring what it needs (1 CPU, ``memory`` bytes, a scheduling request only), so the
    cluster, not ``n_jobs``, decides how many run at once. A bounded window of tasks is submitted ahead and the
    results are gathered in job order, so the driver holds only that window's rows. A task whose worker or node
    dies is resubmitted by Ray, and one whose cell raises is retried too (``max_retries`` times in all); a cell
    that still fails raises :class:`CellFailedError` naming the cell. ``import ray`` happens on first use only,
    so the local path never pays for it.

    What reaches the workers: only the pickled cell function (once per sweep, through the object store) and each
    job's (config, seed). The task's runtime environment sets the one-thread limits and ``PYTHONPATH`` to the
    driver's checkout, which is where ``experiments/`` (the stages' cell functions) is imported from; it carries
    no secret. Each task also removes the linkage-key variables (``$EEGPRIVACY_LINKAGE_KEY``,
    ``$EEGPRIVACY_LINKAGE_KEY_FILE``) and ``$MLFLOW_TRACKING_URI`` (which may hold a database password) from its
    worker's environment before the cell runs, in case a node was started from a shell that had them. A cell that
    needs the key (the server-side scenario of ``dp-scenarios``) therefore cannot run on a worker: it reports
    that instead of failing, and the driver, which holds the key, computes that cell itself (on one BLAS thread,
    as a worker would), so a whole pipeline can run on Ray and the key still never leaves the driver.

    Across machines every node must run ``ray start`` from the same environment as the driver: the same pinned
    ``requirements.txt`` venv with ``eegprivacy`` installed, and the same repository checkout at the same path
    (nothing but pickles is shipped, and ``PYTHONPATH`` names the driver's path). Cells that read or write files
    by path (``embedding-audit``'s ``--work`` folder, ``federated-mia``'s per-cell arrays) additionally need that
    folder on a filesystem shared at the same path; the study A stages' cells need nothing but their arguments.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eegprivacy.pipeline.keys import config_key

log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
EXECUTOR_ENV = "EEGPRIVACY_EXECUTOR"
ADDRESS_ENV = "RAY_ADDRESS"
DEFAULT_TASK_MEMORY = 2**30  # 1 GiB: what a study-A cell needs with room to spare; a scheduling request, not a cap
DEFAULT_MAX_RETRIES = 3

# The variables loky's ``inner_max_num_threads=1`` sets in the local workers; torch reads OMP_NUM_THREADS when it
# is imported, so its intra-op pool has one thread as well.
ONE_THREAD_ENV = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                         "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")}
# Removed from a Ray worker's environment before any cell runs (see the module docstring).
WORKER_UNSET_ENV = ("EEGPRIVACY_LINKAGE_KEY", "EEGPRIVACY_LINKAGE_KEY_FILE", "MLFLOW_TRACKING_URI")

CellFn = Callable[[dict, int], list[dict]]


class CellFailedError(RuntimeError):
    """A cell failed on every attempt the executor allows, or was refused; the message names the cell."""


def describe_cell(config: Mapping[str, Any], seed: int) -> str:
    """The cell's key (its cell file's name) with its seed and config, for error messages."""
    return f"cell {config_key({**config, 'seed': seed})} (seed {seed}, config {dict(config)})"


LINKAGE_KEY_ENV = WORKER_UNSET_ENV[:2]


class LocalExecutor:
    """Cells in ``n_jobs`` loky processes with one BLAS/OpenMP thread each, or lazily in this process when
    ``n_jobs`` is 1 (the default executor).

    Loky keeps its worker processes for the next sweep of the same process, and a worker sees the environment of
    the moment it started. A cell that reads the linkage key from the environment (``dp-scenarios``' server-side
    scenario, on this machine only) would then miss a key set or changed later in the same process (a notebook,
    the test suite): when those variables differ from what the pool's workers started with, the pool is replaced.
    Only a digest of them is kept."""

    _pool_environment: str | None = None  # digest of the linkage-key variables the current pool started with

    @classmethod
    def _pool_for_this_environment(cls) -> None:
        import hashlib

        from joblib.externals.loky import reusable_executor

        digest = hashlib.sha256(repr([os.environ.get(k) for k in LINKAGE_KEY_ENV]).encode()).hexdigest()
        pool = getattr(reusable_executor, "_executor", None)
        if pool is not None and cls._pool_environment != digest:
            pool.shutdown(wait=True)  # started before this environment (or by code that is not ours)
        cls._pool_environment = digest

    def map(self, cell_fn: CellFn, jobs: Iterable[tuple[dict, int]], n_jobs: int = 1) -> Iterator[list[dict]]:
        """Each job's rows, in job order; with ``n_jobs`` > 1 the cells start computing now."""
        from joblib import Parallel, delayed, parallel_config

        jobs = list(jobs)
        if int(n_jobs) <= 1 or len(jobs) <= 1:
            return (cell_fn(config, seed) for config, seed in jobs)
        self._pool_for_this_environment()
        # One BLAS/OpenMP thread per worker (joblib sets the workers' thread limits when it starts them, at no
        # cost per cell): the processes already fill the cores, and more threads would only fight over them.
        # Workers ignore Ctrl-C and SIGTERM, which a terminal or a scheduler sends the whole process group: this
        # process meets them (its MLflow runs end KILLED) and stops the workers (loky kills them with SIGKILL).
        with parallel_config(backend="loky", inner_max_num_threads=1, initializer=_ignore_interrupts):
            return Parallel(n_jobs=int(n_jobs), return_as="generator")(
                delayed(cell_fn)(config, seed) for config, seed in jobs)


def _ignore_interrupts() -> None:
    """A local worker's start: SIGINT and SIGTERM ignored (the process that owns the pool handles them)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@dataclass(frozen=True)
class _Refusal:
    """What a Ray task returns instead of raising when its cell needs the linkage key: retrying on another worker
    cannot help, so the driver computes the cell (:meth:`RayExecutor._gather`)."""

    reason: str


def _run_cell(cell_fn: CellFn, config: dict, seed: int):
    """The Ray task: the cell's rows and the id of the node that computed them, on a worker stripped of secrets."""
    import ray

    from eegprivacy.privacy.linkage import MissingLinkageKeyError

    for name in WORKER_UNSET_ENV:
        os.environ.pop(name, None)
    try:
        rows = cell_fn(config, seed)
    except MissingLinkageKeyError as err:
        return _Refusal(f"{type(err).__name__}: {err}")
    return rows, ray.get_runtime_context().get_node_id()


def _run_in_driver(cell_fn: CellFn, config: dict, seed: int) -> list[dict]:
    """A cell computed by the driver on one BLAS/OpenMP thread, the limit its workers (and the local executor's
    processes) run under, so its rows are those a worker would have returned."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return cell_fn(config, seed)


def checkout_root() -> Path:
    """The folder that holds the ``experiments`` package the driver imports its stages from (the checkout)."""
    experiments = sys.modules.get("experiments")
    if experiments is not None and getattr(experiments, "__file__", None):
        return Path(experiments.__file__).resolve().parents[1]
    import eegprivacy

    return Path(eegprivacy.__file__).resolve().parents[2]  # src layout: <checkout>/src/eegprivacy


class RayExecutor:
    """Cells as Ray tasks on the cluster at ``address`` (``ray://HOST:PORT``, a GCS ``HOST:PORT`` or ``auto``).

    Parameters
    ----------
    address
        The cluster to connect to; ``None`` takes ``$RAY_ADDRESS``. There is no default cluster: starting a
        private one here would silently give the sweep this machine's cores only.
    memory
        Bytes of memory each task requests (a scheduling request, not a limit).
    max_retries
        Attempts after the first, for a task whose worker or node dies and for a cell that raises.
    window
        Tasks submitted ahead of the one the driver waits for; ``None`` is twice the cluster's CPUs (at least
        2), enough to keep every CPU busy while bounding the rows held on the driver.

    Attributes
    ----------
    task_nodes
        The Ray node id that computed each cell, in job order, over every ``map`` of this executor; ``"driver"``
        for a cell that needed the linkage key and was computed by the driver.
    """

    def __init__(self, address: str | None = None, *, memory: int = DEFAULT_TASK_MEMORY,
                 max_retries: int = DEFAULT_MAX_RETRIES, window: int | None = None):
        self.address = address or os.environ.get(ADDRESS_ENV)
        if not self.address:
            raise ValueError(f"the ray executor needs the cluster's address: --address ray://HEAD:10001 or "
                             f"${ADDRESS_ENV}")
        self.memory, self.max_retries, self.window = int(memory), int(max_retries), window
        self.task_nodes: list[str] = []

    def runtime_env(self) -> dict:
        """What every task's worker is started with: one thread per library and the driver's checkout on the
        path. Never a secret (see the module docstring)."""
        return {"env_vars": {**ONE_THREAD_ENV, "PYTHONPATH": str(checkout_root())}}

    def connect(self):
        """The ``ray`` module, connected to the cluster once per process (a connection this process already has
        is reused as it is)."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, logging_level=logging.WARNING)
        return ray

    def map(self, cell_fn: CellFn, jobs: Iterable[tuple[dict, int]], n_jobs: int = 1) -> Iterator[list[dict]]:
        """Each job's rows, in job order; the first window of tasks is submitted now. ``n_jobs`` is ignored: the
        cluster's CPUs set the parallelism."""
        jobs = [(dict(config), int(seed)) for config, seed in jobs]
        if not jobs:
            return iter(())
        ray = self.connect()
        task = ray.remote(_run_cell).options(num_cpus=1, memory=self.memory, max_retries=self.max_retries,
                                             retry_exceptions=True, runtime_env=self.runtime_env())
        function = ray.put(cell_fn)  # shipped once, not once per task
        cpus = int(ray.cluster_resources().get("CPU", 1))
        window = self.window or max(2, 2 * cpus)
        log.info("%d cells on the Ray cluster at %s (%d CPUs, %d tasks ahead)", len(jobs), self.address, cpus, window)
        queue, submitted = deque(jobs), deque()

        def submit() -> None:
            if queue:
                config, seed = queue.popleft()
                submitted.append((config, seed, task.remote(function, config, seed)))

        for _ in range(window):
            submit()
        return self._gather(ray, cell_fn, submitted, submit)

    def _gather(self, ray, cell_fn: CellFn, submitted: deque, submit: Callable[[], None]) -> Iterator[list[dict]]:
        try:
            while submitted:
                config, seed, ref = submitted.popleft()
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayError as err:  # the cell's own error, or its node's death, every time
                    cause = err.cause if isinstance(err, ray.exceptions.RayTaskError) else err
                    raise CellFailedError(f"{describe_cell(config, seed)} failed on Ray after "
                                          f"{self.max_retries + 1} attempts: {type(cause).__name__}: {cause}") \
                        from err
                submit()
                if isinstance(outcome, _Refusal):
                    log.warning("%s needs the linkage key, which Ray workers never get; computing it in the driver "
                                "(%s)", describe_cell(config, seed), outcome.reason)
                    rows, node = _run_in_driver(cell_fn, config, seed), "driver"
                else:
                    rows, node = outcome
                self.task_nodes.append(node)
                yield rows
        finally:  # the sweep stopped early (an error, or the driver gave up): do not leave tasks running
            for *_, ref in submitted:
                ray.cancel(ref)


Executor = LocalExecutor | RayExecutor

_current: Executor | None = None


def make_executor(name: str, *, address: str | None = None, memory: int = DEFAULT_TASK_MEMORY) -> Executor:
    """The executor called ``name`` (one of :data:`EXECUTORS`); ``address`` and ``memory`` are Ray's."""
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address, memory=memory)
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)} (${EXECUTOR_ENV})")


def configure(name: str | None = None, *, address: str | None = None,
              memory: int = DEFAULT_TASK_MEMORY) -> Executor:
    """Set the executor every sweep of this process uses; ``name`` ``None`` takes ``$EEGPRIVACY_EXECUTOR``, else
    ``local``."""
    global _current
    _current = make_executor(name or os.environ.get(EXECUTOR_ENV) or "local", address=address, memory=memory)
    return _current


def current_executor() -> Executor:
    """The process-wide executor: the configured one, else the one the environment names (see the docstring)."""
    return _current if _current is not None else configure()
