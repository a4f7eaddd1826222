"""The draft head (draft_head.py) and its drafter: exact output, caches in step with the verifier's hidden
states, saving and loading, and the doctor's checks."""

import copy
import json

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import DraftTarget, HeadDrafter, drafter_for
from specdec_core.drafting.trees import TreeRequest
from specdec_core.engine import Engine
from specdec_core.events import Finished, RoundVerified
from specdec_core.loading.draft_head import HeadCache, with_layers
from specdec_core.loading.models import load_model
from specdec_core.pairs.doctor import check_models


@pytest.fixture(scope="module")
def verifiers(tiny_tokenizer):
    return {arch: tiny.make_pair(arch, tiny_tokenizer)[0] for arch in ("llama", "qwen2", "gpt2")}


def prompt(tokenizer, text="Once upon a time there was a little robot"):
    return tokenizer(text).input_ids


def generate(engine, ids, **config):
    events = list(engine.generate(ids, GenerationConfig(**{"top_alternatives": 0, **config})))
    assert isinstance(events[-1], Finished) and events[-1].error is None, events[-1]
    return events


def hf_greedy(loaded, ids, n):
    out = loaded.model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n,
                                eos_token_id=loaded.tokenizer.eos_token_id, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_speculation_with_a_head_equals_the_verifiers_greedy_generate(verifiers, tiny_tokenizer, arch,
                                                                             gamma):
    verifier = verifiers[arch]
    ids = prompt(tiny_tokenizer)
    events = generate(Engine(verifier, drafter_for(tiny.make_head(verifier))), ids, max_new_tokens=40,
                      gamma=gamma)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    assert list(events[-1].token_ids) == hf_greedy(verifier, ids, 40)
    assert sum(len(r.drafted) for r in rounds) > 0


def test_the_first_draft_after_the_prompt_reads_the_verifiers_own_state_and_is_accepted(verifiers,
                                                                                         tiny_tokenizer):
    verifier = verifiers["llama"]
    events = generate(Engine(verifier, drafter_for(tiny.make_head(verifier, scale=0.0))), prompt(tiny_tokenizer),
                      max_new_tokens=8, gamma=3)
    first = next(e for e in events if isinstance(e, RoundVerified))
    assert first.drafted and first.drafted[0].accepted


def test_recorded_hidden_states_and_the_heads_cache_equal_a_fresh_computation(verifiers, tiny_tokenizer):
    verifier = verifiers["llama"]
    drafter = drafter_for(tiny.make_head(verifier))
    engine = Engine(verifier, drafter)
    ids = prompt(tiny_tokenizer)
    first = generate(engine, ids, max_new_tokens=30, gamma=4)[-1]
    # A second turn reuses both caches' common prefix.
    ids = ids + list(first.token_ids) + prompt(tiny_tokenizer, " and then")
    reply = generate(engine, ids, max_new_tokens=30, gamma=4)[-1]
    full = ids + list(reply.token_ids)
    drafter.propose(full, 2)  # the engine attached it

    true = drafter._true_positions  # head positions computed from the verifier's states: all but the last token's
    assert true == len(full) - 1
    with torch.no_grad():
        fresh = verifier.model.base_model(torch.tensor([full[:true]])).last_hidden_state[0]
        assert torch.allclose(engine.verifier_forward.hidden_states(0, true), fresh, atol=1e-5)
        cache = HeadCache()
        embeds = verifier.model.get_input_embeddings()(torch.tensor([full[1:true + 1]]))
        drafter.model(fresh[None], embeds, torch.arange(true), cache)
    assert torch.allclose(drafter.cache.keys[:, :, :true], cache.keys, atol=1e-5)
    assert torch.allclose(drafter.cache.values[:, :, :true], cache.values, atol=1e-5)


def test_a_head_never_drafts_a_token_outside_its_subset(verifiers, tiny_tokenizer):
    verifier = verifiers["llama"]
    subset = list(range(0, len(tiny_tokenizer), 3))
    drafter = drafter_for(tiny.make_head(verifier, head_ids=subset))
    events = generate(Engine(verifier, drafter), prompt(tiny_tokenizer), max_new_tokens=40, gamma=4,
                      temperature=1.0, seed=3)
    drafted = [v.token_id for e in events if isinstance(e, RoundVerified) for v in e.drafted]
    assert drafted and set(drafted) <= set(subset)
    assert list(events[-1].token_ids)  # the verifier still emits what it wants


