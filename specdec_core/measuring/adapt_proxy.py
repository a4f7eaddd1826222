"""`specdec bench --adapt --proxy`: online adaptation measured without generating with the head.

The real bench (adapt_bench.py) replays a conversation twice through the engine, minutes per setting. The
proxy records the conversation once (the verifier's greedy replies, speculation off: they are what any
speculative pass outputs too) and caches it, then measures the head *teacher-forced*: over each turn's
reply, how often the head's top-1 (among its tokens) is the verifier's next token at drafting steps
1..`steps` (step s > 1 fed the head's own predicted states, SpecdecHeadModel.forward_chain, the way
distill/head.py's agreement is measured). Turn by turn, in the order the app runs:

    for turn t:  before[t] = agreement of the original head on turn t
                 after[t]  = agreement of the adapted copy, which has learnt turns 1..t-1 only
                 then the copy observes turn t and adapts (HeadAdapter.observe, adapt)

Step 1 is what the embedded default drafts (one head token per round where neither prompt lookup nor the
phrase store finds anything), so after/before of step 1 estimates the head's share of the acceptance change
in seconds per setting.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.adapt import AdaptSettings, HeadAdapter, verifier_states
from specdec_core.drafting.drafters import Draft, DrafterBase, DraftTarget, HybridDrafter
from specdec_core.drafting.phrases import PhraseStore
from specdec_core.events import DraftStop
from specdec_core.loading.draft_head import SpecdecHeadModel
from specdec_core.measuring.prompt_sets import PromptCase


@dataclass(frozen=True)
class Turn:
    """One recorded exchange: the prompt the turn was given (after its history) and the verifier's reply."""

    prompt_ids: list[int]
    reply_ids: list[int]


def record_turns(engine, tokenizer, context_length: int, cases: Sequence[PromptCase], max_new_tokens: int,
                 history: int, cache: Path | None = None,
                 progress: Callable[[str], None] = lambda message: None) -> list[Turn]:
    """The conversation as `bench --adapt` replays it (greedy, the verifier alone), from `cache` when it
    holds this very replay (same turns, history, length and verifier), else generated and written there."""
    from specdec_core.measuring.adapt_bench import replay

    key = _replay_key(cases, max_new_tokens, history, engine)
    if cache is not None and cache.is_file():
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            return [Turn(t["prompt_ids"], t["reply_ids"]) for t in saved["turns"]]
    turns: list[Turn] = []
    config = GenerationConfig(max_new_tokens=max_new_tokens, speculate=False, top_alternatives=0)
    replay(engine, tokenizer, context_length, cases, config, history, progress=progress,
           after_reply=lambda ids, reply: turns.append(Turn(list(ids), list(reply.token_ids))))
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"key": key, "turns": [vars(t) for t in turns]}) + "\n")
    return turns


def _replay_key(cases: Sequence[PromptCase], max_new_tokens: int, history: int, engine) -> str:
    verifier = engine.verifier.model
    weights = verifier.get_output_embeddings().weight.detach()
    text = json.dumps([[c.messages, c.system] for c in cases] + [max_new_tokens, history,
                      verifier.config.name_or_path, float(weights[:64].double().sum())])
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ChainRounds:
    """What the embedded default's chain (`--tree-nodes 0`) does each round: prompt lookup's copy of up to
    `gamma` tokens where it finds one, else the phrase store's copy, else one token from the head
    (drafters.HybridDrafter, model_tokens 1; `phrases` is the store that ships with the head)."""

    gamma: int
    max_new_tokens: int
    eos_token_ids: frozenset[int]
    vocab_size: int
    phrases: PhraseStore | None = None


@torch.no_grad()
def head_predictions(head: SpecdecHeadModel, embed: torch.nn.Module, rows: torch.Tensor, turn: Turn,
                     states: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The head's top-1 token (among its tokens) for each reply token at drafting steps 1..steps.

    states [n, d]: the verifier's final hidden states over prompt + reply; rows [K, d] its output rows for
    the head's tokens. Head position i reads (state i, token i + 1) and predicts the state that scores
    token i + 2 (the prefill reads the prompt but its last token, whose state the first round computes), so
    the positions are len(prompt) - 2 .. n - 3, and entry j of each step's tensor stands for reply token j.
    Step s > 1 reads the head's own predicted states (teacher-forced tokens: the figure is the chance it is
    right given the steps before)."""
    ids = torch.tensor(turn.prompt_ids + turn.reply_ids)
    first, n = len(turn.prompt_ids) - 2, len(ids)
    if n - 3 < first or first < 0:
        return [torch.zeros(0, dtype=torch.long)] * steps
    was_training = head.training
    head.eval()
    device = rows.device
    token_embeds = embed(ids[1:].to(embed.weight.device)).to(device, torch.float32)[None]
    chain = head.forward_chain(states[:-1].to(device, torch.float32)[None], token_embeds, steps)
    head.train(was_training)
    return [head.head_ids.to(device)[(out[0, first:n - 2] @ rows.T).argmax(-1)].cpu() for out in chain]


def agreement(predictions: list[torch.Tensor], turn: Turn) -> list[float]:
    """Top-1 agreement with the verifier's reply at each drafting step (nan: an empty reply)."""
    target = torch.tensor(turn.reply_ids)
    return [float((picked == target).float().mean()) if len(target) else float("nan") for picked in predictions]


