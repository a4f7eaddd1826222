"""One round's draft tree, drawn: every candidate the verifier checked in its one pass.

Columns are draft positions. A node's first child stays on its row, so the draft's best line reads left to
right like the text it proposes, and each alternative opens a row below its parent. Colours are the chat's:
the accepted path green, candidates the verifier checked and refused red and struck through, candidates it
never had to check grey, and the verifier's own token amber (a correction) or blue (a bonus). Each node
shows the draft's probability (d) and the verifier's (v) of its token given the path above it.

`layout_tree` is the Qt-free part (tests read it); `TreeView` paints it; `TreeDialog` shows one round with
PNG export.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.fit import available, fit_to_screen, scrolling
from app.theme import STATE_SOLID
from app.trace import ReplyTrace, RoundRecord
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


def visible(text: str) -> str:
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def layout_tree(rnd: RoundRecord, emitted_text: str | None = None) -> list[PlacedNode]:
    """Place the root, every tree node and the verifier's own token on a grid (column = draft position)."""
    nodes = rnd.tree
    children: dict[int, list[int]] = {ROOT: []}
    for i, node in enumerate(nodes):
        children.setdefault(int(node["parent"]), []).append(i)
    path = [i for i, node in enumerate(nodes) if node.get("accepted")]
    end = path[-1] if path else ROOT
    emitted = len(nodes)  # the verifier's token hangs under the end of the accepted path
    if rnd.emitted_token_id is not None:
        children.setdefault(end, []).append(emitted)
    placed: list[PlacedNode] = [PlacedNode(ROOT, "▸", "root", 0, 0, ROOT, None, None)]
    next_row = [0]

    def place(index: int, parent: int, column: int, row: int) -> None:
        if index == emitted:
            bonus = rnd.emitted_state == TokenState.BONUS.value
            state = TokenState.BONUS.value if bonus else TokenState.CORRECTED.value
            placed.append(PlacedNode(index, visible(emitted_text or "?"), state, column, row, parent, None, None))
            return
        node = nodes[index]
        if node.get("accepted"):
            state = TokenState.ACCEPTED.value
        elif node.get("accept_prob") is not None:
            state = TokenState.REJECTED.value
        else:
            state = "unchecked"
        placed.append(PlacedNode(index, visible(str(node.get("text", ""))), state, column, row, parent,
                                 node.get("draft_prob"), node.get("target_prob")))
        for k, child in enumerate(children.get(index, [])):
            if k:
                next_row[0] += 1
            place(child, index, column + 1, row if k == 0 else next_row[0])

    for k, child in enumerate(children[ROOT]):
        if k:
            next_row[0] += 1
        place(child, ROOT, 1, 0 if k == 0 else next_row[0])
    return placed


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
        probs = "" if node.draft_prob is None else f" d {node.draft_prob:.2f} · v {node.target_prob or 0:.2f}"
        lines.append(f"{'&nbsp;' * 3 * (node.column - 1)}<span style='color:{c}'>■</span> "
                     f"<code>{text}</code><span style='color:gray'>{probs}</span>")
    more = len(rnd.tree) + 1 - limit
    if more > 0:
        lines.append(f"<span style='color:gray'>… {more} more (Talk ▸ Draft tree)</span>")
    return "<br>".join(lines)


class TreeView(QWidget):
    """Paints one round's tree; large type for presenting with `scale`."""

    def __init__(self, parent: QWidget | None = None, scale: float = 1.0) -> None:
        super().__init__(parent)
        self.scale = scale
        self.placed: list[PlacedNode] = []
        self.caption = ""
        self.setAutoFillBackground(True)

    def set_round(self, rnd: RoundRecord | None, emitted_text: str | None = None) -> None:
        self.placed = layout_tree(rnd, emitted_text) if rnd is not None and rnd.tree else []
        self.caption = describe(rnd) if rnd is not None and rnd.tree else "this round drafted a chain, not a tree"
        self.updateGeometry()
        self.update()

    def _cell(self) -> tuple[float, float]:
        return 118 * self.scale, 46 * self.scale

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        w, h = self._cell()
        columns = max((n.column for n in self.placed), default=0) + 1
        rows = max((n.row for n in self.placed), default=0) + 1
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * self.scale)
        caption = QFontMetricsF(font).horizontalAdvance(self.caption) + 24
        return QSize(int(max(columns * w + 24, caption)), int(rows * h + 40 * self.scale))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return self.sizeHint()

    def _rect(self, node: PlacedNode) -> QRectF:
        w, h = self._cell()
        return QRectF(12 + node.column * w, 30 * self.scale + node.row * h, w - 18 * self.scale, h - 10 * self.scale)

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        text_colour = self.palette().text().color()
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * self.scale)
        p.setFont(font)
        p.setPen(text_colour)
        p.drawText(QRectF(12, 4, self.width() - 24, 24 * self.scale), Qt.AlignmentFlag.AlignLeft, self.caption)
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
        small = QFont(font)
        small.setPointSizeF(font.pointSizeF() * 0.78)
        mono = QFont("monospace")
        mono.setPointSizeF(font.pointSizeF())
        for node in self.placed:
            r = self._rect(node)
            solid = STATE_SOLID.get(node.state, QColor(150, 150, 150))
            fill = QColor(solid)
            fill.setAlpha(60 if node.state in ("unchecked", "root") else 110)
            p.setPen(QPen(solid, (2.2 if node.state == TokenState.ACCEPTED.value else 1.2) * self.scale,
                          Qt.PenStyle.DashLine if node.state == "unchecked" else Qt.PenStyle.SolidLine))
            p.setBrush(fill)
            p.drawRoundedRect(r, 6 * self.scale, 6 * self.scale)
            p.setPen(text_colour)
            mono.setStrikeOut(node.state == TokenState.REJECTED.value)
            p.setFont(mono)
            label = QFontMetricsF(mono).elidedText(node.text, Qt.TextElideMode.ElideRight, r.width() - 8)
            top = QRectF(r.left() + 4, r.top() + 2, r.width() - 8, r.height() * 0.55)
            p.drawText(top, Qt.AlignmentFlag.AlignCenter, label)
            if node.draft_prob is not None:
                p.setFont(small)
                bottom = QRectF(r.left() + 2, r.top() + r.height() * 0.52, r.width() - 4, r.height() * 0.45)
                p.drawText(bottom, Qt.AlignmentFlag.AlignCenter,
                           f"d {node.draft_prob:.2f} · v {node.target_prob or 0:.2f}")
        p.end()


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
        self.legend = QLabel("green accepted path · red checked and refused · dashed never checked · "
                             "amber the verifier's correction · blue its bonus token · d draft, v verifier")
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
        self.view.set_round(rnd, emitted_text_of(self.trace, rnd) if rnd is not None else None)

    def save_png(self, path: str) -> bool:
        self.view.resize(self.view.sizeHint())
        return self.view.grab().save(path)

    def _save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the draft tree", "draft-tree.png", "PNG (*.png)")
        if path:
            self.save_png(path)
