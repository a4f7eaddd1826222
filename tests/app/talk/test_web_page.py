"""Export as web page: the recording a talk keeps, and the self-contained page written from it (no browser here;
test_web_page_browser.py plays it in Chromium)."""

from __future__ import annotations

import json
import re

import pytest
from web_pages import SPECULATIVE, hand_trace, plain_trace

from app.speedup import race_key, race_spread
from app.web.page import LANE_COLOURS, STATE_COLOURS, embedded_json, page_html, write_web_page
from app.web.recording import (
    RecordedLane,
    Recording,
    best_round,
    lanes_scene,
    median_pair,
    note_scene,
    race_scene,
    reply_scene,
    round_nodes,
)


def recorded_data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="recording">(.*?)</script>', page, re.S)
    assert found
    return json.loads(found.group(1))


def test_the_page_uses_the_apps_token_colours():
    from app.theme import ACCENT, STATE_SOLID, STATE_STYLE

    for state, parts in STATE_COLOURS.items():
        bg, fg = STATE_STYLE[state]
        assert parts["bg"] == (None if bg is None else bg.getRgb())
        assert parts["fg"] == (None if fg is None else fg.getRgb())
        assert parts["solid"] == STATE_SOLID[state].getRgb()
    assert LANE_COLOURS["on-lane"] == ACCENT.getRgb()
    assert LANE_COLOURS["off-lane"] == STATE_SOLID["plain"].getRgb()


def test_recorded_text_cannot_end_the_script_element_it_is_embedded_in():
    hostile = {"text": "</script><script>alert(1)</script> <!-- & \u2028 \u2029 </SCRIPT >"}
    embedded = embedded_json(hostile)
    assert "<" not in embedded and ">" not in embedded and "&" not in embedded
    assert json.loads(embedded) == hostile


def test_a_page_carries_the_recording_exactly_and_closes_each_script_once():
    trace = hand_trace(SPECULATIVE, trees=True)
    recording = Recording("A talk </script> about <drafts>")
    recording.add(reply_scene("Speculation", trace, prompt="Say </script>"))
    page = page_html(recording)
    assert page.lower().count("</script") == 3  # the error catcher, the recording, the player
    assert "<title>A talk &lt;/script&gt; about &lt;drafts&gt;</title>" in page
    data = recorded_data(page)
    assert data == json.loads(json.dumps(recording.to_json()))
    shown = "".join(text for text, state, _, _ in data["scenes"][0]["tokens"] if state != "rejected")
    assert shown == trace.text


def test_a_page_fetches_nothing():
    recording = Recording()
    recording.add(reply_scene("Speculation", hand_trace(SPECULATIVE)))
    page = page_html(recording)
    for needle in ("<link", "src=", "@import", "url(", "@font-face", "fetch(", "XMLHttpRequest"):
        assert needle not in page
    # The one address in it is SVG's namespace, a name that is never fetched.
    assert set(re.findall(r"https?://[^\s\"'`]+", page)) == {"http://www.w3.org/2000/svg"}


def test_a_reply_scene_keeps_each_tokens_state_and_round_end_time(saved_trace):
    scene = reply_scene("Real tiny reply", saved_trace)
    assert [t[:3] for t in scene["tokens"]] == [[t.text, t.state, t.round] for t in saved_trace.tokens]
    times = [t[3] for t in scene["tokens"]]
    assert times == sorted(times)
    ends = {r.index: round(r.t_end, 6) for r in saved_trace.rounds}
    assert all(t == ends[r] for _, _, r, t in scene["tokens"])
    assert scene["curve"][-1] == [round(saved_trace.rounds[-1].t_end, 6), saved_trace.rounds[-1].tokens_after]
    assert scene["figures"]["tokens"] == saved_trace.stats["new_tokens"]


def test_a_reply_with_no_rounds_spreads_its_tokens_over_its_time():
    trace = plain_trace(["a", "b", "c", "d"], 0.1)
    trace.rounds = []  # a draft writing alone keeps no rounds, only its total time
    trace.stats["decode_s"] = 2.0
    scene = reply_scene("The draft alone", trace)
    assert [t[3] for t in scene["tokens"]] == [0.5, 1.0, 1.5, 2.0]
    assert scene["curve"] == [[0.0, 0], [2.0, 4]]


def test_a_tree_round_shows_its_path_its_rejected_and_unchecked_candidates_and_the_correction():
    trace = hand_trace(SPECULATIVE, trees=True)
    record = best_round(trace)
    assert record is not None and record.index == 0
    nodes = round_nodes(trace, record)
    assert [(n["text"], n["parent"], n["state"]) for n in nodes] == [
        ("Hello", -1, "accepted"), (" <b>world", 0, "accepted"), ("</script>", 1, "rejected"),
        ("beside", -1, "unchecked"), (",", 1, "corrected")]


def test_a_chain_round_is_drawn_as_a_one_branch_tree():
    trace = hand_trace(SPECULATIVE)
    nodes = round_nodes(trace, trace.rounds[1])
    assert [(n["text"], n["parent"], n["state"]) for n in nodes] == [(" fine\n", -1, "accepted"),
                                                                     ("  <!-- day", 0, "bonus")]


def race_traces(on_seconds: list[float]) -> dict:
    """A race whose verifier alone always takes 0.1 s a token, and whose speculation takes `on_seconds` in pair n."""
    traces = {}
    for n, seconds in enumerate(on_seconds, start=1):
        traces[race_key(False, n)] = plain_trace(["a", "b", "c"], 0.1)
        traces[race_key(True, n)] = plain_trace(["a", "b", "c"], seconds)
    return traces


def test_a_race_draws_its_median_pair_bold_and_the_others_faint():
    traces = race_traces([0.02, 0.05, 0.03])  # speedups 5, 2 and 3.33: the median is pair 3
    assert median_pair(traces) == 3
    spread = race_spread([(10.0, 1 / s, 3) for s in (0.02, 0.05, 0.03)])
    scene = race_scene("Race", traces, spread, identical=True)
    bold = [lane["key"] for lane in scene["lanes"] if not lane["faint"]]
    assert sorted(bold) == ["off 3", "on 3"]
    titles = {lane["key"]: lane["title"] for lane in scene["lanes"]}
    assert titles["on"] == "speculation on, pair 1" and titles["off 3"] == "speculation off, pair 3 (the median)"
    assert all(not lane["tokens"] for lane in scene["lanes"] if lane["faint"])
    assert scene["headline"] == "3.33×" and "identical text" in scene["result"]


def test_the_headline_is_the_last_race_else_the_last_reply():
    recording = Recording()
    recording.add(reply_scene("Speculation", hand_trace(SPECULATIVE)))
    assert recording.headline()["big"].endswith("tok/s")
    recording.add(race_scene("Race", race_traces([0.05]), race_spread([(10.0, 20.0, 3)])))
    recording.add(lanes_scene("What makes it slow", [RecordedLane("weak", "weakened", hand_trace(SPECULATIVE))],
                              headline="0.70×"))
    recording.add(note_scene("llama.cpp", ["no bench result"]))
    assert recording.headline()["big"] == "2.00×"


def test_an_empty_recording_is_not_written(tmp_path):
    with pytest.raises(ValueError, match="nothing recorded"):
        write_web_page(Recording(), tmp_path / "talk.html")
    assert not (tmp_path / "talk.html").exists()
