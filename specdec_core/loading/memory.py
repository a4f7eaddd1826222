"""How much memory this process can still take without swapping or being killed.

What the OS says is available, capped by what this process's cgroup has left under its limit (a
container's limit is often far below the machine's memory, and crossing it kills the process). The CPU
backend (cpu_speed.py) reads it to size the packed weight copies it may make, and gives back the pages of
a weight it replaced (`drop_file_pages`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import os
import sys
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_OWN_CGROUPS = Path("/proc/self/cgroup")


def available_memory() -> int | None:
    """Bytes of memory that can be had now without swapping (Linux, macOS), else None: what the OS says
    is available, and no more than this process's cgroup has left under its limit."""
    free = _os_available_memory()
    left = _cgroup_memory_left()
    return left if free is None else free if left is None else min(free, left)


def _os_available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _cgroup_memory_left() -> int | None:
    """The least that any memory cgroup of this process has left under its limit (v2 memory.max or v1
    memory.limit_in_bytes, less the usage), looked up where /proc/self/cgroup says and at the mount's
    root (what a container sees of its own group); None without a limit."""
    try:
        lines = _OWN_CGROUPS.read_text().splitlines()
    except OSError:
        return None
    lefts = [left for folder, limit_file, usage_file in _memory_groups(lines)
             if (left := _left_under_limit(folder / limit_file, folder / usage_file)) is not None]
    return min(lefts) if lefts else None


def _memory_groups(lines: list[str]) -> list[tuple[Path, str, str]]:
    """(folder, limit file, usage file) of each memory cgroup that /proc/self/cgroup's `lines` name."""
    places: list[tuple[Path, str, str]] = []
    for line in lines:
        _, controllers, group = (line.split(":", 2) + ["", ""])[:3]
        relative = group.strip().lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            places += [(_CGROUP_ROOT / relative, "memory.max", "memory.current"),
                       (_CGROUP_ROOT, "memory.max", "memory.current")]
        elif "memory" in controllers.split(","):  # v1
            places += [(_CGROUP_ROOT / "memory" / relative, "memory.limit_in_bytes", "memory.usage_in_bytes"),
                       (_CGROUP_ROOT / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes")]
    return places


def _left_under_limit(limit_file: Path, usage_file: Path) -> int | None:
    """The limit less the usage, or None without a limit (or without the files)."""
    try:
        limit_text = limit_file.read_text().strip()
        if limit_text == "max" or int(limit_text) >= 2**60:  # v1 writes "no limit" as a huge number
            return None
        return max(0, int(limit_text) - int(usage_file.read_text().strip()))
    except (OSError, ValueError):
        return None


_MADV_DONTNEED = 4  # Linux: the pages leave this process; a file mapping's are read from the file if touched again


def drop_file_pages(tensor) -> int:
    """Take the whole pages of `tensor`'s bytes out of this process's resident memory when they lie in a file
    mapping (transformers maps a safetensors file and its weights are views of it): freeing such a weight
    frees nothing while the file's other weights keep the mapping, so replacing the weights of a mapped model
    with copies would hold both. Only for a tensor nothing reads again. Anonymous memory is never touched
    (it is the allocator's to reuse). Returns the bytes given back (0 off Linux or outside a file mapping)."""
    if not sys.platform.startswith("linux"):
        return 0
    start = tensor.data_ptr()
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages only: a neighbour may share the edge ones
    last = (start + tensor.numel() * tensor.element_size()) // mmap.PAGESIZE * mmap.PAGESIZE
    if last <= first or not _in_file_mapping(first, last):
        return 0
    failed = _libc().madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED)
    return 0 if failed else last - first


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _in_file_mapping(first: int, last: int) -> bool:
    """Whether [first, last) lies inside one mapping of a file (not anonymous memory, not a device)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(maxsplit=5)
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        if low <= first and last <= high:
            return len(fields) == 6 and fields[4] != "0" and fields[5].startswith("/")
    return False
