"""The first speedup after a load is honest: none is shown until a like-for-like baseline exists, measured in the
background where the replies decode; until then the reply shows its tokens/s and says the speedup is being
measured (issue 55, "An honest first figure")."""

from __future__ import annotations

import re

from app.baseline_controller import COLD, MEASURING, NONE_YET
from app.baseline_runs import AFTER_LOAD, PAIRS
from app.speedup import BaselineBook, BaselineSample
from app.trace import ReplyTrace, RoundRecord

RATIO = re.compile(r"\d\.\d\d×")


def _speculative_trace(note: str) -> ReplyTrace:
    trace = ReplyTrace(stats={"tokens_per_s": 12.0, "new_tokens": 40, "drafted": 30, "accepted": 20, "rounds": 10,
                              "acceptance_rate": 2 / 3, "mean_accepted_length": 3.0}, stop_reason="eos")
    for i in range(10):
        trace.rounds.append(RoundRecord(i, 3, 2, "corrected", "gamma", 3, 0.01, 0.05, 0.0, 0.06 * (i + 1), 4 * (i + 1)))
    trace.baseline_note = note
    return trace


def test_a_baseline_measured_at_another_prompt_length_is_never_like_for_like():
    book = BaselineBook()
    book.add(BaselineSample(20.0, 30, AFTER_LOAD, graphs_live=False))
    assert book.pick(40, graphs_live=False).like_for_like
    far = book.pick(900, graphs_live=False)
    assert far is not None and not far.like_for_like and far.short == "vs runs at other prompt lengths"


def test_a_reply_without_a_baseline_shows_its_tokens_per_second_and_says_why_there_is_no_ratio():
    for note in (MEASURING, NONE_YET):
        summary = _speculative_trace(note).summary()
        assert "12.0 tok/s" in summary and note in summary and not RATIO.search(summary), summary


def test_after_a_load_the_baseline_is_measured_in_the_background_where_replies_decode(make_window, qtbot):
    w = make_window(max_new_tokens=16, calibrate=True)
    qtbot.waitUntil(lambda: w.busy == "measure", timeout=10_000)  # once the window has rehearsed a reply
    assert w.baseline.running and w.send_button.isEnabled()
    qtbot.waitUntil(lambda: w.busy == "" and not w.baseline.running, timeout=60_000)
    assert [s.source for s in w.baselines.samples] == [AFTER_LOAD] * PAIRS
    # Measured in the decoding process, as the replies run there: no repainting slowed either.
    assert w.hosts.host is not None and w.hosts.host.alive
    assert not any(s.graphs_live for s in w.baselines.samples) and not w.baseline.graphs_live()
    assert w.session.baseline_tps in [s.tokens_per_s for s in w.baselines.samples]


def test_a_message_sent_during_the_measurement_goes_at_once_and_a_cold_first_run_is_never_given_a_ratio(
        make_window, qtbot, send_and_wait):
    w = make_window(max_new_tokens=32, calibrate=True)
    qtbot.waitUntil(lambda: w.busy == "measure", timeout=10_000)
    with qtbot.waitSignal(w.reply_finished, timeout=60_000) as finished:
        w.composer.setPlainText("Hello")
        w.send_from_composer()  # cancels the measurement; the reply goes as soon as it has stopped (a round)
    first = finished.args[0]
    footer = w.chat.bubbles[-1].footer
    # The first job of a fresh decoding process runs cold; one after a run of the measurement waits for its result.
    assert first.speculative and first.baseline_tps is None and first.baseline_note in (COLD, MEASURING)
    assert first.baseline_note in footer.text() and not RATIO.search(footer.text()), footer.text()
    qtbot.waitUntil(lambda: w.busy == "" and not (w.baseline.running or w.baseline.due), timeout=60_000)
    assert (first.baseline_tps is None) is (first.baseline_note == COLD)  # measured after it: the waiting one gets it
    # A cold run is no baseline either: every sample is the measurement's (PAIRS, and on a busy machine a run the
    # cancelled measurement finished before the message stopped it).
    sources = [s.source for s in w.baselines.samples]
    assert set(sources) == {AFTER_LOAD} and PAIRS <= len(sources) <= 2 * PAIRS, sources
    w.new_chat()
    second = send_and_wait(w, "Hello")  # warm now, at the measured length: like for like
    assert second.baseline_tps is not None and "like for like" in second.baseline_note
    assert RATIO.search(w.chat.bubbles[-1].footer.text()) and "not like for like" not in w.graphs.live.header.text()


def test_without_the_measurement_a_reply_never_shows_a_ratio_against_an_unlike_baseline(make_window, send_and_wait):
    w = make_window(max_new_tokens=32)  # calibrate=False: nothing measured after the load
    first, second = send_and_wait(w, "Hello"), send_and_wait(w, "Hello again")
    assert [first.baseline_note, second.baseline_note] == [NONE_YET, NONE_YET]
    assert first.baseline_tps is None and second.baseline_tps is None
    assert not any(RATIO.search(b.footer.text()) for b in w.chat.bubbles if b.trace is not None)


