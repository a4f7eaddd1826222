"""What checking draft tokens costs on this machine, measured while the engine runs, and how large a draft
tree pays best.

Leviathan et al.'s speedup formula assumes a verifier pass over k new tokens costs one decoding step. On a
GPU that holds for small k; on a CPU it does not (docs/performance.md, "Checking k tokens on a CPU": from
about one to several plain steps, by CPU and weight format), so the
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


class VerifyCost:
    """Seconds of a verifier pass by the number of tokens it fed (1 = a plain decoding step).

    Each row count keeps its last few timings and reads their median: one pass slowed by other work on the
    machine must not decide the next rounds' tree sizes. A row count timed fewer than SETTLED times reads no
    more than the guess from below, so that a size is not written off after one unlucky pass. Timings older
    than MAX_AGE passes are forgotten: a size that measured slow while the machine was busy, and so was
    never chosen again, is guessed from its neighbours once more, tried, and measured afresh. Until then, for
    SHAPE_AGE passes, a size once settled reads its last share of the plain step (`_shape`): on quantised
    weights a check of k rows costs nearly k plain steps whatever the load, and a size forgotten after
    MAX_AGE plain steps and guessed from below at a few per cent a row made a draft that could never pay
    look worth probing every 16 rounds (docs/log/2026-12.md, session 38)."""

    WINDOW = 9
    SETTLED = 3
    MAX_AGE = 256
    SHAPE_AGE = 4 * MAX_AGE
    # A size with fewer than SETTLED timings of the last MAX_AGE passes is `stale`: the engine then times the
    # plain step again (the reference every tree is weighed against), so that it follows the machine's
    # current load. One timing alone is not trusted: one slow pass can make every tree look free
    # (docs/performance.md, "Measurements behind comments in the code").

    def __init__(self, seconds: dict[int, float] | None = None):
        self._samples: dict[int, deque[tuple[int, float]]] = {}  # rows -> (pass number, seconds)
        self._passes = 0
        self._given = dict(seconds or {})  # given figures count as SETTLED timings that never age
        self._medians: dict[int, float] | None = None  # `seconds`, until the next observation
        self._with_shape: dict[int, float] | None = None  # `_curve()`, until the next observation
        self._from_shape: set[int] = set()  # the sizes `_curve()` reads from their shape
        self.recalled = False  # whether an earlier engine's figures were recalled (recall)
        self._shape: dict[int, tuple[int, float]] = {}  # rows -> (its last timing's pass, median / plain step's)

    def __repr__(self) -> str:
        return f"VerifyCost({self.seconds})"

    def observe(self, rows: int, seconds: float) -> None:
        if rows < 1 or seconds <= 0:
            return
        self._passes += 1
        self._samples.setdefault(rows, deque(maxlen=self.WINDOW)).append((self._passes, seconds))
        self._medians = self._with_shape = None
        self._reshape((rows,))

    def _reshape(self, sizes) -> None:
        """Keep the share of the plain step that each of `sizes` costs, where it and the plain step are settled."""
        plain = self._timings(1)
        if len(plain) < self.SETTLED:
            return
        for size in sizes:
            timings = self._timings(size)
            if size > 1 and len(timings) >= self.SETTLED:
                newest = self._samples[size][-1][0] if self._samples.get(size) else self._passes
                self._shape[size] = (newest, statistics.median(timings) / statistics.median(plain))

    def recall(self, seconds: dict[int, float]) -> None:
        """Timings an earlier engine left on this machine (loading/cost_memory.py): each figure counts as SETTLED
        timings taken now, so that its size is not probed again, and ages and gives way to fresh timings as
        those do (WINDOW, MAX_AGE)."""
        self.recalled = True
        for rows, took in seconds.items():
            if rows >= 1 and took > 0:
                window = self._samples.setdefault(rows, deque(maxlen=self.WINDOW))
                window.extend([(self._passes, took)] * self.SETTLED)
        self._medians = self._with_shape = None
        self._reshape(list(self._samples))

    @property
    def passes(self) -> int:
        """Verifier passes timed so far."""
        return self._passes

    def settled(self) -> dict[int, float]:
        """The figures worth keeping for the next engine: `seconds` of each row count timed at least SETTLED
        times lately."""
        return {rows: took for rows, took in self.seconds.items() if not self.stale(rows)}

    def _shaped(self, plain_s: float) -> dict[int, float]:
        """Each size with a settled shape of the last SHAPE_AGE passes, at a plain step of `plain_s`."""
        return {rows: plain_s * ratio for rows, (when, ratio) in self._shape.items()
                if when > self._passes - self.SHAPE_AGE}

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

    def _curve(self) -> dict[int, float]:
        """`seconds`, where each size with too few recent timings but a settled shape reads that shape at the
        plain step's figure now, made non-decreasing in rows as `seconds` is."""
        seconds = self.seconds
        if self._with_shape is None:
            shaped = {rows: took for rows, took in self._shaped(seconds[1]).items()
                      if rows not in seconds or self.stale(rows)} if 1 in seconds else {}
            known = {**seconds, **shaped}
            rows_known = sorted(known)
            weights = [self.SETTLED if rows in shaped else len(self._timings(rows)) for rows in rows_known]
            self._with_shape = dict(zip(rows_known, _non_decreasing([known[rows] for rows in rows_known], weights)))
            self._from_shape = set(shaped)
        return self._with_shape

    def estimate(self, rows: int, cautious: bool = False) -> float | None:
        """Measured, else interpolated between measured sizes, else guessed from the nearest one below (or,
        with none below, from the nearest above, optimistically: a size nobody measured gets tried).
        `cautious`: a size timed fewer than SETTLED times reads its own timings, not the guess from below when
        that is cheaper, for a question where optimism costs (whether a draft is worth probing at all)."""
        seconds = self._curve()
        below = max((r for r in seconds if r < rows), default=None)
        guess = seconds[below] * (1 + _GUESSED_SLOPE * (rows - below)) if below is not None else None
        if rows in seconds:
            unsettled = self.stale(rows) and rows not in self._from_shape and guess is not None and not cautious
            return min(seconds[rows], guess) if unsettled else seconds[rows]  # type: ignore[type-var]
        above = min((r for r in seconds if r > rows), default=None)
        if below is not None and above is not None:
            # Between the sizes' own estimates, not their raw medians: one slow pass at an unsettled size
            # above must not make the sizes below it look dearer than it (one slow timing at 5 rows had made
            # 4 rows read dearer than 5, and trees stopped growing there).
            low, high = self.estimate(below, cautious), self.estimate(above, cautious)
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


