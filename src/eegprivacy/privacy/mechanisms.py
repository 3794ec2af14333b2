"""Noise mechanisms for the patient-level feature release, as small declarative objects.

A mechanism is only its privacy parameters (``epsilon``, ``delta``). ``calibrate(clip_norm, dim)`` turns them,
with the sensitivity derived in ``sensitivity``, into a ``Calibration`` (the noise scale plus a statement of
whether the ε is a formal guarantee); ``sample(shape, calibration, rng)`` then draws noise from a seeded numpy
Generator. Keeping the two apart lets a sweep log the scale before any noise exists and redraw noise per seed
without recalibrating.

**Sampling.** ``formal_guarantee`` says the calibration meets its theorem *under idealised sampling*: the
theorems assume exact real-valued noise, while numpy's textbook floating-point draws leave gaps in the set of
reachable outputs that can reveal the input (Mironov 2012). That is right for simulating a release (seeded,
reproducible: every sweep here) and not for releasing real data. ``Calibration.sampling`` names which one a
number was made with ("idealised"), and :meth:`Mechanism.privatise` with ``sampler="opendp"`` noises a real
release with OpenDP's exact samplers (``opendp`` on the package index: floating-point-safe, drawn from the
operating system's randomness, so not reproducible from a seed); its calibration then says "exact".

Registered names (``MECHANISMS``, ``make_mechanism``):

- ``gaussian_analytic``  — σ from diffprivlib's ``GaussianAnalytic`` (Balle & Wang 2018) with Δ2; what the
  study-A paper ran for its Gaussian results.
- ``gaussian_classic``   — σ = sqrt(2 ln(1.25/δ))·Δ2/ε, for comparison; the theorem only covers ε < 1.
- ``laplace_implemented`` — b = 2C/ε, what the paper ran; coordinate-wise Laplace needs an L1 bound, so this is
  not a formal full-vector guarantee (except for d = 1, where Δ1 = Δ2).
- ``laplace_formal``     — b = Δ1/ε with Δ1 = 2·sqrt(d)·C, what a formal full-vector ε-DP release needs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from eegprivacy.privacy.sensitivity import l1_sensitivity_replace_one, l2_sensitivity_replace_one
from eegprivacy.validation import EPSILON, check

DEFAULT_DELTA = 1e-5
_CONDITIONAL = "conditional on fixed scaling statistics and replace-one patient adjacency"


@dataclass(frozen=True)
class Calibration:
    """A mechanism's noise scale for one (C, d), and whether its ε is a formal guarantee."""

    noise_scale: float  # σ for Gaussian noise, b for Laplace noise
    sensitivity: float
    sensitivity_norm: str  # "L2" or "L1": the norm the sensitivity bound is in
    formal_guarantee: bool
    note: str
    mechanism: str
    clip_norm: float
    dim: int
    sampling: str = "idealised"  # "idealised" (seeded numpy floating point) or "exact" (OpenDP); see SAMPLING

    def to_dict(self) -> dict:
        """Flat params for MLflow; ``noise_scale`` is the param every run logs."""
        return asdict(self)


# How noise is drawn (``sampler``), and what each makes of the guarantee (``Calibration.sampling``).
SAMPLERS = {"numpy": "idealised", "opendp": "exact"}
SAMPLING = {"idealised": "idealised sampling: seeded numpy floating-point draws (textbook sampling, Mironov 2012); "
                         "right for simulating a release, not for releasing real data",
            "exact": "exact sampling: OpenDP's floating-point-safe samplers (operating-system randomness, not "
                     "reproducible from a seed)"}


def guarantee_label(calibration) -> str:
    """How a table states a calibration's guarantee: "yes (idealised sampling)", "yes (exact sampling)" or "NO".

    ``calibration`` is a :class:`Calibration` or its ``to_dict()`` (a row without ``sampling`` was idealised).
    """
    get = calibration.get if isinstance(calibration, dict) else lambda k, d=None: getattr(calibration, k, d)
    if not get("formal_guarantee"):
        return "NO"
    return f"yes ({get('sampling', 'idealised') or 'idealised'} sampling)"


def _check_epsilon(epsilon: float) -> None:
    check(epsilon, EPSILON, "epsilon")


def _sensitivities(clip_norm: float, dim: int) -> tuple[float, float]:
    """(Δ2, Δ1) for (C, d); computing both validates both arguments whichever the mechanism uses."""
    return l2_sensitivity_replace_one(clip_norm), l1_sensitivity_replace_one(clip_norm, dim)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """σ of the analytic Gaussian mechanism (Balle & Wang 2018) for an L2 ``sensitivity``, from diffprivlib.

    Shared by the release (:class:`GaussianAnalytic`) and every other Gaussian step of study A (DP-PCA's
    covariance, the synthesiser's marginals), so one calibration serves them all.
    """
    from diffprivlib.mechanisms import GaussianAnalytic as _DiffPrivLibGaussianAnalytic

    _check_epsilon(epsilon)
    # variance() is diffprivlib's public read of its calibrated scale; no noise is drawn. Its search overflows
    # exp(ε) harmlessly for large ε (the σ it returns is then conservative), so the numpy overflow warnings are
    # silenced rather than repeated for every cell of a sweep.
    with np.errstate(over="ignore", invalid="ignore"):
        return math.sqrt(_DiffPrivLibGaussianAnalytic(epsilon=float(epsilon), delta=float(delta),
                                                      sensitivity=float(sensitivity)).variance(0.0))



