"""Speculative decoding's costs on real model shapes with random weights (nothing is downloaded).

On CUDA: a Llama-3.1-8B-shaped verifier and a Llama-3.2-1B-shaped draft in bfloat16. Elsewhere (no
GPU): the same measurements on much smaller Llama shapes in float32, so the script runs anywhere in a
minute or two. `--pair qwen-coder` takes the shapes of the real pair `specdec models` installs instead:
Qwen2.5-Coder-1.5B with its 0.5B draft (Qwen2 configs, random weights; bfloat16 on CUDA, float32 on the
CPU, where it takes several minutes), so a GPU run answers what chain and trees give for such a pair without
its weights. It records

1. memory bandwidth, from a large device-to-device copy (bytes read + bytes written per second);
2. the verifier's cost to check k = 1..16 tokens in one forward pass, against one token, and to check a
   draft tree of 8-64 nodes in one pass (tree attention mask, kv.logits_for_tree);
3. tokens/s with speculation off (a bare forward loop, and through specdec's Engine) against the
   bandwidth ceiling: a decoding step reads every weight once, so tokens/s <= bandwidth / bytes read;
4. the Engine's overhead per round (time outside the two models' forward passes), with the random
   draft model and with a drafter that proposes random tokens (no model);
5. the speedup a draft of this shape would give at a few acceptance rates, from the measured costs.

Random weights accept almost nothing, which is what the overhead measurement wants: every round
drafts gamma tokens, verifies gamma + 1 and rolls back. Run from the repository root:

    python3 -m bench.gpu_shapes [--device auto|cuda|cpu] [--out-dir bench/results]

It writes gpu_shapes-<device>.json and gpu_shapes-<device>.md into the output folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import inspect
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from specdec_core.commands.threads import prefer_passive_waiting

prefer_passive_waiting()  # before torch loads: the CPU thread defaults of threads.py (1 thread on 2 cores)

import torch  # noqa: E402

from specdec_core.config import GenerationConfig  # noqa: E402
from specdec_core.drafting.drafters import Draft, DrafterBase, ModelDrafter  # noqa: E402
from specdec_core.engine import Engine  # noqa: E402
from specdec_core.events import DraftStop  # noqa: E402
from specdec_core.loading.models import LoadedModel  # noqa: E402
from specdec_core.measuring.bench import machine_description, time_reply  # noqa: E402
from specdec_core.stats import expected_tokens_per_call  # noqa: E402

LLAMA_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0)
LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0)
# Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct (their config.json: tied embeddings, qkv biases).
QWEN2_1_5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                  num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0)
QWEN2_0_5B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0)
# CPU stand-ins: the same family, about 60M and 10M parameters.
SMALL_VERIFIER = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
                      num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False, rope_theta=10000.0)
SMALL_DRAFT = dict(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=32000, tie_word_embeddings=True, rope_theta=10000.0)


@dataclass(frozen=True)
class Plan:
    verifier_name: str
    verifier: dict
    draft_name: str
    draft: dict
    dtype: torch.dtype
    prefill: int  # prompt length before the measured steps
    new_tokens: int  # reply length for the tokens/s and overhead runs
    ks: tuple[int, ...]  # verify widths
    tree_nodes: tuple[int, ...]  # draft tree sizes checked in one pass
    reps: int  # timed repetitions per verify width
    copy_mib: int  # size of the bandwidth copy
    family: str = "llama"  # the config class: llama or qwen2


PLANS = {
    "cuda": Plan("Llama-3.1-8B shape", LLAMA_8B, "Llama-3.2-1B shape", LLAMA_1B, torch.bfloat16, prefill=512,
                 new_tokens=128, ks=tuple(range(1, 17)), tree_nodes=(8, 16, 32, 64), reps=20, copy_mib=4096),
    "cpu": Plan("small Llama (CPU stand-in)", SMALL_VERIFIER, "tiny Llama (CPU stand-in)", SMALL_DRAFT,
                torch.float32, prefill=128, new_tokens=40, ks=tuple(range(1, 17)), tree_nodes=(8, 16, 32, 64), reps=7,
                copy_mib=256),
    "qwen-coder-cuda": Plan("Qwen2.5-Coder-1.5B shape", QWEN2_1_5B, "Qwen2.5-Coder-0.5B shape", QWEN2_0_5B,
                            torch.bfloat16, prefill=512, new_tokens=128, ks=tuple(range(1, 17)),
                            tree_nodes=(8, 16, 32, 64), reps=20, copy_mib=4096, family="qwen2"),
    "qwen-coder-cpu": Plan("Qwen2.5-Coder-1.5B shape", QWEN2_1_5B, "Qwen2.5-Coder-0.5B shape", QWEN2_0_5B,
                           torch.float32, prefill=128, new_tokens=24, ks=(1, 2, 3, 4, 5, 6, 8, 12, 16),
                           tree_nodes=(8, 16, 32), reps=3, copy_mib=256, family="qwen2"),
}


class CountingTokenizer:
    """Just enough tokenizer for the Engine: every id decodes to a short word. Random weights have no
    vocabulary; a real tokenizer's decode costs a few microseconds per call, which this roughly matches."""

    def __init__(self, size: int):
        self.size = size
        self.eos_token_id = 0
        self.pad_token_id = 0

    def __len__(self) -> int:
        return self.size

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False) -> str:
        return "".join(f" t{int(i)}" for i in ids)


