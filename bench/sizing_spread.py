"""How much one greedy reply's speculation varies from run to run when the text does not (printed, not asserted).

Greedy text is the same in every run; what the cost model makes of the machine's timings is not: which rounds
draft, how many tokens they draft, and so tokens per verifier call and tokens/s. Each run decodes the same
prompt on a new engine over the same loaded models, as each `specdec generate` process does (`--reuse`: on one
engine, as the app's replies do), and prints drafting rounds, tokens per call and tokens/s per run, then their
ranges. `--fixed` turns the cost model off (the configuration's γ every round) as the control. `--memory-ab`
alternates new engines that recall this machine's verify costs (specdec_core/loading/cost_memory.py) with new
engines that start from nothing, and summarises each apart.

    OMP_NUM_THREADS=1 SPECDEC_THREADS=1 .venv/bin/python -m bench.sizing_spread [--runs 10] [--tokens 128]
        [--prompt TEXT] [--fixed] [--reuse] [--memory-ab] [specdec generate's options: --verifier, --draft ...]
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads, as the CLI and the app set it

PROMPT = "Name three primary colours."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--fixed", action="store_true", help="no cost model: the configuration's γ every round")
    parser.add_argument("--reuse", action="store_true", help="every run on one engine, as the app's replies")
    parser.add_argument("--memory-ab", action="store_true",
                        help="alternate engines that recall this machine's verify costs with engines that do not")
    args, rest = parser.parse_known_args()

    from specdec_core.commands.cli import build_parser
    from specdec_core.commands.cli_options import config_from_args, load_from_args
    from specdec_core.engine import Engine
    from specdec_core.events import Finished
    from specdec_core.loading import cost_memory
    from specdec_core.loading.cpu_speed import cpu_name
    from specdec_core.text.chat import build_prompt

    cli = build_parser().parse_args(["generate", "--max-new-tokens", str(args.tokens), *rest, args.prompt])
    config = config_from_args(cli).with_(cost_aware=not args.fixed)
    pair = load_from_args(cli)
    ids = build_prompt(pair.verifier.tokenizer, [{"role": "user", "content": args.prompt}],
                       context_length=pair.verifier.context_length).ids
    engine = pair.engine
    texts: set[tuple[int, ...]] = set()
    lanes = ("recalling", "from nothing") if args.memory_ab else ("",)
    by_lane: dict[str, list[tuple[float, int, float]]] = {lane: [] for lane in lanes}
    for run in range(args.runs * len(lanes)):
        lane = lanes[run % len(lanes)]
        if lane:
            os.environ[cost_memory.OFF_ENV] = "on" if lane == "recalling" else "off"
        if not args.reuse:
            engine = Engine(pair.verifier, None)
            engine.set_drafter(pair.drafter)  # a drafter new to this engine: its costs and worth learned afresh
        finished = next(e for e in engine.generate(ids, config) if isinstance(e, Finished))
        stats = finished.stats
        texts.add(finished.token_ids)
        drafting = sum(stats.accepted_length_histogram)  # rounds that drafted at least one token
        by_lane[lane].append((stats.mean_accepted_length, drafting, stats.tokens_per_s))
        print(f"run {run + 1}{f' ({lane})' if lane else ''}: {stats.new_tokens} tokens, {stats.rounds} verifier "
              f"calls, {drafting} drafting, {stats.mean_accepted_length:.2f} tokens/call, "
              f"acceptance {stats.acceptance_rate:.2f}, {stats.tokens_per_s:.1f} tok/s", flush=True)

    def spread(values: list[float]) -> str:
        return f"median {statistics.median(values):.2f}, {min(values):.2f}-{max(values):.2f}"

    print(f"{'fixed γ' if args.fixed else 'cost model'}, {'one engine' if args.reuse else 'a new engine per run'}, "
          f"{args.runs} runs{' each' if args.memory_ab else ''}, {pair.verifier.name}, {cpu_name()}, "
          f"{torch_threads()} thread(s)")
    for lane, runs in by_lane.items():
        calls, rounds, speeds = zip(*runs)
        print(f"  {lane + ': ' if lane else ''}tokens per call {spread(list(calls))}; "
              f"drafting rounds {spread([float(r) for r in rounds])}; tokens/s {spread(list(speeds))}")
    print(f"  texts identical: {'yes' if len(texts) == 1 else f'no, {len(texts)} different'}")


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
