"""A talk's record: the replies and races a demo ran, as plain JSON-ready data that the web page replays.

Every figure comes from the ReplyTrace the app kept (app/trace.py). A token's time is when the round that emitted it
ended, in engine seconds from the start of decoding (the engine yields a round's verdict before its tokens), so the
page replays a reply at the pace it was generated. Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.speedup import RaceSpread, median_run, race_key
from app.trace import ReplyTrace, RoundRecord
from specdec_core.events import TokenState

ACCEPTED, REJECTED = TokenState.ACCEPTED.value, TokenState.REJECTED.value
CORRECTED, BONUS, PLAIN = TokenState.CORRECTED.value, TokenState.BONUS.value, TokenState.PLAIN.value
UNCHECKED = "unchecked"  # a tree candidate the verifier's pass never reached


def _round6(x: float) -> float:
    return round(float(x), 6)


def figures(trace: ReplyTrace) -> dict:
    """A reply's headline figures as the app states them (its footer's summary line among them)."""
    s = trace.stats or {}
    tps = float(s.get("tokens_per_s") or trace.running_tps())
    return {
        "tokens": int(s.get("new_tokens") or sum(1 for t in trace.tokens if t.in_reply)),
        "tokens_per_s": tps,
        "acceptance": float(s["acceptance_rate"]) if s.get("drafted") else None,
        "tokens_per_call": float(s.get("mean_accepted_length") or 0.0),
        "speedup": trace.speedup() if trace.speculative else None,
        "summary": trace.summary(),
    }


def _decode_s(trace: ReplyTrace) -> float:
    return float((trace.stats or {}).get("decode_s") or 0.0)


def tokens_of(trace: ReplyTrace) -> list[list]:
    """[text, state, round, seconds] for every token shown, rejected drafts included, in the order they came.
    A reply with no rounds (a draft writing alone) kept only its total time: its tokens are spread evenly over it."""
    if not trace.rounds and _decode_s(trace) > 0:
        step = _decode_s(trace) / max(1, len(trace.tokens))
        return [[t.text, t.state, t.round, _round6((i + 1) * step)] for i, t in enumerate(trace.tokens)]
    return [[t.text, t.state, t.round, _round6(t.t)] for t in trace.tokens]


def curve_of(trace: ReplyTrace) -> list[list[float]]:
    """[engine seconds, reply tokens] at the end of each round, from [0, 0] (a reply with no rounds: at its end)."""
    if not trace.rounds and _decode_s(trace) > 0:
        return [[0.0, 0], [_round6(_decode_s(trace)), sum(1 for t in trace.tokens if t.in_reply)]]
    return [[0.0, 0]] + [[_round6(r.t_end), r.tokens_after] for r in trace.rounds]


def best_round(trace: ReplyTrace) -> RoundRecord | None:
    """The round worth showing: a tree round where the reply has any, the one that accepted the most drafts, the
    first of equals."""
    drafted = [r for r in trace.rounds if r.drafted or r.tree]
    if not drafted:
        return None
    return max(drafted, key=lambda r: (bool(r.tree), r.accepted, -r.index))


def round_nodes(trace: ReplyTrace, record: RoundRecord) -> list[dict]:
    """A round as a tree of {text, parent, state}: a tree round's candidates, or a chain's drafts one under the
    other; then the verifier's own token (correction or bonus) under the last accepted one."""
    nodes: list[dict] = []
    if record.tree:
        for node in record.tree:
            state = ACCEPTED if node.get("accepted") else (UNCHECKED if node.get("accept_prob") is None else REJECTED)
            nodes.append({"text": node.get("text", ""), "parent": int(node.get("parent", -1)), "state": state})
    mine = [t for t in trace.tokens if t.round == record.index]
    if not record.tree:
        for t in mine:
            if t.state in (ACCEPTED, REJECTED):
                nodes.append({"text": t.text, "parent": len(nodes) - 1, "state": t.state})
    last_accepted = max((i for i, n in enumerate(nodes) if n["state"] == ACCEPTED), default=-1)
    for t in mine:
        if t.state in (CORRECTED, BONUS):
            nodes.append({"text": t.text, "parent": last_accepted, "state": t.state})
    return nodes


