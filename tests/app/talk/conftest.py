"""Fixtures for talk mode: a session and real engine traces on tiny in-memory models (no disk, no GUI)."""

from __future__ import annotations

import json

import pytest
import tiny


@pytest.fixture(scope="session")
def tiny_session(tiny_tokenizer):
    """An app Session over a tiny llama verifier and a noisy copy of it as the draft model."""
    from app.session import LoadRequest, Session
    from specdec_core.defaults import MODEL
    from specdec_core.drafting.drafters import ModelDrafter
    from specdec_core.engine import Engine

    verifier, draft = tiny.make_pair("llama", tiny_tokenizer)
    drafter = ModelDrafter(draft)
    return Session(request=LoadRequest(verifier="tiny-verifier", draft="tiny-draft", drafter=MODEL),
                   verifier=verifier, engine=Engine(verifier, drafter), draft=draft, drafter=drafter)


@pytest.fixture(scope="session")
def saved_trace(tiny_session):
    """A reply's trace built from real engine events, saved to JSON and read back."""
    from app.runs import RunContext
    from app.trace import ReplyTrace
    from specdec_core.config import GenerationConfig

    ctx = RunContext(tiny_session, [{"role": "user", "content": "Once upon a time"}], None,
                      GenerationConfig(max_new_tokens=24, gamma=4))
    trace = ReplyTrace(verifier="tiny-verifier", drafter="tiny-draft")
    tiny_session.engine.reset_caches()
    for ev in tiny_session.engine.generate(ctx.prompt_ids(), ctx.config):
        trace.apply(ev)
    return ReplyTrace.from_dict(json.loads(json.dumps(trace.to_dict())))
