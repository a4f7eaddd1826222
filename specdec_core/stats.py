"""Running figures of a reply, each defined once here (the README repeats these definitions).

- acceptance rate      = accepted draft tokens / draft tokens the verifier checked
- mean accepted length = tokens emitted per verifier call (accepted + the correction or bonus)
- per-position acceptance[i] = accepted at draft position i / drafted at position i
- tokens/s             = new tokens / decode time (prefill excluded; it is reported apart)
- c                    = draft time per drafted token / verifier time per call
- predicted speedup    = tokens per call x the plain step's seconds / the mean round's seconds, with the plain
                         step (one verifier pass over one token) as this machine's cost model measured it during
                         the reply; where it is unknown, the textbook (1 - a^(g+1)) / ((1 - a)(g c + 1)),
                         Leviathan et al. 2023, eq. 1 and thm 3.8, with a the acceptance rate, g the mean
                         draft length and c as above. The textbook assumes a pass over k tokens costs one step,
                         which a CPU does not give (checking 5 tokens of a 1.5B verifier costs more than 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


def expected_tokens_per_call(alpha: float, gamma: float) -> float:
    """E[tokens per verifier call] = (1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al. eq. 1)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)


def predicted_speedup(alpha: float, gamma: float, c: float) -> float:
    """Walltime improvement over the verifier alone: expected tokens per call / (gamma c + 1)."""
    return expected_tokens_per_call(alpha, gamma) / (gamma * c + 1.0)


def round_emitted(n_accepted: int, ended_on_accepted: bool) -> int:
    """Reply tokens one verified round added: its accepted drafts plus the verifier's correction, bonus or plain
    token, unless the round ended on an accepted end-of-sequence draft (then that draft was the last token)."""
    return n_accepted + (not ended_on_accepted)


