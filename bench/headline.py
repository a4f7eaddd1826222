"""Does the speedup agree wherever the app shows it? The reply's footer, the race and the CLI, on the same prompts.

The app states a speedup in three places, each against a verifier-alone run of its own:
- the footer under a reply with speculation on: the reply's tokens/s over the window's baseline
  (app/speedup.py BaselineBook.pick: the median of the verifier-alone runs most like it, the load-time
  calibration, replies with speculation off and race lanes, at a similar prompt length and UI load);
- the race (Talk ▸ Race, or with --race window the graphs' Race tab): the median of RACE_PAIRS alternating
  off/on pairs, each lane on a fresh engine (decoded where the chat's replies are: app/host.py);
- the CLI, `specdec generate` with and without --no-speculation, on over off: the session's models consuming
  the events with no window (bench/ui_latency.py cli_reply_tps), each reply on a new engine, as each
  `specdec generate` process builds one (no verify costs or acceptance learned from earlier replies).
Two more columns help tell why they differ: "window's engine" runs the CLI's replies on the window's engine,
which carries what it learned from the replies before (timed while the window repainted, and on other
prompts), and "footer/calib" is the footer's reply over the load-time calibration (what a footer says before
the user has run the verifier alone).

For each prompt, in one process, `--rounds` rounds close together: each round takes each place once, in an
order that rotates from round to round, and within the footer's and the CLIs' pairs off and on swap each
round, so a machine warming up or getting busier favours none. The footer's pair is what a user does: a
reply with speculation off (it joins the window's baselines), and one with speculation on, whose figure is
read off its bubble's footer (ReplyTrace.speedup(), which the footer prints).

Prints each place's median over the rounds with its range, whether the medians agree within 10 %, then the
tokens/s behind each figure and the baselines the footer used.

    QT_QPA_PLATFORM=offscreen .venv/bin/python -m bench.headline [--rounds 5] [--tokens 128] [--race talk|window]
        [--prompt TEXT ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

PROMPTS = ("Name three primary colours.", "Explain why the sky is blue in two sentences.",
           "Write a Python function that reverses a string.")
PLACES = ("footer", "race", "cli")  # where the app states a speedup; their medians must agree
# Beside them, to tell why they differ: the CLI on a fresh engine, and the footer's reply against the load-time
# calibration (what the footer says before any verifier-alone run of the user's own).
DIAGNOSTIC = ("window's engine", "footer/calib")
TOLERANCE = 0.10  # the issue's target: the largest median within 10 % of the smallest


# ---- the agreement table (pure) -----------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    """One place's speedups over the rounds."""

    median: float
    low: float
    high: float
    runs: int


def figure(speedups: list[float | None]) -> Figure | None:
    """The median and range of the rounds that gave a figure (None: a place that showed none, e.g. a footer
    under a reply too short for a speedup)."""
    xs = [x for x in speedups if x is not None and math.isfinite(x) and x > 0]
    if not xs:
        return None
    return Figure(statistics.median(xs), min(xs), max(xs), len(xs))


@dataclass(frozen=True)
class Agreement:
    figures: dict[str, Figure | None]  # place -> its figure over the rounds
    spread: float | None  # the largest median over the smallest, minus 1 (None: under two places had a figure)
    agree: bool | None  # spread within the tolerance

    def words(self) -> str:
        if self.spread is None:
            return "fewer than two places showed a figure"
        return f"{self.spread:.0%} apart: " + ("agree" if self.agree else "DISAGREE")


def agreement(speedups: dict[str, list[float | None]], places: tuple[str, ...] = PLACES,
              tolerance: float = TOLERANCE) -> Agreement:
    """Whether the places' median speedups agree: the largest within `tolerance` of the smallest."""
    figures = {p: figure(speedups.get(p, [])) for p in places}
    medians = [f.median for f in figures.values() if f is not None]
    if len(medians) < 2:
        return Agreement(figures, None, None)
    spread = max(medians) / min(medians) - 1
    return Agreement(figures, spread, spread <= tolerance + 1e-12)


def format_figure(f: Figure | None) -> str:
    if f is None:
        return "-"
    return f"{f.median:.2f}× [{f.low:.2f}–{f.high:.2f}]" if f.runs > 1 else f"{f.median:.2f}×"


