"""Reading a GGUF's header for a listing (gguf_header.py): only the header's bytes are read, however large the
vocabulary or the file, and the token lists found at once give the same facts as stepping through them."""

from __future__ import annotations

import builtins
import io
import mmap
import os
import struct
from collections import Counter
from pathlib import Path

import fake_homes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_core.loading import discovery, gguf_header

_STRING, _ARRAY, _U32_TYPE, _I32_TYPE = 8, 9, 4, 5


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def strings_array(key: str, strings: bytes, count: int) -> bytes:
    """A metadata entry holding an array of `count` strings, `strings` their bytes as GGUF lays them out."""
    return _string(key.encode()) + struct.pack("<IIQ", _ARRAY, _STRING, count) + strings


def encoded(tokens: list[bytes]) -> bytes:
    return b"".join(_string(token) for token in tokens)


def random_strings(count: int, seed: int) -> bytes:
    """`count` strings of 1 to 16 lowercase letters as GGUF lays them out, built with numpy (a 150k-token list
    in milliseconds)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 17, count)
    starts = np.concatenate([[0], np.cumsum(8 + lengths)[:-1]])
    out = rng.integers(ord("a"), ord("z") + 1, int(np.sum(8 + lengths)), dtype=np.uint8)
    out[starts[:, None] + np.arange(8)] = lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
    return out.tobytes()


def gguf_header_bytes(tokens: bytes, token_count: int, *, merges: tuple[bytes, int] | None = None,
                      layers: int = 24, hidden: int = 2048) -> tuple[bytes, int]:
    """A GGUF header the way llama.cpp's converter writes one (general facts, the tokenizer's arrays, a tensor
    table of `layers` blocks of Q4_K matrices), and the bytes its tensors' data would take."""
    entries = [_string(b"general.architecture") + struct.pack("<I", _STRING) + _string(b"qwen2"),
               _string(b"general.file_type") + struct.pack("<II", _U32_TYPE, 15),
               _string(b"qwen2.block_count") + struct.pack("<II", _U32_TYPE, layers),
               strings_array("tokenizer.ggml.tokens", tokens, token_count),
               _string(b"tokenizer.ggml.token_type") + struct.pack("<IIQ", _ARRAY, _I32_TYPE, token_count)
               + b"\1\0\0\0" * token_count]
    if merges is not None:
        entries.append(strings_array("tokenizer.ggml.merges", *merges))
    entries.append(_string(b"tokenizer.chat_template") + struct.pack("<I", _STRING) + _string(b"{{ x }}" * 500))
    table, offset = [], 0
    for layer in range(layers):
        for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_gate", "ffn_down"):
            table.append(_string(f"blk.{layer}.{name}.weight".encode()) + struct.pack("<IQQIQ", 2, hidden, hidden,
                                                                                    12, offset))
            offset += hidden * hidden * 144 // 256  # Q4_K: 144 bytes per 256 values
    head = b"GGUF" + struct.pack("<IQQ", 3, len(table), len(entries)) + b"".join(entries) + b"".join(table)
    return head + b"\0" * (-len(head) % 32), offset


