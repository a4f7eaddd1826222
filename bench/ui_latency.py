"""How responsive is the window while a reply streams? Event-loop latency, printed (not asserted).

A 5 ms QTimer ticks on the GUI thread during a reply of the embedded verifier; each tick's lateness
(time since the previous tick minus the interval) is how long a click or a keypress would have waited.
Reports p50 / p99 / max lateness and the reply's tokens/s, for speculation on and off.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/ui_latency.py [--verifier SPEC] [--tokens N]

With --cli-ab N it measures instead what the window costs the worker per token: for each lane (speculation
off and on), N pairs of the same reply sent in the window (a new chat each time, graphs shown; decoded by the
window's host process where one runs, app/host.py, or with --in-process in the window's own) and run as the
CLI runs it (the same session's engine consuming the events with no window: `cli_reply_tps`), in alternating
order; it prints each lane's median tokens/s both ways and the window's cost, 1 - window / CLI, from the medians
and per pair (median and range), with the load average at the lane's start and end, and how busy the GUI thread
was during the window's replies (its CPU time over the reply's wall time: the most of it that the GUI can have held
the GIL, which the decoding thread needs between its operations), and how much of each reply's wall time its
decoding thread spent off the CPU, both ways ("decoding off-CPU"). That thread's CPU time does not count the
time it waits for the GIL or for a core, so the difference between the window's figure and the CLI's is what the
window took from it, measured inside each reply; unlike the tokens/s ratio it does not move when the VM's host
gets busier between two replies.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[k]


_off_cpu: list[tuple[float, float]] = []  # per reply: its decoding thread's CPU seconds, and the reply's wall seconds


def track_decoding_thread() -> None:
    """Make every reply (the window's and the CLI's, both through app.session.reply_events) record its decoding
    thread's CPU time and its wall time in `_off_cpu`."""
    import app.session as session_mod

    inner = session_mod.reply_events

    def reply_events(*args, **kwargs):
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            yield from inner(*args, **kwargs)
        finally:
            _off_cpu.append((time.thread_time() - cpu, time.perf_counter() - wall))

    session_mod.reply_events = reply_events


def gui_reply(window, prompt: str, speculate: bool):
    """The ReplyTrace of one reply sent in the window, in a new chat (waits in a local event loop)."""
    from PySide6.QtCore import QEventLoop

    loop, got = QEventLoop(), []

    def done(trace) -> None:
        got.append(trace)
        loop.quit()

    window.reply_finished.connect(done)
    window.new_chat()
    window.spec_button.setChecked(speculate)
    window.send(prompt)
    if not got:
        loop.exec()
    window.reply_finished.disconnect(done)
    return got[0]


def gui_reply_tps(window, prompt: str, speculate: bool) -> tuple[float, int]:
    """Tokens/s and tokens of one reply sent in the window, in a new chat (a reply its host process decoded
    records that process's decoding thread in `_off_cpu`)."""
    host = window.hosts.host
    if host is not None:
        host.last_reply = None
    stats = gui_reply(window, prompt, speculate).get_stats()
    host = window.hosts.host
    if host is not None and host.last_reply is not None:
        _off_cpu.append((host.last_reply.cpu_s, host.last_reply.wall_s))
    return (stats.tokens_per_s, stats.new_tokens) if stats else (0.0, 0)


def cli_reply_tps(window, prompt: str, speculate: bool, engine=None) -> tuple[float, int]:
    """The same reply as `specdec generate` runs it: the window's session and engine, the events consumed on
    this thread with no window involved, and Python's collector on, as in the CLI. (The window turns automatic
    collection off and collects on a GUI-thread timer, app/gc_pin.py, which cannot fire while this loop holds
    the GUI thread: without this, the garbage of the CLI's replies was collected during the window's.)
    `engine`: another Engine over the session's models instead of the session's own (e.g. a fresh one, as a
    `specdec generate` process starts with)."""
    import dataclasses
    import gc

    import app.session as session_mod
    from app.session import config_from_settings
    from specdec_core.engine import Controls
    from specdec_core.events import Finished

    config = config_from_settings(window.settings)
    automatic = gc.isenabled()
    gc.enable()  # safe here: this is the GUI thread
    try:
        session = window.session if engine is None else dataclasses.replace(window.session, engine=engine)
        messages = [{"role": "user", "content": prompt}]
        for ev in session_mod.reply_events(session, messages, window.settings.system_prompt, config,
                                           Controls(speculate=speculate)):
            if isinstance(ev, Finished):
                return ev.stats.tokens_per_s, ev.stats.new_tokens
    finally:
        if not automatic:
            gc.disable()
    return 0.0, 0


