"""One beat of one round of a replay, drawn: the context, the draft's chips, the verifier's pass, the verdicts
(a tree round: the tree view's drawing of it). app/talk/replay.py steps through the beats."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPen, QRegion
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.talk import style as ts
from app.talk.rounds import Beat, RoundStory, Step, round_info
from app.trace import MAPPED_MARK, TokenRecord, draft_figure
from specdec_core.events import TokenState

MARGIN = 24.0
CHAIN_HEIGHT = 330  # a chain round's context, chips, their numbers and the correction row, at the smallest type


def header_bottom() -> float:
    """Where the round's drawing starts, under the header's line."""
    return MARGIN + QFontMetricsF(ts.big_font(1.15, bold=True)).height() + 18


def chip_label(tok: TokenRecord) -> str:
    """A drafted token's chip text, marked ⇄ when a draft with another tokenizer proposed it."""
    return f"{MAPPED_MARK} {ts.shown(tok.text)}" if tok.draft_source else ts.shown(tok.text)


def draft_q(tok: TokenRecord) -> str:
    """The draft's probability under a chip ("string match" where the draft proposed it by matching text)."""
    return draft_figure(tok.draft_prob, True)


class RoundStage(QWidget):
    """Draws one beat of one round: the context, the draft's chips, the verifier's pass, the verdicts."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.story: RoundStory | None = None
        self.step: Step | None = None
        self.n_rounds = 0
        self.greedy = True
        self._min_height = CHAIN_HEIGHT
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setAutoFillBackground(True)
        pal = self.palette()
        pal.setColor(self.backgroundRole(), ts.PAPER)
        self.setPalette(pal)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(1100, 380)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(0, self._min_height)

    def show_beat(self, story: RoundStory | None, step: Step | None, n_rounds: int, greedy: bool) -> None:
        new_round = story is not self.story
        self.story, self.step, self.n_rounds, self.greedy = story, step, n_rounds, greedy
        if new_round:
            height = self.height_needed(story)
            if height != self._min_height:
                self._min_height = height
                self.updateGeometry()  # the replay's splitter gives the numbers what the stage no longer needs
        self.update()

    def height_needed(self, story: RoundStory | None) -> int:
        """The stage's minimum height for `story`: a tree round needs its header and its whole tree at full size
        (a tree of a few candidates is a row or two, and the stage's room below it kept the replay's numbers
        out of view at 1024×700); any other round, the chain's height."""
        if story is None or story.record is None or not story.tree_nodes:
            return CHAIN_HEIGHT
        from app.tree_view import layout_tree

        view = self._tree_view()
        view.set_placed(layout_tree(story.record, None, story.text_before))
        return min(CHAIN_HEIGHT, int(header_bottom() + view.sizeHint().height() - view._top() + 8))

    def _tree_view(self):
        from app.tree_view import TreeView

        if not hasattr(self, "_tree"):
            self._tree = TreeView(legend=False)
        return self._tree

    def tree_beat(self, story: RoundStory, step: Step) -> list:
        """The tree's nodes this beat shows: grown up to the candidate being drafted, then every candidate with
        the verifier's figures (its one pass), then the verdict with the accepted path and the verifier's token."""
        from app.tree_view import growing_tree, layout_tree

        rec = story.record
        assert rec is not None
        if step.beat is Beat.RESOLVE:
            return layout_tree(rec, story.emitted.text if story.emitted is not None else None, story.text_before)
        return growing_tree(rec, step.i + 1, step.beat is Beat.VERIFY, story.text_before)

    def _paint_tree(self, p: QPainter, story: RoundStory, step: Step, area: QRectF) -> None:
        """A tree round: the tree drawn by the tree view's painter, scaled into `area`; the verifier's one pass
        is a box around every candidate. The tree view's caption band is left out: it is empty here (the stage's
        header names the round), and counted in, it held the tree at half the stage's width at 1024×700."""
        view = self._tree_view()
        view.set_placed(self.tree_beat(story, step))
        tree, factor = self._tree_fit(view, area)
        p.save()
        p.translate(area.left(), area.top())
        p.scale(factor, factor)
        view.render(p, QPoint(0, 0), QRegion(tree))
        p.restore()
        if step.beat is Beat.VERIFY:
            box = QRectF(area.left() - 6, area.top() - 6, (tree.width() - 6) * factor, tree.height() * factor)
            p.setPen(QPen(ts.VERIFIER, 3.5))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRoundedRect(box, 14, 14)

    @staticmethod
    def _tree_fit(view, area: QRectF) -> tuple[QRect, float]:
        """The part of the tree view drawn (all but its caption band) and the factor that fits it into `area`."""
        hint = view.sizeHint()
        view.resize(hint)
        top = int(view._top())
        tree = QRect(0, top, hint.width(), hint.height() - top)
        return tree, min(1.6, area.width() / max(1, tree.width()), area.height() / max(1, tree.height()))

    def tree_area(self) -> QRectF:
        """Where a tree round's tree may be drawn: under the header, within the margins."""
        y, w = header_bottom(), float(self.width())
        return QRectF(MARGIN, y, w - 2 * MARGIN, self.height() - y - 8)

    def tree_drawn(self) -> QRectF | None:
        """Where the tree of the beat on screen is drawn, in the stage's coordinates (None: no tree round)."""
        if self.story is None or self.step is None or not self.story.tree_nodes:
            return None
        view = self._tree_view()
        view.set_placed(self.tree_beat(self.story, self.step))
        area = self.tree_area()
        tree, factor = self._tree_fit(view, area)
        return QRectF(area.left(), area.top(), tree.width() * factor, tree.height() * factor)

    # -- painting ------------------------------------------------------------------------------------
    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setRenderHint(QPainter.RenderHint.TextAntialiasing)
        story, step = self.story, self.step
        w, h = float(self.width()), float(self.height())
        if story is None or step is None:
            p.setFont(ts.big_font(1.4))
            p.setPen(ts.MUTED)
            p.drawText(QRectF(0, 0, w, h), Qt.AlignmentFlag.AlignCenter,
                       "Replay: each round in three beats —\ndraft proposes · verifier checks · accept or reject")
            return
        y = self._paint_header(p, story, step, w)
        if story.tree_nodes:
            self._paint_tree(p, story, step, self.tree_area())
        else:
            self._paint_chain(p, story, step, _ChipLayout.fit(story, step, w, h, y))
        p.end()

    def _paint_header(self, p: QPainter, story: RoundStory, step: Step, w: float) -> float:
        """The round's number, and how its drafting went; returns where the round's drawing starts."""
        p.setFont(ts.big_font(1.15, bold=True))
        p.setPen(ts.INK)
        fm = QFontMetricsF(p.font())
        y = MARGIN
        p.drawText(QPointF(MARGIN, y + fm.ascent()), f"Round {step.round + 1} of {self.n_rounds}")
        rec = story.record
        if rec is not None and story.drafted:
            p.setFont(ts.big_font(0.85))
            p.setPen(ts.MUTED)
            info = round_info(rec)
            fmi = QFontMetricsF(p.font())
            p.drawText(QPointF(w - MARGIN - fmi.horizontalAdvance(info), y + fm.ascent()), info)
        return header_bottom()

    def _paint_chain(self, p: QPainter, story: RoundStory, step: Step, lay: _ChipLayout) -> None:
        """A chain round: the context, the draft's chips, then what this beat adds to them."""
        self._paint_context(p, story, lay)
        self._paint_chips(p, story, step, lay)
        if step.beat is Beat.DRAFT and lay.rects:
            self._paint_conditioning(p, step, lay)
        if step.beat is Beat.VERIFY and lay.rects:
            self._paint_one_pass(p, story, lay)
        if step.beat is Beat.RESOLVE and story.emitted is not None:
            self._paint_verifier_token(p, story, lay)

    @staticmethod
    def _paint_context(p: QPainter, story: RoundStory, lay: _ChipLayout) -> None:
        """The context: the end of the reply so far, in a grey box."""
        p.setFont(lay.ctx_font)
        xfm = QFontMetricsF(lay.ctx_font)
        ctx_rect = lay.ctx_rect
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(236, 236, 236))
        p.drawRoundedRect(ctx_rect, 10, 10)
        p.setPen(ts.MUTED)
        tail = story.text_before.replace("\n", " ↵ ")[-400:] or "(start of the reply)"
        elided = xfm.elidedText(tail, Qt.TextElideMode.ElideLeft, lay.ctx_w - 20)
        p.drawText(ctx_rect.adjusted(10, 0, -10, 0), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                   elided)
        p.setFont(ts.big_font(0.75))
        p.drawText(QPointF(ctx_rect.left() + 4, ctx_rect.bottom() + QFontMetricsF(p.font()).ascent() + 6),
                   "context: the reply so far")

    def _paint_chips(self, p: QPainter, story: RoundStory, step: Step, lay: _ChipLayout) -> None:
        """The draft's chips (the slots it has not filled yet dashed), with q, p and min under each."""
        beat, nfm = step.beat, lay.nfm
        shown_n = step.i + 1 if beat is Beat.DRAFT else len(story.drafted)
        # Arrows: context -> chip 0 -> chip 1 ...: each proposal is conditioned on everything left of it.
        p.setPen(QPen(ts.DRAFT, 2.5))
        prev_right = lay.ctx_rect.right()
        for r in lay.rects[:shown_n]:
            self._arrow(p, QPointF(prev_right + 4, r.center().y()), QPointF(r.left() - 4, r.center().y()))
            prev_right = r.right()
        for i, (tok, r) in enumerate(zip(story.drafted, lay.rects)):
            if i >= shown_n:  # slots the draft has not filled yet
                p.setPen(QPen(QColor(180, 180, 180), 1.5, Qt.PenStyle.DashLine))
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.drawRoundedRect(r, 10, 10)
                continue
            state = tok.state if beat is Beat.RESOLVE else None
            self._chip(p, r, chip_label(tok), lay.chip_font, state, highlight=beat is Beat.DRAFT and i == step.i)
            # numbers under each chip: q (draft), p (verifier), accept probability
            p.setFont(lay.num_font)
            ny = r.bottom() + nfm.ascent() + 6
            p.setPen(ts.DRAFT)
            p.drawText(QPointF(r.left() + 4, ny), f"q {draft_q(tok)}")
            if beat is not Beat.DRAFT:
                p.setPen(ts.VERIFIER)
                p.drawText(QPointF(r.left() + 4, ny + nfm.height()), f"p {ts.fmt_p(tok.target_prob)}")
                p.setPen(ts.INK)
                p.drawText(QPointF(r.left() + 4, ny + 2 * nfm.height()), f"min {ts.fmt_p(tok.accept_prob)}")

    def _paint_conditioning(self, p: QPainter, step: Step, lay: _ChipLayout) -> None:
        """DRAFT: a bracket under everything the new token is conditioned on."""
        rects, y = lay.rects, lay.y
        left = lay.ctx_rect.left()
        right = rects[step.i - 1].right() if step.i > 0 else lay.ctx_rect.right()
        by = y + lay.chip_h + 3 * lay.nfm.height() + 6
        p.setPen(QPen(ts.DRAFT, 2))
        p.drawLine(QPointF(left, by - 8), QPointF(left, by))
        p.drawLine(QPointF(left, by), QPointF(right, by))
        p.drawLine(QPointF(right, by - 8), QPointF(right, by))
        p.setFont(ts.big_font(0.8))
        target = rects[step.i]
        self._arrow(p, QPointF(right, by), QPointF(target.center().x(), y + lay.chip_h + 4))
        drafts = "" if step.i == 0 else ", draft 1" if step.i == 1 else f", drafts 1–{step.i}"
        label = f"draft: q(token {step.i + 1} | context{drafts})"
        p.drawText(QPointF(left + 6, by + QFontMetricsF(p.font()).ascent() + 4), label)

    @staticmethod
    def _paint_one_pass(p: QPainter, story: RoundStory, lay: _ChipLayout) -> None:
        """VERIFY: one box around all of it, the verifier's single pass."""
        rec, k, y = story.record, len(story.drafted), lay.y
        box = QRectF(lay.ctx_rect.left() - 8, y - 10, lay.rects[-1].right() - lay.ctx_rect.left() + 16,
                     lay.chip_h + 20)
        p.setPen(QPen(ts.VERIFIER, 3.5))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRoundedRect(box, 14, 14)
        p.setFont(ts.big_font(0.9, bold=True))
        p.setPen(ts.VERIFIER)
        p.drawText(QPointF(box.left() + 6, lay.below + 24),
                   (f"verifier: ONE forward pass scores all {len(rec.tree)} candidates of the tree"
                    if rec is not None and rec.tree else
                    "verifier: ONE forward pass scores the draft (+1 position for a bonus)" if k == 1 else
                    f"verifier: ONE forward pass scores all {k} drafts (+1 position for a bonus)"))

    def _paint_verifier_token(self, p: QPainter, story: RoundStory, lay: _ChipLayout) -> None:
        """RESOLVE: the verifier's own token, a correction under the first rejected draft or a bonus at the end."""
        em, rects, y, chip_h = story.emitted, lay.rects, lay.y, lay.chip_h
        text = ts.shown(em.text)
        ew = QFontMetricsF(lay.chip_font).horizontalAdvance(text) + 28
        p.setFont(ts.big_font(0.8, bold=True))
        if em.state == TokenState.CORRECTED.value and story.first_rejected is not None:
            anchor = rects[story.first_rejected]
            r = QRectF(anchor.left(), lay.below + 14, max(ew, 60), chip_h)
            p.setPen(QPen(ts.CORRECTED, 2.5))
            self._arrow(p, QPointF(anchor.center().x(), y + chip_h + 3 * lay.nfm.height() + 8),
                        QPointF(anchor.center().x(), r.top() - 2))
            self._chip(p, r, text, lay.chip_font, em.state)
            p.setPen(ts.CORRECTED.darker(130))
            p.setFont(ts.big_font(0.9, bold=True))
            p.drawText(QPointF(r.right() + 14, r.center().y() + 8),
                       "correction (the verifier's token)" + ("" if self.greedy else ": sampled from max(0, p − q)"))
            return
        left = rects[-1].right() + lay.gap if rects else lay.ctx_rect.right() + lay.gap
        r = QRectF(left, y, max(ew, 60), chip_h)
        p.setPen(QPen(ts.BONUS if rects else ts.PLAIN, 2.5))
        self._arrow(p, QPointF((rects[-1].right() if rects else lay.ctx_rect.right()) + 4, r.center().y()),
                    QPointF(r.left() - 4, r.center().y()))
        self._chip(p, r, text, lay.chip_font, em.state)
        p.setFont(ts.big_font(0.8, bold=True))
        p.setPen(ts.BONUS if em.state == TokenState.BONUS.value else ts.MUTED)
        label = "bonus" if em.state == TokenState.BONUS.value else "verifier alone"
        p.drawText(QPointF(r.left(), r.bottom() + 22), label)

    @staticmethod
    def _chip(p: QPainter, r: QRectF, text: str, font, state: str | None, highlight: bool = False) -> None:
        fill = {TokenState.ACCEPTED.value: ts.ACCEPTED, TokenState.REJECTED.value: QColor(253, 226, 229),
                TokenState.CORRECTED.value: ts.CORRECTED, TokenState.BONUS.value: ts.BONUS,
                TokenState.PLAIN.value: QColor(225, 225, 225)}.get(state or "", QColor(237, 233, 254))
        if state == TokenState.REJECTED.value:
            border = ts.REJECTED
        else:
            border = ts.DRAFT if state is None else fill.darker(125)
        p.setPen(QPen(border, 4 if highlight else 2))
        p.setBrush(fill)
        p.drawRoundedRect(r, 10, 10)
        p.setFont(font)
        ink = QColor(255, 255, 255) if state in (TokenState.ACCEPTED.value, TokenState.BONUS.value) else ts.INK
        if state == TokenState.REJECTED.value:
            ink = ts.REJECTED
        p.setPen(ink)
        p.drawText(r, Qt.AlignmentFlag.AlignCenter, text)
        if state == TokenState.REJECTED.value:
            p.setPen(QPen(ts.REJECTED, 3))
            p.drawLine(QPointF(r.left() + 6, r.center().y()), QPointF(r.right() - 6, r.center().y()))

    @staticmethod
    def _arrow(p: QPainter, a: QPointF, b: QPointF) -> None:
        p.drawLine(a, b)
        d = b - a
        length = (d.x() ** 2 + d.y() ** 2) ** 0.5 or 1.0
        ux, uy = d.x() / length, d.y() / length
        head = QPainterPath(b)
        head.lineTo(b.x() - 10 * ux + 5 * uy, b.y() - 10 * uy - 5 * ux)
        head.lineTo(b.x() - 10 * ux - 5 * uy, b.y() - 10 * uy + 5 * ux)
        head.closeSubpath()
        p.save()
        p.setBrush(p.pen().color())
        p.drawPath(head)
        p.restore()


