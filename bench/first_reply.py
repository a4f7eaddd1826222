"""How long the first reply of a fresh decoding process waits for its first token (printed, not asserted).

The app forks its decoding process (app/host.py) at the first reply after a load, and again whenever the session
or the draft head changes, so this wait is what a user sees after each of those. Each run forks a new host
over the same loaded session, as the window does, and times its first reply from the fork to the first
committed token.

    .venv/bin/python bench/first_reply.py [--runs 4] [--verifier SPEC --draft SPEC --drafter KIND]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads, as the app sets it

PROMPT = "Name three primary colours."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--verifier", default="")
    parser.add_argument("--draft", default="")
    parser.add_argument("--drafter", default="")
    args = parser.parse_args()

    from app.host import ReplyHost, why_not
    from app.session import LoadRequest, load_session, reply_events
    from app.settings import Settings
    from specdec_core.config import GenerationConfig
    from specdec_core.engine import Controls
    from specdec_core.events import TokenCommitted

    base = Settings()
    request = LoadRequest(verifier=args.verifier or base.verifier, draft=args.draft or base.draft,
                          drafter=args.drafter or base.drafter, calibrate=False)
    session = load_session(request, lambda step: None, lambda: False)
    reason = why_not(session)
    if reason:
        raise SystemExit(f"no decoding process here: {reason}")
    time.sleep(3.0)  # the chat-template renderer, started during the load, finishes booting (as in the app)
    messages, config = [{"role": "user", "content": PROMPT}], GenerationConfig(max_new_tokens=4)
    waits = []
    for run in range(args.runs):
        host = ReplyHost(session)
        start = time.perf_counter()
        if not host.start():
            raise SystemExit(f"the decoding process did not start: {host.failure}")
        first = None
        for event in host.run(reply_events, (messages, None, config), Controls()):
            if first is None and isinstance(event, TokenCommitted):
                first = time.perf_counter() - start
        host.close()
        waits.append(first or float("nan"))
        print(f"host {run + 1}: first token after {waits[-1]:.2f} s", flush=True)
    print(f"median {statistics.median(waits):.2f} s over {len(waits)} fresh hosts "
          f"({session.verifier.name}, {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
