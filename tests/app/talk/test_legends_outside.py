"""Legends never cover data: every plot legend sits in a row of its plot's layout under the x axis, outside the
data area, at the window sizes of a 1024×700 screen and of a 2560×1600 one at scale 2.

Checked by structure and geometry (the legend's parent and layout cell; its rectangle against the data view's),
not by the pixels of any font."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QApplication

SCREENS = {"1024x700": QSize(1024, 700), "1280x800": QSize(1280, 800)}


def assert_legend_outside_the_data(plot, what: str) -> None:
    from app.graphs.plots import LEGEND_ROW, RowLegend

    pi = plot.getPlotItem()
    legend = pi.legend
    # addLegend anchors a legend inside the ViewBox, over whatever is drawn in its corner
    assert isinstance(legend, RowLegend) and legend.parentItem() is pi, what
    assert pi.layout.itemAt(LEGEND_ROW, 1) is legend, what
    assert legend.items, f"{what}: an empty legend"
    data, box = pi.vb.sceneBoundingRect(), legend.sceneBoundingRect()
    assert data.height() > 0 and box.height() > 0, what
    assert box.top() >= data.bottom() - 0.5 and not box.intersects(data.adjusted(0, 0, 0, -0.5)), \
        f"{what}: legend {box} overlaps the data {data}"
    # every entry shown: a legend wider than the plot wraps onto more rows rather than clipping its last entries
    wanted = legend.effectiveSizeHint(Qt.SizeHint.PreferredSize).width()
    assert wanted <= data.width() + 0.5 or legend.columnCount == 1, f"{what}: {wanted} wide over {data.width()}"


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_graphs_legends_sit_under_their_plots_not_on_the_curves(screen, make_window, qtbot, send_and_wait):
    w = make_window(max_new_tokens=16)
    w.fit_to(QRect(QPoint(0, 0), SCREENS[screen]))
    send_and_wait(w, "Tell me about Paris")
    QApplication.processEvents()
    for name in ("time", "theory", "cost"):
        assert_legend_outside_the_data(w.graphs.live.plots[name], f"{name} at {screen}")
    w.show_graphs(1)
    qtbot.wait(10)
    assert_legend_outside_the_data(w.graphs.race.plot, f"race at {screen}")


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_talk_views_legends_sit_under_their_plots(screen, qtbot):
    from app.talk.explainer import Explainer
    from app.talk.race import RaceView
    from app.talk.slow_demo import SlowDemoView

    race, slow, explainer = RaceView(), SlowDemoView(), Explainer()
    race.race_curves.start(["off", "on"])  # a race's named curves, as it starts
    for view, plot in ((race, race.plot), (slow, slow.curves_plot), (explainer, explainer.plot)):
        qtbot.addWidget(view)
        view.resize(SCREENS[screen])
        view.show()
        qtbot.wait(10)
        if view is slow:
            continue  # its curves are made as a run starts: below
        assert_legend_outside_the_data(plot, f"{type(view).__name__} at {screen}")


def test_the_slow_demos_legend_sits_under_its_curves(qtbot, tiny_session):
    from app.runs import RunContext
    from app.talk.slow_demo import SlowDemoView
    from specdec_core.config import GenerationConfig

    view = SlowDemoView()
    qtbot.addWidget(view)
    view.repeats = 1
    view.resize(SCREENS["1024x700"])
    view.show()
    ctx = RunContext(tiny_session, [{"role": "user", "content": "Hi"}], None, GenerationConfig(max_new_tokens=4))
    with qtbot.waitSignal(view.finished, timeout=60_000):
        view.start(ctx)
    qtbot.wait(10)
    assert len(view.curves_plot.getPlotItem().legend.items) == len(view.lanes) + 1  # each kind, and "other runs"
    assert_legend_outside_the_data(view.curves_plot, "slow demo")


@pytest.mark.parametrize(("alpha", "gamma", "c"), [(0.5, 3, 0.12), (0.8, 4, 0.1), (0.3, 2, 0.4)])
def test_the_explainers_break_even_is_named_in_its_legend_not_by_words_over_the_curve(alpha, gamma, c, qtbot):
    """A label on the break-even line lay over the curve wherever the curve crossed 1× under it (α 0.5, c 0.12)."""
    import pyqtgraph as pg

    from app.talk.explainer import Explainer

    view = Explainer()
    qtbot.addWidget(view)
    view.resize(SCREENS["1024x700"])
    view.show()
    view.set_values(alpha, gamma, c)
    qtbot.wait(10)
    pi = view.plot.getPlotItem()
    assert getattr(view.break_even, "label", None) is None  # pyqtgraph makes one only when given words
    words = [item for item in pi.vb.allChildItems() if isinstance(item, (pg.TextItem, pg.InfLineLabel))]
    assert words == [], "no text drawn inside the data area"
    names = [label.text for _, label in pi.legend.items]
    assert any("break-even" in name for name in names), names
    sample = next(sample for sample, label in pi.legend.items if "break-even" in label.text)
    assert sample.item.opts["pen"] == view.break_even.pen  # the legend's line is drawn as the plot's
    assert_legend_outside_the_data(view.plot, f"explainer at α {alpha}, c {c}")


def test_the_slow_demos_break_even_is_named_under_its_bars_not_by_words_over_them(qtbot):
    import pyqtgraph as pg

    from app.talk.slow_demo import SlowDemoView

    view = SlowDemoView()
    qtbot.addWidget(view)
    view.resize(SCREENS["1024x700"])
    view.show()
    qtbot.wait(10)
    pi = view.bars_plot.getPlotItem()
    assert not [item for item in pi.vb.allChildItems() if isinstance(item, (pg.TextItem, pg.InfLineLabel))]
    assert [label.text for _, label in pi.legend.items] == ["verifier alone (break-even)"]
    assert pi.legend.items[0][0].item.opts["pen"] == view.baseline.pen
    assert_legend_outside_the_data(view.bars_plot, "slow demo's bars")