def window_cost(window, prompt: str, pairs: int) -> dict[str, dict[str, list[float]]]:
    """{"off"/"on": {"window": [tokens/s...], "cli": [...], ...}}: `pairs` alternating pairs per lane (window then
    CLI, then CLI then window, ...), so a machine that warms up or gets busier hits both alike; with the GUI thread's
    busy share during the window's runs, and the decoding thread's off-CPU share and CPU milliseconds per token."""
    order = (("window", gui_reply_tps), ("cli", cli_reply_tps))
    out: dict[str, dict[str, list[float]]] = {}
    for lane, speculate in (("off", False), ("on", True)):
        out[lane] = {"window": [], "cli": [], "load": [os.getloadavg()[0]], "gui_busy": [], "window_off_cpu": [],
                     "cli_off_cpu": [], "window_cpu_ms": [], "cli_cpu_ms": []}
        for i in range(pairs):
            for where, run in order if i % 2 == 0 else order[::-1]:
                cpu, wall = time.thread_time(), time.perf_counter()
                tps, tokens = run(window, prompt, speculate)
                out[lane][where].append(tps)
                if _off_cpu and tokens:
                    cpu_s, wall_s = _off_cpu.pop()
                    out[lane][f"{where}_off_cpu"].append(1 - cpu_s / wall_s)
                    out[lane][f"{where}_cpu_ms"].append(cpu_s / tokens * 1e3)  # the decoding thread's CPU per token
                if where == "window":  # the GUI thread's CPU time over the reply: the most it can hold the GIL
                    out[lane]["gui_busy"].append((time.thread_time() - cpu) / (time.perf_counter() - wall))
        out[lane]["load"].append(os.getloadavg()[0])
    return out


def print_window_cost(results: dict[str, dict[str, list[float]]]) -> None:
    import statistics

    print(f"{'lane':<17}{'window tok/s':>14}{'CLI tok/s':>12}{'window cost':>13}{'per pair':>22}{'GUI busy':>10}   "
          f"{'decoding off-CPU':>20}{'CPU ms/token':>16}   load   runs (window | CLI)")
    for lane, runs in results.items():
        gui, cli = statistics.median(runs["window"]), statistics.median(runs["cli"])
        # Each pair's own cost (its two runs are taken back to back), their median and range: machine noise that
        # drifts over minutes moves both runs of a pair alike.
        paired = sorted((1 - w / c) * 100 for w, c in zip(runs["window"], runs["cli"]) if c)
        per_pair = f"{statistics.median(paired):.1f}% [{paired[0]:.0f}, {paired[-1]:.0f}]" if paired else "-"
        load = "-".join(f"{x:.1f}" for x in runs.get("load", []))
        busy = f"{statistics.median(runs['gui_busy']) * 100:.1f}%" if runs.get("gui_busy") else "-"
        off_cpu = cpu_ms = "-"
        if runs.get("window_off_cpu") and runs.get("cli_off_cpu"):
            off_cpu = (f"{statistics.median(runs['window_off_cpu']) * 100:.1f}% / "
                       f"{statistics.median(runs['cli_off_cpu']) * 100:.1f}%")
            cpu_ms = f"{statistics.median(runs['window_cpu_ms']):.1f} / {statistics.median(runs['cli_cpu_ms']):.1f}"
        print(f"{'speculation ' + lane:<17}{gui:>14.1f}{cli:>12.1f}{(1 - gui / cli) * 100:>12.1f}%{per_pair:>22}"
              f"{busy:>10}{off_cpu:>20}{cpu_ms:>16}   {load}   " + " ".join(f"{x:.1f}" for x in runs["window"]) + " | "
              + " ".join(f"{x:.1f}" for x in runs["cli"]))


def open_window(settings):
    """A shown MainWindow on `settings` (models not loaded yet) in a QApplication, the way specdec-chat starts:
    a throwaway data folder unless $SPECDEC_DATA_DIR names one, and idle OpenMP threads sleeping. Call it before
    anything imports torch."""
    os.environ.setdefault("SPECDEC_DATA_DIR", tempfile.mkdtemp(prefix="specdec-bench-"))
    from specdec_core.commands.threads import prefer_passive_waiting

    prefer_passive_waiting()  # as specdec-chat does: idle OpenMP threads must not spin against the GUI
    from PySide6.QtWidgets import QApplication

    from app.store import ConversationStore
    from app.window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    window = MainWindow(settings, ConversationStore(), persist_settings=False)
    window.show()
    return app, window


