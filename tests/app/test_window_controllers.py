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
    w = make_window(max_new_tokens=16, calibrate=True)
    assert [s.source for s in w.baselines.samples] == ["calibration"]
    assert w.session.engine.sizer.cost.seconds == {}  # its idle-window steps do not size the replies' trees
    w.spec_button.setChecked(False)
    send_and_wait(w, "Hello")  # a verifier-alone reply is one more measurement
    assert [s.source for s in w.baselines.samples] == ["calibration", "speculation-off reply"]

    with qtbot.waitSignal(w.models_loaded, timeout=60_000):
        w.loader.load()  # the same verifier: its measurements still hold
    qtbot.waitUntil(lambda: w.busy == "", timeout=5000)
    assert [s.source for s in w.baselines.samples] == ["calibration", "speculation-off reply"]

    with qtbot.waitSignal(w.models_loaded, timeout=60_000):
        w.loader.remeasure_baseline()
    qtbot.waitUntil(lambda: w.busy == "", timeout=5000)
    assert [s.source for s in w.baselines.samples] == ["calibration"]  # measured again, the rest dropped
    assert w.session.baseline_tps == w.baselines.samples[0].tokens_per_s
