"""One round's draft tree, drawn: every candidate the verifier checked in its one pass.

Columns are draft positions. A node's first child stays on its row, so the draft's best line reads left to
right like the text it proposes, and each alternative opens a row below its parent. Colours are the chat's:
the accepted path green, candidates the verifier checked and refused red and struck through, candidates it
never had to check grey and dashed, and the verifier's own token amber (a correction) or blue (a bonus). The
root box holds the end of the text before the round. Each node shows the draft's probability (d) of its token
given the path above it, and the verifier's (v) where the verifier checked it; a candidate never checked shows
no verifier figure. A node a draft with another tokenizer proposed carries a ⇄ mark, and its tooltip names the
draft's own token(s). The legend is painted with the tree, so a saved PNG carries it.

`layout_tree` is the Qt-free part (tests read it); `TreeView` paints it; `TreeDialog` shows one round with
PNG export.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from app.fit import available, fit_to_screen, scrolling
from app.theme import STATE_SOLID
from app.trace import MAPPED_MARK, MAPPED_NOTE, ReplyTrace, RoundRecord, draft_figure
from specdec_core.events import TokenState

ROOT = -1


@dataclass(frozen=True)
class PlacedNode:
    index: int  # node index in the round's tree; -1 the root, len(tree) the verifier's own token
    text: str
    state: str  # accepted | rejected (checked, refused) | unchecked | corrected | bonus | root
    column: int
    row: int
    parent: int  # index of the parent PlacedNode's node (ROOT for the root's children)
    draft_prob: float | None
    target_prob: float | None
    source: str | None = None  # a draft with another tokenizer: the draft's own token(s) this node came from

    @property
    def drafted(self) -> bool:
        """A candidate the draft proposed (not the root, nor the verifier's own token)."""
        return self.index != ROOT and self.state not in (TokenState.CORRECTED.value, TokenState.BONUS.value)


def visible(text: str) -> str:
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


ROOT_CHARS = 24  # the root shows at most this much of the text before the round


def layout_tree(rnd: RoundRecord, emitted_text: str | None = None, before: str = "") -> list[PlacedNode]:
    """Place the root (the end of `before`, the text the round continues), every tree node and the verifier's own
    token on a grid (column = draft position)."""
    nodes = rnd.tree
    children: dict[int, list[int]] = {ROOT: []}
    for i, node in enumerate(nodes):
        children.setdefault(int(node["parent"]), []).append(i)
    path = [i for i, node in enumerate(nodes) if node.get("accepted")]
    end = path[-1] if path else ROOT
    emitted = len(nodes)  # the verifier's token hangs under the end of the accepted path
    if rnd.emitted_token_id is not None:
        children.setdefault(end, []).append(emitted)
    tail = before[-ROOT_CHARS:]
    root = ("…" if len(before) > ROOT_CHARS else "") + visible(tail) if before else "▸"
    placed: list[PlacedNode] = [PlacedNode(ROOT, root, "root", 0, 0, ROOT, None, None)]
    next_row = [0]

    def place(index: int, parent: int, column: int, row: int) -> None:
        if index == emitted:
            bonus = rnd.emitted_state == TokenState.BONUS.value
            state = TokenState.BONUS.value if bonus else TokenState.CORRECTED.value
            # an end of text decodes to nothing: "∅" as for a drafted one ("?" only where the text is unknown)
            label = visible(emitted_text) if emitted_text is not None else "?"
            placed.append(PlacedNode(index, label, state, column, row, parent, None, None))
            return
        node = nodes[index]
        if node.get("accepted"):
            state = TokenState.ACCEPTED.value
        elif node.get("accept_prob") is not None:
            state = TokenState.REJECTED.value
        else:
            state = "unchecked"
        # A candidate never checked has no verifier figure to show (its branch was cut before it).
        placed.append(PlacedNode(index, visible(str(node.get("text", ""))), state, column, row, parent,
                                 node.get("draft_prob"), None if state == "unchecked" else node.get("target_prob"),
                                 node.get("draft_source")))
        for k, child in enumerate(children.get(index, [])):
            if k:
                next_row[0] += 1
            place(child, index, column + 1, row if k == 0 else next_row[0])

    for k, child in enumerate(children[ROOT]):
        if k:
            next_row[0] += 1
        place(child, ROOT, 1, 0 if k == 0 else next_row[0])
    return placed


DRAFTED = "drafted"  # a node's state while the replay shows the tree growing, before the verifier's pass


def node_figures(node: PlacedNode) -> str:
    """The draft's probability, and the verifier's where it checked the node."""
    draft = f"d {draft_figure(node.draft_prob, True, 2)}"
    if node.state == DRAFTED and node.target_prob is None:
        return draft
    verifier = "not checked" if node.target_prob is None else f"v {node.target_prob:.2f}"
    return f"{draft} · {verifier}"


def node_tooltip(node: PlacedNode) -> str:
    """A node's hover text: its token, its figures, and a mapped token's source in the draft's own tokens."""
    lines = [node.text] + ([node_figures(node)] if node.drafted else [])
    if node.source:
        lines.append(f"{MAPPED_MARK} the draft's own token(s): {node.source}")
    return "\n".join(lines)


def legend_notes(placed: list[PlacedNode]) -> tuple[str, ...]:
    """The words under the colours: what d and v mean, and the ⇄ mark where a node carries it."""
    return (LEGEND_NOTE, MAPPED_NOTE) if any(n.source for n in placed) else (LEGEND_NOTE,)


LEGEND = ((TokenState.ACCEPTED.value, "accepted path"), (TokenState.REJECTED.value, "checked, refused"),
          ("unchecked", "never checked"), (TokenState.CORRECTED.value, "verifier's correction"),
          (TokenState.BONUS.value, "verifier's bonus"))
LEGEND_NOTE = "d: draft's probability · v: verifier's"


def text_before_round(trace: ReplyTrace, rnd: RoundRecord) -> str:
    """The reply's text committed before the round (what its tree continues)."""
    return "".join(t.text for t in trace.tokens if t.round < rnd.index and t.in_reply)


def growing_tree(rnd: RoundRecord, shown: int, verified: bool, before: str = "") -> list[PlacedNode]:
    """The tree as the replay shows it before its verdict: the root and the first `shown` nodes in the order the
    draft grew them, neutral; `verified`: every node, with the verifier's figure on those it checked."""
    full = [n for n in layout_tree(rnd, None, before) if n.index < len(rnd.tree)]
    out = []
    for node in full:
        if node.index == ROOT:
            out.append(node)
        elif verified or node.index < shown:
            checked = verified and rnd.tree[node.index].get("accept_prob") is not None
            out.append(PlacedNode(node.index, node.text, DRAFTED, node.column, node.row, node.parent,
                                  node.draft_prob, rnd.tree[node.index].get("target_prob") if checked else None,
                                  node.source))
    return out


def describe(rnd: RoundRecord) -> str:
    checked = sum(1 for n in rnd.tree if n.get("accept_prob") is not None)
    return (f"round {rnd.index + 1}: {len(rnd.tree)} candidates in one verifier pass, {checked} checked, "
            f"{rnd.accepted} accepted")


def tree_html(rnd: RoundRecord, emitted_text: str | None = None, limit: int = 24) -> str:
    """The tree as indented lines, for a tooltip."""
    colour = {TokenState.ACCEPTED.value: STATE_SOLID["accepted"], TokenState.REJECTED.value: STATE_SOLID["rejected"],
              TokenState.CORRECTED.value: STATE_SOLID["corrected"], TokenState.BONUS.value: STATE_SOLID["bonus"]}
    lines = []
    for node in layout_tree(rnd, emitted_text)[1:limit + 1]:
        c = colour.get(node.state, QColor(140, 140, 140)).name()
        text = node.text.replace("&", "&amp;").replace("<", "&lt;")
        text = f"<s>{text}</s>" if node.state == TokenState.REJECTED.value else text
        probs = f" {node_figures(node)}" if node.drafted else ""
        mapped = "" if not node.source else \
            f" {MAPPED_MARK} draft's own: {node.source.replace('&', '&amp;').replace('<', '&lt;')}"
        lines.append(f"{'&nbsp;' * 3 * (node.column - 1)}<span style='color:{c}'>■</span> "
                     f"<code>{text}</code><span style='color:gray'>{probs}{mapped}</span>")
    more = len(rnd.tree) + 1 - limit
    if more > 0:
        lines.append(f"<span style='color:gray'>… {more} more (Talk ▸ Draft tree)</span>")
    return "<br>".join(lines)


class TreeView(QWidget):
    """Paints one round's tree with its legend; large type for presenting with `scale`."""

    MIN_POINTS = 10.0  # the boxes' type at scale 1, whatever the widget's font (the small figures: 85 % of it)

    def __init__(self, parent: QWidget | None = None, scale: float = 1.0, legend: bool = True) -> None:
        super().__init__(parent)
        self.scale = scale
        self.legend = legend
        self.placed: list[PlacedNode] = []
        self.caption = ""
        self.setAutoFillBackground(True)
        self.setMouseTracking(True)

    def node_at(self, x: float, y: float) -> PlacedNode | None:
        return next((n for n in self.placed if self._rect(n).contains(QPointF(x, y))), None)

    def event(self, event) -> bool:  # noqa: D102 - Qt override: a node's tooltip
        if event.type() == QEvent.Type.ToolTip:
            node = self.node_at(event.pos().x(), event.pos().y())
            if node is not None and node.index != ROOT:
                QToolTip.showText(event.globalPos(), node_tooltip(node), self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)

    def set_placed(self, placed: list[PlacedNode], caption: str = "") -> None:
        """Nodes laid out elsewhere (the replay shows a tree as it grows)."""
        self.placed, self.caption = placed, caption
        self.updateGeometry()
        self.update()

    def set_round(self, rnd: RoundRecord | None, emitted_text: str | None = None, before: str = "") -> None:
        self.placed = layout_tree(rnd, emitted_text, before) if rnd is not None and rnd.tree else []
        self.caption = describe(rnd) if rnd is not None and rnd.tree else "this round drafted a chain, not a tree"
        self.updateGeometry()
        self.update()

    # -- geometry ------------------------------------------------------------------------------------
    def _font(self, factor: float = 1.0) -> QFont:
        font = QFont(self.font())
        font.setPointSizeF(max(font.pointSizeF(), self.MIN_POINTS) * self.scale * factor)
        return font

    def _mono(self) -> QFont:
        mono = QFont("monospace")
        mono.setPointSizeF(self._font().pointSizeF())
        return mono

    def _cell(self) -> tuple[float, float]:
        line = QFontMetricsF(self._font()).height()
        figures = QFontMetricsF(self._font(0.85)).horizontalAdvance("d 0.00 · not checked") + 32 * self.scale
        return max(118 * self.scale, figures), max(46 * self.scale, 2.6 * line)

    def _root_width(self) -> float:
        root = next((n for n in self.placed if n.index == ROOT), None)
        text = QFontMetricsF(self._mono()).horizontalAdvance(root.text) if root is not None else 0.0
        return max(self._cell()[0], text + 24 * self.scale)

    def _top(self) -> float:
        return QFontMetricsF(self._font()).height() + 12 * self.scale

    def _legend_height(self) -> float:
        lines = 1 + len(legend_notes(self.placed))  # the ⇄ note may take a line of its own
        return lines * QFontMetricsF(self._font(0.85)).height() + 16 * self.scale if self.legend else 0.0

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        w, h = self._cell()
        columns = max((n.column for n in self.placed), default=0)
        rows = max((n.row for n in self.placed), default=0) + 1
        caption = QFontMetricsF(self._font()).horizontalAdvance(self.caption) + 24
        fm = QFontMetricsF(self._font(0.85))
        legend = sum(fm.horizontalAdvance(words) + 40 * self.scale for _, words in LEGEND)
        width = max(12 + self._root_width() + columns * w + 12, caption, min(legend, 3 * w) + 24 if self.legend else 0)
        return QSize(int(width), int(self._top() + rows * h + self._legend_height() + 8))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return self.sizeHint()

    def _rect(self, node: PlacedNode) -> QRectF:
        w, h = self._cell()
        left = 12 if node.column == 0 else 12 + self._root_width() + (node.column - 1) * w
        width = (self._root_width() if node.column == 0 else w) - 18 * self.scale
        return QRectF(left, self._top() + node.row * h, width, h - 10 * self.scale)

    # -- painting ------------------------------------------------------------------------------------
    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        text_colour = self.palette().text().color()
        font = self._font()
        p.setFont(font)
        p.setPen(text_colour)
        p.drawText(QRectF(12, 4, self.width() - 24, self._top()), Qt.AlignmentFlag.AlignLeft, self.caption)
        by_index = {n.index: n for n in self.placed}
        for node in self.placed:  # edges first, under the boxes
            parent = by_index.get(node.parent) if node.index != ROOT else None
            if parent is None:
                continue
            a, b = self._rect(parent), self._rect(node)
            p.setPen(QPen(QColor(150, 150, 150), 1.2 * self.scale))
            start = QPointF(a.right(), a.center().y())
            end = QPointF(b.left(), b.center().y())
            middle = (start.x() + end.x()) / 2
            p.drawPolyline([start, QPointF(middle, start.y()), QPointF(middle, end.y()), end])
        small = self._font(0.85)
        mono = self._mono()
        for node in self.placed:
            r = self._rect(node)
            self._box(p, r, node.state)
            p.setPen(text_colour)
            mono.setStrikeOut(node.state == TokenState.REJECTED.value)
            p.setFont(mono)
            label = QFontMetricsF(mono).elidedText(node.text, Qt.TextElideMode.ElideLeft if node.index == ROOT
                                                   else Qt.TextElideMode.ElideRight, r.width() - 8)
            if not node.drafted:  # the root and the verifier's own token: the text alone, centred
                p.drawText(r, Qt.AlignmentFlag.AlignCenter, label)
                continue
            if node.source:  # proposed by a draft with another tokenizer: marked in the box's corner
                p.setFont(self._font(0.8))
                p.drawText(QRectF(r.left() + 4, r.top() + 1, r.width() - 8, r.height() * 0.4),
                           Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, MAPPED_MARK)
                p.setFont(mono)
            top = QRectF(r.left() + 4, r.top() + 2, r.width() - 8, r.height() * 0.55)
            p.drawText(top, Qt.AlignmentFlag.AlignCenter, label)
            p.setFont(small)
            bottom = QRectF(r.left() + 2, r.top() + r.height() * 0.52, r.width() - 4, r.height() * 0.45)
            p.drawText(bottom, Qt.AlignmentFlag.AlignCenter, node_figures(node))
        if self.placed and self.legend:
            self._legend(p, small, text_colour)
        p.end()

    def _box(self, p: QPainter, r: QRectF, state: str) -> None:
        solid = STATE_SOLID.get(state, QColor(150, 150, 150))
        fill = QColor(solid)
        fill.setAlpha(60 if state in ("unchecked", "root", DRAFTED) else 110)
        p.setPen(QPen(solid, (2.2 if state == TokenState.ACCEPTED.value else 1.2) * self.scale,
                      Qt.PenStyle.DashLine if state == "unchecked" else Qt.PenStyle.SolidLine))
        p.setBrush(fill)
        p.drawRoundedRect(r, 6 * self.scale, 6 * self.scale)

    def _legend(self, p: QPainter, font: QFont, text_colour: QColor) -> None:
        """The colours' meaning under the tree, wrapping to a second line when narrow."""
        fm = QFontMetricsF(font)
        p.setFont(font)
        rows = max((n.row for n in self.placed), default=0) + 1
        x, y = 12.0, self._top() + rows * self._cell()[1] + 8 * self.scale  # right under the boxes
        swatch = fm.height() * 0.9
        for state, words in (*LEGEND, *(("", note) for note in legend_notes(self.placed))):
            width = (swatch + 6 * self.scale if state else 0) + fm.horizontalAdvance(words) + 18 * self.scale
            if x + width > self.width() - 12 and x > 12:
                x, y = 12.0, y + fm.height() + 4 * self.scale
            if state:
                self._box(p, QRectF(x, y + (fm.height() - swatch) / 2, swatch, swatch), state)
                x += swatch + 6 * self.scale
            p.setPen(text_colour)
            p.drawText(QPointF(x, y + fm.ascent()), words)
            x += fm.horizontalAdvance(words) + 18 * self.scale


def emitted_text_of(trace: ReplyTrace, rnd: RoundRecord) -> str | None:
    """The text of the round's correction or bonus token, from the trace's token records."""
    for tok in trace.tokens:
        if tok.round == rnd.index and tok.state in (TokenState.CORRECTED.value, TokenState.BONUS.value):
            return tok.text
    return None


def tree_rounds(trace: ReplyTrace) -> list[int]:
    return [i for i, r in enumerate(trace.rounds) if r.tree]


class TreeDialog(QDialog):
    """The draft trees of a reply, one round at a time, with PNG export (Talk ▸ Draft tree)."""

    def __init__(self, trace: ReplyTrace, parent: QWidget | None = None, scale: float = 1.0,
                 round_index: int | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Draft tree")
        self.trace = trace
        self.rounds = tree_rounds(trace)
        self.view = TreeView(scale=scale)
        area = scrolling(self.view)
        self.picker = QSpinBox()
        self.picker.setPrefix("round ")
        self.picker.setRange(1, max(1, len(trace.rounds)))
        self.picker.valueChanged.connect(lambda value: self.show_round(value - 1))
        self.legend = QLabel("The legend is under the tree (and in a saved PNG).")
        self.legend.setObjectName("muted")
        self.legend.setWordWrap(True)
        save = QPushButton("Save PNG…")
        save.clicked.connect(self._save)
        top = QHBoxLayout()
        top.addWidget(self.picker)
        top.addWidget(self.legend, 1)
        top.addWidget(save)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(area, 1)
        start = round_index if round_index is not None else (self.rounds[0] if self.rounds else 0)
        self.picker.setValue(start + 1)
        self.show_round(start)
        hint = self.view.sizeHint()
        fit_to_screen(self, QSize(max(720, hint.width() + 40), min(900, hint.height() + 110)),
                      available(parent) if parent is not None else None)

    def show_round(self, index: int) -> None:
        rnd = self.trace.rounds[index] if 0 <= index < len(self.trace.rounds) else None
        self.view.set_round(rnd, emitted_text_of(self.trace, rnd) if rnd is not None else None,
                            text_before_round(self.trace, rnd) if rnd is not None else "")

    def save_png(self, path: str) -> bool:
        self.view.resize(self.view.sizeHint())
        return self.view.grab().save(path)

    def _save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the draft tree", "draft-tree.png", "PNG (*.png)")
        if path:
            self.save_png(path)
