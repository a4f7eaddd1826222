"""How fast the conversation store saves a reply and lists the sidebar (printed, not asserted).

    .venv/bin/python bench/store_speed.py [--replies 200] [--conversations 1000] [--tokens 256]

Targets (issue 15): a save after 200 replies under 50 ms; listing 1,000 conversations under 100 ms.
For comparison it also times what the JSON-file store did: rewrite the whole conversation per reply,
and parse every file to list them.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from app.conversation import Conversation, Message
from app.data_files import atomic_write_text
from app.store import ConversationStore
from app.trace import ReplyTrace, RoundRecord, TokenRecord

STATES = ("accepted", "accepted", "accepted", "rejected", "corrected", "bonus")


def reply_trace(rng: random.Random, tokens: int) -> ReplyTrace:
    """A trace shaped like a real reply's: every token with three alternatives, a round per ~3 tokens."""
    records = [TokenRecord(rng.randrange(49152), rng.choice([" the", " a", "ing", " model", "."]),
                           rng.choice(STATES), i // 3, i % 3, rng.random(), rng.random(), rng.random(),
                           [(" x", rng.random()), (" y", rng.random()), (" z", rng.random())], i * 0.01)
               for i in range(tokens)]
    rounds = [RoundRecord(r, 3, 2, "corrected", "gamma", 3, 0.002, 0.02, 0.001, r * 0.03, 3 * r + 3)
              for r in range(tokens // 3)]
    stats = {"new_tokens": tokens, "tokens_per_s": 30.0, "rounds": len(rounds), "drafted": 3 * len(rounds)}
    return ReplyTrace(tokens=records, rounds=rounds, stats=stats, stop_reason="max_tokens", verifier="v",
                      drafter="d", baseline_tps=20.0)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=200)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=256, help="tokens per reply")
    args = parser.parse_args()
    rng = random.Random(0)
    traces = [reply_trace(rng, args.tokens) for _ in range(8)]  # reused: building them is not what we time

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = ConversationStore(root / "sqlite")
        conv = Conversation(title="long chat")
        save_ms = []
        for i in range(args.replies):
            conv.messages += [Message("user", f"question {i} " * 10),
                              Message("assistant", "answer " * 50, traces[i % len(traces)])]
            save_ms.append(timed(lambda: store.save(conv)))
        last = save_ms[-10:]
        print(f"SQLite store: save after reply {args.replies} ({args.tokens}-token traces): "
              f"median of the last 10 saves {statistics.median(last):.1f} ms (max {max(last):.1f} ms; "
              f"first save {save_ms[0]:.1f} ms)")
        conv.messages += [Message("user", "one more"), Message("assistant", "answer", traces[0])]
        gui_ms = timed(lambda: store.save_in_background(conv).add_done_callback(lambda f: f.result()))
        store.save(conv)
        print(f"  of which on the caller's (GUI) thread, save_in_background: {gui_ms:.1f} ms")
        size = sum(p.stat().st_size for p in (root / "sqlite").glob("conversations.sqlite3*"))
        print(f"  database size {size / 1e6:.1f} MB")

        json_file = root / "json" / "conversations" / f"{conv.id}.json"
        json_ms = [timed(lambda: atomic_write_text(json_file, json.dumps(conv.to_dict(), ensure_ascii=False)))
                   for _ in range(3)]
        print(f"JSON files (before): the same save rewrote {json_file.stat().st_size / 1e6:.1f} MB: "
              f"{statistics.median(json_ms):.0f} ms")

        for i in range(args.conversations):
            small = Conversation(title=f"chat {i}", messages=[Message("user", "hi"),
                                                              Message("assistant", "hello", traces[0])])
            store.save_in_background(small)
            atomic_write_text(root / "json" / "conversations" / f"{small.id}-{i}.json",
                              json.dumps(small.to_dict(), ensure_ascii=False))
        store.save(Conversation(title="last"))  # waits for the queue
        fresh = ConversationStore(root / "sqlite")
        list_ms = [timed(fresh.list) for _ in range(5)]
        print(f"SQLite store: list {len(fresh.list())} conversations: median {statistics.median(list_ms):.1f} ms")

        def list_json() -> None:
            out = []
            for p in (root / "json" / "conversations").glob("*.json"):
                d = json.loads(p.read_text(encoding="utf-8"))
                out.append((d["id"], d.get("title"), d.get("updated"), len(d.get("messages", []))))

        print(f"JSON files (before): list {args.conversations + 1} files: "
              f"{statistics.median([timed(list_json) for _ in range(3)]):.0f} ms")
        store.close()
        fresh.close()


if __name__ == "__main__":
    main()
