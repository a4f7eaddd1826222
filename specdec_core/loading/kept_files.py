"""One way to read the files specdec keeps between runs: settings, cost memory, CPU plans, the phrase store, the
adapted draft, the catalogue's verdicts.

Anything in the user's folders can be changed by anything that runs as the user: a file may be truncated,
garbage, nested a million brackets deep, or not a file at all (a FIFO would block the reader forever, a device
would never end). So a kept file is read only when it is a regular file under its size limit, its JSON nested
no deeper than MAX_DEPTH, and its content of the shape its owner checks. A file that fails is renamed aside
(`<name>.damaged`, kept for a look) and rebuilt or skipped, and one line on stderr says which file and why.

Boundary: Qt-free and torch-free; owners pass their own schema check (a function that returns the value it
accepts, or raises ValueError, TypeError, KeyError or AttributeError).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
MAX_DEPTH = 32  # nesting of a kept JSON file: the deepest one specdec writes is 4
JSON_LIMIT = 4 << 20  # bytes of a kept JSON file: the largest specdec writes is a few KB
DAMAGED_SUFFIX = ".damaged"
SCHEMA_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError)


class DamagedFile(ValueError):
    """A kept file that cannot be used; the message says why, in words."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO")."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: Path, limit: int) -> bytes | None:
    """The file's bytes; None if it does not exist. DamagedFile if it is not a regular file or is over `limit`."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise DamagedFile(f"it cannot be read ({error.strerror or error})") from error
    if not stat.S_ISREG(info.st_mode):
        raise DamagedFile(f"it is {file_kind(info.st_mode)}, not a file")
    if info.st_size > limit:
        raise DamagedFile(f"it holds {info.st_size:,} bytes, over the {limit:,} such a file may")
    try:  # non-blocking: a FIFO put in its place since the stat does not hang the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise DamagedFile(f"it cannot be read ({error.strerror or error})") from error
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DamagedFile("it is not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise DamagedFile(f"it holds over the {limit:,} bytes such a file may")
    return data


def depth(value: object) -> int:
    """How deeply lists and objects nest in a parsed JSON value (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_json(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """JSON text as a value; DamagedFile when it is not UTF-8 JSON nested at most `max_depth` deep."""
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise DamagedFile("it is not UTF-8 text") from error
    except RecursionError as error:
        raise DamagedFile(f"it nests deeper than {max_depth} levels") from error
    except ValueError as error:
        raise DamagedFile(f"it is not JSON ({str(error)[:80]})") from error
    if depth(value) > max_depth:
        raise DamagedFile(f"it nests deeper than {max_depth} levels")
    return value


def checked(value: Any, schema: Callable[[Any], T]) -> T:
    """`schema(value)`, its complaint as DamagedFile."""
    try:
        return schema(value)
    except RecursionError as error:
        raise DamagedFile("it nests too deeply") from error
    except SCHEMA_ERRORS as error:
        raise DamagedFile(f"its content is not what specdec writes there ({type(error).__name__}: "
                          f"{str(error)[:80]})") from error


def instance_of(kind: type[T]) -> Callable[[Any], T]:
    """A schema check that accepts only a `kind` (list, dict)."""
    def check(value: Any) -> T:
        if not isinstance(value, kind):
            raise TypeError(f"it holds {type(value).__name__}, not {kind.__name__}")
        return value
    return check


def read_json(path: Path, schema: Callable[[Any], T], *, limit: int = JSON_LIMIT, max_depth: int = MAX_DEPTH
              ) -> T | None:
    """The checked content of a kept JSON file; None if it does not exist. Raises DamagedFile."""
    data = read_bytes(path, limit)
    return None if data is None else checked(parse_json(data, max_depth), schema)


def set_aside(path: Path, why: str, then: str) -> str:
    """Rename a damaged kept file (or folder) to `<name>.damaged` and say so on stderr, in one line, which it
    returns. `then` says what happens instead ("it is measured again", "replies go on without it")."""
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    for n in range(2, 100):  # an earlier damaged folder is kept too (a file would simply be replaced)
        if not aside.is_dir():
            break
        aside = path.with_name(f"{path.name}{DAMAGED_SUFFIX}-{n}")
    try:
        os.replace(path, aside)
        where = f"it was set aside as {aside.name}"
    except OSError as error:  # a read-only folder (a package's own files), an earlier .damaged folder
        where = f"it could not be set aside ({error.strerror or error})"
    line = f"specdec: {path} is damaged ({why}); {where}, and {then}"
    print(line, file=sys.stderr, flush=True)
    return line


def read_or_set_aside(path: Path, read: Callable[[Path], T], then: str) -> T | None:
    """`read(path)`, or None after setting a damaged file aside (`set_aside`). For speed aids and anything
    rebuilt from scratch: their failure never stops the work that uses them."""
    try:
        return read(path)
    except DamagedFile as error:
        set_aside(path, str(error), then)
        return None


def kept_json(path: Path, schema: Callable[[Any], T], then: str) -> T | None:
    """`read_json` of a speed aid or a rebuilt file: None when it is missing or was damaged (and set aside)."""
    return read_or_set_aside(path, lambda p: read_json(p, schema), then)


def keep_json(value: Any, target: Path) -> None:
    """Write a small JSON file whole or not at all (a temporary file, then a rename), best effort: for verdicts and
    memos whose loss only costs the next run some work again."""
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(value, out)
        os.replace(temporary, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