class _RecordedHead(DrafterBase):
    """A model drafter for the replay: its one token at reply position j is first_step[j]."""

    name = "the head, recorded"

    def __init__(self, prompt_length: int, first_step: torch.Tensor):
        self.prompt_length, self.first_step, self.calls = prompt_length, first_step, 0

    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        self.calls += 1
        token = int(self.first_step[len(ids) - self.prompt_length])
        return Draft((token,), torch.zeros(1, self.target.vocab_size), (None,), DraftStop.GAMMA, 0.0)


def chain_rounds(turn: Turn, first_step: torch.Tensor, rounds: ChainRounds) -> dict:
    """The greedy reply's rounds replayed without a model: each round drafts what the embedded default's
    hybrid would (prompt lookup's copy, else the phrase store's, else the head's step-1 token: `first_step`,
    head_predictions' first tensor, exact for one head token, which reads only the verifier's true states),
    keeps the prefix the reply agrees with, and commits one more token. -> drafted, accepted, rounds and
    tokens, as the engine's tally counts them, and the head's own share: head_drafted, head_accepted."""
    head = _RecordedHead(len(turn.prompt_ids), first_step)
    hybrid = HybridDrafter(head, model_tokens=1, phrases=rounds.phrases)
    hybrid.attach(DraftTarget(None, rounds.vocab_size, rounds.eos_token_ids,
                              GenerationConfig(max_new_tokens=rounds.max_new_tokens)))
    reply, done = turn.reply_ids, 0
    drafted = accepted = calls = head_drafted = head_accepted = 0
    while done < len(reply):
        room = min(rounds.gamma, rounds.max_new_tokens - done - 1)
        asked = head.calls
        draft = list(hybrid.propose(turn.prompt_ids + reply[:done], room).token_ids) if room > 0 else []
        from_head = head.calls > asked
        agreed = 0
        while agreed < len(draft) and done + agreed < len(reply) and draft[agreed] == reply[done + agreed]:
            agreed += 1
        drafted, accepted, calls = drafted + len(draft), accepted + agreed, calls + 1
        head_drafted, head_accepted = head_drafted + from_head, head_accepted + (from_head and agreed)
        done = min(len(reply), done + agreed + 1)
    return {"drafted": drafted, "accepted": accepted, "rounds": calls, "tokens": len(reply),
            "head_drafted": head_drafted, "head_accepted": int(head_accepted)}


def run_proxy(head: SpecdecHeadModel, verifier: torch.nn.Module, turns: Sequence[Turn], settings: AdaptSettings,
              rounds: ChainRounds | None = None, steps: int = 3, progress: Callable[[str], None] = lambda message: None,
              on_turn: Callable[[dict], None] = lambda row: None) -> dict:
    """Before and after figures per turn (see the module docstring) -> what `format_proxy` prints. `head`
    is left as it was (a copy adapts); `on_turn(row)` gets each turn's figures as they come."""
    adapter = HeadAdapter(head, verifier, settings)
    original = SpecdecHeadModel(head.config).to(adapter.rows.device)  # float32, whatever the live head's dtype
    original.load_state_dict(adapter.original)
    embed = verifier.get_input_embeddings()
    rows = []
    for number, turn in enumerate(turns, 1):
        progress(f"turn {number}/{len(turns)}")
        (states,) = verifier_states(verifier, [turn.prompt_ids + turn.reply_ids], head.config.feature_layers)
        row: dict = {"turn": number, "positions": len(turn.reply_ids)}
        for label, model in (("before", original), ("after", adapter.head)):
            predicted = head_predictions(model, embed, adapter.rows, turn, states, steps)
            row[label] = agreement(predicted, turn)
            if rounds is not None:
                row[f"chain_{label}"] = chain_rounds(turn, predicted[0], rounds)
        if rounds is not None:  # the most adapting the head could bring: a head right at every position
            row["chain_ceiling"] = chain_rounds(turn, torch.tensor(turn.reply_ids), rounds)
        start = time.perf_counter()  # then, and only then, the copy learns this turn
        adapter.observe(turn.prompt_ids, turn.reply_ids)
        report = adapter.adapt()
        row.update(adapt_steps=report.steps, adapt_s=time.perf_counter() - start)
        rows.append(row)
        on_turn(row)
    return proxy_result(rows, settings, steps)


