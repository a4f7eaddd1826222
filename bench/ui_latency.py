"""How responsive is the window while a reply streams? Event-loop latency, printed (not asserted).

A 5 ms QTimer ticks on the GUI thread during a reply of the embedded verifier; each tick's lateness
(time since the previous tick minus the interval) is how long a click or a keypress would have waited.
Reports p50 / p99 / max lateness and the reply's tokens/s, for speculation on and off.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/ui_latency.py [--verifier SPEC] [--tokens N]
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
    args = p.parse_args()
    os.environ.setdefault("SPECDEC_DATA_DIR", tempfile.mkdtemp(prefix="specdec-bench-"))
    from specdec_core.threads import prefer_passive_waiting

    prefer_passive_waiting()  # as specdec-chat does: idle OpenMP threads must not spin against the GUI
    if args.switch_ms:
        sys.setswitchinterval(args.switch_ms / 1000)

    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    from app.store import ConversationStore, Settings
    from app.window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    settings = Settings(verifier=args.verifier, draft=args.draft,
                        drafter="model" if args.draft else "prompt-lookup", max_new_tokens=args.tokens,
                        calibrate=False)
    window = MainWindow(settings, ConversationStore(), persist_settings=False)
    window.show()

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

    def loaded(_session) -> None:
        QTimer.singleShot(100, run_next)

    window.models_loaded.connect(loaded)
    window.load_failed.connect(lambda msg: (print(msg, file=sys.stderr), app.exit(1)))
    t0 = time.perf_counter()
    window.load_models()
    code = app.exec()
    print(f"GIL switch interval {sys.getswitchinterval() * 1000:g} ms; "
          f"verifier {args.verifier} ({'draft ' + args.draft if args.draft else 'prompt lookup'}), "
          f"load {time.perf_counter() - t0:.1f} s total run; {os.cpu_count()} CPU cores")
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