@dataclass
class _ChipLayout:
    """Where a chain round's pieces go: the type sizes that make the context and the chips fit the width, the
    context's box, each chip's box, and the line under their numbers."""

    ctx_font: QFont
    chip_font: QFont
    num_font: QFont
    nfm: QFontMetricsF
    gap: float
    ctx_w: float
    chip_h: float
    y: float  # the chips' top
    ctx_rect: QRectF
    rects: list[QRectF]
    below: float  # under the chips' numbers

    @classmethod
    def fit(cls, story: RoundStory, step: Step, w: float, h: float, top: float) -> _ChipLayout:
        """Shrink the chips' type until context + chips fit the width; centre them under the header (`top`)."""
        k = len(story.drafted)
        scale = 2.3
        while True:
            chip_font = ts.big_font(scale)
            num_font = ts.big_font(max(0.7, scale * 0.42))
            cfm, nfm = QFontMetricsF(chip_font), QFontMetricsF(num_font)
            chip_w = [max(cfm.horizontalAdvance(chip_label(t)) + 28, nfm.horizontalAdvance("min 0.000") + 10,
                          nfm.horizontalAdvance(f"q {draft_q(t)}") + 10) for t in story.drafted]
            gap = 34.0
            need = sum(chip_w) + gap * k
            if story.emitted is not None and (not k or story.emitted.state == TokenState.BONUS.value):
                need += cfm.horizontalAdvance(ts.shown(story.emitted.text)) + 28 + gap
            if need <= w * 0.66 or scale <= 0.8:
                break
            scale -= 0.1
        ctx_w = max(120.0, min(w - 2 * MARGIN - need, w * 0.42))
        chip_h = cfm.height() + 18
        # centre the chips, their numbers and the correction row in the space under the header
        block = chip_h + 3 * nfm.height() + 30 + chip_h + 30
        y = max(top + 14, top + (h - top - block) / 2)
        ctx_rect = QRectF(MARGIN, y, ctx_w, chip_h)
        x, rects = ctx_rect.right() + gap, []
        for width in chip_w:
            r = QRectF(x, y, width, chip_h)
            rects.append(r)
            x = r.right() + gap
        return cls(ts.big_font(1.1), chip_font, num_font, nfm, gap, ctx_w, chip_h, y, ctx_rect, rects,
                   y + chip_h + 3 * nfm.height() + 16)
