"""The first footer figure after a load against a race run right after it, on fresh prompts (printed, not asserted).

Issue 55's target: the speedup a reply's footer shows first after a load is within 10 % of a race of the same
prompt run right after it. This drives the real window: it loads the pair, waits for the background baseline
(app/baseline_controller.py) to land, then for each held-out prompt, in a new chat each:

1. loads the pair again and measures the baseline afresh (Settings ▸ Measure again: every footer is then the
   first figure after a load; --keep-baselines keeps one load and lets the baselines accumulate, races' too);
2. sends the prompt and reads the reply's speedup from its trace (the figure its footer shows, checked against
   the footer's text), after the baseline measured for it has landed;
3. races that prompt (the chat's race, composer empty: the conversation up to its user turn) and reads the
   race's median speedup (app/runs.race_spread_of).

Per prompt it prints the footer's figure, the race's median and spread, their ratio, and what each side is made
of (the reply's and the baseline's tokens/s, the race's median off and on tokens/s), then "within 10 %: k of N".
Prompts come from a bundled held-out set (never used to tune anything). Other sessions' load skews every
timing: note `uptime` beside the figures.

    QT_QPA_PLATFORM=offscreen nice -n 10 .venv/bin/python bench/footer_vs_race.py [--limit 5] \
        [--prompts independent-heldout] [--max-new-tokens 64] [--pairs 3] \
        [--verifier qwen2.5-coder-1.5b-instruct --draft qwen2.5-coder-0.5b-instruct]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from ui_latency import load_models, open_window  # noqa: E402 - bench/ is the script's folder


def pump_until(done, timeout_s: float, what: str) -> None:
    """Run the window's event loop until `done()` (or give up after `timeout_s`, saying what was awaited)."""
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    end = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > end:
            raise SystemExit(f"gave up waiting for {what} after {timeout_s:.0f} s")
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.02)


def idle(window) -> bool:
    """No reply, race, load or baseline measurement running or about to run."""
    b = window.baseline
    return not window.busy and not (b.running or b.warming or b.due) and window.loader.worker is None


def reply(window, text: str, timeout_s: float):
    """Send `text` from the composer (as a user does) and return the reply's trace once it has finished."""
    got = []
    window.reply_finished.connect(got.append)
    window.composer.setPlainText(text)
    window.send_from_composer()
    pump_until(lambda: bool(got), timeout_s, "the reply")
    window.reply_finished.disconnect(got.append)
    return got[0]


def race(window, timeout_s: float):
    """Race the conversation's last prompt (the composer empty) and return its RaceSpread."""
    from app.runs import race_spread_of

    got = []
    window.racer.finished.connect(got.append)
    window.composer.clear()
    window.racer.race()
    pump_until(lambda: bool(got), timeout_s, "the race")
    window.racer.finished.disconnect(got.append)
    return race_spread_of(window.graphs.race.traces)


def footer_figure(window, trace) -> tuple[float | None, str]:
    """The speedup the reply's footer shows (None: it shows none) and the footer's words about it. The figure is
    the trace's, which the footer prints to two decimals; a footer without one shows none."""
    bubble = next(b for b in window.chat.bubbles if b.trace is trace)
    bubble.update_footer()
    text = bubble.footer.text()
    figure = trace.speedup()
    if figure is None or f"{figure:.2f}×" not in text:
        return None, text
    return figure, text


def calls(tokens: int, rounds: int) -> str:
    return f"{tokens / rounds:.2f}" if rounds else "-"


def lane_words(trace) -> str:
    st = trace.stats or {}
    per_call = calls(int(st.get("new_tokens") or 0), int(st.get("rounds") or 0))
    return f"{float(st.get('tokens_per_s') or 0):.1f} tok/s at {per_call} per call ({st.get('drafted', 0)} drafted)"


def one_prompt(window, case, args) -> tuple[float | None, float | None]:
    if not args.keep_baselines:
        window.loader.remeasure_baseline()
        pump_until(lambda: idle(window), args.timeout, "the load and its baseline")
    window.new_chat()
    text = case.messages[-1]["content"]
    trace = reply(window, text, args.timeout)
    pump_until(lambda: idle(window), args.timeout, "a baseline measured for the reply")
    figure, footer = footer_figure(window, trace)
    st = trace.get_stats()
    copied = sum(r.copied for r in trace.rounds)
    spread = race(window, args.timeout)
    pump_until(lambda: idle(window), args.timeout, "the window after the race")
    median = spread.speedup if spread is not None else None
    ratio = f"{figure / median:.2f}" if figure and median else "-"
    print(f"{case.name}: footer {f'{figure:.2f}×' if figure else 'none'}"
          f" · race {f'{median:.2f}× ({spread.low:.2f}–{spread.high:.2f})' if median else 'none'}"
          f" · footer/race {ratio}", flush=True)
    print(f"  reply {st.tokens_per_s:.1f} tok/s ({st.new_tokens} tokens, {trace.prompt_tokens}-token prompt, "
          f"{copied} copied) against {trace.baseline_tps or 0:.1f} tok/s ({trace.baseline_source or '-'}); race "
          f"median off {spread.tps_off if spread else 0:.1f}, on {spread.tps_on if spread else 0:.1f} tok/s",
          flush=True)
    print(f"  footer: {footer}", flush=True)
    print(f"  reply: {calls(st.new_tokens, st.rounds)} tokens per call, {st.drafted} drafted, {st.accepted} accepted; "
          f"race on lanes: " + ", ".join(lane_words(t) for k, t in window.graphs.race.traces.items()
                                         if k.startswith("on")), flush=True)
    return figure, median


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verifier", default="")
    p.add_argument("--draft", default="")
    p.add_argument("--prompts", default="independent-heldout", help="a bundled prompt set or a file")
    p.add_argument("--limit", type=int, default=5, help="the first N prompts of the set")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--pairs", type=int, default=3, help="the race's alternating off/on runs of each side")
    p.add_argument("--keep-baselines", action="store_true",
                   help="one load for all prompts (later footers use the races' baselines too)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds to wait for any one step")
    args = p.parse_args()
    from app.settings import Settings
    from specdec_core.measuring.prompt_sets import load_prompts

    cases = load_prompts(args.prompts)[: args.limit]
    base = Settings()
    settings = Settings(verifier=args.verifier or base.verifier, draft=args.draft or base.draft,
                        drafter="model" if args.draft else base.drafter, max_new_tokens=args.max_new_tokens,
                        calibrate=True)
    t0 = time.perf_counter()
    _app, window = open_window(settings)
    window.resize(1280, 800)
    window.racer.pairs = args.pairs
    load_models(window)
    pump_until(lambda: idle(window), args.timeout, "the baseline after the load")
    print(f"loaded and measured in {time.perf_counter() - t0:.0f} s: {window.session.verifier_name} ← "
          f"{window.session.drafter_name}; load average {os.getloadavg()[0]:.2f}", flush=True)
    ratios = []
    for case in cases:
        figure, median = one_prompt(window, case, args)
        if figure and median:
            ratios.append(figure / median)
    within = sum(abs(r - 1) <= 0.10 for r in ratios)
    print(f"within 10 %: {within} of {len(cases)}"
          + (f" (footer/race median {statistics.median(ratios):.2f}, range {min(ratios):.2f}–{max(ratios):.2f})"
             if ratios else "") + f"; load average {os.getloadavg()[0]:.2f}", flush=True)
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
