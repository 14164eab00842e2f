"""Typed configs from TOML tables: one strict loader for every recipe kind (mining and training).

``typed_config(MineConfig, table, "mine")`` builds the dataclass from a TOML table and refuses, with
the section and the field named, an unknown key, a missing required one, or a value of the wrong
type (``mine.max_tasks must be int, got '10'``). TOML arrays become tuples for tuple fields; an int
is taken for a float field. Fields given as keyword arguments (nested configs built separately) are
not read from the table.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, TypeVar, Union

__all__ = ["checked_value", "typed_config"]

T = TypeVar("T")


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a TOML value fits a (resolved) type hint of a config field."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return value in args
    if origin in (Union, types.UnionType):
        return any(_conforms(value, arg) for arg in args)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(_conforms, value, args))
        return all(_conforms(item, args[0] if args else Any) for item in value)
    if origin is dict:
        return isinstance(value, dict)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def checked_value(where: str, value: Any, hint: Any) -> Any:
    """``value`` if it fits ``hint`` (TOML arrays become tuples for tuple fields, ints floats for
    float fields), else a ``ValueError`` that names ``where``."""
    if not _conforms(value, hint):
        expected = "a table" if typing.get_origin(hint) is dict else (
            hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", ""))
        raise ValueError(f"{where} must be {expected}, got {value!r}")
    origin = typing.get_origin(hint)
    if origin is tuple or (origin in (Union, types.UnionType) and isinstance(value, list)
                           and any(typing.get_origin(a) is tuple for a in typing.get_args(hint))):
        return tuple(value)
    return float(value) if hint is float else value


def typed_config(cls: type[T], table: Any, section: str, **extra: Any) -> T:
    """``cls(**table, **extra)``, with unknown, missing or mistyped keys reported by section and name."""
    checked_value(f"[{section}]", table, dict[str, Any])
    hints = typing.get_type_hints(cls)
    fields = {field.name: field for field in dataclasses.fields(cls) if field.name not in extra}  # type: ignore[arg-type]
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ValueError(f"unknown key {section}.{unknown[0]}; valid keys: {', '.join(sorted(fields))}")
    missing = [
        name for name, field in fields.items()
        if name not in table
        and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"missing key {section}.{missing[0]}")
    values = {name: checked_value(f"{section}.{name}", value, hints[name]) for name, value in table.items()}
    return cls(**values, **extra)
