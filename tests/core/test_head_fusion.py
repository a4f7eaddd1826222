"""A draft head that reads inner layers of the verifier beside its final state (feature_layers, after
EAGLE-3): the engine records those layers' states as training computes them, drafting stays exact, a
fused head starts as the head it was initialised from, and distill's features/train/agreement steps
carry the layers through. (Training's chain steps against drafting's: test_draft_head.py; online
adaptation and sampling: test_adapt.py.)"""

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.adapt import verifier_states
from specdec_core.drafting.drafters import drafter_for
from specdec_core.engine import Engine
from specdec_core.events import Finished, RoundVerified
from specdec_core.loading.draft_head import HeadCache, SpecdecHeadConfig, SpecdecHeadModel, with_layers
from specdec_core.loading.models import load_model

LAYERS = (0, 1)  # of a three-layer verifier: every layer but the last (whose output is the final state)


@pytest.fixture(scope="module")
def verifier(tiny_tokenizer):
    return tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1, layers=3), tiny_tokenizer)


def ids_of(tokenizer, text="Once upon a time there was a little robot who"):
    return tokenizer(text).input_ids


def greedy(engine, ids, **config):
    events = list(engine.generate(ids, GenerationConfig(**{"top_alternatives": 0, "max_new_tokens": 40, **config})))
    assert isinstance(events[-1], Finished) and events[-1].error is None, events[-1]
    drafted = [d for e in events if isinstance(e, RoundVerified) for d in e.drafted]
    return list(events[-1].token_ids), drafted


@pytest.mark.parametrize("tree_nodes", [0, 8])
def test_a_head_reading_inner_layers_drafts_and_the_output_is_the_verifiers_greedy_output(
        verifier, tiny_tokenizer, tree_nodes):
    ids = ids_of(tiny_tokenizer)
    plain, _ = greedy(Engine(verifier), ids, speculate=False)
    head = tiny.make_head(verifier, scale=0.5, feature_layers=LAYERS)
    tokens, drafted = greedy(Engine(verifier, drafter_for(head)), ids, gamma=4, tree_nodes=tree_nodes)
    assert tokens == plain
    assert drafted and any(d.accepted for d in drafted)


def test_the_engine_records_the_layers_as_a_batched_forward_computes_them_for_training(verifier, tiny_tokenizer):
    drafter = drafter_for(tiny.make_head(verifier, feature_layers=LAYERS))
    engine = Engine(verifier, drafter)
    ids = ids_of(tiny_tokenizer)
    first, _ = greedy(engine, ids, gamma=4)
    ids = ids + first + ids_of(tiny_tokenizer, " and then")  # a second turn: the caches keep their prefix
    reply, _ = greedy(engine, ids, gamma=4)
    full = ids + reply
    drafter.propose(full, 2)  # the engine attached it
    true = drafter._true_positions
    with torch.no_grad():
        output = verifier.model.base_model(torch.tensor([full[:true]]), output_hidden_states=True)
        fresh = with_layers(output, LAYERS)[0]
        assert fresh.shape[-1] == 3 * 32
        torch.testing.assert_close(engine.verifier_forward.hidden_states(0, true), fresh, atol=1e-5, rtol=1e-4)
        # adapt.verifier_states (online adaptation, the adaptation proxy) computes the same.
        (states,) = verifier_states(verifier.model, [full[:true]], LAYERS)
        torch.testing.assert_close(states.float(), fresh, atol=2e-2, rtol=1e-2)
        cache = HeadCache()
        embeds = verifier.model.get_input_embeddings()(torch.tensor([full[1:true + 1]]))
        drafter.model(fresh[None], embeds, torch.arange(true), cache)
    torch.testing.assert_close(drafter.cache.keys[:, :, :true], cache.keys, atol=1e-5, rtol=1e-4)


def test_the_doctor_rejects_a_head_that_reads_layers_this_verifier_lacks(verifier, tiny_tokenizer):
    from specdec_core.pairs.doctor import check_models

    assert check_models(verifier, tiny.make_head(verifier, feature_layers=LAYERS)).compatible
    shallow = tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1, layers=2), tiny_tokenizer)
    verdict = check_models(shallow, tiny.make_head(verifier, feature_layers=LAYERS))
    assert not verdict.compatible and "layers [0, 1]" in str(verdict)


