"""Regenerate keeps the earlier replies as branches: flip between them, and they survive a reopen."""

from __future__ import annotations

import json
import sqlite3

from app import branches
from app.conversation import Message
from app.store import ConversationStore


def test_regenerating_keeps_every_version_and_flipping_shows_each_with_what_followed_it():
    msgs = [Message("user", "Hi"), Message("assistant", "one"), Message("user", "more"), Message("assistant", "x")]
    versions = branches.set_aside(msgs, 1)
    assert [m.content for m in msgs] == ["Hi"]
    second = Message("assistant", "two")
    branches.attach(second, versions)
    msgs.append(second)
    assert branches.position(msgs[1]) == (2, 2)
    assert branches.flip(msgs, 1, -1)
    assert [m.content for m in msgs] == ["Hi", "one", "more", "x"]  # the first version, with its follow-up
    assert branches.position(msgs[1]) == (1, 2) and not branches.flip(msgs, 1, -1)
    third_versions = branches.set_aside(msgs, 1)  # regenerate while the first version is shown
    third = Message("assistant", "three")
    branches.attach(third, third_versions)
    msgs.append(third)
    assert branches.position(third) == (3, 3)
    seen = []
    while branches.flip(msgs, 1, -1):
        seen.append(msgs[1].content)
    assert seen == ["two", "one"]


def test_a_failed_regeneration_shows_the_earlier_version_again():
    msgs = [Message("user", "Hi"), Message("assistant", "one")]
    reply = Message("assistant", "")
    branches.attach(reply, branches.set_aside(msgs, 1))
    msgs.append(reply)
    branches.drop_failed(msgs, reply)
    assert [m.content for m in msgs] == ["Hi", "one"] and branches.position(msgs[1]) == (1, 1)


def test_branches_survive_the_store_inside_the_messages_extra_column(tmp_path):
    from app.conversation import Conversation

    conv = Conversation()
    conv.messages = [Message("user", "Hi"), Message("assistant", "one")]
    reply = Message("assistant", "two")
    branches.attach(reply, branches.set_aside(conv.messages, 1))
    conv.messages.append(reply)
    store = ConversationStore(tmp_path)
    store.save(conv)
    back = ConversationStore(tmp_path).load(conv.id)
    assert branches.position(back.messages[1]) == (2, 2)
    assert back.messages[1].branches[0][0].content == "one"
    # Kept in the message's `extra` JSON, which a version without branches reads as fields it does not know
    # and writes back unchanged: no schema change.
    conn = sqlite3.connect(tmp_path / "conversations.sqlite3")
    extra = json.loads(conn.execute("SELECT extra FROM messages WHERE position = 1").fetchone()[0])
    conn.close()
    assert extra["branches"][0][0]["content"] == "one" and extra["branch_index"] == 1
    assert branches.flip(back.messages, 1, -1) and back.messages[1].content == "one"
    store.save(back)
    assert ConversationStore(tmp_path).load(conv.id).messages[1].content == "one"


def test_regenerate_in_the_window_offers_both_replies(make_window, qtbot, send_and_wait):
    w = make_window(max_new_tokens=8, temperature=1.0)
    first = send_and_wait(w, "Hello")
    with qtbot.waitSignal(w.reply_finished, timeout=60_000):
        w.regenerate(None)
    bubble = w.chat.bubbles[-1]
    assert bubble.branch == (2, 2) and bubble.branch_label.text() == "2/2" and bubble.branch_buttons[0].isEnabled()
    bubble.branch_buttons[0].click()
    assert w.conv.messages[-1].trace is first and w.chat.bubbles[-1].branch == (1, 2)
    w.store.save(w.conv)
    reopened = w.store.load(w.conv.id)
    assert branches.position(reopened.messages[-1]) == (1, 2)
