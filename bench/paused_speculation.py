"""What speculation costs where it is priced out: replies with speculation off and with the default, alternating.

A draft that cannot pay on this machine (the real pair on a 2-core CPU: a check of k rows costs nearly k plain
steps and the 0.5B draft costs 0.4 of one) should cost nothing: the cost model prices it out, and its probes (a
few rounds that draft for evidence every 16 or 128 priced-out rounds) should not show. Each pair of replies runs
one prompt with speculation off, then with the default drafter, in one process and one engine, so the later pairs
show what a chat's later replies see. Prints, per reply, tokens/s, the rounds, what was drafted, the time drafting
and verifying, and every round that drafted (a probe), then the ratio default / off of each pair.

    OMP_NUM_THREADS=1 .venv/bin/python bench/paused_speculation.py [--verifier SPEC] [--draft SPEC]
        [--pairs 6] [--prompt-set code-heldout] [--prompt 1] [--max-new-tokens 64]

OMP_NUM_THREADS=1 is the app's and the CLI's setting on a machine with 2 CPUs (commands/threads.py).
"""

from __future__ import annotations

import argparse
import statistics
import time

from specdec_core.commands.threads import prefer_passive_waiting

prefer_passive_waiting()

from specdec_core.config import TREE_AUTO, GenerationConfig  # noqa: E402
from specdec_core.events import DraftStop, Finished, RoundVerified  # noqa: E402
from specdec_core.measuring.prompt_sets import load_prompts  # noqa: E402
from specdec_core.pairs.pairing import load_pair  # noqa: E402
from specdec_core.text.chat import build_prompt  # noqa: E402


def reply(engine, ids: list[int], max_new_tokens: int, speculate: bool) -> float:
    """One reply, timed from its prefill's end (decoding only); prints its rounds. Returns tokens/s."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, speculate=speculate, tree_nodes=TREE_AUTO)
    rounds: list[RoundVerified] = []
    finished = started = None
    for event in engine.generate(ids, config):
        started = started or time.perf_counter()
        if isinstance(event, RoundVerified):
            rounds.append(event)
        elif isinstance(event, Finished):
            finished = event
    seconds = time.perf_counter() - started
    assert finished is not None and finished.error is None, finished
    tokens = len(finished.token_ids)
    plain = [r.verify_s for r in rounds if r.rows == 1]
    print(f"speculation {'on ' if speculate else 'off'}: {tokens / seconds:5.2f} tok/s, {len(rounds)} rounds, "
          f"{sum(len(r.drafted) for r in rounds)} drafted, drafting {sum(r.draft_s for r in rounds):.2f} s, "
          f"verifying {sum(r.verify_s for r in rounds):.2f} s, "
          f"plain step {1e3 * statistics.median(plain) if plain else 0:.0f} ms")
    for r in rounds:
        if r.drafted or r.rows > 1 or r.stop not in (DraftStop.COST, DraftStop.OFF, DraftStop.MAX_TOKENS):
            print(f"    round {r.round_index}: {r.stop.value}, {len(r.drafted)} drafted, {r.n_accepted} accepted, "
                  f"{r.rows} rows, drafting {1e3 * r.draft_s:.0f} ms, verifying {1e3 * r.verify_s:.0f} ms")
    return tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--prompt-set", default="code-heldout")
    parser.add_argument("--prompt", type=int, default=1, help="which prompt of the set (from 0)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    pair = load_pair(args.verifier, args.draft)
    case = load_prompts(args.prompt_set)[args.prompt]
    ids = build_prompt(pair.verifier.tokenizer, list(case.messages), system=case.system,
                       context_length=pair.verifier.context_length, reserve_new_tokens=args.max_new_tokens).ids
    print(f"{pair.verifier.name} ({pair.verifier.weights}) with {type(pair.drafter).__name__}, "
          f"{args.prompt_set} prompt {args.prompt}, {args.max_new_tokens} tokens")
    ratios = []
    for _ in range(args.pairs):
        off = reply(pair.engine, ids, args.max_new_tokens, speculate=False)
        on = reply(pair.engine, ids, args.max_new_tokens, speculate=True)
        ratios.append(on / off)
        print(f"  default / off: {on / off:.3f}")
    print("default / off, each pair:", ", ".join(f"{r:.2f}" for r in ratios))


if __name__ == "__main__":
    main()
