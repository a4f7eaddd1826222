"""The explainer's formulas, the draft-alone view and the slow-drafter comparison on tiny models."""

from __future__ import annotations

import pytest

from specdec_core.config import GenerationConfig
from specdec_core.stats import predicted_speedup


def test_explainer_fills_the_formulas_and_the_slider_moves_the_point(qtbot):
    from app.talk.explainer import Explainer, break_even_alpha

    w = Explainer()
    qtbot.addWidget(w)
    w.set_values(0.8, 4, 0.1)
    assert "0.80" in w.formulas.text() and f"{predicted_speedup(0.8, 4, 0.1):.2f}×" in w.formulas.text()
    w.set_gamma(9)
    x, y = w.point.getData()
    assert x[0] == 9 and y[0] == pytest.approx(predicted_speedup(0.8, 9, 0.1))
    be = break_even_alpha(4, 0.1)
    assert predicted_speedup(be, 4, 0.1) == pytest.approx(1.0, abs=1e-6)
    assert break_even_alpha(4, 0.5) is not None and break_even_alpha(16, 1.0) is None


def test_at_1024_px_each_of_the_explainers_formulas_stays_on_one_line(qtbot):
    from PySide6.QtGui import QTextDocument, QTextTable

    from app.talk import TalkDialog
    from app.talk.explainer import Explainer

    view = Explainer()
    view.set_values(0.24, 2, 0.08)
    dlg = TalkDialog(view, "The speedup, explained", None, False)  # its labels wrap, as in the Talk menu
    qtbot.addWidget(dlg)
    dlg.resize(1016, 668)  # a 1024×700 screen
    dlg.show()
    qtbot.wait(50)
    assert view.minimumSizeHint().width() + 24 <= 1024  # and the view does not scroll sideways for them
    label = view.formulas
    doc = QTextDocument()
    doc.setDocumentMargin(0)
    doc.setDefaultFont(label.font())
    doc.setHtml(label.text())
    doc.setTextWidth(label.contentsRect().width())
    assert doc.size().width() <= label.contentsRect().width()  # laid out, and as wide as the label at most
    table = next(f for f in doc.rootFrame().childFrames() if isinstance(f, QTextTable))
    for row in range(table.rows()):
        for col in range(1, table.columns()):
            block = table.cellAt(row, col).firstCursorPosition().block()
            assert block.layout().lineCount() == 1, block.text()


def test_explainer_takes_live_values_from_a_trace(qtbot, saved_trace):
    from app.talk.explainer import Explainer

    w = Explainer()
    qtbot.addWidget(w)
    assert w.set_from_trace(saved_trace)
    assert w.alpha == pytest.approx(min(saved_trace.stats["acceptance_rate"], 0.99))


def test_draft_alone_shows_the_drafts_own_reply(qtbot, tiny_session):
    from app.runs import RunContext
    from app.talk.draft_alone import DraftAloneView
    from specdec_core.engine import Engine

    view = DraftAloneView()
    qtbot.addWidget(view)
    ctx = RunContext(tiny_session, [{"role": "user", "content": "Hello"}], None,
                      GenerationConfig(max_new_tokens=10))
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(ctx)
    draft_text, verified_text = blocker.args[0]
    alone = list(Engine(tiny_session.draft).generate(ctx.prompt_ids(), ctx.config.with_(speculate=False)))[-1]
    assert draft_text == alone.text  # exactly the draft model's own greedy reply
    verifier_alone = list(Engine(tiny_session.verifier).generate(ctx.prompt_ids(),
                                                                 ctx.config.with_(speculate=False)))[-1]
    assert verified_text == verifier_alone.text
    assert view.summary.text()


def test_prompt_lookup_alone_copies_then_stops(tiny_tokenizer):
    from app.talk.context import prompt_lookup_alone
    from specdec_core.engine import Controls
    from specdec_core.events import Finished

    ids = tiny_tokenizer("the cat sat on the mat and the cat").input_ids
    events = list(prompt_lookup_alone(tiny_tokenizer, ids, GenerationConfig(max_new_tokens=5), Controls(),
                                      frozenset({tiny_tokenizer.eos_token_id})))
    assert isinstance(events[-1], Finished) and len(events[-1].token_ids) == 5


