"""A small typed validator for data read from disk: JSON -> dataclass fields, checked against type hints.

Everything the app reads back (conversations, traces, settings) may have been damaged, hand-edited, or
written by another version. `checked_fields` keeps the fields whose values match their type hints and
reports the others; it never raises on a bad value, only on a document that is not an object at all.
Qt-free.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from typing import Any


class InvalidData(ValueError):
    """A document that cannot be read as what it claims to be; the message says what is wrong."""


def valid_text(value: object) -> bool:
    """A str that can be written back as UTF-8 (JSON allows lone surrogates such as "\\udcff")."""
    if not isinstance(value, str):
        return False
    if value.isascii():  # the common case, without encoding a copy
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def conform(value: Any, hint: Any, *, finite: bool = False) -> Any:
    """`value` as `hint` (JSON lists become tuples where the hint says tuple); InvalidData if it is not."""
    return _checker(hint, finite)(value)


@functools.cache
def _checker(hint: Any, finite: bool) -> Callable[[Any], Any]:
    """conform() for one hint, compiled once: a reopened chat checks ~10^6 values against a few hints.

    (Resolving the hints on every record, with typing.get_type_hints, was 75 % of opening a long chat.)"""
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return lambda value: value
    refuse = _refuser(hint)
    if origin in (typing.Union, types.UnionType):
        return _union_checker([_checker(option, finite) for option in typing.get_args(hint)], refuse)
    scalar = _scalar_checker(hint, finite, refuse)
    if scalar is not None:
        return scalar
    if hint is dict or origin is dict:
        return lambda value: value if isinstance(value, dict) and all(valid_text(k) for k in value) else refuse(value)
    if hint is list or origin is list:
        args = typing.get_args(hint)
        item = _checker(args[0], finite) if args else None

        def listed(value: Any) -> list:
            if not isinstance(value, list):
                refuse(value)
            return [item(v) for v in value] if item is not None else value
        return listed
    if origin is tuple:
        return _tuple_checker(typing.get_args(hint), finite, refuse)
    raise TypeError(f"conform() does not handle {hint!r}")


def _refuser(hint: Any) -> Callable[[Any], typing.NoReturn]:
    def refuse(value: Any) -> typing.NoReturn:
        raise InvalidData(f"{_shown(value)} is not {_name(hint)}")
    return refuse


def _union_checker(options: list[Callable[[Any], Any]], refuse: Callable[[Any], typing.NoReturn]
                   ) -> Callable[[Any], Any]:
    def union(value: Any) -> Any:
        for option in options:
            try:
                return option(value)
            except InvalidData:
                continue
        refuse(value)
    return union


def _scalar_checker(hint: Any, finite: bool, refuse: Callable[[Any], typing.NoReturn]
                    ) -> Callable[[Any], Any] | None:
    """The checker of None, bool, int, float or str (None for any other hint)."""
    if hint is type(None):
        return lambda value: None if value is None else refuse(value)
    if hint is bool:
        return lambda value: value if isinstance(value, bool) else refuse(value)
    if hint is int:
        return lambda value: value if isinstance(value, int) and not isinstance(value, bool) else refuse(value)
    if hint is float:
        def number(value: Any) -> float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if finite and not math.isfinite(value):
                    raise InvalidData(f"{_shown(value)} is not a finite number")
                return float(value)
            refuse(value)
        return number
    if hint is str:
        return lambda value: value if valid_text(value) else refuse(value)
    return None


def _tuple_checker(args: tuple, finite: bool, refuse: Callable[[Any], typing.NoReturn]) -> Callable[[Any], Any]:
    if len(args) == 2 and args[1] is Ellipsis:
        each = _checker(args[0], finite)
        return lambda value: tuple(each(v) for v in value) if isinstance(value, (list, tuple)) else refuse(value)
    parts = [_checker(a, finite) for a in args]
    if len(parts) == 2:  # (text, probability) pairs: a token's alternatives, the bulk of a trace
        first, second = parts

        def pair(value: Any) -> tuple:
            if isinstance(value, (list, tuple)) and len(value) == 2:
                return first(value[0]), second(value[1])
            refuse(value)
        return pair

    def fixed(value: Any) -> tuple:
        if isinstance(value, (list, tuple)) and len(value) == len(parts):
            return tuple(part(v) for part, v in zip(parts, value))
        refuse(value)
    return fixed


@functools.cache
def _field_checkers(cls: type, finite: bool) -> dict[str, Callable[[Any], Any]]:
    hints = typing.get_type_hints(cls)
    checkers = {}
    for f in fields(cls):
        try:
            checkers[f.name] = _checker(hints[f.name], finite)
        except TypeError as error:  # a nested record the caller checks itself (skipped), or a bug if not
            checkers[f.name] = functools.partial(_unhandled, error)
    return checkers


def _unhandled(error: TypeError, value: Any) -> typing.NoReturn:
    raise error


def checked_fields(cls: type, data: object, *, skip: tuple[str, ...] = (), finite: bool = False,
                   problems: list[str] | None = None) -> tuple[dict, dict]:
    """(known fields whose values fit their hints, unknown fields) of JSON object `data` for dataclass `cls`.

    A known field with a bad value is left out (the dataclass default applies) and described in
    `problems`. Fields in `skip` are left to the caller (nested records)."""
    if not isinstance(data, dict):
        raise InvalidData(f"expected an object, found {_kind(data)}")
    checkers = _field_checkers(cls, finite)
    known: dict = {}
    unknown: dict = {}
    for key, value in data.items():
        check = checkers.get(key)
        if check is None:
            if valid_text(key):
                unknown[key] = value
            continue
        if key in skip:
            continue
        try:
            known[key] = check(value)
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
