"""Parameter constraints, declared next to the parameter they guard; a constraint's text is the error message.

In the spirit of scikit-learn's ``utils/_param_validation.py``: an :class:`Interval`, an :class:`Options` set, a
:class:`ListOf` or :class:`AnyOf` of them. The typed params (:mod:`eegprivacy.params`), the mechanisms, the
federated DP client mod and the accountants all check ε with the one :data:`EPSILON` (finite) or
:data:`EPSILON_OR_INF` (∞ meaning "no noise") defined here, so the rule and its wording exist once.
This module imports nothing from the package: every layer may use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any


class Constraint:
    """What a value must be; ``str(constraint)`` completes the sentence "it must be ..."."""

    text: str = "valid"

    def is_satisfied_by(self, value: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text


def _is_real(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _is_integral(value) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class Interval(Constraint):
    """A number in [low, high] (``closed`` says which ends belong). ``integral`` asks for a whole number;
    ``allow_inf`` lets +∞ through even where ``high`` is None (e.g. ε = ∞ for "no noise")."""

    low: float | None
    high: float | None
    closed: str = "both"  # "both", "left", "right" or "neither"
    integral: bool = False
    allow_inf: bool = False
    text: str = ""

    def is_satisfied_by(self, value) -> bool:
        if not (_is_integral(value) if self.integral else _is_real(value)):
            return False
        if math.isnan(value):
            return False
        if math.isinf(value):
            return self.allow_inf and value > 0
        if self.low is not None and (value < self.low or (value == self.low and self.closed in ("right", "neither"))):
            return False
        if self.high is not None and (value > self.high or (value == self.high and self.closed in ("left", "neither"))):
            return False
        return True

    def __str__(self) -> str:
        if self.text:
            return self.text
        kind = "a whole number" if self.integral else "a number"
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        low = "-∞" if self.low is None else f"{self.low:g}"
        high = "∞" if self.high is None else f"{self.high:g}"
        return f"{kind} in {left}{low}, {high}{right}" + (" or ∞" if self.allow_inf and self.high is not None else "")


@dataclass(frozen=True)
class Options(Constraint):
    """One of a fixed set of values."""

    options: tuple
    text: str = ""

    def is_satisfied_by(self, value) -> bool:
        try:
            return value in self.options
        except TypeError:  # unhashable or incomparable values are not options
            return False

    def __str__(self) -> str:
        return self.text or "one of " + ", ".join(str(o) for o in self.options)


@dataclass(frozen=True)
class ListOf(Constraint):
    """A list (of at least ``min_items``) whose every item satisfies ``item``."""

    item: Constraint
    min_items: int = 1
    text: str = ""

    def is_satisfied_by(self, value) -> bool:
        return (isinstance(value, list) and len(value) >= self.min_items
                and all(self.item.is_satisfied_by(v) for v in value))

    def __str__(self) -> str:
        return self.text or f"a non-empty list of {self.item}"


@dataclass(frozen=True)
class AnyOf(Constraint):
    """Any one of several constraints."""

    constraints: tuple
    text: str = ""

    def is_satisfied_by(self, value) -> bool:
        return any(c.is_satisfied_by(value) for c in self.constraints)

    def __str__(self) -> str:
        return self.text or " or ".join(str(c) for c in self.constraints)


@dataclass(frozen=True)
class InstanceOf(Constraint):
    """A value of the given type(s) (bool is not an int here)."""

    types: tuple
    text: str = ""

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, self.types) and not (isinstance(value, bool) and bool not in self.types)

    def __str__(self) -> str:
        return self.text or " or ".join(t.__name__ for t in self.types)


@dataclass(frozen=True)
class Range(Constraint):
    """A search range [low, high] of positive finite numbers with low < high (sampled log-uniformly)."""

    integral: bool = False
    text: str = "a [low, high] range with 0 < low < high"

    def is_satisfied_by(self, value) -> bool:
        number = _is_integral if self.integral else _is_real
        return (isinstance(value, list) and len(value) == 2 and all(number(v) and math.isfinite(v) and v > 0
                                                                    for v in value) and value[0] < value[1])


class InvalidParameterError(ValueError):
    """A value breaks its declared constraint; the message names the parameter and what it must be."""


def check(value, constraint: Constraint, name: str):
    """Return ``value`` if it satisfies ``constraint``, else raise :class:`InvalidParameterError` naming ``name``."""
    if not constraint.is_satisfied_by(value):
        raise InvalidParameterError(f"{name} = {value!r} is invalid; it must be {constraint}")
    return value


# ---- The shared privacy constraints ------------------------------------------------------------------------
EPSILON = Interval(0, None, closed="neither", text="a positive finite ε (ε > 0)")
EPSILON_OR_INF = Interval(0, None, closed="neither", allow_inf=True, text="a positive ε (ε > 0), or ∞ for no noise")
EPSILONS = ListOf(EPSILON, text="a non-empty list of positive finite ε values (ε > 0)")
EPSILONS_OR_INF = ListOf(EPSILON_OR_INF, text="a non-empty list of ε values, each > 0 or ∞ (no noise)")
EPSILON_SPENT = Interval(0, None, text="a finite ε ≥ 0 (the budget one step spends)")
DELTA = Interval(0, 1, closed="neither", text="a δ strictly between 0 and 1")
CLIP_NORM = Interval(0, None, closed="neither", text="a positive finite clipping norm C (C > 0)")
FRACTION_OPEN = Interval(0, 1, closed="neither", text="a fraction strictly between 0 and 1")
FRACTION = Interval(0, 1, text="a fraction between 0 and 1")
POSITIVE = Interval(0, None, closed="neither", text="a positive finite number")
NON_NEGATIVE = Interval(0, None, text="a finite number ≥ 0")
TEXT = InstanceOf((str,), text="a text value")
TEXTS = ListOf(TEXT, text="a non-empty list of names")
BOOLEAN = InstanceOf((bool,), text="true or false")


def count(minimum: int = 1, what: str = "") -> Interval:
    """A whole number ≥ ``minimum`` (``what`` names the unit in the message, e.g. "seeds")."""
    return Interval(minimum, None, integral=True,
                    text=f"a whole number{' of ' + what if what else ''}, at least {minimum}")


def counts(minimum: int = 1, what: str = "values") -> ListOf:
    return ListOf(count(minimum), text=f"a non-empty list of whole-number {what} ≥ {minimum}")


def options(values: Iterable, text: str = "") -> Options:
    values = tuple(values)
    return Options(values, text=text or "one of " + ", ".join(map(str, values)))


def subset_of(values: Iterable, what: str = "values") -> ListOf:
    values = tuple(values)
    return ListOf(Options(values), text=f"a non-empty list of {what} from [{', '.join(map(str, values))}]")


SEEDS = AnyOf((count(1), ListOf(Interval(None, None, integral=True))),
              text="a seed count ≥ 1 or a non-empty list of whole-number seeds")
