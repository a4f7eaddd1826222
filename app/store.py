"""Saved conversations (with each reply's speculation trace), app settings, and exports. Qt-free.

Layout under the data directory (platformdirs' user data dir, or $SPECDEC_DATA_DIR):
    conversations/<id>.json    one conversation: messages, and each assistant reply's ReplyTrace
    settings.json              the app's settings

Every write is atomic: the JSON goes to a temp file in the same folder, is fsync'ed, then os.replace'd
over the old file. A crash or a full disk mid-write leaves the previous version intact.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from app.trace import ReplyTrace
from specdec_core import defaults

FORMAT_VERSION = 1


def data_dir() -> Path:
    env = os.environ.get("SPECDEC_DATA_DIR")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("specdec", appauthor=False))


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# ---- conversations ------------------------------------------------------------------------------

@dataclass
class Message:
    role: str  # "user" | "assistant"
    content: str
    trace: ReplyTrace | None = None  # assistant replies only
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        d = {"role": self.role, "content": self.content, "created": self.created}
        if self.trace is not None:
            d["trace"] = self.trace.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Message:
        trace = ReplyTrace.from_dict(d["trace"]) if d.get("trace") else None
        return cls(role=d["role"], content=d.get("content", ""), trace=trace, created=d.get("created", 0.0))


@dataclass
class Conversation:
    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    system: str = ""
    messages: list[Message] = field(default_factory=list)

    def chat_messages(self) -> list[dict]:
        """What the models see: roles and texts (a reply's text is its committed tokens)."""
        return [{"role": m.role, "content": m.content} for m in self.messages if m.content or m.role == "user"]

    def auto_title(self) -> None:
        if self.title == "New chat":
            first = next((m.content for m in self.messages if m.role == "user" and m.content.strip()), "")
            if first:
                line = " ".join(first.split())
                self.title = line[:48] + ("…" if len(line) > 48 else "")

    def to_dict(self) -> dict:
        return {"format": FORMAT_VERSION, "id": self.id, "title": self.title, "created": self.created,
                "updated": self.updated, "system": self.system,
                "messages": [m.to_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, d: dict) -> Conversation:
        return cls(id=d["id"], title=d.get("title", "Untitled"), created=d.get("created", 0.0),
                   updated=d.get("updated", 0.0), system=d.get("system", ""),
                   messages=[Message.from_dict(m) for m in d.get("messages", [])])


@dataclass(frozen=True)
class ConversationInfo:
    id: str
    title: str
    updated: float
    messages: int


class ConversationStore:
    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else data_dir()
        self.folder = self.root / "conversations"

    def path(self, conv_id: str) -> Path:
        if not conv_id or "/" in conv_id or "\\" in conv_id or conv_id.startswith("."):
            raise ValueError(f"bad conversation id {conv_id!r}")
        return self.folder / f"{conv_id}.json"

    def save(self, conv: Conversation) -> None:
        conv.updated = time.time()
        atomic_write_text(self.path(conv.id), json.dumps(conv.to_dict(), ensure_ascii=False))

    def load(self, conv_id: str) -> Conversation:
        return Conversation.from_dict(json.loads(self.path(conv_id).read_text(encoding="utf-8")))

    def delete(self, conv_id: str) -> None:
        try:
            self.path(conv_id).unlink()
        except FileNotFoundError:
            pass

    def list(self) -> list[ConversationInfo]:
        """Saved conversations, most recently updated first; unreadable files are skipped."""
        out = []
        if not self.folder.is_dir():
            return out
        for p in self.folder.glob("*.json"):
            try:
                d = json.loads(p.read_text(encoding="utf-8"))
                out.append(ConversationInfo(d["id"], d.get("title", "Untitled"), d.get("updated", 0.0),
                                            len(d.get("messages", []))))
            except (OSError, ValueError, KeyError):
                continue
        out.sort(key=lambda c: c.updated, reverse=True)
        return out


# ---- settings -----------------------------------------------------------------------------------

# The app's defaults are the CLI's (specdec_core.defaults, torch-free): the embedded verifier with the
# shipped draft head as a hybrid, one head token per round where prompt lookup finds nothing.
DEFAULT_VERIFIER = defaults.VERIFIER
DEFAULT_DRAFT = defaults.DRAFT
DEFAULT_DRAFTER = defaults.DRAFTER  # "model" | "prompt-lookup" | "hybrid"
DEFAULT_DRAFT_TOKENS = defaults.DRAFT_TOKENS  # hybrid: the draft's tokens per round without a lookup match (0: gamma)


@dataclass
class Settings:
    verifier: str = DEFAULT_VERIFIER
    draft: str = DEFAULT_DRAFT
    drafter: str = DEFAULT_DRAFTER
    draft_tokens: int = DEFAULT_DRAFT_TOKENS
    device: str = "auto"
    dtype: str = "auto"
    speculate: bool = True
    gamma: int = defaults.GAMMA
    adaptive: bool = False
    confidence_cutoff: float = 0.0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0
    system_prompt: str = ""
    colored: bool = True
    calibrate: bool = True  # measure the verifier alone after loading (the speedup baseline)
    recent_specs: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, root: Path | None = None) -> Settings:
        path = (Path(root) if root else data_dir()) / "settings.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        names = {f.name: f for f in fields(cls)}
        s = cls()
        for k, v in data.items():
            if k in names:
                default = getattr(s, k)
                if isinstance(default, bool) != isinstance(v, bool):
                    continue
                if isinstance(default, (int, float)) and not isinstance(v, (int, float)):
                    continue
                if isinstance(default, str) and not isinstance(v, str):
                    continue
                setattr(s, k, type(default)(v) if isinstance(default, (int, float, str)) else v)
        return s

    def save(self, root: Path | None = None) -> None:
        path = (Path(root) if root else data_dir()) / "settings.json"
        atomic_write_text(path, json.dumps(asdict(self), indent=2))


# ---- exports ------------------------------------------------------------------------------------

def to_markdown(conv: Conversation) -> str:
    lines = [f"# {conv.title}", ""]
    if conv.system:
        lines += [f"*System prompt:* {conv.system}", ""]
    for m in conv.messages:
        who = "You" if m.role == "user" else "Assistant"
        lines.append(f"**{who}:**")
        lines.append("")
        lines.append(m.content)
        if m.trace is not None and (m.trace.stats or m.trace.rounds):
            lines.append("")
            lines.append(f"<sub>{m.trace.summary()}</sub>")
        lines.append("")
    return "\n".join(lines)


_HTML_STYLE = {
    "accepted": "background:rgba(46,160,67,.33)",
    "rejected": "color:rgb(215,58,73);text-decoration:line-through;background:rgba(215,58,73,.15)",
    "corrected": "background:rgba(235,160,20,.43)",
    "bonus": "background:rgba(59,130,246,.37)",
    "plain": "",
}


def _token_title(t) -> str:
    def p(x):
        return "-" if x is None else f"{x:.3f}"
    alts = ", ".join(f"{a!r} {b:.3f}" for a, b in t.alternatives)
    return (f"{t.state} · round {t.round + 1}, position {t.position + 1} · draft p {p(t.draft_prob)} · "
            f"verifier p {p(t.target_prob)} · accept p {p(t.accept_prob)}" + (f" · top: {alts}" if alts else ""))


def to_html(conv: Conversation) -> str:
    """A standalone page; replies keep their token colours (and per-token hover titles)."""
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(conv.title)}</title><style>",
        "body{font-family:system-ui,sans-serif;max-width:860px;margin:2em auto;line-height:1.5;padding:0 1em}",
        ".msg{border-radius:12px;padding:.6em 1em;margin:.8em 0;border:1px solid rgba(127,127,127,.3)}",
        ".user{background:rgba(124,92,230,.12);margin-left:4em}",
        ".assistant{background:rgba(127,127,127,.06);margin-right:2em}",
        ".who{font-weight:600;margin-bottom:.2em}.reply{white-space:pre-wrap}",
        ".stats{color:gray;font-size:.85em;margin-top:.4em}",
        ".legend span{padding:1px 6px;margin-right:6px;border-radius:3px}",
        "@media (prefers-color-scheme: dark){body{background:#1e1e22;color:#ddd}}",
        "</style></head><body>",
        f"<h1>{html.escape(conv.title)}</h1>",
        "<div class='legend'>" + "".join(f"<span style='{st}'>{name}</span>"
                                          for name, st in _HTML_STYLE.items() if st) + "</div>",
    ]
    if conv.system:
        out.append(f"<p><i>System prompt:</i> {html.escape(conv.system)}</p>")
    for m in conv.messages:
        who = "You" if m.role == "user" else "Assistant"
        out.append(f"<div class='msg {m.role}'><div class='who'>{who}</div><div class='reply'>")
        if m.trace is not None and m.trace.tokens:
            for t in m.trace.tokens:
                text = t.text.replace("\n", "↵") if t.state == "rejected" else t.text
                style = _HTML_STYLE.get(t.state, "")
                out.append(f"<span style='{style}' title='{html.escape(_token_title(t), quote=True)}'>"
                           f"{html.escape(text)}</span>" if style else html.escape(text))
        else:
            out.append(html.escape(m.content))
        out.append("</div>")
        if m.trace is not None and (m.trace.stats or m.trace.rounds):
            out.append(f"<div class='stats'>{html.escape(m.trace.summary())}</div>")
        out.append("</div>")
    out.append("</body></html>")
    return "".join(out)


def to_json(conv: Conversation) -> str:
    return json.dumps(conv.to_dict(), ensure_ascii=False, indent=2)
