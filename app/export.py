"""File ▸ Export: the conversation (Markdown, HTML with colours, JSON trace), the graphs as PNG, and the
shown reply's per-round stats (CSV or JSON). Each command asks for a path, then a `write_*` method
writes the file and says so in the status bar; the `write_*` methods take the path, so tests and
scripts skip the dialog.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QFileDialog

from app.export_formats import to_html, to_json, to_markdown
from app.graphs.stats_files import stats_csv, stats_json

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.conversation import Conversation
    from app.graphs.graphs_panel import GraphsPanel
    from app.trace import ReplyTrace


class ExportWindow(Protocol):
    """What exporting uses of the window: what it writes, where it says so, and a parent for the file dialog."""

    conv: Conversation
    graphs: GraphsPanel

    def say(self, text: str) -> None: ...
    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): the file dialog's parent

CONVERSATION_FILTERS = {"md": "Markdown (*.md)", "html": "HTML (*.html)", "json": "JSON (*.json)"}
STATS_FILTERS = "CSV, one row per round (*.csv);;JSON (*.json)"


class ExportController:
    def __init__(self, window: ExportWindow) -> None:
        self.window = window

    # -- commands (a file dialog, then a write) ---------------------------------------------------------
    def export_conversation(self, kind: str) -> None:
        title = self.window.conv.title
        slug = "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")[:40] or "chat"
        path, _ = self._ask("Export conversation", f"{slug}.{kind}", CONVERSATION_FILTERS[kind])
        if path:
            self.write_conversation(kind, Path(path))

    def export_graphs_png(self) -> None:
        path, _ = self._ask("Export graphs", "specdec-graphs.png", "PNG image (*.png)")
        if path:
            self.write_graphs_png(Path(path))

    def export_stats(self) -> None:
        trace = self.window.graphs.live.trace
        if trace is None:
            self.window.say("No reply to export yet")
            return
        path, filt = self._ask("Export reply stats", "specdec-stats.csv", STATS_FILTERS)
        if path:
            self.write_stats(trace, Path(path), as_json=path.endswith(".json") or "JSON" in filt)

    # -- writers ----------------------------------------------------------------------------------------
    def write_conversation(self, kind: str, path: Path) -> None:
        """The open conversation as "md", "html" or "json"."""
        text = {"md": to_markdown, "html": to_html, "json": to_json}[kind](self.window.conv)
        path.write_text(text, encoding="utf-8")
        self._exported(path)

    def write_graphs_png(self, path: Path) -> None:
        """The graphs tab on show (the live reply's or the race's), fully drawn."""
        graphs = self.window.graphs
        graphs.flush()
        shown = graphs.live if graphs.tabs.currentIndex() == 0 else graphs.race
        shown.grab().save(str(path), "PNG")
        self._exported(path)

    def write_stats(self, trace: ReplyTrace, path: Path, *, as_json: bool = False) -> None:
        """One row per round of `trace` (CSV), or the rounds and totals as JSON."""
        path.write_text(stats_json(trace) if as_json else stats_csv(trace), encoding="utf-8")
        self._exported(path)

    def _ask(self, title: str, suggested: str, filters: str) -> tuple[str, str]:
        return QFileDialog.getSaveFileName(self.window.window(), title, str(Path.home() / suggested), filters)

    def _exported(self, path: Path) -> None:
        self.window.say(f"Exported {path}")
