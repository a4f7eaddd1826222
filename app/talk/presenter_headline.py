"""Presenter mode's headline: the shown reply's tokens/s and speedup set large over the chat, with one line of
small print under them, so the back of a room reads the figures that the graphs' header sets at body size.

The figures are the graphs' own (`LiveGraphs.headline`, app/graphs/headline.py), so the headline and the header
never disagree; this bar only sets them in type.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.graphs.headline import Headline

HEADLINE_POINTS = 48  # tokens/s and speedup: legible from the back of a room on a 1280×800 projector
NOTE_SHARE = 1 / 3  # the small print's size, of the figures': still larger than the chat's presenter type


def _figure_label(points: float) -> QLabel:
    label = QLabel("")
    label.setTextFormat(Qt.TextFormat.RichText)
    font = label.font()
    font.setPointSizeF(points)
    font.setBold(True)
    label.setFont(font)
    # A figure too wide for the column is clipped at its end rather than widening the column (and squeezing the
    # graphs under their minimum on a narrow screen).
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class HeadlineBar(QWidget):
    """Two large figures side by side (tokens/s, then the speedup in its colour) over a line of small print."""

    def __init__(self, points: float = HEADLINE_POINTS, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("presenter_headline")
        self.tps = _figure_label(points)
        self.speedup = _figure_label(points)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        self.note.setObjectName("muted")
        font = self.note.font()  # set here: a label the style sheet styles does not take the window's larger type
        font.setPointSizeF(round(points * NOTE_SHARE))
        self.note.setFont(font)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(round(points))  # about an em between the two figures
        row.addWidget(self.tps, 3)
        row.addWidget(self.speedup, 2)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(0)
        outer.addLayout(row)
        outer.addWidget(self.note)
        self.show_headline(Headline())

    def show_headline(self, headline: Headline) -> None:
        self.tps.setText(html.escape(headline.tps))
        color = f" style='color:{headline.color}'" if headline.color else ""
        self.speedup.setText(f"<span{color}>{html.escape(headline.speedup)}</span>" if headline.speedup else "")
        self.note.setText(headline.note)
        # Before a reply there is nothing to show: the bar takes no room from the chat.
        self.tps.setVisible(bool(headline.tps or headline.speedup))
        self.speedup.setVisible(bool(headline.tps or headline.speedup))
        self.note.setVisible(bool(headline.note))
