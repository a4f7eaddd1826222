"""Models already on this machine, found where other apps keep them, without loading any.

Searched: LM Studio, Ollama (its manifests name the GGUF blob of each model), the Hugging Face hub cache (GGUF
files and transformers folders), GPT4All, Jan, and the folders the user names (SPECDEC_MODEL_DIRS, os.pathsep
between them, and the app's setting). Each model found gets a name that works as a model spec
(`ollama:qwen2.5-coder:1.5b`, `lmstudio:publisher/repo/file.gguf`, `hf:org/name`, `gpt4all:file.gguf`,
`jan:id/file.gguf`; a folder the user named gives plain paths), resolved by `locate`, and the facts its header
tells: size, architecture, quantisation, parameters and the vocabulary's hash (gguf_header.py).

Only headers are read, and nothing is ever written into these folders. A file or folder that cannot be used
(broken manifest, missing blob, cut-short GGUF, unreadable folder, a link loop, a folder of thousands of
entries) is skipped with one line saying which and why (`Listing.skipped`); the rest is still listed.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from specdec_core.errors import ModelLoadError
from specdec_core.loading import kept_files, model_facts

MAX_ENTRIES = 4096  # a folder with more entries than this is not a models folder: only these are looked at

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_MANIFEST_LIMIT = 1 << 20  # an Ollama manifest is a few hundred bytes
_OLLAMA_REGISTRY, _OLLAMA_NAMESPACE = "registry.ollama.ai", "library"

SOURCES = {"ollama": "Ollama", "lmstudio": "LM Studio", "hf": "Hugging Face cache", "gpt4all": "GPT4All",
           "jan": "Jan", "folder": "your folders"}

PLATFORM = sys.platform  # which OS's folders to search (tests search another's)

OLLAMA_SERVICE_MODELS = Path("/usr/share/ollama/.ollama/models")  # Ollama's Linux service runs as its own user

_SPLIT_PART = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)  # llama.cpp's split files: part 2 of 3...


@dataclass(frozen=True)
class FoundModel:
    name: str  # a model spec that loads it
    path: Path  # the GGUF file, or the folder in transformers format
    source: str  # a key of SOURCES
    facts: model_facts.ModelFacts

    @property
    def where(self) -> str:
        return f"{SOURCES[self.source]}: {self.path}"


@dataclass(frozen=True)
class Listing:
    models: tuple[FoundModel, ...]
    skipped: tuple[str, ...]  # "<path>: <why>", one line for each file or folder left out


SKIPPED_SHOWN = 12  # skipped lines a listing shows before "and N more"


def skipped_summary(skipped: Sequence[str], shown: int | None = SKIPPED_SHOWN) -> list[str]:
    """The skipped lines to show: all of them (`shown` None, or no more than it), else the first `shown` and one
    line counting the rest by reason (a folder of 10,000 broken files is not 10,000 lines on the screen)."""
    if shown is None or len(skipped) <= shown + 1:  # "and 1 more" would take the line it stands for
        return list(skipped)
    rest: dict[str, int] = {}
    for line in skipped[shown:]:
        why = line.split(": ", 1)[-1]  # "<path>: <why>" (a why may hold ": " itself)
        why = re.sub(r"\d[\d,]*", "N", why)  # "needs byte 4 of 0" and "... of 12" are one reason
        rest[why] = rest.get(why, 0) + 1
    reasons = "; ".join(f"{count:,}: {why}" for why, count in sorted(rest.items(), key=lambda item: -item[1])[:3])
    more = len(skipped) - shown
    return [*skipped[:shown], f"... and {more:,} more ({reasons}{'; ...' if len(rest) > 3 else ''})"]


def find_models(extra_dirs: Sequence[str | Path] = ()) -> Listing:
    """Every model found in the usual places and in `extra_dirs` (and SPECDEC_MODEL_DIRS)."""
    walk = _Walk()
    found: dict[object, FoundModel] = {}
    for model in itertools.chain(_lmstudio(walk), _ollama(walk), _hub(walk), _gpt4all(walk), _jan(walk),
                                 _folders(walk, [*user_dirs(), *extra_dirs])):
        # One file reached two ways (a folder named twice, a link) is listed once; Ollama's tags of one blob
        # ("latest" and "1.5b") are names of their own.
        found.setdefault(model.name if model.source == "ollama" else _real(model.path), model)
    model_facts.save_memo()
    return Listing(tuple(found.values()), tuple(walk.skipped))


def user_dirs() -> list[Path]:
    """The folders named in SPECDEC_MODEL_DIRS."""
    return [Path(part).expanduser() for part in os.environ.get("SPECDEC_MODEL_DIRS", "").split(os.pathsep) if part]


# ---------------------------------------------------------------------------------------------- where to look


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def _data_home() -> Path:
    """Where per-user application data lives on this OS (Jan and GPT4All keep models under it)."""
    if PLATFORM == "darwin":
        return _home() / "Library" / "Application Support"
    if PLATFORM == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or _home() / "AppData" / "Local")
    return Path(os.environ.get("XDG_DATA_HOME") or _home() / ".local" / "share")


def roots(source: str) -> list[Path]:
    """The folders `source` keeps its models in, as each project documents them (existing or not)."""
    home = _home()
    if source == "lmstudio":
        return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    if source == "ollama":
        if os.environ.get("OLLAMA_MODELS"):
            return [Path(os.environ["OLLAMA_MODELS"]).expanduser()]
        return [home / ".ollama" / "models"] + ([OLLAMA_SERVICE_MODELS] if PLATFORM.startswith("linux") else [])
    if source == "hf":
        if os.environ.get("HF_HUB_CACHE"):
            return [Path(os.environ["HF_HUB_CACHE"]).expanduser()]
        cache = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
        return [Path(os.environ.get("HF_HOME") or cache / "huggingface").expanduser() / "hub"]
    if source == "gpt4all":
        return [_data_home() / "nomic.ai" / "GPT4All"]
    if source == "jan":
        roaming = Path(os.environ.get("APPDATA") or home) if PLATFORM == "win32" else _data_home()
        data = roaming / "Jan" / "data"
        return [home / "jan" / "models", data / "models", data / "llamacpp" / "models"]
    raise ValueError(source)


# ---------------------------------------------------------------------------------------------- walking


class _Walk:
    """One listing's walk: the lines of what was skipped, and how to step through folders safely."""

    def __init__(self) -> None:
        self.skipped: list[str] = []

    def skip(self, path: Path | str, why: str) -> None:
        self.skipped.append(f"{path}: {why}")

    def entries(self, folder: Path, seen: set[tuple[int, int]]) -> list[os.DirEntry]:
        """The folder's entries by name (at most MAX_ENTRIES); [] with a line when it cannot be read, or when
        a link led back to a folder of this walk (`seen`: the folders read so far)."""
        try:
            status = folder.stat()
            key = (status.st_dev, status.st_ino)
            if key in seen:
                self.skip(folder, "a link to a folder already searched (a loop): not searched again")
                return []
            seen.add(key)
            with os.scandir(folder) as scan:
                entries = list(itertools.islice(scan, MAX_ENTRIES + 1))
        except OSError as error:
            self.skip(folder, _why(error))
            return []
        if len(entries) > MAX_ENTRIES:
            self.skip(folder, f"holds more than {MAX_ENTRIES:,} entries: only {MAX_ENTRIES:,} of them were looked at")
            entries = entries[:MAX_ENTRIES]
        return sorted(entries, key=lambda entry: entry.name)

    def tree(self, root: Path, depth: int) -> Iterator[tuple[Path, list[os.DirEntry]]]:
        """(folder, its entries) for `root` and the folders under it, `depth` levels down, links followed."""
        seen: set[tuple[int, int]] = set()
        pending = [(root, 0)] if root.is_dir() else []
        while pending:
            folder, level = pending.pop()
            entries = self.entries(folder, seen)
            yield folder, entries
            if level < depth:
                pending += [(Path(e.path), level + 1) for e in reversed(entries) if self.is_dir(e)]

    def is_dir(self, entry: os.DirEntry) -> bool:
        """Whether the entry is a folder (through links); a link that cannot be followed gets a line."""
        try:
            return entry.is_dir()
        except OSError as error:  # a link to itself, or round a loop: "too many levels of symbolic links"
            self.skip(entry.path, _why(error))
            return False

    def is_gguf(self, entry: os.DirEntry) -> bool:
        """Whether the entry is a .gguf file (through links); one that cannot be reached gets a line."""
        if not entry.name.lower().endswith(".gguf") or entry.name.startswith("."):
            return False
        try:
            return not stat.S_ISDIR(entry.stat().st_mode)
        except FileNotFoundError:
            self.skip(entry.path, "a link to a file that does not exist")
        except OSError as error:
            self.skip(entry.path, _why(error))
        return False

    def gguf(self, path: Path, name: str, source: str) -> FoundModel | None:
        """The model in a GGUF file, or None (with a line) when it is not one specdec can list."""
        if _SPLIT_PART.search(path.name):
            self.skip(path, "one part of a split GGUF: specdec reads single-file GGUFs")
            return None
        try:
            facts = model_facts.gguf_facts(path)
        except (OSError, ValueError) as error:
            self.skip(path, _why(error))
            return None
        if facts.architecture == "clip":
            self.skip(path, "a vision projector (architecture clip), not a language model")
            return None
        return FoundModel(name, path, source, facts)

    def folder(self, path: Path, name: str, source: str) -> FoundModel | None:
        try:
            facts = model_facts.folder_facts(path)
        except (OSError, ValueError) as error:
            self.skip(path, _why(error))
            return None
        return FoundModel(name, path, source, facts)




