"""Every window and dialog fits a 1024×700 screen and a 2560×1600 one at QT_SCALE_FACTOR=2 (1280×800
logical pixels), and presenter mode gives the layout back exactly.

The offscreen platform has one 800×800 screen, so the tests hand the window an available area (as
`MainWindow.fit_to` and `app.fit.fit_to_screen` take one) and check minimum sizes against it.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtWidgets import QApplication

from app.fit import fit_to_screen, fits

SCREENS = {"1024x700": QSize(1024, 700), "2560x1600 at scale 2": QSize(1280, 800)}


def inside(widget, window) -> bool:
    """Whether all of `widget` lies within `window` (nothing off its right or bottom edge)."""
    top_left = widget.mapTo(window, QPoint(0, 0))
    return QRect(top_left, widget.size()).intersected(window.rect()) == QRect(top_left, widget.size())


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_main_window_fits_the_screen_with_its_graphs_and_buttons_on_it(screen, make_window, qtbot,
                                                                             send_and_wait):
    area = SCREENS[screen]
    w = make_window(max_new_tokens=16)
    assert fits(w, area), f"minimum {w.minimumSizeHint()} does not fit {area}"
    w.fit_to(QRect(QPoint(0, 0), area))
    send_and_wait(w, "Tell me about Paris")
    qtbot.wait(50)
    QApplication.processEvents()
    assert w.width() <= area.width() and w.height() <= area.height()
    for widget in (w.graphs.export_stats, w.graphs.export_png, w.send_button, w.race_button, w.spec_button,
                   w.graphs.live_scroll, w.chat):
        assert inside(widget, w), f"{widget.objectName() or type(widget).__name__} runs off the window"
    # The plots fit their panel (one column when narrow; the panel scrolls), and no bubble is clipped.
    live = w.graphs.live
    assert live.width() <= w.graphs.live_scroll.viewport().width()
    viewport = w.chat.viewport().width()
    for bubble in w.chat.bubbles:
        assert bubble.mapTo(w.chat.viewport(), bubble.rect().topRight()).x() <= viewport
        assert bubble.body.height() >= bubble.body.document().size().height()


def test_graphs_go_to_one_column_when_narrow(qtbot):
    from app.graphs.live import LiveGraphs

    live = LiveGraphs()
    qtbot.addWidget(live)
    live.resize(1000, 700)
    live.show()
    qtbot.wait(10)
    assert live._columns == 2
    live.resize(320, 700)
    qtbot.wait(10)
    assert live._columns == 1


@pytest.mark.parametrize("screen", list(SCREENS))
def test_talk_dialogs_fit_the_screen(screen, qtbot, make_window, send_and_wait):
    area = SCREENS[screen]
    w = make_window(max_new_tokens=16)
    w.fit_to(QRect(QPoint(0, 0), area))
    send_and_wait(w, "Once upon a time")
    talk = w.talk
    dialogs = [talk.open_replay(), talk.open_explainer()]
    for open_view in (talk.open_race, talk.open_draft_alone):
        dlg = open_view()
        with qtbot.waitSignal(dlg.view.finished, timeout=60_000):
            pass
        dialogs.append(dlg)
    from app.rank_dialog import RankDialog

    dialogs.append(RankDialog(w))
    for dlg in dialogs:
        fit_to_screen(dlg, QSize(1280, 800), QRect(QPoint(0, 0), area))
        QApplication.processEvents()
        name = dlg.windowTitle()
        assert fits(dlg, area), f"{name}: minimum {dlg.minimumSizeHint()} does not fit {area}"
        # ... and its content too, so it does not scroll sideways (labels wrap instead of widening it)
        view = getattr(dlg, "view", None) or getattr(dlg, "replay", None)
        if view is not None:
            assert view.minimumSizeHint().width() + 24 <= area.width(), f"{name}: {view.minimumSizeHint()}"
        frame = dlg.frameGeometry()
        assert frame.width() <= area.width() and frame.height() <= area.height(), name
        dlg.close()


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_models_dialog_fits_the_screen_with_every_known_model_in_view(screen, qtbot, make_window):
    from app.models_dialog import ModelsDialog

    area = SCREENS[screen]
    w = make_window(load=False)
    w.fit_to(QRect(QPoint(0, 0), area))
    dlg = ModelsDialog(w)
    qtbot.addWidget(dlg)
    size = fit_to_screen(dlg, ModelsDialog.PREFERRED, QRect(QPoint(0, 0), area))
    dlg.show()
    QApplication.processEvents()
    assert fits(dlg, area), f"minimum {dlg.minimumSizeHint()} does not fit {area}"
    frame = dlg.frameGeometry()
    assert frame.width() <= area.width() and frame.height() <= area.height()
    assert size == ModelsDialog.PREFERRED.boundedTo(size)  # capped by the screen, never larger than asked
    table = dlg.table
    last = table.rowCount() - 1
    assert last >= 0 and table.rowViewportPosition(last) + table.rowHeight(last) <= table.viewport().height()
    for button in (dlg.install_button, dlg.remove_button, dlg.cancel_button):
        assert inside(button, dlg), button.text()


def test_presenter_mode_twice_gives_the_layout_back_exactly(qtbot, make_window, send_and_wait):
    w = make_window(max_new_tokens=12)
    w.fit_to(QRect(0, 0, 1480, 900))
    send_and_wait(w, "Hello there")
    qtbot.wait(50)

    def layout():
        QApplication.processEvents()
        return (w.size(), w.left_dock.width(), w.right_dock.width(), w.chat.width(),
                [b.width() for b in w.chat.bubbles])

    before = layout()
    w.talk.presenter.toggle()
    qtbot.wait(50)
    assert layout() != before
    w.talk.presenter.toggle()
    qtbot.wait(200)
    assert layout() == before


def test_at_1024_px_the_status_message_keeps_the_status_bar_and_shows_its_whole_text_on_hover(qtbot, make_window):
    w = make_window()
    w.fit_to(QRect(QPoint(0, 0), SCREENS["1024x700"]))
    # A reply's summary as the embedded pair writes it (seen cut off at 1024 px by the words on the right)
    summary = ("48 tokens · 6.8 tok/s · acceptance 19% · 1.85 tokens/call · 0.66× ±0.23 vs verifier alone "
               "(only the calibration at load so far: race for a like-for-like figure) · stopped at max tokens")
    w.say(summary)
    qtbot.wait(50)
    QApplication.processEvents()
    line, side, bar = w.status_label, w.adaptation.label, w.statusBar()
    assert side.text() == "draft does not adapt" and "only a draft head adapts" in side.toolTip()
    # The permanent words on the right are a few: the message keeps most of the bar, and is never under them.
    assert line.width() >= 0.8 * bar.width(), (line.width(), bar.width())
    assert line.geometry().right() < side.geometry().left()
    # Longer than its room: it ends in "…" and the whole of it is the tooltip.
    assert line.text() == summary and line.fontMetrics().horizontalAdvance(summary) > line.width()
    shown = line.shown_text()
    assert shown.endswith("…") and summary.startswith(shown[:-1]) and line.toolTip() == summary
    # A message that fits is shown whole, with no tooltip to hover for.
    w.say("Ready")
    assert line.shown_text() == "Ready" and not line.is_elided() and line.toolTip() == ""


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_settings_tab_fits_the_sidebar_without_scrolling_sideways(screen, qtbot, make_window):
    w = make_window()
    w.fit_to(QRect(QPoint(0, 0), SCREENS[screen]))
    w.left_tabs.setCurrentIndex(1)
    qtbot.wait(50)
    QApplication.processEvents()
    panel = w.settings_panel
    assert panel.widget().width() <= panel.viewport().width() and not panel.horizontalScrollBar().isVisible()
    tabs = w.left_tabs.tabBar()
    assert tabs.sizeHint().width() <= tabs.width()  # "Chats" and "Settings" both in view, no scroll arrows
    assert w.chat.width() >= 400  # the chat column keeps the most room
    panel.draft.offer([("another-draft", "same tokenizer")])  # after a load: the drafts that pair, offered
    for combo in (panel.verifier, panel.draft):  # a model's name too long for its field shows its start
        assert combo.currentText() and combo.lineEdit().cursorPosition() == 0


def test_from_1280_px_the_chat_keeps_its_legends_full_row_and_at_1024_it_takes_the_short_one(qtbot, make_window):
    w = make_window(load=False)
    for area, texts in ((QSize(1280, 800), ("Colour tokens", "Reading mode")),
                        (QSize(1024, 700), ("Colours", "Reading"))):
        w.fit_to(QRect(QPoint(0, 0), area))
        qtbot.wait(50)
        QApplication.processEvents()
        assert (w.legend.check.text(), w.legend.reading.text()) == texts, area


def test_a_legend_too_narrow_for_its_short_row_wraps_its_swatches_onto_a_second_row_and_shows_them_all(qtbot):
    from app.legend import FULL, SHORT, TWO_ROWS, Legend

    legend = Legend()
    qtbot.addWidget(legend)
    legend.show()
    sizes = legend._measure()
    assert sizes[TWO_ROWS].width() < sizes[SHORT].width() < sizes[FULL].width()
    assert legend.minimumSizeHint().width() == sizes[TWO_ROWS].width()  # the window's minimum is the narrowest form
    for width, form in ((sizes[FULL].width(), FULL), (sizes[SHORT].width(), SHORT),
                        (sizes[SHORT].width() - 1, TWO_ROWS), (sizes[FULL].width(), FULL)):
        legend.resize(width, legend.minimumSizeHint().height())
        qtbot.wait(10)
        QApplication.processEvents()
        assert legend.form == form, width
        assert legend.sizeHint().width() == sizes[FULL].width()  # the chat column asks for the full row's room
        legend.resize(width, legend.sizeHint().height())
        QApplication.processEvents()
        for widget in (legend.check, legend.reading, *legend.swatches):
            assert widget.isVisible() and inside(widget, legend), (form, widget.text())
    legend.resize(sizes[TWO_ROWS].width(), 100)
    QApplication.processEvents()
    assert legend.swatches[0].y() > legend.check.y()  # the swatches sit under the switches


def test_wrap_labels_wraps_every_label_but_one_marked_one_line_like_the_replays_position(qtbot):
    from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

    from app.fit import ONE_LINE, wrap_labels
    from app.talk.replay import ReplayWidget

    root = QWidget()
    qtbot.addWidget(root)
    lay = QVBoxLayout(root)
    sentence, counter = QLabel("a sentence of results that may be long"), QLabel("round 1/38 · beat 6/66")
    counter.setProperty(ONE_LINE, True)
    for label in (sentence, counter):
        lay.addWidget(label)
    wrap_labels(root)
    assert sentence.wordWrap() and not counter.wordWrap()
    replay = ReplayWidget()
    qtbot.addWidget(replay)
    wrap_labels(replay)
    assert not replay.position.wordWrap() and replay.caption.wordWrap()
