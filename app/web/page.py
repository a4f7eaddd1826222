"""One self-contained HTML file that replays a Recording: its JSON, script and style inline, nothing fetched.

The page works from a file on a laptop with no network and no models: no external scripts, styles or fonts. The
recording is embedded as JSON in a <script type="application/json"> element, with "<", ">" and "&" written as
JSON escapes, so no string in it (a reply that says "</script>") can end the element. Qt-free.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from app.web.recording import Recording

HERE = Path(__file__).resolve().parent

# The app's token colours (app/theme.py's STATE_STYLE and STATE_SOLID; a test checks that they agree), as
# (red, green, blue, alpha 0-255): the tint behind a token, the text colour where it has one, and the solid swatch.
STATE_COLOURS: dict[str, dict[str, tuple[int, int, int, int] | None]] = {
    "accepted": {"bg": (46, 160, 67, 85), "fg": None, "solid": (46, 160, 67, 255)},
    "rejected": {"bg": (215, 58, 73, 40), "fg": (215, 58, 73, 255), "solid": (215, 58, 73, 255)},
    "corrected": {"bg": (235, 160, 20, 110), "fg": None, "solid": (235, 160, 20, 255)},
    "bonus": {"bg": (59, 130, 246, 95), "fg": None, "solid": (59, 130, 246, 255)},
    "plain": {"bg": None, "fg": None, "solid": (140, 140, 140, 255)},
}
# A race's lanes, as the app's race draws them: the verifier alone in the "verifier only" grey, speculation in the
# accent (app/theme.py ACCENT).
LANE_COLOURS = {"off-lane": (140, 140, 140, 255), "on-lane": (124, 92, 230, 255)}


def css_colour(rgba: tuple[int, int, int, int] | None) -> str:
    if rgba is None:
        return "transparent"
    r, g, b, a = rgba
    return f"rgb({r},{g},{b})" if a == 255 else f"rgba({r},{g},{b},{a / 255:.3f})"


def colour_rules() -> str:
    """:root variables the style sheet and the script use: --accepted-bg, --rejected-fg, --on-lane, ..."""
    names = [f"--{state}-{part}: {css_colour(rgba)};"
             for state, parts in STATE_COLOURS.items() for part, rgba in parts.items() if rgba is not None]
    names += [f"--{name}: {css_colour(rgba)};" for name, rgba in LANE_COLOURS.items()]
    return ":root { " + " ".join(names) + " }"


def embedded_json(data: object) -> str:
    """JSON that is safe inside a <script> element: "<", ">" and "&" escaped (they can only occur in strings),
    and the two line separators JavaScript once read as line ends."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch in "<>&\u2028\u2029":
        text = text.replace(ch, f"\\u{ord(ch):04x}")
    return text


# Catches what the page would log as an error, before anything else runs, and shows it in #errors: a test (and a
# speaker) can see from the page itself that it played cleanly.
ERROR_CATCHER = """
(function () {
  function show(text) {
    var list = document.getElementById("errors");
    var item = document.createElement("li");
    item.textContent = text;
    list.appendChild(item);
    list.hidden = false;
  }
  window.addEventListener("error", function (e) { show("error: " + e.message); });
  window.addEventListener("unhandledrejection", function (e) { show("unhandled rejection: " + e.reason); });
  var original = console.error;
  console.error = function () {
    show("console.error: " + Array.prototype.map.call(arguments, String).join(" "));
    return original.apply(console, arguments);
  };
})();
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="specdec">
<title>{title}</title>
<style>
{colours}
{style}</style>
</head>
<body>
<ul id="errors" hidden></ul>
<script>{catcher}</script>
<header><h1 id="title">{title}</h1><div id="headline"></div><div id="headline-words"></div></header>
<nav><button id="prev" type="button">← Previous</button><button id="replay" type="button">Replay</button>
<button id="next" type="button">Next →</button><span id="counter"></span></nav>
<main></main>
<p id="status"></p>
<script type="application/json" id="recording">{data}</script>
<script>
{script}</script>
</body>
</html>
"""


def page_html(recording: Recording) -> str:
    """The whole page as text."""
    script = (HERE / "page.js").read_text(encoding="utf-8")
    style = (HERE / "page.css").read_text(encoding="utf-8")
    for name, text in (("page.js", script), ("page.css", style)):
        if "</" in text and ("</script" in text.lower() or "</style" in text.lower()):
            raise ValueError(f"{name} must not contain a closing tag of its element")
    return TEMPLATE.format(title=html.escape(recording.title), colours=colour_rules(), style=style,
                           catcher=ERROR_CATCHER, data=embedded_json(recording.to_json()), script=script)


def write_web_page(recording: Recording, path: str | Path) -> Path:
    """Write the page to `path` (UTF-8); returns the path. An empty recording is refused: it would replay
    nothing."""
    if not recording:
        raise ValueError("nothing recorded yet: run a reply, a race or the demo first")
    path = Path(path)
    path.write_text(page_html(recording), encoding="utf-8")
    return path
