"""Flipping between the versions of a regenerated reply shows that version's figures on the status line."""

from __future__ import annotations

from app import branches
from app.conversation import Message
from app.trace import ReplyTrace, RoundRecord, TokenRecord


def reply(text: str, tokens_per_s: float) -> Message:
    trace = ReplyTrace(stop_reason="eos")
    trace.tokens = [TokenRecord(0, text, "plain", 0, 0, None, 0.5, None)]
    trace.rounds = [RoundRecord(0, 0, 0, "plain", "off", 0, 0.0, 0.1, 0.0, 0.1, 1)]
    trace.stats = {"new_tokens": 1, "rounds": 1, "tokens_per_s": tokens_per_s}
    return Message("assistant", text, trace)


def test_the_status_line_shows_the_figures_of_the_version_flipped_to(make_window):
    w = make_window(load=False)
    w.conv.messages = [Message("user", "Hi"), reply("one", 11.0)]
    versions = branches.set_aside(w.conv.messages, 1)
    for text, tps in (("two", 22.0), ("three", 33.0)):
        latest = reply(text, tps)
        branches.attach(latest, versions)
        w.conv.messages.append(latest)
        versions = branches.set_aside(w.conv.messages, 1)
    branches.attach(latest, versions[:-1])
    w.conv.messages.append(latest)
    w.conversations.render()
    w.say(latest.trace.summary())  # as a reply that just ended leaves it
    assert "33.0 tok/s" in w.status_label.text()

    w.conversations.flip_branch(w.chat.bubbles[-1], -1)
    assert w.chat.bubbles[-1].branch == (2, 3)
    assert w.status_label.text() == w.conv.messages[1].trace.summary() and "22.0 tok/s" in w.status_label.text()
    w.conversations.flip_branch(w.chat.bubbles[-1], -1)
    assert "11.0 tok/s" in w.status_label.text()