def gaussian_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of a Gaussian mechanism with μ = Δ2/σ: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018, Thm 8;
    the μ-GDP curve of Dong, Roth & Su 2019). Exact, for every ε ≥ 0 at once."""
    from scipy.stats import norm

    return float(norm.cdf(-epsilon / mu + mu / 2.0) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2.0))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε at which a Gaussian mechanism with μ = Δ2/σ is (ε, δ)-DP (inverts :func:`gaussian_delta`).

    Gaussian steps compose exactly in μ (μ² adds up: Dong, Roth & Su 2019, Cor. 3.3), so this is the tight ε of
    any sequence of Gaussian mechanisms at one δ, where adding the parts' ε (basic composition) is loose."""
    from scipy.optimize import brentq

    if mu <= 0:
        return 0.0
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    high = 1.0
    while gaussian_delta(high, mu) > delta:
        high *= 2.0
    return float(brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, high, xtol=1e-12))


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The largest μ = Δ2/σ of a Gaussian mechanism that is (ε, δ)-DP (the analytic Gaussian's calibration as a
    closed-form curve; :func:`gaussian_sigma` is the same search in diffprivlib, rounded to the safe side)."""
    from scipy.optimize import brentq

    _check_epsilon(epsilon)
    high = 1.0
    while gaussian_delta(epsilon, high) < delta:
        high *= 2.0
    return float(brentq(lambda m: gaussian_delta(epsilon, m) - delta, 1e-9, high, xtol=1e-12))

@dataclass(frozen=True)
class Mechanism:
    """Base: privacy parameters only; subclasses say how they calibrate and what they sample."""

    epsilon: float
    delta: float = 0.0

    name: ClassVar[str] = ""
    uses_delta: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _check_epsilon(self.epsilon)
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        if self.uses_delta:
            if not 0.0 < self.delta < 1.0:
                raise ValueError(f"{self.name} needs 0 < delta < 1, got {self.delta}")
        elif self.delta != 0.0:
            raise ValueError(f"{self.name} is pure ε-DP; delta must be 0, got {self.delta}")

    def calibrate(self, clip_norm: float, dim: int) -> Calibration:
        raise NotImplementedError

    def _draw(self, rng: np.random.Generator, scale: float, shape) -> np.ndarray:
        raise NotImplementedError

    def sample(self, shape, calibration: Calibration, rng: np.random.Generator) -> np.ndarray:
        """Noise of ``shape`` at the calibrated scale; refuses a calibration made by another mechanism."""
        if calibration.mechanism != self.name:
            raise ValueError(f"calibration is for {calibration.mechanism!r}, not {self.name!r}")
        return self._draw(np.random.default_rng(rng), float(calibration.noise_scale), shape)

    def privatise(self, X, calibration: Calibration, rng=None, sampler: str = "numpy") -> np.ndarray:
        """``X`` (rows = records, already clipped) plus noise at the calibrated scale.

        ``sampler="numpy"``: ``X + sample(X.shape, calibration, rng)``, seeded and idealised (see the module
        docstring). ``sampler="opendp"``: each row goes through OpenDP's measurement of the same noise family and
        scale, which samples exactly and rounds safely; ``rng`` is then unused (OpenDP draws from the operating
        system), so the release is not reproducible. Use it to release real data.
        """
        X = np.asarray(X, dtype=float)
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {sorted(SAMPLERS)}, got {sampler!r}")
        if sampler == "numpy":
            return X + self.sample(X.shape, calibration, rng)
        if calibration.mechanism != self.name:
            raise ValueError(f"calibration is for {calibration.mechanism!r}, not {self.name!r}")
        measure = _opendp_measurement(self._opendp, float(calibration.noise_scale))
        rows = X.reshape(-1, X.shape[-1]) if X.ndim else X.reshape(1, 1)
        return np.asarray([measure(row.tolist()) for row in rows], dtype=float).reshape(X.shape)

    def exact_calibration(self, calibration: Calibration) -> Calibration:
        """``calibration`` restated for a release drawn with OpenDP's exact samplers."""
        from dataclasses import replace

        return replace(calibration, sampling=SAMPLERS["opendp"])

    def to_dict(self) -> dict:
        """MLflow params / tags: ``mechanism``, ``epsilon``, ``delta``."""
        return {"mechanism": self.name, "epsilon": self.epsilon, "delta": self.delta}


