"""Presenter mode on the real main window, and the Talk menu that install_talk_mode adds."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication


def _sizes(window):
    bubble_font = window.composer.font().pointSizeF()
    return window.font().pointSizeF(), bubble_font


def test_presenter_mode_enlarges_type_survives_resize_and_restores(qtbot, make_window):
    window = make_window(load=False)
    talk = window.talk
    before_font, before_composer = _sizes(window)
    sheet = window.styleSheet()
    left_visible = window.left_dock.isVisible()

    talk.presenter_action.trigger()
    QApplication.processEvents()
    assert talk.presenter.active and talk.presenter_action.isChecked()
    font, composer = _sizes(window)
    assert font >= before_font * 1.5 and composer >= before_composer * 1.5
    assert window.legend.isVisible() and window.right_dock.isVisible() and not window.left_dock.isVisible()
    assert window.isFullScreen()
    axis = window.graphs.live.plots["tps"].getPlotItem().getAxis("bottom")
    assert axis.style["tickFont"].pointSizeF() >= 11

    window.showNormal()
    window.resize(900, 600)
    qtbot.wait(50)
    QApplication.processEvents()
    assert talk.presenter.active
    assert _sizes(window)[0] == font and window.legend.isVisible()
    assert window.right_dock.width() >= 0.3 * window.width()  # graphs keep their large share

    talk.presenter.toggle()
    QApplication.processEvents()
    assert not talk.presenter.active and not talk.presenter_action.isChecked()
    assert _sizes(window) == (before_font, before_composer)
    assert window.styleSheet() == sheet and window.left_dock.isVisible() == left_visible
    assert axis.style["tickFont"] is None or axis.style["tickFont"].pointSizeF() < 11


def test_talk_menu_has_its_actions_without_shortcut_clashes(qtbot, make_window):
    from PySide6.QtGui import QAction

    window = make_window(load=False)
    talk = window.talk  # the window installs talk mode itself
    others = [a for a in window.findChildren(QAction) if a is not talk.presenter_action]
    before = {k.toString() for a in others for k in a.shortcuts()}
    names = [a.text() for a in talk.menu.actions() if a.text()]
    assert any("Presenter" in n for n in names) and any("Replay" in n for n in names)
    assert any("Race" in n for n in names) and any("slow" in n for n in names)
    assert talk.presenter_action.shortcut().toString() == "F5" and "F5" not in before
    # without models, the runs explain what is missing instead of opening
    assert talk.open_race() is None and talk.open_replay() is None


def test_replay_opens_for_the_windows_current_reply(qtbot, make_window, send_and_wait):
    window = make_window()
    talk = window.talk
    trace = send_and_wait(window, "Once upon a time")
    dlg = talk.open_replay()
    assert dlg is not None and dlg.replay.trace is trace
    dlg.replay.to_end()
    assert dlg.replay.state.committed_text() == trace.text
    dlg.close()
