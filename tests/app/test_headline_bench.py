"""bench/headline.py: the table that says whether the footer, the race and the CLI agree, and one round of
its measurements on the tiny pair (the wiring to the footer, the Talk menu's race and the CLI's engine)."""

from __future__ import annotations

import pytest

from bench.headline import agreement, figure, measure_prompt


def test_the_places_agree_when_the_largest_median_is_within_ten_percent_of_the_smallest():
    a = agreement({"footer": [1.50, 1.40, 1.60], "race": [1.45], "cli": [1.55, 1.59]})
    assert a.figures["footer"].median == 1.50 and (a.figures["footer"].low, a.figures["footer"].high) == (1.40, 1.60)
    assert a.spread == pytest.approx(1.57 / 1.45 - 1) and a.agree is True
    b = agreement({"footer": [1.2], "race": [1.5], "cli": [1.5]})
    assert b.spread == pytest.approx(0.25) and b.agree is False and "DISAGREE" in b.words()


def test_a_place_that_showed_no_figure_is_left_out_and_two_are_needed_to_compare():
    assert figure([None, float("nan"), 0.0]) is None  # a footer under a reply too short for a speedup
    a = agreement({"footer": [None, None], "race": [1.3], "cli": [1.32]})
    assert a.figures["footer"] is None and a.agree is True
    lone = agreement({"footer": [None], "race": [1.3]})
    assert lone.spread is None and lone.agree is None and "fewer than two" in lone.words()


def test_one_round_reads_the_footer_the_race_and_the_cli_on_the_tiny_pair(make_window):
    w = make_window(max_new_tokens=32)
    runs = measure_prompt(w, "Once upon a time", 1, "talk", lambda _line: None)
    assert set(runs.speedups) == {"footer", "race", "cli", "window's engine"}
    for place, lanes in runs.tps.items():
        assert lanes["off"][0] > 0 and lanes["on"][0] > 0, place
    assert runs.speedups["race"][0] and runs.speedups["cli"][0]
    # The footer was read from the bubble under the speculation-on reply, against the off reply just before it.
    # (measure_footer checks that the figure it keeps is the one the footer prints.)
    assert runs.speedups["footer"][0] and "vs verifier alone (like for like: 1 run)" in runs.footers[0]
    assert "speculation-off reply" in runs.baselines[0]
    assert not w.talk.dialogs and not w.busy  # the race's dialog closed, the window idle again
