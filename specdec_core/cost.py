"""What checking draft tokens costs on this machine, measured while the engine runs, and how large a draft
tree pays best.

Leviathan et al.'s speedup formula assumes a verifier pass over k new tokens costs one decoding step. On a
GPU that holds for small k; on a CPU it does not (docs/performance.md measures 1.0-1.7x for k = 2-6), so the
engine times every verifier pass by the number of tokens it fed, and picks each round's tree size from that
curve and the draft's confidence, never from a formula alone. Picking no node at all is allowed: when the
draft is unsure, a plain decoding step is the fastest choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Until a row count is measured its cost is guessed from the nearest measured one below it, rising by this
# fraction per extra row. Optimistic on purpose: a size that is never tried is never measured.
_GUESSED_SLOPE = 0.08
_SMOOTHING = 0.25  # weight of a new measurement in the running mean (timings drift with context length)


@dataclass
class VerifyCost:
    """Seconds of a verifier pass by the number of tokens it fed (1 = a plain decoding step)."""

    seconds: dict[int, float] = field(default_factory=dict)

    def observe(self, rows: int, seconds: float) -> None:
        if rows < 1 or seconds <= 0:
            return
        old = self.seconds.get(rows)
        self.seconds[rows] = seconds if old is None else old + _SMOOTHING * (seconds - old)

    def estimate(self, rows: int) -> float | None:
        """Measured, else interpolated between measured sizes, else guessed from the nearest one below."""
        if rows in self.seconds:
            return self.seconds[rows]
        below = max((r for r in self.seconds if r < rows), default=None)
        above = min((r for r in self.seconds if r > rows), default=None)
        if below is not None and above is not None:
            share = (rows - below) / (above - below)
            return self.seconds[below] + share * (self.seconds[above] - self.seconds[below])
        if below is not None:
            return self.seconds[below] * (1 + _GUESSED_SLOPE * (rows - below))
        if above is not None:
            return self.seconds[above]
        return None

    def ratios(self) -> dict[int, float]:
        """Measured cost of each row count over a plain step's (empty until a plain step is measured)."""
        plain = self.estimate(1)
        return {rows: s / plain for rows, s in sorted(self.seconds.items())} if plain else {}


@dataclass
class TreeSizer:
    """Chooses how many of a best-first tree's nodes the verifier checks, to maximise expected tokens per
    second: (1 + sum of the kept nodes' values x calibration) / (verify cost of those rows + draft time).

    A node's value is the draft's probability that its whole path is right, so the sum is the draft's
    expectation of accepted tokens. Drafts are rarely calibrated; `calibration` scales that expectation
    by how many tokens the kept trees really yielded against what the draft expected."""

    cost: VerifyCost = field(default_factory=VerifyCost)
    expected: float = 0.0  # running sums over checked trees: what the draft expected to be accepted ...
    accepted: float = 0.0  # ... and what was
    last_size: int = 0

    @property
    def calibration(self) -> float:
        # Start trusting the draft; a few rounds of evidence then dominate the prior of 4 expected tokens.
        return (self.accepted + 4.0) / (self.expected + 4.0)

    def best_size(self, values: Sequence[float], extra_rows: int, draft_s: float) -> int:
        """How many of the nodes (best first) to check. `extra_rows`: committed tokens fed with them (1 for the
        last committed token, 0 when the verifier already read it); `draft_s`: the time the tree took."""
        plain = self.cost.estimate(max(1, extra_rows))
        if plain is None:
            return len(values)  # nothing measured yet: check them all, and measure
        best, best_rate, gained = 0, 1.0 / plain, 1.0
        per_node_draft = draft_s / len(values) if values else 0.0
        for n, value in enumerate(values, start=1):
            gained += value * self.calibration
            seconds = self.cost.estimate(extra_rows + n)
            assert seconds is not None
            rate = gained / (seconds + per_node_draft * n)
            if rate > best_rate:
                best, best_rate = n, rate
        return best

    def observe(self, values: Sequence[float], accepted: int) -> None:
        """The verifier's verdict on a checked tree whose nodes had these values."""
        self.expected += sum(values)
        self.accepted += accepted
        self.last_size = len(values)

    def budget(self, cap: int) -> int:
        """Nodes to draft next round: a few more than were last worth checking, at most `cap`."""
        return min(cap, max(4, 2 * self.last_size + 2))
