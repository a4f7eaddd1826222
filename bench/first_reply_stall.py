"""The longest the window's GUI thread stalls during the first reply after a load (printed, not asserted).

A QTimer ticks every 5 ms from the moment the prompt is sent until the reply ends; the largest gap between two
ticks, less the interval, is the stall a user sees (a frozen window: no repaint, no click). A sampling thread
records the GUI thread's Python stack whenever it has not ticked for --stack-after ms, so each long stall comes
with the code it was in. Runs the real window, on the embedded default unless flags say otherwise; under Xvfb or
QT_QPA_PLATFORM=offscreen:

    xvfb-run -a .venv/bin/python bench/first_reply_stall.py [--replies 2] [--wait-baseline]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
import traceback

from ui_latency import load_models, open_window  # noqa: E402 - bench/ is the script's folder


class StallProbe:
    """Gaps between a fast timer's ticks on the GUI thread, and the GUI thread's stack during long ones."""

    def __init__(self, interval_ms: int = 5, stack_after_ms: float = 60.0) -> None:
        from PySide6.QtCore import QTimer

        self.interval_ms = interval_ms
        self.stack_after_s = stack_after_ms / 1000
        self.gaps: list[tuple[float, float]] = []  # (seconds since start, gap in ms past the interval)
        self.stacks: collections.Counter[str] = collections.Counter()
        self._last = 0.0
        self._start = 0.0
        self._gui = threading.get_ident()
        self._running = False
        self._timer = QTimer()
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self.gaps.clear()
        self.stacks.clear()
        self._start = self._last = time.perf_counter()
        self._running = True
        self._timer.start()
        threading.Thread(target=self._sample, daemon=True, name="stall-sampler").start()

    def stop(self) -> None:
        self._running = False
        self._timer.stop()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps.append((now - self._start, max(0.0, (now - self._last) * 1000 - self.interval_ms)))
        self._last = now

    def _sample(self) -> None:
        while self._running:
            time.sleep(0.01)
            if time.perf_counter() - self._last > self.stack_after_s:
                frame = sys._current_frames().get(self._gui)
                if frame is not None:
                    lines = traceback.format_stack(frame, limit=14)
                    self.stacks["".join(line for line in lines if "/site-packages/" not in line or
                                        "pyqtgraph" in line)[-1600:]] += 1

    def worst(self, n: int = 5) -> list[tuple[float, float]]:
        return sorted(self.gaps, key=lambda g: -g[1])[:n]


def timed_application():
    """A QApplication that times the delivery of every event (its C++ work too: layouts, paints, font loads that a
    Python stack sample cannot see), keeping those over 15 ms while `on` is set, by receiver and event type."""
    from PySide6.QtWidgets import QApplication

    class TimedApp(QApplication):
        on = False
        slow: list[tuple[float, str]] = []

        def notify(self, receiver, event):  # noqa: N802 - Qt override
            if not TimedApp.on:
                return super().notify(receiver, event)
            t = time.perf_counter()
            try:
                return super().notify(receiver, event)
            finally:
                took = (time.perf_counter() - t) * 1000
                if took > 15:
                    name = f"{type(receiver).__name__}({receiver.objectName()})" if receiver is not None else "?"
                    TimedApp.slow.append((took, f"{name} {event.type().name}"))

    return TimedApp(sys.argv[:1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verifier", default="")
    p.add_argument("--draft", default="")
    p.add_argument("--replies", type=int, default=2, help="replies to probe, the first after the load first")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt", default="Write a Python function that reverses a string.")
    p.add_argument("--wait-baseline", action="store_true",
                   help="send the first prompt once the window is idle (its after-load rehearsal and measurement done)")
    p.add_argument("--stacks", type=int, default=3, help="the most sampled GUI-thread stacks to print")
    args = p.parse_args()
    from app.settings import Settings

    base = Settings()
    settings = Settings(verifier=args.verifier or base.verifier, draft=args.draft or base.draft,
                        drafter="model" if args.draft else base.drafter, max_new_tokens=args.tokens)
    t0 = time.perf_counter()
    timed = timed_application()
    app, window = open_window(settings)
    window.resize(1024, 700)
    load_models(window)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    if args.wait_baseline:
        waiting = getattr(window, "baseline", None)  # (an app from before the after-load measurement has none)
        while window.busy or (waiting is not None and (waiting.running or waiting.warming or waiting.due)):
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
            time.sleep(0.02)
    probe = StallProbe()
    prompts = [args.prompt, "And now in C, please.", "Thank you. One more in Rust?"]
    for i in range(args.replies):
        loop = QEventLoop()
        window.reply_finished.connect(loop.quit)
        probe.start()
        type(timed).on, type(timed).slow[:] = True, []
        window.composer.setPlainText(prompts[i % len(prompts)])
        window.send_from_composer()
        loop.exec()
        window.reply_finished.disconnect(loop.quit)
        probe.stop()
        trace = window.chat.bubbles[-1].trace
        worst = probe.worst()
        print(f"reply {i + 1}: max stall {worst[0][1]:.0f} ms at {worst[0][0]:.2f} s; next: "
              + ", ".join(f"{g:.0f} ms at {t:.2f} s" for t, g in worst[1:]) + f"; {trace.summary()}", flush=True)
        type(timed).on = False
        print("  slowest event deliveries (nested ones count in their parents too): " + "; ".join(
            f"{took:.0f} ms {what}" for took, what in sorted(type(timed).slow, reverse=True)[:8]))
        for stack, count in probe.stacks.most_common(args.stacks):
            print(f"  -- GUI thread stalled here ({count} samples of 10 ms):\n{stack}")
        for _ in range(20):
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
    print(f"{os.cpu_count()} CPU cores; {window.hosts.note}")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