def test_the_first_reply_after_a_load_imports_nothing_and_forks_nothing_on_the_gui_thread(make_window, qtbot,
                                                                                            send_and_wait, monkeypatch):
    # What froze the window during the first reply was work done there for the first time (app/warm_up.py): it is
    # done after the load, so the first reply runs only what every reply runs. Checked by what runs, not by time.
    import sys

    from app.host import ReplyHost

    w = make_window(max_new_tokens=16, calibrate=True)
    qtbot.waitUntil(lambda: w.busy == "" and not w.baseline.running and not w.baseline.warming, timeout=60_000)
    forks = []
    start = ReplyHost.start
    monkeypatch.setattr(ReplyHost, "start", lambda host: forks.append(host) or start(host))
    before = set(sys.modules)
    trace = send_and_wait(w, "Write a Python function that reverses a string.")
    assert trace.tokens and not forks and w.hosts.host is not None and w.hosts.host.alive
    assert sorted(set(sys.modules) - before) == []


def test_a_reply_at_an_unmeasured_prompt_length_has_its_baseline_measured_on_its_own_prompt(make_window, qtbot,
                                                                                             send_and_wait):
    w = make_window(max_new_tokens=32, calibrate=True)
    idle = lambda: w.busy == "" and not (w.baseline.running or w.baseline.warming or w.baseline.due)  # noqa: E731
    qtbot.waitUntil(idle, timeout=60_000)
    measured = len(w.baselines.samples)
    trace = send_and_wait(w, "Please summarise this: " + "the quick brown fox jumps over the lazy dog, " * 12)
    assert trace.speculative and trace.baseline_tps is None and trace.baseline_note == MEASURING  # not NONE_YET
    qtbot.waitUntil(idle, timeout=60_000)
    assert len(w.baselines.samples) == measured + PAIRS
    assert abs(w.baselines.samples[-1].prompt_tokens - trace.prompt_tokens) <= 2  # its own prompt, re-read
    assert trace.baseline_tps is not None and "like for like" in trace.baseline_note
    assert RATIO.search(w.chat.bubbles[-1].footer.text()), w.chat.bubbles[-1].footer.text()


def test_a_baseline_that_lands_after_the_reply_is_the_one_the_throughput_plot_labels(qtbot):
    from app.graphs.live import LiveGraphs

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    first, second = _speculative_trace(""), _speculative_trace(MEASURING)
    graphs.set_trace(first)
    graphs.set_baseline(7.0, "verifier alone", like_for_like=True)
    graphs.set_trace(second)  # no baseline yet: the line is hidden
    graphs.set_baseline(5.1, "verifier alone", like_for_like=True)  # it lands
    line = graphs.panels["tps"].baseline_line
    assert line.isVisible() and line.value() == 5.1 and "5.1 tok/s" in line.label.toPlainText()


def _priced_out_trace(step_s: float, prompt_tokens: int = 30) -> ReplyTrace:
    """A reply whose every round the cost model priced out: plain steps of the verifier, `step_s` each."""
    trace = ReplyTrace(stats={"tokens_per_s": 1 / step_s, "new_tokens": 12, "drafted": 0, "accepted": 0, "rounds": 12},
                       stop_reason="max_tokens", prompt_tokens=prompt_tokens)
    for i in range(12):
        trace.rounds.append(RoundRecord(i, 0, 0, "bonus", "cost", 4, 0.0, 0.0 if i == 0 else step_s, 0.0,
                                        step_s * i, i + 1, rows=0 if i == 0 else 1))
    return trace


def test_the_verifier_step_is_the_median_of_one_row_passes_and_a_pace_within_the_noise_is_no_pace():
    from app.speedup import MIN_PLAIN_STEPS, pace, step_s

    trace = _priced_out_trace(0.05)
    trace.rounds[3].verify_s = 0.5  # a pause (a collection, another process): the median ignores it
    trace.rounds.append(RoundRecord(12, 3, 3, "accepted", "gamma", 3, 0.01, 0.09, 0.0, 0.7, 16, rows=4))  # a check
    assert step_s(trace.rounds) == 0.05
    assert step_s(trace.rounds[:MIN_PLAIN_STEPS]) is None  # the first round ran no pass: three steps are too few
    assert pace(0.05, 0.06) == 0.06 / 0.05 and pace(0.05, 0.051) is None and pace(None, 0.06) is None


def test_a_reply_that_ran_slower_than_its_baseline_is_compared_at_its_own_pace_and_says_so(make_window):
    # The machine ran 20 % slower during the reply than when the verifier alone was measured: the reply's own plain
    # steps show it. Against the baseline as measured, this all-plain reply would read 0.83x; at its pace, 1.00x.
    w = make_window(max_new_tokens=16)
    trace = _priced_out_trace(0.06)
    w.baselines.add(BaselineSample(20.0, 30, AFTER_LOAD, graphs_live=w.baseline.graphs_live(),
                                   verify_s_per_token=0.05))
    w.baseline.pick_for(trace, trace.prompt_tokens)
    assert trace.baseline_tps == 20.0 and trace.paused_rounds()
    w.baseline.to_reply_pace(trace)
    assert abs(trace.baseline_tps - 20.0 / 1.2) < 1e-9 and abs(trace.speedup() - 1.0) < 1e-9
    assert "20 % slower than the baseline's 50 ms" in trace.baseline_source
    w.baseline.to_reply_pace(trace)  # once: the baseline it shows is no longer the book's
    assert abs(trace.baseline_tps - 20.0 / 1.2) < 1e-9
