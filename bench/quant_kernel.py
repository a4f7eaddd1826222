"""What the quantised product kernel (specdec_core/loading/kernels/qmatmul.c) costs on this CPU, by rows.

One weight of random 4-bit (u4) or 8-bit (s8) integers with scales and offsets, the layout the loader decodes a
GGUF into, times x of 1, 2, 4 and 8 rows, with 16-bit activations (the default) and one-byte ones
(`--activations 8`). The shapes are those of the two pairs' layers: the embedded SmolLM2-135M's MLP
(1536 x 576), the 1.5B verifier's MLP (8960 x 1536) and the embedded model's output layer (49152 x 576, Q8_0).
Each figure is the fastest of three timings of CPU time per call, in ms, and per block of 32 weights, in ns: the
cost of checking k drafted tokens grows with the rows where the kernel is bound by its multiplies. Then one query
row's attention (specdec_attend) over 200 and 800 cached keys, in the heads of each pair's verifier (9 query heads
over 3 key heads of 64 values; 12 over 2 of 128), in µs per layer. `SPECDEC_QUANT_KERNEL=avx2` measures the AVX2
build on a CPU with AVX-512.
Run from the repository root:

    python3 -m bench.quant_kernel [--threads 1] [--json bench/results/quant-kernel.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from specdec_core.commands.threads import prefer_passive_waiting

SHAPES = ((1536, 576, True), (8960, 1536, True), (49152, 576, False))  # (outputs, inputs, 4-bit)
ROWS = (1, 2, 4, 8)


def _layer(outputs: int, inputs: int, nibbles: bool, rng: np.random.Generator):
    from specdec_core.loading import qkernel
    from specdec_core.loading.gguf_blocks import Grouped
    from specdec_core.loading.quantised import QuantLinear, QuantStorage

    q = rng.integers(0, 16 if nibbles else 127, size=(outputs, inputs)).astype(np.uint8 if nibbles else np.int8)
    d = rng.random((outputs, inputs // 32), dtype=np.float32)
    m = rng.random((outputs, inputs // 32), dtype=np.float32)
    grouped = Grouped(q=q, d=d, m=m, group=32, nibbles=nibbles)
    return QuantLinear(QuantStorage(grouped, "Q4_1" if nibbles else "Q8_0"), None, qkernel.library())


def _ms_per_call(layer, rows: int, inputs: int) -> float:
    x = torch.randn(rows, inputs)
    for _ in range(3):
        layer(x)
    calls = max(5, int(2e8 / layer.storage.data.numel()))
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(calls):
            layer(x)
        best = min(best, (time.process_time() - start) / calls * 1000)
    return best


def measure() -> list[dict]:
    from specdec_core.loading import qkernel

    if qkernel.library() is None:
        raise SystemExit(f"no quantised kernel here: {qkernel.unavailable_reason()}")
    rng, results = np.random.default_rng(0), []
    for outputs, inputs, nibbles in SHAPES:
        layer = _layer(outputs, inputs, nibbles, rng)
        for activation_bytes in (2, 1):
            layer.storage.activation_bytes = activation_bytes
            for rows in ROWS:
                ms = _ms_per_call(layer, rows, inputs)
                results.append({"shape": [outputs, inputs], "weights": "u4" if nibbles else "s8",
                                "activation_bits": 8 * activation_bytes, "rows": rows, "ms": round(ms, 4),
                                "ns_per_block": round(ms * 1e6 / (outputs * inputs / 32), 2)})
    return results


ATTENTION = ((9, 3, 64), (12, 2, 128))  # (query heads, key heads, values per head)


def attention() -> list[dict]:
    from specdec_core.loading import qkernel

    lib, results = qkernel.library(), []
    generator = torch.Generator().manual_seed(0)
    for heads, kv_heads, dim in ATTENTION:
        for keys in (200, 800):
            query = torch.randn(1, heads * dim, generator=generator)
            key, value = torch.randn(2, kv_heads, 1024, dim, generator=generator)[:, :, :keys]
            best = float("inf")
            for _ in range(3):
                start = time.process_time()
                for _ in range(200):
                    qkernel.attend(lib, query, heads, key, value, None, dim ** -0.5)
                best = min(best, (time.process_time() - start) / 200 * 1e6)
            results.append({"heads": heads, "kv_heads": kv_heads, "dim": dim, "keys": keys, "us": round(best, 2)})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    prefer_passive_waiting()
    torch.set_num_threads(args.threads)
    results = measure()
    for row in results:
        over = next(r["ms"] for r in results if r["shape"] == row["shape"] and r["rows"] == 1
                    and r["activation_bits"] == row["activation_bits"])
        print(f"{row['shape'][0]:>6} x {row['shape'][1]:<5} {row['weights']}  a{row['activation_bits']:<2}  "
              f"{row['rows']} rows  {row['ms']:8.3f} ms  {row['ns_per_block']:6.2f} ns/block  "
              f"{row['ms'] / over:4.2f}x one row")
    attended = attention()
    for row in attended:
        print(f"attention  {row['heads']:>2} heads over {row['kv_heads']} of {row['dim']:<3}  {row['keys']} keys  "
              f"{row['us']:8.2f} µs")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"threads": args.threads, "results": results, "attention": attended}, out, indent=1)


if __name__ == "__main__":
    main()
