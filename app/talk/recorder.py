"""What talk mode records for *Export as web page*: each demo's run, turned into a scene of app/web's Recording
as it finishes (a race, what makes it slow), and the reply on screen when nothing was recorded.

The scenes are built from the same ReplyTrace records the views drew, so the page replays what the room saw.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from app.trace import ReplyTrace
from app.web.page import write_web_page
from app.web.recording import RecordedLane, Recording, lanes_scene, race_scene, reply_scene

WEB_FILTER = "Web page (*.html)"


def prompt_before(messages: list, trace: ReplyTrace) -> str:
    """The user's message that `trace`'s reply answered ("" when it is not in `messages`)."""
    for i, m in enumerate(messages):
        if m.trace is trace:
            return next((p.content for p in reversed(messages[:i]) if p.role == "user"), "")
    return ""


def race_view_scene(view) -> dict | None:
    """A finished RaceView (app/talk/race.py) as a race scene; None when it has no result."""
    if view.run is None or view.result is None:
        return None
    ctx = view.ctx
    return race_scene("Race: speculation off vs on", dict(view.run.traces), view.result.spread,
                      prompt=ctx.prompt_text if ctx else "", identical=view.result.identical,
                      note=f"{view.result.spread.pairs} alternating runs each; the bold pair is the median one")


def slow_view_scene(view) -> dict | None:
    """A finished SlowDemoView (app/talk/slow_demo.py) as a lanes scene, each lane in the colour it had."""
    from app.talk.slow_demo import LANE_COLORS

    if view.run is None or not view.results:
        return None
    drawn = view.drawn_traces()  # each kind's median run, as the view draws it
    lanes = [RecordedLane(lane.key, lane.title, drawn[lane.key], color.name())
             for lane, color in zip(view.lanes, LANE_COLORS)]
    rows = [f"{lane.title}: {view.results[lane.key][2]:.2f}×" for lane in view.lanes
            if lane.key != "off" and lane.key in view.results]
    weak = view.results.get("weak")
    ctx = view.ctx
    return lanes_scene("What makes it slow", lanes, prompt=ctx.prompt_text if ctx else "",
                       result=" · ".join(rows), note="Speedups against the verifier alone, on this machine",
                       headline=f"{weak[2]:.2f}×" if weak else "")


class Recorder:
    """Talk mode's recording, and the export that writes it."""

    def __init__(self, title: str = "Speculative decoding, recorded") -> None:
        self.recording = Recording(title)

    def add(self, scene: dict | None) -> None:
        if scene is not None:
            self.recording.add(scene)

    def clear(self) -> None:
        self.recording.scenes.clear()

    def to_export(self, current: ReplyTrace | None, prompt: str = "") -> Recording | None:
        """What the page shows: the recording, else the reply on screen, else nothing."""
        if self.recording:
            return self.recording
        if current is None or not current.tokens:
            return None
        single = Recording(self.recording.title)
        single.add(reply_scene("A reply, replayed", current, prompt=prompt))
        return single

    def export(self, parent: QWidget, current: ReplyTrace | None, prompt: str, say: Callable[[str], None],
               path: str | None = None) -> Path | None:
        recording = self.to_export(current, prompt)
        if recording is None:
            say("Nothing to export yet: send a message, run a race or run the demo first.")
            return None
        if path is None:
            path, _ = QFileDialog.getSaveFileName(parent, "Export as web page", "specdec-talk.html", WEB_FILTER)
            if not path:
                return None
        try:
            return write_web_page(recording, path)
        except (OSError, ValueError) as exc:
            say(f"Could not write the web page {path}: {exc}")
            return None
