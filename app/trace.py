"""A reply's speculation trace: every token with its state and every round with its timings.

This is the app's one record of what the engine did. The window feeds it the engine's events
(`ReplyTrace.apply`), the chat view renders its tokens, the graphs plot its rounds, and the store saves
it as JSON so a reopened conversation shows the same colours and stats. Qt-free.

Time axis: `t` is engine time since decoding began, the running sum of each round's draft + verify +
overhead seconds. It is what the engine measured, so a busy UI thread cannot distort the graphs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from app.toggles import mixed_words
from specdec_core.events import (
    Finished,
    Prefilled,
    RoundVerified,
    TokenCommitted,
    TokenRejected,
    TokenState,
)
from specdec_core.stats import Stats, StatsAccumulator, round_emitted

# A token a draft with another tokenizer proposed (specdec_core/drafting/cross_vocab.py): the views mark it, and
# name the draft's own token(s) it came from. One proposed by string match has no draft probability: they say so.
MAPPED_MARK = "⇄"
MAPPED_NOTE = "⇄ mapped from the draft's own token(s), another tokenizer"
STRING_MATCH = "string match"


def draft_figure(draft_prob: float | None, drafted: bool, digits: int = 3) -> str:
    """The draft's probability of a token as the views print it: "string match" for a drafted token proposed
    by matching text (no probability of its own), "–" for the verifier's own tokens."""
    if draft_prob is None:
        return STRING_MATCH if drafted else "–"
    return f"{draft_prob:.{digits}f}"


# After PROBE_AFTER (16) rounds priced out, the engine drafts two rounds anyway (DraftPlanner._pays): drafting
# rounds that few, after at least TRIED_AFTER rounds priced out, do not end a pause.
TRY_ROUNDS = 2
TRIED_AFTER = 8
MIN_SPEEDUP_TOKENS = 24  # below this a reply's speedup is not shown: a few rounds' timing noise swamps it


@dataclass
class TokenRecord:
    token_id: int
    text: str
    state: str  # a TokenState value
    round: int
    position: int  # index within the round's draft
    draft_prob: float | None
    target_prob: float | None
    accept_prob: float | None
    alternatives: list[tuple[str, float]] = field(default_factory=list)  # verifier's top tokens
    t: float = 0.0  # engine seconds since decoding began when the round that emitted it ended
    draft_source: str | None = None  # a draft with another tokenizer: its own token(s) this one came from

    @property
    def in_reply(self) -> bool:
        """Rejected draft tokens are shown, but are not part of the reply's text."""
        return self.state != TokenState.REJECTED.value


@dataclass
class RoundRecord:
    index: int
    drafted: int
    accepted: int
    emitted_state: str
    stop: str  # a DraftStop value: why drafting stopped this round
    gamma: int
    draft_s: float
    verify_s: float
    overhead_s: float
    t_end: float  # engine seconds since decoding began, at the end of this round
    tokens_after: int  # reply tokens emitted up to and including this round
    # A draft tree's nodes (empty for a chain): dicts with token_id, text, parent (-1: the last committed
    # token), draft_prob, target_prob, accept_prob (None: never checked) and accepted (on the accepted path).
    tree: list[dict] = field(default_factory=list)
    emitted_token_id: int | None = None  # the verifier's correction or bonus token (None: path ended on EOS)
    rows: int = 0  # positions the verifier's pass fed (0: none ran, or a trace saved before this was kept)
    hidden_draft_s: float = 0.0  # drafting done during the prefill, not waited for (RoundVerified.hidden_draft_s)
    copied: int = 0  # accepted drafts copied from earlier text (prompt lookup), not drafted by a model

    @property
    def total_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    @property
    def checked(self) -> int:
        """Draft tokens the verifier checked in this round's pass: a tree's nodes, or the chain's length."""
        return len(self.tree) if self.tree else self.drafted

    @property
    def emitted(self) -> int:
        """Reply tokens this round added (stats.round_emitted: the rule the engine counts by)."""
        return round_emitted(self.accepted, self.emitted_state == TokenState.ACCEPTED.value)

    def fold_into(self, tally: StatsAccumulator) -> None:
        """Add this round to `tally` exactly as the engine's own tally counted it (StatsAccumulator.add_verified)."""
        tally.add_verified(n_accepted=self.accepted, ended_on_accepted=self.emitted_state == TokenState.ACCEPTED.value,
                           mainline=self.drafted, tree_nodes=len(self.tree), draft_s=self.draft_s,
                           verify_s=self.verify_s, overhead_s=self.overhead_s, hidden_draft_s=self.hidden_draft_s)


