"""The shown reply's headline for a room: its tokens/s and its speedup, each short enough to be set large, and one
line of small print that says what the speedup is against (or why there is none). Qt-free.

Presenter mode sets these two figures at a size read from the back of a room, where a figure reads as a verdict:
so a speedup is given there only against a like-for-like baseline (the same prompt length, process and load). A
ratio against the load's calibration, a mixed reply (speculation switched mid-reply) or one too short to time gets
no big figure; the small print says why, as the graphs' header does.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.graphs.figures import ReplyFigures
from app.trace import MIN_SPEEDUP_TOKENS

FASTER, SLOWER = "rgb(46,160,67)", "rgb(215,58,73)"  # the header's colours for a like-for-like speedup


@dataclass(frozen=True)
class Headline:
    tps: str = ""  # "12.5 tok/s"; "" before the reply has a rate
    speedup: str = ""  # "1.32×"; "" when no like-for-like speedup can be given
    color: str = ""  # the speedup's colour: FASTER or SLOWER
    note: str = ""  # the small print: what the speedup is against, or why there is none


def headline_of(f: ReplyFigures, switched: bool, like_for_like: bool) -> Headline:
    """The headline of the reply `f` holds (`switched`: speculation was switched mid-reply; `like_for_like`: the
    baseline is the verifier alone on the same footing)."""
    tps = f"{f.current_tps:.1f} tok/s" if f.current_tps else ""
    trace, sp = f.trace, f.measured_speedup
    if trace is None or not trace.rounds:
        return Headline(tps)
    so_far = "" if trace.finished else " · so far"
    if switched:
        return Headline(tps, note="mixed reply: speculation was switched mid-reply, so no single speedup" + so_far)
    if not f.tally.drafted:
        return Headline(tps, note=("speculation paused: drafts do not pay here" if trace.paused_rounds()
                                   else "speculation off") + so_far)
    spread = trace.rate_spread()
    if sp is None:
        return Headline(tps, note="no speedup until the verifier alone has been timed" + so_far)
    if spread is None:
        return Headline(tps, note=f"too short for a speedup (under {MIN_SPEEDUP_TOKENS} tokens)" + so_far)
    if not like_for_like:
        return Headline(tps, note=f"{sp:.2f}× against the load's calibration, not like for like: "
                                  "race it for a speedup" + so_far)
    return Headline(tps, f"{sp:.2f}×", FASTER if sp >= 1.0 else SLOWER,
                    f"±{sp * spread:.2f} against the verifier alone at {f.baseline_tps:.1f} tok/s" + so_far)
