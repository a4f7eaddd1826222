"""The main window's controllers, each as the user meets it: File ▸ Export writes the files it names, and
reloading the models keeps the verifier-alone baselines unless the verifier changed or a re-measure was
asked for."""

from __future__ import annotations

import csv
import io
import json

from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog


def test_exports_write_the_conversation_the_graphs_and_the_reply_stats(make_window, send_and_wait, tmp_path,
                                                                        monkeypatch):
    w = make_window(max_new_tokens=12)
    trace = send_and_wait(w, "Export me")
    chosen: list[str] = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (chosen[-1], "JSON (*.json)"))

    for kind in ("md", "html", "json"):
        chosen.append(str(tmp_path / f"chat.{kind}"))
        w.exporter.export_conversation(kind)
        assert w.status_label.text() == f"Exported {chosen[-1]}"
    assert "Export me" in (tmp_path / "chat.md").read_text() and "Export me" in (tmp_path / "chat.html").read_text()
    saved = json.loads((tmp_path / "chat.json").read_text())
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]
    assert saved["messages"][1]["content"] == trace.text

    chosen.append(str(tmp_path / "stats.json"))  # the JSON filter picks JSON
    w.exporter.export_stats()
    assert len(json.loads((tmp_path / "stats.json").read_text())["rounds"]) == len(trace.rounds) > 0
    w.exporter.write_stats(trace, tmp_path / "stats.csv")  # CSV: one row per round
    rows = list(csv.DictReader(io.StringIO((tmp_path / "stats.csv").read_text())))
    assert [int(r["round"]) for r in rows] == list(range(1, len(trace.rounds) + 1))

    chosen.append(str(tmp_path / "graphs.png"))
    w.exporter.export_graphs_png()
    image = QImage(str(tmp_path / "graphs.png"))
    assert not image.isNull() and image.width() > 100


def test_exporting_stats_before_any_reply_says_there_is_nothing_and_asks_for_no_file(make_window, monkeypatch):
    w = make_window(load=False)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (_ for _ in ()).throw(AssertionError("asked")))
    w.exporter.export_stats()
    assert w.status_label.text() == "No reply to export yet"


def test_reloading_keeps_the_baselines_and_remeasuring_starts_them_afresh(make_window, qtbot, send_and_wait):
    from app.baseline_runs import AFTER_LOAD, PAIRS

    after_load = [AFTER_LOAD] * PAIRS  # each load measures the verifier alone PAIRS times, in the background
    w = make_window(max_new_tokens=16, calibrate=True)
    b = w.baseline

    def idle() -> bool:
        return w.busy == "" and not (b.running or b.warming or b.due)

    qtbot.waitUntil(idle, timeout=60_000)
    assert [s.source for s in w.baselines.samples] == after_load
    w.spec_button.setChecked(False)
    send_and_wait(w, "Hello")  # a verifier-alone reply is one more measurement
    assert [s.source for s in w.baselines.samples] == [*after_load, "speculation-off reply"]

    with qtbot.waitSignal(w.models_loaded, timeout=60_000):
        w.loader.load()  # the same verifier: its measurements still hold (and the new load measures more)
    qtbot.waitUntil(idle, timeout=60_000)
    assert [s.source for s in w.baselines.samples] == [*after_load, "speculation-off reply", *after_load]

    with qtbot.waitSignal(w.models_loaded, timeout=60_000):
        w.loader.remeasure_baseline()
    qtbot.waitUntil(idle, timeout=60_000)
    assert [s.source for s in w.baselines.samples] == after_load  # measured again, the rest dropped
    assert w.session.baseline_tps in [s.tokens_per_s for s in w.baselines.samples]


CONTROLLERS = {  # module: its port, the one type under which it is given the main window
    "conversations": ("app.conversations", "ConversationWindow"),
    "loading": ("app.loading", "LoadWindow"),
    "baseline_controller": ("app.baseline_controller", "BaselineWindow"),
    "race_controller": ("app.race_controller", "RaceWindow"),
    "reply_controller": ("app.reply_controller", "ReplyWindow"),
    "run_controller": ("app.run_controller", "RunWindow"),
    "export": ("app.export", "ExportWindow"),
    "rank_dialog": ("app.rank_dialog", "RankWindow"),
    "models_dialog": ("app.models_dialog", "ModelsWindow"),
    "talk/__init__": ("app.talk", "TalkWindow"),
    "talk/presenter": ("app.talk.presenter", "PresentedWindow"),
    "talk/context": ("app.ports", "RunPort"),
}


def _port_members(port: type) -> set[str]:
    from typing import Protocol

    names: set[str] = set()
    for klass in port.__mro__:
        if getattr(klass, "_is_protocol", False) and klass is not Protocol:
            names |= set(vars(klass).get("__annotations__", {}))
            names |= {n for n, v in vars(klass).items()
                      if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


def _window_uses(path) -> dict[str, int]:
    """The attributes a module reads of the main window (named `w`, `window`, `self.window` or `self.window_`)."""
    import ast

    def is_window(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("w", "window")) or \
            (isinstance(node, ast.Attribute) and node.attr in ("window", "window_")
             and isinstance(node.value, ast.Name) and node.value.id == "self")

    return {node.attr: node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and is_window(node.value)}


def test_each_controller_reaches_the_window_only_through_its_port_and_the_window_provides_every_port():
    # The controllers, dialogs and talk mode are given the main window as a port (app/ports.py): they use
    # nothing of it that their port does not name, none of them imports app/window.py, and the window has
    # every member each port names (its own, or its QMainWindow's).
    import ast
    import importlib
    from pathlib import Path

    from PySide6.QtWidgets import QMainWindow

    app_dir = Path(__file__).resolve().parents[2] / "app"
    window_tree = ast.parse((app_dir / "window.py").read_text())
    (main_window,) = [n for n in window_tree.body if isinstance(n, ast.ClassDef) and n.name == "MainWindow"]
    provided = {n.name for n in main_window.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    provided |= {t.id for n in main_window.body if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name)}
    provided |= {t.attr for n in ast.walk(main_window) if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                 if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    # The widgets app/window_layout.py's builders make on the window (`w.chat = ...`) are its members too.
    layout_tree = ast.parse((app_dir / "window_layout.py").read_text())
    provided |= {t.attr for n in ast.walk(layout_tree) if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "w"}

    bad = []
    for name, (module, port_name) in CONTROLLERS.items():
        path = app_dir / f"{name}.py"
        members = _port_members(getattr(importlib.import_module(module), port_name))
        bad += [f"app/{name}.py:{line} uses the window's .{attr}, which {port_name} does not name"
                for attr, line in _window_uses(path).items() if attr not in members]
        bad += [f"app/{name}.py imports app.window" for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.module == "app.window"]
        bad += [f"{port_name}.{m}: the window has no such member" for m in sorted(members)
                if m not in provided and not hasattr(QMainWindow, m)]
    assert not bad, "\n".join(bad)
