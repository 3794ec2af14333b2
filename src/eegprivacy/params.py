"""Reading ``params/*.yaml``: the single source of every knob a stage uses.

Every section is checked on reading (:func:`validate_params`), so a privacy parameter out of range (ε ≤ 0,
δ ∉ (0, 1), C ≤ 0) or an empty grid stops a stage before it loads data or writes anything, with an error that
names the file, the parameter and the range it must be in. Only keys present are checked; a missing key is the
stage's own ``KeyError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml


class ParamsError(ValueError):
    """A params value is out of range; the message names the file, the key and what it must be."""


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value) -> bool:
    return _number(value) and value > 0


def _open_unit(value) -> bool:
    return _number(value) and 0 < value < 1


def _closed_unit(value) -> bool:
    return _number(value) and 0 <= value <= 1


def _count(minimum: int) -> Callable[[Any], bool]:
    return lambda value: _integer(value) and value >= minimum


def _non_empty_list(item: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, list) and len(value) > 0 and all(item(v) for v in value)


def _mechanism_names(value) -> bool:
    from eegprivacy.privacy.mechanisms import MECHANISMS  # lazy: reading params needs no privacy layer otherwise

    return _non_empty_list(lambda v: v in MECHANISMS)(value)


def _seeds(value) -> bool:
    """A seed count (≥ 1) or a non-empty list of seeds."""
    return _count(1)(value) or _non_empty_list(_integer)(value)


def _range(value) -> bool:
    """A search range [low, high] of positive finite numbers, low < high (sampled log-uniformly)."""
    return isinstance(value, list) and len(value) == 2 and all(_positive(v) for v in value) and value[0] < value[1]


EPSILONS = (_non_empty_list(_positive), "a non-empty list of positive finite ε values (ε > 0)")
EPSILON = (_positive, "a positive finite ε (ε > 0)")
DELTA = (_open_unit, "a δ strictly between 0 and 1")
CLIP_NORM = (_positive, "a positive finite clipping norm C (C > 0)")
MECHANISM_LIST = (_mechanism_names, "a non-empty list of mechanism names (eegprivacy.privacy.MECHANISMS: "
                                "gaussian_analytic, gaussian_classic, laplace_implemented, laplace_formal)")
SEED_COUNT = (_count(1), "a whole number of seeds, at least 1")
FRACTION_OPEN = (_open_unit, "a fraction strictly between 0 and 1")
FRACTION = (_closed_unit, "a fraction between 0 and 1")

# section -> dotted key -> (check, what it must be). Keys of nested blocks are dotted: "membership.trials".
RULES: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "dp_release": {"epsilons": EPSILONS, "delta": DELTA, "clip_norm": CLIP_NORM, "mechanisms": MECHANISM_LIST,
                   "noise_seeds": SEED_COUNT},
    "dp_utility": {"baseline_mlp_seeds": SEED_COUNT, "nested_seeds": (_count(0), "a whole number ≥ 0"),
                   "figure_epsilon": EPSILON},
    "table_attacks": {"epsilons": EPSILONS, "mechanisms": MECHANISM_LIST, "noise_seeds": SEED_COUNT,
                      "reidentification.top_k": (_non_empty_list(_count(1)), "a non-empty list of k ≥ 1"),
                      "reidentification.metrics": (_non_empty_list(lambda v: isinstance(v, str)),
                                                   "a non-empty list of distance names"),
                      "membership.member_fraction": FRACTION_OPEN,
                      "membership.trials": (_count(1), "a whole number of trials, at least 1"),
                      "membership.scores": (_non_empty_list(lambda v: isinstance(v, str)),
                                            "a non-empty list of score names"),
                      "membership.fprs": (_non_empty_list(_open_unit),
                                          "a non-empty list of false-positive rates in (0, 1)")},
    "deployment": {"epsilons": EPSILONS, "mechanisms": MECHANISM_LIST, "noise_seeds": SEED_COUNT,
                   "scenarios": (_non_empty_list(lambda v: isinstance(v, str)), "a non-empty list of scenarios"),
                   "n_hospitals": (_count(2), "a whole number of hospitals, at least 2"),
                   "shared_fraction": (lambda v: _number(v) and 0 <= v < 1, "a fraction in [0, 1)"),
                   "federated.num_rounds": (_count(1), "a whole number of rounds, at least 1"),
                   "federated.local_epochs": (_count(1), "a whole number of epochs, at least 1"),
                   "federated.learning_rate_init": (_positive, "a positive learning rate")},
    "dp_scaling": {"total_epsilons": EPSILONS, "mechanisms": MECHANISM_LIST, "noise_seeds": SEED_COUNT,
                   "public_fraction": FRACTION_OPEN, "scaling_fraction": FRACTION_OPEN,
                   "bounds_margin": (lambda v: _number(v) and v >= 0, "a margin ≥ 0"),
                   "datasets": (_non_empty_list(lambda v: isinstance(v, str)), "a non-empty list of datasets")},
    "dp_audit": {"epsilons": EPSILONS, "delta": DELTA, "clip_norm": CLIP_NORM, "mechanisms": MECHANISM_LIST,
                 "dims": (_non_empty_list(_count(1)), "a non-empty list of dimensions d ≥ 1"),
                 "n_trials": (_count(1), "a whole number of trials, at least 1"),
                 "seeds": (_seeds, "a seed count ≥ 1"),
                 "confidence": FRACTION_OPEN},
    "federated_accounting": {"delta": DELTA,
                             "accountants": (_non_empty_list(lambda v: v in ("basic", "rdp", "pld")),
                                             "a non-empty list of accountants from [basic, rdp, pld]"),
                             "units": (_non_empty_list(lambda v: v in ("example", "client")),
                                       "a non-empty list of privacy units from [example, client]"),
                             "calibrations": (_non_empty_list(lambda v: v in ("nominal", "certified")),
                                              "a non-empty list of calibrations from [nominal, certified]"),
                             "pld.value_discretization_interval": (_positive, "a positive interval"),
                             "paper_protocol.num_rounds": (_count(1), "a whole number of rounds, at least 1"),
                             "paper_protocol.local_epochs": (_count(1), "a whole number of epochs, at least 1"),
                             "paper_protocol.epsilons": EPSILONS},
    "optuna_study_a": {"delta": DELTA, "noise_seeds": SEED_COUNT,
                       "n_trials": (_count(1), "a whole number of trials, at least 1"),
                       "n_jobs": (_count(1), "a whole number of processes, at least 1"),
                       "search_space.mechanisms": MECHANISM_LIST,
                       "search_space.epsilon": (_range, "a [low, high] range of ε with 0 < low < high"),
                       "search_space.clip_norm": (_range, "a [low, high] range of C with 0 < low < high"),
                       "protocol": (lambda v: v in ("optimistic", "nested"), "optimistic or nested"),
                       "sampler": (lambda v: v in ("tpe", "nsga2"), "tpe or nsga2"),
                       "heartbeat_interval": (_count(1), "a whole number of seconds, at least 1")},
    "optuna_study_b": {"noise_seeds": SEED_COUNT,
                       "n_trials": (_count(1), "a whole number of trials, at least 1"),
                       "n_jobs": (_count(1), "a whole number of processes, at least 1"),
                       "num_rounds": (_count(1), "a whole number of rounds, at least 1"),
                       "model": (lambda v: v in ("simplenet", "eegnet"), "simplenet or eegnet"),
                       "search_space.mechanisms": (_non_empty_list(lambda v: v in ("laplace_gradient", "none")),
                                                   "a non-empty subset of [laplace_gradient, none]"),
                       "search_space.epsilon": (_range, "a [low, high] range of per-step ε with 0 < low < high"),
                       "search_space.clip_norm": (_range, "a [low, high] range of C with 0 < low < high"),
                       "search_space.local_epochs": (lambda v: _range(v) and all(_integer(x) for x in v),
                                                     "a [low, high] range of whole epochs with 1 ≤ low < high"),
                       "sampler": (lambda v: v in ("tpe", "nsga2"), "tpe or nsga2"),
                       "heartbeat_interval": (_count(1), "a whole number of seconds, at least 1")},
    "linkage": {"n_records": (_count(1), "a whole number of records, at least 1"), "overlap": FRACTION,
                "household_rate": FRACTION, "format_rate": FRACTION,
                "typo_rates": (_non_empty_list(_closed_unit), "a non-empty list of rates in [0, 1]"),
                "seeds": (_seeds, "a non-empty list of seeds (or a count ≥ 1)"),
                "q": (_count(1), "a q-gram length ≥ 1"), "num_bits": (_count(1), "a filter length ≥ 1"),
                "num_hashes": (_count(1), "a hash count ≥ 1"),
                "thresholds": (_non_empty_list(_closed_unit), "a non-empty list of Dice thresholds in [0, 1]"),
                "default_threshold": (_closed_unit, "a Dice threshold in [0, 1]")},
}

_MISSING = object()


def _numeric_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _lookup(section: Mapping, dotted: str):
    value: Any = section
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def validate_params(params: Mapping[str, Any], source: str | Path = "params",
                    sections: list[str] | None = None) -> None:
    """Check the known keys of each section against :data:`RULES`; raise :class:`ParamsError` on the first
    value out of range. ``sections=None`` checks every section the file has."""
    for section in sections if sections is not None else list(params):
        rules, block = RULES.get(section), params.get(section)
        if rules is None or not isinstance(block, Mapping):
            continue
        for key, (check, must_be) in rules.items():
            value = _lookup(block, key)
            if value is not _MISSING and not check(value):
                texts = value if isinstance(value, list) else [value]
                hint = (" (YAML read a number as text: write 1.0e-5, with a dot, not 1e-5)"
                        if any(isinstance(v, str) and _numeric_text(v) for v in texts) else "")
                raise ParamsError(f"{source}: {section}.{key} = {value!r} is invalid; it must be {must_be}"
                                  f"{hint}. Fix it in {source} and run the stage again (nothing was computed or "
                                  "written)")


def load_params(path: str | Path, section: str | None = None) -> dict[str, Any]:
    """Load a params file (optionally one top-level section), with a clear error when it is missing; the
    section(s) returned are validated first (:func:`validate_params`)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"params file {path} not found (run from the repository root)")
    params = yaml.safe_load(path.read_text()) or {}
    if section is None:
        validate_params(params, path)
        return params
    if section not in params:
        raise KeyError(f"{path} has no section {section!r}; sections: {sorted(params)}")
    validate_params(params, path, [section])
    return params[section]
