"""Draw the README's draft tree (docs/img/draft-tree.png) from a real reply of the embedded pair.

The picture is the app's own tree view (app/tree_view.py, Talk ▸ Draft tree's PNG export), drawn offscreen:
the embedded verifier and its shipped draft (as a model drafter: the default hybrid drafts one token a round)
answer one prompt greedily with trees of a fixed size (`--tree-nodes`; the cost model's own sizes follow this
machine's timings, and a picture should not), and the script saves the round that shows the most of what a
tree round does (accepted candidates, one the verifier refused, some it never had to check, its own token),
or the round asked for. From the repository root:

    QT_QPA_PLATFORM=offscreen python3 scripts/draft_tree_png.py [--prompt TEXT] [--round N] [--tree-nodes N]
        [--scale S] [OUT]

Prints the rounds that grew a tree, the one drawn and the size of the PNG.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specdec_core.commands.threads import prefer_passive_waiting

prefer_passive_waiting()

from specdec_core.config import GenerationConfig  # noqa: E402
from specdec_core.pairs.pairing import load_pair  # noqa: E402
from specdec_core.text.chat import build_prompt  # noqa: E402

PROMPT = "Name three primary colours."  # one of issue 23's three prompts
OUT = Path(__file__).resolve().parent.parent / "docs" / "img" / "draft-tree.png"


def telling(rnd) -> tuple[bool, int, int]:
    """How well a round shows a tree at work, as a sort key: accepted candidates, one the verifier refused and
    some it never had to check, all in one round; then more accepted (up to 4); then fewer nodes."""
    checked = [n for n in rnd.tree if n.get("accept_prob") is not None]
    refused = any(not n.get("accepted") for n in checked)
    every_state = refused and len(checked) < len(rnd.tree) and rnd.accepted >= 2
    return every_state, min(rnd.accepted, 4), -len(rnd.tree)


def reply_trace(prompt: str, max_new_tokens: int, tree_nodes: int):
    from app.trace import ReplyTrace
    from specdec_core import defaults

    pair = load_pair(None, None, defaults.MODEL)
    ids = build_prompt(pair.verifier.tokenizer, [{"role": "user", "content": prompt}],
                       context_length=pair.verifier.context_length).ids
    trace = ReplyTrace(verifier=pair.verifier.name, drafter=pair.draft.name if pair.draft else "")
    for event in pair.engine.generate(ids, GenerationConfig(max_new_tokens=max_new_tokens, tree_nodes=tree_nodes,
                                                                     cost_aware=False)):
        trace.apply(event)
    return trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=OUT)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--round", type=int, help="the round to draw (1-based; default: the most telling)")
    parser.add_argument("--scale", type=float, default=1.25, help="type and boxes (1: the app's size)")
    parser.add_argument("--tree-nodes", type=int, default=12, help="candidates per round")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.tree_view import TreeDialog, tree_rounds

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    trace = reply_trace(args.prompt, args.max_new_tokens, args.tree_nodes)
    rounds = tree_rounds(trace)
    if not rounds:
        print("error: no round of this reply grew a draft tree", file=sys.stderr)
        return 1
    index = args.round - 1 if args.round else max(rounds, key=lambda i: (telling(trace.rounds[i]), -i))
    if index not in rounds:
        print(f"error: round {index + 1} drafted no tree (rounds with one: "
              f"{', '.join(str(i + 1) for i in rounds)})", file=sys.stderr)
        return 1
    print(f"reply: {trace.text!r}")
    print(f"rounds with a tree: {', '.join(str(i + 1) for i in rounds)}; drawing round {index + 1}")
    dialog = TreeDialog(trace, scale=args.scale, round_index=index)
    if not dialog.save_png(str(args.out)):
        print(f"error: could not write {args.out}", file=sys.stderr)
        return 1
    size = dialog.view.size()
    print(f"saved {args.out} ({size.width()}x{size.height()}, {args.out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
