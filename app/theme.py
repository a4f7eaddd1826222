"""Colours and the style sheet: one place, light and dark friendly.

Token states are tinted backgrounds with alpha, so they read on light and dark palettes alike; the
text keeps the palette's own colour except for rejected tokens, which are red and struck through.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette, QTextCharFormat
from PySide6.QtWidgets import QApplication

from specdec_core.events import TokenState

# name, background (with alpha), foreground (None: palette text)
STATE_STYLE: dict[str, tuple[QColor | None, QColor | None]] = {
    TokenState.ACCEPTED.value: (QColor(46, 160, 67, 85), None),
    TokenState.REJECTED.value: (QColor(215, 58, 73, 40), QColor(215, 58, 73)),
    TokenState.CORRECTED.value: (QColor(235, 160, 20, 110), None),
    TokenState.BONUS.value: (QColor(59, 130, 246, 95), None),
    TokenState.PLAIN.value: (None, None),
}

STATE_LABEL = {
    TokenState.ACCEPTED.value: "accepted",
    TokenState.REJECTED.value: "rejected",
    TokenState.CORRECTED.value: "corrected",
    TokenState.BONUS.value: "bonus",
    TokenState.PLAIN.value: "verifier only",
}

# solid versions for graphs and the legend swatches
STATE_SOLID = {
    TokenState.ACCEPTED.value: QColor(46, 160, 67),
    TokenState.REJECTED.value: QColor(215, 58, 73),
    TokenState.CORRECTED.value: QColor(235, 160, 20),
    TokenState.BONUS.value: QColor(59, 130, 246),
    TokenState.PLAIN.value: QColor(140, 140, 140),
}

DRAFT_COLOR = QColor(46, 160, 67)
VERIFY_COLOR = QColor(59, 130, 246)
OVERHEAD_COLOR = QColor(150, 150, 150)
ACCENT = QColor(124, 92, 230)


def is_dark() -> bool:
    app = QApplication.instance()
    pal = app.palette() if app is not None else QPalette()
    return pal.color(QPalette.ColorRole.Window).lightness() < 128


def token_format(state: str, colored: bool = True) -> QTextCharFormat:
    fmt = QTextCharFormat()
    if not colored:
        return fmt
    bg, fg = STATE_STYLE.get(state, (None, None))
    if bg is not None:
        fmt.setBackground(bg)
    if fg is not None:
        fmt.setForeground(fg)
    if state == TokenState.REJECTED.value:
        fmt.setFontStrikeOut(True)
    return fmt


def css_rgba(c: QColor) -> str:
    return f"rgba({c.red()},{c.green()},{c.blue()},{c.alpha()})"


def style_sheet() -> str:
    dark = is_dark()
    user_bg = "rgba(124,92,230,41)" if not dark else "rgba(124,92,230,71)"
    bot_bg = "rgba(127,127,127,18)" if not dark else "rgba(255,255,255,13)"
    border = "rgba(127,127,127,71)"
    notice_bg = "rgba(235,160,20,41)"
    error_bg = "rgba(215,58,73,41)"
    # Explicit tooltip colours: a style sheet on any ancestor otherwise decides them (see TokenTextView).
    tip_fg, tip_bg = ("rgb(235,235,235)", "rgb(45,45,48)") if dark else ("rgb(20,20,20)", "rgb(255,255,240)")
    return f"""
    QFrame#bubble_user {{ background: {user_bg}; border-radius: 12px; border: 1px solid {border}; }}
    QFrame#bubble_assistant {{ background: {bot_bg}; border-radius: 12px; border: 1px solid {border}; }}
    QFrame#notice_info {{ background: {notice_bg}; border-radius: 8px; }}
    QFrame#notice_error {{ background: {error_bg}; border-radius: 8px; border: 1px solid rgba(215,58,73,128); }}
    QLabel#bubble_header {{ font-weight: 600; }}
    QLabel#bubble_footer {{ color: palette(placeholder-text); font-size: 11px; }}
    QLabel#muted {{ color: palette(placeholder-text); }}
    QLabel#verdict_ok {{ color: rgb(46,160,67); }}
    QLabel#verdict_bad {{ color: rgb(215,58,73); }}
    QToolButton#bubble_action {{ border: none; padding: 2px 6px; border-radius: 4px;
        color: palette(placeholder-text); }}
    QToolButton#bubble_action:hover {{ background: rgba(127,127,127,46); color: palette(text); }}
    QPlainTextEdit#composer {{ border: 1px solid {border}; border-radius: 10px; padding: 6px; }}
    QPushButton#send {{ background: rgb(124,92,230); color: white; border-radius: 8px; padding: 6px 16px;
        font-weight: 600; }}
    QPushButton#send:disabled {{ background: rgba(124,92,230,89); }}
    QPushButton#stop {{ background: rgb(215,58,73); color: white; border-radius: 8px; padding: 6px 16px;
        font-weight: 600; }}
    QPushButton#spec_toggle {{ border-radius: 8px; padding: 6px 12px; font-weight: 600;
        border: 1px solid {border}; }}
    QPushButton#spec_toggle:checked {{ background: rgba(46,160,67,217); color: white; border: none; }}
    QPushButton#spec_toggle:disabled, QPushButton#spec_toggle:checked:disabled {{ background: transparent;
        color: rgb(215,58,73); border: 1px solid rgba(215,58,73,150); }}
    QListWidget#conversations {{ border: none; }}
    QListWidget#conversations::item {{ padding: 6px 4px; border-radius: 6px; color: palette(text); }}
    QListWidget#conversations::item:selected {{ background: rgba(124,92,230,64); color: palette(text); }}
    QListWidget#conversations::item:hover:!selected {{ background: rgba(127,127,127,30); }}
    QScrollArea#chat_scroll {{ border: none; }}
    QToolTip {{ color: {tip_fg}; background: {tip_bg}; border: 1px solid {border}; padding: 4px; }}
    """
