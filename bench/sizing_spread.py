"""How much one greedy reply's speculation varies from run to run when the text does not (printed, not asserted).

Greedy text is the same in every run; what the cost model makes of the machine's timings is not: which rounds
draft, how many tokens they draft, and so tokens per verifier call and tokens/s. Each run decodes the same
prompt on a new engine over the same loaded models, as each `specdec generate` process does (`--reuse`: on one
engine, as the app's replies do), and prints drafting rounds, tokens per call and tokens/s per run, then their
ranges. `--fixed` turns the cost model off (the configuration's γ every round) as the control. `--memory-ab`
alternates new engines that recall this machine's verify costs (specdec_core/loading/cost_memory.py) with new
engines that start from nothing, and summarises each apart.

    OMP_NUM_THREADS=1 SPECDEC_THREADS=1 .venv/bin/python -m bench.sizing_spread [--runs 10] [--tokens 128]
        [--prompt TEXT | --prompts SET [--limit N]] [--fixed] [--reuse] [--memory-ab]
        [specdec generate's options: --verifier, --draft ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections import Counter

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads, as the CLI and the app set it

PROMPT = "Name three primary colours."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--prompts", default="", help="a prompt set instead (specdec bench's names or a file)")
    parser.add_argument("--limit", type=int, default=0, help="the set's first N prompts (0: all)")
    parser.add_argument("--fixed", action="store_true", help="no cost model: the configuration's γ every round")
    parser.add_argument("--reuse", action="store_true", help="every run on one engine, as the app's replies")
    parser.add_argument("--memory-ab", action="store_true",
                        help="alternate engines that recall this machine's verify costs with engines that do not")
    args, rest = parser.parse_known_args()

    from specdec_core.commands.cli import build_parser
    from specdec_core.commands.cli_options import config_from_args, load_from_args
    from specdec_core.engine import Engine
    from specdec_core.events import Finished, RoundVerified
    from specdec_core.loading import cost_memory
    from specdec_core.loading.cpu_speed import cpu_name
    from specdec_core.measuring.prompt_sets import PromptCase, load_prompts
    from specdec_core.text.chat import build_prompt

    cli = build_parser().parse_args(["generate", "--max-new-tokens", str(args.tokens), *rest, args.prompt])
    config = config_from_args(cli).with_(cost_aware=not args.fixed)
    pair = load_from_args(cli)
    cases = load_prompts(args.prompts) if args.prompts else [PromptCase("prompt", ({"role": "user",
                                                                                  "content": args.prompt},))]
    cases = cases[:args.limit] if args.limit else cases
    engine = pair.engine
    texts: dict[str, set[tuple[int, ...]]] = {case.name: set() for case in cases}
    lanes = ("recalling", "from nothing") if args.memory_ab else ("",)
    by_lane: dict[str, list[tuple[float, int, float]]] = {lane: [] for lane in lanes}
    totals = {lane: [0, 0.0] for lane in lanes}  # tokens, decode seconds
    for run, case in ((run, case) for case in cases for run in range(args.runs * len(lanes))):
        ids = build_prompt(pair.verifier.tokenizer, list(case.messages), system=case.system,
                           context_length=pair.verifier.context_length).ids
        lane = lanes[run % len(lanes)]
        if lane:
            os.environ[cost_memory.OFF_ENV] = "on" if lane == "recalling" else "off"
        if not args.reuse:
            engine = Engine(pair.verifier, None)
            engine.set_drafter(pair.drafter)  # a drafter new to this engine: its costs and worth learned afresh
        events = list(engine.generate(ids, config))
        finished = events[-1]
        assert isinstance(finished, Finished)
        stats = finished.stats
        idle = Counter(e.stop.value for e in events if isinstance(e, RoundVerified) and not e.drafted)
        texts[case.name].add(finished.token_ids)
        drafting = sum(stats.accepted_length_histogram)  # rounds that drafted at least one token
        by_lane[lane].append((stats.mean_accepted_length, drafting, stats.tokens_per_s))
        totals[lane][0] += stats.new_tokens
        totals[lane][1] += stats.decode_s
        print(f"{case.name} run {run + 1}{f' ({lane})' if lane else ''}: {stats.new_tokens} tokens, "
              f"{stats.rounds} verifier calls, {drafting} drafting, {stats.mean_accepted_length:.2f} tokens/call, "
              f"acceptance {stats.acceptance_rate:.2f}, {stats.tokens_per_s:.1f} tok/s; rounds without a draft: "
              f"{', '.join(f'{n} {why}' for why, n in sorted(idle.items())) or 'none'}", flush=True)
        print(f"  rounds: {round_map(events)}")

    def spread(values: list[float]) -> str:
        return f"median {statistics.median(values):.2f}, {min(values):.2f}-{max(values):.2f}"

    print(f"{'fixed γ' if args.fixed else 'cost model'}, {'one engine' if args.reuse else 'a new engine per run'}, "
          f"{args.runs} runs{' each' if args.memory_ab else ''} on {len(cases)} prompt(s), {pair.verifier.name}, "
          f"{cpu_name()}, {torch_threads()} thread(s)")
    for lane, runs in by_lane.items():
        calls, rounds, speeds = zip(*runs)
        tokens, seconds = totals[lane]
        print(f"  {lane + ': ' if lane else ''}tokens per call {spread(list(calls))}; "
              f"drafting rounds {spread([float(r) for r in rounds])}; tokens/s {spread(list(speeds))}; "
              f"all tokens over all decoding time {tokens / seconds:.2f} tok/s")
    differing = [name for name, seen in texts.items() if len(seen) > 1]
    print(f"  texts identical run to run: {'yes' if not differing else 'no: ' + ', '.join(differing)}")


def round_map(events) -> str:
    """One character a round: the drafted tokens it accepted (0-9), or why it drafted nothing (p: a plain step that
    timed itself, c: no draft paid, -: anything else)."""
    from specdec_core.events import DraftStop, RoundVerified

    marks = {DraftStop.PROBE: "p", DraftStop.COST: "c"}
    return "".join(str(min(9, e.n_accepted)) if e.drafted else marks.get(e.stop, "-")
                   for e in events if isinstance(e, RoundVerified))


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
