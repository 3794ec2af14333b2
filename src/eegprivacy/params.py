"""Typed params: one :class:`Config` dataclass per ``params/*.yaml`` section, constraints beside the fields.

A stage's section is read once into its config type (:meth:`Config.load`), which checks every value against the
constraint declared next to its field (:mod:`eegprivacy.validation`; the constraint's text is the error), and
treats an unknown key or a missing required one as an error naming the file and the dotted key. So a privacy
parameter out of range (ε ≤ 0, δ ∉ (0, 1), C ≤ 0), a typo'd key or an empty grid stops a stage before it loads
data or writes anything. Code then reads ``config.epsilons``, never ``params["epsilons"]``.

Declaring a section::

    @dataclass(frozen=True)
    class DPReleaseConfig(Config):
        epsilons: list = param(EPSILONS, doc="privacy budgets of the sweep (per patient)")
        delta: float = param(DELTA)
        noise_seeds: int = param(count(1, "seeds"), default=10)
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from eegprivacy.validation import Constraint


class ParamsError(ValueError):
    """A params value is invalid, unknown or missing; the message names the file, the key and what it must be."""


def invalid(source, key: str, value, must: str) -> ParamsError:
    """The error of a params value that breaks its rule: the file, the dotted key, the value, what it must be, and
    that nothing ran. Every config's checks word their errors through it, so they read alike."""
    return ParamsError(f"{source}: {key} = {value!r} is invalid; it must be {must}. Fix it in {source} and run the "
                       "stage again (nothing was computed or written)")


def param(constraint: Constraint | None = None, *, default: Any = dataclasses.MISSING, doc: str = ""):
    """A config field with its constraint (checked on load) and a one-line description (``--help``, docs).
    A mutable default (list or dict) is copied per instance."""
    metadata = {"constraint": constraint, "doc": doc}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _numeric_text(value) -> bool:
    texts = value if isinstance(value, list) else [value]
    for text in texts:
        if isinstance(text, str):
            try:
                float(text)
                return True
            except ValueError:
                pass
    return False


def _config_type(hint) -> type | None:
    return hint if isinstance(hint, type) and issubclass(hint, Config) else None


def _mapping_of_config(hint) -> type | None:
    """``dict[str, SomeConfig]`` -> SomeConfig."""
    if typing.get_origin(hint) in (dict, Mapping):
        args = typing.get_args(hint)
        return _config_type(args[1]) if len(args) == 2 else None
    return None


def _unwrap_optional(hint):
    if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", typing.Union)):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


@dataclasses.dataclass(frozen=True)
class Config:
    """Base of every typed params section (a frozen dataclass; see the module docstring)."""

    @classmethod
    def from_mapping(cls, mapping: Any, source: str | Path = "params", prefix: str = ""):
        """Build the config from a YAML mapping, checking keys and constraints (errors name ``source`` and the
        dotted key; ``prefix`` is the section path, e.g. ``"dp_release."``)."""
        where = prefix.rstrip(".") or cls.__name__
        if not isinstance(mapping, Mapping):
            raise ParamsError(f"{source}: {where} must be a mapping of keys to values, not {mapping!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(mapping) - set(fields))
        if unknown:
            raise ParamsError(f"{source}: unknown key {prefix}{unknown[0]}; {where} takes "
                              f"{', '.join(sorted(fields))}. Fix it in {source} (nothing was computed or written)")
        hints = typing.get_type_hints(cls)
        values = {}
        for name, field in fields.items():
            key = f"{prefix}{name}"
            if name not in mapping:
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                    raise ParamsError(f"{source}: missing key {key}"
                                      + (f" ({field.metadata['doc']})" if field.metadata.get("doc") else "")
                                      + f"; add it to {source}")
                continue
            value, hint = mapping[name], _unwrap_optional(hints[name])
            if _config_type(hint) and value is not None and not isinstance(value, hint):
                value = hint.from_mapping(value, source, key + ".")
            elif _mapping_of_config(hint) and value is not None:
                if not isinstance(value, Mapping):
                    raise ParamsError(f"{source}: {key} must be a mapping of names to settings, not {value!r}")
                inner = _mapping_of_config(hint)
                value = {k: v if isinstance(v, inner) else inner.from_mapping({} if v is None else v, source,
                                                                                f"{key}.{k}.")
                         for k, v in value.items()}
            constraint = field.metadata.get("constraint")
            if constraint is not None and not constraint.is_satisfied_by(value):
                hint_text = (" (YAML read a number as text: write 1.0e-5, with a dot, not 1e-5)"
                             if _numeric_text(value) else "")
                raise invalid(source, key, value, f"{constraint}{hint_text}")
            values[name] = value
        config = cls(**values)
        config.check(source, prefix)
        return config

    def check(self, source: str | Path, prefix: str) -> None:
        """Cross-field rules (e.g. low < high of two fields); raise :class:`ParamsError`. None by default."""

    @classmethod
    def load(cls, path: str | Path, section: str):
        """Read ``section`` of the params file at ``path`` into this config type."""
        return cls.from_mapping(load_section(path, section), path, f"{section}.")

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (what MLflow logs and what cell configs hash)."""
        return dataclasses.asdict(self)

    def replace(self, **changes):
        """A copy with some fields changed (re-checked against their constraints)."""
        return type(self).from_mapping({**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                                        **changes}, "replace()")


def read_params_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"params file {path} not found (run from the repository root)")
    return yaml.safe_load(path.read_text()) or {}


def load_section(path: str | Path, section: str) -> dict[str, Any]:
    """The raw mapping of one top-level section, with an error naming the file when it is absent."""
    params = read_params_file(path)
    if section not in params:
        raise ParamsError(f"{path} has no section {section!r}; sections: {sorted(params)}")
    return params[section]


def load_params(path: str | Path, section: str | None = None) -> dict[str, Any]:
    """Raw YAML of a params file or one section, unchecked. Stages read their sections through their
    :class:`Config` type instead; this is for tools that only pass values on (e.g. DVC's params view)."""
    return read_params_file(path) if section is None else load_section(path, section)
