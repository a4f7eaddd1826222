"""The tests draw with fonts they make (tests/made_fonts.py), whatever fonts the machine has."""

from __future__ import annotations

import os

import pytest
from made_fonts import EM, MONO, MONO_ADVANCE, SANS, sans_advance
from PySide6.QtGui import QFont, QFontDatabase, QFontInfo, QFontMetricsF
from PySide6.QtWidgets import QApplication

pytestmark = pytest.mark.skipif(os.environ.get("SPECDEC_TEST_FONTS") == "system",
                                reason="SPECDEC_TEST_FONTS=system: the machine's own fonts")


def test_every_family_a_test_asks_for_is_one_of_the_made_fonts(qapp):
    assert set(QFontDatabase.families()) >= {SANS, MONO}
    assert QFontInfo(QApplication.font()).family() == SANS
    fixed = QFontInfo(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    assert fixed.family() == MONO and fixed.fixedPitch()
    for family in ("DejaVu Sans", "Liberation Sans", "Segoe UI", "Helvetica", "serif"):
        assert QFontInfo(QFont(family)).family() == SANS, family


def test_a_texts_width_is_the_sum_of_the_made_advances(qapp):
    font = QFont(SANS)
    font.setPixelSize(EM // 10)  # 100 px to the em: an advance of 600 units is 60 px
    text = "Colour tokens: γ=4, ✓ 99%"
    expected = sum(sans_advance(char) for char in text) / 10
    # each glyph's advance may be rounded to a whole pixel
    assert QFontMetricsF(font).horizontalAdvance(text) == pytest.approx(expected, abs=0.5 * len(text))
    mono = QFont(MONO)
    mono.setPixelSize(EM // 10)
    assert QFontMetricsF(mono).horizontalAdvance("iiii") == pytest.approx(4 * MONO_ADVANCE / 10, abs=2)
