"""What checking k tokens costs the embedded verifier on this CPU, with and without the CPU fast paths.

A pass of the verifier over k new tokens after a prompt (the verify step of speculative decoding when
k = gamma + 1, a plain decoding step when k = 1), timed through `CachedForward` exactly as the engine
runs it, in four set-ups that `specdec_core/loading/cpu_speed.py`, `cpu_attention.py` and `kv.py` switch on one by one:

- before: `F.linear` everywhere, keys and values repeated per query head, a cache that concatenates;
- + columns form: each weight shape uses `W @ x.T` for the row counts measured faster here;
- + packed form: and oneDNN's inner product on reordered weights where that was faster still;
- + GQA in SDPA: the attention kernel handles the grouped heads (no copies);
- + growing cache: new keys and values are written into buffers with room to spare (all fast paths).

The set-ups alternate within each repeat (same machine load for all), every pass starts from the same
rolled-back cache, and the table gives medians in ms and each k's cost over k = 1 of the same set-up.
Run from the repository root:

    python3 -m bench.verify_cost [--prompt-tokens 200] [--repeats 9] [--json bench/results/verify-cost.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time

from specdec_core.commands.threads import prefer_passive_waiting

prefer_passive_waiting()  # before torch loads: 1 thread on 2 cores (threads.py)

import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from specdec_core.loading import cpu_attention, cpu_speed  # noqa: E402
from specdec_core.loading.gguf_cache import default_cache_dir  # noqa: E402
from specdec_core.loading.models import load_model  # noqa: E402
from specdec_core.verification import kv  # noqa: E402

SETUPS = ("before", "+ columns form", "+ packed form", "+ GQA in SDPA", "+ growing cache")


@contextlib.contextmanager
def setup(model, cached: kv.CachedForward, name: str, plans):
    """Switch the fast paths up to `name` on (the model keeps its plans; this strips them while inside)."""
    level = SETUPS.index(name)
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    saved = {m: vars(m).pop("forward", None) for m in linears}
    if level >= 1:
        cpu_speed.apply_plans(model, plans if level >= 2 else [cpu_speed.without_packing(p) for p in plans])
    if level >= 3:
        cpu_attention.keep_grouped_heads(model)
    try:
        yield
    finally:
        for m, forward in saved.items():
            vars(m).pop("forward", None)
            if forward is not None:
                m.forward = forward
        model.set_attn_implementation("sdpa")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--ks", default="1,2,3,4,5,6,9,17")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]

    os.environ["SPECDEC_CPU_MATMUL"] = "off"  # load plain, then measure/read the plans ourselves
    verifier = load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
    del os.environ["SPECDEC_CPU_MATMUL"]
    model = verifier.model
    plans = cpu_speed.speed_up(model, cache_dir=default_cache_dir())
    text = "The history of the river Danube is long and winding, and it has seen many empires. " * 40
    prompt = verifier.tokenizer(text).input_ids[:args.prompt_tokens]
    forwards = {}
    for name in SETUPS:
        cached = kv.CachedForward(model, verifier.device)
        if SETUPS.index(name) < 4:
            cached.reset = lambda c=cached: (setattr(c, "cache", DynamicCache(config=model.config)),
                                             setattr(c, "cached_ids", []))
            cached.reset()
        forwards[name] = cached
    times = {(name, k): [] for name in SETUPS for k in ks}
    for repeat in range(args.repeats + 1):  # the first round warms up
        for name in SETUPS:
            cached = forwards[name]
            with setup(model, cached, name, plans):
                cached.logits_for(prompt)
                for k in ks:
                    new = list(range(1000 + repeat, 1000 + repeat + k))
                    start = time.perf_counter()
                    cached.logits_for(prompt + new, n_last=k)
                    if repeat:
                        times[(name, k)].append(time.perf_counter() - start)
    median = {key: 1e3 * statistics.median(v) for key, v in times.items()}
    print(f"verifier pass over k new tokens after {len(prompt)} prompt tokens, median of {args.repeats} (ms), "
          f"torch threads {torch.get_num_threads()}, {platform.processor() or platform.machine()}")
    print("| set-up | " + " | ".join(f"k={k}" for k in ks) + " |")
    print("|---|" + "---|" * len(ks))
    for name in SETUPS:
        one = median[(name, 1)]
        print(f"| {name} | " + " | ".join(f"{median[(name, k)]:.1f} ({median[(name, k)] / one:.2f}×)"
                                        for k in ks) + " |")
    print("\nthe form of each row count, per weight shape:\n" + cpu_speed.describe(plans))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"prompt_tokens": len(prompt), "repeats": args.repeats, "threads": torch.get_num_threads(),
                       "median_ms": {f"{name}|{k}": median[(name, k)] for name in SETUPS for k in ks},
                       "plans": [{"shape": p.shape, "forms": p.forms} for p in plans],
                       "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                               time.gmtime())}, out, indent=1)


if __name__ == "__main__":
    main()
