"""DP synthetic patients for study A: a marginal-based synthesiser (Private-PGM / AIM style) on ``mbi`` 2.0.

Instead of noising each patient's feature vector, :class:`MarginalSynthesizer` noises a few low-order marginals of
the discretised patient table (features *and* label) with one Gaussian mechanism, fits a model of the table to the
noisy marginals with ``mbi`` and samples synthetic patients from it. Everything after the noise is
post-processing, so the synthetic table, labels included, carries the mechanism's (ε, δ).

Scope of the guarantee: the features must already be in a public transform (e.g. scaled with
``PublicReferenceScaler``) and the bin edges must come from public patients (:func:`public_bin_edges`); then the
(ε, δ) holds end to end. The record count n is treated as public, as is usual under replace-one adjacency (it is
the same in every neighbouring table).

JAX: ``mbi`` runs on JAX, imported only when a synthesiser is fitted. It runs on the CPU here (the pinned
``jaxlib`` is CPU-only). For sweeps with one fit per core, start the process with
``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"`` so XLA does not spread one fit
over every core. The first fit of a given shape (k, n_bins, pairs) in a process pays JAX's compilation (~2-3 s);
later fits reuse it.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from eegprivacy.privacy.mechanisms import GaussianAnalytic
from eegprivacy.validation import DELTA, EPSILON, check

PAIRS = ("label", "all")
MODELS = ("auto", "pgm", "mixture")
LABEL = "y"
# Largest full joint table (cells) an exact graphical model over all pairs may build; beyond it, use "mixture".
MAX_PGM_CELLS = 2**20
LABELS_INSIDE_NOTE = ("the labels are attributes of the synthetic table: their marginals are measured by the same "
                      "Gaussian mechanism, so the synthetic labels are inside the (ε, δ) guarantee")


def _import_mbi():
    """``mbi`` with its import-time advice silenced: float32 is ample for the few hundred records a cohort holds,
    and JAX's persistent compilation cache is off unless a cache directory is configured."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="JAX is running in float32 mode", category=UserWarning)
        warnings.filterwarnings("ignore", message="JAX persistent compilation cache", category=UserWarning)
        import mbi
    return mbi


def public_bin_edges(Z_public, n_bins: int = 8) -> list[np.ndarray]:
    """Interior bin edges per feature from the public patients' quantiles at 1/n_bins, …, (n_bins−1)/n_bins.

    Public information only, so a synthesiser may discretise private patients with them without spending budget.
    Ties in the public data give repeated edges (an empty bin), which is harmless.

    Parameters
    ----------
    Z_public : array-like of shape (n_public, k)
        Public patients in the same (public) transform as the private table.
    n_bins : int, default=8
        Bins per feature (≥ 3: the two end bins take their width from the interior ones).

    Returns
    -------
    edges : list of k ndarrays of shape (n_bins − 1,)
        Non-decreasing interior edges, as :meth:`MarginalSynthesizer.fit` takes them.
    """
    Z = np.asarray(Z_public, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] < 2 or not np.isfinite(Z).all():
        raise ValueError(f"public table must be a finite 2-D (patients × features) array with ≥ 2 patients, "
                         f"got shape {Z.shape}")
    n_bins = _check_n_bins(n_bins)
    edges = np.quantile(Z, np.arange(1, n_bins) / n_bins, axis=0).T
    flat = np.flatnonzero(edges[:, -1] <= edges[:, 0])
    if flat.size:
        raise ValueError(f"public quantiles of feature(s) {flat.tolist()} do not spread (constant or nearly so in "
                         "the public table); such a feature cannot be binned")
    return [row.copy() for row in edges]


def _check_n_bins(n_bins) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, Integral) or n_bins < 3:
        raise ValueError(f"n_bins must be an integer ≥ 3 (the end bins borrow the interior bins' width), "
                         f"got {n_bins!r}")
    return int(n_bins)


