"""Models in their GGUF quantisation: exact decoding of every supported block type, a product kernel whose rows do not
depend on the batch, and a verifier that is the quantised model itself (greedy speculation reproduces its own greedy
output token for token, chains and trees; sampling keeps its distribution).

Tiny llamas are written as GGUF files of each supported type by the tests themselves.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import tiny
import torch
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from test_lossless import PROMPT, VOCAB, chi_square_p_value, exact_joint, sampled_joint

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import drafter_for
from specdec_core.engine import Engine
from specdec_core.loading import gguf_blocks, qkernel, quantised
from specdec_core.loading.models import load_model

needs_kernel = pytest.mark.usefixtures("quantised_kernel")  # skipped, saying why, where there is none


def _blocks(values: np.ndarray, kind: GGMLQuantizationType, seed: int = 0) -> np.ndarray:
    """`values` [rows, cols] in GGUF blocks of `kind`: quantised where the gguf package can, else random blocks."""
    try:
        return quants.quantize(values.astype(np.float32), kind)
    except NotImplementedError:
        per_block, size = GGML_QUANT_SIZES[kind]
        rows, cols = values.shape
        blocks = np.random.default_rng(seed).integers(0, 256, (rows * cols // per_block, size), dtype=np.uint8)
        scale_at = {"Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}[kind.name]
        for at in scale_at:  # small, finite float16 scales
            scales = np.random.default_rng(seed + at).uniform(0.001, 0.01, len(blocks)).astype(np.float16)
            blocks[:, at:at + 2] = scales.view(np.uint8).reshape(-1, 2)
        return blocks.reshape(rows, cols // per_block * size)


@pytest.mark.parametrize("name", sorted(gguf_blocks.DECODERS))
def test_every_supported_block_type_decodes_to_what_the_gguf_package_dequantises(name):
    kind = GGMLQuantizationType[name]
    values = np.random.default_rng(1).standard_normal((6, 512)).astype(np.float32)
    raw = _blocks(values, kind, seed=3)
    grouped = gguf_blocks.decode(name, raw, 512)
    np.testing.assert_array_equal(grouped.dequantise(), quants.dequantize(raw, kind).astype(np.float32))


@needs_kernel
@pytest.mark.parametrize("layout", ["int4", "int8", "groups-of-16"])
def test_the_kernel_gives_each_row_the_same_bits_alone_or_in_a_batch_of_any_size(layout):
    rng = np.random.default_rng(2)
    # 9 blocks: two whole quads and a tail (AVX2), four pairs and a lone block (AVX-512); 202 outputs: tiles of four
    # weight rows and a remainder
    weight = rng.standard_normal((202, 288)).astype(np.float32)
    if layout == "groups-of-16":
        grouped = gguf_blocks.decode("Q6_K", _blocks(np.zeros((202, 256)), GGMLQuantizationType.Q6_K, 4), 256)
    else:
        grouped = gguf_blocks.requantise(weight, bits=4 if layout == "int4" else 8)
    storage = quantised.QuantStorage(grouped, layout)
    layer = quantised.QuantLinear(storage, None, qkernel.library())
    x = torch.from_numpy(rng.standard_normal((17, grouped.q.shape[1])).astype(np.float32))
    alone = torch.cat([layer(x[i:i + 1]) for i in range(17)])
    before = torch.get_num_threads()
    try:
        for rows in (2, 3, 4, 5, 9, 17):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                assert torch.equal(layer(x[:rows]), alone[:rows]), (rows, threads)
    finally:
        torch.set_num_threads(before)  # the worker's other tests keep their threads
    expected = x.numpy() @ grouped.dequantise().T
    scale = np.abs(expected).max()
    assert np.abs(alone.numpy() - expected).max() < 0.02 * scale  # int8 activations: close, not equal


@needs_kernel
@pytest.mark.parametrize("name", sorted(gguf_blocks.DECODERS))
def test_the_kernels_decoder_lays_out_every_block_type_as_the_reference_decoder_and_packer_do(name):
    kind = GGMLQuantizationType[name]
    raw = _blocks(np.random.default_rng(4).standard_normal((8, 512)).astype(np.float32), kind, seed=6)
    grouped = gguf_blocks.decode(name, raw, 512)
    order = np.array([3, 0, 7, 1, 2, 6, 5, 4])
    data_shape, table_shape = qkernel.decoded_shapes(name, 8, 512)
    data = torch.empty(data_shape, dtype=torch.uint8)
    scales, offsets = torch.empty(table_shape), torch.empty(table_shape)
    qkernel.decode_into(qkernel.library(), name, raw, 512, order, data, scales, offsets)
    expected = qkernel.pack_rows(grouped.q, nibbles=grouped.nibbles)[order]
    natural = qkernel.relayout(qkernel.library(), data, 0 if grouped.nibbles else 1, grouped.group, to_natural=True)
    np.testing.assert_array_equal(natural.numpy().view(expected.dtype), expected)
    np.testing.assert_array_equal(scales.numpy(), qkernel.kernel_order(grouped.d, grouped.group)[order])
    np.testing.assert_array_equal(offsets.numpy(), qkernel.kernel_order(grouped.m, grouped.group)[order])


@needs_kernel
@pytest.mark.parametrize("name", qkernel.K_QUANTS)
def test_a_k_quant_kept_with_its_own_tables_multiplies_bit_for_bit_as_with_a_float_per_group(name):
    """Where the kernel keeps a K-quant's own scale tables (AVX-512 builds: a fifth fewer bytes a step), they give the
    same floats and the same products, bit for bit, as the float tables they replace."""
    lib = qkernel.library()
    if not qkernel.compact_tables(lib, name):
        pytest.skip("this build keeps a float scale per group")
    kind = GGMLQuantizationType[name]
    rng = np.random.default_rng(8)
    raw = _blocks(rng.standard_normal((12, 768)).astype(np.float32), kind, seed=3)
    shapes = [qkernel.decoded_shapes(name, 12, 768, tables) for tables in (False, True)]
    _, _, group, nibbles = qkernel.DECODED[name]
    data = [torch.empty(shape[0], dtype=torch.uint8) for shape in shapes]
    floats = torch.empty(shapes[0][1]), torch.empty(shapes[0][1])
    own = torch.empty(shapes[1][1], dtype=torch.uint8)
    qkernel.decode_into(lib, name, raw, 768, None, data[0], *floats)
    qkernel.decode_into(lib, name, raw, 768, None, data[1], own, torch.empty((12, 0)), tables=True)
    assert torch.equal(data[0], data[1])
    assert own.numel() <= 3 / 8 * (2 * 4 * floats[0].numel())  # 3/8 of the float tables' bytes, or less
    scales, offsets = qkernel.k_tables_as_floats(own, group)
    assert torch.equal(scales, floats[0]) and torch.equal(offsets, floats[1])
    x = torch.from_numpy(rng.standard_normal((5, 768)).astype(np.float32))
    kind_number = 0 if nibbles else 1
    with_offsets = None if group == 16 else floats[1]
    for size in (2, 1):  # 16-bit activations, and one byte
        for rows in (1, 2, 5):
            expected = qkernel.matmul(lib, kind_number, data[0], floats[0], with_offsets, group, x[:rows], 1, size)
            got = qkernel.matmul(lib, kind_number, data[1], own, None if group == 16 else own, group, x[:rows], 1,
                                 size, tables=1)
            assert torch.equal(got, expected), (size, rows)


@needs_kernel
@pytest.mark.parametrize("name", qkernel.HALF_TABLES)
def test_a_weight_whose_file_keeps_half_precision_scales_multiplies_bit_for_bit_from_halves(name, quantised_pair):
    """Q4_0 to Q8_0 keep a half-precision scale (and offset) a group in the file: the AVX-512 build keeps them so
    (a Q4_1 weight reads 20 bytes a group of 32, not 24), with the same products, bit for bit, as float tables."""
    lib = qkernel.library()
    if qkernel.table_form(lib, name) != 2:
        pytest.skip("this build keeps a float scale per group")
    kind = GGMLQuantizationType[name]
    raw = _blocks(np.random.default_rng(5).standard_normal((12, 800)).astype(np.float32), kind, seed=4)
    data_shape, table_shape = qkernel.decoded_shapes(name, 12, 800)
    _, _, group, nibbles = qkernel.DECODED[name]
    data, scales = torch.empty(data_shape, dtype=torch.uint8), torch.empty(table_shape)
    offsets = torch.empty(table_shape)
    qkernel.decode_into(lib, name, raw, 800, None, data, scales, offsets)
    halves = scales.half(), offsets.half()
    assert torch.equal(halves[0].float(), scales) and torch.equal(halves[1].float(), offsets)  # exact
    x = torch.from_numpy(np.random.default_rng(6).standard_normal((5, 800)).astype(np.float32))
    kind_number = 0 if nibbles else 1
    for size in (2, 1):
        for rows in (1, 2, 5):
            expected = qkernel.matmul(lib, kind_number, data, scales, offsets if offsets.any() else None, group,
                                      x[:rows], 1, size)
            got = qkernel.matmul(lib, kind_number, data, halves[0], halves[1] if offsets.any() else None, group,
                                 x[:rows], 1, size, tables=2)
            assert torch.equal(got, expected), (size, rows)
    # and a model read from a GGUF keeps them so
    verifier = quantised_pair[0]
    forms = {m.storage.source_type: m.storage.tables for m in verifier.model.modules()
             if isinstance(m, quantised.QuantLinear)}
    assert set(forms.values()) == {2} and forms


@needs_kernel
@pytest.mark.parametrize("name", ["Q8_0", "Q5_0", "Q5_1", "Q6_K", "Q5_K"])
def test_a_wider_weight_narrowed_to_4_bits_is_the_reference_requantisation_of_its_values(name):
    """A draft's 5- to 8-bit weights narrowed in the kernel (from a float per group, halves or a K-quant's own
    tables) hold exactly gguf_blocks.requantise(bits=4) of the values they had, with
    each scale and minimum rounded to half precision as Q4_1 keeps them: each value within half a 4-bit step (and the
    minimum's rounding)."""
    lib = qkernel.library()
    kind = GGMLQuantizationType[name]
    raw = _blocks(np.random.default_rng(1).standard_normal((12, 768)).astype(np.float32), kind, seed=3)
    tables = qkernel.compact_tables(lib, name)
    data_shape, table_shape = qkernel.decoded_shapes(name, 12, 768, tables)
    _, _, group, nibbles = qkernel.DECODED[name]
    data = torch.empty(data_shape, dtype=torch.uint8)
    scales = torch.empty(table_shape, dtype=torch.uint8 if tables else torch.float32)
    offsets = torch.empty((12, 0)) if tables else torch.empty(table_shape)
    qkernel.decode_into(lib, name, raw, 768, None, data, scales, offsets, tables=tables)
    storage = quantised.QuantStorage.of_tensors(data, scales, offsets, cols=768, group=group, nibbles=nibbles,
                                                source_type=name, tables=int(tables))
    for size in (2, 1):
        storage.activation_bytes = size
        values = storage.rows(torch.arange(12)).numpy()
        narrow = storage.narrowed(lib)
        assert (narrow.kind, narrow.group, narrow.activation_bytes, narrow.layout) == (0, 32, size, storage.layout)
        assert narrow.tables == qkernel.table_form(lib, "Q4_1")
        groups = values.reshape(12, -1, 32)
        low = groups.min(axis=2)
        step = ((groups.max(axis=2) - low) / np.float32(15)).astype(np.float16).astype(np.float32)
        least = low.astype(np.float16).astype(np.float32)
        inv = np.divide(np.float32(1), step, out=np.zeros_like(step), where=step > 0)
        q = np.clip(np.rint((groups - least[:, :, None]) * inv[:, :, None]), 0, 15).astype(np.float32)
        expected = (q * step[:, :, None] + least[:, :, None]).reshape(12, 768)
        narrowed = narrow.rows(torch.arange(12)).numpy()
        np.testing.assert_array_equal(narrowed, expected)
        slack = np.repeat(step * 0.5001 + np.abs(least - low), 32, axis=1) + 1e-7
        assert np.all(np.abs(narrowed - values) <= slack)
    if qkernel.table_form(lib, name) == 2:  # the file's halves, as a model's loader keeps them: the same narrowing
        halves = quantised.QuantStorage.of_tensors(data, scales.half(), offsets.half(), cols=768, group=group,
                                                   nibbles=nibbles, source_type=name, tables=2)
        assert torch.equal(halves.narrowed(lib).rows(torch.arange(12)), narrow.rows(torch.arange(12)))
    # an output layer tied to the embeddings: it gets a narrowed copy, the embeddings keep their rows
    tied = torch.nn.ModuleDict({"embed": quantised.QuantEmbedding(storage),
                                "head": quantised.QuantLinear(storage, None, lib)})
    assert quantised.narrow_to_4_bits(tied) == 1
    assert tied["embed"].storage is storage and tied["head"].storage.source_type == "int4"


@needs_kernel
def test_a_quantised_draft_runs_its_wider_layers_in_4_bits_and_speculation_still_repeats_the_verifier(
        quantised_pair, tiny_tokenizer):
    """A draft model's own "auto" on the CPU narrows its Q8_0 and Q5_0 layers to 4 bits (half the bytes a drafted
    token reads); the verifier checks every drafted token, so greedy output is the verifier's alone."""
    from specdec_core.loading.models import DRAFT_AUTO

    verifier, draft, cache = quantised_pair
    path = next(cache.parent.glob("draft.gguf"))
    narrowed = load_model(str(path), device="cpu", dtype=DRAFT_AUTO, cache_dir=cache)
    assert "int4" in narrowed.weights and "Q8_0" not in narrowed.weights and "Q5_0" not in narrowed.weights
    assert "Q8_0" in draft.weights  # a plain load keeps the file's own
    layers = [m for m in narrowed.model.modules() if isinstance(m, quantised.QuantLinear)]
    assert layers and all(layer.storage.kind == 0 for layer in layers)
    engine = Engine(verifier, drafter_for(narrowed))
    config = GenerationConfig(max_new_tokens=30, gamma=3)
    accepted = 0
    for prompt in ([5, 9, 14], [40, 41, 42, 43, 44]):
        *_, alone = Engine(verifier, None).generate(prompt, config.with_(speculate=False))
        *_, spoken = engine.generate(prompt, config)
        assert spoken.token_ids == alone.token_ids
        accepted += spoken.stats.accepted
    assert accepted > 0


@needs_kernel
def test_a_drafts_output_layer_over_its_frequent_ids_grows_with_what_it_reads_and_keeps_speculation_exact(
        quantised_pair, tiny_tokenizer):
    """A draft's output layer over the ids below a bound, the special tokens and the tokens it has read: the same
    logits there, -inf elsewhere until the draft reads such a token; greedy speculation repeats the verifier, and
    sampled speculation keeps the verifier's distribution (the draft simply never proposes the rest)."""
    verifier, draft, cache = quantised_pair
    path = next(cache.parent.glob("draft.gguf"))
    subset_draft = load_model(str(path), device="cpu", cache_dir=cache)
    full = subset_draft.model.get_output_embeddings()
    subset = quantised.keep_frequent_outputs(subset_draft.model, [full.out_features - 1], keep_below=20)
    assert subset is not None and subset_draft.model.get_output_embeddings() is subset
    assert quantised.row_count(subset) == full.out_features and subset.kept == 21
    x = torch.randn(3, full.in_features)
    expected, got = full(x), subset(x)
    kept = torch.tensor([*range(20), full.out_features - 1])
    assert torch.equal(got[:, kept], expected[:, kept])
    assert torch.isinf(got[:, 20:-1]).all() and (got[:, 20:-1] < 0).all()
    subset_draft.model(torch.tensor([[5, 60, 61]]))  # it reads 60 and 61
    assert subset.kept == 23 and torch.equal(subset(x)[:, 60:62], expected[:, 60:62])
    engine = Engine(verifier, drafter_for(subset_draft))
    config = GenerationConfig(max_new_tokens=30, gamma=3)
    for prompt in ([5, 9, 14], [40, 41, 42, 43, 44]):
        *_, alone = Engine(verifier, None).generate(prompt, config.with_(speculate=False))
        *_, spoken = engine.generate(prompt, config)
        assert spoken.token_ids == alone.token_ids
    # sampling: a small vocabulary's draft over a few of its ids
    def model(seed, bits):
        m = tiny.make_model("llama", tiny_tokenizer, seed=seed, vocab_size=VOCAB, logit_scale=20.0, layers=1,
                            hidden=32)
        quantised.quantise_linears(m, bits=bits, lib=qkernel.library())
        return tiny.as_loaded(m, tiny_tokenizer, eos_token_ids=frozenset())

    small_verifier, small_draft = model(3, 4), model(4, 4)
    assert quantised.keep_frequent_outputs(small_draft.model, [], keep_below=VOCAB // 4) is not None
    sampling = GenerationConfig(temperature=1.0, max_new_tokens=2, gamma=2)
    counts = sampled_joint(small_verifier, small_draft, sampling, runs=600)
    assert chi_square_p_value(counts, exact_joint(small_verifier, sampling, PROMPT)) > 1e-3


def test_the_products_use_both_cpus_of_a_two_cpu_machine_unless_the_user_chose_a_count(monkeypatch):
    """PyTorch keeps one thread on a 2-CPU machine (threads.py); the kernel's pool, which runs a product alone where a
    worker lags, uses both. A count the user chose (SPECDEC_THREADS, --threads) is the count; larger machines keep
    PyTorch's."""
    from specdec_core.commands import threads

    monkeypatch.delenv("SPECDEC_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        for cpus, expected in ((2, 2), (1, 1), (8, 1)):
            monkeypatch.setattr(qkernel, "_cpus", lambda cpus=cpus: cpus)
            assert qkernel.threads() == expected, cpus
        monkeypatch.setattr(qkernel, "_cpus", lambda: 2)
        monkeypatch.setenv("SPECDEC_THREADS", "1")
        assert qkernel.threads() == 1
        monkeypatch.delenv("SPECDEC_THREADS")
        threads.set_threads(1)  # --threads 1
        assert qkernel.threads() == 1 and os.environ["SPECDEC_THREADS"] == "1"
    finally:
        torch.set_num_threads(before)


@needs_kernel
def test_a_quantised_layer_gives_back_its_rows_exactly_as_the_file_defines_them():
    grouped = gguf_blocks.decode("Q4_K", _blocks(np.zeros((8, 512)), GGMLQuantizationType.Q4_K, 5), 512)
    storage = quantised.QuantStorage(grouped, "Q4_K")
    ids = torch.tensor([[5, 0], [7, 5]])
    expected = torch.from_numpy(grouped.dequantise())[ids]
    assert torch.equal(storage.rows(ids), expected)
    assert torch.equal(quantised.QuantEmbedding(storage)(ids), expected)


def write_quantised_llama(path, tokenizer, types: dict[str, str], *, seed: int, hidden: int = 64, noise: float = 0.0):
    """A tiny llama GGUF whose matrices use `types` by GGUF name part ("attn_q": "Q4_0", "*": default for the rest)."""
    model = tiny.make_model("llama", tokenizer, seed=seed, hidden=hidden, logit_scale=8.0, noise=noise, noise_seed=9)

    def quantise(name: str, values: np.ndarray):
        if values.ndim != 2:
            return None
        part = name.split(".")[-2]
        kind = GGMLQuantizationType[types.get(part, types["*"])]
        return _blocks(values, kind, seed=len(name)), kind

    return tiny.write_gguf(path, model, tokenizer, quantise)


@pytest.fixture(scope="module")
def quantised_pair(tmp_path_factory, tiny_tokenizer):
    folder = tmp_path_factory.mktemp("quantised")
    types = {"*": "Q4_1", "attn_v": "Q8_0", "ffn_down": "Q5_0", "token_embd": "Q8_0", "output": "Q4_0"}
    verifier = write_quantised_llama(folder / "verifier.gguf", tiny_tokenizer, types, seed=1)
    draft = write_quantised_llama(folder / "draft.gguf", tiny_tokenizer, {**types, "*": "Q4_0"}, seed=1, noise=0.3)
    cache = folder / "cache"
    return (load_model(str(verifier), device="cpu", cache_dir=cache),
            load_model(str(draft), device="cpu", cache_dir=cache), cache)


@needs_kernel
def test_a_quantised_gguf_runs_in_its_own_quantisation_with_no_float_copy_on_disk(quantised_pair):
    verifier, _, cache = quantised_pair
    assert verifier.weights.startswith("Q4_1") and "Q8_0" in verifier.weights and "Q5_0" in verifier.weights
    assert "its own quantisation" in verifier.source
    assert any(isinstance(m, quantised.QuantLinear) for m in verifier.model.modules())
    assert not list(cache.rglob("*.safetensors"))  # only its config and tokenizer were written


@needs_kernel
def test_a_quantised_model_scores_a_check_of_k_tokens_bit_for_bit_as_k_single_steps(quantised_pair):
    verifier = quantised_pair[0]
    model, prompt, drafted = verifier.model, torch.tensor([[5, 9, 14, 3, 8, 21]]), [33, 7, 90, 12, 41]
    with torch.no_grad():
        past = model(prompt, use_cache=True).past_key_values
        checked = model(torch.tensor([drafted]), past_key_values=past, use_cache=True).logits[0]
        past = model(prompt, use_cache=True).past_key_values
        steps = []
        for token in drafted:
            out = model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(out.logits[0, -1])
    assert torch.equal(checked, torch.stack(steps))


@needs_kernel
@pytest.mark.parametrize("tree_nodes,activation_bytes", [(0, 2), (6, 2), (0, 1), (6, 1)])
def test_greedy_speculation_reproduces_the_quantised_verifiers_own_greedy_output(quantised_pair, tree_nodes,
                                                                                activation_bytes):
    verifier, draft, _ = quantised_pair
    for model in (verifier.model, draft.model):
        quantised.set_activation_bytes(model, activation_bytes)
    engine = Engine(verifier, drafter_for(draft))
    config = GenerationConfig(max_new_tokens=40, gamma=4, tree_nodes=tree_nodes)
    drafted = accepted = 0
    for prompt in ([5, 9, 14], [40, 41, 42, 43, 44], [7]):
        *_, alone = Engine(verifier, None).generate(prompt, config.with_(speculate=False))
        *events, spoken = engine.generate(prompt, config)
        assert spoken.token_ids == alone.token_ids
        drafted, accepted = drafted + spoken.stats.drafted, accepted + spoken.stats.accepted
    assert drafted > 0 and accepted > 0  # the draft was used, and partly accepted
    for model in (verifier.model, draft.model):
        quantised.set_activation_bytes(model, 2)  # the module's other tests use the default
    assert quantised.activation_bytes(verifier.model) == 2


@needs_kernel
def test_a_draft_head_beside_a_quantised_verifier_drafts_from_its_rows_in_their_own_format_and_8_bit_layers(
        quantised_pair):
    """The head reads the verifier's output rows in the file's own quantisation and runs its layers in 8 bits (a
    quarter of the bytes of floats at every drafted token), picks up new float weights copied into it (adaptation's
    swap), and greedy speculation still repeats the verifier alone."""
    from specdec_core.drafting.adapt import copy_weights
    from specdec_core.drafting.drafters import HeadDrafter

    verifier = quantised_pair[0]
    head = tiny.make_head(verifier, scale=0.5, head_ids=list(range(0, 300, 2)))
    drafter = HeadDrafter(head)
    engine = Engine(verifier, drafter)
    config = GenerationConfig(max_new_tokens=30, gamma=3, tree_nodes=0)
    *_, alone = Engine(verifier, None).generate([5, 9, 14], config.with_(speculate=False))
    *_, spoken = engine.generate([5, 9, 14], config)
    assert spoken.token_ids == alone.token_ids and spoken.stats.drafted > 0

    output = verifier.model.get_output_embeddings()
    assert isinstance(drafter.output, quantised.QuantLinear)
    assert drafter.output.storage.source_type == output.storage.source_type == "Q4_0"
    assert torch.equal(drafter.output.storage.rows(torch.arange(150)), output.storage.rows(drafter.head_ids))
    runner = drafter._runner()
    assert runner is not head.model and runner is drafter._runner()  # made once while the weights stay
    assert head.weights == "int8"  # what the models line and the bench show for the draft
    assert not any(type(m) is torch.nn.Linear for m in runner.modules())
    assert {m.storage.source_type for m in runner.modules() if isinstance(m, quantised.QuantLinear)} == {"int8"}

    states, embeds = torch.randn(1, 3, 64), torch.randn(1, 3, 64)
    with torch.no_grad():
        torch.testing.assert_close(runner(states, embeds, torch.arange(3)), head.model(states, embeds, torch.arange(3)),
                                   rtol=0.05, atol=0.05)
        other = tiny.make_head(verifier, seed=11, scale=0.5, head_ids=list(range(0, 300, 2))).model
        copy_weights(other, head.model)  # as HeadAdapter.swap_into does
        fresh = drafter._runner()
        assert fresh is not runner
        torch.testing.assert_close(fresh(states, embeds, torch.arange(3)), other(states, embeds, torch.arange(3)),
                                   rtol=0.05, atol=0.05)


@needs_kernel
def test_sampling_from_a_quantised_verifier_keeps_its_distribution(tiny_tokenizer):
    def model(seed, bits):
        m = tiny.make_model("llama", tiny_tokenizer, seed=seed, vocab_size=VOCAB, logit_scale=20.0, layers=1,
                            hidden=32)
        quantised.quantise_linears(m, bits=bits, lib=qkernel.library())
        return tiny.as_loaded(m, tiny_tokenizer, eos_token_ids=frozenset())

    verifier, draft = model(3, 4), model(4, 8)
    config = GenerationConfig(temperature=1.0, max_new_tokens=2, gamma=2)
    counts = sampled_joint(verifier, draft, config, runs=600)
    assert chi_square_p_value(counts, exact_joint(verifier, config, PROMPT)) > 1e-3


def test_without_the_kernel_a_quantised_gguf_runs_as_floats_and_says_why(tmp_path, tiny_tokenizer, monkeypatch):
    path = write_quantised_llama(tmp_path / "q.gguf", tiny_tokenizer, {"*": "Q4_0"}, seed=2)
    monkeypatch.setenv("SPECDEC_QUANT_KERNEL", "off")
    qkernel.library.cache_clear()
    try:
        loaded = load_model(str(path), device="cpu", cache_dir=tmp_path / "cache")
    finally:
        monkeypatch.delenv("SPECDEC_QUANT_KERNEL")
        qkernel.library.cache_clear()
    assert loaded.weights == "float32"
    assert len(loaded.notes) == 1 and "float32" in loaded.notes[0] and "SPECDEC_QUANT_KERNEL" in loaded.notes[0]
    assert not (tmp_path / "cache" / "gguf-meta").exists()  # its config read once, for the float copy alone


def test_a_first_load_builds_the_kernel_while_it_reads_the_files_config(tmp_path, tiny_tokenizer, monkeypatch,
                                                                          quantised_kernel):
    """On a fresh machine, or after an upgrade, the kernel compiles on another core while the GGUF's config and
    tokenizer are read for the cache: the load waits for the longer, not for both one after the other."""
    import threading

    from specdec_core.loading import gguf_cache, specs
    from specdec_core.loading.progress import Reporter

    path = write_quantised_llama(tmp_path / "q.gguf", tiny_tokenizer, {"*": "Q4_0"}, seed=2)
    building, reading = threading.Event(), threading.Event()

    def build():  # stands for the compiler: still at work when the config's reading starts, and the other way round
        building.set()
        assert reading.wait(20), "the config was not read while the kernel was being built"
        return quantised_kernel

    convert = gguf_cache.converted_gguf

    def read_config(*args, **kwargs):
        reading.set()
        assert building.wait(20), "the kernel was not being built while the config was read"
        return convert(*args, **kwargs)

    monkeypatch.setattr(qkernel, "library", build)
    monkeypatch.setattr(gguf_cache, "converted_gguf", read_config)
    resolved = specs.resolve(str(path), report=Reporter(None), trust_remote_code=False, cache_dir=tmp_path / "cache",
                             quantised=True)
    assert resolved.gguf == path and (resolved.folder / "config.json").is_file()


def test_a_gguf_with_a_type_the_kernel_lacks_runs_as_floats_and_names_the_type(tmp_path, tiny_tokenizer):
    path = write_quantised_llama(tmp_path / "k.gguf", tiny_tokenizer, {"*": "Q8_0", "ffn_up": "Q3_K"}, seed=2,
                                 hidden=256)
    loaded = load_model(str(path), device="cpu", cache_dir=tmp_path / "cache")
    assert loaded.weights == "float32"
    assert any("Q3_K" in note for note in loaded.notes)


@needs_kernel
def test_k_quant_types_load_quantised_and_agree_with_their_float_conversion(tmp_path, tiny_tokenizer):
    types = {"*": "Q4_K", "attn_v": "Q6_K", "ffn_down": "Q5_K", "token_embd": "Q6_K", "output": "Q6_K"}
    path = write_quantised_llama(tmp_path / "k.gguf", tiny_tokenizer, types, seed=4, hidden=256)
    packed = load_model(str(path), device="cpu", cache_dir=tmp_path / "cache")
    floats = load_model(str(path), device="cpu", cache_dir=tmp_path / "cache", weights="float")
    assert packed.weights.startswith("Q4_K") and floats.weights == "float32"
    ids = torch.tensor([[3, 17, 29, 4, 11]])
    with torch.no_grad():
        got, expected = packed.model(ids).logits, floats.model(ids).logits
    # Same weights; only the activations' 8-bit rounding differs.
    assert torch.allclose(got, expected, rtol=0.05, atol=0.05 * float(expected.abs().max()))


@needs_kernel
def test_a_float_model_can_be_quantised_at_load_and_says_so(tiny_models_dir):
    loaded = load_model(str(tiny_models_dir["llama-verifier"]), device="cpu", weights="int8")
    assert loaded.weights == "int8"
    assert sum(isinstance(m, quantised.QuantLinear) for m in loaded.model.modules()) > 0


def test_a_gguf_claiming_a_million_layers_is_refused_before_anything_is_built(tmp_path, tiny_tokenizer):
    import gguf

    from specdec_core.errors import ModelLoadError

    path = write_quantised_llama(tmp_path / "q.gguf", tiny_tokenizer, {"*": "Q8_0"}, seed=2)
    reader = gguf.GGUFReader(str(path), "r+")
    reader.fields["llama.block_count"].parts[-1][0] = 1_000_000  # the same file, one number changed in place
    del reader
    with pytest.raises(ModelLoadError, match="block_count = 1,000,000"):
        load_model(str(path), device="cpu", cache_dir=tmp_path / "cache")


@needs_kernel
def test_a_forked_child_multiplies_with_workers_of_its_own(tmp_path):
    """The app decodes in a forked process: the parent's worker threads do not exist there."""
    import os
    import signal
    import time

    grouped = gguf_blocks.requantise(np.random.default_rng(3).standard_normal((512, 256)).astype(np.float32), bits=4)
    layer = quantised.QuantLinear(quantised.QuantStorage(grouped, "int4"), None, qkernel.library())
    x = torch.randn(3, 256)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    expected = layer(x)  # the parent's workers start here
    pid = os.fork()
    if pid == 0:  # the child, still asking for 2 threads: exit 0 when its own product matches
        os._exit(0 if torch.equal(layer(x), expected) else 1)
    torch.set_num_threads(before)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the child hung waiting for its parent's worker threads")


def test_on_a_cpu_with_avx2_the_kernel_is_built_with_it_and_compiles_without_warnings(tmp_path):
    """A native build that fails, or fails its self-check, falls back to floats (several times slower) with one line
    of warning, and would skip the kernel's other tests: where there is a compiler, the source must build, pass and
    use the CPU's widest vectors."""
    import platform
    import shutil
    import subprocess
    from pathlib import Path

    flags = qkernel._cpu_flags().split()
    if platform.machine() not in ("x86_64", "AMD64") or not {"avx2", "fma"} <= set(flags):
        pytest.skip("this CPU has no AVX2 and FMA")
    if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")):
        pytest.skip("no C compiler")
    assert qkernel.library() is not None, qkernel.unavailable_reason()
    assert qkernel.library().specdec_has_avx2() == 1
    wide = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= set(flags)
    assert qkernel.library().specdec_has_avx512() == wide
    compiler = shutil.which("cc") or shutil.which("gcc")
    done = subprocess.run([compiler, "-O3", "-march=native", "-Wall", "-fsyntax-only", str(qkernel.SOURCE)],
                          capture_output=True, text=True, cwd=Path(tmp_path))
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_processes_needing_the_kernel_at_once_build_it_once_the_others_waiting_for_its_file(
        tmp_path, monkeypatch, quantised_kernel):
    """On a fresh machine the app and the CLI, or the test processes, start together: the first builds the kernel
    and the others wait for it instead of each compiling (a core's seconds). Two callers here, the second asking
    while the first is still building; a build that copies the kernel already built stands in for the compiler."""
    import shutil
    import threading

    pytest.importorskip("fcntl", reason="the build's lock is POSIX's (elsewhere each process builds its own)")
    built, building = [], threading.Event()

    def build(compiler, target):
        target.parent.mkdir(parents=True, exist_ok=True)
        built.append(target)
        building.set()
        time.sleep(0.5)  # still building when the second caller asks
        shutil.copy(quantised_kernel._name, target)
        return ""

    monkeypatch.setattr(qkernel, "_build", build)
    found = []
    first = threading.Thread(target=lambda: found.append(qkernel.library.__wrapped__(tmp_path)))
    first.start()
    assert building.wait(30)
    found.append(qkernel.library.__wrapped__(tmp_path))
    first.join(30)
    assert len(built) == 1 and len(found) == 2 and None not in found


@needs_kernel
def test_eight_bit_activations_are_asked_for_at_load_and_shown_in_the_format(tmp_path, tiny_tokenizer):
    types = {"*": "Q4_0", "token_embd": "Q8_0", "output": "Q8_0"}
    path = write_quantised_llama(tmp_path / "a8.gguf", tiny_tokenizer, types, seed=2)
    loaded = load_model(str(path), device="cpu", cache_dir=tmp_path / "cache", activation_bits=8)
    assert loaded.weights.endswith("8-bit activations") and quantised.activation_bytes(loaded.model) == 1
    joined = {id(m.home[0]) for m in loaded.model.modules() if hasattr(m, "home")}
    assert joined  # the lean layers' joined products run at the same precision as their parts
    assert all(m.home[0].activation_bytes == 1 for m in loaded.model.modules() if hasattr(m, "home"))


@needs_kernel
def test_neighbouring_projections_of_one_type_are_decoded_side_by_side_and_joined_without_a_copy(quantised_pair):
    verifier = quantised_pair[0]  # q and k in Q4_1, v in Q8_0; gate and up in Q4_1
    attention = next(m for m in verifier.model.modules() if hasattr(m, "q_proj"))
    mlp = next(m for m in verifier.model.modules() if hasattr(m, "gate_proj"))
    q_home, k_home = attention.q_proj.storage.home, attention.k_proj.storage.home
    assert q_home[0] is k_home[0] and (q_home[1], k_home[1]) == (0, attention.q_proj.out_features)
    assert not hasattr(attention.v_proj.storage, "home")  # another type: a product of its own
    # Q8_0 has no offsets: its products read none; Q4_1's do
    assert attention.v_proj.storage.offsets_address() is None and q_home[0].offsets_address() is not None
    assert mlp.gate_proj.storage.home[0] is mlp.up_proj.storage.home[0]
    whole = q_home[0]
    assert attention.q_proj.storage.data.data_ptr() == whole.data.data_ptr()  # a view, not a copy


def _other_builds() -> list[str]:
    """The builds this machine can also run besides its own: plain C always; AVX2 alone where the CPU has AVX-512."""
    import platform

    flags = set(qkernel._cpu_flags().split())
    builds = ["plain"]
    if platform.machine() in ("x86_64", "AMD64") and {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
        builds.append("avx2")
    return builds


@needs_kernel
@pytest.mark.parametrize("build", _other_builds())
def test_the_kernels_other_builds_compute_the_same_products_as_this_cpus_build(tmp_path, monkeypatch, build):
    """Machines without AVX2 (ARM laptops among them) run the plain C loops, and CPUs without AVX-512 the AVX2 code;
    each lays out the activations its own way. They give the same products, up to the order in which floats are
    summed, and each gives a row the same bits alone or with others."""
    import ctypes
    import shutil
    import subprocess

    from specdec_core.loading.gguf_blocks import requantise

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    target = tmp_path / f"{build}.so"
    monkeypatch.setenv("SPECDEC_QUANT_KERNEL", build)  # "avx2": the flags that setting gives the loader's build
    flags = ["-O2"] if build == "plain" else ["-O3", *qkernel._flag_sets()[0]]
    subprocess.run([compiler, *flags, "-shared", "-fPIC", "-pthread", "-o", str(target), str(qkernel.SOURCE)],
                   check=True, capture_output=True)
    other = ctypes.CDLL(str(target))
    qkernel._declare(other)
    assert qkernel._self_check(other)
    assert other.specdec_has_avx512() == 0 and other.specdec_has_avx2() == (build == "avx2")
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((42, 576)).astype(np.float32)  # 18 blocks: four quads and a tail of two
    x = torch.from_numpy(rng.standard_normal((5, 576)).astype(np.float32))
    sixteens = gguf_blocks.decode("Q6_K", _blocks(np.zeros((42, 512)), GGMLQuantizationType.Q6_K, 5), 512)
    for grouped in (requantise(weight, bits=4), requantise(weight, bits=8), sixteens):
        kind = 0 if grouped.nibbles else 1
        natural = torch.from_numpy(qkernel.pack_rows(grouped.q, nibbles=grouped.nibbles))
        data = qkernel.relayout(other, natural, kind, grouped.group)  # each build's own layout
        mine = qkernel.relayout(qkernel.library(), natural, kind, grouped.group)
        scales = torch.from_numpy(qkernel.kernel_order(grouped.d, grouped.group))
        offsets = torch.from_numpy(qkernel.kernel_order(grouped.m, grouped.group))
        rows = x[:, :grouped.q.shape[1]].contiguous()
        for size in (2, 1):
            products = [qkernel.matmul(lib, kind, layout, scales, offsets, grouped.group, rows, 1, size)
                        for lib, layout in ((other, data), (qkernel.library(), mine))]
            torch.testing.assert_close(products[0], products[1], rtol=1e-5, atol=1e-4)
            for count in (1, 2, 3):
                alone = qkernel.matmul(other, 0 if grouped.nibbles else 1, data, scales, offsets, grouped.group,
                                       rows[:count], 1, size)
                assert torch.equal(alone, products[0][:count])
            if kind == 1:  # narrowed to 4 bits (a draft's wider layers): the same nibbles and tables from each build
                narrowed = [qkernel.narrow(lib, layout, scales, offsets, group=grouped.group, tables=0,
                                           layout=qkernel.layout(lib), cols=rows.shape[1])
                            for lib, layout in ((other, data), (qkernel.library(), mine))]
                assert all(torch.equal(a, b) for a, b in zip(*narrowed))
            if not offsets.any():  # a weight without offsets (8-bit, Q6_K): none read, the same products
                for lib, layout, product in zip((other, qkernel.library()), (data, mine), products):
                    without = qkernel.matmul(lib, 1, layout, scales, None, grouped.group, rows, 1, size)
                    torch.testing.assert_close(without, product, rtol=1e-6, atol=1e-5)
