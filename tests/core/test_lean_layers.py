"""The lean decoder layers of a quantised model (loading/lean_layers.py): the same maths as transformers' layers,
for Llama, Qwen2 (biased q, k and v) and Qwen3 (normed q and k heads), and still batch-invariant."""

from __future__ import annotations

import copy

import pytest
import tiny
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from specdec_core.loading import cpu_attention, lean_layers, qkernel, quantised

pytestmark = pytest.mark.usefixtures("quantised_kernel")  # skipped, saying why, where there is none

PROMPT = [[5, 9, 14, 3, 8, 21, 17]]
DRAFTED = [33, 7, 90, 12, 41]


def _float_model(arch: str, tokenizer) -> torch.nn.Module:
    if arch != "qwen3":
        return tiny.make_model(arch, tokenizer, seed=3, logit_scale=8.0, hidden=64)
    torch.manual_seed(3)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=tokenizer.eos_token_id)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def quantised_models(request, tiny_tokenizer):
    """(transformers' layers, lean layers) over the same 4-bit weights, both attending row by row."""
    model = _float_model(request.param, tiny_tokenizer)
    lean = copy.deepcopy(model)
    for each in (model, lean):  # the same weights, quantised the same way
        quantised.quantise_linears(each, bits=4, lib=qkernel.library())
        cpu_attention.attend_row_by_row(each)
    assert lean_layers.streamline(lean) == model.config.num_hidden_layers
    return model, lean


def _logits(model, ids, past=None):
    with torch.no_grad():
        out = model(torch.tensor(ids), past_key_values=past, use_cache=True)
    return out.logits[0], out.past_key_values


def test_the_lean_layers_compute_what_transformers_layers_do(quantised_models):
    reference, lean = quantised_models
    expected, past_expected = _logits(reference, PROMPT)
    got, past_got = _logits(lean, PROMPT)  # a prompt: attention in one call, as transformers does it
    _assert_near(got, expected)
    expected = _logits(reference, [DRAFTED], past_expected)[0]
    got = _logits(lean, [DRAFTED], past_got)[0]  # a check of five tokens: each row attends alone
    _assert_near(got, expected)