def test_weakened_drafter_is_exact_and_accepts_less(tiny_session):
    from app.runs import RunContext
    from app.talk.drafters import WeakenedDrafter
    from specdec_core.engine import Engine

    ctx = RunContext(tiny_session, [{"role": "user", "content": "Once upon"}], None,
                      GenerationConfig(max_new_tokens=16, gamma=4))
    ids = ctx.prompt_ids()
    good = list(Engine(tiny_session.verifier, tiny_session.drafter).generate(ids, ctx.config))[-1]
    weak = list(Engine(tiny_session.verifier, WeakenedDrafter(tiny_session.drafter, corrupt=0.9))
                .generate(ids, ctx.config))[-1]
    assert weak.text == good.text  # greedy: still exact
    assert weak.stats.acceptance_rate < good.stats.acceptance_rate


def test_slow_demo_measures_every_lane_against_the_verifier_alone(qtbot, tiny_session):
    from app.runs import RunContext
    from app.talk.slow_demo import SlowDemoView

    view = SlowDemoView()
    qtbot.addWidget(view)
    view.repeats = 2
    ctx = RunContext(tiny_session, [{"role": "user", "content": "Hello"}], None,
                      GenerationConfig(max_new_tokens=10, gamma=4))
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(ctx)
    results = blocker.args[0]
    assert set(results) == {"off", "good", "lookup", "weak"}
    assert results["off"][2] == pytest.approx(1.0)
    assert all(tps > 0 for tps, _, _ in results.values())
    assert results["weak"][1] < results["good"][1]
    assert sorted(view.run.traces) == sorted(f"{k}{n}" for k in ("off", "good", "lookup", "weak") for n in ("", " 2"))
    for _ in range(3):
        assert view.curves.draw(view.run.traces) == []  # the timer's tick with no lane grown: nothing is repainted
    view.run.traces["good 2"].rounds.append(view.run.traces["good 2"].rounds[-1])
    assert view.curves.draw(view.run.traces) == ["good 2"] + (["bold good"] if view.curves.run == 2 else [])


@pytest.fixture
def head_session(tiny_tokenizer):
    """An app Session like the embedded default: a draft head inside a hybrid with prompt lookup."""
    import tiny

    from app.session import LoadRequest, Session
    from specdec_core.defaults import HYBRID
    from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter
    from specdec_core.engine import Engine

    verifier, _ = tiny.make_pair("llama", tiny_tokenizer)
    head = tiny.make_head(verifier, scale=0.5)
    drafter = HybridDrafter(HeadDrafter(head), model_tokens=1)
    return Session(request=LoadRequest(verifier="tiny-verifier", draft="tiny-head", drafter=HYBRID),
                   verifier=verifier, engine=Engine(verifier, drafter), draft=head, drafter=drafter)


def test_draft_alone_with_a_head_shows_what_the_head_writes_after_the_prompt(qtbot, head_session):
    from app.runs import RunContext
    from app.talk.draft_alone import DraftAloneView
    from specdec_core.drafting.drafters import DraftTarget, HeadDrafter
    from specdec_core.verification.kv import CachedForward

    view = DraftAloneView()
    qtbot.addWidget(view)
    ctx = RunContext(head_session, [{"role": "user", "content": "Hello"}], None, GenerationConfig(max_new_tokens=10))
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(ctx)
    draft_text, _ = blocker.args[0]
    # The same thing by hand: the verifier reads the prompt, then the head drafts 10 tokens by itself.
    target = CachedForward(head_session.verifier.model, head_session.verifier.device)
    head = HeadDrafter(head_session.draft)
    head.attach(DraftTarget(target, 320, head_session.verifier.eos_token_ids, ctx.config))
    target.logits_for(ctx.prompt_ids())
    tokens = head.propose(ctx.prompt_ids(), 10).token_ids
    expected = head_session.verifier.tokenizer.decode(list(tokens), skip_special_tokens=True,
                                                      clean_up_tokenization_spaces=False)
    assert draft_text == expected and len(tokens) > 0
    assert "draft head alone" in view.panes["draft"].title.text()


def test_the_chat_keeps_drafting_with_its_head_after_a_demo_lane_used_it(head_session):
    from app.runs import RunContext, engine_lane, lane_events
    from specdec_core.engine import Controls

    ctx = RunContext(head_session, [{"role": "user", "content": "Once upon a time"}], None,
                      GenerationConfig(max_new_tokens=16, gamma=4))
    lane = engine_lane("on", "speculation on", head_session.verifier, head_session.drafter, True)
    list(lane_events(ctx, [lane], Controls()))  # a race lane: its own Engine, the session's drafter
    finished = list(head_session.engine.generate(ctx.prompt_ids(), ctx.config))[-1]
    alone = list(head_session.engine.generate(ctx.prompt_ids(), ctx.config.with_(speculate=False)))[-1]
    assert finished.token_ids == alone.token_ids
    assert finished.stats.accepted > 0
