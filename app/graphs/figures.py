"""One reply's rounds as the panels read them: growing buffers (numpy), the engine's own tally folded from the
trace's rounds (specdec_core/stats.py), and the cost model's reading of its verifier passes. Qt-free.

Fed the way pyqtgraph's scrolling-plot examples are: `copy_rounds` appends only the rounds that arrived since
the last call, so a streaming reply costs a few appends per tick, never a rebuild.
"""

from __future__ import annotations

import numpy as np

from app.speedup import nice_ceiling
from app.trace import ReplyTrace, RoundRecord
from specdec_core.stats import StatsAccumulator
from specdec_core.verification.cost import VerifyCost

MIN_RATE_S = 0.02  # engine seconds before a running tokens/s is drawn


class Buffer:
    """A growing float array: amortised O(1) append, a view of the filled part for setData."""

    def __init__(self, capacity: int = 256) -> None:
        self._a = np.zeros(capacity)
        self.n = 0

    def append(self, x: float) -> None:
        if self.n == len(self._a):
            self._a = np.concatenate([self._a, np.zeros(len(self._a))])
        self._a[self.n] = x
        self.n += 1

    def clear(self) -> None:
        self.n = 0

    @property
    def data(self) -> np.ndarray:
        return self._a[: self.n]


def live_tps(trace: ReplyTrace | None) -> float:
    """The one tokens/s figure of a reply, shown alike in the graphs' header and the bubble's footer:
    the engine's final figure once finished, else reply tokens per engine second so far."""
    if trace is None:
        return 0.0
    if trace.stats and trace.finished:
        return float(trace.stats.get("tokens_per_s") or 0.0)
    return trace.running_tps()


class ReplyFigures:
    """The shown reply's figures: what every panel draws from. `baseline_tps` is the verifier alone's
    tokens/s on this machine; `verify_s_per_token` one plain verifier step (both None until measured)."""

    def __init__(self, trace: ReplyTrace | None = None, baseline_tps: float | None = None,
                 verify_s_per_token: float | None = None) -> None:
        self.trace = trace
        self.baseline_tps = baseline_tps
        self.verify_s_per_token = verify_s_per_token
        self.n = 0  # rounds already copied into the buffers
        self.t = Buffer()  # engine seconds at each round's end
        self.tps = Buffer()  # running tokens/s (nan: too early to say)
        self.tps_round = Buffer()  # each round's own tokens/s
        self.drafted = Buffer()  # draft tokens checked (a tree round: every candidate)
        self.accepted = Buffer()
        self.rate = Buffer()  # running acceptance rate
        self.draft_ms = Buffer()
        self.verify_ms = Buffer()  # draft + verify, stacked
        self.total_ms = Buffer()
        self.rows = Buffer()  # positions each verifier pass fed (nan: none ran) ...
        self.pass_ms = Buffer()  # ... and what it took
        self.cost = VerifyCost()  # the cost model's reading of these passes, as the engine's sizer keeps it
        self.tally = StatsAccumulator()  # the engine's own tally, folded from the trace's rounds (stats.py)
        self.max_gamma = 0
        self.hist_bins = 0  # the histogram's x axis: up to the largest γ (or draft) seen
        self.hist: tuple[int, ...] = ()  # the tally's rounds by accepted length, that long (read per new round)

    def copy_rounds(self) -> list[RoundRecord]:
        """Append the rounds that arrived since the last call; returns them (none: nothing new)."""
        trace = self.trace
        if trace is None or self.n >= len(trace.rounds):
            return []
        new = trace.rounds[self.n:]
        for r in new:
            self._append(r)
        self.hist = self.tally.accepted_length_histogram(self.hist_bins)
        self.n = len(trace.rounds)
        return new

    def _append(self, r: RoundRecord) -> None:
        self.t.append(r.t_end)
        # A rate over a few milliseconds is noise (the first token comes from the prefill's logits
        # and costs a round almost nothing): leave those points out rather than spike the axis.
        self.tps.append(r.tokens_after / r.t_end if r.t_end >= MIN_RATE_S else np.nan)
        self.tps_round.append(r.emitted / r.total_s if r.t_end >= MIN_RATE_S and r.total_s > 0 else np.nan)
        self.drafted.append(r.checked)  # a tree round: every candidate the verifier checked
        self.accepted.append(r.accepted)
        r.fold_into(self.tally)
        self.max_gamma = max(self.max_gamma, r.gamma if r.drafted else 0, r.drafted)
        self.rate.append(self.tally.accepted / self.tally.drafted if self.tally.drafted else np.nan)
        self.draft_ms.append(r.draft_s * 1e3)
        self.verify_ms.append((r.draft_s + r.verify_s) * 1e3)
        self.total_ms.append(r.total_s * 1e3)
        rows = r.rows or (r.checked + 1 if r.index else 0)  # a trace saved before passes were counted
        self.rows.append(float(rows) if rows else np.nan)
        self.pass_ms.append(r.verify_s * 1e3 if rows else np.nan)
        self.cost.observe(rows, r.verify_s)
        if r.checked:
            self.hist_bins = max(self.hist_bins, r.gamma + 1, r.accepted + 1, r.drafted + 1)

    def rounds_x(self) -> tuple[float, float]:
        """The x range of the per-round plots: round i spans [i + 0.5, i + 1.5], at least ten rounds."""
        return (0.5, nice_ceiling(max(self.t.n, 10)) + 0.5)

    def rounds_so_far(self) -> list[RoundRecord]:
        return self.trace.rounds[: self.n] if self.trace is not None else []

    @property
    def alpha(self) -> float:
        return self.tally.snapshot().acceptance_rate

    @property
    def c(self) -> float:
        return self.tally.snapshot().c

    @property
    def mean_gamma(self) -> float:
        return self.tally.snapshot().mean_gamma

    @property
    def current_tps(self) -> float:
        return live_tps(self.trace)

    @property
    def measured_speedup(self) -> float | None:
        tps = self.current_tps
        if not self.baseline_tps or not tps:
            return None
        return tps / self.baseline_tps
