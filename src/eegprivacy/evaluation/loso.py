"""Patient-level leave-one-subject-out (LOSO) evaluation with F1-tuned decision thresholds.

Two protocols from one set of fits:

- ``optimistic`` — the paper's (study A, section 4.3): one threshold chosen on the pooled LOSO probabilities
  of all patients, then applied to those same probabilities. Threshold selection sees the test labels, so the
  numbers are cohort-level descriptions, biased upwards.
- ``nested`` — the honest variant: for each held-out patient, an inner LOSO over the outer training patients
  gives pooled inner probabilities; the threshold that maximises inner F1 is applied to the held-out
  patient's outer probability. No label or feature of the held-out patient touches its threshold.

Speed: the inner fold "train on all patients except {i, j}" is the same fit whether i or j is the outer
held-out patient, so the nested protocol costs n(n-1)/2 extra fits instead of n(n-1), with results identical
to the naive double loop (every fit uses the same seed and the same row order). ``inner_folds=k`` replaces the
inner LOSO by a k-fold split of the outer training patients (``GroupKFold``), n*k extra fits: on 36 patients
and k = 5, 180 instead of 630, for sweeps that cannot afford the full inner loop.

Batched fits (issue 37): when the estimator is one that :class:`eegprivacy.batched.AdamMLP` reproduces (the
paper's ``default_mlp`` with a seed, on full-batch training sets of at most 200 rows), every fold is trained in a
few batched tensor programs instead of one scikit-learn fit at a time: the same probabilities to 1e-9 and the
same epoch counts (``tests/test_batched_mlp.py``), ~1.85x faster per core (``benchmarks/loso_mlp.py``). Every
other estimator, and ``fit_params``, take scikit-learn's path; ``batched=False`` forces it.

Stratified k-fold (:func:`stratified_kfold_proba`, issue 47): LOSO's held-out patient shifts the training prevalence
against its own label (one patient fewer of its class), so a model that has learnt nothing but the prevalence
ranks every held-out patient below the other class: on a no-signal table LOSO AUROC sits well below 0.5 (0.31 on a
pure-noise two-dimensional release of 56 patients). Stratified folds keep the training prevalence the same in
every fold, so the same no-signal table reads ≈ 0.5: the absolute reading beside LOSO's.

Released labels: ``evaluate(..., y_fit=...)`` trains every model on labels other than the truth (e.g. labels
released under randomized response, :class:`eegprivacy.privacy.RandomizedResponse`) and selects the nested
thresholds on them too, as an analyst who only holds the release must, while every metric is scored against the
true ``y``: how well does a model built from the release predict the true diagnosis.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from eegprivacy.batched import MAX_FULL_BATCH_ROWS, AdamMLP
from eegprivacy.evaluation.metrics import classification_metrics, confusion_counts, confusion_matrix
from eegprivacy.evaluation.thresholds import ORIGINAL_GRID, best_f1_threshold

__all__ = ["default_mlp", "LOSOEvaluation", "LOSOResult", "ProtocolResult", "PROTOCOLS", "stratified_kfold_proba"]

PROTOCOLS = ("optimistic", "nested")
POSITIVE = 1  # labels are 0/1; 1 is the positive class (e.g. epilepsy, bad counter)


def default_mlp(random_state: int | None = None) -> Pipeline:
    """StandardScaler + MLPClassifier with the paper's hyperparameters (only the seed differs: the paper used None).

    The scaler lives inside the pipeline so that cloning per fold fits it on the training patients only.
    """
    return Pipeline(
        [
            ("scaler", StandardScaler()),
            (
                "mlp",
                MLPClassifier(
                    hidden_layer_sizes=(100,),
                    activation="relu",
                    solver="adam",
                    alpha=1e-4,
                    learning_rate="constant",
                    max_iter=200,
                    early_stopping=False,
                    random_state=random_state,
                ),
            ),
        ]
    )


@dataclass(frozen=True)
class ProtocolResult:
    """Outcome of one threshold protocol; arrays are per patient, in order of first appearance in `groups`."""

    name: str
    thresholds: np.ndarray  # threshold applied to each patient (all equal for the optimistic protocol)
    y_pred: np.ndarray
    confusion: np.ndarray  # [[tn, fp], [fn, tp]]
    metrics: dict

    @property
    def threshold(self) -> float:
        """The single threshold if all patients share one (optimistic), else nan (nested)."""
        t = self.thresholds
        return float(t[0]) if t.size and np.all(t == t[0]) else float("nan")


@dataclass(frozen=True)
class LOSOResult:
    """Per-patient LOSO probabilities and both protocols' decisions.

    Patients are indexed by position (order of first appearance in `groups`), never by identifier, so a
    result can be logged without carrying anything that names a person.
    """

    y_true: np.ndarray
    proba: np.ndarray  # outer LOSO probability of the positive class, one per patient
    protocols: dict[str, ProtocolResult]
    threshold_grid: np.ndarray
    random_state: int | None
    inner_proba: np.ndarray | None = field(default=None, repr=False)  # [i, j]: P(j) trained without i and j
    y_fit: np.ndarray | None = field(default=None, repr=False)  # per-patient training labels, if not y_true

    @property
    def metrics(self) -> dict[str, dict]:
        return {name: p.metrics for name, p in self.protocols.items()}

    def __getitem__(self, protocol: str) -> ProtocolResult:
        return self.protocols[protocol]


def _positive_proba(estimator, X: np.ndarray) -> np.ndarray:
    """P(y = 1) per row; a model that saw one class only is certain of it (MLP's 2-column output would lie)."""
    classes = np.asarray(estimator.classes_)
    if classes.size == 1:
        return np.full(X.shape[0], 1.0 if classes[0] == POSITIVE else 0.0)
    proba = estimator.predict_proba(X)
    return proba[:, int(np.flatnonzero(classes == POSITIVE)[0])]


def _binary_labels(y: np.ndarray, name: str) -> np.ndarray:
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{name} must hold only 0 and 1 (1 = positive class)")
    return y.astype(int)


def _patient_labels(y: np.ndarray, rows_of: list[np.ndarray], name: str) -> np.ndarray:
    """One label per patient (rows_of[k]: patient k's rows); a patient whose rows disagree is an error."""
    y_patient = np.array([y[r[0]] for r in rows_of])
    if any(np.any(y[r] != y_patient[k]) for k, r in enumerate(rows_of)):
        raise ValueError(f"every patient must carry one label across all its rows ({name})")
    return y_patient


def _fit_predict_many(prototype, X, y, tasks, blas_threads: int | None = 1,
                      fit_params: dict | None = None) -> list[np.ndarray]:
    """Run (train_rows, test_rows) tasks; module-level so joblib workers can pickle it. ``fit_params`` are
    row-aligned arrays, sliced to each task's training rows (as ``cross_validate(params=...)`` does)."""
    out = []
    # Multi-threaded BLAS on 35x400 matrices spends more on thread hand-off than on arithmetic: one thread
    # measured ~30% faster per fit. max_iter=200 is the paper's setting, so non-convergence is expected.
    with warnings.catch_warnings(), threadpool_limits(blas_threads):
        warnings.simplefilter("ignore", ConvergenceWarning)
        for train_rows, test_rows in tasks:
            est = clone(prototype)
            est.fit(X[train_rows], y[train_rows],
                    **{k: np.asarray(v)[train_rows] for k, v in (fit_params or {}).items()})
            out.append(_positive_proba(est, X[test_rows]))
    return out


def _fit_predict_batched(engine: AdamMLP, X, y, batches, threads: int | None = 1) -> list[np.ndarray]:
    """:func:`_fit_predict_many` for an estimator :class:`AdamMLP` reproduces: each batch of tasks is one
    ``fit_predict_tasks`` call. torch and BLAS run on ``threads`` (None: as they are; torch's setting restored
    after), as scikit-learn's path does, so the numbers are one thread's wherever this runs."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        with threadpool_limits(threads):
            return [p for batch in batches for p in engine.fit_predict_tasks(X, y, batch)]
    finally:
        torch.set_num_threads(before)


class LOSOEvaluation:
    """MOABB-style evaluation object: configure once, then `evaluate(X, y, groups)` per feature table.

    `estimator` is None (the paper's `default_mlp`), a scikit-learn estimator (cloned per fold; every
    `random_state` parameter in it is overwritten when `random_state` is given), or a factory
    `f(random_state) -> estimator`. The same seed is used in every fold, as `cross_val_predict` does with a
    seeded estimator; `random_state=None` reproduces the paper's unseeded runs. `n_jobs` parallelises the
    fits with joblib (processes), which pays off only for the nested protocol on larger cohorts.
    `blas_threads` caps BLAS threads during fits (1 suits patient tables; None leaves them alone).
    `inner_folds`: the nested protocol's inner split of the outer training patients; None is LOSO (the
    reference), an integer k a ``GroupKFold(k)`` (cheaper; still never sees the held-out patient).
    `batched`: fit the folds with :class:`eegprivacy.batched.AdamMLP` when it reproduces the estimator (see the
    module docstring); False always takes scikit-learn's one-fit-at-a-time path.
    """

    def __init__(
        self,
        estimator: object | Callable | None = None,
        threshold_grid: Sequence[float] = ORIGINAL_GRID,
        random_state: int | None = 0,
        nested: bool = True,
        n_jobs: int = 1,
        confidence: float = 0.95,
        blas_threads: int | None = 1,
        inner_folds: int | None = None,
        batched: bool = True,
    ):
        self.estimator = estimator
        self.threshold_grid = np.asarray(threshold_grid, dtype=float)
        self.random_state = random_state
        self.nested = nested
        self.n_jobs = n_jobs
        self.confidence = confidence
        self.blas_threads = blas_threads
        self.inner_folds = inner_folds
        self.batched = batched

    def make_estimator(self):
        """The seeded prototype that every fold clones."""
        rs = self.random_state
        if self.estimator is None:
            return default_mlp(rs)
        if hasattr(self.estimator, "fit"):
            est = clone(self.estimator)
            if rs is not None:
                seeds = {k: rs for k in est.get_params() if k == "random_state" or k.endswith("__random_state")}
                est.set_params(**seeds)
            return est
        if callable(self.estimator):
            return self.estimator(rs)
        raise TypeError("estimator must be None, a scikit-learn estimator, or a factory f(random_state)")

    def batched_engine(self, prototype, tasks, fit_params=None) -> AdamMLP | None:
        """The :class:`AdamMLP` that fits ``tasks`` exactly as ``prototype`` would, or None for scikit-learn's path
        (another estimator, fit_params, a training set above the full-batch size, or ``batched=False``)."""
        if not self.batched or fit_params or any(len(train) > MAX_FULL_BATCH_ROWS for train, _ in tasks):
            return None
        return AdamMLP.from_estimator(prototype)  # None for anything it does not reproduce exactly

    def _run(self, prototype, X, y, tasks, fit_params=None) -> list[np.ndarray]:
        engine = self.batched_engine(prototype, tasks, fit_params)
        if engine is not None:
            return self._run_batched(engine, X, y, tasks)
        if self.n_jobs == 1 or len(tasks) < 2:
            return _fit_predict_many(prototype, X, y, tasks, self.blas_threads, fit_params)
        from joblib import Parallel, delayed, effective_n_jobs

        workers = effective_n_jobs(self.n_jobs)
        n_chunks = min(len(tasks), 4 * workers)  # few large chunks: per-task dispatch costs more than a fit
        bounds = np.linspace(0, len(tasks), n_chunks + 1).astype(int)
        chunks = [tasks[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        parts = Parallel(n_jobs=workers)(
            delayed(_fit_predict_many)(prototype, X, y, c, self.blas_threads, fit_params) for c in chunks
        )
        return [p for part in parts for p in part]

    def predict_folds(self, X, y, tasks) -> list[np.ndarray]:
        """P(label 1) of each task's held-out rows, ``tasks`` a list of (train_rows, test_rows): one seeded
        prototype fitted per task (batched where :class:`AdamMLP` reproduces it), as :meth:`evaluate` fits its
        folds — for splits other than leave-one-group-out."""
        X = np.asarray(X, dtype=float)
        return self._run(self.make_estimator(), X, _binary_labels(np.asarray(y).ravel(), "y"), list(tasks))

    def _run_batched(self, engine: AdamMLP, X, y, tasks) -> list[np.ndarray]:
        """The tasks in batches of a size fixed by the table's shape alone (AdamMLP's cache-sized default), so
        which tasks share a batch, and hence every number, is the same for any ``n_jobs``; ``n_jobs`` > 1 spreads
        whole batches over processes."""
        per_batch = engine.tasks_per_batch or AdamMLP.batch_size(X.shape)
        batches = [tasks[a:a + per_batch] for a in range(0, len(tasks), per_batch)]
        if self.n_jobs == 1 or len(batches) < 2:
            return _fit_predict_batched(engine, X, y, batches, self.blas_threads)
        from joblib import Parallel, delayed, effective_n_jobs

        workers = effective_n_jobs(self.n_jobs)
        n_chunks = min(len(batches), 4 * workers)
        bounds = np.linspace(0, len(batches), n_chunks + 1).astype(int)
        parts = Parallel(n_jobs=workers)(
            delayed(_fit_predict_batched)(engine, X, y, batches[a:b], self.blas_threads)
            for a, b in zip(bounds[:-1], bounds[1:]) if b > a
        )
        return [p for part in parts for p in part]

    def evaluate(self, X, y, groups, fit_params: dict | None = None, y_fit=None) -> LOSOResult:
        """LOSO over patients (`groups`); one probability per patient, rows of a patient averaged.

        ``fit_params``: row-aligned arrays passed to every fit, restricted to its training rows (e.g. the
        hospital of each row for a federated estimator).
        ``y_fit``: row-aligned labels the models are trained on and the nested protocol selects its thresholds
        on (e.g. labels released under randomized response), in place of ``y``; ``y`` stays the truth that
        every metric, the optimistic threshold (which sees the evaluator's labels by definition) and
        ``LOSOResult.y_true`` use. None trains on ``y``, exactly as without the argument."""
        X = np.asarray(X, dtype=float)
        y = np.asarray(y).ravel()
        groups = np.asarray(groups).ravel()
        if X.ndim != 2 or not (X.shape[0] == y.size == groups.size):
            raise ValueError(f"X must be 2-D with one row per label and group; got {X.shape}, {y.size}, {groups.size}")
        y = _binary_labels(y, "y")
        if y_fit is not None:
            y_fit = np.asarray(y_fit).ravel()
            if y_fit.size != y.size:
                raise ValueError(f"y_fit has {y_fit.size} labels for {y.size} rows")
            y_fit = _binary_labels(y_fit, "y_fit")

        _, first, codes = np.unique(groups, return_index=True, return_inverse=True)
        order = np.argsort(first)  # patient k = k-th patient to appear in `groups`
        codes = np.argsort(order)[codes]
        n = order.size
        min_patients = 3 if self.nested else 2
        if self.nested and self.inner_folds is not None:
            if int(self.inner_folds) < 2:
                raise ValueError(f"inner_folds must be None (LOSO) or >= 2, got {self.inner_folds}")
            min_patients = max(min_patients, int(self.inner_folds) + 1)
        if n < min_patients:
            raise ValueError(f"need at least {min_patients} patients, got {n}")
        rows_of = [np.flatnonzero(codes == k) for k in range(n)]
        y_patient = _patient_labels(y, rows_of, "y")
        y_fit_patient = y_patient if y_fit is None else _patient_labels(y_fit, rows_of, "y_fit")

        prototype = self.make_estimator()
        tasks = []
        outer_patient = []
        for train_rows, test_rows in LeaveOneGroupOut().split(X, y, codes):
            tasks.append((train_rows, test_rows))
            outer_patient.append(int(codes[test_rows[0]]))
        pairs = []  # inner fits: (outer patient or None, patients predicted)
        if self.nested and self.inner_folds is None:
            for i in range(n):
                for j in range(i + 1, n):
                    keep = (codes != i) & (codes != j)
                    tasks.append((np.flatnonzero(keep), np.concatenate([rows_of[i], rows_of[j]])))
                    pairs.append((None, (i, j)))
        elif self.nested:
            for i in range(n):
                others = np.flatnonzero(np.arange(n) != i)
                for _, held in GroupKFold(int(self.inner_folds)).split(others, groups=others):
                    held = others[held]
                    keep = (codes != i) & ~np.isin(codes, held)
                    tasks.append((np.flatnonzero(keep), np.concatenate([rows_of[j] for j in held])))
                    pairs.append((i, tuple(int(j) for j in held)))

        for name, values in (fit_params or {}).items():
            if len(values) != X.shape[0]:
                raise ValueError(f"fit_params[{name!r}] has {len(values)} entries for {X.shape[0]} rows")
        results = self._run(prototype, X, y if y_fit is None else y_fit, tasks, fit_params)

        proba = np.empty(n)
        for k, p in zip(outer_patient, results[:n]):
            proba[k] = p.mean()
        protocols = {"optimistic": self._optimistic(y_patient, proba)}
        inner = None
        if self.nested:
            inner = np.full((n, n), np.nan)  # [i, j]: P(j) trained without i and j
            for (outer, held), p in zip(pairs, results[n:]):
                if outer is None:  # the shared inner LOSO fit without patients i and j serves both
                    i, j = held
                    ni = rows_of[i].size
                    inner[j, i] = p[:ni].mean()  # patient i's probability, used when j is held out
                    inner[i, j] = p[ni:].mean()
                    continue
                bounds = np.cumsum([0] + [rows_of[j].size for j in held])
                for j, a, b in zip(held, bounds[:-1], bounds[1:]):
                    inner[outer, j] = p[a:b].mean()
            protocols["nested"] = self._nested(y_patient, proba, inner, y_fit_patient)
        return LOSOResult(
            y_true=y_patient,
            proba=proba,
            protocols=protocols,
            threshold_grid=self.threshold_grid,
            random_state=self.random_state,
            inner_proba=inner,
            y_fit=None if y_fit is None else y_fit_patient,
        )

    def _protocol(self, name, y, proba, thresholds) -> ProtocolResult:
        y_pred = (proba >= thresholds).astype(int)  # >= as in thresholds.f1_by_threshold
        counts = confusion_counts(y, y_pred)
        return ProtocolResult(
            name=name,
            thresholds=thresholds,
            y_pred=y_pred,
            confusion=confusion_matrix(**counts),
            metrics=classification_metrics(**counts, confidence=self.confidence),
        )

    def _optimistic(self, y, proba) -> ProtocolResult:
        threshold = best_f1_threshold(y, proba, self.threshold_grid)
        return self._protocol("optimistic", y, proba, np.full(y.size, threshold))

    def _nested(self, y, proba, inner, y_select) -> ProtocolResult:
        """Thresholds chosen on ``y_select`` (the labels the analyst holds), decisions scored against ``y``."""
        n = y.size
        thresholds = np.empty(n)
        for i in range(n):
            others = np.arange(n) != i
            thresholds[i] = best_f1_threshold(y_select[others], inner[i, others], self.threshold_grid)
        return self._protocol("nested", y, proba, thresholds)


def stratified_kfold_proba(X, y, n_splits: int = 5, random_state: int | None = 0) -> np.ndarray:
    """Out-of-fold P(label 1) of every row of ``X`` (one row per patient) under a stratified k-fold split drawn
    from ``random_state``, each fold's model the seeded ``default_mlp`` (module docstring: the prevalence-neutral
    reading beside LOSO). Every patient is predicted once, by the model of the fold that held it out."""
    from sklearn.model_selection import StratifiedKFold

    y = _binary_labels(np.asarray(y).ravel(), "y")
    tasks = list(StratifiedKFold(n_splits, shuffle=True, random_state=random_state).split(np.zeros(len(y)), y))
    proba = np.empty(len(y))
    evaluation = LOSOEvaluation(random_state=random_state, nested=False)
    for (_, test), p in zip(tasks, evaluation.predict_folds(X, y, tasks)):
        proba[test] = p
    return proba
