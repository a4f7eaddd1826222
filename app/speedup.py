"""The figures behind "× vs verifier alone" and "theory vs practice", Qt-free.

A speedup shown to a room must compare like with like. `BaselineBook` keeps every verifier-alone
measurement the app makes (the calibration run after loading, each reply with speculation off, each
race's "off" lane) with the prompt length it ran at and whether the graphs were repainting meanwhile;
a reply is compared with the median of the samples closest to it in both respects. New samples are
added, never swapped in, so the baseline does not drift with the last reply, and `Baseline.how` says
in words what it is.

`MeasuredCosts` is what one reply's rounds say about this machine: the verifier's time to check k
draft tokens (the textbook formula assumes checking γ+1 tokens costs one decode step; on a CPU it
does not), the draft's time per token and each round's overhead. `practical_speedup` puts those into
the same expected-tokens-per-round numerator as the textbook `predicted_speedup`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from app.trace import MIN_SPEEDUP_TOKENS, ReplyTrace
from specdec_core.stats import expected_tokens_per_call

NEAR_TOKENS = 64  # prompts this close in length (or within half their length) count as "the same length"
MIN_PLAIN_STEPS = 4  # one-row passes a run needs before its verifier step time is read (step_s)
PACE_DEADBAND = 0.03  # a reply's pace this close to its baseline's counts as the same (the medians' own noise)


@dataclass(frozen=True)
class BaselineSample:
    tokens_per_s: float
    prompt_tokens: int
    source: str  # "calibration", "speculation-off reply", "race"
    graphs_live: bool  # could the window's repainting slow it (graphs repainting beside a reply decoded in the app)
    verify_s_per_token: float | None = None  # the verifier's own time per decode step, when known


@dataclass(frozen=True)
class Baseline:
    tokens_per_s: float
    how: str  # one sentence: what was measured, how many runs, at what prompt length and UI load
    samples: int
    short: str = ""  # a few words for the bubble's footer, e.g. "like for like: 3 runs"
    verify_s_per_token: float | None = None
    like_for_like: bool = False  # runs by the user (not only the load-time calibration) under the same UI load


class BaselineBook:
    """Every verifier-alone measurement of this session's verifier; `pick` chooses the comparable ones."""

    def __init__(self) -> None:
        self.samples: list[BaselineSample] = []

    def add(self, sample: BaselineSample) -> None:
        if sample.tokens_per_s > 0 and math.isfinite(sample.tokens_per_s):
            self.samples.append(sample)

    def clear(self) -> None:
        self.samples.clear()

    def pick(self, prompt_tokens: int, graphs_live: bool) -> Baseline | None:
        if not self.samples:
            return None
        same_load = [s for s in self.samples if s.graphs_live == graphs_live]
        pool = same_load or self.samples
        near = [s for s in pool if abs(s.prompt_tokens - prompt_tokens) <= max(NEAR_TOKENS, prompt_tokens // 2)]
        same_length = bool(near)
        if not near:  # nothing of a similar length: the three closest (described, never like for like)
            near = sorted(pool, key=lambda s: abs(s.prompt_tokens - prompt_tokens))[:3]
        # The calibration at load is the fallback until the user's own verifier-alone runs exist: it is timed once,
        # on a fixed prompt, in the app's process, as the models are first used, and it has read 10-20 % below
        # the replies' own runs minutes later on the same machine (docs/performance.md, the headline speedup).
        near = [s for s in near if s.source != "calibration"] or near
        tps = statistics.median(s.tokens_per_s for s in near)
        verify = [s.verify_s_per_token for s in near if s.verify_s_per_token]
        sources = sorted({s.source for s in near})
        lo, hi = min(s.prompt_tokens for s in near), max(s.prompt_tokens for s in near)
        length = f"{lo}-token prompt" if lo == hi else f"{lo}–{hi}-token prompts"
        runs = "1 run" if len(near) == 1 else f"median of {len(near)} runs"
        load = ("live graphs repainting" if near[0].graphs_live
                else "live graphs hidden (or decoded in a process apart from the window)")
        if not same_load:
            load += f" (no run yet with the graphs {'repainting' if graphs_live else 'hidden'})"
        how = f"verifier alone: {runs} ({', '.join(sources)}) at {length}, {load}"
        calibration_only = sources == ["calibration"]
        like = bool(same_load) and same_length and not calibration_only
        if calibration_only:
            short = "only the calibration at load so far: race for a like-for-like figure"
        elif not same_length:
            short = "vs runs at other prompt lengths"
        elif not same_load:
            short = f"vs runs with the live graphs {'repainting' if near[0].graphs_live else 'hidden'}"
        else:
            short = f"like for like: {'1 run' if len(near) == 1 else f'{len(near)} runs'}"
        return Baseline(tps, how, len(near), short=short,
                        verify_s_per_token=statistics.median(verify) if verify else None, like_for_like=like)


# ---- the machine's pace: a reply against its baseline, each measured at its own time ---------------------
def step_s(rounds) -> float | None:
    """The verifier's seconds per plain step over `rounds` (RoundRecords or RoundVerified events: anything with
    `rows` and `verify_s`): the median of their one-row passes, a decode step of the verifier alone. None with fewer
    than MIN_PLAIN_STEPS of them. (A plain run's first round runs no pass: it reuses the prefill's distribution.)"""
    plain = [r.verify_s for r in rounds if r.rows == 1 and r.verify_s > 0]
    return statistics.median(plain) if len(plain) >= MIN_PLAIN_STEPS else None


def pace(baseline_step_s: float | None, reply_step_s: float | None) -> float | None:
    """How much slower (> 1) or faster (< 1) the machine ran a reply than when its baseline was measured: the ratio
    of the verifier's plain-step times, the reply's own (rounds where nothing was drafted) over the baseline's. None
    when either is unknown or they are within PACE_DEADBAND.

    On a shared 2-core VM the same verifier-alone run reads ±15 % from one minute to the next; with a slow verifier
    the baseline and the reply lie a minute apart (the real pair: 3.0 and 3.9 tok/s after two loads, where the races
    right after read 3.5-3.6). A reply's plain steps are the verifier alone, timed during the reply itself."""
    if not baseline_step_s or not reply_step_s:
        return None
    ratio = reply_step_s / baseline_step_s
    return None if abs(ratio - 1) < PACE_DEADBAND else ratio


def pace_words(ratio: float, baseline_step_s: float, reply_step_s: float) -> str:
    """What the scaling of a baseline to a reply's pace says in a tooltip."""
    more = "slower" if ratio > 1 else "faster"
    return (f"scaled to this reply's pace: its verifier-alone steps took {reply_step_s * 1000:.0f} ms, "
            f"{abs(ratio - 1) * 100:.0f} % {more} than the baseline's {baseline_step_s * 1000:.0f} ms")


# ---- the race: speculation off against on, several times --------------------------------------------
RACE_PAIRS = 3  # a race runs the verifier alone and speculation this many times each
MIN_RATIO_TOKENS = MIN_SPEEDUP_TOKENS  # a race's replies shorter than this: its ratio shown plainly, no verdict colour


def race_key(speculate: bool, pair: int) -> str:
    """The lane key of one run of a race: "off" and "on" for the first pair, then "off 2", "on 2", ..."""
    return run_key("on" if speculate else "off", pair)


def race_order(pairs: int) -> list[tuple[str, bool]]:
    """(lane key, speculate) in the order a race runs them: off, on, then on, off, then off, on, ... Each pair
    runs in the other order from the one before, so a machine that warms up or gets busier during the race
    favours neither side."""
    order = []
    for pair in range(1, pairs + 1):
        sides = (False, True) if pair % 2 else (True, False)
        order += [(race_key(spec, pair), spec) for spec in sides]
    return order


@dataclass(frozen=True)
class RaceSpread:
    """What several off/on pairs of one race measured."""

    speedup: float  # the median of the pairs' speedups (on tokens/s ÷ off tokens/s)
    low: float  # the slowest and fastest pair's speedup
    high: float
    pairs: int
    tps_off: float  # median tokens/s of the verifier alone
    tps_on: float  # ... and with speculation
    tokens: int  # the shortest reply of the race

    @property
    def short_reply(self) -> bool:
        return self.tokens < MIN_RATIO_TOKENS

    def spread_words(self) -> str:
        if self.pairs == 1:
            return "1 run each"
        return f"median of {self.pairs} alternating runs each, {self.low:.2f}–{self.high:.2f}×"


def race_spread(pairs: list[tuple[float, float, int]]) -> RaceSpread | None:
    """Pairs of (off tokens/s, on tokens/s, the shorter reply's tokens) -> their median and spread (None: none
    finished)."""
    pairs = [p for p in pairs if p[0] > 0 and p[1] > 0]
    if not pairs:
        return None
    ratios = [on / off for off, on, _ in pairs]
    return RaceSpread(statistics.median(ratios), min(ratios), max(ratios), len(pairs),
                      statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
                      min(p[2] for p in pairs))


@dataclass(frozen=True)
class MeasuredCosts:
    """Seconds, measured in one reply's rounds (and the baseline for one plain decode step)."""

    token_s: float  # one token of the verifier alone, all in (1 / baseline tokens/s)
    verify1_s: float  # one plain verifier step (checking 0 drafts)
    verify_slope_s: float  # added verify time per drafted token checked
    draft_s_per_token: float
    overhead_s_per_round: float
    measured_verify: dict[int, float]  # drafted k -> mean verify seconds of the rounds that drafted k

    def verify_s(self, k: float) -> float:
        return self.verify1_s + self.verify_slope_s * k

    def verify_ratio(self, k: float) -> float:
        """What checking k drafts (k+1 positions) costs, in plain verifier steps (the textbook: 1)."""
        return self.verify_s(k) / self.verify1_s if self.verify1_s > 0 else 1.0


def _checked(r) -> int:
    """Draft tokens a round's verifier pass checked (RoundRecord.checked; plain records: their `drafted`)."""
    return int(getattr(r, "checked", r.drafted))


def measured_costs(rounds: list, baseline_tps: float | None, verify_s_per_token: float | None = None
                   ) -> MeasuredCosts | None:
    """Fit the verifier's cost of checking k drafts from a reply's rounds: verify(k) = v1 + b·k.

    v1 is the plain step: rounds that drafted nothing, else the baseline's measured verify time, else
    (assumed) the baseline's whole time per token. b is the least-squares slope through v1."""
    if not rounds or not baseline_tps:
        return None
    by_k: dict[int, list[float]] = {}
    for r in rounds:
        by_k.setdefault(_checked(r), []).append(float(r.verify_s))
    if not any(k for k in by_k):
        return None
    token_s = 1.0 / baseline_tps
    if 0 in by_k and len(by_k[0]) >= 3:
        v1 = statistics.median(by_k[0])
    elif verify_s_per_token:
        v1 = verify_s_per_token
    else:
        v1 = token_s
    means = {k: statistics.fmean(v) for k, v in by_k.items()}
    num = sum(len(by_k[k]) * k * (means[k] - v1) for k in means if k)
    den = sum(len(by_k[k]) * k * k for k in means if k)
    slope = max(0.0, num / den) if den else 0.0
    drafted = sum(_checked(r) for r in rounds)
    draft_s = sum(float(r.draft_s) + float(r.hidden_draft_s) for r in rounds)  # the draft's cost, ahead or not
    overhead = statistics.fmean(float(r.overhead_s) for r in rounds)
    return MeasuredCosts(token_s=token_s, verify1_s=v1, verify_slope_s=slope,
                         draft_s_per_token=draft_s / drafted if drafted else 0.0,
                         overhead_s_per_round=overhead, measured_verify=means)


def practical_speedup(alpha: float, gamma: float, costs: MeasuredCosts) -> float:
    """Expected tokens per round over the round's measured cost, against the verifier alone's time per
    token: E(α, γ) · t_token / (γ · t_draft + verify(γ) + overhead)."""
    round_s = gamma * costs.draft_s_per_token + costs.verify_s(gamma) + costs.overhead_s_per_round
    if round_s <= 0:
        return 0.0
    return expected_tokens_per_call(alpha, gamma) * costs.token_s / round_s


def tree_path_mass(tree: list[dict]) -> float:
    """Expected accepted drafts of one tree round: the sum over its nodes of the verifier's probability of the
    node's whole branch (each node's token given the path above it, multiplied down from the root). Siblings
    share their parent's mass, so the sum never counts more than the tree's deepest path can hold."""
    mass: list[float] = []
    for node in tree:
        parent = int(node["parent"])
        mass.append(float(node.get("target_prob") or 0.0) * (mass[parent] if 0 <= parent < len(mass) else 1.0))
    return sum(mass)


@dataclass(frozen=True)
class TreePrediction:
    """What a reply's own draft trees predict, against what it measured."""

    tokens_per_call: float  # expected: 1 + each tree's path mass (1 for a round without a tree)
    measured_tokens_per_call: float
    nodes: float  # mean candidates a tree round checked
    speedup: float | None  # expected tokens over the rounds' predicted time, against the verifier alone

    def words(self, measured: float | None) -> str:
        parts = [f"From its trees ({self.nodes:.1f} candidates a round), this reply should advance "
                 f"{self.tokens_per_call:.2f} tokens per verifier call (the verifier's probability of each "
                 f"candidate's branch, summed); it advanced {self.measured_tokens_per_call:.2f}"]
        if self.speedup is not None:
            parts.append(f"with the measured cost of checking that many candidates, that predicts "
                         f"{self.speedup:.2f}×" + (f", measured {measured:.2f}×" if measured is not None else ""))
        off = abs(self.tokens_per_call - self.measured_tokens_per_call) / max(self.measured_tokens_per_call, 1e-9)
        if off > 0.15:
            parts.append("the probabilities are the verifier's sampling chances; greedy decoding accepts only its "
                         "top token, so the prediction is rough where the top two are close")
        return "; ".join(parts) + "."


def tree_prediction(rounds: list, costs: MeasuredCosts | None) -> TreePrediction | None:
    """The prediction of a reply whose rounds (trace.RoundRecord) drafted trees; None when none did."""
    trees = [r for r in rounds if r.tree]
    if not trees:
        return None
    expected = [1.0 + tree_path_mass(r.tree) if r.tree else 1.0 for r in rounds]
    measured = sum(r.emitted for r in rounds) / len(rounds)
    speedup = None
    if costs is not None:
        seconds = sum(float(r.draft_s) + costs.verify_s(_checked(r)) + costs.overhead_s_per_round for r in rounds)
        speedup = sum(expected) * costs.token_s / seconds if seconds > 0 else None
    return TreePrediction(statistics.fmean(expected), measured, statistics.fmean(len(r.tree) for r in trees),
                          speedup)


def why_they_differ(alpha: float, gamma: float, c: float, costs: MeasuredCosts, textbook: float,
                    practical: float) -> str:
    """The gap between the two curves at the measured γ, in words."""
    k = max(1, round(gamma))
    ratio = costs.verify_ratio(k)
    parts = [f"the textbook curve assumes checking {k + 1} tokens costs one decode step; here it costs "
             f"{ratio:.2f}"]
    share = costs.overhead_s_per_round / costs.token_s if costs.token_s else 0.0
    if share >= 0.05:
        parts.append(f"each round adds {costs.overhead_s_per_round * 1e3:.1f} ms of bookkeeping "
                     f"({share:.0%} of a plain token)")
    return (f"Textbook {textbook:.2f}×, with measured costs {practical:.2f}× at γ {gamma:.1f}: "
            + "; ".join(parts) + ".")


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 1.5, 2, 3, 4, 5, 6, 8 × 10^k at or above x: axis ranges that change rarely (each
    change re-lays out an axis) yet leave at most a third of a plot empty."""
    if not math.isfinite(x) or x <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1, 1.5, 2, 3, 4, 5, 6, 8, 10):
        if m * e >= x * (1 - 1e-9):
            return m * e
    return 10 * e


def run_key(kind: str, run: int) -> str:
    """The lane key of run `run` (1, 2, ...) of a lane kind: "weak" for the first, then "weak 2", ... (a race's
    keys are the same scheme: speedup.race_key)."""
    return kind if run == 1 else f"{kind} {run}"


def median_run(traces: dict[str, ReplyTrace], base: str, kind: str) -> int | None:
    """The run n (1, 2, ...) whose `kind` lane against the `base` lane of the same run (run_key) has the median
    speedup of the finished runs: the lower middle one of an even count, so that it is a run that happened.
    None when no run of both finished. For a race (base "off", kind "on") it is the median pair, whose lanes
    are the ones to draw beside the median headline."""
    ratios = []
    for n in range(1, len(traces) + 1):
        b, k = traces.get(run_key(base, n)), traces.get(run_key(kind, n))
        if b is None or k is None:
            break
        tps_b, tps_k = _tps(b), _tps(k)
        if tps_b > 0 and tps_k > 0:
            ratios.append((tps_k / tps_b, n))
    if not ratios:
        return None
    middle = statistics.median_low(r for r, _ in ratios)
    return next(n for r, n in ratios if r == middle)


def _tps(trace: ReplyTrace) -> float:
    """A finished lane's tokens/s; 0 for one that did not finish or failed."""
    if not trace.stats or trace.error:
        return 0.0
    return float(trace.stats.get("tokens_per_s") or 0.0)
