"""How long opening a long conversation holds the window (printed, not asserted).

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/open_chat.py [--replies 200] [--tokens 256]

Saves a conversation of N replies (each a trace of T tokens shaped like a real one: bench/store_speed.py) in a
temporary data folder, shows the window at 1024x700 and opens it from the sidebar's slot. A 10 ms QTimer on the
GUI thread records the longest gap between its ticks from the click until every bubble is drawn: how long a
click or a keypress would have waited at worst. Also printed: when `open` returned, when the chat was in place
(the window's conversation is the one opened, its last replies drawn), and when the last bubble was drawn.
Target (issue 25): the window held under 300 ms (it was 11-16 s on 2 busy cores).
"""

from __future__ import annotations

import argparse
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
    from app.store import Conversation, ConversationStore, Message, Settings
    from app.window import MainWindow

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

    def tick() -> None:
        now = time.perf_counter()
        longest[0] = max(longest[0], now - last_tick[0])
        last_tick[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    timer.start()
    bubbles = 2 * args.replies
    start = last_tick[0] = time.perf_counter()
    window.conversations.open(conv.id)
    returned = time.perf_counter() - start
    while window.conv.id != conv.id:
        app.processEvents()
    in_place = time.perf_counter() - start
    first_drawn = len(window.chat.bubbles)
    while len(window.chat.bubbles) < bubbles or getattr(window.chat, "drawing_earlier", False):
        app.processEvents()
    for _ in range(50):  # the last layout and paint
        app.processEvents()
    all_drawn = time.perf_counter() - start
    print(f"{args.replies} replies of {args.tokens} tokens: open() returned after {1000 * returned:.0f} ms; the "
          f"chat was in place after {1000 * in_place:.0f} ms ({first_drawn} bubbles drawn); all {bubbles} drawn "
          f"after {all_drawn:.2f} s; the window was held {1000 * longest[0]:.0f} ms at most")
    window.close()
    store.close()


if __name__ == "__main__":
    main()