# ---- what one round measures --------------------------------------------------------------------
@dataclass
class PromptRuns:
    """Everything measured on one prompt."""

    prompt: str
    speedups: dict[str, list[float | None]] = field(default_factory=dict)  # place -> one figure per round
    tps: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # place -> "off"/"on" -> tokens/s
    tokens: dict[str, list[int]] = field(default_factory=dict)  # place -> reply lengths (on)
    footers: list[str] = field(default_factory=list)  # the on reply's footer, as shown
    baselines: list[str] = field(default_factory=list)  # what the footer compared with (Baseline.how)
    load: list[float] = field(default_factory=list)  # 1-minute load average at the start and end

    def add(self, place: str, speedup: float | None, off: float, on: float, tokens: int) -> None:
        self.speedups.setdefault(place, []).append(speedup)
        lanes = self.tps.setdefault(place, {"off": [], "on": []})
        lanes["off"].append(off)
        lanes["on"].append(on)
        self.tokens.setdefault(place, []).append(tokens)


FOOTER_FIGURE = re.compile(r"(\d+\.\d+)× ±")


def measure_footer(window, prompt: str, off_first: bool, runs: PromptRuns) -> None:
    """A reply with speculation off, one with it on (in this order or the other), each in a new chat; the
    figure is the one under the on reply's bubble."""
    from bench.ui_latency import gui_reply

    traces = {}
    for speculate in ((False, True) if off_first else (True, False)):
        traces[speculate] = gui_reply(window, prompt, speculate)
        if speculate:
            text = window.chat.bubbles[-1].footer.text()
            runs.footers.append(text)
            runs.baselines.append(traces[True].baseline_source)
    on, off = traces[True], traces[False]
    shown = FOOTER_FIGURE.search(runs.footers[-1])
    speedup = on.speedup() if shown else None  # the footer's own figure, unrounded; none when it shows none
    if shown and abs(float(shown.group(1)) - speedup) > 0.006:
        raise AssertionError(f"the footer shows {shown.group(1)}× but the trace says {speedup:.3f}×")
    stats_on, stats_off = on.get_stats(), off.get_stats()
    runs.add("footer", speedup, stats_off.tokens_per_s if stats_off else 0.0,
             stats_on.tokens_per_s if stats_on else 0.0, stats_on.new_tokens if stats_on else 0)
    calibration = window.session.baseline_tps or 0.0
    if calibration and stats_on:
        runs.add("footer/calib", stats_on.tokens_per_s / calibration if shown else None, calibration,
                 stats_on.tokens_per_s, stats_on.new_tokens)


def measure_race(window, prompt: str, via: str, runs: PromptRuns) -> None:
    """One race on the prompt, started as the Talk menu (or the window's Race button) starts it; its headline."""
    from PySide6.QtCore import QCoreApplication, QEvent, QEventLoop

    window.new_chat()
    window.composer.setPlainText(prompt)  # the race runs the composer's text after the (empty) conversation
    loop = QEventLoop()
    if via == "window":
        from app.runs import race_spread_of

        window.racer.finished.connect(loop.quit)
        window.racer.race()
        if window.racer.worker is None:
            raise SystemExit("the window's race did not start (see the window's status)")
        loop.exec()
        window.racer.finished.disconnect(loop.quit)
        spread = race_spread_of(window.graphs.race.traces)
    else:
        dlg = window.talk.open_race()
        if dlg is None:
            raise SystemExit("the Talk menu's race did not start")
        view = dlg.view
        view.finished.connect(loop.quit)
        if view.running:
            loop.exec()
        spread = view.result.spread if view.result is not None else None
        if spread is not None and f"{spread.speedup:.2f}×" not in view.headline.text():
            raise AssertionError(f"the race shows {view.headline.text()!r}, not {spread.speedup:.2f}×")
        dlg.close()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # the closed dialog goes now
    window.composer.clear()
    if spread is None:
        runs.add("race", None, 0.0, 0.0, 0)
    else:
        runs.add("race", spread.speedup, spread.tps_off, spread.tps_on, spread.tokens)


def measure_cli(window, prompt: str, off_first: bool, fresh: bool, runs: PromptRuns) -> None:
    """The reply as `specdec generate` runs it, without and with --no-speculation; `fresh`: on a new engine each
    time, as each process builds one (else on the window's engine, with what it learned from earlier replies)."""
    from bench.ui_latency import cli_reply_tps
    from specdec_core.engine import Engine

    got = {}
    for speculate in ((False, True) if off_first else (True, False)):
        s = window.session
        engine = Engine(s.verifier, s.drafter if speculate else None) if fresh else None
        got[speculate] = cli_reply_tps(window, prompt, speculate, engine=engine)
    (off, _), (on, tokens) = got[False], got[True]
    runs.add("cli" if fresh else "window's engine", on / off if off and on else None, off, on, tokens)


