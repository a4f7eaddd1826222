"""Every way of speculating with one verifier + draft pair, in one run, on the same prompts, alternating.

`specdec bench` compares speculation off and one setting; choosing a default needs them all side by side,
measured close together on the same machine state: speculation off, the plain chain at each γ given, the
default (`--tree-nodes auto`: cost-aware trees, one draft pass per level), prompt lookup alone (cost-aware
chain), and transformers' assisted generation with the same draft and γ and its prompt lookup. Each prompt
runs every setting in turn, the order rotating from one prompt to the next, after a warm-up of each. Greedy
replies are checked against speculation off, token for token.

    .venv/bin/python -m bench.real_pair [--verifier SPEC] [--draft SPEC] [--prompts code-heldout] [--limit N]
        [--gammas 4] [--max-new-tokens 48] [--skip transformers,prompt] [--without-ahead] [--json OUT]

Defaults: the installed Qwen2.5-Coder-1.5B-Instruct with its 0.5B draft (`specdec models install ...`).
Prints a table (decode and end-to-end tokens/s, speedup over speculation off, tokens per verifier call,
acceptance, identical) and the process's peak RSS against the models' weights.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from specdec_core.commands.threads import prefer_passive_waiting

prefer_passive_waiting()

from specdec_core.config import TREE_AUTO, GenerationConfig  # noqa: E402
from specdec_core.drafting.drafters import ModelDrafter, PromptLookupDrafter  # noqa: E402
from specdec_core.drafting.planner import DraftPlanner, DraftPolicy  # noqa: E402
from specdec_core.engine import Engine  # noqa: E402
from specdec_core.loading import catalog  # noqa: E402
from specdec_core.loading.resources import peak_rss_bytes, weight_bytes  # noqa: E402
from specdec_core.measuring.bench import Reply, hf_reference, machine_description, time_reply  # noqa: E402
from specdec_core.measuring.prompt_sets import load_prompts  # noqa: E402
from specdec_core.text.chat import build_prompt  # noqa: E402


@dataclass
class Setting:
    name: str
    run: Callable[[list[int], GenerationConfig], Reply]


def settings_for(verifier, draft, gammas: list[int], without_ahead: bool = False) -> list[Setting]:
    def ours(engine: Engine, **changes) -> Callable[[list[int], GenerationConfig], Reply]:
        return lambda ids, config: time_reply(engine, ids, config.with_(**changes))

    def drafting_after_the_prefill() -> Engine:
        return Engine(verifier, ModelDrafter(draft), DraftPlanner(DraftPolicy(draft_during_prefill=False)))

    out = [Setting("off", ours(Engine(verifier, None), speculate=False))]
    out += [Setting(f"chain γ={g}", ours(Engine(verifier, ModelDrafter(draft)), tree_nodes=0, gamma=g))
            for g in gammas]
    if without_ahead:
        out.append(Setting(f"chain γ={gammas[0]}, draft after prefill",
                           ours(drafting_after_the_prefill(), tree_nodes=0, gamma=gammas[0])))
    out.append(Setting("auto (default)", ours(Engine(verifier, ModelDrafter(draft)), tree_nodes=TREE_AUTO)))
    if without_ahead:
        out.append(Setting("auto, draft after prefill", ours(drafting_after_the_prefill(), tree_nodes=TREE_AUTO)))
    out.append(Setting("prompt lookup", ours(Engine(verifier, PromptLookupDrafter()), tree_nodes=TREE_AUTO)))
    gamma = gammas[0]
    out.append(Setting(f"transformers assisted γ={gamma}",
                       lambda ids, config: hf_reference(verifier, draft, ids, config.with_(gamma=gamma))))
    out.append(Setting("transformers prompt lookup",
                       lambda ids, config: hf_reference(verifier, None, ids, config.with_(gamma=gamma))))
    return out


def summarise(name: str, replies: list[Reply], baseline: list[Reply]) -> dict:
    tokens = sum(r.new_tokens for r in replies)
    decode = sum(r.decode_s for r in replies)
    wall = sum(r.wall_s for r in replies)
    off_decode = sum(r.decode_s for r in baseline) / sum(r.new_tokens for r in baseline)
    off_wall = sum(r.wall_s for r in baseline) / sum(r.new_tokens for r in baseline)
    tally = None
    for reply in replies:
        tally = reply.tally if tally is None else tally + reply.tally
    stats = tally.snapshot() if tally is not None and tally.rounds else None
    # Verifier calls that checked drafts: ours prefill in a call of their own; transformers' first call reads the
    # prompt together with the first drafts, so all of its calls count (its rounds match ours token for token).
    calls = sum(r.verifier_calls - (r.kind != "hf") for r in replies)
    return {
        "setting": name, "tokens": tokens,
        "decode_tokens_per_s": tokens / decode, "end_to_end_tokens_per_s": tokens / wall,
        "speedup": off_decode / (decode / tokens), "end_to_end_speedup": off_wall / (wall / tokens),
        "tokens_per_call": stats.mean_accepted_length if stats else tokens / max(1, calls),
        "acceptance_rate": stats.acceptance_rate if stats and stats.drafted else None,
        "identical": all(r.token_ids == b.token_ids for r, b in zip(replies, baseline)),
        # where a round's time goes: drafting and checking, per verifier call (ours only)
        "draft_ms_per_call": 1000 * stats.draft_s / stats.rounds if stats else None,
        "verify_ms_per_call": 1000 * stats.verify_s / stats.rounds if stats else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default=catalog.QWEN_CODER_1_5B)
    parser.add_argument("--draft", default=catalog.QWEN_CODER_0_5B)
    parser.add_argument("--prompts", default="code-heldout")
    parser.add_argument("--limit", type=int, default=0, help="the first N prompts only (0: all)")
    parser.add_argument("--gammas", default="4", help="chain lengths to run, comma-separated (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--draft-dtype", default="", help="the draft's dtype, if not the verifier's")
    parser.add_argument("--skip", default="", help="settings to leave out, comma-separated name prefixes "
                        "(e.g. 'transformers' for ours only); speculation off always runs")
    parser.add_argument("--without-ahead", action="store_true",
                        help="also run the first chain and the default with the draft reading the prompt after the "
                        "verifier's prefill instead of during it (Engine.drafts_ahead)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    from specdec_core.pairs.pairing import LoadOptions, load_pair

    started = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {message}", file=sys.stderr, flush=True)

    say(f"loading {args.verifier} + {args.draft}")
    pair = load_pair(args.verifier, args.draft, "model", LoadOptions(device="cpu", dtype=args.dtype,
                                                                     draft_dtype=args.draft_dtype))
    verifier, draft = pair.verifier, pair.draft
    cases = load_prompts(args.prompts)
    cases = cases[:args.limit] if args.limit else cases
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, top_alternatives=0)
    prompts = [build_prompt(verifier.tokenizer, list(c.messages), system=c.system,
                            context_length=verifier.context_length, reserve_new_tokens=args.max_new_tokens).ids
               for c in cases]
    skipped = tuple(prefix.strip() for prefix in args.skip.split(",") if prefix.strip())
    gammas = [int(g) for g in args.gammas.split(",")]
    settings = [s for s in settings_for(verifier, draft, gammas, args.without_ahead)
                if s.name == "off" or not s.name.startswith(skipped)]
    say("warming up")
    for setting in settings:
        setting.run(prompts[0], config.with_(max_new_tokens=8))
    replies: dict[str, list[Reply]] = {s.name: [] for s in settings}
    for index, ids in enumerate(prompts):
        shift = index % len(settings)
        for setting in settings[shift:] + settings[:shift]:
            say(f"prompt {index + 1}/{len(prompts)} ({cases[index].name}): {setting.name}")
            replies[setting.name].append(setting.run(ids, config))
    rows = [summarise(s.name, replies[s.name], replies["off"]) for s in settings]
    weights = {"verifier": weight_bytes(verifier.model), "draft": weight_bytes(draft.model)}
    result = {"verifier": verifier.name, "draft": draft.name, "prompts": args.prompts, "n_prompts": len(cases),
              "max_new_tokens": args.max_new_tokens, "dtype": str(verifier.dtype).removeprefix("torch."),
              "draft_dtype": str(draft.dtype).removeprefix("torch."),
              "machine": machine_description(verifier.device), "rows": rows, "weights_bytes": weights,
              "peak_rss_bytes": peak_rss_bytes(), "wall_s": time.perf_counter() - started}
    print(table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


def table(result: dict) -> str:
    draft = result.get("draft_dtype", result["dtype"])
    draft_dtype = "" if draft == result["dtype"] else f" (draft in {draft})"
    lines = [f"{result['verifier']} + {result['draft']}, {result['n_prompts']} prompts of {result['prompts']}, "
             f"{result['max_new_tokens']} new tokens, greedy, {result['dtype']}{draft_dtype}, {result['machine']}", "",
             "| setting | decode tok/s | speedup | end-to-end tok/s | end-to-end speedup | tokens/call | acceptance "
             "| draft ms/call | verify ms/call | identical |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        acceptance = f"{row['acceptance_rate']:.0%}" if row["acceptance_rate"] is not None else "–"
        split = " | ".join(f"{row[k]:.0f}" if row.get(k) is not None else "–"
                           for k in ("draft_ms_per_call", "verify_ms_per_call"))
        lines.append(f"| {row['setting']} | {row['decode_tokens_per_s']:.2f} | {row['speedup']:.2f}x | "
                     f"{row['end_to_end_tokens_per_s']:.2f} | {row['end_to_end_speedup']:.2f}x | "
                     f"{row['tokens_per_call']:.2f} | {acceptance} | {split} | {'yes' if row['identical'] else 'NO'} |")
    peak, weights = result["peak_rss_bytes"], result["weights_bytes"]
    if peak:
        lines += ["", f"peak RSS {peak / 1e9:.2f} GB for weights of {weights['verifier'] / 1e9:.2f} GB (verifier) + "
                      f"{weights['draft'] / 1e9:.2f} GB (draft)"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
