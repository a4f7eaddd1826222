"""The exported page in a real browser: headless Chromium loads it from a file, plays every scene to the end at
1000× ("#fast"), shows each recorded reply's exact text, and logs no console error. .ci/run installs Chromium
(README: test prerequisites); the test skips, saying so, only where no Chromium can be found."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from web_pages import SPECULATIVE, hand_trace

from app.speedup import race_key, race_spread
from app.trace import ReplyTrace
from app.web.page import write_web_page
from app.web.recording import Recording, note_scene, race_scene, reply_scene

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Virtual time: the page's timers run as fast as the browser can, with no wall-clock wait; the budget is far more
# than the recording's length at #fast.
BUDGET_MS = 60_000


def browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium found to play the exported page in: `apt-get install chromium` (.ci/run does)")


class Shown(HTMLParser):
    """The text of every .reply-text box, in document order, without the rejected drafts (<del>), and the page's
    status line and error list."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[str] = []
        self.errors: list[str] = []
        self.status = ""
        self._stack: list[str] = []  # what each open element is to us: "reply", "del", "errors", "status", ""

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        kind = ""
        if "reply-text" in (a.get("class") or "").split():
            kind = "reply"
            self.replies.append("")
        elif tag == "del":
            kind = "del"
        elif a.get("id") in ("errors", "status"):
            kind = a["id"]
        if tag not in ("br", "meta", "input", "img"):
            self._stack.append(kind)

    def handle_endtag(self, tag) -> None:
        if self._stack:
            self._stack.pop()

    def handle_data(self, data) -> None:
        if "del" in self._stack:
            return
        if "reply" in self._stack:
            self.replies[-1] += data
        elif "errors" in self._stack:
            self.errors.append(data)
        elif "status" in self._stack:
            self.status += data


def tiny_reply(session, prompt: str, speculate: bool) -> ReplyTrace:
    from app.runs import RunContext
    from specdec_core.config import GenerationConfig
    from specdec_core.engine import Engine

    config = GenerationConfig(max_new_tokens=24, gamma=4, speculate=speculate)
    ids = RunContext(session, [{"role": "user", "content": prompt}], None, config).prompt_ids()
    engine = Engine(session.verifier, session.drafter if speculate else None)
    trace = ReplyTrace(verifier="tiny-verifier", drafter="tiny-draft" if speculate else "")
    for event in engine.generate(ids, config):
        trace.apply(event)
    return trace


def play(page, tmp_path) -> tuple[Shown, str]:
    """(what the page shows after playing to the end, Chromium's log)."""
    proc = subprocess.run(
        [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         f"--user-data-dir={tmp_path / 'profile'}", f"--virtual-time-budget={BUDGET_MS}", "--enable-logging=stderr",
         "--v=0", "--dump-dom", page.as_uri() + "#fast"],
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = Shown()
    shown.feed(proc.stdout)
    return shown, proc.stderr


def test_the_exported_page_plays_to_the_end_in_chromium_with_the_exact_text(tmp_path, saved_trace, tiny_session):
    hand = hand_trace(SPECULATIVE, trees=True)
    off, on = tiny_reply(tiny_session, "Once upon a time", False), tiny_reply(tiny_session, "Once upon a time", True)
    traces = {race_key(False, 1): off, race_key(True, 1): on}
    spread = race_spread([(off.stats["tokens_per_s"], on.stats["tokens_per_s"], off.stats["new_tokens"])])
    recording = Recording("Recorded </script> talk")
    recording.add(reply_scene("Speculation, tiny models", saved_trace, prompt="Once upon a time"))
    recording.add(reply_scene("Every colour", hand, prompt="</script>"))
    recording.add(race_scene("Race", traces, spread, prompt="Once upon a time", identical=True))
    recording.add(note_scene("llama.cpp", ["No bench result on this machine."]))
    page = write_web_page(recording, tmp_path / "talk.html")

    shown, log = play(page, tmp_path)

    assert shown.status == "Played to the end."
    assert shown.errors == []
    assert ":CONSOLE" not in log, [line for line in log.splitlines() if ":CONSOLE" in line]
    # The replies' boxes in order: the two replies, then the race's bold pair (off, on).
    assert shown.replies == [saved_trace.text, hand.text, off.text, on.text]
