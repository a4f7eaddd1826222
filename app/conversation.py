"""A conversation and its messages (each reply with its speculation trace), as saved and read back. Qt-free.

Everything read back is validated (app/validate.py): a damaged message or trace is dropped and described in
the conversation's `notices`, never fatal. A conversation written by a newer version (a higher `format`) is
read as far as it goes and marked read-only; fields this version does not know are kept and written back.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import MISSING, dataclass, field, fields

from app.trace import ReplyTrace, RoundRecord, TokenRecord
from app.validate import InvalidData, checked_fields, valid_text
from specdec_core.events import TokenState

FORMAT_VERSION = 1  # of one conversation (JSON export and rows); a higher one is read-only here
ROLES = ("user", "assistant", "system")


@dataclass
class Message:
    role: str  # "user" | "assistant"
    content: str
    trace: ReplyTrace | None = None  # assistant replies only
    created: float = field(default_factory=time.time)
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # fields a newer version wrote
    # A regenerated reply: the conversation's other versions from this reply on (app/branches.py), and
    # which of all of them this one is. Saved inside the message's `extra` column, so older versions keep them.
    branches: list[list[Message]] = field(default_factory=list)
    branch_index: int = 0

    def to_dict(self) -> dict:
        d = {**self.extra, "role": self.role, "content": self.content, "created": self.created}
        if self.trace is not None:
            d["trace"] = self.trace.to_dict()
        d.update(self.branch_fields())
        return d

    def branch_fields(self) -> dict:
        if not self.branches:
            return {}
        return {"branches": [[m.to_dict() for m in version] for version in self.branches],
                "branch_index": self.branch_index}

    @classmethod
    def from_dict(cls, d: object, problems: list[str] | None = None) -> Message:
        """Validated; InvalidData when `d` is not a message at all (a bad trace is only dropped)."""
        problems = [] if problems is None else problems
        known, unknown = checked_fields(cls, d, skip=("trace", "extra", "branches"), finite=True, problems=problems)
        if known.get("role") not in ROLES:
            raise InvalidData(f"a message needs a role ({', '.join(ROLES)})")
        trace = None
        if isinstance(d, dict) and d.get("trace"):
            try:
                trace = trace_from_dict(d["trace"])
            except InvalidData as error:
                problems.append(f"a reply's trace was dropped ({error})")
        branches = []
        for version in d.get("branches", []) if isinstance(d, dict) and isinstance(d.get("branches"), list) else []:
            try:
                if not isinstance(version, list) or not version:
                    raise InvalidData("it is not a list of messages")
                branches.append([cls.from_dict(m, problems) for m in version])
            except InvalidData as error:
                problems.append(f"an earlier version of a reply was dropped ({error})")
        index = min(max(known.get("branch_index", 0), 0), len(branches))
        return cls(role=known["role"], content=known.get("content", ""), trace=trace,
                   created=known.get("created", 0.0), extra=unknown, branches=branches, branch_index=index)


@dataclass
class Conversation:
    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    system: str = ""
    messages: list[Message] = field(default_factory=list)
    # Not part of the conversation's content:
    format: int = field(default=FORMAT_VERSION, compare=False, repr=False)
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # fields a newer version wrote
    read_only: bool = field(default=False, compare=False, repr=False)  # written by a newer version
    notices: list[str] = field(default_factory=list, compare=False, repr=False)  # what loading dropped

    def chat_messages(self) -> list[dict]:
        """What the models see: roles and texts (a reply's text is its committed tokens)."""
        return [{"role": m.role, "content": m.content} for m in self.messages if m.content or m.role == "user"]

    def prompt_messages(self, prompt: str) -> list[dict] | str:
        """The chat messages a run sends: these plus `prompt` as the user's turn, or (no prompt) these up to the
        last user turn; else a sentence saying why there are none."""
        messages = self.chat_messages()
        if prompt.strip():
            return messages + [{"role": "user", "content": prompt.strip()}]
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
        if last_user is None:
            return "Type a prompt in the composer (or send one first)."
        return messages[: last_user + 1]

    def auto_title(self) -> None:
        if self.title == "New chat":
            first = next((m.content for m in self.messages if m.role == "user" and m.content.strip()), "")
            if first:
                line = " ".join(first.split())
                self.title = line[:48] + ("…" if len(line) > 48 else "")

    def full_title(self) -> str:
        """The title as exports write it: an automatic title cut short with "…" is its first message whole."""
        if self.title.endswith("…"):
            first = next((m.content for m in self.messages if m.role == "user" and m.content.strip()), "")
            line = " ".join(first.split())
            if len(line) >= len(self.title) and line.startswith(self.title[:-1]):
                return line
        return self.title

    def to_dict(self) -> dict:
        return {**self.extra, "format": max(self.format, FORMAT_VERSION), "id": self.id, "title": self.title,
                "created": self.created, "updated": self.updated, "system": self.system,
                "messages": [m.to_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, d: object) -> Conversation:
        """Validated. InvalidData when `d` is not a conversation; a bad message or trace is dropped and
        described in `notices`. A newer format is read as far as it goes and marked read-only."""
        problems: list[str] = []
        known, unknown = checked_fields(cls, d, skip=("messages", "read_only", "notices", "extra"), finite=True,
                                        problems=problems)
        if not check_id(known.get("id")):
            raise InvalidData("it has no valid id")
        fmt = known.get("format", 1)
        if fmt < 1:
            raise InvalidData(f"unknown format {fmt}")
        raw_messages = d.get("messages", []) if isinstance(d, dict) else []
        if not isinstance(raw_messages, list):
            raise InvalidData("its messages are not a list")
        messages = []
        for i, m in enumerate(raw_messages):
            try:
                messages.append(Message.from_dict(m, problems))
            except InvalidData as error:
                problems.append(f"message {i + 1} was dropped ({error})")
        conv = cls(id=known["id"], title=known.get("title", "Untitled"), created=known.get("created", 0.0),
                   updated=known.get("updated", 0.0), system=known.get("system", ""), messages=messages,
                   format=fmt, extra=unknown)
        conv.notices = [f"“{conv.title}”: {p}" for p in problems]
        if fmt > FORMAT_VERSION:
            conv.read_only = True
            conv.notices.insert(0, f"“{conv.title}” was saved by a newer version of specdec (format {fmt}); "
                                   "it is open read-only, so nothing of it is lost")
        return conv


def check_id(conv_id: object) -> bool:
    return (isinstance(conv_id, str) and 0 < len(conv_id) <= 200 and valid_text(conv_id)
            and not any(c in conv_id for c in "/\\\0") and not conv_id.startswith("."))


def trace_from_dict(data: object) -> ReplyTrace:
    """A ReplyTrace from JSON, every field checked; records with bad fields are dropped."""
    problems: list[str] = []
    known, _ = checked_fields(ReplyTrace, data, skip=("tokens", "rounds"), problems=problems)
    assert isinstance(data, dict)
    tokens = [TokenRecord(**r) for r in _records(TokenRecord, data.get("tokens", []))]
    rounds = [RoundRecord(**r) for r in _records(RoundRecord, data.get("rounds", []))]
    trace = ReplyTrace(**known, tokens=tokens, rounds=rounds)
    try:
        trace.summary()  # reads the stats dict
    except (TypeError, ValueError, AttributeError, ZeroDivisionError):
        trace.stats = None
    return trace

_REQUIRED: dict[type, tuple[str, ...]] = {}


def _records(cls: type, items: object) -> list[dict]:
    if not isinstance(items, list):
        raise InvalidData(f"{cls.__name__} records are not a list")
    required = _REQUIRED.setdefault(cls, tuple(f.name for f in fields(cls)
                                                if f.default is MISSING and f.default_factory is MISSING))
    out = []
    for item in items:
        known, _ = checked_fields(cls, item)
        if all(name in known for name in required) and _plausible(known):
            out.append(known)
    if len(out) < len(items):
        raise InvalidData(f"{len(items) - len(out)} of {len(items)} {cls.__name__} records are damaged")
    return out


_STATES = frozenset(state.value for state in TokenState)
_MAX_COUNT = 4096  # draft tokens per round and the like: the graphs size their buffers by these


def _plausible(record: dict) -> bool:
    """Values a record can really have: counts and indices are small and not negative (the graphs grow a
    histogram to the largest γ they see), states are TokenState values."""
    for key, value in record.items():
        if isinstance(value, int) and not isinstance(value, bool) and key != "token_id":
            if not 0 <= value <= (_MAX_COUNT if key in ("drafted", "accepted", "gamma", "position") else 10**9):
                return False
    if record.get("state", "accepted") not in _STATES or record.get("emitted_state", "accepted") not in _STATES:
        return False
    return not ("accepted" in record and "drafted" in record and record["accepted"] > record["drafted"])


@dataclass(frozen=True)
class ConversationInfo:
    id: str
    title: str
    updated: float
    messages: int
    read_only: bool = False