def measure_prompt(window, prompt: str, rounds: int, race_via: str, say: Callable[[str], None]) -> PromptRuns:
    runs = PromptRuns(prompt, load=[os.getloadavg()[0]])
    for r in range(rounds):
        off_first = r % 2 == 0
        steps = [("footer", lambda first=off_first: measure_footer(window, prompt, first, runs)),
                 ("race", lambda: measure_race(window, prompt, race_via, runs)),
                 ("cli", lambda first=off_first: measure_cli(window, prompt, first, True, runs)),
                 ("window's engine", lambda first=off_first: measure_cli(window, prompt, first, False, runs))]
        k = r % len(steps)
        for name, step in steps[k:] + steps[:k]:  # each round starts one place later
            t0 = time.perf_counter()
            step()
            sp = runs.speedups[name][-1]
            say(f"  round {r + 1} {name:<15} {f'{sp:.2f}×' if sp else '-':>6}  off {runs.tps[name]['off'][-1]:5.1f} "
                f"on {runs.tps[name]['on'][-1]:5.1f} tok/s  ({time.perf_counter() - t0:.0f} s)")
    runs.load.append(os.getloadavg()[0])
    return runs


# ---- printing -----------------------------------------------------------------------------------
def print_tables(all_runs: list[PromptRuns]) -> None:
    width = max(len(r.prompt) for r in all_runs) + 2
    cols = PLACES + DIAGNOSTIC
    print(f"\n{'prompt':<{width}}" + "".join(f"{c:>22}" for c in cols) + "   footer/race/CLI")
    for runs in all_runs:
        a = agreement(runs.speedups)
        extra = [format_figure(figure(runs.speedups.get(c, []))) for c in DIAGNOSTIC]
        print(f"{runs.prompt:<{width}}" + "".join(f"{format_figure(a.figures[c]):>22}" for c in PLACES)
              + "".join(f"{x:>22}" for x in extra) + f"   {a.words()}")
    print("\nmedian tokens/s off → on (reply tokens, on) behind each figure; load average at the prompt's start-end")
    for runs in all_runs:
        parts = []
        for c in cols:
            lanes = runs.tps.get(c)
            if lanes:
                parts.append(f"{c} {statistics.median(lanes['off']):.1f} → {statistics.median(lanes['on']):.1f}"
                             f" ({statistics.median(runs.tokens[c]):.0f})")
        print(f"{runs.prompt:<{width}}" + " · ".join(parts) + "   load " + "-".join(f"{x:.2f}" for x in runs.load))
    print("\nthe footers as shown, and what they compared with:")
    for runs in all_runs:
        for text, how in zip(runs.footers, runs.baselines):
            print(f"  {runs.prompt[:24]:<26}{text}\n  {'':<26}baseline: {how}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verifier", default=None, help="default: the app's (the embedded verifier)")
    p.add_argument("--draft", default=None, help="default: the app's (the shipped draft head)")
    p.add_argument("--drafter", default=None, help="default: the app's (hybrid)")
    p.add_argument("--tokens", type=int, default=128, help="max new tokens per reply (greedy)")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds per prompt, each place once per round (3 left one prompt 13 %% apart on a quiet Xeon)")
    p.add_argument("--race", choices=("talk", "window"), default="talk",
                   help="the Talk menu's race (default) or the graphs' Race tab")
    p.add_argument("--prompt", action="append", default=None, help="a prompt (repeatable; default: the issue's three)")
    p.add_argument("--no-calibrate", action="store_true", help="skip the load-time calibration the app makes")
    p.add_argument("--json", default=None, metavar="OUT", help="also write every run to this file")
    args = p.parse_args()
    if args.rounds < 1 or args.tokens < 1:
        p.error("--rounds and --tokens must be at least 1")

    from specdec_core.commands.threads import prefer_passive_waiting

    prefer_passive_waiting()  # before torch loads, as specdec-chat does
    from app.settings import Settings
    from bench.ui_latency import load_models, open_window

    base = Settings()
    settings = Settings(verifier=args.verifier or base.verifier, draft=args.draft or base.draft,
                        drafter=args.drafter or base.drafter, max_new_tokens=args.tokens, temperature=0.0,
                        calibrate=not args.no_calibrate)
    app, window = open_window(settings)
    t0 = time.perf_counter()
    load_models(window)
    import torch

    s = window.session
    print(f"verifier {s.verifier_name}, drafter {s.drafter_name}; greedy, {args.tokens} tokens; calibration "
          f"{s.baseline_tps or 0:.1f} tok/s; load {time.perf_counter() - t0:.1f} s; {os.cpu_count()} CPU cores, "
          f"torch threads {torch.get_num_threads()}; {args.rounds} rounds per prompt; race: {args.race}", flush=True)
    all_runs = []
    for prompt in args.prompt or PROMPTS:
        print(f"{prompt}  ({time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.2f})", flush=True)
        all_runs.append(measure_prompt(window, prompt, args.rounds, args.race, lambda line: print(line, flush=True)))
    print_tables(all_runs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([vars(r) for r in all_runs], f, indent=1)
    window.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
