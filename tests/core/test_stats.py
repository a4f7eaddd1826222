"""The tally's accepted-length histogram: the one the CLI's stats and the app's graphs both read."""

from __future__ import annotations

from specdec_core.stats import StatsAccumulator


def _tally() -> StatsAccumulator:
    """A plain step, a chain of 4 that accepts 2, and a chain whose accepted end-of-sequence draft ends it."""
    tally = StatsAccumulator()
    for mainline, accepted, ended_on_accepted in ((0, 0, False), (4, 2, False), (1, 1, True)):
        tally.add_verified(n_accepted=accepted, ended_on_accepted=ended_on_accepted, mainline=mainline,
                           tree_nodes=0, draft_s=0.001, verify_s=0.01, overhead_s=0.0)
    return tally


def test_the_accepted_length_histogram_counts_drafting_rounds_only_and_pads_to_the_bins_asked_for():
    tally = _tally()
    assert tally.accepted_length_histogram() == (0, 1, 1)  # the plain step drafted nothing: no bar
    assert tally.accepted_length_histogram(5) == (0, 1, 1, 0, 0)  # an axis up to the longest draft (γ 4)
    assert tally.accepted_length_histogram(2) == (0, 1, 1)  # never cut below the longest accepted
    assert tally.snapshot().accepted_length_histogram == (0, 1, 1)


def test_merged_tallies_histogram_is_the_sum_of_theirs():
    merged = _tally() + _tally()
    assert merged.accepted_length_histogram(4) == (0, 2, 2, 0)
    assert merged.snapshot().new_tokens == 2 * 5  # 1 + 3 + 1: nothing follows an accepted end-of-sequence