def _why(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"cannot be read ({error.strerror})"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


# ---------------------------------------------------------------------------------------------- each layout


def _gguf_trees(walk: _Walk, source: str, depth: int) -> Iterator[FoundModel]:
    """GGUF files under each root of `source`, named `<source>:<path under the root>`."""
    for root in roots(source):
        for _folder, entries in walk.tree(root, depth):
            for entry in entries:
                if walk.is_gguf(entry):
                    path = Path(entry.path)
                    model = walk.gguf(path, f"{source}:{_relative(path, root)}", source)
                    if model is not None:
                        yield model


def _lmstudio(walk: _Walk) -> Iterator[FoundModel]:
    return _gguf_trees(walk, "lmstudio", depth=2)  # <publisher>/<repo>/<file>.gguf


def _gpt4all(walk: _Walk) -> Iterator[FoundModel]:
    return _gguf_trees(walk, "gpt4all", depth=0)


def _jan(walk: _Walk) -> Iterator[FoundModel]:
    return _gguf_trees(walk, "jan", depth=2)  # <model id>/<file>.gguf, sometimes a level deeper


def _ollama(walk: _Walk) -> Iterator[FoundModel]:
    """manifests/<registry>/<namespace>/<model>/<tag>: JSON whose model layer is the GGUF blob."""
    for root in roots("ollama"):
        manifests = root / "manifests"
        for folder, entries in walk.tree(manifests, depth=3):
            parts = folder.relative_to(manifests).parts
            for entry in entries if len(parts) == 3 else ():
                if not walk.is_dir(entry):
                    model = _ollama_model(walk, root, Path(entry.path), (*parts, entry.name))
                    if model is not None:
                        yield model


def _ollama_model(walk: _Walk, root: Path, manifest: Path, parts: tuple[str, ...]) -> FoundModel | None:
    try:
        blob = _ollama_blob(root, manifest)
    except ModelLoadError as error:
        walk.skip(manifest, str(error))
        return None
    return walk.gguf(blob, ollama_name(*parts), "ollama")


def _ollama_blob(root: Path, manifest: Path) -> Path:
    """The GGUF blob a manifest names; ModelLoadError with the reason when there is none."""
    try:  # a FIFO or a huge file in Ollama's folder is refused, not read (kept_files.read_bytes)
        text = kept_files.read_bytes(manifest, _MANIFEST_LIMIT)
        if text is None:
            raise ModelLoadError("the manifest is gone (removed while listing)")
        layers = json.loads(text).get("layers")
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_LAYER)
    except kept_files.DamagedFile as error:
        raise ModelLoadError(f"not a valid Ollama manifest: {error}") from error
    except (ValueError, AttributeError, TypeError, KeyError, RecursionError) as error:
        raise ModelLoadError(f"not a valid Ollama manifest ({type(error).__name__}: {error})") from error
    except StopIteration as error:
        raise ModelLoadError("an Ollama manifest with no model layer") from error
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-fA-F]{64}", digest):
        raise ModelLoadError(f"an Ollama manifest whose model digest {digest!r} is not sha256:<64 hex digits>")
    blob = root / "blobs" / digest.replace(":", "-")
    if not blob.is_file():
        raise ModelLoadError(f"its model blob {blob.name} is missing from {blob.parent}")
    return blob


def ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """`ollama:<model>:<tag>` as Ollama itself names it: the registry and namespace only when not the defaults."""
    path = model if namespace == _OLLAMA_NAMESPACE else f"{namespace}/{model}"
    path = path if registry == _OLLAMA_REGISTRY else f"{registry}/{namespace}/{model}"
    return f"ollama:{path}:{tag}"


def _hub(walk: _Walk) -> Iterator[FoundModel]:
    """models--<org>--<name>/snapshots/<revision>/: a transformers folder, GGUF files, or both."""
    for root in roots("hf"):
        for _, entries in walk.tree(root, depth=0):
            for entry in entries:
                if entry.name.startswith("models--") and walk.is_dir(entry):
                    repo_id = entry.name.removeprefix("models--").replace("--", "/", 1)
                    yield from _hub_repo(walk, Path(entry.path), repo_id)


def _hub_repo(walk: _Walk, repo: Path, repo_id: str) -> Iterator[FoundModel]:
    snapshot = hub_snapshot(repo)
    if snapshot is None:
        return
    if (snapshot / "config.json").is_file() and model_facts.has_weights(snapshot):  # not just a tokenizer
        model = walk.folder(snapshot, f"hf:{repo_id}", "hf")
        if model is not None:
            yield model
    for _folder, entries in walk.tree(snapshot, depth=1):
        for entry in entries:
            if walk.is_gguf(entry):
                path = Path(entry.path)
                model = walk.gguf(path, f"hf:{repo_id}/{_relative(path, snapshot)}", "hf")
                if model is not None:
                    yield model


