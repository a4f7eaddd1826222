"""Live graphs of a reply's speculation, drawn with pyqtgraph: one panel per file behind a small protocol.

Fed the way pyqtgraph's scrolling-plot examples are: the window's one timer calls `flush()`, which
copies the rounds that arrived since the last call from the reply's trace into growing numpy buffers
(figures.py) and calls `setData` on persistent curve items. Nothing here is redrawn per token.

- panel.py            the protocol a panel follows: its plot, `draw(figures)`, `ranges(figures)`
- figures.py          one reply's rounds as the panels read them (buffers, the engine's tally, the cost model)
- throughput.py       tokens/s over engine time, the verifier-alone baseline dashed
- accepted.py         accepted per round against the draft tokens checked, the running acceptance rate
- accepted_lengths.py rounds that accepted 0, 1, ... γ draft tokens
- positions.py        acceptance by position in the round
- round_time.py       time per round, stacked: draft, verify, overhead
- theory.py           predicted speedup over γ (Leviathan et al.) against the measured one, and break-even
- verify_cost.py      what checking k tokens costs on this machine, and the cost model's curve
- chat_acceptance.py  acceptance over the open chat, one point per finished reply
- switch_marks.py     where speculation was switched mid-reply
- header.py           the header's figures: tokens/s, the speedup ± its spread, tokens per verifier call
- live.py             LiveGraphs: the panels of one reply in a grid, redrawn in turn on the window's timer
- race_plot.py        the race: tokens over time with speculation off, then on
- graphs_panel.py     the window's right-hand panel: both in tabs, with export buttons
- plots.py            what every plot shares; stats_files.py: a reply's rounds as CSV or JSON
"""