def _assert_near(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to rounding: a last-bit difference can move an activation across a quantisation step, so the
    bound is relative to the logits' scale."""
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_the_lean_layers_score_a_check_of_k_tokens_bit_for_bit_as_k_single_steps(quantised_models):
    lean = quantised_models[1]
    checked = _logits(lean, [DRAFTED], _logits(lean, PROMPT)[1])[0]
    past, steps = _logits(lean, PROMPT)[1], []
    for token in DRAFTED:
        logits, past = _logits(lean, [[token]], past)
        steps.append(logits[-1])
    assert torch.equal(checked, torch.stack(steps))


def test_a_layer_with_float_projections_keeps_transformers_forward(tiny_tokenizer):
    model = tiny.make_model("llama", tiny_tokenizer, seed=3, hidden=64)
    assert lean_layers.streamline(model) == 0


def test_joined_projections_hold_their_weights_once(quantised_models):
    lean = quantised_models[1]
    attention = next(m for m in lean.modules() if hasattr(m, "q_proj"))
    q, k = attention.q_proj.storage.data, attention.k_proj.storage.data
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()  # views of one joined tensor
    rows = torch.arange(attention.k_proj.out_features)
    assert torch.equal(attention.k_proj.storage.rows(rows), attention.k_proj.weight)


def _lean_layers_of(model) -> list:
    return [module.forward.__self__ for module in model.modules()
            if isinstance(getattr(module.forward, "__self__", None), lean_layers._LeanLayer)]


def test_a_layer_run_as_two_kernel_calls_computes_the_same_bits_as_its_parts(quantised_models):
    lean = quantised_models[1]
    layers = _lean_layers_of(lean)
    assert layers and all(layer.fusable for layer in layers)  # joined q/k/v and gate/up: the fused form runs
    fused_prompt, past = _logits(lean, PROMPT)
    fused_check = _logits(lean, [DRAFTED], past)[0]
    for layer in layers:
        layer.fusable = False
    try:
        parts_prompt, past = _logits(lean, PROMPT)
        parts_check = _logits(lean, [DRAFTED], past)[0]
    finally:
        for layer in layers:
            layer.fusable = True
    assert torch.equal(fused_prompt, parts_prompt) and torch.equal(fused_check, parts_check)


def test_a_layer_run_as_one_call_into_the_engines_cache_computes_the_same_bits_as_two_calls_around_its_update(
        quantised_models, monkeypatch):
    """The engine's cache (kv.GrowingLayer) lets a layer write its keys and values itself (qkernel.layer_step); a
    cache of transformers' own takes them through its update, between two kernel calls."""
    from specdec_core.verification.kv import new_cache

    lean = quantised_models[1]
    monkeypatch.setattr(lean_layers._LeanStack, "_step", lambda self, kwargs: None)  # layer by layer
    two_prompt, past = _logits(lean, PROMPT)
    two_check = _logits(lean, [DRAFTED], past)[0]
    steps = []
    step = qkernel.layer_step
    monkeypatch.setattr(qkernel, "layer_step", lambda *args: steps.append(args[2].shape[0]) or step(*args))
    cache = new_cache(lean)
    one_prompt, past = _logits(lean, PROMPT, cache)  # each layer's first update makes its buffers: two calls
    one_check = _logits(lean, [DRAFTED], past)[0]
    one_step = _logits(lean, [[DRAFTED[0]]], past)[0]
    assert steps == [len(DRAFTED)] * len(_lean_layers_of(lean)) + [1] * len(_lean_layers_of(lean))
    assert torch.equal(one_prompt, two_prompt) and torch.equal(one_check, two_check)
    assert cache.layers[0].keys.shape[-2] == len(PROMPT[0]) + len(DRAFTED) + 1
    assert torch.equal(one_step[-1], _logits(lean, [[DRAFTED[0]]], _logits(lean, [DRAFTED], _logits(
        lean, PROMPT)[1])[1])[0][-1])


def test_the_whole_decoder_in_one_call_computes_the_same_bits_as_its_layers_one_by_one(quantised_models,
                                                                                      monkeypatch):
    """In the engine's cache, a check of k tokens, a one-token step and a tree's check run every layer in one kernel
    call (qkernel.stack_step); with the layers one call each they give the same logits and cache, bit for bit."""
    from specdec_core.verification.kv import CachedForward

    lean = quantised_models[1]
    stacks = []
    stack_step = qkernel.stack_step
    monkeypatch.setattr(qkernel, "stack_step", lambda *args: stacks.append(args[2].shape[0]) or stack_step(*args))

    def run(cached: CachedForward) -> list[torch.Tensor]:
        prompt = PROMPT[0]
        out = [cached.logits_for(prompt), cached.logits_for(prompt + DRAFTED, n_last=len(DRAFTED))]
        out.append(cached.logits_for(prompt + DRAFTED + [4], n_last=1))
        cached.roll_back(len(prompt))
        out.append(cached.logits_for_tree(prompt, [33, 7, 90, 12], [-1, 0, 0, 2]))
        cached.keep_path([0, 1])
        out.append(cached.logits_for(prompt + [33, 7, 50], n_last=1))
        out.append(torch.cat([layer.keys for layer in cached.cache.layers]))
        return out

    together = run(CachedForward(lean, torch.device("cpu")))
    # The prompt, on a cache with no buffers yet, ran layer by layer; the tree's five rows: the prompt's last token
    # again (its distribution was dropped with the roll-back) and the four nodes
    assert stacks == [len(DRAFTED), 1, 5, 1]
    monkeypatch.setattr(lean_layers._LeanStack, "_step", lambda self, kwargs: None)
    one_by_one = run(CachedForward(lean, torch.device("cpu")))
    assert all(torch.equal(a, b) for a, b in zip(together, one_by_one))


def test_with_a_hook_on_a_layer_the_decoder_runs_its_layers_one_by_one(quantised_models, monkeypatch):
    """A recorder of a layer's output (a draft head reading a middle layer) sees every call."""
    from specdec_core.verification.kv import CachedForward

    lean = quantised_models[1]
    stacks, seen = [], []
    stack_step = qkernel.stack_step
    monkeypatch.setattr(qkernel, "stack_step", lambda *args: stacks.append(1) or stack_step(*args))
    cached = CachedForward(lean, torch.device("cpu"))
    cached.logits_for(PROMPT[0])
    hook = lean.base_model.layers[0].register_forward_hook(lambda module, args, output: seen.append(1))
    try:
        cached.logits_for(PROMPT[0] + DRAFTED, n_last=len(DRAFTED))
    finally:
        hook.remove()
    cached.logits_for(PROMPT[0] + DRAFTED + [4], n_last=1)
    assert seen == [1] and stacks == [1]


def test_room_reserved_past_a_cache_buffers_end_grows_it_and_keeps_the_keys_before():
    from specdec_core.verification.kv import GrowingLayer

    layer = GrowingLayer()
    keys = torch.randn(1, 2, 250, 8)
    layer.update(keys, keys + 1)
    key, value, start = layer.reserve(10, torch.float32)
    assert start == 250 and key.shape[1] >= 260 and layer.keys.shape[-2] == 260
    assert torch.equal(key[:, :250], keys[0]) and torch.equal(value[:, :250], keys[0] + 1)
    key[:, 250:260] = 7.0  # written by the caller into the views the cache reads
    assert torch.equal(layer.keys[0, :, 250:], torch.full((2, 10, 8), 7.0))
    assert GrowingLayer().reserve(1, torch.float32) is None  # no buffers before the first update
    assert layer.reserve(1, torch.bfloat16) is None and layer.keys.shape[-2] == 260  # nor for another type


@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (12, 2, 128), (4, 4, 64), (8, 2, 64), (6, 2, 16),
                                                (2, 1, 48)])
