"""Privacy accounting for pipelines that spend budget in more than one step, shared by the studies.

Study A (DP scaling, then the release: two steps) uses the basic sequential composition theorem directly:
mechanisms run one after another on the same patients, each (εᵢ, δᵢ)-DP, possibly chosen adaptively from earlier
outputs, give (Σεᵢ, Σδᵢ)-DP overall (Dwork & Roth 2014, Thm 3.16). For two steps the tighter accountants gain little
and the basic bound is easy to audit.

Study B runs its Laplace step hundreds of times (local steps × rounds), where the choice of accountant matters. There
the release is described as a dp_accounting ``DpEvent`` (:func:`federated_event`) and handed to pluggable
accountants (:data:`ACCOUNTANTS`): ``basic`` (the same theorem, for pure-ε events), ``rdp`` and ``pld`` (Google's
dp_accounting). Each checks ``supports(event)`` before composing and raises :class:`UnsupportedAccountingError`
otherwise. All three are valid upper bounds at the stated δ, so the smallest is one too.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass
from typing import ClassVar

from eegprivacy.privacy.sensitivity import l1_sensitivity_replace_one
from eegprivacy.validation import EPSILON_OR_INF, EPSILON_SPENT, check


def _check_budget(epsilon, delta) -> tuple[float, float]:
    epsilon, delta = float(epsilon), float(delta)
    check(epsilon, EPSILON_SPENT, "epsilon")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {delta}")
    return epsilon, delta


def basic_composition(*budgets) -> tuple[float, float]:
    """(ε, δ) of running every ``(εᵢ, δᵢ)`` mechanism in sequence on the same data: (Σεᵢ, Σδᵢ).

    A bare number counts as a pure ε-DP step (δ = 0). At least one budget is needed: no steps is no release.
    """
    if not budgets:
        raise ValueError("basic_composition needs at least one (epsilon, delta) budget")
    total_epsilon = total_delta = 0.0
    for budget in budgets:
        epsilon, delta = (budget, 0.0) if isinstance(budget, (int, float)) else budget
        epsilon, delta = _check_budget(epsilon, delta)
        total_epsilon += epsilon
        total_delta += delta
    if total_delta >= 1.0:
        raise ValueError(f"composed delta {total_delta} ≥ 1 carries no guarantee")
    return total_epsilon, total_delta


def split_budget(total_epsilon: float, scaling_fraction: float) -> tuple[float, float]:
    """Total ε → (ε for the scaling statistics, ε for the release), so that they compose back to the total.

    ``scaling_fraction`` must lie strictly in (0, 1): at 0 the scaling would have no budget (use public statistics
    instead), at 1 the release would have none.
    """
    total_epsilon, _ = _check_budget(total_epsilon, 0.0)
    if total_epsilon <= 0:
        raise ValueError("total_epsilon must be > 0")
    scaling_fraction = float(scaling_fraction)
    if not 0.0 < scaling_fraction < 1.0:
        raise ValueError(f"scaling_fraction must lie strictly between 0 and 1, got {scaling_fraction}")
    scaling_epsilon = total_epsilon * scaling_fraction
    return scaling_epsilon, total_epsilon - scaling_epsilon



# ---------------------------------------------------------------------------------------------------------------
# Accountants over dp_accounting events (dp_accounting is imported on first use: it takes seconds to import)
# ---------------------------------------------------------------------------------------------------------------

class UnsupportedAccountingError(ValueError):
    """The accountant cannot bound this event (``supports(event)`` is False); raised before any composition."""


@functools.cache
def _pure_epsilon_accountant_class():
    """dp_accounting has no basic-composition accountant; this one sums pure ε so it shares the API
    (``supports``, ``compose``, ``get_epsilon``) of the other two and is checked the same way."""
    import dp_accounting

    class PureEpsilonAccountant(dp_accounting.PrivacyAccountant):
        """Σ ε over Laplace events (multiplier m = noise scale / sensitivity is (1/m)-DP); no-op costs 0, a
        non-private event makes ε infinite; events with a δ of their own (Gaussian, sampled) are unsupported."""

        def __init__(self):
            super().__init__(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
            self._epsilon = 0.0

        def _maybe_compose(self, event, count, do_compose):
            if isinstance(event, dp_accounting.NoOpDpEvent):
                return None
            if isinstance(event, dp_accounting.NonPrivateDpEvent):
                if do_compose:
                    self._epsilon = math.inf
                return None
            if isinstance(event, dp_accounting.SelfComposedDpEvent):
                return self._maybe_compose(event.event, event.count * count, do_compose)
            if isinstance(event, dp_accounting.ComposedDpEvent):
                for sub in event.events:
                    error = self._maybe_compose(sub, count, do_compose)
                    if error is not None:
                        return error
                return None
            if isinstance(event, dp_accounting.LaplaceDpEvent):
                if do_compose:
                    self._epsilon += count * _laplace_epsilon(event)
                return None
            return self.CompositionErrorDetails(
                invalid_event=event,
                error_message="basic composition sums pure-epsilon events only (Laplace, no-op, non-private)")

        def get_epsilon(self, target_delta: float) -> float:
            return self._epsilon  # pure DP: the same ε at every δ

    return PureEpsilonAccountant


def _laplace_epsilon(event) -> float:
    return math.inf if event.noise_multiplier == 0 else 1.0 / event.noise_multiplier


def _laplace_multipliers(event) -> set[float]:
    import dp_accounting

    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return {float(event.noise_multiplier)} if event.noise_multiplier > 0 else set()
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _laplace_multipliers(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return set().union(*(_laplace_multipliers(e) for e in event.events))
    return set()


def max_step_epsilon(event) -> float:
    """The largest pure ε of one Laplace step inside `event` (∞ for a non-private event, 0 for none)."""
    import dp_accounting

    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return _laplace_epsilon(event)
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
        return math.inf
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return 0.0
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return max_step_epsilon(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return max((max_step_epsilon(e) for e in event.events), default=0.0)
    raise UnsupportedAccountingError(f"{type(event).__name__} is not a pure-epsilon event")


@dataclass(frozen=True)
class EpsilonBound:
    """One accountant's ε at δ, what it used (RDP order, PLD grid) and the seconds it took."""

    accountant: str
    epsilon: float
    delta: float
    detail: str = ""
    seconds: float = 0.0


