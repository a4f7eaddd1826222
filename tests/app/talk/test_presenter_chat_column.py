"""Presenter mode gives the chat column the larger part of the window, so a reply's code wraps less."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.talk.presenter import GRAPHS_SHARE, graphs_width


def test_the_graphs_take_their_share_or_their_minimum_and_the_chat_the_rest():
    assert graphs_width(1280, 300) == int(1280 * GRAPHS_SHARE) < 1280 / 2
    assert graphs_width(700, 300) == 300  # a narrow window: the graphs' minimum wins


def test_presenter_mode_widens_the_chat_column(qtbot, make_window):
    window = make_window(load=False)
    window.talk.presenter.full_screen = False
    window.resize(1280, 800)
    asked: list[int] = []
    resize_docks = window.resizeDocks

    def record(docks, sizes, orientation):
        if docks == [window.right_dock]:
            asked.append(sizes[0])
        resize_docks(docks, sizes, orientation)

    window.resizeDocks = record
    window.talk.presenter.set_active(True)
    qtbot.waitUntil(lambda: bool(asked))
    QApplication.processEvents()
    minimum = window.right_dock.minimumSizeHint().width()
    assert asked[-1] == graphs_width(window.width(), minimum)
    assert asked[-1] < window.width() - asked[-1]  # the chat (the sidebar is hidden) keeps the larger part
    assert not window.left_dock.isVisible()
    window.talk.presenter.set_active(False)
