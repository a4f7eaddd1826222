"""GGUF files -> folders in transformers format, converted once and cached on disk.

GGUF files are dequantised by transformers, which is slow (about 20 s for the 135M embedded model, most
of it parsing metadata). The result is cached as safetensors + config + tokenizer files under
``<cache>/gguf/<sha256 of the file>/``, so every later load is a plain folder load (well under 3 s). A
folder is published whole (written under a partial name, then renamed) and checked before each use; a
bfloat16/float16 copy is written beside it once when a load asks for that dtype.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from specdec_core.errors import ModelLoadError, first_line
from specdec_core.loading import conversion_check, gguf_types, kept_files
from specdec_core.loading.progress import ProgressCallback, ProgressError, Reporter, quiet_transformers_bars
from specdec_core.loading.resources import default_cache_dir  # noqa: F401 - where importers have long found it

_CACHE_FORMAT = 1  # bump when the layout of a converted folder changes; older folders are rebuilt

_MARKER = conversion_check.MARKER  # written last: a folder without it is not a finished conversion

_STALE_PARTIAL_S = 3600.0  # a ".partial-" folder this old belongs to a conversion that died

# transformers patches its module globals nowhere else; we patch a few while converting (its GGUF progress bar,
# its GGUF metadata reader, the gguf package's name map: _parsed_once), so conversions take turns. They are CPU-
# and memory-bound anyway.
_CONVERT_LOCK = threading.Lock()


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def convert_gguf(gguf: Path, *, cache_dir: Path | None = None, progress: ProgressCallback | None = None,
                 weights: bool = True) -> Path:
    """Convert a GGUF file into the cache now (nothing when it is there already); its folder. `weights=False`:
    only its config and tokenizer, for a file that runs in its own quantisation."""
    try:
        with quiet_transformers_bars():
            folder, _ = converted_gguf(Path(gguf), cache_dir=Path(cache_dir) if cache_dir else default_cache_dir(),
                                        report=Reporter(progress), weights=weights)
    except ProgressError as error:
        raise error.original from None
    return folder


def needs_float_copy(gguf: Path) -> bool:
    """Whether a load of `gguf` on this CPU (with the default weight format) reads a float conversion from the cache,
    rather than the file's own quantised weights: what an install prepares in advance."""
    from specdec_core.loading import packed_gguf

    try:
        return not packed_gguf.plan(Path(gguf)).usable
    except (OSError, ValueError):
        return True


def converted_gguf(gguf: Path, *, cache_dir: Path, report: Reporter, weights: bool = True) -> tuple[Path, bool]:
    """The transformers folder for a GGUF file, converting it on first use. `(folder, converted now)`.

    `weights=False`: only the config and tokenizer (`<cache>/gguf-meta/`), for a model that reads its weights from the
    GGUF file itself in their own quantisation (packed_gguf.py)."""
    check_gguf_header(gguf)
    digest = _sha256(gguf, cache_dir)
    root = cache_dir / ("gguf" if weights else "gguf-meta")
    target = root / digest
    _remove_stale_partials(root)  # left by conversions that were killed, whether or not we convert now
    if _usable(target, digest, gguf, report):
        return target, False

    with _CONVERT_LOCK:
        if _usable(target, digest, gguf, report):  # another thread converted it while we waited
            return target, False
        try:
            root.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".partial-{digest[:12]}-{os.getpid()}-{_HOST}-", dir=root))
        except OSError as error:
            raise ModelLoadError(f"cannot use the model cache {cache_dir} ({error.strerror or error}): set "
                                 "SPECDEC_CACHE_DIR to a writable folder") from error
        try:
            (_convert if weights else _convert_meta)(gguf, partial, digest, report)
            _publish(partial, target, digest)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target, True


def check_gguf_header(gguf: Path) -> None:
    """Catch a file that is not GGUF, or is cut short, before spending 20 s failing on it."""
    try:
        with gguf.open("rb") as file:
            magic = file.read(4)
        size = gguf.stat().st_size
    except OSError as error:
        raise ModelLoadError(f"cannot read the GGUF file {gguf}: {error}") from error
    if magic != b"GGUF":
        raise ModelLoadError(f"{gguf} is not a valid GGUF file (it does not start with the GGUF signature)")
    from specdec_core.loading.gguf_header import GgufHeaderError, read_gguf_facts

    try:
        facts = read_gguf_facts(gguf)
        end = max((facts.data_start + offset + _tensor_bytes(shape, kind) for _, shape, kind, offset in facts.tensors),
                  default=0)
    except (GgufHeaderError, OSError, ValueError) as error:
        raise ModelLoadError(f"{gguf} is not a valid GGUF file or is truncated "
                             f"(its header cannot be read: {first_line(error)})") from error
    if end > size:
        raise ModelLoadError(f"{gguf} is truncated: its tensors need {end:,} bytes but the file has {size:,} "
                             "(an interrupted download or copy?)")
    _check_gguf_sizes(gguf)