def load_models(window) -> None:
    """Load the window's models (and calibrate, if its settings say so), waiting in a local event loop."""
    from PySide6.QtCore import QEventLoop

    loop, failed = QEventLoop(), []
    window.models_loaded.connect(loop.quit)
    window.load_failed.connect(lambda msg: (failed.append(msg), loop.quit()))
    window.loader.load()
    loop.exec()
    if failed or window.session is None:
        raise SystemExit(f"loading failed: {failed[0] if failed else 'no session'}")
    from PySide6.QtWidgets import QApplication

    from app.worker import live_workers

    while window.busy or live_workers():  # the load's end, and the background search for other drafts
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.02)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verifier", default="smollm2-135m-instruct")
    p.add_argument("--draft", default="")
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--switch-ms", type=float, default=None,
                   help="GIL switch interval in ms (default: CPython's 5 ms, as specdec-chat runs)")
    p.add_argument("--prompt", default="Explain, in a few paragraphs, how a bicycle stays upright.")
    p.add_argument("--graphs-ab", type=int, default=0, metavar="N",
                   help="instead: N pairs of replies with the graphs dock shown, then hidden (alternating, so "
                   "machine noise hits both alike); prints tokens/s of each and the graphs' cost")
    p.add_argument("--cli-ab", type=int, default=0, metavar="N",
                   help="instead: N alternating pairs per lane of the reply in the window and as the CLI runs it; "
                   "prints the window's cost to tokens/s for speculation off and on")
    p.add_argument("--in-process", action="store_true",
                   help="decode the window's replies in its own process even where a host process could "
                   "(app/host.py; the same as SPECDEC_HOST=0)")
    p.add_argument("--drafter", default=None, help="the app's drafter setting (default: model with --draft, else "
                   "prompt lookup; with --cli-ab the app's default)")
    args = p.parse_args()
    if args.switch_ms:
        sys.setswitchinterval(args.switch_ms / 1000)
    from specdec_core.commands.threads import prefer_passive_waiting

    prefer_passive_waiting()  # before anything imports torch (open_window says so again)
    from app.settings import Settings

    if args.in_process:
        os.environ["SPECDEC_HOST"] = "0"
    drafter = args.drafter or ("model" if args.draft else Settings().drafter if args.cli_ab else "prompt-lookup")
    settings = Settings(verifier=args.verifier, draft=args.draft or Settings().draft, drafter=drafter,
                        max_new_tokens=args.tokens, calibrate=False)
    app, window = open_window(settings)
    track_decoding_thread()
    from PySide6.QtCore import QElapsedTimer, QTimer

    interval_ms = 5
    lateness: list[float] = []
    clock = QElapsedTimer()
    ticker = QTimer()
    ticker.setInterval(interval_ms)
    last = [0]

    def tick() -> None:
        now = clock.nsecsElapsed()
        if last[0]:
            lateness.append(max(0.0, (now - last[0]) / 1e6 - interval_ms))
        last[0] = now

    ticker.timeout.connect(tick)
    results = []
    plan = [("speculation on", True, True), ("speculation off", False, True)]
    if args.graphs_ab:
        plan = [(f"{spec} graphs {shown}", on, shown == "shown")
                for _ in range(args.graphs_ab) for spec, on in (("off", False), ("on", True))
                for shown in ("shown", "hidden")]

    def run_next() -> None:
        if not plan:
            app.quit()
            return
        label, on, graphs_shown = plan.pop(0)
        window.spec_button.setChecked(on)
        window.right_dock.setVisible(graphs_shown)
        lateness.clear()
        last[0] = 0
        clock.start()
        ticker.start()
        start = time.perf_counter()

        def done(trace) -> None:
            window.reply_finished.disconnect(done)
            ticker.stop()
            wall = time.perf_counter() - start
            s = trace.get_stats()
            results.append((label, list(lateness), s.new_tokens if s else 0, s.tokens_per_s if s else 0.0, wall))
            QTimer.singleShot(200, run_next)

        window.reply_finished.connect(done)
        window.send(args.prompt)

    cost: dict = {}

    def measure_cost() -> None:
        cost.update(window_cost(window, args.prompt, args.cli_ab))
        app.quit()

    def loaded(_session) -> None:
        QTimer.singleShot(100, measure_cost if args.cli_ab else run_next)

    window.models_loaded.connect(loaded)
    window.load_failed.connect(lambda msg: (print(msg, file=sys.stderr), app.exit(1)))
    t0 = time.perf_counter()
    window.loader.load()
    code = app.exec()
    print(f"GIL switch interval {sys.getswitchinterval() * 1000:g} ms; "
          f"verifier {args.verifier} (drafter {drafter}{', draft ' + args.draft if args.draft else ''}), "
          f"load {time.perf_counter() - t0:.1f} s total run; {os.cpu_count()} CPU cores")
    if args.cli_ab:
        print(f"drafter {drafter}; {args.tokens} tokens; {args.cli_ab} alternating pairs per lane; medians. "
              f"{window.hosts.note or 'Replies and races decode in the window process.'}")
        print_window_cost(cost)
        window.close()
        return code
    print(f"{'run':<17}{'ticks':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'tokens':>8}{'tok/s':>8}")
    for label, lat, n, tps, _wall in results:
        print(f"{label:<17}{len(lat):>7}{percentile(lat, 50):>9.1f}{percentile(lat, 99):>9.1f}"
              f"{max(lat, default=float('nan')):>9.1f}{n:>8}{tps:>8.1f}")
    if args.graphs_ab:
        for spec in ("off", "on"):
            shown = [r[3] for r in results if r[0] == f"{spec} graphs shown"]
            hidden = [r[3] for r in results if r[0] == f"{spec} graphs hidden"]
            if shown and hidden:
                a, b = sum(shown) / len(shown), sum(hidden) / len(hidden)
                print(f"speculation {spec}: graphs shown {a:.1f} tok/s, hidden {b:.1f} tok/s: the graphs cost "
                      f"{(1 - a / b) * 100:.1f} % of decode speed (mean of {len(shown)} alternating pairs)")
    window.close()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
