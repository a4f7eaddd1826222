"""How long opening a long conversation holds the window (printed, not asserted).

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/open_chat.py [--replies 200] [--tokens 256]

Saves a conversation of N replies (each a trace of T tokens shaped like a real one: bench/store_speed.py) in a
temporary data folder, shows the window at 1024x700 and opens it from the sidebar's slot. A 10 ms QTimer on the
GUI thread records the longest gap between its ticks from the click until every bubble is drawn: how long a
click or a keypress would have waited at worst. Also printed: when `open` returned, when the chat was in place
(the window's conversation is the one opened, its last replies drawn), when the last bubble was drawn, and what
ran inside the longest stall: the step (loading, drawing earlier bubbles, settling), the GUI thread's CPU time in
it, and the work timed in it (garbage collections with their generation, drawing slices, showing the chat); and
the most CPU time the GUI thread spent between two ticks (the stall without other processes competing for cores).
Target (issue 25): the window held under 300 ms (it was 11-16 s on 2 busy cores).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_speed import reply_trace  # noqa: E402 - bench/ is not a package


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replies", type=int, default=200)
    p.add_argument("--tokens", type=int, default=256)
    args = p.parse_args()
    os.environ["SPECDEC_DATA_DIR"] = tempfile.mkdtemp(prefix="specdec-open-")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from app.chat_view import ChatView
    from app.conversation import Conversation, Message
    from app.conversations import ConversationController
    from app.settings import Settings
    from app.store import ConversationStore
    from app.window import MainWindow

    spans: list[tuple[str, float, float]] = []  # (what, start, end) of the work timed on the GUI thread
    timed(ChatView, "_draw_earlier_slice", "a drawing slice", spans)
    timed(ConversationController, "_loaded", "showing the chat", spans)
    gc_started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            spans.append((f"gc gen {info['generation']} ({info['collected']} freed)", gc_started[0],
                          time.perf_counter()))

    rng = random.Random(0)
    conv = Conversation(title="long chat")
    for i in range(args.replies):
        trace = reply_trace(rng, args.tokens)
        conv.messages += [Message("user", f"question {i}"), Message("assistant", trace.text, trace)]
    store = ConversationStore()
    store.save(conv)
    window = MainWindow(Settings(calibrate=False), store, persist_settings=False)
    window.resize(1024, 700)
    window.show()
    for _ in range(20):
        app.processEvents()

    last_tick, longest = [time.perf_counter()], [0.0]
    last_cpu = [time.thread_time()]  # the GUI thread's own CPU time
    step = ["loading"]
    worst: list = [None]  # (from, to, step, GUI-thread CPU seconds) of the longest gap between ticks
    busiest = [0.0, ""]  # the most GUI-thread CPU time between two ticks, and its step: the stall on a quiet machine

    def tick() -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        if now - last_tick[0] > longest[0]:
            longest[0] = now - last_tick[0]
            worst[0] = (last_tick[0], now, step[0], cpu - last_cpu[0])
        if cpu - last_cpu[0] > busiest[0]:
            busiest[:] = [cpu - last_cpu[0], step[0]]
        last_tick[0], last_cpu[0] = now, cpu

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    timer.start()
    bubbles = 2 * args.replies
    gc.callbacks.append(on_gc)
    start = last_tick[0] = time.perf_counter()
    window.conversations.open(conv.id)
    returned = time.perf_counter() - start
    while window.conv.id != conv.id:
        app.processEvents()
    in_place = time.perf_counter() - start
    step[0] = "drawing earlier bubbles"
    first_drawn = len(window.chat.bubbles)
    while len(window.chat.bubbles) < bubbles or getattr(window.chat, "drawing_earlier", False):
        app.processEvents()
    step[0] = "settling (the last layout and paint)"
    for _ in range(50):  # the last layout and paint
        app.processEvents()
    all_drawn = time.perf_counter() - start
    gc.callbacks.remove(on_gc)
    print(f"{args.replies} replies of {args.tokens} tokens: open() returned after {1000 * returned:.0f} ms; the "
          f"chat was in place after {1000 * in_place:.0f} ms ({first_drawn} bubbles drawn); all {bubbles} drawn "
          f"after {all_drawn:.2f} s; the window was held {1000 * longest[0]:.0f} ms at most")
    if worst[0] is not None:
        lo, hi, where, cpu = worst[0]
        inside = [f"{what} {1000 * (min(b, hi) - max(a, lo)):.0f} ms" for what, a, b in spans if a < hi and b > lo]
        print(f"the longest stall: {where}, {1000 * (lo - start):.0f}-{1000 * (hi - start):.0f} ms after the click, "
              f"{1000 * cpu:.0f} ms of it on the GUI thread's CPU; timed in it: {', '.join(inside) or 'nothing'} "
              "(the rest: layout, paint, waiting for the GIL or a core)")
    print(f"the most GUI-thread CPU time between two ticks: {1000 * busiest[0]:.0f} ms, {busiest[1]} (what a "
          "quiet machine would stall; the wall-clock figures above grow with the load)")
    window.close()
    store.close()


def timed(cls: type, name: str, what: str, spans: list) -> None:
    """Record in `spans` each call of cls.name (patched before the window connects it)."""
    method = getattr(cls, name)

    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spans.append((what, began, time.perf_counter()))

    setattr(cls, name, wrapper)


if __name__ == "__main__":
    main()