def write_sparse(path: Path, header: bytes, data_bytes: int) -> Path:
    """The header, then `data_bytes` of tensor data as a hole: a file of real size that takes no disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.write(header)
        out.truncate(len(header) + data_bytes)
    return path


class ReadCounter:
    """Bytes read from each file under `root`, counted at every way Python opens a file; mapping one fails."""

    def __init__(self, monkeypatch, root: Path) -> None:
        self.root, self.bytes, self._paths = str(root), Counter(), {}
        real_os_open, real_fdopen, real_io_open = os.open, os.fdopen, io.open

        def os_open(path, flags, *args, **kwargs):
            fd = real_os_open(path, flags, *args, **kwargs)
            if str(path).startswith(self.root):
                self._paths[fd] = str(path)
            return fd

        def fdopen(fd, *args, **kwargs):
            return self._counted(real_fdopen(fd, *args, **kwargs), self._paths.pop(fd, None))

        def io_open(file, *args, **kwargs):
            path = str(file) if isinstance(file, (str, os.PathLike)) else None
            return self._counted(real_io_open(file, *args, **kwargs), path)

        def no_mapping(*args, **kwargs):
            raise AssertionError("a file was mapped: a listing reads the header only")

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(os, "fdopen", fdopen)
        monkeypatch.setattr(io, "open", io_open)
        monkeypatch.setattr(builtins, "open", io_open)
        monkeypatch.setattr(mmap, "mmap", no_mapping)

    def _counted(self, file, path):
        if path is None or not path.startswith(self.root):
            return file
        counter = self

        class Counted:
            def __getattr__(self, name):
                return getattr(file, name)

            def __enter__(self):
                file.__enter__()
                return self

            def __exit__(self, *exc):
                return file.__exit__(*exc)

            def read(self, size=-1):
                data = file.read(size)
                counter.bytes[path] += len(data)
                return data

            def readinto(self, buffer):
                size = file.readinto(buffer)
                counter.bytes[path] += size or 0
                return size

        return Counted()


def test_fifty_large_ggufs_are_listed_reading_only_their_headers(tmp_path, monkeypatch):
    home = fake_homes.isolate(monkeypatch, tmp_path / "home")
    folder = home / ".lmstudio" / "models" / "pub" / "many"
    vocabularies = [32_000, 49_152, 102_400, 128_256, 151_936]
    headers = {}
    for index, count in enumerate(vocabularies):
        merges = (random_strings(count - 300, seed=100 + index), count - 300)
        headers[count] = gguf_header_bytes(random_strings(count, seed=index), count, merges=merges)
    originals = {count: write_sparse(tmp_path / "store" / f"{count}.gguf", *headers[count]) for count in vocabularies}
    folder.mkdir(parents=True)
    sizes = {}
    for index in range(50):
        count = vocabularies[index % len(vocabularies)]
        path = folder / f"model-{index:02}.gguf"
        os.link(originals[count], path)  # 50 files to list, 5 written (hard links of one file are parsed once)
        sizes[str(path)] = len(headers[count][0])
    reads = ReadCounter(monkeypatch, folder)

    listing = discovery.find_models()

    assert len(listing.models) == 50 and listing.skipped == ()
    assert {m.facts.vocabulary_size for m in listing.models} == set(vocabularies)
    assert all(m.facts.parameters == 24 * 7 * 2048 * 2048 for m in listing.models)
    assert set(reads.bytes) <= set(sizes) and len(reads.bytes) >= len(vocabularies)
    for path, read in reads.bytes.items():
        # The header and at most one read-ahead step past it: none of the tensors' data (hundreds of MB)
        assert sizes[path] <= read <= sizes[path] + (1 << 20), path
    assert sum(reads.bytes.values()) < sum(sizes.values()) + 50 * (1 << 20)


def test_a_large_vocabularys_hash_is_the_hash_of_its_tokens(tmp_path):
    strings = random_strings(40_000, seed=7)
    header, data_bytes = gguf_header_bytes(strings, 40_000)
    facts = gguf_header.read_gguf_facts(write_sparse(tmp_path / "m.gguf", header, data_bytes), keep_tokens=True)
    assert facts.token_count == len(facts.tokens) == 40_000
    assert facts.vocabulary_hash == gguf_header.vocabulary_hash(facts.tokens)
    assert encoded([t.encode() for t in facts.tokens]) == strings


# Tokens that defeat the at-once guess (a NUL byte, an empty token, a length of 256 or more) are stepped
# through one by one: the facts must be the same either way.
_tokens = st.lists(st.one_of(st.binary(min_size=0, max_size=12), st.sampled_from([b"\0", b"a\0", b"", b"x" * 256,
                                                                                  b"[PAD7]", b"y" * 300])),
                   min_size=0, max_size=60)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=_tokens, merges=_tokens)
def test_token_lists_found_at_once_match_stepping_through_them(tokens, merges, tmp_path):
    header, _ = gguf_header_bytes(encoded(tokens), len(tokens), merges=(encoded(merges), len(merges)), layers=1,
                                  hidden=32)
    path = tmp_path / "m.gguf"
    path.write_bytes(header)
    at_once = gguf_header.read_gguf_facts(path, keep_tokens=True)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(gguf_header, "_starts_at_once", lambda *args: None)
        one_by_one = gguf_header.read_gguf_facts(path, keep_tokens=True)
    assert at_once == one_by_one
    assert at_once.tokens == tuple(t.decode("utf-8", "replace") for t in tokens)
    assert at_once.vocabulary_hash == gguf_header.vocabulary_hash(tokens)
    assert at_once.tensors == one_by_one.tensors and len(at_once.tensors) == 7


def test_a_token_list_cut_short_is_a_header_error_both_ways(tmp_path):
    strings = random_strings(5_000, seed=3)
    header, _ = gguf_header_bytes(strings, 5_000)
    start = header.index(b"tokenizer.ggml.tokens")
    for cut in (start + 40, start + len(strings) // 2, start + len(strings)):
        path = fake_homes.write(tmp_path / "cut.gguf", header[:cut])
        with pytest.raises(gguf_header.GgufHeaderError, match="cut short"):
            gguf_header.read_gguf_facts(path)


def test_a_header_claiming_more_than_any_models_is_refused_without_reading_it_all(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_header, "HEADER_LIMIT", 1 << 20)
    strings = random_strings(200_000, seed=4)  # about 2.5 MB of tokens: past the limit
    header, _ = gguf_header_bytes(strings, 200_000)
    path = fake_homes.write(tmp_path / "big.gguf", header)
    reads = ReadCounter(monkeypatch, tmp_path)
    with pytest.raises(gguf_header.GgufHeaderError, match="beyond any model's"):
        gguf_header.read_gguf_facts(path)
    assert reads.bytes[str(path)] <= (1 << 20) + (1 << 20)


def test_a_token_list_met_again_is_recognised_by_its_bytes_and_only_by_them(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_header, "_SEEN", {})
    strings = random_strings(20_000, seed=11)
    first = fake_homes.write(tmp_path / "a.gguf", gguf_header_bytes(strings, 20_000)[0])
    again = fake_homes.write(tmp_path / "b.gguf", gguf_header_bytes(strings, 20_000, layers=3)[0])
    # The same count and the same first 100 KB, then one token one byte longer: another layout
    cut = len(strings) // 2
    start = cut + strings[cut:].index(b"\x05\0\0\0\0\0\0\0")  # the length of a 5-letter token
    changed = strings[:start] + b"\x06" + strings[start + 1:start + 13] + b"q" + strings[start + 13:]
    other = fake_homes.write(tmp_path / "c.gguf", gguf_header_bytes(changed, 20_000)[0])
    expected = {path: gguf_header.read_gguf_facts(path, keep_tokens=True) for path in (first, again, other)}

    with monkeypatch.context() as patched:
        patched.setattr(gguf_header, "_starts_at_once", lambda *args: pytest.fail("walked again"))
        assert gguf_header.read_gguf_facts(again, keep_tokens=True) == expected[again]
    for facts in expected.values():
        assert facts.vocabulary_hash == gguf_header.vocabulary_hash(facts.tokens) and facts.token_count == 20_000
    assert expected[other].vocabulary_hash != expected[first].vocabulary_hash
    assert expected[again].vocabulary_hash == expected[first].vocabulary_hash