def _tensor_bytes(shape: tuple[int, ...], ggml_type: int) -> int:
    """The bytes a tensor of this GGUF shape and type takes (ValueError for a type the gguf package lacks)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    per_block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    elements = 1
    for dim in shape:
        elements *= int(dim)
    if elements % per_block:
        raise ValueError(f"a tensor of {elements} values does not fill blocks of {per_block}")
    return elements // per_block * size


# The sizes a GGUF's metadata may claim before a model is built from it: far above any released model, far below
# what would build a model of millions of layers from a file of a few kilobytes.
_GGUF_LIMITS = {"block_count": 1024, "embedding_length": 1 << 17, "feed_forward_length": 1 << 20,
                "attention.head_count": 1024, "attention.head_count_kv": 1024, "context_length": 1 << 24}


def _check_gguf_sizes(gguf: Path) -> None:
    """Refuse metadata that claims sizes no model has, or more layers than the file holds tensors for."""
    from specdec_core.loading.gguf_header import GgufHeaderError, read_gguf_facts

    try:
        facts = read_gguf_facts(gguf)
    except (GgufHeaderError, OSError) as error:
        raise ModelLoadError(f"{gguf} is not a valid GGUF file ({error})") from error
    arch = str(facts.metadata.get("general.architecture", ""))
    for key, limit in _GGUF_LIMITS.items():
        value = facts.metadata.get(f"{arch}.{key}")
        if isinstance(value, int) and not 0 <= value <= limit:
            raise ModelLoadError(f"{gguf} claims {arch}.{key} = {value:,}, more than any model has (at most "
                                 f"{limit:,}): refused before building anything from it")
    layers = {name.split(".")[1] for name, *_ in facts.tensors if name.startswith("blk.")}
    claimed = facts.metadata.get(f"{arch}.block_count")
    if isinstance(claimed, int) and facts.tensors and claimed > len(layers):
        raise ModelLoadError(f"{gguf} claims {claimed:,} layers but holds tensors for {len(layers):,}: refused")


def _sha256(path: Path, cache_dir: Path) -> str:
    """The GGUF's digest, which names its conversion: hashed on the first use after the file's size, times or inode
    changed, and remembered in the cache (conversion_check.remembered_sha256)."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # nothing is remembered; the conversion below says what is wrong with the cache
    return conversion_check.remembered_sha256(path, cache_dir)


def _marker(folder: Path) -> dict | None:
    """A conversion's marker (kept_files: a FIFO, a huge or deeply nested file is refused); None without one."""
    try:
        return kept_files.read_json(folder / _MARKER, kept_files.instance_of(dict))
    except kept_files.DamagedFile:
        return None


def _cache_is_complete(folder: Path, digest: str) -> bool:
    """True when `folder` holds a finished conversion: marker present and every listed file whole."""
    try:
        marker = _marker(folder)
        if marker is None or marker.get("format") != _CACHE_FORMAT or marker.get("sha256") != digest:
            return False
        return all((folder / name).stat().st_size == size for name, size in marker["files"].items())
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return False


def _usable(target: Path, digest: str, gguf: Path, report: Reporter) -> bool:
    """Whether `target` holds a finished conversion of `gguf` whose files match the checksums written with them
    (conversion_check.py). A damaged one is removed, with one line, to be converted again from the GGUF."""
    if not _cache_is_complete(target, digest):
        return False
    why = conversion_check.damage(target, (_marker(target) or {}).get("files_sha256"))
    if why is None:
        return True
    _discard_damaged(target, f"the converted copy of {gguf.name} in {target}", why, report)
    return False


def _discard_damaged(folder: Path, what: str, why: str, report: Reporter) -> None:
    """Remove a damaged conversion (it is rebuilt from its source) and say so in one line, on stderr and in the
    load's progress (the app's status bar)."""
    aside = folder.with_name(f".partial-damaged-{folder.name[:12]}-{os.getpid()}")
    try:
        folder.rename(aside)
    except OSError:
        aside = folder
    shutil.rmtree(aside, ignore_errors=True)
    print(f"specdec: {what} is damaged ({why}); it is made again", file=sys.stderr, flush=True)
    report("convert", 0.0, f"The cached conversion was damaged ({why}): making it again")


