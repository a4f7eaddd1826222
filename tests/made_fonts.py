"""The fonts the tests draw with, made here, so that no test depends on which fonts a machine has.

A layout measured in one machine's fonts differs on the next: a legend 518 px wide in Liberation Sans is narrower in
DejaVu, and a window that fitted 1024 px on one machine took 1025 on another. So the tests make two fonts of plain
boxes whose advances are close to DejaVu's (among the wider common families), point fontconfig at them alone
(`FONTCONFIG_FILE`, read by Qt, by the app and CLI processes the tests start, and by headless Chromium), and every
family a test or the app asks for resolves to one of them: monospace to the fixed-pitch one, anything else to the
proportional one. The fonts and their configuration live in a temporary folder of the test process.

Set SPECDEC_TEST_FONTS=system to run the tests with the machine's own fonts instead (to look at a real layout).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

SANS, MONO = "Specdec Test Sans", "Specdec Test Mono"
EM = 1000
ASCENT, DESCENT = 930, 240  # DejaVu Sans's line spacing
MONO_ADVANCE = 602

# Advances of the proportional font, by character: close to DejaVu Sans, so layouts are about as wide as there.
_NARROW = set("il.,:;'!|`")
_SEMI_NARROW = set("jftrI()[]{}-\"/\\")
_WIDE = set("mwMW@%")
_ZERO_WIDTH = {0xAD, *range(0x200B, 0x2010), *range(0x2060, 0x2070)}
# The characters the fonts draw: Latin, Greek, and the punctuation, arrows, math, box and symbol blocks the app uses
# (✓, ⏎, ×, γ, α, …).
_RANGES = ((0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x2000, 0x2BFF), (0xFFFD, 0xFFFD))


def sans_advance(char: str) -> int:
    """The proportional font's advance for `char`, in units of a 1000-unit em."""
    if char in (" ", "\u00a0"):
        return 318
    if char in _NARROW:
        return 320
    if char in _SEMI_NARROW:
        return 400
    if char in _WIDE:
        return 920
    if char.isdigit() and char.isascii():
        return 636
    if char.isupper():
        return 700
    return 600


def _box(width: int):
    """A glyph drawn as a box inside its advance (empty for a space or a zero advance)."""
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    pen = TTGlyphPen(None)
    if width > 100:
        margin = width // 10
        pen.moveTo((margin, 0))
        pen.lineTo((margin, 700))
        pen.lineTo((width - margin, 700))
        pen.lineTo((width - margin, 0))
        pen.closePath()
    return pen.glyph()


def _glyph_name(advance: int) -> str:
    """The glyph of every character `advance` units wide."""
    return f"w{advance}"


def _panose(fixed: bool):
    """The PANOSE classification: a Latin text face, monospaced or not (fontconfig reads its spacing from it)."""
    from fontTools.ttLib.tables.O_S_2f_2 import Panose

    panose = Panose()
    panose.bFamilyType, panose.bProportion = 2, 9 if fixed else 3
    return panose


def make_font(path: Path, family: str, advance_of) -> Path:
    """Write a TrueType font of boxes: `advance_of(char)` gives each character's advance. Characters of one
    advance share one glyph (a box that wide)."""
    from fontTools.fontBuilder import FontBuilder

    codepoints = [c for first, last in _RANGES for c in range(first, last + 1)]
    glyph_of = {c: _glyph_name(0 if c in _ZERO_WIDTH else advance_of(chr(c))) for c in codepoints}
    advances = {name: int(name[1:]) for name in set(glyph_of.values())}
    builder = FontBuilder(EM, isTTF=True)
    builder.setupGlyphOrder([".notdef", *sorted(advances)])
    builder.setupCharacterMap(glyph_of)
    builder.setupGlyf({".notdef": _box(600), **{name: _box(width) for name, width in advances.items()}})
    builder.setupHorizontalMetrics({".notdef": (600, 60),
                                    **{name: (width, width // 10) for name, width in advances.items()}})
    builder.setupHorizontalHeader(ascent=ASCENT, descent=-DESCENT)
    builder.setupNameTable({"familyName": family, "styleName": "Regular"})
    fixed = family == MONO
    builder.setupOS2(sTypoAscender=ASCENT, sTypoDescender=-DESCENT, sTypoLineGap=0, usWinAscent=ASCENT,
                     usWinDescent=DESCENT, panose=_panose(fixed))
    builder.setupPost(isFixedPitch=int(fixed))
    builder.save(str(path))
    return path


def fontconfig_file(folder: Path) -> Path:
    """A fontconfig configuration that sees only the fonts in `folder`: monospace is the fixed-pitch font, and any
    other family asked for falls back to the proportional one."""
    conf = folder / "fonts.conf"
    conf.write_text(f"""<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir>{folder}</dir>
  <cachedir>{folder / "cache"}</cachedir>
  <alias><family>monospace</family><prefer><family>{MONO}</family></prefer></alias>
  <alias><family>sans-serif</family><prefer><family>{SANS}</family></prefer></alias>
  <alias><family>serif</family><prefer><family>{SANS}</family></prefer></alias>
  <match target="pattern"><edit name="family" mode="append_last"><string>{SANS}</string></edit></match>
</fontconfig>
""")
    return conf


def use_made_fonts() -> Path | None:
    """Make the fonts in a temporary folder of this process and point fontconfig at them (before Qt loads).
    Returns the configuration's path, or None where SPECDEC_TEST_FONTS=system keeps the machine's fonts."""
    if os.environ.get("SPECDEC_TEST_FONTS") == "system":
        return None
    folder = Path(tempfile.mkdtemp(prefix="specdec-test-fonts-"))
    atexit.register(shutil.rmtree, folder, True)
    make_font(folder / "specdec-test-sans.ttf", SANS, sans_advance)
    make_font(folder / "specdec-test-mono.ttf", MONO, lambda _char: MONO_ADVANCE)
    conf = fontconfig_file(folder)
    os.environ["FONTCONFIG_FILE"] = str(conf)
    return conf