def reply_scene(title: str, trace: ReplyTrace, prompt: str = "", note: str = "") -> dict:
    """One reply, to be replayed token by token at its recorded pace, with its best round drawn as a tree."""
    best = best_round(trace)
    return {
        "kind": "reply", "title": title, "note": note, "prompt": prompt,
        "verifier": trace.verifier, "drafter": trace.drafter,
        "tokens": tokens_of(trace), "curve": curve_of(trace), "figures": figures(trace),
        "round": None if best is None else {"index": best.index, "tree": bool(best.tree),
                                            "nodes": round_nodes(trace, best)},
        "error": trace.error,
    }


@dataclass(frozen=True)
class RecordedLane:
    key: str
    title: str
    trace: ReplyTrace
    color: str = ""  # a CSS colour; "" lets the page pick by the lane's kind
    faint: bool = False  # drawn thin and pale: a race's other pairs beside its median pair


def lanes_scene(title: str, lanes: list[RecordedLane], prompt: str = "", note: str = "", result: str = "",
                headline: str = "") -> dict:
    """Several runs on one shared clock (engine seconds from each run's start): a race, or good and poor drafters.
    Faint lanes are drawn as curves only; the others also replay their text."""
    return {
        "kind": "lanes", "title": title, "note": note, "prompt": prompt, "result": result, "headline": headline,
        "lanes": [{"key": ln.key, "title": ln.title, "color": ln.color, "faint": ln.faint,
                   "tokens": [] if ln.faint else tokens_of(ln.trace), "curve": curve_of(ln.trace),
                   "figures": figures(ln.trace)} for ln in lanes],
    }


def median_pair(traces: dict[str, ReplyTrace]) -> int:
    """The race pair (1, 2, ...) whose speedup is the median of the finished pairs' (speedup.median_run); 1 when
    none finished."""
    return median_run(traces, "off", "on") or 1


def race_scene(title: str, traces: dict[str, ReplyTrace], spread: RaceSpread | None, prompt: str = "",
               note: str = "", identical: bool | None = None) -> dict:
    """A race: its median pair's two replies replayed side by side, every pair's curves drawn (the others
    faint), and the median speedup with its spread as the headline."""
    n = median_pair(traces)
    lanes = []
    for key, trace in traces.items():
        side, _, pair = key.partition(" ")  # race_key: "off", "on", "off 2", ...
        bold = key in (race_key(False, n), race_key(True, n))
        lanes.append(RecordedLane(key, f"speculation {side}, pair {pair or 1}" + (" (the median)" if bold else ""),
                                  trace, "", faint=not bold))
    lanes.sort(key=lambda ln: (ln.faint, ln.key))
    headline = result = ""
    if spread is not None:
        headline = f"{spread.speedup:.2f}×"
        result = (f"{spread.tps_off:.1f} → {spread.tps_on:.1f} tokens/s · {spread.spread_words()}"
                  + ("" if identical is None else " · identical text" if identical else " · the texts differ"))
    return {**lanes_scene(title, lanes, prompt, note, result, headline), "race": True}


def note_scene(title: str, lines: list[str], note: str = "", headline: str = "") -> dict:
    """Words and figures with nothing to replay (theory against measured, a comparison with llama.cpp)."""
    return {"kind": "note", "title": title, "note": note, "lines": list(lines), "headline": headline}


@dataclass
class Recording:
    """What a talk showed, scene after scene, ready to be written as a web page."""

    title: str = "Speculative decoding, recorded"
    scenes: list[dict] = field(default_factory=list)

    def add(self, scene: dict) -> dict:
        self.scenes.append(scene)
        return scene

    def __bool__(self) -> bool:
        return bool(self.scenes)

    def headline(self) -> dict:
        """The page's headline: the last race's median speedup, else the last reply's tokens/s and speedup."""
        for scene in reversed(self.scenes):
            if scene.get("race") and scene.get("headline"):
                return {"big": scene["headline"], "words": scene.get("result", ""), "scene": scene["title"]}
        for scene in reversed(self.scenes):
            if scene["kind"] == "reply" and scene["figures"]["tokens_per_s"]:
                f = scene["figures"]
                big = f"{f['tokens_per_s']:.1f} tok/s" + (f" · {f['speedup']:.2f}×" if f["speedup"] else "")
                return {"big": big, "words": f["summary"], "scene": scene["title"]}
        return {"big": "", "words": "", "scene": ""}

    def to_json(self) -> dict:
        return {"format": "specdec-recording", "version": 1, "title": self.title, "headline": self.headline(),
                "scenes": self.scenes}
