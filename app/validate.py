"""A small typed validator for data read from disk: JSON -> dataclass fields, checked against type hints.

Everything the app reads back (conversations, traces, settings) may have been damaged, hand-edited, or
written by another version. `checked_fields` keeps the fields whose values match their type hints and
reports the others; it never raises on a bad value, only on a document that is not an object at all.
Qt-free.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import fields
from typing import Any


class InvalidData(ValueError):
    """A document that cannot be read as what it claims to be; the message says what is wrong."""


def valid_text(value: object) -> bool:
    """A str that can be written back as UTF-8 (JSON allows lone surrogates such as "\\udcff")."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def conform(value: Any, hint: Any, *, finite: bool = False) -> Any:
    """`value` as `hint` (JSON lists become tuples where the hint says tuple); InvalidData if it is not."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return conform(value, option, finite=finite)
            except InvalidData:
                continue
        raise InvalidData(f"{_shown(value)} is not {_name(hint)}")
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if finite and not math.isfinite(value):
                raise InvalidData(f"{_shown(value)} is not a finite number")
            return float(value)
    elif hint is str:
        if valid_text(value):
            return value
    elif hint is dict or origin is dict:
        if isinstance(value, dict) and all(valid_text(k) for k in value):
            return value
    elif hint is list or origin is list:
        if isinstance(value, list):
            args = typing.get_args(hint)
            return [conform(v, args[0], finite=finite) for v in value] if args else value
    elif origin is tuple:
        args = typing.get_args(hint)
        if isinstance(value, (list, tuple)):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(conform(v, args[0], finite=finite) for v in value)
            if len(value) == len(args):
                return tuple(conform(v, a, finite=finite) for v, a in zip(value, args))
    else:
        raise TypeError(f"conform() does not handle {hint!r}")
    raise InvalidData(f"{_shown(value)} is not {_name(hint)}")


def checked_fields(cls: type, data: object, *, skip: tuple[str, ...] = (), finite: bool = False,
                   problems: list[str] | None = None) -> tuple[dict, dict]:
    """(known fields whose values fit their hints, unknown fields) of JSON object `data` for dataclass `cls`.

    A known field with a bad value is left out (the dataclass default applies) and described in
    `problems`. Fields in `skip` are left to the caller (nested records)."""
    if not isinstance(data, dict):
        raise InvalidData(f"expected an object, found {_kind(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    known: dict = {}
    unknown: dict = {}
    for key, value in data.items():
        if key not in names:
            if valid_text(key):
                unknown[key] = value
            continue
        if key in skip:
            continue
        try:
            known[key] = conform(value, hints[key], finite=finite)
        except InvalidData as error:
            if problems is not None:
                problems.append(f"{key}: {error}")
    return known, unknown


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", None) or str(hint)


__all__ = ["InvalidData", "checked_fields", "conform", "valid_text"]
