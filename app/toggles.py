"""Speculation switched on or off in the middle of a reply (Ctrl+D): where it happened, and what that does to
the reply's figures. Qt-free.

The engine reads the switch at the start of each round; a round decoded with it off says so (its drafting stopped
"off"). A reply with rounds of both kinds is mixed: its tokens/s averages two ways of decoding, so it is not one
speedup, and the graphs mark each switch on their time and round axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

OFF = "off"  # DraftStop.OFF's value: the round did not speculate because the switch was off


class Round(Protocol):
    """What this module reads of a round (app.trace.RoundRecord; app/trace.py's summary reads this module, so
    it names no type of app/trace.py)."""

    stop: str  # how its drafting stopped: OFF when the switch was off
    t_end: float
    emitted: int


class Reply(Protocol):
    rounds: Sequence[Round]


@dataclass(frozen=True)
class Switch:
    position: int  # index in the reply's rounds of the first round after the switch
    t: float  # engine seconds at the switch: the end of the round before it
    on: bool  # whether speculation was on after it


def switch_between(before: Round | None, after: Round, position: int) -> Switch | None:
    """The switch between two consecutive rounds, if the second was decoded the other way."""
    if before is None or (before.stop == OFF) == (after.stop == OFF):
        return None
    return Switch(position, before.t_end, after.stop != OFF)


def switches(rounds: Sequence[Round]) -> list[Switch]:
    found = (switch_between(rounds[i - 1] if i else None, r, i) for i, r in enumerate(rounds))
    return [s for s in found if s is not None]


def mixed(trace: Reply) -> bool:
    return bool(switches(trace.rounds))


def mixed_words(trace: Reply) -> str:
    """What a mixed reply's footer says in place of a speedup."""
    found = switches(trace.rounds)
    if not found:
        return ""
    on = sum(r.emitted for r in trace.rounds if r.stop != OFF)
    total = sum(r.emitted for r in trace.rounds)
    times = "once" if len(found) == 1 else f"{len(found)} times"
    return f"mixed: speculation switched {times} mid-reply, on for {on} of {total} tokens, so no single speedup"