def cache_damage(folder: Path) -> str | None:
    """Why a finished conversion's files are damaged, or None when nothing proves they are.

    Proof is a file whose SHA-256 differs from the one recorded when it was written, or (for folders
    converted before hashes were recorded) a weights file whose tensors cannot be read back."""
    marker = _marker(folder)
    if marker is None:
        return "its marker is missing or cannot be read"
    hashes = marker.get("files_sha256")
    if isinstance(hashes, dict) and hashes:
        for name, expected in hashes.items():
            try:
                if _file_sha256(folder / str(name)) != expected:
                    return f"{name} does not match its recorded hash"
            except OSError as error:
                return f"{name} cannot be read ({error})"
        return None
    from safetensors import safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                for key in weights.keys():
                    weights.get_tensor(key)
        except Exception as error:  # noqa: BLE001 - safetensors raises its own error types
            return f"{path.name} cannot be read ({first_line(error)})"
    return None


_file_sha256 = conversion_check.file_sha256


_PARTIAL_OWNER = re.compile(r"\.partial-[0-9a-f]{12}-(\d+)-([0-9a-f]{8})-")

# A cache folder may be shared between machines (a network home): a process id means something only
# on the machine that wrote it, so partial folders name their host too (hashed: names stay short).
_HOST = hashlib.sha256(platform.node().encode()).hexdigest()[:8]


