"""`specdec bench --adapt`: a conversation replayed twice, to measure online adaptation (adapt.py).

The prompt set's turns are replayed in order as one conversation: a turn's prompt is the last `history`
exchanges (the user's messages and the verifier's own reply) followed by the turn's messages. Two passes,
greedy, from the same original head:

1. before: the original head throughout;
2. online: after each reply the head adapts on it (HeadAdapter.observe, adapt) and the adapted weights
   are swapped in before the next turn, so turn t is drafted by a head that learnt from turns 1..t-1,
   never from turn t itself.

Compared over the turns after the first (the ones the online pass drafted with an adapted head), and
over the second half: acceptance and tokens per verifier call, and whether every reply was identical
(it must be: greedy output is the verifier's). The head is back to its original weights afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specdec_core.config import GenerationConfig
from specdec_core.drafting.adapt import AdaptSettings, HeadAdapter
from specdec_core.measuring.bench import BenchError, Reply, machine_description, summarize, time_reply
from specdec_core.measuring.prompt_sets import PromptCase

FIGURES = ("acceptance_rate", "mean_accepted_length", "tokens_per_s")


def replay(engine, tokenizer, context_length: int, cases: Sequence[PromptCase], config: GenerationConfig,
           history: int, after_reply: Callable[[list[int], Reply], None] | None = None,
           progress: Callable[[str], None] = lambda message: None) -> list[Reply]:
    """One timed reply per turn, each turn after the last `history` exchanges; `after_reply(prompt_ids,
    reply)` runs between replies."""
    from specdec_core.text.chat import build_prompt

    exchanges: list[list[dict]] = []
    replies = []
    for number, case in enumerate(cases, 1):
        progress(f"turn {number}/{len(cases)} ({case.name})")
        messages = [m for exchange in (exchanges[-history:] if history else []) for m in exchange]
        messages += list(case.messages)
        ids = build_prompt(tokenizer, messages, system=case.system, context_length=context_length,
                           reserve_new_tokens=config.max_new_tokens).ids
        reply = time_reply(engine, ids, config)
        replies.append(reply)
        text = tokenizer.decode(list(reply.token_ids), skip_special_tokens=True)
        exchanges.append([*case.messages, {"role": "assistant", "content": text}])
        if after_reply is not None:
            after_reply(ids, reply)
    return replies


def run_adapt_bench(engine, verifier, cases: list[PromptCase], config: GenerationConfig,
                    settings: AdaptSettings, history: int = 4,
                    progress: Callable[[str], None] = lambda message: None) -> dict:
    """Both passes (see the module docstring) -> the figures `format_adapt_bench` prints."""
    from specdec_core.drafting.drafters import HeadDrafter, model_drafter_of

    head_drafter = model_drafter_of(engine.drafter)
    if not isinstance(head_drafter, HeadDrafter):
        raise BenchError("--adapt needs a draft head (only a head adapts): use the embedded default or pass "
                         "--draft with a head's folder")
    if not config.greedy:
        raise BenchError("--adapt compares greedy replies (the same conversation twice): drop --temperature")
    if len(cases) < 2:
        raise BenchError("--adapt replays a conversation: the prompt set needs at least two turns")
    config = config.with_(speculate=True)
    run = dict(tokenizer=verifier.tokenizer, context_length=verifier.context_length, cases=cases,
               config=config, history=history)
    progress("before: the original head")
    before = replay(engine, progress=progress, **run)
    adapter = HeadAdapter(head_drafter.model, verifier.model, settings)
    reports = []

    def learn(prompt_ids: list[int], reply: Reply) -> None:
        adapter.observe(prompt_ids, list(reply.token_ids))
        reports.append(adapter.adapt())
        adapter.swap_into(head_drafter)

    progress("online: adapting after each reply")
    try:
        online = replay(engine, after_reply=learn, progress=progress, **run)
    finally:
        adapter.reset()
        adapter.swap_into(head_drafter)
    return adapt_result(before, online, reports, cases, settings, history, config, engine)


def adapt_result(before: list[Reply], online: list[Reply], reports: list, cases: list[PromptCase],
                 settings: AdaptSettings, history: int, config: GenerationConfig, engine: Any) -> dict:
    half = len(cases) // 2

    def figures(replies: list[Reply]) -> dict:
        summary = summarize(replies)
        return {name: summary[name] for name in FIGURES}

    result = {
        "setup": {"turns": len(cases), "history": history, "max_new_tokens": config.max_new_tokens,
                  "tree_nodes": engine.tree_nodes(config), "gamma": config.gamma,
                  "adapt": dict(vars(settings)), "machine": machine_description()},
        "before": figures(before[1:]), "after": figures(online[1:]),
        "before_second_half": figures(before[half:]), "after_second_half": figures(online[half:]),
        "identical": all(a.token_ids == b.token_ids for a, b in zip(before, online)),
        "adapt_steps": sum(r.steps for r in reports), "adapt_s": sum(r.seconds for r in reports),
        "adapted_tokens": reports[-1].tokens if reports else 0,
        # The replies too: with them, the conversation can be rebuilt and adaptation tuned without generating.
        "per_turn": [{"turn": case.name, "before": figures([a])["acceptance_rate"],
                      "after": figures([b])["acceptance_rate"], "identical": a.token_ids == b.token_ids,
                      "token_ids": list(a.token_ids)}
                     for case, a, b in zip(cases, before, online)],
    }
    before_rate = result["before"]["acceptance_rate"]
    result["acceptance_ratio"] = result["after"]["acceptance_rate"] / before_rate if before_rate else float("nan")
    return result


def format_adapt_bench(result: dict) -> str:
    setup = result["setup"]
    lines = [f"{setup['turns']} turns, replayed twice (history {setup['history']} exchanges, "
             f"{setup['max_new_tokens']} new tokens, greedy) on {setup['machine']}",
             f"{'':28} {'acceptance':>10} {'tokens/call':>11} {'tokens/s':>9}"]
    for label, key in (("before (turns 2..)", "before"), ("after online adaptation", "after"),
                       ("before, second half", "before_second_half"), ("after, second half", "after_second_half")):
        row = result[key]
        lines.append(f"{label:28} {row['acceptance_rate']:>10.3f} {row['mean_accepted_length']:>11.2f} "
                     f"{row['tokens_per_s']:>9.1f}")
    lines.append(f"acceptance after / before: {result['acceptance_ratio']:.2f}x; output identical: "
                 f"{'yes' if result['identical'] else 'NO'}; adapted on {result['adapted_tokens']} tokens in "
                 f"{result['adapt_steps']} steps, {result['adapt_s']:.1f} s")
    return "\n".join(lines)