class Accountant:
    """A pluggable accountant: a name, a fresh dp_accounting accountant per query, and how to describe it.

    ``epsilon(event, δ)`` is the cumulative ε of `event` at δ. ``curve(event, counts, δ)`` composes `event`
    counts[0], then counts[1], ... times on one accountant and reads ε after each (a per-round curve without
    recomposing from scratch). Both check ``supports(event)`` first: an unsupported event is an error, never
    a silent wrong number.
    """

    name: ClassVar[str] = ""

    def make(self, event):  # pragma: no cover - every accountant overrides it
        raise NotImplementedError

    def describe(self, accountant, delta: float) -> str:
        return ""

    def settings(self) -> dict:
        """The knobs this accountant ran with, for params and reports."""
        return {}

    def epsilon(self, event, delta: float) -> EpsilonBound:
        return self.curve(event, [1], delta)[0]

    def curve(self, event, counts, delta: float) -> list[EpsilonBound]:
        import dp_accounting

        delta = float(delta)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie strictly between 0 and 1, got {delta}")
        counts = [int(c) for c in counts]
        if not counts or counts[0] < 1 or any(b <= a for a, b in zip(counts, counts[1:])):
            raise ValueError(f"counts must be increasing whole numbers >= 1, got {counts}")
        if not isinstance(event, dp_accounting.DpEvent):
            raise TypeError(f"expected a dp_accounting DpEvent, got {type(event).__name__}")
        whole = dp_accounting.SelfComposedDpEvent(event, counts[-1])
        if not self.make(whole).supports(event):
            raise UnsupportedAccountingError(
                f"the {self.name!r} accountant does not support this event ({type(event).__name__}: {event}); "
                "choose another accountant or describe the release with events it supports")
        reason = self.skip_reason(whole)
        if reason:  # a stated gap (ε = NaN) rather than a wrong number or a crash
            return [EpsilonBound(self.name, math.nan, delta, f"skipped: {reason}") for _ in counts]
        out = []
        for count in counts:
            # A fresh accountant per point, composing `count` at once: dp_accounting's PLD then self-composes
            # with tail truncation (one FFT power), where composing round after round onto one accountant
            # convolves ever longer untruncated arrays (measured 30x slower for 20 rounds of 20 steps).
            started = time.perf_counter()
            accountant = self.make(whole)  # the grid is chosen for the whole release, the same at every point
            accountant.compose(event, count)
            eps, note = self.read_epsilon(accountant, delta)
            out.append(EpsilonBound(self.name, eps, delta, self.describe(accountant, delta) + note,
                                    round(time.perf_counter() - started, 4)))
        return out

    def skip_reason(self, event) -> str | None:
        """Why this accountant cannot give a trustworthy number for `event` (None: it can)."""
        return None

    def read_epsilon(self, accountant, delta: float) -> tuple[float, str]:
        """ε at δ, and a note on how it was read when that differs from the accountant's own method."""
        return float(accountant.get_epsilon(delta)), ""