class Calibration:
    """How often a drafted token turned out right, given that the path above it was, by the probability the
    draft gave it: the draft's confidence mapped to the verifier's measured agreement.

    EAGLE-2 (Li et al. 2024) grows trees by the draft's confidence because it tracks acceptance. It tracks
    it, but rarely at face value, and not the same way in every pair or text: a 0.5B draft of a 1.5B coder
    gives tokens 0.7 that its verifier takes 9 times in 10, a head outside its training text is sure and
    wrong. A single factor over a whole tree cannot fix a slope (its siblings, at 0.2, are taken as rarely
    as they say), so the map is learned per band of confidence (BANDS), from every checked node whose parent
    was accepted: a fair trial of "given the path, is this token the verifier's". Recent rounds decide (each
    older one counts DECAY times less); each band starts at its own midpoint with PRIOR_WEIGHT trials, so an
    untried draft is taken at its word; the map is made non-decreasing (a surer token is never worth less).
    Between band midpoints it interpolates linearly, from 0 at confidence 0."""

    BANDS = 10  # equal bands of the draft's probability
    PRIOR_WEIGHT = 4.0
    DECAY = 0.98  # per round: the last ~50 rounds weigh most

    def __init__(self) -> None:
        self.tried = [0.0] * self.BANDS
        self.right = [0.0] * self.BANDS
        self._table: list[float] | None = None

    @classmethod
    def _band(cls, prob: float) -> int:
        return min(cls.BANDS - 1, max(0, int(prob * cls.BANDS)))

    @classmethod
    def _midpoint(cls, band: int) -> float:
        return (band + 0.5) / cls.BANDS

    def observe(self, probs: Sequence[float], accepted: Sequence[bool]) -> None:
        """One round's fair trials: the draft's probability of each token, and whether the verifier took it."""
        self.tried = [n * self.DECAY for n in self.tried]
        self.right = [n * self.DECAY for n in self.right]
        for prob, taken in zip(probs, accepted):
            band = self._band(prob)
            self.tried[band] += 1
            self.right[band] += taken
        self._table = None

    @property
    def table(self) -> list[float]:
        """The agreement at each band's midpoint."""
        if self._table is None:
            rates = [(right + self._midpoint(b) * self.PRIOR_WEIGHT) / (tried + self.PRIOR_WEIGHT)
                     for b, (tried, right) in enumerate(zip(self.tried, self.right))]
            self._table = _non_decreasing(rates, [tried + self.PRIOR_WEIGHT for tried in self.tried])
        return self._table

    def __call__(self, prob: float) -> float:
        """The measured chance that a token the draft gives `prob` is right, given its path was."""
        table = self.table
        position = prob * self.BANDS - 0.5  # in band-midpoint units: band b's midpoint sits at b
        if position <= 0:
            return table[0] * max(0.0, prob) / self._midpoint(0)
        if position >= self.BANDS - 1:
            return min(1.0, table[-1] + (prob - self._midpoint(self.BANDS - 1)))
        low = int(position)
        share = position - low
        return table[low] + share * (table[low + 1] - table[low])


