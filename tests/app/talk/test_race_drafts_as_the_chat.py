"""A race's speculation runs draft as the chat's next reply would: each starts from what the chat's engine has
learned about drafting here (its cost model), not from nothing, so the race and a reply's footer measure the
same speculation."""

from __future__ import annotations

import dataclasses

from specdec_core.config import TREE_AUTO, GenerationConfig
from specdec_core.engine import Controls, Engine
from specdec_core.events import Finished
from specdec_core.verification.cost import VerifyCost

PROMPT = [{"role": "user", "content": "Once upon a time"}]
CONFIG = GenerationConfig(max_new_tokens=12, gamma=3, tree_nodes=TREE_AUTO)


def drafted_by_lane(events) -> dict[str, int]:
    from app.runs import LaneEvent

    return {ev.lane: ev.event.stats.drafted for ev in events
            if isinstance(ev, LaneEvent) and isinstance(ev.event, Finished)}


def chat_that_found_no_draft_pays(tiny_session):
    """A session whose chat engine has replied on a machine where a second row costs a thousand plain steps."""
    from app.runs import RunContext

    chat = Engine(tiny_session.verifier, tiny_session.drafter)
    chat.planner.sizer.cost = VerifyCost({1: 0.001, 2: 1.0})
    session = dataclasses.replace(tiny_session, engine=chat)
    ids = RunContext(session, PROMPT, None, CONFIG).prompt_ids()
    list(chat.generate(ids, CONFIG.with_(max_new_tokens=24)))  # its first trees are checked whatever they cost
    return session


def test_a_race_drafts_as_the_chats_engine_has_learned_to(tiny_session):
    from app.runs import race_events

    session = chat_that_found_no_draft_pays(tiny_session)
    learned = session.engine.planner.sizer.cost.passes

    drafted = drafted_by_lane(race_events(session, PROMPT, None, CONFIG, 2, Controls()))

    assert set(drafted) == {"off", "on", "off 2", "on 2"}
    assert drafted["on"] == drafted["on 2"] == 0  # priced out, as the chat's next reply would be
    assert session.engine.planner.sizer.cost.passes == learned  # the race learned apart from the chat's engine


def test_a_race_over_a_new_cost_model_drafts_where_the_chats_would_not(tiny_session):
    from app.runs import RunContext, lane_events, race_lanes

    session = chat_that_found_no_draft_pays(tiny_session)
    ctx = RunContext(session, PROMPT, None, CONFIG)

    drafted = drafted_by_lane(lane_events(ctx, race_lanes(session.verifier, session.drafter, 1), Controls()))

    assert drafted["on"] > 0  # a new one takes the draft's cost as free until timed: it drafts by other rules