def test_a_heads_tree_never_proposes_an_id_past_the_verifiers_vocabulary(verifiers, tiny_tokenizer):
    verifier = verifiers["llama"]
    drafter = HeadDrafter(tiny.make_head(verifier))
    engine = Engine(verifier, drafter)
    ids = prompt(tiny_tokenizer)
    engine.verifier_forward.logits_for(ids)
    known = len(tiny_tokenizer) // 2  # as if the upper half of the output rows were padding past the tokenizer
    drafter.attach(DraftTarget(engine.verifier_forward, known, frozenset()))
    tree = drafter.propose_tree(ids, TreeRequest(16, 3))
    assert len(tree) and max(tree.token_ids) < known


def test_a_saved_head_loads_as_a_model_spec_and_passes_the_doctor(verifiers, tiny_tokenizer, tmp_path):
    verifier = verifiers["llama"]
    head = tiny.make_head(verifier)
    head.model.save_pretrained(tmp_path / "head")
    tiny_tokenizer.save_pretrained(tmp_path / "head")
    loaded = load_model(str(tmp_path / "head"), device="cpu")
    assert isinstance(drafter_for(loaded), HeadDrafter)
    assert torch.equal(loaded.model.head_ids, head.model.head_ids)
    verdict = check_models(verifier, loaded)
    assert verdict.compatible and not verdict.warnings
    assert any("trained on this verifier" in f.message for f in verdict.findings)


def test_the_doctor_rejects_a_head_for_another_width_and_warns_for_another_verifier(verifiers, tiny_tokenizer):
    llama = verifiers["llama"]
    other = tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=9, hidden=48), tiny_tokenizer, "wide")
    verdict = check_models(other, tiny.make_head(llama))
    assert not verdict.compatible and "48" in verdict.summary()
    same_width = verifiers["qwen2"]
    verdict = check_models(same_width, tiny.make_head(llama))
    assert verdict.compatible and "trained on" in verdict.warnings[0].message


