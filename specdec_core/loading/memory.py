"""How much memory this process can still take without swapping or being killed.

What the OS says is available, capped by what this process's cgroup has left under its limit (a
container's limit is often far below the machine's memory, and crossing it kills the process). The CPU
backend (cpu_speed.py) reads it to size the packed weight copies it may make.
"""

from __future__ import annotations

import os
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
