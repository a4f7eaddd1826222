"""What checking draft tokens costs on this machine, measured while the engine runs, and how large a draft
tree pays best.

Leviathan et al.'s speedup formula assumes a verifier pass over k new tokens costs one decoding step. On a
GPU that holds for small k; on a CPU it does not (docs/performance.md measures 1.0-1.7x for k = 2-6), so the
engine times every verifier pass by the number of tokens it fed, and picks each round's tree size from that
curve and the draft's confidence, never from a formula alone. Picking no node at all is allowed: when the
draft is unsure, a plain decoding step is the fastest choice.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

# Until a row count is measured its cost is guessed from the nearest measured one below it, rising by this
# fraction per extra row. Optimistic on purpose: a size that is never tried is never measured.
_GUESSED_SLOPE = 0.08
_SMOOTHING = 0.25  # weight of a new drafting time in its running mean


class VerifyCost:
    """Seconds of a verifier pass by the number of tokens it fed (1 = a plain decoding step).

    Each row count keeps its last few timings and reads their median: one pass slowed by other work on the
    machine must not decide the next rounds' tree sizes. A row count timed fewer than SETTLED times reads no
    more than the guess from below, so that a size is not written off after one unlucky pass. Timings older
    than MAX_AGE passes are forgotten: a size that measured slow while the machine was busy, and so was
    never chosen again, is guessed from its neighbours once more, tried, and measured afresh."""

    WINDOW = 9
    SETTLED = 3
    MAX_AGE = 256
    # A size with fewer than SETTLED timings of the last MAX_AGE passes is `stale`: the engine then times the
    # plain step again (the reference every tree is weighed against), so that it follows the machine's
    # current load. One timing alone is not trusted: one slow pass can make every tree look free
    # (docs/performance.md, "Measurements behind comments in the code").

    def __init__(self, seconds: dict[int, float] | None = None):
        self._samples: dict[int, deque[tuple[int, float]]] = {}  # rows -> (pass number, seconds)
        self._passes = 0
        self._given = dict(seconds or {})  # given figures count as SETTLED timings that never age
        self._medians: dict[int, float] | None = None  # `seconds`, until the next observation

    def __repr__(self) -> str:
        return f"VerifyCost({self.seconds})"

    def observe(self, rows: int, seconds: float) -> None:
        if rows < 1 or seconds <= 0:
            return
        self._passes += 1
        self._samples.setdefault(rows, deque(maxlen=self.WINDOW)).append((self._passes, seconds))
        self._medians = None

    def stale(self, rows: int) -> bool:
        """Whether `rows` has fewer than SETTLED timings of the last MAX_AGE passes (a given figure never
        goes stale)."""
        return rows not in self._given and len(self._timings(rows)) < self.SETTLED

    def _timings(self, rows: int) -> list[float]:
        """The row count's recent timings, with a given figure counted SETTLED times."""
        fresh = [s for n, s in self._samples.get(rows, ()) if n > self._passes - self.MAX_AGE]
        return [self._given[rows]] * self.SETTLED + fresh if rows in self._given else fresh

    @property
    def seconds(self) -> dict[int, float]:
        """The timing of each row count measured lately (or given): the medians, made non-decreasing in rows.

        A pass over more rows never costs less, so a median above a larger row count's is noise (a busy
        moment, few samples). Left alone, one such bump reads as a steep step that no node is worth paying
        for, and the trees stop growing at it. Neighbours that disagree are pooled into their mean weighted
        by how many timings each has (isotonic regression by pooling adjacent violators)."""
        if self._medians is None:
            rows_known = sorted({*self._samples, *self._given})
            timed = [(rows, t) for rows in rows_known if (t := self._timings(rows))]
            self._medians = dict(zip([rows for rows, _ in timed],
                                     _non_decreasing([statistics.median(t) for _, t in timed],
                                                     [len(t) for _, t in timed])))
        return self._medians

    def estimate(self, rows: int) -> float | None:
        """Measured, else interpolated between measured sizes, else guessed from the nearest one below (or,
        with none below, from the nearest above, optimistically: a size nobody measured gets tried)."""
        seconds = self.seconds
        below = max((r for r in seconds if r < rows), default=None)
        guess = seconds[below] * (1 + _GUESSED_SLOPE * (rows - below)) if below is not None else None
        if rows in seconds:
            unsettled = len(self._timings(rows)) < self.SETTLED and guess is not None
            return min(seconds[rows], guess) if unsettled else seconds[rows]  # type: ignore[type-var]
        above = min((r for r in seconds if r > rows), default=None)
        if below is not None and above is not None:
            # Between the sizes' own estimates, not their raw medians: one slow pass at an unsettled size
            # above must not make the sizes below it look dearer than it (5 rows timed once at 621 ms read
            # 434 ms, while 4 rows, interpolated from the raw 621, read 497: trees then stopped at 2 nodes).
            low, high = self.estimate(below), self.estimate(above)
            assert low is not None and high is not None
            share = (rows - below) / (above - below)
            return low + share * (high - low)
        if guess is not None:
            return guess
        return seconds[above] / (1 + _GUESSED_SLOPE * (above - rows)) if above is not None else None


