"""The live graphs' header: the reply's tokens/s, its measured speedup against the verifier alone (± its own
spread), tokens per verifier call, and what the baseline was; as rich text, with the tooltip that explains it."""

from __future__ import annotations

import html

from app.graphs.figures import ReplyFigures
from app.trace import MIN_SPEEDUP_TOKENS

PAUSED_ROUNDS = 8  # rounds in a row without a draft (the cost model's call) before the header says so


def header_parts(f: ReplyFigures, switched: bool, like_for_like: bool) -> list[str]:
    """The header's figures, in order (`switched`: speculation was switched mid-reply)."""
    trace, tps, sp = f.trace, f.current_tps, f.measured_speedup
    parts = []
    if tps:
        parts.append(f"<b>{tps:.1f} tok/s</b>")
    spread = trace.rate_spread() if trace is not None else None
    if switched:  # tokens/s over decoding with and without speculation: no one ratio
        parts.append("mixed reply (speculation switched mid-reply): no single speedup")
    elif sp is not None and f.tally.drafted and spread is None:
        parts.append(f"too short for a speedup (under {MIN_SPEEDUP_TOKENS} tokens)")
    elif sp is not None and f.tally.drafted:
        if like_for_like:
            color = "rgb(46,160,67)" if sp >= 1.0 else "rgb(215,58,73)"
            parts.append(f"<b style='color:{color}'>{sp:.2f}×</b> ±{sp * spread:.2f} vs {f.baseline_tps:.1f} tok/s")
        else:  # a ratio against the load-time calibration is no verdict: said plainly, without colour
            parts.append(f"{sp:.2f}× ±{sp * spread:.2f} vs {f.baseline_tps:.1f} tok/s (not like for like)")
    elif sp is not None and trace is not None and trace.paused_rounds():
        # priced out: no draft ran, but speculation was on, and the footer shows what that reply's speed was
        parts.append(f"nothing drafted: {sp:.2f}× ±{sp * spread:.2f} vs {f.baseline_tps:.1f} tok/s" if spread
                     else f"nothing drafted ({sp:.2f}× the baseline)")
    elif sp is not None:
        parts.append(f"speculation off ({sp:.2f}× the baseline)")
    if f.tally.drafted and f.tally.rounds:
        parts.append(f"{f.tally.snapshot().mean_accepted_length:.2f} tokens per verifier call")
    if trace is not None and not trace.finished and trace.rounds:
        parts.append("so far")
    if paused_rounds(f) >= PAUSED_ROUNDS:
        parts.append("<b style='color:rgb(235,160,20)'>speculation paused: not paying here</b>")
    return parts


def paused_rounds(f: ReplyFigures) -> int:
    return f.trace.paused_rounds() if f.trace is not None else 0


def header_text(f: ReplyFigures, switched: bool, like_for_like: bool, how: str) -> str:
    """The header's rich text: the figures, and under them what the baseline was (`how`)."""
    head = " · ".join(header_parts(f, switched, like_for_like))
    how = how if (f.baseline_tps and f.trace is not None) else ""
    return head + (f"<br><span style='font-size:8pt'>baseline: {html.escape(how)}</span>" if how and head else "")


def header_tooltip(f: ReplyFigures, how: str) -> str:
    how = how if (f.baseline_tps and f.trace is not None) else ""
    paused = paused_rounds(f)
    return ("Tokens/s and the measured speedup of this reply against the verifier alone "
            "on this machine, and how far one verifier pass advanced the reply on average "
            "(the figure that does not depend on the machine). The ± is one standard error "
            "from this reply's own round-to-round spread (the baseline's is not in it); "
            f"replies under {MIN_SPEEDUP_TOKENS} tokens get no speedup. "
            + (f"Speculation paused: the last {paused} rounds drafted nothing, because on "
               "this machine checking a draft would cost more than it brings (the cost "
               "model); it drafts again as soon as a draft pays. " if paused >= PAUSED_ROUNDS
               else "")
            + (f"Baseline: {how}." if how else ""))