@dataclass(frozen=True)
class Stats:
    new_tokens: int = 0
    rounds: int = 0  # verifier calls during decoding
    drafted: int = 0  # draft tokens the verifier checked
    accepted: int = 0
    acceptance_rate: float = 0.0
    mean_accepted_length: float = 0.0  # tokens emitted per verifier call
    per_position_acceptance: tuple[float, ...] = ()
    accepted_length_histogram: tuple[int, ...] = ()  # rounds that accepted 0, 1, 2, ... tokens
    prompt_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tokens_per_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    hidden_draft_s: float = 0.0  # drafting done beside the prefill that no round waited for (not in decode_s)
    c: float = 0.0
    mean_gamma: float = 0.0  # mean draft length per round
    predicted_speedup: float = 1.0

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class StatsAccumulator:
    """The one acceptance tally. Every round enters it one way, `add_verified`: the engine's own tally and a
    consumer's of the event stream through each RoundVerified event (events.RoundVerified.add_to), a saved
    trace through its records. Tallies merge (`a + b`, `merge`), so the figures of many replies are those of
    their summed tallies. `snapshot()` freezes it."""

    prompt_tokens: int = 0
    prefill_s: float = 0.0
    new_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    hidden_draft_s: float = 0.0  # drafting done during the prefill, not waited for (events.RoundVerified)
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)
    plain_step_s: float = 0.0  # one plain verifier step here, as the engine's cost model measured it (0: unknown)

    def _add(self, *, drafted: int, accepted: int, emitted: int, draft_s: float, verify_s: float,
             overhead_s: float, positions: int | None = None, hidden_draft_s: float = 0.0) -> None:
        """`positions`: draft positions the round had (a tree's depth), when not `drafted` (a chain's length);
        `hidden_draft_s`: drafting the round did not wait for (not decode time, but the draft's cost: `c`)."""
        self.rounds += 1
        self.hidden_draft_s += hidden_draft_s
        self.drafted += drafted
        self.accepted += accepted
        self.new_tokens += emitted
        self.draft_s += draft_s
        self.verify_s += verify_s
        self.overhead_s += overhead_s
        if drafted:
            positions = drafted if positions is None else positions
            while len(self.drafted_at) < positions:
                self.drafted_at.append(0)
                self.accepted_at.append(0)
            for i in range(positions):
                self.drafted_at[i] += 1
                if i < accepted:
                    self.accepted_at[i] += 1
            self.accepted_lengths.append(accepted)

    def add_verified(self, *, n_accepted: int, ended_on_accepted: bool, mainline: int, tree_nodes: int,
                     draft_s: float, verify_s: float, overhead_s: float, hidden_draft_s: float = 0.0) -> None:
        """Fold one verified round as its consumers see it (an event, or a trace's saved record): the one rule
        every figure the app, the CLI and the benches show is counted by.

        `mainline`: the round's chain of drafts (a tree's: its main line); `tree_nodes`: a tree's nodes (0: a
        chain). A tree round checked every node, so all of them count as drafted; its draft positions are
        those of its main line."""
        drafted, positions = (tree_nodes, mainline) if tree_nodes else (mainline, None)
        self._add(drafted=drafted, accepted=n_accepted, emitted=round_emitted(n_accepted, ended_on_accepted),
                  draft_s=draft_s, verify_s=verify_s, overhead_s=overhead_s, positions=positions,
                  hidden_draft_s=hidden_draft_s)

    def accepted_length_histogram(self, bins: int = 0) -> tuple[int, ...]:
        """Drafting rounds by the draft tokens they accepted (entry n: the rounds that accepted n), at least
        `bins` entries long (a plot's axis that reaches the longest draft seen, beyond the longest accepted)."""
        hist = [0] * max(bins, max(self.accepted_lengths, default=-1) + 1)
        for n in self.accepted_lengths:
            hist[n] += 1
        return tuple(hist)

    @property
    def drafting_rounds(self) -> int:
        """Rounds that proposed at least one token (prompt lookup proposes none where it finds no match)."""
        return len(self.accepted_lengths)

    def merge(self, other: StatsAccumulator) -> StatsAccumulator:
        """A new tally holding both: counts and times add, per-position counts add element-wise."""
        width = max(len(self.drafted_at), len(other.drafted_at))

        def added(a: list[int], b: list[int]) -> list[int]:
            return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(width)]

        return StatsAccumulator(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens, prefill_s=self.prefill_s + other.prefill_s,
            new_tokens=self.new_tokens + other.new_tokens, rounds=self.rounds + other.rounds,
            drafted=self.drafted + other.drafted, accepted=self.accepted + other.accepted,
            draft_s=self.draft_s + other.draft_s, verify_s=self.verify_s + other.verify_s,
            overhead_s=self.overhead_s + other.overhead_s, hidden_draft_s=self.hidden_draft_s + other.hidden_draft_s,
            drafted_at=added(self.drafted_at, other.drafted_at), accepted_at=added(self.accepted_at, other.accepted_at),
            accepted_lengths=self.accepted_lengths + other.accepted_lengths,
            plain_step_s=_weighted(self.plain_step_s, self.rounds, other.plain_step_s, other.rounds))

    __add__ = merge

    @classmethod
    def total(cls, tallies: Iterable[StatsAccumulator]) -> StatsAccumulator:
        """All the tallies merged into one (an empty tally for none)."""
        out = cls()
        for tally in tallies:
            out = out.merge(tally)
        return out

    def snapshot(self) -> Stats:
        decode_s = self.draft_s + self.verify_s + self.overhead_s
        alpha = self.accepted / self.drafted if self.drafted else 0.0
        drafting_rounds = len(self.accepted_lengths)
        mean_gamma = self.drafted / drafting_rounds if drafting_rounds else 0.0
        verify_per_call = self.verify_s / self.rounds if self.rounds else 0.0
        drafting_s = self.draft_s + self.hidden_draft_s  # the draft's whole cost, drafted ahead or not
        c = (drafting_s / self.drafted) / verify_per_call if self.drafted and verify_per_call > 0 else 0.0
        return Stats(
            new_tokens=self.new_tokens,
            rounds=self.rounds,
            drafted=self.drafted,
            accepted=self.accepted,
            acceptance_rate=alpha,
            mean_accepted_length=self.new_tokens / self.rounds if self.rounds else 0.0,
            per_position_acceptance=tuple(a / d for a, d in zip(self.accepted_at, self.drafted_at)),
            accepted_length_histogram=self.accepted_length_histogram(),
            prompt_tokens=self.prompt_tokens,
            prefill_s=self.prefill_s,
            decode_s=decode_s,
            tokens_per_s=self.new_tokens / decode_s if decode_s > 0 else 0.0,
            draft_s=self.draft_s,
            verify_s=self.verify_s,
            overhead_s=self.overhead_s,
            hidden_draft_s=self.hidden_draft_s,
            c=c,
            mean_gamma=mean_gamma,
            predicted_speedup=(self.new_tokens * self.plain_step_s / decode_s
                               if drafting_rounds and self.plain_step_s > 0 and decode_s > 0
                               else predicted_speedup(alpha, mean_gamma, c) if drafting_rounds else 1.0),
        )


def _weighted(a: float, a_weight: int, b: float, b_weight: int) -> float:
    """The mean of the known (non-zero) of a and b, weighted."""
    known = [(value, weight) for value, weight in ((a, a_weight), (b, b_weight)) if value > 0 and weight > 0]
    total = sum(weight for _, weight in known)
    return sum(value * weight for value, weight in known) / total if total else 0.0