def _non_decreasing(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The non-decreasing sequence nearest to `values` in weighted least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values, weights):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, weight, count = blocks.pop()
            last = blocks[-1]
            total = last[1] + weight
            blocks[-1] = [(last[0] * last[1] + mean * weight) / total, total, last[2] + count]
    return [mean for mean, _, count in blocks for _ in range(int(count))]


@dataclass
class TreeSizer:
    """Chooses how far a best-first tree grows and how many of its nodes the verifier checks, to maximise
    expected tokens per second: (1 + sum of the kept nodes' values x calibration) / (verify cost of those
    rows + drafting time).

    A node's value is the draft's probability that its whole path is right, so the sum is the draft's
    expectation of accepted tokens. Drafts are rarely calibrated; `calibration` scales that expectation
    by how many tokens the kept trees really yielded against what the draft expected.

    Drafting is paid per expansion (one draft step that scores all of a node's children), not per node: a
    sibling of a node already in the tree costs only its verifier row. Once a tree is grown, its drafting
    is spent whatever is kept, so pruning it weighs the rows alone."""

    cost: VerifyCost = field(default_factory=VerifyCost)
    draft_per_expansion: float = 0.0  # running mean of the drafting time per expansion
    expected: float = 0.0  # sums over recent rounds, each older round counting DECAY times less: what the
    accepted: float = 0.0  # draft expected to be accepted in the trees checked, and what was

    # A draft's confidence means more in some texts than in others (a head trained on English replies is as
    # sure of itself in French, and mostly wrong): recent rounds decide, so that a reply where the draft
    # fails stops paying for rows within a few rounds, and one where it does well gets trusted again.
    DECAY = 0.95  # per round: the last ~20 rounds weigh most

    @property
    def calibration(self) -> float:
        # Start trusting the draft; a few rounds of evidence then dominate the prior of 4 expected tokens.
        return (self.accepted + 4.0) / (self.expected + 4.0)

    def best_size(self, values: Sequence[float], spent_s: float = 0.0, extra_rows: int = 1) -> int:
        """How many of the nodes (best first) to check, drafting having taken `spent_s` seconds.
        `extra_rows`: committed tokens fed with them (1 for the last committed token, 0 when the verifier
        already read it)."""
        plain = self.cost.estimate(max(1, extra_rows))
        if plain is None:
            return len(values)  # nothing measured yet: check them all, and measure
        best, best_rate = 0, 1.0 / (plain + spent_s)
        for n, rate in enumerate(self._rates(values, spent_s, extra_rows), start=1):
            if rate > best_rate:
                best, best_rate = n, rate
        return best

    def least_value(self, values: Sequence[float], expansions: int = 0, more: int = 0,
                    extra_rows: int = 1) -> float:
        """The value a next node must have to raise the expected rate above the best that a prefix of
        `values` reaches after `expansions` expansions, when the node costs its row and `more` expansions
        (1 to score its children). For growing a tree: below this, growing further cannot pay.
        0 until costs are known."""
        plain = self.cost.estimate(max(1, extra_rows))
        if plain is None:
            return 0.0
        spent = expansions * self.draft_per_expansion
        best_rate = max([1.0 / (plain + spent), *self._rates(values, spent, extra_rows)])
        gained = 1.0 + sum(values) * self.calibration
        seconds = self._verify_s(extra_rows, len(values) + 1) + spent + more * self.draft_per_expansion
        return max(0.0, (best_rate * seconds - gained) / self.calibration)

    def _rates(self, values: Sequence[float], spent_s: float, extra_rows: int) -> list[float]:
        """Expected tokens per second of checking the first 1, 2, ... nodes."""
        rates, gained = [], 1.0
        for n, value in enumerate(values, start=1):
            gained += value * self.calibration
            rates.append(gained / (self._verify_s(extra_rows, n) + spent_s))
        return rates

    def _verify_s(self, extra_rows: int, nodes: int) -> float:
        seconds = self.cost.estimate(extra_rows + nodes)
        assert seconds is not None
        return seconds

    def best_length(self, rates: Sequence[float], gamma: int, extra_rows: int = 1) -> int:
        """How many tokens a chain should draft this round (0 to `gamma`), to maximise expected tokens per
        second: (1 + sum over k of rates[0] x ... x rates[k-1]) / (verify cost of k + extra rows + k drafting
        steps). `rates[i]`: the chance that the token at position i is accepted when all before it were
        (PositionRecord). Nothing measured yet: `gamma`, so that the sizes get timed."""
        plain = self.cost.estimate(max(1, extra_rows))
        if plain is None:
            return gamma
        best, best_rate = 0, 1.0 / plain
        expected, chance = 1.0, 1.0
        for k in range(1, gamma + 1):
            chance *= rates[min(k - 1, len(rates) - 1)]
            expected += chance
            rate = expected / (self._verify_s(extra_rows, k) + k * self.draft_per_expansion)
            if rate > best_rate:
                best, best_rate = k, rate
        return best

    def observe_draft(self, expansions: int, draft_s: float) -> None:
        if expansions:
            per_expansion = draft_s / expansions
            self.draft_per_expansion = per_expansion if not self.draft_per_expansion else \
                self.draft_per_expansion + _SMOOTHING * (per_expansion - self.draft_per_expansion)

    def observe(self, values: Sequence[float], accepted: int) -> None:
        """The verifier's verdict on a round's checked tree whose nodes had these values (none checked: a
        round that only ages the evidence, so that a draft priced out is eventually tried again)."""
        self.expected = self.expected * self.DECAY + sum(values)
        self.accepted = self.accepted * self.DECAY + accepted