class BasicAccountant(Accountant):
    """Sequential composition of pure-ε events: ε = Σ εᵢ (Dwork & Roth 2014, Thm 3.16), valid at any δ. The
    bound a reader can check by hand, and the ceiling the tighter accountants must stay under."""

    name = "basic"

    def make(self, event):
        return _pure_epsilon_accountant_class()()

    def describe(self, accountant, delta: float) -> str:
        return "sum of per-step epsilons (pure DP; holds at delta = 0)"


class RdpAccountant(Accountant):
    """dp_accounting's RDP accountant (Laplace's RDP curve is exact, Mironov 2017, Prop. 6), turned into (ε, δ)
    at the best order of its grid; ``orders=None`` is dp_accounting's default grid (1.1 … 10.9, 11 … 63,
    128, 256, 512, 1024). For a large per-step ε it gains less than one unit of ε per step over the basic sum."""

    name = "rdp"

    def __init__(self, orders=None):
        self.orders = None if orders is None else tuple(float(o) for o in orders)

    def make(self, event):
        from dp_accounting.rdp import RdpAccountant as DpAccountingRdp

        return DpAccountingRdp(orders=self.orders)

    def describe(self, accountant, delta: float) -> str:
        if math.isinf(accountant.get_epsilon(delta)):
            return "no finite RDP bound"
        _, order = accountant.get_epsilon_and_optimal_order(delta)
        return f"optimal order {order:g}"

    def settings(self) -> dict:
        return {"orders": "dp_accounting default" if self.orders is None else list(self.orders)}


