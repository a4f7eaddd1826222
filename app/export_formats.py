"""A conversation as Markdown, a standalone HTML page (replies keep their token colours) or JSON. Qt-free:
app/export.py asks where to write them."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING

from app.trace import MAPPED_MARK, MAPPED_NOTE, draft_figure
from specdec_core.events import TokenState

if TYPE_CHECKING:
    from app.conversation import Conversation


def to_markdown(conv: Conversation) -> str:
    lines = [f"# {conv.full_title()}", ""]
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


_HTML_MAPPED = "border-bottom:1px dotted currentColor"  # a token a draft with another tokenizer proposed


def _token_title(t) -> str:
    def p(x):
        return "-" if x is None else f"{x:.3f}"
    alts = ", ".join(f"{a!r} {b:.3f}" for a, b in t.alternatives)
    drafted = t.state in (TokenState.ACCEPTED.value, TokenState.REJECTED.value)
    draft_p = draft_figure(t.draft_prob, drafted) if drafted else "-"  # "string match": drafted with no probability
    # As the chat tooltip: the draft's own token(s), and the verifier token they became
    mapped = (f" · {MAPPED_MARK} draft's own token(s): {t.draft_source} → verifier token {t.text!r} "
              f"(id {t.token_id})" if t.draft_source else "")
    return (f"{t.state} · round {t.round + 1}, position {t.position + 1} · draft p {draft_p} · "
            f"verifier p {p(t.target_prob)} · accept p {p(t.accept_prob)}{mapped}"
            + (f" · top: {alts}" if alts else ""))


def to_html(conv: Conversation) -> str:
    """A standalone page; replies keep their token colours (and per-token hover titles)."""
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(conv.full_title())}</title><style>",
        "body{font-family:system-ui,sans-serif;max-width:860px;margin:2em auto;line-height:1.5;padding:0 1em}",
        ".msg{border-radius:12px;padding:.6em 1em;margin:.8em 0;border:1px solid rgba(127,127,127,.3)}",
        ".user{background:rgba(124,92,230,.12);margin-left:4em}",
        ".assistant{background:rgba(127,127,127,.06);margin-right:2em}",
        ".who{font-weight:600;margin-bottom:.2em}.reply{white-space:pre-wrap}",
        ".stats{color:gray;font-size:.85em;margin-top:.4em}",
        ".legend span{padding:1px 6px;margin-right:6px;border-radius:3px}",
        "@media (prefers-color-scheme: dark){body{background:#1e1e22;color:#ddd}}",
        "</style></head><body>",
        f"<h1>{html.escape(conv.full_title())}</h1>",
        "<div class='legend'>" + "".join(f"<span style='{st}'>{name}</span>"
                                          for name, st in _HTML_STYLE.items() if st) + "</div>",
    ]
    if any(t.draft_source for m in conv.messages if m.trace is not None for t in m.trace.tokens):
        out.append(f"<div class='legend'><span style='{_HTML_MAPPED}'>{html.escape(MAPPED_NOTE)}</span> "
                   "(hover a token for them)</div>")
    if conv.system:
        out.append(f"<p><i>System prompt:</i> {html.escape(conv.system)}</p>")
    for m in conv.messages:
        who = "You" if m.role == "user" else "Assistant"
        out.append(f"<div class='msg {m.role}'><div class='who'>{who}</div><div class='reply'>")
        if m.trace is not None and m.trace.tokens:
            for t in m.trace.tokens:
                text = t.text.replace("\n", "↵") if t.state == "rejected" else t.text
                style = ";".join(filter(None, (_HTML_STYLE.get(t.state, ""),
                                               _HTML_MAPPED if t.draft_source else "")))
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
