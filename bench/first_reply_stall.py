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
import cProfile
import os
import pstats
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
        self.cpu: list[float] = []  # per gap: the GUI thread's CPU ms in it (the rest it waited: a core, the GIL)
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
        self.cpu.clear()
        self._start = self._last = time.perf_counter()
        self._last_cpu = time.thread_time()
        self._running = True
        self._timer.start()
        threading.Thread(target=self._sample, daemon=True, name="stall-sampler").start()

    def stop(self) -> None:
        self._running = False
        self._timer.stop()

    def _tick(self) -> None:
        now = time.perf_counter()
        cpu = time.thread_time()
        self.gaps.append((now - self._start, max(0.0, (now - self._last) * 1000 - self.interval_ms)))
        self.cpu.append((cpu - self._last_cpu) * 1000)
        self._last, self._last_cpu = now, cpu

    def _sample(self) -> None:
        while self._running:
            time.sleep(0.01)
            if time.perf_counter() - self._last > self.stack_after_s:
                frame = sys._current_frames().get(self._gui)
                if frame is not None:
                    lines = traceback.format_stack(frame, limit=14)
                    self.stacks["".join(line for line in lines if "/site-packages/" not in line or
                                        "pyqtgraph" in line)[-1600:]] += 1

    def worst(self, n: int = 5) -> list[tuple[float, float, float]]:
        """The n longest gaps: (seconds since start, ms past the interval, the GUI thread's CPU ms in the gap)."""
        order = sorted(range(len(self.gaps)), key=lambda i: -self.gaps[i][1])[:n]
        return [(*self.gaps[i], self.cpu[i]) for i in order]


def timed_application():
    """A QApplication that times the delivery of every event (its C++ work too: layouts, paints, font loads that a
    Python stack sample cannot see) while `on` is set: those over 15 ms by receiver and event type (`slow`), and
    the outermost ones over 5 ms in order, with the GUI thread's CPU time in each (`top`: what ran back to back)."""
    from PySide6.QtWidgets import QApplication

    class TimedApp(QApplication):
        on = False
        start = 0.0
        slow: list[tuple[float, str]] = []
        top: list[tuple[float, float, float, str]] = []  # (seconds since start, wall ms, CPU ms, what)
        _depth = 0

        def notify(self, receiver, event):  # noqa: N802 - Qt override
            if not TimedApp.on:
                return super().notify(receiver, event)
            t, cpu = time.perf_counter(), time.thread_time()
            TimedApp._depth += 1
            try:
                return super().notify(receiver, event)
            finally:
                TimedApp._depth -= 1
                took = (time.perf_counter() - t) * 1000
                if took > 5:
                    name = f"{type(receiver).__name__}({receiver.objectName()})" if receiver is not None else "?"
                    if took > 15:
                        TimedApp.slow.append((took, f"{name} {event.type().name}"))
                    if TimedApp._depth == 0:
                        TimedApp.top.append((t - TimedApp.start, took, (time.thread_time() - cpu) * 1000,
                                             f"{name} {event.type().name}"))

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
    p.add_argument("--profile-lines", type=int, default=0,
                   help="profile the GUI thread as the first reply starts and print this many lines (cumulative)")
    p.add_argument("--timeline-s", type=float, default=0.0,
                   help="list what ran on the GUI thread for over 5 ms in this many seconds after Send")
    p.add_argument("--profile-s", type=float, default=0.5, help="seconds after Send that the profile covers")
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
    from PySide6.QtCore import QEventLoop, QTimer
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
        profiler = cProfile.Profile() if args.profile_lines and i == 0 else None
        if profiler is not None:
            profiler.enable()  # the GUI thread's Python (and what it calls into Qt) as the first reply starts
            QTimer.singleShot(int(args.profile_s * 1000), profiler.disable)
        probe.start()
        type(timed).on, type(timed).slow[:], type(timed).top[:] = True, [], []
        type(timed).start = time.perf_counter()
        window.composer.setPlainText(prompts[i % len(prompts)])
        t, cpu = time.perf_counter(), time.thread_time()
        window.send_from_composer()
        type(timed).top.append((0.0, (time.perf_counter() - t) * 1000, (time.thread_time() - cpu) * 1000, "Send"))
        loop.exec()
        window.reply_finished.disconnect(loop.quit)
        probe.stop()
        trace = window.chat.bubbles[-1].trace
        worst = probe.worst()
        print(f"reply {i + 1}: max stall {worst[0][1]:.0f} ms at {worst[0][0]:.2f} s ({worst[0][2]:.0f} ms CPU); "
              "next: " + ", ".join(f"{g:.0f} ms at {t:.2f} s ({c:.0f} CPU)" for t, g, c in worst[1:])
              + f"; load average {os.getloadavg()[0]:.2f}; {trace.summary()}", flush=True)
        if profiler is not None and i == 0:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile_lines)
        type(timed).on = False
        print("  slowest event deliveries (nested ones count in their parents too): " + "; ".join(
            f"{took:.0f} ms {what}" for took, what in sorted(type(timed).slow, reverse=True)[:8]))
        if args.timeline_s:
            print(f"  what ran on the GUI thread over 5 ms, in the first {args.timeline_s} s: " + "; ".join(
                f"{at:.2f} s {what} {wall:.0f} ms ({cpu:.0f} CPU)" for at, wall, cpu, what in type(timed).top
                if at <= args.timeline_s))
        for stack, count in probe.stacks.most_common(args.stacks):
            print(f"  -- GUI thread stalled here ({count} samples of 10 ms):\n{stack}")
        for _ in range(20):
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
    print(f"{os.cpu_count()} CPU cores; {window.hosts.note}")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
