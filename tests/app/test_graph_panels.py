"""The live graphs' panels (app/graphs/): each follows the panel protocol, and the acceptance rate, drawn on its
own right-hand axis, lines up with the rounds under it."""

from __future__ import annotations

import pytest


def _graphs_with_rounds(qtbot, n: int):
    from app.graphs.live import LiveGraphs
    from app.trace import ReplyTrace, RoundRecord

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.resize(560, 1500)
    graphs.show()
    trace = ReplyTrace()
    trace.rounds = [RoundRecord(i, 2, 1, "corrected", "gamma", 2, 0.01, 0.03, 0.0, 0.05 * (i + 1), 2 * (i + 1))
                    for i in range(n)]
    graphs.set_trace(trace)
    return graphs


def test_every_panel_draws_and_ranges_itself_from_the_reply_figures(qtbot):
    graphs = _graphs_with_rounds(qtbot, 12)
    assert set(graphs.panels) == set(graphs.PANELS)
    for name, panel in graphs.panels.items():
        assert panel.name == name and graphs.plots[name] is panel.plot
        (x0, x1), (y0, y1) = panel.ranges(graphs.figures)
        assert x0 < x1 and 0.0 <= y0 < y1  # never below zero, never empty
        assert panel.plot.getPlotItem().viewRange()[0] == pytest.approx([x0, x1])  # applied as drawn


def test_the_acceptance_rate_line_lines_up_with_the_rounds_under_it(qtbot):
    # Its view box followed another plot's size once (a closure over a reused variable): the line's round 1
    # stood over the bars' round 2. Now it spans exactly the rounds' x axis.
    graphs = _graphs_with_rounds(qtbot, 12)
    qtbot.wait(10)  # the layout settles: the view boxes take their final sizes
    acc = graphs.panels["acc"]
    rounds_view = acc.plot.getPlotItem().vb
    assert acc.rate_vb.geometry() == rounds_view.sceneBoundingRect()
    assert acc.rate_vb.viewRange()[0] == pytest.approx(rounds_view.viewRange()[0])
    x, y = acc.rate_curve.getData()
    assert list(x) == list(range(1, 13)) and y[-1] == pytest.approx(0.5)  # round k at x = k, rate 1 of 2


def test_a_plots_title_never_widens_the_plot_even_after_its_text_changes(qtbot):
    from app.graphs.plots import make_plot

    plot = make_plot("Short", "left", "bottom")
    qtbot.addWidget(plot)
    pi = plot.getPlotItem()
    long_title = "A title far wider than any plot of the panel would ever be given " * 3
    pi.setTitle(long_title)
    assert pi.titleLabel.itemRect().width() > 600  # the text itself is wide
    assert pi.titleLabel.minimumWidth() == 0
    assert pi.minimumWidth() < 200  # the axes', not the title's