def _remove_stale_partials(root: Path) -> None:
    """Remove conversion folders left by processes that died (a kill -9 mid-conversion leaves ~0.5 GB).

    A folder names the process (and machine) converting into it; it is stale once that process is gone.
    Other folders (another machine's, older versions', moved-aside damaged copies) are stale after an hour."""
    now = time.time()
    try:
        partials = list(root.glob(".partial-*"))
    except OSError:
        return
    for partial in partials:
        with contextlib.suppress(OSError):
            match = _PARTIAL_OWNER.match(partial.name)
            if match is not None and match.group(2) == _HOST and int(match.group(1)) != os.getpid():
                stale = not _process_alive(int(match.group(1)))
            else:
                stale = now - partial.stat().st_mtime > _STALE_PARTIAL_S
            if stale:
                shutil.rmtree(partial, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists but belongs to someone else; on Windows, unknown
        return True
    return True


def _convert(gguf: Path, out: Path, digest: str, report: Reporter) -> None:
    """Dequantise `gguf` with transformers and write it to `out` as a plain transformers folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kind = "GGUF"
    try:
        with _parsed_once():
            report("convert", 0.0, f"Reading the {kind} tokenizer (first load only)")
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            # Rough shares of the ~20 s a 135M model takes here: tokenizer 20 %, config and tensor map 50 %,
            # dequantising 25 %, writing 5 %. Only the dequantising loop reports its own progress.
            report("convert", 0.2, f"Reading the {kind} config and tensor map (first load only)")
            # Types transformers has no kernel for (Q5_0, Q5_1, ...) are read with the gguf package's own code.
            with _gguf_tensor_progress(report, start=0.7, end=0.95), gguf_types.readable_types():
                model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                             dtype=_gguf_float_dtype(gguf))
    except ProgressError:
        raise
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(f"out of memory while converting {gguf}") from error
    except Exception as error:  # transformers raises many types for damaged files
        raise ModelLoadError(f"cannot convert {gguf}: {first_line(error)} (is it a valid, complete GGUF file "
                             "of an architecture transformers supports?)") from error

    report("convert", 0.95, "Writing the converted model to the cache")
    # transformers refuses to save a model it loaded from GGUF, although the weights are plain
    # dequantised tensors by now: forget the quantizer and its config entry, then save normally
    # (save_pretrained also knows which tensors are tied and writes them once).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        del model
        files = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
        # Hashes let a later load that fails tell a damaged cache (convert again) from a bad request.
        hashes = {name: _file_sha256(out / name) for name in files}
        marker = {"format": _CACHE_FORMAT, "sha256": digest, "source": str(gguf), "files": files,
                  "files_sha256": hashes, "transformers": _transformers_version()}
        (out / _MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    except Exception as error:  # noqa: BLE001 - OSError (a full disk), or safetensors' own error for it
        raise ModelLoadError(f"cannot write the converted model to {out.parent}: {first_line(error)}") from error
    report("convert", 1.0, "Converted")


def _convert_meta(gguf: Path, out: Path, digest: str, report: Reporter) -> None:
    """Write `gguf`'s config, generation config and tokenizer to `out` as transformers files, without its weights."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    try:
        with _parsed_once():
            report("convert", 0.0, "Reading the GGUF tokenizer (first load only)")
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            report("convert", 0.6, "Reading the GGUF config (first load only)")
            config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except ProgressError:
        raise
    except Exception as error:  # transformers raises many types for damaged files
        raise ModelLoadError(f"cannot read {gguf}: {first_line(error)} (is it a valid, complete GGUF file "
                             "of an architecture transformers supports?)") from error
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    try:
        config.save_pretrained(out)
        with contextlib.suppress(Exception):  # not every config yields generation defaults
            GenerationConfig.from_model_config(config).save_pretrained(out)
        tokenizer.save_pretrained(out)
        files = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
        marker = {"format": _CACHE_FORMAT, "sha256": digest, "source": str(gguf), "files": files,
                  "files_sha256": {name: _file_sha256(out / name) for name in files}, "weights": "in the GGUF file",
                  "transformers": _transformers_version()}
        (out / _MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    except OSError as error:
        raise ModelLoadError(f"cannot write the model's config to {out.parent}: {first_line(error)}") from error
    report("convert", 1.0, "Read")


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _gguf_float_dtype(gguf: Path) -> torch.dtype:
    """fp32 for quantised files (their dequantised values are exact there); a float file keeps its type."""
    with contextlib.suppress(Exception):
        from transformers.integrations.gguf.reader import GgufHeader

        return GgufHeader.from_file(str(gguf)).dtype or torch.float32
    return torch.float32


@contextlib.contextmanager
def _parsed_once() -> Iterator[None]:
    """While converting: parse the file's metadata once, not once per reader, and build the gguf package's
    tensor-name map once, not once per module.

    transformers reads every metadata field (a 49k-token vocabulary is ~300k fields) for the tokenizer and
    again for the config, and builds the name map anew for each of a model's ~400 modules: those repeats were
    over a third of a conversion's time (docs/log/2026-12.md, "Measurements behind comments in the code").
    Both are pure functions of their arguments; each caller gets its own copy of the metadata.

    And the gguf package's reader slices its memory map once per metadata value: a Qwen file's 151,936 tokens and
    151,387 merges are some 760k slices, each running numpy.memmap's own Python hooks (4 s of a 0.5B file's 6 s).
    Here its reads slice a plain array over the same map: the same fields, 4x sooner (`_plain_reads`)."""
    import gguf as gguf_package
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from gguf.gguf_reader import GGUFReader

    read, name_map, reader_get = gguf_utils.load_gguf_checkpoint, gguf_package.get_tensor_name_map, GGUFReader._get
    parsed: dict[str, dict] = {}

    def read_once(path, return_tensors=False, *args, **kwargs):
        if return_tensors or args or kwargs:
            return read(path, return_tensors, *args, **kwargs)
        key = str(path)
        if key not in parsed:
            parsed[key] = read(path, return_tensors=False)
        return _copied(parsed[key])

    gguf_utils.load_gguf_checkpoint, gguf_package.get_tensor_name_map = read_once, functools.cache(name_map)
    if _reads_as_expected(GGUFReader):  # another gguf version's reader is left as it is
        GGUFReader._get = _plain_reads
    try:
        yield
    finally:
        gguf_utils.load_gguf_checkpoint, gguf_package.get_tensor_name_map = read, name_map
        GGUFReader._get = reader_get


def _copied(value):
    """A copy of parsed metadata as copy.deepcopy makes it (every dict and list new), sharing what cannot change
    (strings, numbers) without deepcopy's per-item bookkeeping: a Qwen file's token and merge lists took 0.7 s."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        if all(isinstance(item, (str, bytes, int, float, type(None))) for item in value):
            return list(value)
        return [_copied(item) for item in value]
    return copy.deepcopy(value)


def _reads_as_expected(reader_class) -> bool:
    """Whether `reader_class` (gguf.GGUFReader) reads as `_plain_reads` stands in for: its `_get`'s arguments and a
    `byte_order`."""
    import inspect

    names = list(inspect.signature(reader_class._get).parameters)
    return names == ["self", "offset", "dtype", "count", "override_order"] and hasattr(reader_class, "byte_order")


def _plain_reads(reader, offset: int, dtype, count: int = 1, override_order=None):
    """gguf.GGUFReader._get (gguf 0.19: `count` values of `dtype` at `offset`, in the file's byte order), reading
    through a plain ndarray view of the reader's memory map instead of the numpy.memmap itself."""
    plain = reader.__dict__.get("_specdec_plain")
    if plain is None:
        plain = reader._specdec_plain = reader.data.view(np.ndarray)
    count = int(count)
    values = plain[offset:offset + np.dtype(dtype).itemsize * count].view(dtype=dtype)[:count]
    return values.view(values.dtype.newbyteorder(reader.byte_order if override_order is None else override_order))


@contextlib.contextmanager
def _gguf_tensor_progress(report: Reporter, *, start: float, end: float) -> Iterator[None]:
    """Route transformers' "Converting and de-quantizing GGUF tensors" tqdm loop into `report`."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = getattr(gguf_utils, "tqdm", None)
    if original is None:  # a transformers version without that loop: report the stage edges only
        yield
        return

    def reporting(iterable, *args, **kwargs):
        items = list(iterable)
        for index, item in enumerate(items):
            report("convert", start + (end - start) * index / max(1, len(items)),
                   f"Dequantising tensor {index + 1} of {len(items)}", throttle=True)
            yield item

    gguf_utils.tqdm = reporting
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def dtype_variant(folder: Path, dtype: torch.dtype, report: Reporter) -> Path:
    """A converted folder's weights in `dtype` (bfloat16, float16), written once beside them (`as-<dtype>/`).

    Loading the float32 conversion into a smaller dtype maps the whole float32 file while it converts each
    tensor: the 1.5B verifier peaked at 11 GB for 3.1 GB of bfloat16 weights. This copy is made a tensor at a
    time (the float32 file is mapped for one tensor, then unmapped), so later loads map only its own bytes."""
    name = dtype_name(dtype)
    variant = folder / f"as-{name}"
    if (variant / _MARKER).is_file():
        why = conversion_check.damage(variant, (_marker(variant) or {}).get("files_sha256"))
        if why is None:
            return variant
        _discard_damaged(variant, f"the {name} copy of {folder.name} in the cache", why, report)
    from safetensors import safe_open
    from safetensors.torch import save_file

    report("convert", 0.0, f"Writing a {name} copy of the weights (first {name} load only)")
    partial = Path(tempfile.mkdtemp(prefix=f".partial-{name}-", dir=folder))
    try:
        files = sorted(folder.glob("*.safetensors"))
        for index, weights in enumerate(files):
            with safe_open(str(weights), framework="pt") as source:
                keys, metadata = list(source.keys()), source.metadata()
            tensors: dict[str, torch.Tensor] = {}
            for number, key in enumerate(keys):
                with safe_open(str(weights), framework="pt") as source:  # mapped for this tensor only
                    tensor = source.get_tensor(key)
                tensors[key] = tensor.to(dtype) if tensor.is_floating_point() else tensor
                del tensor
                report("convert", (index + number / max(1, len(keys))) / len(files),
                       f"Writing a {name} copy of the weights (first {name} load only)", throttle=True)
            save_file(tensors, str(partial / weights.name), metadata=metadata)
            del tensors
        for side in folder.iterdir():
            own = side.suffix == ".safetensors" or side.name in (_MARKER, conversion_check.VERDICT)
            if side.is_file() and not own:
                shutil.copy2(side, partial / side.name)
        hashes = {p.name: _file_sha256(p) for p in partial.iterdir() if p.is_file()}
        (partial / _MARKER).write_text(json.dumps({"format": _CACHE_FORMAT, "dtype": name, "files_sha256": hashes}),
                                       encoding="utf-8")
        partial.rename(variant)
    except OSError as error:
        raise ModelLoadError(f"cannot write a {name} copy of {folder.name} in the cache: "
                             f"{error.strerror or error}") from error
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return variant


def _publish(partial: Path, target: Path, digest: str) -> None:
    """Move a finished conversion into place; a rename is atomic, so readers see all of it or none."""
    if target.exists():
        # An older format or a damaged folder: move it aside first (rename refuses non-empty targets).
        stale = target.with_name(f".partial-stale-{digest[:12]}-{os.getpid()}")
        with contextlib.suppress(OSError):
            target.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        partial.rename(target)
    except OSError as error:
        if not _cache_is_complete(target, digest):  # not a concurrent process winning the race
            raise ModelLoadError(f"cannot move the converted model into {target}: {error}") from error