def _check_seed(random_state, name: str = "random_state"):
    if random_state is not None and (isinstance(random_state, bool) or not isinstance(random_state, Integral)
                                     or random_state < 0):
        raise ValueError(f"{name} must be None or a non-negative int, got {random_state!r}")
    return None if random_state is None else int(random_state)


@functools.lru_cache(maxsize=None)
def _estimator(model: str, learning_rate: float, n_components: int):
    """One ``mbi`` estimator per configuration, reused across fits: JAX caches compiled steps keyed by the
    estimator (a static argument), so a fresh optimizer per fit would recompile every time."""
    _import_mbi()
    from mbi.estimation import MirrorDescent

    if model == "pgm":
        return MirrorDescent()
    import optax
    from mbi.extensions import MixtureOfProductsEstimator

    return MixtureOfProductsEstimator(optimizer=optax.adam(learning_rate), num_components=n_components)


class MarginalSynthesizer(BaseEstimator):
    """DP synthetic patients from Gaussian-noised 1- and 2-way marginals of the binned (features, label) table.

    Measurement: each of the k features is binned with its public edges (``np.digitize``; values beyond the
    outer edges fall in the end bins) and the label is a 2-valued attribute. One Gaussian mechanism releases,
    concatenated, the label's 1-way marginal, every (feature, label) marginal and, with ``pairs="all"``, every
    (feature_i, feature_j) marginal: m = 1 + k (+ k(k−1)/2) count vectors. Replacing one patient moves one count
    down and one up in each, so the L2 sensitivity is sqrt(2m). σ comes from the repo's analytic calibration
    (:class:`~eegprivacy.privacy.mechanisms.GaussianAnalytic`, Balle & Wang 2018) for (ε, δ) at that sensitivity.

    Estimation (post-processing): the noisy marginals, divided by the public n, are fitted with ``mbi``:

    - ``model="pgm"``: Private-PGM's graphical model by mirror descent (``mbi.estimation.MirrorDescent``). With
      ``pairs="label"`` the model is a tree (features independent given the label) and exact; with
      ``pairs="all"`` the model's single clique is the whole table (n_bins^k·2 cells), so it is allowed only up
      to ``MAX_PGM_CELLS``.
    - ``model="mixture"``: a mixture of ``n_components`` product distributions fitted by Adam
      (``mbi.extensions.MixtureOfProductsEstimator``, RAP-softmax style); it scales to all pairs of 16 features.
    - ``model="auto"`` (default): "pgm" for ``pairs="label"``, "mixture" for ``pairs="all"``.

    Both are deterministic given the seed. :meth:`sample` draws synthetic records from the fitted model and maps
    each bin to a value drawn uniformly inside it, so downstream models get continuous inputs.

    Parameters
    ----------
    epsilon, delta : float
        The mechanism's (ε, δ); ε > 0, 0 < δ < 1.
    n_bins : int, default=8
        Bins per feature; every edge array given to :meth:`fit` must hold ``n_bins − 1`` interior edges.
    pairs : {"all", "label"}, default="all"
        The marginals measured besides the label's: (feature, label) always, (feature_i, feature_j) with "all".
    random_state : int or None
        Seeds the noise, the model's initialisation and (by default) :meth:`sample`, from three independent
        streams of one ``np.random.SeedSequence``: the synthetic draws must not reuse the noise's randomness, or
        they could reveal it.
    iterations : int, default=1000
        Estimation steps (``mbi`` runs them in blocks of 50, so a count is rounded up to a multiple of 50).
    model : {"auto", "pgm", "mixture"}, default="auto"
    n_components : int, default=64
        Mixture components (``model="mixture"`` only).
    learning_rate : float, default=0.05
        Adam's step size (``model="mixture"`` only).

    Attributes
    ----------
    sigma_ : float
        The Gaussian noise's standard deviation, in counts.
    sensitivity_ : float
        L2 sensitivity sqrt(2m) of the concatenated count vectors.
    marginals_ : list of tuple of str
        The measured cliques; features are named "x0", …, "x{k−1}", the label "y".
    n_records_ : int
        Private record count (public under replace-one adjacency); :meth:`sample`'s default size.
    edges_ : list of ndarray
        The public interior edges per feature.
    calibration_ : Calibration
        The mechanism's calibration (σ, sensitivity, guarantee, sampling).
    model_ : the fitted ``mbi`` model.
    model_kind_ : str
        "pgm" or "mixture", as resolved from ``model``.
    n_features_in_ : int
    """

    def __init__(self, epsilon: float, delta: float, n_bins: int = 8, pairs: str = "all", random_state=None,
                 iterations: int = 1000, model: str = "auto", n_components: int = 64, learning_rate: float = 0.05):
        self.epsilon = epsilon
        self.delta = delta
        self.n_bins = n_bins
        self.pairs = pairs
        self.random_state = random_state
        self.iterations = iterations
        self.model = model
        self.n_components = n_components
        self.learning_rate = learning_rate

    # ------------------------------------------------------------------ validation
    def _check_params(self) -> str:
        check(float(self.epsilon), EPSILON, "epsilon")
        check(float(self.delta), DELTA, "delta")
        _check_n_bins(self.n_bins)
        _check_seed(self.random_state)
        if self.pairs not in PAIRS:
            raise ValueError(f"pairs must be one of {PAIRS}, got {self.pairs!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        for name in ("iterations", "n_components"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        lr = float(self.learning_rate)
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"learning_rate must be a positive finite number, got {self.learning_rate!r}")
        if self.model != "auto":
            return self.model
        return "pgm" if self.pairs == "label" else "mixture"

    def _check_inputs(self, Z, y, edges):
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[0] < 1 or Z.shape[1] < 1:
            raise ValueError(f"Z must be a 2-D (patients × features) array with at least one patient and one "
                             f"feature, got shape {Z.shape}")
        if not np.isfinite(Z).all():
            raise ValueError(f"Z must be finite; it holds {int(np.sum(~np.isfinite(Z)))} NaN/inf values")
        y = np.asarray(y)
        if y.shape != (Z.shape[0],):
            raise ValueError(f"y must be a 1-D array with one label per row of Z ({Z.shape[0]}), got shape {y.shape}")
        if not np.isin(y, (0, 1)).all():
            raise ValueError(f"y must hold 0/1 labels only, got values {np.unique(y)[:10].tolist()}")
        k = Z.shape[1]
        if edges is None or isinstance(edges, (str, bytes)) or len(edges) != k:
            got = None if edges is None else (len(edges) if hasattr(edges, "__len__") else type(edges).__name__)
            raise ValueError(f"edges must be a list of {k} arrays of public interior bin edges (one per column of "
                             f"Z), got {got}")
        checked = []
        for i, e in enumerate(edges):
            e = np.asarray(e, dtype=np.float64)
            if e.shape != (self.n_bins - 1,):
                raise ValueError(f"edges[{i}] must hold n_bins − 1 = {self.n_bins - 1} interior edges, got shape "
                                 f"{e.shape}")
            if not np.isfinite(e).all() or np.any(np.diff(e) < 0) or e[-1] <= e[0]:
                raise ValueError(f"edges[{i}] must be finite, non-decreasing and spread (last > first)")
            checked.append(e.copy())
        return Z, y.astype(np.int64), checked

    # ------------------------------------------------------------------ fit
    def fit(self, Z, y, edges):
        """Bin the private table with public edges, measure its marginals with one Gaussian mechanism, fit a model.

        Parameters
        ----------
        Z : array-like of shape (n, k)
            Private patient features, already in a public transform.
        y : array-like of shape (n,)
            Private 0/1 labels (an attribute of the synthetic table).
        edges : list of k array-likes of shape (n_bins − 1,)
            Public interior bin edges, e.g. from :func:`public_bin_edges` on public patients.

        Returns
        -------
        self
        """
        model_kind = self._check_params()
        Z, y, edges = self._check_inputs(Z, y, edges)
        n, k = Z.shape
        if model_kind == "pgm" and self.pairs == "all" and self.n_bins**k * 2 > MAX_PGM_CELLS:
            raise ValueError(f"model='pgm' with pairs='all' builds the full table of n_bins^k·2 = "
                             f"{self.n_bins**k * 2} cells (> {MAX_PGM_CELLS}); use model='mixture' or pairs='label'")
        mbi = _import_mbi()

        names = [f"x{i}" for i in range(k)]
        codes = {name: np.digitize(Z[:, i], edges[i]).astype(np.int64) for i, name in enumerate(names)}
        codes[LABEL] = y
        domain = mbi.Domain(names + [LABEL], [self.n_bins] * k + [2])
        table = mbi.Dataset(codes, domain)
        cliques = [(LABEL,)] + [(name, LABEL) for name in names]
        if self.pairs == "all":
            cliques += list(itertools.combinations(names, 2))
        counts = [np.asarray(table.project(c).datavector(), dtype=np.float64) for c in cliques]
        sizes = [c.size for c in counts]

        # GaussianAnalytic.calibrate derives Δ2 = 2C for rows in a C-ball. Here each patient adds a 0/1 row with
        # one 1 per marginal, and two such rows differ by ±1 in at most 2m cells, so Δ2 = sqrt(2m), tighter than
        # 2·sqrt(m): pass C = sqrt(2m)/2 and check the calibration's Δ2.
        sensitivity = math.sqrt(2 * len(cliques))
        mechanism = GaussianAnalytic(epsilon=float(self.epsilon), delta=float(self.delta))
        calibration = mechanism.calibrate(sensitivity / 2.0, int(sum(sizes)))
        if not math.isclose(calibration.sensitivity, sensitivity, rel_tol=1e-12):
            raise RuntimeError(f"calibration sensitivity {calibration.sensitivity} ≠ sqrt(2m) = {sensitivity}")
        sigma = float(calibration.noise_scale)

        noise_seed, init_seed, sample_seed = np.random.SeedSequence(_check_seed(self.random_state)).spawn(3)
        noisy = np.concatenate(counts) + mechanism.sample(int(sum(sizes)), calibration,
                                                          np.random.default_rng(noise_seed))
        # Post-processing from here on. Proportions (÷ the public n) keep every fit on the same scale, so JAX
        # reuses one compiled program across cohorts of any size.
        measurements = []
        for clique, part in zip(cliques, np.split(noisy, np.cumsum(sizes)[:-1])):
            measurements.append(mbi.LinearMeasurement(part / n, clique, stddev=sigma / n))

        estimator = _estimator(model_kind, float(self.learning_rate), int(self.n_components))
        warm_start = None
        if model_kind == "mixture":
            from mbi.extensions import MixtureOfProducts

            init = int(np.random.default_rng(init_seed).integers(2**31 - 1))
            warm_start = MixtureOfProducts.random(domain, 1.0, int(self.n_components), init)
        self.model_ = estimator.estimate(domain, measurements, known_total=1.0, iters=int(self.iterations),
                                         warm_start=warm_start)

        self.model_kind_ = model_kind
        self.domain_ = domain
        self.edges_ = edges
        self.marginals_ = cliques
        self.calibration_ = calibration
        self.sigma_ = sigma
        self.sensitivity_ = sensitivity
        self.n_records_ = int(n)
        self.n_features_in_ = int(k)
        self._sample_seed = sample_seed
        return self

    # ------------------------------------------------------------------ sample
    def _bin_probabilities(self):
        """What sampling needs from the model, as float64 numpy arrays."""
        names = list(self.domain_.attributes)
        if self.model_kind_ == "mixture":
            products = self.model_.products
            return {a: np.asarray(products[a], dtype=np.float64) for a in names}
        if self.pairs == "label":
            label = np.asarray(self.model_.project((LABEL,)).datavector(), dtype=np.float64)
            given = {a: np.asarray(self.model_.project((a, LABEL)).datavector(flatten=False), dtype=np.float64)
                     for a in names if a != LABEL}
            return {"label": label, "given": given}
        return {"joint": np.asarray(self.model_.project(tuple(names)).datavector(), dtype=np.float64)}

    def sample(self, n: int | None = None, random_state=None) -> tuple[np.ndarray, np.ndarray]:
        """Synthetic patients drawn i.i.d. from the fitted model, each bin mapped to a uniform value inside it.

        Interior bins are bounded by their public edges; the end bins by the edges' span extended by one mean
        interior bin width, so every value lies in [first edge − width, last edge + width].

        Parameters
        ----------
        n : int, optional
            Number of records; defaults to the private count ``n_records_`` (public under replace-one DP).
        random_state : int, optional
            Seeds the draws; defaults to a stream of the fit's ``random_state`` independent of its noise, so
            repeated calls give the same table.

        Returns
        -------
        Z_synthetic : ndarray of shape (n, k)
        y_synthetic : ndarray of shape (n,), int 0/1
        """
        check_is_fitted(self, "model_")
        n = self.n_records_ if n is None else n
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        seed = self._sample_seed if random_state is None else _check_seed(random_state)
        rng = np.random.default_rng(seed)
        names = list(self.domain_.attributes)
        features = names[:-1]
        probs = self._bin_probabilities()

        def draw(p, u):
            """Inverse-CDF draws; rows of ``p`` (one per record, or one shared) need not be normalised."""
            cdf = np.cumsum(np.clip(p, 0.0, None), axis=-1)
            cdf = cdf / cdf[..., -1:]
            index = np.searchsorted(cdf, u, side="right") if p.ndim == 1 else (u[:, None] >= cdf).sum(axis=1)
            return np.minimum(index, p.shape[-1] - 1)

        codes = {}
        if self.model_kind_ == "mixture":
            component = rng.integers(self.n_components, size=n)
            for a in names:
                codes[a] = draw(probs[a][component], rng.random(n))
        elif self.pairs == "label":
            codes[LABEL] = draw(probs["label"], rng.random(n))
            for a in features:
                codes[a] = draw(probs["given"][a].T[codes[LABEL]], rng.random(n))
        else:
            flat = draw(probs["joint"], rng.random(n))
            for a, c in zip(names, np.unravel_index(flat, self.domain_.shape)):
                codes[a] = c

        Z = np.empty((n, len(features)))
        for i, a in enumerate(features):
            low, high = self._bin_bounds(self.edges_[i])
            b = codes[a]
            Z[:, i] = low[b] + rng.random(n) * (high[b] - low[b])
        return Z, codes[LABEL].astype(np.int64)

    @staticmethod
    def _bin_bounds(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of each of the len(edges)+1 bins; the end bins extend one mean interior width outwards."""
        width = (edges[-1] - edges[0]) / (len(edges) - 1)
        low = np.concatenate([[edges[0] - width], edges])
        high = np.concatenate([edges, [edges[-1] + width]])
        return low, high

    # ------------------------------------------------------------------ reporting
    def privacy_info(self) -> dict:
        """The guarantee's parameters and scope, flat for MLflow."""
        check_is_fitted(self, "model_")
        return {"mechanism": "marginal_synthesis", "epsilon": float(self.epsilon), "delta": float(self.delta),
                "sigma": self.sigma_, "sensitivity": self.sensitivity_, "marginals": len(self.marginals_),
                "pairs": self.pairs, "model": self.model_kind_, "formal_guarantee": self.calibration_.formal_guarantee,
                "sampling": self.calibration_.sampling, "eps_covers": "end_to_end",
                "note": ("analytic Gaussian (ε, δ)-DP on the concatenated marginal counts under replace-one patient "
                         "adjacency (Δ2 = sqrt(2m)); end to end given a public feature transform and public bin "
                         "edges, with the record count public; " + LABELS_INSIDE_NOTE)}
