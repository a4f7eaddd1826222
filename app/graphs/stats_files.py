"""A reply's per-round stats as CSV or JSON (File ▸ Export ▸ stats). Qt-free."""

from __future__ import annotations

import csv
import io
import json

from app.trace import ReplyTrace


def stats_csv(trace: ReplyTrace) -> str:
    out = io.StringIO()
    rows = [
        {"round": r.index + 1, "gamma": r.gamma, "drafted": r.drafted, "accepted": r.accepted,
         "emitted": r.emitted_state, "draft_stop": r.stop, "draft_ms": round(r.draft_s * 1e3, 3),
         # drafting done during the prefill that the round did not wait for (round 1 of a separate draft model)
         "draft_ahead_ms": round(r.hidden_draft_s * 1e3, 3),
         "verify_ms": round(r.verify_s * 1e3, 3), "overhead_ms": round(r.overhead_s * 1e3, 3),
         "t_end_s": round(r.t_end, 5), "tokens_after": r.tokens_after}
        for r in trace.rounds
    ]
    fieldnames = list(rows[0]) if rows else ["round"]
    w = csv.DictWriter(out, fieldnames=fieldnames)
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def stats_json(trace: ReplyTrace) -> str:
    return json.dumps({"stats": trace.stats, "baseline_tps": trace.baseline_tps,
                       "measured_speedup": trace.speedup(), "verifier": trace.verifier,
                       "drafter": trace.drafter, "config": trace.config,
                       "rounds": [r.__dict__ for r in trace.rounds]}, indent=2)
