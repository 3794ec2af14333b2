"""Several independent federations in lock-step: every round's local training of all of them as one batch.

LiRA trains 60 shadow federations per ε, each of them a loop of small local trainings (8 clients × 36 trials of a
SimpleNet per round). One federation at a time, every local step is a handful of tiny tensor operations and the
run is all interpreter overhead; :meth:`~eegprivacy.federated.torch_task.TorchTask.train_many` trains many clients
as one vmapped tensor program, but one federation only has its round's few clients to give it.
:func:`run_fedavg_many` gives it every federation's clients at once: each federation runs its own unchanged
:func:`~eegprivacy.federated.simulation.run_fedavg` (ServerApp, FedAvg's sampling and aggregation, ClientApp,
in-process grid) with a ``train_batcher`` that hands the round's train jobs to a rendezvous instead of training
them; once every federation still running has handed in its round (or finished), the rendezvous trains all the
jobs in one ``train_many`` call per group of interchangeable tasks (:func:`compatibility_key`: same model, shapes,
optimiser and DP, e.g. one group per ε) and hands each federation its slice of the results.

Why threads run one at a time. Each federation runs in a thread of its own, since FedAvg's ``start`` loop cannot be
paused other than by blocking inside the grid; but the server side reads module globals that one federation run
after another never shares: Flower samples clients with the global :mod:`random` stream (seeded when the strategy
is built, :func:`~eegprivacy.federated.server_app.sampling_strategy`), ``Message()`` reads the sender from Flower's
``TaskIdentity`` class attributes, and ``run_fedavg`` saves and restores the caller's ``random`` state around the
run. So the threads are coroutines, not parallel workers: the calling thread resumes one federation at a time, in
federation order, and each runs alone until it hands in its next round or ends; around every switch its globals
(the ``random`` state and ``TaskIdentity``) are saved, and the caller's are put back. Each federation therefore
sees exactly the globals it would see run alone after the caller's state, and nothing depends on thread timing:
the same batches in the same order every time, whatever the scheduler does. The one parallel piece is the batched
training itself, run by the calling thread while every federation waits. Flower's log filter and the BLAS thread
cap are entered once around the whole lock-step run (entered per thread, their saved states would unwind out of
order), and each federation runs with ``blas_threads=None``.

A federation that ends, or raises, leaves the rendezvous: the others do not wait for it. When one raises, the rest
are stopped (each unwinds from its pending hand-in) and the error of the first failed federation, in federation
order, propagates to the caller, as the first failure of ``[run_fedavg(**c) for c in calls]`` would. When a
group's batched training raises, each federation of that group is trained alone to find the one that fails; only
it gets the error.

Numbers: a job's training depends on its own weights, rows and seed alone, so training it in a batch of other
federations' jobs gives what ``run_fedavg(**call)`` gives on its own (to ``train_many``'s agreement with the
per-client loop, 1e-6; ``tests/test_lockstep.py``).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence

from flwr.supercore.task_identity import TaskIdentity

from eegprivacy.federated.simulation import FederationResult, _blas_limit, _flower_output, run_fedavg

__all__ = ["run_fedavg_many", "compatibility_key", "Rendezvous"]

_IDENTITY = ("_task_id", "_run_id", "_node_id")  # TaskIdentity's class attributes, read by every Message()
_ABORT_STEPS = 1_000  # hand-ins an aborted federation may still make before it is left to its (daemon) thread


class _Aborted(RuntimeError):
    """Raised inside a federation that another federation's failure stopped."""


def _capture() -> tuple:
    """The process-global state a federation's server side reads and writes."""
    return random.getstate(), tuple(vars(TaskIdentity).get(name) for name in _IDENTITY)


def _install(state: tuple) -> None:
    rng, identity = state
    random.setstate(rng)
    for name, value in zip(_IDENTITY, identity):
        setattr(TaskIdentity, name, value)


def compatibility_key(task) -> tuple:
    """Tasks with equal keys train a job identically, so one ``train_many`` call may serve their jobs together:
    for a :class:`~eegprivacy.federated.torch_task.TorchTask`, its model (a name, or the very callable), input
    shape, classes, model keyword arguments, optimiser settings, BatchNorm handling, thread count and DP step (a
    frozen dataclass: equal ε, clip norm and mechanism). Any other task only batches with itself."""
    from eegprivacy.federated.torch_task import TorchTask

    if type(task) is not TorchTask:
        return ("identity", id(task))
    spec = task.model_spec if isinstance(task.model_spec, str) else ("callable", id(task.model_spec))
    dp = None if task.dp is None else (type(task.dp).__qualname__, repr(task.dp))
    return ("torch", spec, task.input_shape, tuple(task.classes.tolist()),
            tuple(sorted((k, repr(v)) for k, v in task.model_kwargs.items())), task.learning_rate, task.batch_size,
            task.batchnorm_stats, task.num_threads, dp)


def _train_many(task, jobs: list) -> list:
    return task.train_many(jobs)


