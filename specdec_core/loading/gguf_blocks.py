"""GGUF's quantised blocks -> small integers with a scale and an offset per group, exactly as the file defines them.

Every type decoded here stores a weight as w = d * q + m per group of 16 or 32 values, with d and m exact in float32
(products of the file's float16 scales and its small integer sub-scales). `decode` returns that form for a whole
tensor; `Grouped.dequantise` gives back the floats llama.cpp's own dequantisation gives. Types without such a form
(Q2_K, Q3_K, the IQ types) are not decoded: the loader then uses the float path and says so.

Block layouts follow GGML's definitions (ggml-common.h, ggml-quants.c in llama.cpp), written anew from the format.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Grouped:
    """A weight [rows, cols] as integers q with per-group scale d and offset m: w = d * q + m."""

    q: np.ndarray  # [rows, cols]: uint8 0..15 ("u4") or int8 ("s8")
    d: np.ndarray  # [rows, cols // group] float32
    m: np.ndarray  # [rows, cols // group] float32
    group: int  # 16 or 32
    nibbles: bool  # q fits in 4 bits (0..15)

    def dequantise(self, rows: slice | np.ndarray | None = None) -> np.ndarray:
        q, d, m = (self.q, self.d, self.m) if rows is None else (self.q[rows], self.d[rows], self.m[rows])
        shape = q.shape
        grouped = q.reshape(shape[0], -1, self.group).astype(np.float32)
        return (grouped * d[:, :, None] + m[:, :, None]).reshape(shape)


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    return blocks[:, at:at + 2].copy().view(np.float16).astype(np.float32)[:, 0]


def _q4_0(blocks: np.ndarray) -> tuple:
    d = _f16(blocks, 0)
    qs = blocks[:, 2:18]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    return q, d[:, None], -8.0 * d[:, None], 32, True


def _q4_1(blocks: np.ndarray) -> tuple:
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    qs = blocks[:, 4:20]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1), d[:, None], m[:, None], 32, True


def _high_bits(blocks: np.ndarray, at: int) -> np.ndarray:
    """Q5_0/Q5_1's 32 fifth bits (a little-endian uint32) as [blocks, 32] of 0 or 16."""
    qh = blocks[:, at:at + 4].copy().view("<u4")[:, 0]
    return (((qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def _q5_0(blocks: np.ndarray) -> tuple:
    d = _f16(blocks, 0)
    qs = blocks[:, 6:22]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1) | _high_bits(blocks, 2)
    return q.astype(np.int8) - np.int8(16), d[:, None], np.zeros_like(d)[:, None], 32, False


def _q5_1(blocks: np.ndarray) -> tuple:
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    qs = blocks[:, 8:24]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1) | _high_bits(blocks, 4)
    return q.astype(np.int8), d[:, None], m[:, None], 32, False


def _q8_0(blocks: np.ndarray) -> tuple:
    d = _f16(blocks, 0)
    return blocks[:, 2:34].copy().view(np.int8), d[:, None], np.zeros_like(d)[:, None], 32, False


def _k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 bytes of a Q4_K/Q5_K super-block -> 8 six-bit scales and 8 six-bit mins."""
    sc = np.empty((scales.shape[0], 8), np.uint8)
    mn = np.empty_like(sc)
    sc[:, :4] = scales[:, 0:4] & 63
    mn[:, :4] = scales[:, 4:8] & 63
    sc[:, 4:] = (scales[:, 8:12] & 0x0F) | ((scales[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (scales[:, 8:12] >> 4) | ((scales[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def _q4_k(blocks: np.ndarray) -> tuple:
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    sc, mn = _k_scales(blocks[:, 4:16])
    qs = blocks[:, 16:144].reshape(-1, 4, 32)  # four chunks of 64 values: low nibbles, then high nibbles
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 256)
    return q, d[:, None] * sc, -(dmin[:, None] * mn), 32, True


def _q5_k(blocks: np.ndarray) -> tuple:
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    sc, mn = _k_scales(blocks[:, 4:16])
    qh = blocks[:, 16:48]  # bit 2c of byte l: value 64c + l; bit 2c + 1: value 64c + 32 + l
    qs = blocks[:, 48:176].reshape(-1, 4, 32)
    low = np.stack([qs & 0x0F, qs >> 4], axis=2)  # [blocks, chunk, half, 32]
    bits = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1  # [blocks, 8, 32]
    q = low | (bits.reshape(-1, 4, 2, 32) << 4)
    return q.reshape(-1, 256).astype(np.int8), d[:, None] * sc, -(dmin[:, None] * mn), 32, False


def _q6_k(blocks: np.ndarray) -> tuple:
    ql = blocks[:, 0:128].reshape(-1, 2, 64)  # two halves of 128 values
    qh = blocks[:, 128:192].reshape(-1, 2, 32)
    scales = blocks[:, 192:208].copy().view(np.int8).astype(np.float32)  # 16 groups of 16
    d = _f16(blocks, 208)
    low = np.stack([ql[:, :, :32] & 0x0F, ql[:, :, 32:] & 0x0F, ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], axis=2)
    high = np.stack([(qh >> shift) & 3 for shift in (0, 2, 4, 6)], axis=2)
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)  # [blocks, half, quarter, 32] in value order
    return q.reshape(-1, 256), d[:, None] * scales, np.zeros((d.shape[0], 16), np.float32), 16, False


# GGML type name -> (values per block, bytes per block, decoder)
DECODERS = {
    "Q4_0": (32, 18, _q4_0), "Q4_1": (32, 20, _q4_1), "Q5_0": (32, 22, _q5_0), "Q5_1": (32, 24, _q5_1),
    "Q8_0": (32, 34, _q8_0), "Q4_K": (256, 144, _q4_k), "Q5_K": (256, 176, _q5_k), "Q6_K": (256, 210, _q6_k),
}


def decodable(type_name: str) -> bool:
    return type_name in DECODERS


def decode(type_name: str, raw: np.ndarray, cols: int) -> Grouped:
    """A GGUF tensor's raw bytes ([rows, bytes per row] uint8, as the gguf reader maps them) in grouped form."""
    per_block, size, decoder = DECODERS[type_name]
    rows = raw.shape[0]
    if cols % per_block or raw.shape[1] != cols // per_block * size:
        raise ValueError(f"a {type_name} tensor of {cols} columns cannot hold {raw.shape[1]} bytes per row")
    blocks = np.ascontiguousarray(raw).reshape(-1, size)
    q, d, m, group, nibbles = decoder(blocks)
    return Grouped(q=np.ascontiguousarray(q.reshape(rows, cols)),
                   d=np.ascontiguousarray(d.reshape(rows, cols // group), dtype=np.float32),
                   m=np.ascontiguousarray(m.reshape(rows, cols // group), dtype=np.float32),
                   group=group, nibbles=nibbles)


def requantise(weight: np.ndarray, *, bits: int) -> Grouped:
    """A float weight [rows, cols] (cols a multiple of 32) in grouped form: 4 bits with a minimum per group of 32
    (as Q4_1), or 8 bits symmetric per group of 32 (as Q8_0). For models that come in float weights."""
    rows, cols = weight.shape
    groups = weight.astype(np.float32).reshape(rows, cols // 32, 32)
    if bits == 4:
        low, high = groups.min(axis=2), groups.max(axis=2)
        d = (high - low) / 15.0
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
        q = np.clip(np.rint((groups - low[:, :, None]) * inv[:, :, None]), 0, 15).astype(np.uint8)
        return Grouped(q=q.reshape(rows, cols), d=d.astype(np.float32), m=low.astype(np.float32), group=32,
                       nibbles=True)
    if bits == 8:
        d = np.abs(groups).max(axis=2) / 127.0
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
        q = np.clip(np.rint(groups * inv[:, :, None]), -127, 127).astype(np.int8)
        return Grouped(q=q.reshape(rows, cols), d=d.astype(np.float32), m=np.zeros_like(d, dtype=np.float32),
                       group=32, nibbles=False)
    raise ValueError(f"no {bits}-bit form")