def test_the_kernels_attention_is_softmax_attention_over_the_keys_a_row_may_see_in_their_order(heads, kv_heads, dim):
    """Each query row attends alone over the keys its mask shows; a row that sees some keys computes, bit for bit,
    what a row sees in a cache holding only those keys, in order (a tree's node and the same token decoded alone)."""
    generator = torch.Generator().manual_seed(heads * dim)
    keys, rows = 37, 3
    query = torch.randn(rows, heads * dim, generator=generator)
    buffers = torch.randn(2, kv_heads, 64, dim, generator=generator)  # room past the keys, as the cache keeps
    key, value = buffers[0, :, :keys], buffers[1, :, :keys]
    visible = torch.rand(rows, keys, generator=generator) < 0.6
    visible[:, 0] = True
    got = qkernel.attend(qkernel.library(), query, heads, key, value, visible.to(torch.uint8).contiguous(), 0.125)
    group = heads // kv_heads
    for row in range(rows):
        seen = visible[row].nonzero().flatten()
        for head in range(heads):
            k, v = key[head // group, seen], value[head // group, seen]
            weights = torch.softmax(0.125 * (k @ query[row, head * dim:(head + 1) * dim]), dim=0)
            torch.testing.assert_close(got[row, head * dim:(head + 1) * dim], weights @ v, rtol=1e-5, atol=1e-6)
        only = torch.zeros(2, kv_heads, 64, dim)
        only[0, :, :len(seen)], only[1, :, :len(seen)] = key[:, seen], value[:, seen]
        alone = qkernel.attend(qkernel.library(), query[row:row + 1].contiguous(), heads, only[0, :, :len(seen)],
                               only[1, :, :len(seen)], None, 0.125)
        assert torch.equal(alone[0], got[row])