def test_head_pipeline_generate_train_export_and_accept_more_than_an_untrained_head(tmp_path, verifiers):
    from distill import head as head_training
    from distill.data import generate_replies
    from distill.export import export_draft
    from distill.head import HeadSettings, compute_features, train_head
    from distill.measure import measure_pair
    from distill.prompts import build_extra_train_set, build_prompt_sets

    verifier = verifiers["llama"]
    train_prompts, held_out = build_prompt_sets(seed=0)
    work = tmp_path / "work"
    generate_replies(verifier, train_prompts[:48], work, modes=["greedy"], shard_size=16, batch_size=16,
                     max_new_tokens=40)
    # The states recorded while generating equal a separate forward pass (all but the never-fed last token).
    recorded = torch.load(work / "features" / "greedy-00000.pt")["states"]
    (work / "features" / "greedy-00000.pt").unlink()
    compute_features(verifier, work)
    computed = torch.load(work / "features" / "greedy-00000.pt")["states"]
    for a, b in zip(recorded, computed):
        assert len(a) == len(b) - 1
        torch.testing.assert_close(a.float(), b[:len(a)].float(), atol=2e-2, rtol=1e-2)

    # Two drafting steps trained, not the default three: half the training's time, and the head learns as well
    # (the chain's steps are held to the drafter's by test_training_chain_steps_compute_what_the_drafter_computes).
    settings = HeadSettings(head_size=200, intermediate=64, heads=4, kv_heads=2, steps=80, batch_tokens=512,
                            lr=3e-3, warmup=10, validate_every=50, validation_fraction=0.1, chain_steps=2)
    special = sorted({verifier.tokenizer.eos_token_id, verifier.tokenizer.pad_token_id})
    summary = train_head(verifier, work, work / "runs" / "h", settings, special)
    history = summary["history"]
    assert history[-1]["step"] == 80 and summary["best_val_agreement"] > history[0]["val_agreement"] - 0.05
    dest = export_draft(work / "runs" / "h", verifier.tokenizer, tmp_path / "head", {"verifier": "tiny"})
    head = load_model(str(dest), device="cpu")
    assert isinstance(drafter_for(head), HeadDrafter) and check_models(verifier, head).compatible

    # Teacher-forced agreement (the `agreement` step) ranks the trained head above an untrained one too.
    examples = head_training.load_examples(work, 640, set(verifier.eos_token_ids), {"greedy-00000"})
    output = verifier.model.get_output_embeddings().weight.detach()
    by_step = {name: head_training.agreement_by_step(h, verifier.model.get_input_embeddings(), output, examples, 2)
               for name, h in (("trained", head.model), ("untrained", tiny.make_head(verifier).model))}
    assert by_step["trained"][1] > by_step["untrained"][1] + 0.1 and set(by_step["trained"]) == {1, 2}
    # By the verifier's certainty: the bins cover every position once and their shares weigh back to the whole.
    bins = head_training.agreement_by_confidence(head.model, verifier.model.get_input_embeddings(), output, examples)
    assert [b["verifier_top1"] for b in bins] == ["0-0.3", "0.3-0.5", "0.5-0.7", "0.7-0.9", "0.9-1"]
    assert sum(b["share"] for b in bins) == pytest.approx(1, abs=1e-3)
    assert sum(b["share"] * b["agreement1"] for b in bins) == pytest.approx(by_step["trained"][1], abs=2e-3)

    # Greedy runs only: no assertion reads the sampled ones.
    trained = measure_pair(verifier, head, held_out[:4], gammas=(3,), max_new_tokens=24, sampled=False)
    untrained = measure_pair(verifier, tiny.make_head(verifier), held_out[:4], gammas=(3,), max_new_tokens=24,
                             sampled=False)
    assert trained["identical_greedy_output"]
    assert trained["greedy_acceptance_rate"] > untrained["greedy_acceptance_rate"] + 0.1

    # A second run continues the first (as when the data grows); the export and its card name both.
    from dataclasses import replace

    from distill.card import build_card, render_card

    # It brings more replies, over the extra prompt set, and validates on a shard the first run never saw.
    generate_replies(verifier, build_extra_train_set(seed=0)[:16], work, modes=["greedy"], shard_size=16,
                     batch_size=16, max_new_tokens=40, set_name="extra")
    assert all((work / kind / "greedy-extra-00000.pt").exists() for kind in ("replies", "features", "labels"))
    more = replace(settings, steps=20, warmup=5, chain_steps=2, init_from=str(work / "runs" / "h" / "model"),
                   validation_shards="greedy-extra-00000")
    second = train_head(verifier, work, work / "runs" / "h2", more, special)
    assert second["history"][-1]["train_sequences"] == 48
    dest = export_draft(work / "runs" / "h2", verifier.tokenizer, tmp_path / "head2",
                        {"verifier": "tiny", "run": "h2", "reply_modes": ["greedy"],
                         "prompt_sets": ["extra", "train"]})
    distill = json.loads((dest / "distill.json").read_text())
    assert [r["run"] for r in distill["earlier_runs"]] == ["h"]
    figures = measure_pair(verifier, load_model(str(dest), device="cpu"), held_out[:2], gammas=(1, 2),
                           max_new_tokens=12, hybrid=(4, 1))
    card = build_card(figures, figures, {"prompts": 2}, 1000, command="test")
    text = render_card(card, distill)
    assert "## As shipped" in text and "## The draft alone" in text
    assert "train-head --run h " in text and "train-head --run h2 --init-from h --chain-steps 2" in text
    assert "--validation-shards greedy-extra-00000" in text and "generate --set extra" in text
    assert "validated on shards no earlier run saw (greedy-extra-00000)" in text
    assert f"{card['as_shipped']['acceptance_rate']:.3f}" in text


def test_a_reloaded_head_computes_exactly_what_the_saved_one_did(verifiers, tiny_tokenizer, tmp_path):
    verifier = verifiers["llama"]
    head = tiny.make_head(verifier).model
    head.save_pretrained(tmp_path / "h")
    tiny_tokenizer.save_pretrained(tmp_path / "h")
    reloaded = load_model(str(tmp_path / "h"), device="cpu").model
    states, embeds = torch.randn(1, 12, 32), torch.randn(1, 12, 32)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(states, embeds, torch.arange(12)), head(states, embeds, torch.arange(12)))