def proxy_result(rows: list[dict], settings: AdaptSettings, steps: int) -> dict:
    """Over the turns after the first (the ones an adapted head would draft): position-weighted agreement,
    and the chain's acceptance and tokens per call."""
    later = [row for row in rows[1:] if row["positions"]]

    def mean(key: str, step: int) -> float:
        total = sum(row["positions"] for row in later)
        return sum(row[key][step] * row["positions"] for row in later) / total if total else float("nan")

    def chain(key: str) -> dict | None:
        if not later or key not in later[0]:
            return None
        names = ("drafted", "accepted", "rounds", "tokens", "head_drafted", "head_accepted")
        totals = {name: sum(row[key][name] for row in later) for name in names}
        return {"acceptance_rate": totals["accepted"] / totals["drafted"] if totals["drafted"] else float("nan"),
                "tokens_per_call": totals["tokens"] / totals["rounds"] if totals["rounds"] else float("nan"),
                "head_acceptance": totals["head_accepted"] / totals["head_drafted"] if totals["head_drafted"]
                else float("nan"), "head_drafted": totals["head_drafted"], "drafted": totals["drafted"]}

    before = [mean("before", s) for s in range(steps)]
    after = [mean("after", s) for s in range(steps)]
    result = {"settings": dict(vars(settings)), "per_turn": rows, "before": before, "after": after,
              "ratio": [a / b if b else float("nan") for a, b in zip(after, before)],
              "chain_before": chain("chain_before"), "chain_after": chain("chain_after"),
              "chain_ceiling": chain("chain_ceiling"),
              "adapt_s_per_turn": sum(row["adapt_s"] for row in rows) / max(1, len(rows)),
              "adapt_steps": sum(row["adapt_steps"] for row in rows)}
    if result["chain_before"] is not None:
        rate = result["chain_before"]["acceptance_rate"]
        result["chain_ratio"] = result["chain_after"]["acceptance_rate"] / rate if rate else float("nan")
    return result


def format_proxy(result: dict) -> str:
    steps = len(result["before"])
    header = "turn  positions  " + "  ".join(f"step{s + 1} before→after" for s in range(steps)) + "  adapt s"
    lines = [header]
    for row in result["per_turn"]:
        cells = "  ".join(f"{b:>8.3f} → {a:<6.3f}" for b, a in zip(row["before"], row["after"]))
        lines.append(f"{row['turn']:>4}  {row['positions']:>9}  {cells}  {row['adapt_s']:>7.1f}")
    figures = ", ".join(f"step {s + 1} {b:.3f} → {a:.3f} ({r:.2f}x)"
                        for s, (b, a, r) in enumerate(zip(result["before"], result["after"], result["ratio"])))
    before, after = result["chain_before"], result["chain_after"]
    lines.append(f"teacher-forced agreement, turns 2.. (position-weighted): {figures}")
    if before is None:
        lines.append(f"{result['adapt_steps']} adaptation steps, {result['adapt_s_per_turn']:.1f} s per turn")
        return "\n".join(lines)
    lines.append(f"the chain's rounds replayed, turns 2..: acceptance {before['acceptance_rate']:.3f} → "
                 f"{after['acceptance_rate']:.3f} ({result['chain_ratio']:.2f}x), tokens per call "
                 f"{before['tokens_per_call']:.2f} → {after['tokens_per_call']:.2f}, the head's own tokens "
                 f"{before['head_acceptance']:.3f} → {after['head_acceptance']:.3f} "
                 f"({before['head_drafted']} → {after['head_drafted']} of them); a head right at every position: "
                 f"acceptance {result['chain_ceiling']['acceptance_rate']:.3f}, "
                 f"{result['chain_ceiling']['tokens_per_call']:.2f} tokens per call; "
                 f"{result['adapt_steps']} adaptation steps, {result['adapt_s_per_turn']:.1f} s per turn")
    return "\n".join(lines)
