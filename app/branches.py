"""Regenerated replies as branches: every version of the conversation from a reply on is kept, and any of
them can be shown again. Qt-free; works on the conversation's list of messages.

The messages shown are the live version. Its first message (the reply) holds the others in `branches`
(each a list of messages starting with that version's reply) and says in `branch_index` where it stands
among all of them, so "2 of 3" reads the same whichever version is shown.
"""

from __future__ import annotations

from app.conversation import Message


def versions_at(messages: list[Message], index: int) -> list[list[Message]]:
    """Every version of the conversation from reply `index` on, in order, the live one included."""
    head = messages[index]
    versions = list(head.branches)
    versions.insert(min(head.branch_index, len(versions)), messages[index:])
    return versions


def _show(messages: list[Message], index: int, versions: list[list[Message]], which: int) -> None:
    for version in versions:
        version[0].branches, version[0].branch_index = [], 0
    shown = versions.pop(which)
    shown[0].branches, shown[0].branch_index = versions, which
    messages[index:] = shown


def set_aside(messages: list[Message], index: int) -> list[list[Message]]:
    """Regenerate reply `index`: take it (and what followed it) out of the conversation, keeping every
    version so far for the new reply (see `attach`). Versions that wrote nothing are not kept."""
    versions = [v for v in versions_at(messages, index) if v[0].content or len(v) > 1]
    for version in versions:
        version[0].branches, version[0].branch_index = [], 0
    del messages[index:]
    return versions


def attach(reply: Message, versions: list[list[Message]]) -> None:
    """The new reply is the latest version; the earlier ones become its branches."""
    reply.branches, reply.branch_index = versions, len(versions)


def flip(messages: list[Message], index: int, step: int) -> bool:
    """Show the previous (step -1) or next (+1) version from reply `index` on; False at either end."""
    versions = versions_at(messages, index)
    which = messages[index].branch_index + step
    if not 0 <= which < len(versions):
        return False
    _show(messages, index, versions, which)
    return True


def drop_failed(messages: list[Message], reply: Message) -> None:
    """A regenerated reply that failed before writing anything: show the latest earlier version again."""
    if messages and messages[-1] is reply:
        messages.pop()
        if reply.branches:
            index = len(messages)
            messages.extend(reply.branches[-1])
            _show(messages, index, [*reply.branches[:-1], messages[index:]], len(reply.branches) - 1)


def position(message: Message) -> tuple[int, int]:
    """(which version this is, from 1; how many there are)."""
    return message.branch_index + 1, len(message.branches) + 1


def restore(messages: list[Message], versions: list[list[Message]]) -> bool:
    """A regenerate that could not start: the versions it set aside come back as the reply (True if any)."""
    if not versions:
        return False
    placeholder = Message("assistant", "")
    attach(placeholder, versions)
    messages.append(placeholder)
    drop_failed(messages, placeholder)
    return True
