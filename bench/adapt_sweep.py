"""Tune online adaptation with `specdec bench --adapt --proxy`'s figures, many settings on one loaded pair.

    OMP_NUM_THREADS=1 .venv/bin/python bench/adapt_sweep.py --out /tmp/sweep.jsonl \
        --prompts assets/prompts/conversation-20.jsonl assets/prompts/photo-script-20.jsonl \
        --settings '{"lr": 1e-4}' '{"lr": 3e-4, "chain_steps": 1}'

Each setting (AdaptSettings fields as JSON; max_seconds defaults to 1000 here so that the step count, not
this machine's load, bounds each adaptation: the line says how long the steps took) runs on each prompt
set's recorded conversation (the verifier's replies are cached beside --out, recorded once). One JSON line
per (setting, set) is appended to --out as it finishes; a line already there is not run again, so an
interrupted sweep resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_core.commands.threads import set_threads
from specdec_core.drafting.adapt import AdaptSettings
from specdec_core.drafting.drafters import HybridDrafter, model_drafter_of
from specdec_core.measuring.adapt_proxy import ChainRounds, record_turns, run_proxy
from specdec_core.measuring.prompt_sets import load_prompts
from specdec_core.pairs.pairing import LoadOptions, load_pair


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", nargs="+", required=True)
    parser.add_argument("--settings", nargs="+", required=True, help="AdaptSettings fields as JSON objects")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--history", type=int, default=4)
    args = parser.parse_args()
    set_threads(1)
    done = set()
    if args.out.is_file():
        done = {(json.dumps(row["chosen"], sort_keys=True), row["prompts"])
                for row in map(json.loads, args.out.read_text().splitlines())}
    pair = load_pair(None, None, None, LoadOptions(device="cpu"))
    drafter = pair.engine.drafter
    assert isinstance(drafter, HybridDrafter) and drafter.model_tokens == 1, "the embedded default, please"
    from specdec_core.config import GenerationConfig

    config = GenerationConfig(max_new_tokens=args.max_new_tokens)
    rounds = ChainRounds(config.gamma, config.max_new_tokens, pair.verifier.eos_token_ids, pair.engine.vocab_size)
    recorded = {}
    for spec in args.prompts:
        cache = args.out.with_name(f"{args.out.stem}-{Path(spec).stem}-replies.json")
        recorded[spec] = record_turns(pair.engine, pair.verifier.tokenizer, pair.verifier.context_length,
                                      load_prompts(spec), args.max_new_tokens, args.history, cache)
    for text in args.settings:
        chosen = json.loads(text)
        settings = AdaptSettings(**{"max_seconds": 1000.0, **chosen})
        for spec, turns in recorded.items():
            if (json.dumps(chosen, sort_keys=True), spec) in done:
                continue
            result = run_proxy(model_drafter_of(drafter).model, pair.verifier.model, turns, settings, rounds)
            row = {"chosen": chosen, "prompts": spec, "before": result["before"], "after": result["after"],
                   "ratio": result["ratio"], "chain_before": result["chain_before"],
                   "chain_after": result["chain_after"], "chain_ratio": result["chain_ratio"],
                   "adapt_s_per_turn": result["adapt_s_per_turn"], "adapt_steps": result["adapt_steps"],
                   "per_turn": result["per_turn"]}
            with args.out.open("a") as out:
                out.write(json.dumps(row) + "\n")
            print(f"{Path(spec).stem:24} {text:50} agreement step 1 {result['before'][0]:.3f} -> "
                  f"{result['after'][0]:.3f}, chain acceptance {result['chain_before']['acceptance_rate']:.3f} -> "
                  f"{result['chain_after']['acceptance_rate']:.3f} ({result['chain_ratio']:.2f}x), "
                  f"{result['adapt_s_per_turn']:.1f} s per turn", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