class _Federation(threading.Thread):
    """One federation's ``run_fedavg`` in a thread that runs only while the rendezvous resumes it (:meth:`step`)."""

    def __init__(self, index: int, call: dict, outer: tuple):
        super().__init__(name=f"lockstep-federation-{index}", daemon=True)
        self.index, self.call = index, call
        self.state = outer  # its globals while suspended
        self.request: tuple | None = None  # (task, jobs) handed in and not yet trained
        self.reply = None  # the results for `request`, or an exception to raise in its place
        self.result: FederationResult | None = None
        self.error: BaseException | None = None
        self.done = False
        self._resume = threading.Semaphore(0)
        self._paused = threading.Semaphore(0)

    def run(self) -> None:
        self._resume.acquire()
        try:
            self.result = run_fedavg(**self.call, train_batcher=self.submit)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread, which raises it
            self.error = error
        finally:
            self.done = True
            self._paused.release()

    def submit(self, task, jobs) -> list:
        """The federation's ``train_batcher``: hand the round's jobs in and wait for their results."""
        self.request = (task, list(jobs))
        self._paused.release()
        self._resume.acquire()
        reply, self.reply, self.request = self.reply, None, None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def step(self, outer: tuple) -> None:
        """Run the federation (with its own globals) until it hands in its next round or ends; then put the
        caller's globals back."""
        _install(self.state)
        self._resume.release()
        self._paused.acquire()
        self.state = _capture()
        _install(outer)


class Rendezvous:
    """Resumes the federations one at a time, in order, and trains each round's hand-ins as one batch per group of
    compatible tasks (``train_batcher(task, jobs)``, default ``task.train_many``)."""

    def __init__(self, calls: Sequence[dict], train_batcher: Callable | None = None):
        self.outer = _capture()
        self.federations = [_Federation(i, dict(call), self.outer) for i, call in enumerate(calls)]
        self.train_batcher = train_batcher or _train_many
        self.rounds = 0  # lock-step rounds (batched trainings of every live federation)

    def run(self) -> list[FederationResult]:
        live = list(self.federations)
        for federation in live:
            federation.start()
        try:
            while live:
                for federation in live:
                    federation.step(self.outer)
                failed = [f for f in live if f.error is not None]
                live = [f for f in live if not f.done]
                if failed:
                    raise failed[0].error
                if live:
                    self._train(live)
                    self.rounds += 1
        finally:
            self._abort([f for f in live if not f.done])
            _install(self.outer)
        return [f.result for f in self.federations]

    def _train(self, waiting: list[_Federation]) -> None:
        """Every waiting federation's jobs, one batcher call per compatibility group, groups and jobs in federation
        order (never in the order threads happened to arrive)."""
        groups: dict[tuple, list[_Federation]] = {}
        for federation in waiting:
            groups.setdefault(compatibility_key(federation.request[0]), []).append(federation)
        for members in groups.values():
            jobs = [job for f in members for job in f.request[1]]
            try:
                results = list(self.train_batcher(members[0].request[0], jobs)) if jobs else []
            except Exception as error:  # noqa: BLE001 - raised inside the federation that caused it
                if len(members) == 1:
                    members[0].reply = error
                    continue
                for f in members:  # which federation fails: only it gets the error, the others their results
                    try:
                        f.reply = list(self.train_batcher(f.request[0], f.request[1])) if f.request[1] else []
                    except Exception as own:  # noqa: BLE001
                        f.reply = own
                continue
            if len(results) != len(jobs):
                raise RuntimeError(f"train_batcher returned {len(results)} results for {len(jobs)} jobs")
            start = 0
            for f in members:
                f.reply = results[start:start + len(f.request[1])]
                start += len(f.request[1])

    def _abort(self, pending: list[_Federation]) -> None:
        """Stop every federation still waiting: each raises from its hand-in and unwinds."""
        for federation in pending:
            for _ in range(_ABORT_STEPS):
                if federation.done:
                    break
                federation.reply = _Aborted("stopped: another federation of the lock-step run failed")
                federation.step(self.outer)


def run_fedavg_many(calls: Sequence[dict], *, blas_threads: int | None = 1, verbose: bool = False,
                    train_batcher: Callable | None = None) -> list[FederationResult]:
    """``[run_fedavg(**call) for call in calls]``, the federations run in lock-step with every round's local
    training batched across them (see the module docstring). Every call uses the in-process backend; its
    ``blas_threads`` and ``verbose`` are this function's (applied once around the whole run). `train_batcher`:
    ``(task, jobs) -> results`` for one compatible group (default ``task.train_many``)."""
    calls = [dict(call) for call in calls]
    for i, call in enumerate(calls):
        if call.get("backend", "inprocess") != "inprocess":
            raise ValueError(f"call {i}: lock-step federations run on the in-process backend only")
        for key in ("train_batcher", "batch_clients"):
            if key in call:
                raise ValueError(f"call {i}: {key} is set by run_fedavg_many")
        call.pop("blas_threads", None)
        call.pop("verbose", None)
        call["blas_threads"] = None
    if not calls:
        return []
    with _flower_output(verbose), _blas_limit(blas_threads):
        return Rendezvous(calls, train_batcher).run()