def test_the_final_layer_cannot_be_a_feature_layer_its_output_is_the_final_state(verifier, tiny_tokenizer):
    output = verifier.model.base_model(torch.tensor([ids_of(tiny_tokenizer)]), output_hidden_states=True)
    with pytest.raises(ValueError, match="last layer"):
        with_layers(output, (2,))


def test_a_head_given_inner_layers_starts_as_the_head_it_was_initialised_from(verifier, tmp_path):
    from distill.head import _start_from

    earlier = tiny.make_head(verifier, scale=0.5).model
    earlier.save_pretrained(tmp_path / "earlier")
    fused = SpecdecHeadModel(SpecdecHeadConfig(**{**earlier.config.to_dict(), "feature_layers": list(LAYERS)}))
    _start_from(fused, tmp_path / "earlier")
    assert fused.fuse is not None and not fused.fuse.weight.any()
    wide, embeds = torch.randn(1, 10, 96) * 5, torch.randn(1, 10, 32)
    with torch.no_grad():
        starts_as = earlier.forward_chain(wide[..., :32], embeds, 2)
        torch.testing.assert_close(fused.forward_chain(wide, embeds, 2), starts_as)


def test_features_train_and_agreement_carry_the_inner_layers_and_the_export_drafts_exactly(
        verifier, tiny_tokenizer, tmp_path):
    from distill import head as head_training
    from distill.data import generate_replies
    from distill.export import export_draft
    from distill.prompts import build_prompt_sets

    train_prompts, _ = build_prompt_sets(seed=0)
    work = tmp_path / "work"
    generate_replies(verifier, train_prompts[:24], work, modes=["greedy"], shard_size=12, batch_size=12,
                     max_new_tokens=24)
    head_training.compute_features(verifier, work, layers=list(LAYERS))
    wide = torch.load(head_training.features_dir(work, LAYERS) / "greedy-00000.pt")["states"]
    final = torch.load(work / "features" / "greedy-00000.pt")["states"]
    assert wide[0].shape[-1] == 96 and len(wide[0]) == len(final[0]) + 1  # the recorded ones lack the last token
    torch.testing.assert_close(wide[0][:len(final[0]), :32].float(), final[0].float(), atol=2e-2, rtol=1e-2)

    settings = head_training.HeadSettings(head_size=200, intermediate=64, heads=4, kv_heads=2, steps=12,
                                          batch_tokens=256, lr=3e-3, warmup=2, validate_every=6,
                                          validation_shards="greedy-00001", feature_layers="0,1", bf16=False)
    special = sorted({verifier.tokenizer.eos_token_id, verifier.tokenizer.pad_token_id})
    head_training.train_head(verifier, work, work / "runs" / "fused", settings, special)
    dest = export_draft(work / "runs" / "fused", verifier.tokenizer, tmp_path / "head", {"verifier": "tiny"})
    head = load_model(str(dest), device="cpu")
    assert head.model.config.feature_layers == [0, 1] and head.model.fuse.weight.any()  # it learnt to fuse

    examples = head_training.load_examples(work, 640, set(verifier.eos_token_ids), {"greedy-00001"}, LAYERS)
    output = verifier.model.get_output_embeddings().weight.detach()
    figures = head_training.agreement_by_step(head.model, verifier.model.get_input_embeddings(), output, examples, 2)
    assert set(figures) == {1, 2} and all(0 <= value <= 1 for value in figures.values())

    ids = ids_of(tiny_tokenizer)
    plain, _ = greedy(Engine(verifier), ids, speculate=False)
    assert greedy(Engine(verifier, drafter_for(head)), ids, gamma=3)[0] == plain


def test_the_model_cards_reproduce_commands_name_the_feature_layers():
    from distill.card import _corpus_data, _train_command

    settings = {"feature_layers": "2,14,22", "validation_shards": "corpustf-00016"}
    assert "--feature-layers 2,14,22" in _train_command("fuse1", settings)
    _, commands = _corpus_data({"prompt_sets": ["corpus"], "reply_modes": ["corpustf"], "settings": settings})
    assert "features --layers 2,14,22" in commands