@dataclass
class TreeSizer:
    """Chooses how far a best-first tree grows and how many of its nodes the verifier checks, to maximise
    expected tokens per second: (1 + sum of the kept nodes' values x calibration) / (verify cost of those
    rows + drafting time).

    A node's value is the chance that its whole path is right: the draft's probabilities down the path, each
    read through `confidence` (what such a probability has meant for this verifier lately, Calibration), so
    the sum is the expected number of accepted tokens. `calibration` scales that sum by how many tokens the
    kept trees really yielded against what was expected (what the map by bands leaves over).

    Drafting is paid per expansion (one draft step that scores all of a node's children), not per node: a
    sibling of a node already in the tree costs only its verifier row. Once a tree is grown, its drafting
    is spent whatever is kept, so pruning it weighs the rows alone."""

    cost: VerifyCost = field(default_factory=VerifyCost)
    draft_per_expansion: float = 0.0  # the drafting time per expansion (observe_draft)
    draft_timings: deque[float] = field(default_factory=lambda: deque(maxlen=VerifyCost.WINDOW))
    confidence: Calibration = field(default_factory=Calibration)
    expected: float = 0.0  # sums over recent rounds, each older round counting DECAY times less: what the
    accepted: float = 0.0  # draft expected to be accepted in the trees checked, and what was

    # A draft's confidence means more in some texts than in others (a head trained on English replies is as
    # sure of itself in French, and mostly wrong): recent rounds decide, so that a reply where the draft
    # fails stops paying for rows within a few rounds, and one where it does well gets trusted again.
    DECAY = 0.95  # per round: the last ~20 rounds weigh most
    # Drafting must beat a plain step by this much to be chosen: a round that drafts also pays what the model of
    # its cost leaves out (the draft's bookkeeping, the extra rows' logits), so a predicted tie loses; on the
    # embedded pair over its quantised verifier, rounds predicted to gain a few per cent made replies ~10 % slower.
    MARGIN = 0.05

    @property
    def calibration(self) -> float:
        # Start trusting the draft; a few rounds of evidence then dominate the prior of 4 expected tokens.
        return (self.accepted + 4.0) / (self.expected + 4.0)

    def calibrated(self, prob: float) -> float:
        """The chance that a token the draft gives `prob` is right, given its path was (Calibration)."""
        return self.confidence(prob)

    def forget_draft(self) -> None:
        """Another draft: its time per expansion and its calibration are learned afresh."""
        self.draft_per_expansion, self.expected, self.accepted = 0.0, 0.0, 0.0
        self.draft_timings.clear()
        self.confidence = Calibration()

    def best_size(self, values: Sequence[float], spent_s: float = 0.0, extra_rows: int = 1) -> int:
        """How many of the nodes (best first) to check, drafting having taken `spent_s` seconds.
        `extra_rows`: committed tokens fed with them (1 for the last committed token, 0 when the verifier
        already read it)."""
        plain = self.cost.estimate(max(1, extra_rows))
        if plain is None:
            return len(values)  # nothing measured yet: check them all, and measure
        best, best_rate = 0, (1.0 + self.MARGIN) / (plain + spent_s)
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
        best_rate = max([(1.0 + self.MARGIN) / (plain + spent), *self._rates(values, spent, extra_rows)])
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

    def best_length(self, rates: Sequence[float], gamma: int, extra_rows: int = 1,
                    per_token_s: float | None = None) -> int:
        """How many tokens a chain should draft this round (0 to `gamma`), to maximise expected tokens per
        second: (1 + sum over k of rates[0] x ... x rates[k-1]) / (verify cost of k + extra rows + k drafting
        steps). `rates[i]`: the chance that the token at position i is accepted when all before it were
        (PositionRecord). Nothing measured yet: `gamma`, so that the sizes get timed. `per_token_s`: the
        drafting time per token to assume (default: draft_per_expansion as measured)."""
        plain = self.cost.estimate(max(1, extra_rows))
        if plain is None:
            return gamma
        best, best_rate = 0, (1.0 + self.MARGIN) / plain
        expected, chance = 1.0, 1.0
        for k in range(1, gamma + 1):
            chance *= rates[min(k - 1, len(rates) - 1)]
            expected += chance
            per_token = self.draft_per_expansion if per_token_s is None else per_token_s
            rate = expected / (self._verify_s(extra_rows, k) + k * per_token)
            if rate > best_rate:
                best, best_rate = k, rate
        return best

    def observe_draft(self, expansions: int, draft_s: float) -> None:
        """A round's drafting time. The cost per expansion is the median of the last few rounds', as a
        verifier pass's is (VerifyCost), and while fewer than SETTLED rounds are timed, the fastest of them:
        a draft's first steps are slow (caches and kernels warming; ~1 s in the app's first reply) and must
        not price it out before it has been timed warm."""
        if expansions:
            self.draft_timings.append(draft_s / expansions)
            timings = self.draft_timings
            self.draft_per_expansion = statistics.median(timings) if self.draft_settled else min(timings)

    @property
    def draft_settled(self) -> bool:
        """Whether the draft has been timed often enough for its cost to price it out."""
        return len(self.draft_timings) >= VerifyCost.SETTLED

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
    back to the prior (the planner sets it to what this drafter usually achieves, UsualRecord): a drafter priced
    out is tried again after some 10-20 rounds, not every few (on a 1.5B verifier a wrong 4-token copy can cost a
    second plain step: docs/log/2026-12.md, "A real pair")."""

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


class UsualRecord(PositionRecord):
    """How often a drafter's main-line tokens were accepted, by position, over many rounds (each older one counting
    DECAY times less: the last ~200 weigh most), from a prior worth PRIOR_WEIGHT rounds: what this pair usually
    achieves. A priced-out position record drifts back to these rates, not to prompt lookup's, and the next engine
    over the same pair here starts from them (DraftPlanner, loading/cost_memory.py). A 0.5B draft of its 1.5B
    verifier has its first token accepted about 85 % of the time; after a first prompt it got wrong, a record
    drifting back to 0.5 kept it priced out for two replies (docs/log/2026-12.md, session 43)."""

    DECAY = 0.995
    PRIOR_WEIGHT = 8.0

    @classmethod
    def starting_from(cls, rates: Sequence[float]) -> UsualRecord:
        """A record whose prior is `rates` (as many positions as PositionRecord's prior: the last one repeated, or
        the rest dropped)."""
        slots = len(PositionRecord.PRIOR)
        prior = tuple(rates[:slots]) + (rates[-1],) * (slots - len(rates))
        return cls(prior)

    @property
    def observed(self) -> bool:
        return self.tried[0] > 0