def hub_snapshot(repo: Path) -> Path | None:
    """The revision `main` points at when it is there, else the newest snapshot."""
    snapshots = repo / "snapshots"
    try:
        main = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
        if main and (snapshots / main).is_dir():
            return snapshots / main
    except (OSError, UnicodeDecodeError):
        pass
    try:
        return max((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, default=None)
    except OSError:
        return None


def _folders(walk: _Walk, folders: Iterable[Path]) -> Iterator[FoundModel]:
    """GGUF files and transformers folders (config.json + weights) in the user's folders, by their paths."""
    for root in dict.fromkeys(Path(f).expanduser() for f in folders):
        if not root.is_dir():
            walk.skip(root, "a folder named for models that does not exist")
            continue
        for folder, entries in walk.tree(root, depth=3):
            if any(e.name == "config.json" for e in entries) and model_facts.has_weights(folder):
                model = walk.folder(folder, str(folder), "folder")
                if model is not None:
                    yield model
            for entry in entries:
                if walk.is_gguf(entry):
                    model = walk.gguf(Path(entry.path), entry.path, "folder")
                    if model is not None:
                        yield model


# ---------------------------------------------------------------------------------------------- names -> paths


def is_found_name(spec: str) -> bool:
    """Whether `spec` is a name this module gives (`ollama:...`, `lmstudio:...`, `hf:...` ...)."""
    prefix, colon, rest = spec.strip().partition(":")
    return bool(colon and rest) and prefix.lower() in SOURCES and prefix.lower() != "folder"


def locate(spec: str) -> FoundModel:
    """The model a found name names, with its facts; ModelLoadError saying where it looked when it is not there."""
    prefix, _, rest = spec.strip().partition(":")
    source = prefix.lower()
    if ".." in Path(rest).parts or rest.startswith(("/", "\\")):
        raise ModelLoadError(f"{spec!r} is not a model name: a found model's name stays inside its app's folder")
    candidates = _ollama_candidates(rest) if source == "ollama" else _path_candidates(source, rest)
    tried = []
    for root, path in candidates:
        tried.append(str(path))
        if source == "ollama" and path.is_file():
            return _found_or_error(_Walk(), _ollama_blob(root, path), spec, source)
        if path.is_dir() and source == "hf":
            return _found_or_error(_Walk(), path, spec, source)
        if path.is_file():
            return _found_or_error(_Walk(), path, spec, source)
    raise ModelLoadError(f"{spec!r} is not on this machine: no {SOURCES[source]} model there (looked for "
                         f"{', '.join(tried) or 'its folder'})")


def _found_or_error(walk: _Walk, path: Path, spec: str, source: str) -> FoundModel:
    model = walk.folder(path, spec, source) if path.is_dir() else walk.gguf(path, spec, source)
    if model is None:
        raise ModelLoadError(f"{spec!r} cannot be used: {walk.skipped[-1]}")
    return model


def _ollama_candidates(rest: str) -> list[tuple[Path, Path]]:
    path, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:  # no tag: Ollama's default
        path, tag = rest, "latest"
    parts = path.split("/")
    if len(parts) < 3:
        parts = [_OLLAMA_REGISTRY, *([_OLLAMA_NAMESPACE] if len(parts) == 1 else []), *parts]
    return [(root, root.joinpath("manifests", *parts, tag)) for root in roots("ollama")]


def _path_candidates(source: str, rest: str) -> list[tuple[Path, Path]]:
    if source != "hf":
        return [(root, root / rest) for root in roots(source)]
    org_name = rest.split("/")
    repo_id, inner = ("/".join(org_name[:2]), org_name[2:]) if len(org_name) > 1 else (rest, [])
    out = []
    for root in roots("hf"):
        snapshot = hub_snapshot(root / ("models--" + repo_id.replace("/", "--")))
        if snapshot is not None:
            out.append((root, snapshot.joinpath(*inner)))
    return out