@pytest.mark.parametrize("layers", [(), (0,)], ids=["final state", "with an inner layer"])
def test_training_chain_steps_compute_what_the_drafter_computes_when_drafting(verifiers, tiny_tokenizer, layers):
    """Training runs every drafting step for all positions at once (forward_chain); step s at position i
    must equal the drafter's s-th drafted position after a verified prefix ending at i - s (also for a head
    that reads an inner layer of the verifier, draft_head.with_layers)."""
    verifier = verifiers["llama"]
    drafter = drafter_for(tiny.make_head(verifier, scale=0.5, feature_layers=layers))
    engine = Engine(verifier, drafter)
    ids = prompt(tiny_tokenizer, "The quick brown fox jumps over the lazy dog and runs away")
    with torch.no_grad():
        states = with_layers(verifier.model.base_model(torch.tensor([ids]), output_hidden_states=bool(layers)),
                             layers)
        embeds = verifier.model.get_input_embeddings()(torch.tensor([ids[1:]]))
        chain = drafter.model.forward_chain(states[:, :-1], embeds, steps=3)
    length = 6  # verified prefix ids[:length]; the verifier has read all but its last token
    engine.verifier_forward.logits_for(ids[:length - 1])
    with torch.no_grad():
        predicted = drafter._catch_up(ids[:length])
        torch.testing.assert_close(predicted, chain[0][0, length - 2], atol=1e-5, rtol=1e-4)
        for step in (1, 2):
            position = length - 2 + step
            predicted = drafter._step(predicted[None], [ids[position + 1]], position)[-1]
            torch.testing.assert_close(predicted, chain[step][0, position], atol=1e-5, rtol=1e-4)


def test_training_can_start_from_an_earlier_heads_weights_but_not_from_another_width(verifiers, tmp_path):
    from distill.head import _start_from

    verifier = verifiers["llama"]
    earlier = tiny.make_head(verifier, seed=5, head_ids=list(range(40)))
    earlier.model.save_pretrained(tmp_path / "earlier")
    fresh = tiny.make_head(verifier, seed=9, head_ids=list(range(40, 80))).model
    _start_from(fresh, tmp_path / "earlier")
    for name, weight in earlier.model.state_dict().items():
        if name == "head_ids":
            assert torch.equal(fresh.state_dict()[name], torch.arange(40, 80))  # chosen again from the data
        else:
            assert torch.equal(fresh.state_dict()[name], weight), name

    from specdec_core.loading.draft_head import SpecdecHeadModel

    config = copy.deepcopy(fresh.config)
    config.intermediate_size *= 2
    wider = SpecdecHeadModel(config)
    with pytest.raises(SystemExit, match="shapes differ"):
        _start_from(wider, tmp_path / "earlier")


def test_a_head_shared_by_two_engines_in_turn_drafts_for_each_and_stays_exact(verifiers, tiny_tokenizer):
    verifier = verifiers["llama"]
    drafter = HeadDrafter(tiny.make_head(verifier, scale=0.5))
    first, second = Engine(verifier, drafter), Engine(verifier, drafter)  # e.g. the app's chat and a race lane
    for engine, text in ((first, "Once upon a time"), (second, "The little robot"), (first, "A quiet lake")):
        ids = prompt(tiny_tokenizer, text)
        events = generate(engine, ids, max_new_tokens=24, gamma=3)
        assert list(events[-1].token_ids) == hf_greedy(verifier, ids, 24)
        assert events[-1].stats.accepted > 0  # the head read this engine's verifier states


def test_a_dropped_engine_leaves_no_hidden_state_hook_on_the_verifier(verifiers, tiny_tokenizer):
    import gc

    verifier = verifiers["qwen2"]
    hooks = verifier.model.base_model._forward_hooks
    before = len(hooks)
    engine = Engine(verifier, HeadDrafter(tiny.make_head(verifier)))
    generate(engine, prompt(tiny_tokenizer), max_new_tokens=4)
    assert len(hooks) == before + 1
    del engine
    gc.collect()
    assert len(hooks) == before