class RandomTokenDrafter(DrafterBase):
    """Proposes uniformly random tokens in no time: the rounds of a perfectly cheap, useless draft."""

    name = "random tokens"

    def __init__(self) -> None:
        self.generator = torch.Generator()

    def reset(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def prefill(self, ids) -> None:
        pass

    def propose(self, ids, max_tokens) -> Draft:
        start, vocab_size = time.perf_counter(), self.target.vocab_size
        tokens = torch.randint(1, vocab_size, (max(0, max_tokens),), generator=self.generator)
        probs = torch.nn.functional.one_hot(tokens, vocab_size).float()
        stop = DraftStop.GAMMA if max_tokens > 0 else DraftStop.MAX_TOKENS
        return Draft(tuple(tokens.tolist()), probs, (1.0,) * len(tokens), stop, time.perf_counter() - start)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        pass


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(shape: dict, name: str, dtype: torch.dtype, device: torch.device, seed: int,
          family: str = "llama") -> LoadedModel:
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    kind = {"llama": LlamaConfig, "qwen2": Qwen2Config}[family]
    config = kind(max_position_embeddings=8192, bos_token_id=1, eos_token_id=0, pad_token_id=0, **shape)
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    synchronize(device)
    return LoadedModel(model=model, tokenizer=CountingTokenizer(config.vocab_size), spec=name, name=name,
                       device=device, dtype=dtype, context_length=8192, eos_token_ids=frozenset({0}),
                       load_s=time.perf_counter() - start, source="random weights")


def as_int4(loaded: LoadedModel, device: torch.device) -> LoadedModel:
    """The model's linear layers quantised to 4 bits in groups of 32 (as a Q4 GGUF's are) and run in torch's int4
    product, the rest in bfloat16 (device_quantised.py: a quantised GGUF's form on a GPU)."""
    from specdec_core.loading import device_quantised, quantised

    model = loaded.model.to("cpu", torch.float32)
    quantised.quantise_linears(model, bits=4, lib=None)
    _, _, why = device_quantised.to_device(model, device)
    if why:
        raise SystemExit(f"--weights int4: {why}")
    return dataclasses.replace(loaded, model=model, dtype=torch.bfloat16,
                               weights=device_quantised.weight_format(model))


def parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def bytes_per_step(model: torch.nn.Module) -> int:
    """Weight bytes one decoding step reads: everything but an untied input embedding, of which it
    reads one row."""
    total = parameter_bytes(model)
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    if embed.data_ptr() != head.data_ptr():
        total -= embed.numel() * embed.element_size()
    return total


def median_time(fn, reps: int, device: torch.device, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_bandwidth(device: torch.device, mib: int) -> float:
    n = mib * 1024 * 1024
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = median_time(lambda: dst.copy_(src), reps=10, device=device)
    return 2 * n / seconds  # each byte is read once and written once


def cache_for(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


@torch.inference_mode()
def _costs_after_prompt(loaded: LoadedModel, plan: Plan, sizes: tuple[int, ...], run) -> dict[int, float]:
    """Median seconds of `run(forward, prompt, new_ids)` for each size, after a `plan.prefill`-token prompt;
    `new_ids` are `size` random token ids."""
    from specdec_core.verification.kv import CachedForward

    forward = CachedForward(loaded.model, loaded.device)
    vocab = loaded.model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, vocab, (plan.prefill,), generator=generator).tolist()
    forward.logits_for(prompt)
    costs = {}
    for size in sizes:
        new_ids = torch.randint(1, vocab, (size,), generator=generator).tolist()
        costs[size] = median_time(lambda new_ids=new_ids: run(forward, prompt, new_ids), plan.reps, loaded.device)
    return costs


def verify_costs(loaded: LoadedModel, plan: Plan) -> dict[int, float]:
    """Seconds for one forward pass over k new tokens after a `plan.prefill`-token prompt."""

    def step(forward, prompt: list[int], extra: list[int]) -> torch.Tensor:
        # Drop the k tokens the previous step cached (and the logits it kept), then run them again.
        forward.roll_back(len(prompt))
        return forward.logits_for(prompt + extra, n_last=len(extra))

    return _costs_after_prompt(loaded, plan, plan.ks, step)


def tree_shape(nodes: int, width: int = 4) -> list[int]:
    """Parents of a breadth-first tree with `width` children per node (-1: under the last committed token)."""
    return [-1 if i < width else (i - width) // width for i in range(nodes)]


def tree_verify_costs(loaded: LoadedModel, plan: Plan) -> dict[int, float]:
    """Seconds for one forward pass over the last committed token and a draft tree of n nodes."""

    def step(forward, prompt: list[int], nodes: list[int]) -> torch.Tensor:
        forward.roll_back(len(prompt) - 1)  # the last committed token runs with the tree, as in a round
        logits = forward.logits_for_tree(prompt, nodes, tree_shape(len(nodes)))
        forward.keep_path([])
        return logits

    return _costs_after_prompt(loaded, plan, plan.tree_nodes, step)


@torch.inference_mode()
def bare_decode_tokens_per_s(loaded: LoadedModel, plan: Plan) -> float:
    """A plain greedy loop straight on the model: the most a framework-free driver could get from it."""
    model, device = loaded.model, loaded.device
    ids = torch.randint(1, model.config.vocab_size, (1, plan.prefill), device=device)
    cache = cache_for(model)
    # The cache keyword changed name in transformers 5.2x (kv.py makes the same choice).
    kwargs = {"cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values": cache}
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **kwargs)
    token = out.logits[:, -1:].argmax(-1)
    for _ in range(3):
        token = model(input_ids=token, use_cache=True, logits_to_keep=1, **kwargs).logits[:, -1:].argmax(-1)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(plan.new_tokens):
        token = model(input_ids=token, use_cache=True, logits_to_keep=1, **kwargs).logits[:, -1:].argmax(-1)
    synchronize(device)
    return plan.new_tokens / (time.perf_counter() - start)


def engine_run(engine: Engine, prompt: list[int], config: GenerationConfig) -> dict:
    time_reply(engine, prompt, config.with_(max_new_tokens=8))  # warm-up
    reply = time_reply(engine, prompt, config)
    overhead = max(0.0, reply.decode_s - reply.forward_s)
    tally = reply.tally
    return {"tokens": reply.new_tokens, "rounds": tally.rounds, "tokens_per_s": reply.new_tokens / reply.decode_s,
            "round_ms": reply.decode_s / tally.rounds * 1e3, "draft_ms_per_round": tally.draft_s / tally.rounds * 1e3,
            "verify_ms_per_round": tally.verify_s / tally.rounds * 1e3,
            "overhead_ms_per_round": overhead / tally.rounds * 1e3, "overhead_fraction": overhead / reply.decode_s,
            "acceptance_rate": tally.accepted / tally.drafted if tally.drafted else None}


def speedup_table(verify: dict[int, float], draft_step_s: float, alphas=(0.5, 0.6, 0.7, 0.8, 0.9),
                  gammas=(1, 2, 3, 4, 5, 6, 8)) -> list[dict]:
    """Expected speedup = E[tokens per round] * T(1) / (gamma * draft step + T(gamma + 1)), with the
    measured verify costs T(k) (not the paper's assumption T(gamma + 1) = T(1))."""
    rows = []
    for alpha in alphas:
        by_gamma = {g: expected_tokens_per_call(alpha, g) * verify[1] / (g * draft_step_s + verify[g + 1])
                    for g in gammas if g + 1 in verify}
        best = max(by_gamma, key=by_gamma.get)
        rows.append({"alpha": alpha, "by_gamma": by_gamma, "best_gamma": best, "best_speedup": by_gamma[best]})
    return rows


def run(device: torch.device, plan: Plan, say, weights: str = "model") -> dict:
    result: dict = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                    "device": machine_description(device), "torch": torch.__version__,
                    "python": platform.python_version(), "dtype": str(plan.dtype).removeprefix("torch."),
                    "verifier": plan.verifier_name, "draft": plan.draft_name, "prefill_tokens": plan.prefill}
    import transformers

    result["transformers"] = transformers.__version__
    say("bandwidth")
    bandwidth = measure_bandwidth(device, plan.copy_mib)
    result["bandwidth_gb_s"] = bandwidth / 1e9
    say(f"building the verifier ({plan.verifier_name})")
    verifier = build(plan.verifier, plan.verifier_name, plan.dtype, device, seed=1, family=plan.family)
    say(f"building the draft ({plan.draft_name})")
    draft = build(plan.draft, plan.draft_name, plan.dtype, device, seed=2, family=plan.family)
    if weights == "int4":
        say("quantising both to int4")
        verifier, draft = as_int4(verifier, device), as_int4(draft, device)
        result["weights"] = verifier.weights
    for name, loaded in (("verifier", verifier), ("draft", draft)):
        result[f"{name}_parameters"] = sum(p.numel() for p in loaded.model.parameters())
        result[f"{name}_bytes_per_step"] = bytes_per_step(loaded.model)

    say("verify cost for k = 1..16")
    verify = verify_costs(verifier, plan)
    result["verify_ms"] = {k: v * 1e3 for k, v in verify.items()}
    result["verify_ratio"] = {k: v / verify[1] for k, v in verify.items()}
    say(f"tree verify cost for {', '.join(map(str, plan.tree_nodes))} nodes")
    tree = tree_verify_costs(verifier, plan)
    result["tree_verify_ms"] = {n: v * 1e3 for n, v in tree.items()}
    result["tree_verify_ratio"] = {n: v / verify[1] for n, v in tree.items()}
    draft_step = verify_costs(draft, Plan(**{**plan.__dict__, "ks": (1,)}))[1]
    result["draft_ms_per_token"] = draft_step * 1e3
    result["c"] = draft_step / verify[1]

    say("tokens/s with speculation off")
    ceiling = bandwidth / result["verifier_bytes_per_step"]
    bare = bare_decode_tokens_per_s(verifier, plan)
    prompt = torch.randint(1, verifier.model.config.vocab_size, (plan.prefill,),
                           generator=torch.Generator().manual_seed(3)).tolist()
    greedy = GenerationConfig(max_new_tokens=plan.new_tokens, gamma=4)
    engine = Engine(verifier, None)
    engine.verifier_forward.synchronize_timing = True
    off = engine_run(engine, prompt, greedy.with_(speculate=False))
    result["speculation_off"] = {"ceiling_tokens_per_s": ceiling, "bare_loop_tokens_per_s": bare,
                                 "engine": off, "bare_fraction_of_ceiling": bare / ceiling,
                                 "engine_fraction_of_ceiling": off["tokens_per_s"] / ceiling}

    say("engine overhead per round (random draft model, random-token drafter)")
    drafter = ModelDrafter(draft)
    drafter.forward.synchronize_timing = True
    engine.set_drafter(drafter)
    result["rounds_random_draft"] = engine_run(engine, prompt, greedy)
    engine.set_drafter(RandomTokenDrafter())
    result["rounds_random_tokens"] = engine_run(engine, prompt, greedy)
    result["speedup_model"] = speedup_table(verify, draft_step)
    return result


def markdown(result: dict) -> str:
    off = result["speculation_off"]
    lines = [
        f"### {result['verifier']} verifier, {result['draft']} draft ({result.get('weights', result['dtype'])}, "
        "random weights)",
        "",
        f"{result['device']} · torch {result['torch']} · transformers {result['transformers']} · {result['date']} · "
        f"prompt {result['prefill_tokens']} tokens",
        "",
        "| figure | value |",
        "|---|---|",
        f"| memory bandwidth (device-to-device copy) | {result['bandwidth_gb_s']:.0f} GB/s |",
        f"| verifier parameters / bytes read per step | {result['verifier_parameters'] / 1e9:.2f} B / "
        f"{result['verifier_bytes_per_step'] / 1e9:.2f} GB |",
        f"| draft parameters / bytes read per step | {result['draft_parameters'] / 1e9:.2f} B / "
        f"{result['draft_bytes_per_step'] / 1e9:.2f} GB |",
        f"| bandwidth ceiling, speculation off | {off['ceiling_tokens_per_s']:.1f} tokens/s |",
        f"| bare forward loop, speculation off | {off['bare_loop_tokens_per_s']:.1f} tokens/s "
        f"({off['bare_fraction_of_ceiling']:.0%} of the ceiling) |",
        f"| specdec Engine, speculation off | {off['engine']['tokens_per_s']:.1f} tokens/s "
        f"({off['engine_fraction_of_ceiling']:.0%} of the ceiling; overhead "
        f"{off['engine']['overhead_ms_per_round']:.2f} ms per token, {off['engine']['overhead_fraction']:.1%}) |",
        f"| draft step / verifier step (c) | {result['draft_ms_per_token']:.2f} ms / {result['verify_ms'][1]:.2f} ms "
        f"= {result['c']:.3f} |",
    ]
    for key, label in (("rounds_random_draft", "random draft model"), ("rounds_random_tokens", "random-token drafter")):
        r = result[key]
        lines.append(f"| engine round, gamma 4, {label} | {r['round_ms']:.2f} ms: draft {r['draft_ms_per_round']:.2f}, "
                     f"verify {r['verify_ms_per_round']:.2f}, overhead {r['overhead_ms_per_round']:.2f} ms "
                     f"({r['overhead_fraction']:.1%} of the round) |")
    lines += ["", "Verify cost: one forward pass over k new tokens, against one token.", "",
              "| k | " + " | ".join(str(k) for k in result["verify_ms"]) + " |",
              "|---|" + "---|" * len(result["verify_ms"]),
              "| ms | " + " | ".join(f"{v:.2f}" for v in result["verify_ms"].values()) + " |",
              "| × one token | " + " | ".join(f"{v:.2f}" for v in result["verify_ratio"].values()) + " |",
              "", "Tree verify cost: one forward pass over the last committed token and a draft tree of n nodes "
                  "(4 children per node, tree attention mask), against one token.", "",
              "| nodes | " + " | ".join(str(n) for n in result["tree_verify_ms"]) + " |",
              "|---|" + "---|" * len(result["tree_verify_ms"]),
              "| ms | " + " | ".join(f"{v:.2f}" for v in result["tree_verify_ms"].values()) + " |",
              "| × one token | " + " | ".join(f"{v:.2f}" for v in result["tree_verify_ratio"].values()) + " |",
              "", "Expected speedup with a draft of this shape at acceptance rate α (measured costs, "
                  "E[tokens per round] × T(1) / (γ · draft step + T(γ+1))):", ""]
    gammas = list(result["speedup_model"][0]["by_gamma"])
    lines += ["| α | " + " | ".join(f"γ={g}" for g in gammas) + " | best |",
              "|---|" + "---|" * (len(gammas) + 1)]
    for row in result["speedup_model"]:
        lines.append(f"| {row['alpha']:.1f} | " + " | ".join(f"{row['by_gamma'][g]:.2f}" for g in gammas) +
                     f" | {row['best_speedup']:.2f}× at γ={row['best_gamma']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cuda or cpu")
    parser.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--threads", type=int, help="CPU threads for PyTorch (CPU runs)")
    parser.add_argument("--pair", default="llama", choices=("llama", "qwen-coder"),
                        help="llama: Llama 8B + 1B shapes (small stand-ins on the CPU); qwen-coder: the shapes of "
                             "Qwen2.5-Coder 1.5B + 0.5B, the pair `specdec models` installs")
    parser.add_argument("--weights", default="model", choices=("model", "int4"),
                        help="model: the plan's dtype (bfloat16 on CUDA); int4: linear layers in torch's int4 product, "
                             "as a quantised GGUF runs on a GPU (untested on a GPU when written)")
    args = parser.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    where = "cuda" if device.type == "cuda" else "cpu"
    plan = PLANS[where if args.pair == "llama" else f"qwen-coder-{where}"]
    started = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    result = run(device, plan, say, args.weights)
    result["wall_s"] = time.perf_counter() - started
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / (f"gpu_shapes-{device.type}" if args.pair == "llama" else f"gpu_shapes-{args.pair}-{device.type}")
    stem = stem.with_name(stem.name + ("-int4" if args.weights == "int4" else ""))
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    stem.with_suffix(".md").write_text(table)
    print(table)
    say(f"wrote {stem}.json and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
