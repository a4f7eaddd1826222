"""A quantised GGUF in its GPU form (device_quantised.py): 4-bit tensors in torch's int4 product, the rest in
bfloat16. No GPU here: the tests run the same module through torch's CPU form of the op, which takes the same
scales and zero points."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType
from test_quantised import _blocks, needs_kernel, write_quantised_llama

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import drafter_for
from specdec_core.engine import Engine
from specdec_core.loading import device_quantised, gguf_blocks, quantised
from specdec_core.loading.models import load_model

pytestmark = [needs_kernel, pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                                               reason="this torch has no CPU int4 product")]


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q4_K"])
def test_a_4_bit_block_type_maps_to_int4_scales_and_zero_points_with_the_same_values(kind):
    raw = _blocks(np.random.default_rng(3).normal(size=(16, 256)), GGMLQuantizationType[kind], seed=4)
    storage = quantised.QuantStorage(gguf_blocks.decode(kind, raw, 256), kind)
    q, scale_and_zero = device_quantised.int4_form(storage)
    scale, zero = scale_and_zero[..., 0].t(), scale_and_zero[..., 1].t()  # [out, groups]
    values = (q.float() - 8).reshape(16, -1, 32) * scale.unsqueeze(-1) + zero.unsqueeze(-1)
    torch.testing.assert_close(values.reshape(16, 256), storage.rows(torch.arange(16)), rtol=1e-6, atol=1e-6)


def test_an_8_bit_type_has_no_int4_form():
    raw = _blocks(np.zeros((16, 256)), GGMLQuantizationType.Q8_0, seed=4)
    assert device_quantised.int4_form(quantised.QuantStorage(gguf_blocks.decode("Q8_0", raw, 256), "Q8_0")) is None


@pytest.fixture(scope="module")
def moved_pair(tmp_path_factory, tiny_tokenizer):
    """The quantised pair of test_quantised, its verifier loaded as for a GPU (here: the CPU form of the op)."""
    folder = tmp_path_factory.mktemp("moved")
    types = {"*": "Q4_1", "attn_v": "Q8_0", "ffn_down": "Q5_0", "token_embd": "Q8_0", "output": "Q4_0"}
    verifier = write_quantised_llama(folder / "verifier.gguf", tiny_tokenizer, types, seed=1)
    draft = write_quantised_llama(folder / "draft.gguf", tiny_tokenizer, {**types, "*": "Q4_0"}, seed=1, noise=0.3)
    cache = folder / "cache"
    on_cpu = load_model(str(verifier), device="cpu", cache_dir=cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device_quantised, "moves_to", lambda device: True)
        moved = load_model(str(verifier), device="cpu", cache_dir=cache)
    return on_cpu, moved, load_model(str(draft), device="cpu", cache_dir=cache)


def test_a_gguf_loaded_for_a_gpu_runs_its_4_bit_layers_as_int4_and_the_rest_in_bfloat16(moved_pair):
    on_cpu, moved, _ = moved_pair
    layers = [m for m in moved.model.modules() if isinstance(m, device_quantised.Int4Linear)]
    assert layers and not any(isinstance(m, quantised.QuantLinear) for m in moved.model.modules())
    assert moved.weights.startswith("Q4_1 as int4") and "bfloat16" in moved.weights and "Q4_0 as int4" in moved.weights
    assert moved.dtype == torch.bfloat16 and not moved.notes
    prompt = torch.tensor([[5, 9, 14, 3, 8, 21]])
    with torch.no_grad():
        expected, got = on_cpu.model(prompt).logits[0], moved.model(prompt).logits[0].float()
    assert (got - expected).abs().max() <= 0.03 * expected.abs().max()  # bfloat16 activations
    head = moved.model.get_output_embeddings()
    torch.testing.assert_close(head.weight.float(), on_cpu.model.get_output_embeddings().weight, rtol=1e-2, atol=1e-2)


def test_greedy_speculation_on_the_int4_form_reproduces_its_own_greedy_output(tmp_path, tiny_tokenizer, monkeypatch):
    """Every matrix 4-bit: each row of a check is computed as a one-row step computes it (torch's CPU int4 product
    is batch-invariant), so greedy speculation repeats the verifier alone token for token."""
    types = {"*": "Q4_1", "output": "Q4_0", "token_embd": "Q8_0"}
    draft = load_model(str(write_quantised_llama(tmp_path / "d.gguf", tiny_tokenizer, {**types, "*": "Q4_0"}, seed=1,
                                                 noise=0.3)), device="cpu", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(device_quantised, "moves_to", lambda device: True)
    moved = load_model(str(write_quantised_llama(tmp_path / "v.gguf", tiny_tokenizer, types, seed=1)), device="cpu",
                       cache_dir=tmp_path / "cache")
    assert "bfloat16" not in moved.weights  # the Q8_0 embedding is looked up, not multiplied
    config = GenerationConfig(max_new_tokens=30, gamma=4)
    engine = Engine(moved, drafter_for(draft))  # the draft on the CPU kernel: what it drafts never changes the text
    drafted = 0
    for prompt in ([5, 9, 14], [40, 41, 42, 43, 44]):
        *_, alone = Engine(moved, None).generate(prompt, config.with_(speculate=False))
        *_, spoken = engine.generate(prompt, config)
        assert spoken.token_ids == alone.token_ids
        drafted += spoken.stats.drafted
    assert drafted > 0


def test_where_the_int4_product_cannot_run_every_layer_runs_in_bfloat16_and_a_note_says_why(tmp_path, tiny_tokenizer,
                                                                                             monkeypatch):
    path = write_quantised_llama(tmp_path / "q.gguf", tiny_tokenizer, {"*": "Q4_0"}, seed=2)

    def refuse(*args):
        raise RuntimeError("_weight_int4pack_mm needs compute capability 8.0")

    monkeypatch.setattr(device_quantised, "moves_to", lambda device: True)
    monkeypatch.setattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu", refuse)
    loaded = load_model(str(path), device="cpu", cache_dir=tmp_path / "cache")
    assert loaded.weights == "bfloat16"
    assert loaded.notes and "compute capability 8.0" in loaded.notes[0]
    *_, finished = Engine(loaded, None).generate([5, 9, 14], GenerationConfig(max_new_tokens=5))
    assert finished.error is None and len(finished.token_ids) == 5