class PldAccountant(Accountant):
    """dp_accounting's PLD accountant with its pessimistic discretisation, so ε stays an upper bound at δ.

    The grid is ``value_discretization_interval`` (1e-4, dp_accounting's default) unless the PLD would get too
    big: one Laplace step spans privacy losses in [-ε, ε], so the interval is widened to
    max(base, 2·ε_step / max_step_points, Σε / max_total_points). Measured on 2 cores: at ε_step ≈ 410 (EEGNet's
    certified ε at nominal ε = 5) the default grid takes 13 s and 1.4 GB for one step, 5 000+ composed ε = 5 steps
    2 GB; a coarser pessimistic grid only loosens the bound, by at most one interval per composed step.
    """

    name = "pld"

    def __init__(self, value_discretization_interval: float = 1e-4, max_step_points: int = 100_000,
                 max_total_points: int = 20_000_000):
        self.base_interval = float(value_discretization_interval)
        self.max_step_points = int(max_step_points)
        self.max_total_points = int(max_total_points)
        if not self.base_interval > 0 or self.max_step_points < 1 or self.max_total_points < 1:
            raise ValueError("the PLD grid needs a positive interval and positive point caps")

    def interval_for(self, event) -> float:
        """The discretisation interval the rule above picks for `event` (the whole release, all rounds)."""
        try:
            step = max_step_epsilon(event)
        except UnsupportedAccountingError:
            return self.base_interval  # not pure ε: supports() says what is wrong
        if not math.isfinite(step):
            return self.base_interval
        total = _pure_epsilon_accountant_class()().compose(event).get_epsilon(0.5)
        return max(self.base_interval, 2.0 * step / self.max_step_points, total / self.max_total_points)

    def make(self, event):
        from dp_accounting.pld import PLDAccountant

        return PLDAccountant(value_discretization_interval=self.interval_for(event))

    def skip_reason(self, event) -> str | None:
        """dp_accounting 0.6.0 builds a Laplace PLD by "connect the dots", which degenerates once a step's ε
        nears ~700 (e^-ε underflows): measured at ε = 820 its probabilities sum to 31 (interval 0.0164) or half
        the mass becomes an infinite loss (interval 1e-3), and composing it crashes or gives nonsense. Each
        distinct Laplace step is built once on the grid and checked to be a probability distribution with no
        infinite loss (Laplace has none); if not, PLD is skipped for the event and says why."""
        from dp_accounting.pld import privacy_loss_distribution

        interval = self.interval_for(event)
        for multiplier in sorted(_laplace_multipliers(event)):
            try:
                pld = privacy_loss_distribution.from_laplace_mechanism(multiplier,
                                                                       value_discretization_interval=interval)
            except ValueError as err:  # e.g. "deltas are not in non-increasing order" at a huge certified ε
                return (f"dp_accounting cannot build the Laplace PLD at per-step epsilon {1 / multiplier:.4g} "
                        f"(interval {interval:.3g}: {str(err)[:60]}); use basic or RDP")
            for pmf in (pld._pmf_remove, pld._pmf_add):
                dense = pmf.to_dense_pmf()
                mass, infinite = float(dense._probs.sum()), float(dense._infinity_mass)
                if abs(mass + infinite - 1.0) > 1e-6 or infinite > 1e-9:  # rounding alone leaves ~1e-9
                    return (f"dp_accounting's Laplace PLD degenerates at per-step epsilon {1 / multiplier:.4g} "
                            f"(interval {interval:.3g}: probabilities sum to {mass:.4g}, infinite-loss mass "
                            f"{infinite:.3g}); use basic or RDP")
        return None

    def read_epsilon(self, accountant, delta: float) -> tuple[float, str]:
        """dp_accounting's ε, or the same quantity in log space where dp_accounting overflowed.

        dp_accounting 0.6.0 divides two probability masses before taking their log; once the lower mass is
        ~1e-308 (composed losses of several hundred) the quotient overflows and it returns ε = inf although no
        loss is infinite (measured: 160 Laplace steps of ε = 5 at δ = 1e-5). :func:`pld_epsilon_for_delta` does
        the same search with log-sum-exp and is used only then.
        """
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
            eps = float(accountant.get_epsilon(delta))
        if math.isinf(eps) and not accountant._contains_non_dp_event:
            return (pld_epsilon_for_delta(accountant._pld, delta),
                    "; epsilon read in log space (dp_accounting overflowed)")
        return eps, ""

    def describe(self, accountant, delta: float) -> str:
        return f"pessimistic PLD, value_discretization_interval={accountant._value_discretization_interval:.3g}"

    def settings(self) -> dict:
        return {"value_discretization_interval": self.base_interval, "max_step_points": self.max_step_points,
                "max_total_points": self.max_total_points, "pessimistic_estimate": True}


