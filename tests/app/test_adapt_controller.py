"""The app's online adaptation (app/adapt_controller.py): the head learns each reply on a worker thread,
the status bar says on how many tokens, and the switch, the reset and the export do what they say."""

import json

import tiny
import torch

from specdec_core.loading.models import load_model

head_folder = tiny.save_head_folder


def live_head(window):
    return window.adaptation.drafter.model


def test_after_a_reply_the_head_adapts_in_the_background_and_the_window_says_on_how_many_tokens(
        make_window, send_and_wait, qtbot, tmp_path, tiny_models_dir, tiny_tokenizer, data_dir):
    w = make_window(draft=str(head_folder(tmp_path, tiny_models_dir["llama-verifier"], tiny_tokenizer)))
    assert not w.adaptation.enabled and w.adaptation.label.text() == "adaptation off"  # off by default
    w.adaptation.switch.setChecked(True)
    assert "not adapted yet" in w.adaptation.label.text()
    before = live_head(w).fc.weight.clone()
    trace = send_and_wait(w, "Once upon a time")
    reply = [t for t in trace.tokens if t.in_reply]
    qtbot.waitUntil(lambda: "draft adapted on" in w.adaptation.label.text(), timeout=30_000)
    assert f"adapted on {len(reply)} tokens" in w.adaptation.label.text()
    assert not torch.equal(live_head(w).fc.weight, before)
    saved = data_dir / "adapted-draft" / "tiny-head"
    assert json.loads((saved / "adapted.json").read_text())["tokens"] == len(reply)
    assert load_model(str(saved)).model.config.model_type == "specdec_head"  # loads as a draft spec


def test_switched_off_it_learns_nothing_and_remembers_the_switch(make_window, send_and_wait, qtbot, tmp_path,
                                                                 tiny_models_dir, tiny_tokenizer, data_dir):
    w = make_window(draft=str(head_folder(tmp_path, tiny_models_dir["llama-verifier"], tiny_tokenizer)))
    w.adaptation.switch.setChecked(True)
    w.adaptation.switch.setChecked(False)
    before = live_head(w).fc.weight.clone()
    send_and_wait(w, "Once upon a time")
    qtbot.wait(300)
    assert w.adaptation.worker is None and torch.equal(live_head(w).fc.weight, before)
    assert w.adaptation.label.text() == "adaptation off"
    assert json.loads((data_dir / "adapted-draft" / "settings.json").read_text()) == {"enabled": False}


def test_reset_brings_back_the_loaded_head_and_forgets_the_saved_one(make_window, send_and_wait, qtbot, tmp_path,
                                                                     tiny_models_dir, tiny_tokenizer, data_dir):
    w = make_window(draft=str(head_folder(tmp_path, tiny_models_dir["llama-verifier"], tiny_tokenizer)))
    w.adaptation.switch.setChecked(True)
    before = live_head(w).fc.weight.clone()
    send_and_wait(w, "Once upon a time")
    qtbot.waitUntil(lambda: "draft adapted on" in w.adaptation.label.text(), timeout=30_000)
    w.adaptation.reset()
    assert torch.equal(live_head(w).fc.weight, before)
    assert "not adapted yet" in w.adaptation.label.text()
    assert not (data_dir / "adapted-draft" / "tiny-head").exists()


def test_a_draft_model_cannot_adapt_and_the_window_says_so(make_window):
    w = make_window()  # the tiny pair's draft is a small language model, not a head
    assert w.adaptation.adapter is None and "only a draft head adapts" in w.adaptation.label.toolTip()
    assert not w.adaptation.reset_action.isEnabled()


def test_switched_off_the_draft_as_loaded_drafts_and_switched_on_again_the_adapted_one(
        make_window, send_and_wait, qtbot, tmp_path, tiny_models_dir, tiny_tokenizer):
    w = make_window(draft=str(head_folder(tmp_path, tiny_models_dir["llama-verifier"], tiny_tokenizer)))
    loaded = live_head(w).fc.weight.clone()
    w.adaptation.switch.setChecked(True)
    send_and_wait(w, "Once upon a time")
    qtbot.waitUntil(lambda: "draft adapted on" in w.adaptation.label.text(), timeout=30_000)
    adapted = live_head(w).fc.weight.clone()
    assert not torch.equal(adapted, loaded)

    w.adaptation.switch.setChecked(False)
    assert torch.equal(live_head(w).fc.weight, loaded) and w.adaptation.head_tokens == 0
    assert w.adaptation.label.text() == "adaptation off" and "draft as loaded" in w.adaptation.label.toolTip()
    assert send_and_wait(w, "Once upon a time").adapted_tokens == 0  # the chat's plot marks it as the loaded draft

    w.adaptation.switch.setChecked(True)
    assert torch.equal(live_head(w).fc.weight, adapted) and w.adaptation.head_tokens > 0