@dataclass
class ReplyTrace:
    tokens: list[TokenRecord] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)
    stats: dict | None = None  # Stats.to_dict() once finished
    stop_reason: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefill_s: float = 0.0
    dropped_turns: int = 0  # oldest turns left out of what the models saw (context limit)
    verifier: str = ""
    drafter: str = ""  # "" when the verifier decoded alone
    config: dict = field(default_factory=dict)
    baseline_tps: float | None = None  # verifier-alone tokens/s measured on this machine
    baseline_source: str = ""
    baseline_note: str = ""  # a few words on how comparable the baseline is (app/speedup.py Baseline.short)
    seed: int = 0
    # Reply tokens the draft head had learnt from this user's chats when it drafted this reply (0: the head as
    # loaded; app/adapt_controller.py). A trace saved before this was kept reads 0.
    adapted_tokens: int = 0

    # ---- building from events -------------------------------------------------------------------
    def apply(self, event: object) -> None:
        """Fold one engine event into the trace (called on the GUI thread; cheap)."""
        if isinstance(event, (TokenCommitted, TokenRejected)):
            t = self.rounds[-1].t_end if self.rounds else 0.0
            self.tokens.append(TokenRecord(
                token_id=event.token_id, text=event.text, state=TokenState(event.state).value,
                round=event.round_index, position=event.position, draft_prob=event.draft_prob,
                target_prob=event.target_prob, accept_prob=event.accept_prob,
                alternatives=[(a.text, float(a.prob)) for a in event.alternatives], t=t,
                draft_source=event.draft_source,
            ))
        elif isinstance(event, RoundVerified):
            t_end = (self.rounds[-1].t_end if self.rounds else 0.0) + \
                event.draft_s + event.verify_s + event.overhead_s
            prev = self.rounds[-1].tokens_after if self.rounds else 0
            emitted = round_emitted(event.n_accepted, event.emitted_state is TokenState.ACCEPTED)
            self.rounds.append(RoundRecord(
                index=event.round_index, drafted=len(event.drafted), accepted=event.n_accepted,
                emitted_state=TokenState(event.emitted_state).value, stop=str(getattr(event.stop, "value", event.stop)),
                gamma=event.gamma, draft_s=event.draft_s, verify_s=event.verify_s,
                overhead_s=event.overhead_s, t_end=t_end, tokens_after=prev + emitted,
                tree=[dict(vars(node)) for node in event.tree],  # flat fields: no asdict deep copy per token
                emitted_token_id=event.emitted_token_id if event.emitted_state != TokenState.ACCEPTED else None,
                rows=event.rows, hidden_draft_s=event.hidden_draft_s,
                copied=sum(1 for v in event.drafted if v.accepted and v.copied),
            ))
        elif isinstance(event, Prefilled):
            self.prompt_tokens = event.prompt_tokens
            self.reused_tokens = event.reused_tokens
            self.prefill_s = event.prefill_s
        elif isinstance(event, Finished):
            self.stats = json.loads(json.dumps(event.stats.to_dict()))  # as it will read back from disk
            self.stop_reason = getattr(event.stop_reason, "value", str(event.stop_reason))
            self.error = event.error

    # ---- derived figures ------------------------------------------------------------------------
    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens if t.in_reply)

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    @property
    def speculative(self) -> bool:
        return any(r.drafted for r in self.rounds)

    @property
    def all_plain(self) -> bool:
        return bool(self.rounds) and not any(r.drafted for r in self.rounds)

    def tally(self) -> StatsAccumulator:
        """The rounds so far, folded as the engine folds them (a finished reply: the figures of its `stats`)."""
        tally = StatsAccumulator(prompt_tokens=self.prompt_tokens, prefill_s=self.prefill_s)
        for r in self.rounds:
            r.fold_into(tally)
        return tally

    def get_stats(self) -> Stats | None:
        if self.stats is None:
            return None
        names = {f.name for f in fields(Stats)}
        data = {k: (tuple(v) if isinstance(v, list) else v) for k, v in self.stats.items() if k in names}
        return Stats(**data)

    def running_tps(self) -> float:
        """Reply tokens per engine second so far (decode only, prefill excluded)."""
        if not self.rounds or self.rounds[-1].t_end <= 0:
            return 0.0
        return self.rounds[-1].tokens_after / self.rounds[-1].t_end

    def speedup(self) -> float | None:
        """Measured speedup against the verifier-alone baseline, or None without a baseline."""
        tps = self.stats.get("tokens_per_s") if self.stats else self.running_tps()
        if not self.baseline_tps or not tps:
            return None
        return tps / self.baseline_tps

    def rate_spread(self) -> float | None:
        """One standard error of the reply's tokens/s, relative to it, from its own round-to-round variation
        (the ratio estimator's: sum of tokens / sum of seconds over rounds); None below MIN_SPEEDUP_TOKENS
        tokens or 4 rounds, where a speedup is noise. Sums carry over between calls: O(new rounds)."""
        sums = self.__dict__.setdefault("_spread_sums", [0, 0, 0.0, 0.0, 0.0, 0.0, 0.0])
        for r in self.rounds[sums[0]:]:
            before = self.rounds[sums[0] - 1].tokens_after if sums[0] else 0
            sums[0] += 1
            if r.total_s > 0:
                e, t = r.tokens_after - before, r.total_s
                sums[1] += 1
                for k, x in enumerate((e, t, e * e, e * t, t * t), start=2):
                    sums[k] += x
        _, n, tokens, seconds, ee, et, tt = sums
        if n < 4 or tokens < MIN_SPEEDUP_TOKENS:
            return None
        rate = tokens / seconds
        residual = max(0.0, ee - 2 * rate * et + rate * rate * tt)  # sum of (e - rate * t)^2
        return (n / (n - 1) * residual) ** 0.5 / seconds / rate

    def speedup_spread(self) -> float | None:
        """One standard error of `speedup()` from the reply's own spread (the baseline's is not in it)."""
        sp, rel = self.speedup(), self.rate_spread()
        return None if sp is None or rel is None else sp * rel

    def speedup_words(self) -> str:
        """The measured speedup as people should read it: with its spread, or why there is none."""
        sp = self.speedup()
        if sp is None:
            return ""
        spread = self.speedup_spread()
        if spread is None:
            return f"too short for a speedup (under {MIN_SPEEDUP_TOKENS} tokens)"
        return f"{sp:.2f}× ±{spread:.2f} vs verifier alone"

    def paused_rounds(self) -> int:
        """Rounds at the end of the reply in which the cost model drafted nothing (it found no draft that pays
        on this machine; its plain-step probes included), while speculation was on. A pause goes on through
        the engine's tries (after a long run priced out it drafts TRY_ROUNDS rounds to see whether a draft
        pays again: DraftPlanner._pays) and through a last round the reply's budget left no room to draft in."""
        n = run = tries = 0  # rounds priced out in the pause going on; of them in a row; drafting rounds in a row
        for r in self.rounds:
            if not r.drafted and r.stop in ("cost", "probe"):
                n, run, tries = n + 1, run + 1, 0
            elif not r.drafted and r.stop == "max_tokens":
                continue
            elif r.drafted and n and tries < TRY_ROUNDS and (tries or run >= TRIED_AFTER):
                tries, run = tries + 1, 0
            else:
                n = run = tries = 0
        return n

    def summary(self) -> str:
        """One line for under the bubble."""
        s = self.get_stats()
        parts: list[str] = []
        n = s.new_tokens if s else sum(1 for t in self.tokens if t.in_reply)
        parts.append(f"{n} tokens")
        tps = s.tokens_per_s if s else self.running_tps()
        if tps:
            parts.append(f"{tps:.1f} tok/s")
        if s and s.drafted:
            parts.append(f"acceptance {s.acceptance_rate:.0%}")
            parts.append(f"{s.mean_accepted_length:.2f} tokens/call")
            parts.append(f"{s.accepted}/{s.drafted} drafted tokens accepted")  # the counts, as LM Studio gives them
        elif self.all_plain:  # as the graphs' headline says it: a reply the cost model priced out was not "off"
            parts.append("speculation paused: drafts do not pay here" if self.paused_rounds() else "speculation off")
        copied = sum(r.copied for r in self.rounds)
        if copied and n:  # a repeated prompt's reply copies the earlier one: its speed says little about drafting
            parts.append(f"{copied / n:.0%} of it copied from earlier text ({copied}/{n} tokens, prompt lookup)")
        mixed = mixed_words(self)
        if mixed:  # its tokens/s averages decoding with and without speculation: no one speedup
            parts.append(mixed)
        elif self.speedup() is not None and (self.speculative or self.paused_rounds()):
            # A reply the cost model priced out still ran with speculation on: what that cost (or not) is its figure.
            words = self.speedup_words()
            parts.append(words + (f" ({self.baseline_note})" if self.baseline_note and "±" in words else ""))
        elif self.speculative and self.baseline_note and not self.baseline_tps:
            parts.append(self.baseline_note)  # no like-for-like baseline yet: said, not a ratio against another
        if self.stop_reason and self.stop_reason not in ("eos", "stop_string"):
            parts.append({"max_tokens": "stopped at max tokens", "context": "context full",
                          "cancelled": "stopped", "error": "error"}.get(self.stop_reason, self.stop_reason))
        return " · ".join(parts)

    # ---- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ReplyTrace:
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in data.items() if k in known}
        tok_names = {f.name for f in fields(TokenRecord)}
        round_names = {f.name for f in fields(RoundRecord)}
        d["tokens"] = [
            TokenRecord(**{**{k: v for k, v in t.items() if k in tok_names},
                           "alternatives": [(a[0], float(a[1])) for a in t.get("alternatives", [])]})
            for t in data.get("tokens", [])
        ]
        d["rounds"] = [RoundRecord(**{k: v for k, v in r.items() if k in round_names})
                       for r in data.get("rounds", [])]
        return cls(**d)


STATE_DESCRIPTIONS = {
    TokenState.ACCEPTED.value: "drafted and accepted by the verifier",
    TokenState.REJECTED.value: "drafted and rejected by the verifier (not part of the reply)",
    TokenState.CORRECTED.value: "the verifier's correction, replacing the first rejected draft token",
    TokenState.BONUS.value: "the verifier's extra token after a fully accepted round",
    TokenState.PLAIN.value: "decoded by the verifier alone",
}
