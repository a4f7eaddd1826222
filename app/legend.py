"""The chat's legend row: swatches for the token states, the switch that turns colouring off, reading mode's switch.

It takes one of three forms, widest first: full texts on one row; short texts on one row; short texts with the
swatches on a second row. Its minimum is the narrowest form, so a font with wider glyphs than ours makes the legend
wrap instead of pushing the window past a small screen.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QLayout, QVBoxLayout, QWidget

from app.theme import STATE_LABEL, STATE_STYLE, css_rgba
from app.trace import STATE_DESCRIPTIONS
from specdec_core.events import TokenState

FULL, SHORT, TWO_ROWS = "full", "short", "two rows"
STATES = (TokenState.ACCEPTED, TokenState.REJECTED, TokenState.CORRECTED, TokenState.BONUS, TokenState.PLAIN)


def swatch_html(state: TokenState, text: str) -> str:
    """A state's name drawn the way its tokens are: their background, colour and strike-through."""
    bg, fg = STATE_STYLE[state.value]
    style = f"background:{css_rgba(bg)};" if bg is not None else "border:1px solid rgba(127,127,127,128);"
    deco = "text-decoration:line-through;" if state is TokenState.REJECTED else ""
    color = f"color:{css_rgba(fg)};" if fg is not None else ""
    return f"<span style='{style}{deco}{color} padding:1px 4px'>&nbsp;{text}&nbsp;</span>"


class Legend(QWidget):
    """Swatches for the token states, the switch that turns colouring off, and reading mode's switch."""

    toggled = Signal(bool)
    reading_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        rows = QVBoxLayout(self)
        rows.setContentsMargins(0, 0, 0, 0)
        rows.setSpacing(2)
        # the minimum is minimumSizeHint's, not the form's
        rows.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        self._rows = (QHBoxLayout(), QHBoxLayout())
        for row in self._rows:
            rows.addLayout(row)
        self.check = QCheckBox("Colour tokens")
        self.check.setChecked(True)
        self.check.setToolTip("Show each token's speculation state (hover a token for details)")
        self.check.toggled.connect(self.toggled)
        self.reading = QCheckBox("Reading mode")
        self.reading.setToolTip("Hide rejected drafts inside the replies, so they read as text (hover a token, "
                                "the tree view and the replay still show them)")
        self.reading.toggled.connect(self.reading_toggled)
        self._texts: list[tuple[QWidget, str, str]] = [(self.check, "Colour tokens", "Colours"),
                                                          (self.reading, "Reading mode", "Reading")]
        self.swatches: list[QLabel] = []
        for state in STATES:
            label = STATE_LABEL[state.value]
            lbl = QLabel(swatch_html(state, label))
            # short: "verifier only" -> "verifier"
            self._texts.append((lbl, swatch_html(state, label), swatch_html(state, label.split()[0])))
            lbl.setToolTip(STATE_DESCRIPTIONS[state.value])
            self.swatches.append(lbl)
        self.form = ""
        self._set_form(FULL)
        self._hints: tuple[str, dict[str, QSize]] | None = None  # (font, each form's minimum size)

    def _set_form(self, form: str) -> None:
        if form == self.form:
            return
        self.form = form
        for widget, full, short in self._texts:
            widget.setText(full if form == FULL else short)
        top, bottom = self._rows
        for row in self._rows:
            while row.count():
                row.takeAt(0)
        for row in self._rows:
            row.setSpacing(10 if form == FULL else 6)
        top.addWidget(self.check)
        top.addWidget(self.reading)
        for lbl in self.swatches:
            (bottom if form == TWO_ROWS else top).addWidget(lbl)
        top.addStretch(1)
        bottom.addStretch(1)
        self.updateGeometry()

    def _measure(self) -> dict[str, QSize]:
        """Each form's minimum size, measured once per font: measuring changes the texts, and a changed text asks
        for a new layout, which asks for the minimum size again."""
        key = self.check.font().key()
        if self._hints is None or self._hints[0] != key:
            shown, sizes = self.form, {}
            for form in (FULL, SHORT, TWO_ROWS):
                self._set_form(form)
                self.layout().activate()
                sizes[form] = self.layout().minimumSize()
            self._set_form(shown)
            self._hints = (key, sizes)
        return self._hints[1]

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """As narrow as the two-row form, as tall as the form shown: a narrow window wraps the row (resizeEvent)."""
        sizes = self._measure()
        return QSize(sizes[TWO_ROWS].width(), sizes[self.form].height())

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """As wide as the full row, whichever form is shown: the chat column asks for room for it."""
        sizes = self._measure()
        return QSize(sizes[FULL].width(), sizes[self.form].height())

    def full_width(self) -> int:
        """How wide the row is with its full texts."""
        return self._measure()[FULL].width()

    def form_for(self, width: int) -> str:
        """The widest form that fits `width`."""
        sizes = self._measure()
        return next((f for f in (FULL, SHORT) if sizes[f].width() <= width), TWO_ROWS)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Shorter texts, then a second row, where the row does not fit (a small screen, presenter mode's type)."""
        super().resizeEvent(event)
        self._set_form(self.form_for(event.size().width()))
