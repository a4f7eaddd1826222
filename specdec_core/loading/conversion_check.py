"""Conversions in the user cache (gguf_cache.py) checked against the checksums written when they were made.

A converted folder (safetensors, config, tokenizer) lies in the user's cache, where anything that runs as the
user can change it: 4 KB of damage of the same size in model.safetensors loads without a complaint and changes
every reply. So each file's SHA-256, recorded in the folder's marker at conversion, is checked on the first use
after the file's size, times or inode changed, and the verdict is kept in the folder (VERDICT, read through
kept_files) so that later loads hash nothing. A folder that fails is removed by its caller and converted again
from its GGUF, with one line saying so.

Boundary: torch-free; the marker's layout belongs to gguf_cache.py.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from specdec_core.loading import kept_files

VERDICT = "specdec-verified.json"  # {"checked_ns": ..., "files": {name: {"stamp": [...], "sha256": ...}}}
MARKER = "specdec-cache.json"  # gguf_cache.py's marker of a finished conversion; its "files_sha256" are the checksums
SETTLED_NS = 2_000_000_000  # a file changed this close to its check could keep its times (FAT keeps 2 s)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp(info: os.stat_result) -> list[int]:
    """What changes when a file is rewritten (size, times) or replaced (inode)."""
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _verdict_schema(value: Any) -> dict:
    if not isinstance(value, dict) or not isinstance(value.get("checked_ns"), int):
        raise ValueError("it holds no checked_ns")
    files = value.get("files")
    if not isinstance(files, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and isinstance(entry.get("stamp"), list)
            and all(isinstance(n, int) for n in entry["stamp"]) for entry in files.values()):
        raise TypeError("its files are not {name: {stamp, sha256}}")
    return value


def damage(folder: Path, recorded: object) -> str | None:
    """Why `folder`'s files differ from `recorded` ({name: SHA-256}, from its marker), or None when they match.
    Only files changed since the kept verdict are hashed; a verdict is kept for a folder that passes."""
    if not isinstance(recorded, dict) or not recorded:
        return "it carries no checksums (converted by an older specdec)"
    kept = kept_files.kept_json(folder / VERDICT, _verdict_schema, "its files are checked again") or {}
    trusted = kept.get("files", {})
    settled_before = kept.get("checked_ns", 0) - SETTLED_NS
    checked_ns, files = time.time_ns(), {}
    for name, expected in recorded.items():
        path = folder / str(name)
        try:
            info = path.stat()
            known = trusted.get(name)
            if (known is not None and known["stamp"] == _stamp(info) and known["sha256"] == expected
                    and info.st_mtime_ns < settled_before):
                files[name] = known
                continue
            if file_sha256(path) != expected:
                return f"{name} does not match the checksum written when it was converted"
        except OSError as error:
            return f"{name} cannot be read ({error.strerror or error})"
        files[name] = {"stamp": _stamp(info), "sha256": expected}
    _keep({"checked_ns": checked_ns, "files": files}, folder / VERDICT)
    return None


def unchecked(folder: Path) -> str | None:
    """Why `folder` (a conversion) is not known to match its checksums, read from its kept verdict without hashing
    anything (for `specdec models list`, which must answer at once); None when every file is as it was checked.
    The next load checks such a folder (damage) and converts it again if it fails."""
    try:
        marker = kept_files.read_json(folder / MARKER, kept_files.instance_of(dict))
    except (OSError, kept_files.DamagedFile):
        return "its marker cannot be read"
    recorded = (marker or {}).get("files_sha256")
    if not isinstance(recorded, dict) or not recorded:
        return "it carries no checksums"
    kept = kept_files.kept_json(folder / VERDICT, _verdict_schema, "its files are checked again")
    if kept is None:  # never loaded since it was converted: its checksums were written from these very files
        return None
    trusted = kept.get("files", {})
    for name, expected in recorded.items():
        known = trusted.get(name)
        try:
            same = known is not None and known["sha256"] == expected and known["stamp"] == _stamp(
                (folder / str(name)).stat())
        except OSError:
            return f"{name} is missing"
        if not same:
            return f"{name} changed since it was checked" if known is not None else "not checked yet"
    return None


def _keep(verdict: dict, target: Path) -> None:
    """Write the verdict whole or not at all; one that cannot be written only costs the next load a hash."""
    kept_files.keep_json(verdict, target)


DIGESTS = "file-digests.json"  # {"checked_ns": ..., "files": {resolved path: {"stamp": [...], "sha256": ...}}}
_MAX_DIGESTS = 256  # the most recently hashed files kept
_SEEN: dict[tuple, str] = {}  # this process's digests, by path and stamp


def remembered_sha256(path: Path, cache_dir: Path) -> str:
    """`path`'s SHA-256, hashed only on the first use after its size, times or inode changed (the digest kept in
    `<cache_dir>/DIGESTS`, read through kept_files): a GGUF of 1 GB costs a second of hashing on each load else."""
    info = path.stat()
    key = str(path.resolve())
    seen = _SEEN.get((key, *_stamp(info)))
    if seen is not None:  # hashed by this process, unchanged since
        return seen
    memo = cache_dir / DIGESTS
    kept = kept_files.kept_json(memo, _verdict_schema, "its files are hashed again") or {}
    known = kept.get("files", {}).get(key)
    if known is not None and known["stamp"] == _stamp(info) \
            and info.st_mtime_ns < kept.get("checked_ns", 0) - SETTLED_NS:
        return known["sha256"]
    digest = _SEEN[(key, *_stamp(info))] = file_sha256(path)
    files = {name: entry for name, entry in kept.get("files", {}).items() if name != key}
    files = dict(list(files.items())[-(_MAX_DIGESTS - 1):])
    files[key] = {"stamp": _stamp(info), "sha256": digest}
    if memo.parent.is_dir():
        _keep({"checked_ns": time.time_ns(), "files": files}, memo)
    return digest
