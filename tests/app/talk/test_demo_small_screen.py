"""The demo's race and "what makes it slow" steps on a 1024×700 screen: their plots, legends included, in view
without scrolling, under the demo's headline at its presenter size. Checked by the widgets' geometry against the
scroll area's viewport, with the tests' own fonts."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint

from specdec_core.config import GenerationConfig

STEP_TIMEOUT_MS = 120_000


@pytest.fixture
def small_demo(qtbot, tiny_session, data_dir):
    from app.runs import RunContext
    from app.talk import TalkDialog
    from app.talk.demo import DemoView
    from app.talk.demo_script import STEPS

    view = DemoView()
    dialog = TalkDialog(view, "The demo", None, False)
    qtbot.addWidget(dialog)
    dialog.resize(1024, 700)  # full screen, as in presenter mode
    dialog.show()
    qtbot.waitExposed(dialog)
    view.ctx = RunContext(tiny_session, [{"role": "user", "content": STEPS[0].prompt}], None,
                          GenerationConfig(max_new_tokens=16, gamma=3))
    yield view
    view.stop()
    dialog.close()


def in_view(widget, area) -> bool:
    """Whether all of `widget` lies inside the scroll area's viewport as it is scrolled now."""
    top = widget.mapTo(area.viewport(), QPoint(0, 0))
    bottom = widget.mapTo(area.viewport(), QPoint(widget.width(), widget.height()))
    return top.y() >= 0 and top.x() >= 0 and bottom.y() <= area.viewport().height() \
        and bottom.x() <= area.viewport().width()


@pytest.mark.parametrize("key", ["race", "slow"])
def test_at_1024_by_700_the_steps_plots_are_in_view_without_scrolling(key, qtbot, small_demo):
    from PySide6.QtWidgets import QApplication, QScrollArea

    from app.talk.demo import HEADLINE_POINTS
    from app.talk.demo_script import STEPS

    view = small_demo
    index = next(i for i, step in enumerate(STEPS) if step.key == key)
    view.go(index)
    qtbot.waitUntil(lambda: view.pages[index].finished, timeout=STEP_TIMEOUT_MS)
    qtbot.wait(50)
    QApplication.processEvents()
    page = view.pages[index]
    assert page.error == ""
    area = view.window().findChild(QScrollArea)
    assert area.verticalScrollBar().value() == 0
    plots = [page.view.plot] if key == "race" else [page.view.curves_plot, page.view.bars_plot]
    for plot in plots:
        assert plot.height() >= plot.minimumHeight()
        assert in_view(plot, area), (key, plot.geometry(), area.viewport().size())
    assert view.headline.font().pointSizeF() >= HEADLINE_POINTS >= 48