def pld_epsilon_for_delta(pld, delta: float) -> float:
    """Smallest ε ≥ 0 whose hockey-stick divergence is ≤ δ for a dp_accounting PrivacyLossDistribution, in log
    space: δ(ε) = m∞ + Σ_{ℓ > ε} p_ℓ (1 − e^{ε − ℓ}). Going down the losses, the set {ℓ > ε} grows; for the set
    above loss ℓ_j the solution is ε_j = log(U_j − δ) − log Σ p_ℓ e^{−ℓ}, valid once ε_j ≥ ℓ_j (the same search
    as dp_accounting's, without forming the ratio of two tiny masses)."""
    import numpy as np

    pmfs = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
    worst = 0.0
    for pmf in pmfs:
        dense = pmf.to_dense_pmf()
        probs = np.asarray(dense._probs, dtype=float)[::-1]
        losses = ((np.arange(len(dense._probs)) + dense._lower_loss) * dense._discretization)[::-1]
        infinity = float(dense._infinity_mass)
        if infinity > delta:
            return math.inf
        with np.errstate(divide="ignore"):
            log_terms = np.log(probs) - losses
        # before adding loss j: upper mass U_j and log lower mass log L_j over the losses above it
        upper = infinity + np.concatenate([[0.0], np.cumsum(probs)[:-1]])
        log_lower = np.concatenate([[-np.inf], np.logaddexp.accumulate(log_terms)[:-1]])
        with np.errstate(divide="ignore", invalid="ignore"):
            candidate = np.log(np.clip(upper - delta, 0.0, None)) - log_lower
        ok = (upper > delta) & np.isfinite(log_lower) & (candidate >= losses)
        if ok.any():
            eps = float(candidate[np.argmax(ok)])
        else:
            total_upper = infinity + float(probs.sum())
            total_log_lower = float(np.logaddexp.reduce(log_terms))
            if total_upper <= delta or math.log(total_upper - delta) <= total_log_lower:
                eps = 0.0
            else:
                eps = math.log(total_upper - delta) - total_log_lower
        worst = max(worst, max(0.0, eps))
    return worst


ACCOUNTANTS: dict[str, type[Accountant]] = {"basic": BasicAccountant, "rdp": RdpAccountant, "pld": PldAccountant}


def make_accountant(name: str, **options) -> Accountant:
    """An accountant by name (``basic``, ``rdp``, ``pld``) with its options (RDP ``orders``, PLD grid)."""
    if name not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {name!r}; known: {', '.join(ACCOUNTANTS)}")
    return ACCOUNTANTS[name](**options)


# ---------------------------------------------------------------------------------------------------------------
# Study B: per-step Laplace gradient DP, composed over local steps and rounds
# ---------------------------------------------------------------------------------------------------------------
# One step clips the client's *batch* gradient to L2 <= C and adds coordinate-wise Laplace(0, b = C/ε). Any
# change to the batch (one trial or all of them) moves the clipped gradient by at most 2C in L2, hence at most
# 2·sqrt(d)·C in L1: the clip protects the batch as a whole, and a larger unit pays once per step it touches.

PRIVACY_UNITS = {
    "example": "one EEG trial: it sits in one batch per local epoch, so it is touched local_epochs times in every "
               "round its client is sampled (the other steps of that round only see it through the model, which "
               "adaptive composition covers)",
    "client": "one subject's whole contribution (all its trials, same count): every local step of every round "
              "the client is sampled",
}

CALIBRATIONS = {
    "nominal": "the paper's reading: each step is treated as eps-DP (noise multiplier b/C = 1/eps); not a formal "
               "guarantee for d > 1",
    "certified": "what the noise certifies: Laplace needs the L1 sensitivity, and L2 clipping only bounds it by "
                 "Delta1 = 2*sqrt(d)*C (replace-one), so each step is (2*sqrt(d)*eps)-DP",
}