class PositionRecord:
    """How often a chain's drafted token at position i was accepted, given that those before it were, over
    the recent rounds (each older round counts DECAY times less; a prior worth PRIOR_WEIGHT rounds).

    A chain's worth depends on the pair and the text (a copy of a quoted passage is right for long runs, a
    copy in a free answer rarely), so the engine sizes each round's chain from this record of the reply so
    far. A round priced out drafts nothing and only ages the record (AGING, slower than DECAY), which drifts
    back to the prior: a drafter priced out is tried again after some 10-20 rounds, not every few (on the
    1.5B verifier of docs/performance.md a wrong 4-token copy cost a second plain step)."""

    PRIOR = (0.5, 0.65, 0.8, 0.85)  # about prompt lookup's rates on the bundled prompts (trees.LOOKUP_ACCEPTANCE)
    PRIOR_WEIGHT = 2.0
    DECAY = 0.9
    AGING = 0.97

    def __init__(self, prior: Sequence[float] = PRIOR):
        self.prior = tuple(prior)
        self.tried = [0.0] * len(self.prior)  # rounds that reached position i (slots past the prior share the last)
        self.right = [0.0] * len(self.prior)

    def rates(self) -> tuple[float, ...]:
        return tuple((right + prior * self.PRIOR_WEIGHT) / (tried + self.PRIOR_WEIGHT)
                     for prior, tried, right in zip(self.prior, self.tried, self.right))

    def age(self, factor: float | None = None) -> None:
        factor = self.AGING if factor is None else factor
        self.tried = [n * factor for n in self.tried]
        self.right = [n * factor for n in self.right]

    def observe(self, drafted: int, accepted: int) -> None:
        """A round that drafted `drafted` tokens and had the first `accepted` of them accepted."""
        self.age(self.DECAY)
        if not drafted:
            return
        for position in range(min(drafted, accepted + 1)):
            slot = min(position, len(self.prior) - 1)
            self.tried[slot] += 1
            if position < accepted:
                self.right[slot] += 1