def _opendp_measurement(kind: tuple[str, str], scale: float):
    """OpenDP's vector measurement ``kind`` = (constructor, input metric) at ``scale`` (lazy import)."""
    try:
        import opendp.prelude as dp
    except ImportError as err:  # pragma: no cover - opendp is pinned in requirements.txt
        raise ImportError("sampler='opendp' needs the opendp package (pip install opendp)") from err
    dp.enable_features("contrib")
    constructor, metric = kind
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    return getattr(dp.m, constructor)(domain, getattr(dp, metric)(T=float), scale=scale)


class _GaussianNoise:
    _opendp: ClassVar[tuple[str, str]] = ("make_gaussian", "l2_distance")

    def _draw(self, rng, scale, shape):
        return rng.normal(0.0, scale, size=shape)


class _LaplaceNoise:
    _opendp: ClassVar[tuple[str, str]] = ("make_laplace", "l1_distance")

    def _draw(self, rng, scale, shape):
        return rng.laplace(0.0, scale, size=shape)


@dataclass(frozen=True)
class _DeltaGaussian(_GaussianNoise, Mechanism):
    """The (ε, δ) Gaussian mechanisms' shared field: δ, which their calibration reads."""

    delta: float = DEFAULT_DELTA
    uses_delta: ClassVar[bool] = True


@dataclass(frozen=True)
class GaussianAnalytic(_DeltaGaussian):
    """Analytic Gaussian mechanism; σ comes from diffprivlib so the paper's Table 3 is reproduced exactly."""

    name: ClassVar[str] = "gaussian_analytic"

    def calibrate(self, clip_norm: float, dim: int) -> Calibration:
        delta2, _ = _sensitivities(clip_norm, dim)
        sigma = gaussian_sigma(self.epsilon, self.delta, delta2)
        return Calibration(sigma, delta2, "L2", True,
                           f"analytic Gaussian (ε, δ)-DP for the full table, {_CONDITIONAL}",
                           self.name, float(clip_norm), int(dim))


@dataclass(frozen=True)
class GaussianClassic(_DeltaGaussian):
    """Classic Gaussian bound, kept for comparison: looser than analytic and only proven for ε < 1."""

    name: ClassVar[str] = "gaussian_classic"

    def calibrate(self, clip_norm: float, dim: int) -> Calibration:
        delta2, _ = _sensitivities(clip_norm, dim)
        sigma = math.sqrt(2.0 * math.log(1.25 / self.delta)) * delta2 / self.epsilon
        formal = self.epsilon < 1.0
        note = (f"classic Gaussian bound (ε < 1), {_CONDITIONAL}" if formal else
                "classic Gaussian bound used outside its theorem (needs ε < 1): not a formal guarantee")
        return Calibration(sigma, delta2, "L2", formal, note, self.name, float(clip_norm), int(dim))


@dataclass(frozen=True)
class LaplaceImplemented(_LaplaceNoise, Mechanism):
    """The paper's Laplace runs: b = 2C/ε, i.e. an L2 bound put where coordinate-wise Laplace needs an L1 bound."""

    name: ClassVar[str] = "laplace_implemented"

    def calibrate(self, clip_norm: float, dim: int) -> Calibration:
        delta2, delta1 = _sensitivities(clip_norm, dim)
        formal = int(dim) == 1  # only there does Δ1 equal Δ2
        note = (f"coordinate-wise Laplace, ε-DP for d = 1, {_CONDITIONAL}" if formal else
                f"b = 2C/ε as the paper ran it; coordinate-wise Laplace needs Δ1 = {delta1:.2f} here, "
                "so this is NOT a formal full-vector ε-DP guarantee")
        return Calibration(delta2 / self.epsilon, delta2, "L2", formal, note, self.name, float(clip_norm),
                           int(dim))


@dataclass(frozen=True)
class LaplaceFormal(_LaplaceNoise, Mechanism):
    """Coordinate-wise Laplace calibrated to the full-vector L1 bound: b = Δ1/ε."""

    name: ClassVar[str] = "laplace_formal"

    def calibrate(self, clip_norm: float, dim: int) -> Calibration:
        _, delta1 = _sensitivities(clip_norm, dim)
        return Calibration(delta1 / self.epsilon, delta1, "L1", True,
                           f"coordinate-wise Laplace ε-DP for the full table, {_CONDITIONAL}",
                           self.name, float(clip_norm), int(dim))


def check_mechanism(mechanism) -> Mechanism:
    """``mechanism`` itself if it is a :class:`Mechanism`; a releaser's fit starts with this."""
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be a Mechanism (see make_mechanism), got {mechanism!r}")
    return mechanism


MECHANISMS: dict[str, type[Mechanism]] = {
    cls.name: cls for cls in (GaussianAnalytic, GaussianClassic, LaplaceImplemented, LaplaceFormal)
}


def make_mechanism(name: str, epsilon: float, delta: float = DEFAULT_DELTA) -> Mechanism:
    """Mechanism by registry name; ``delta`` is ignored by the pure-ε (Laplace) mechanisms, which carry δ = 0."""
    try:
        cls = MECHANISMS[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; known: {sorted(MECHANISMS)}") from None
    return cls(epsilon=epsilon, delta=delta) if cls.uses_delta else cls(epsilon=epsilon)