ROUND_BASES = {
    "worst_case": "every round: a client may be sampled in all num_rounds rounds (the guarantee)",
    "expected": "ceil(num_rounds * clients_per_round / n_clients) rounds, the mean participation; NOT a guarantee "
                "and no amplification by sampling: Flower samples a fixed number of clients without replacement "
                "(not Poisson) and the server knows who was sampled",
}


def per_step_epsilon(epsilon: float, calibration: str, dim: int, clip_norm: float = 1.0) -> float:
    """ε of one local step: the nominal ε itself, or Δ1 / b with Δ1 = 2·sqrt(d)·C and b = C/ε (C cancels)."""
    epsilon = float(epsilon)
    check(epsilon, EPSILON_OR_INF, "epsilon")
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r}; known: {', '.join(CALIBRATIONS)}")
    if math.isinf(epsilon):
        return math.inf
    if calibration == "nominal":
        return epsilon
    return l1_sensitivity_replace_one(clip_norm, dim) / (float(clip_norm) / epsilon)


@dataclass(frozen=True)
class FederatedSchedule:
    """How often study B's step runs: `local_epochs` passes over ceil(n_members / batch_size) batches per
    round a client is sampled in, for `num_rounds` rounds."""

    num_rounds: int
    local_epochs: int
    batches_per_epoch: int

    def __post_init__(self):
        for key in ("num_rounds", "local_epochs", "batches_per_epoch"):
            value = getattr(self, key)
            if int(value) != value or value < 1:
                raise ValueError(f"{key} must be a whole number >= 1, got {value!r}")

    @classmethod
    def for_client(cls, num_rounds: int, local_epochs: int, n_members: int, batch_size: int) -> FederatedSchedule:
        if int(n_members) < 1 or int(batch_size) < 1:
            raise ValueError("a client needs at least one member trial and a batch size >= 1")
        return cls(int(num_rounds), int(local_epochs), math.ceil(int(n_members) / int(batch_size)))

    def steps_per_round(self, unit: str) -> int:
        """Steps one unit takes part in per round its client is sampled (see PRIVACY_UNITS)."""
        if unit == "example":
            return self.local_epochs
        if unit == "client":
            return self.local_epochs * self.batches_per_epoch
        raise ValueError(f"unknown privacy unit {unit!r}; known: {', '.join(PRIVACY_UNITS)}")


def expected_rounds(num_rounds: int, clients_per_round: int, n_clients: int) -> int:
    """Mean rounds a client is sampled in, rounded up (see ROUND_BASES: not a guarantee)."""
    sampled = min(int(clients_per_round), int(n_clients))
    return max(1, math.ceil(int(num_rounds) * sampled / int(n_clients)))


def federated_round_event(epsilon: float, *, calibration: str, unit: str, dim: int, schedule: FederatedSchedule,
                          clip_norm: float = 1.0):
    """One round of study B for one privacy unit: its per-step Laplace event composed over its steps that round.

    ε = inf (no noise) is ``NonPrivateDpEvent``: every accountant then reports ε = inf.
    """
    import dp_accounting

    step = per_step_epsilon(epsilon, calibration, dim, clip_norm)
    steps = schedule.steps_per_round(unit)
    if math.isinf(step):
        return dp_accounting.SelfComposedDpEvent(dp_accounting.NonPrivateDpEvent(), steps)
    return dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(noise_multiplier=1.0 / step), steps)


def federated_event(epsilon: float, *, calibration: str, unit: str, dim: int, schedule: FederatedSchedule,
                    rounds: int | None = None, clip_norm: float = 1.0):
    """The whole release for one unit: the round event composed over `rounds` (default: all num_rounds)."""
    import dp_accounting

    rounds = schedule.num_rounds if rounds is None else int(rounds)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    round_event = federated_round_event(epsilon, calibration=calibration, unit=unit, dim=dim, schedule=schedule,
                                        clip_norm=clip_norm)
    return dp_accounting.SelfComposedDpEvent(round_event, rounds)
