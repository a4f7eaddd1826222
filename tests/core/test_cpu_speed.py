"""CPU fast paths: the few-row product forms chosen per shape, their cached plans, and the growing KV cache."""

import copy
import json
import sys

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter
from specdec_core.engine import Engine
from specdec_core.events import Finished
from specdec_core.loading import cpu_attention, cpu_speed, memory
from specdec_core.loading.resources import weight_bytes
from specdec_core.verification.kv import CachedForward, GrowingLayer

needs_packing = pytest.mark.skipif(not cpu_speed.packing_available(), reason="this torch build has no oneDNN "
                                   "inner product")
FAST_FORMS = ["columns", pytest.param("packed", marks=needs_packing)]


def force(model, form: str, *, hold_packed: bool = False) -> list[cpu_speed.RowPlan]:
    """Send every row count of every nn.Linear through `form` (the machine may not choose it)."""
    shapes = {tuple(m.weight.shape) for m in model.modules() if type(m) is torch.nn.Linear}
    every_count = dict.fromkeys(cpu_speed.ROW_COUNTS, form)
    return cpu_speed.apply_plans(model, [cpu_speed.RowPlan(s, every_count, {}) for s in shapes],
                                 hold_packed=hold_packed)


@pytest.mark.parametrize("rows", range(1, 10))
def test_the_columns_form_computes_the_same_product_as_linear(rows):
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 40, generator=generator)
    x = torch.randn(rows, 40, generator=generator)
    got = cpu_speed.columns_product(x, weight)
    assert got.shape == (rows, 96) and got.is_contiguous()
    torch.testing.assert_close(got, torch.nn.functional.linear(x, weight), rtol=1e-5, atol=1e-5)


@needs_packing
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 9, 17, 33])
def test_the_packed_form_computes_the_same_product_as_linear(rows):
    generator = torch.Generator().manual_seed(rows)
    weight, bias = torch.randn(96, 40, generator=generator), torch.randn(96, generator=generator)
    x = torch.randn(1, rows, 40, generator=generator)
    got = cpu_speed.packed_product(x, cpu_speed.pack(weight), bias)
    torch.testing.assert_close(got, torch.nn.functional.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", FAST_FORMS)
def test_a_linear_with_bias_and_batched_input_gives_the_same_output_in_each_form(form):
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 48)
    model = torch.nn.Sequential(layer)
    x = torch.randn(1, 3, 24)
    expected = layer(x)
    force(model, form)
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
    many = torch.randn(2, 20, 24)  # 40 rows: beyond MAX_ROWS (a prefill), so plain F.linear
    torch.testing.assert_close(layer(many), torch.nn.functional.linear(many, layer.weight, layer.bias))


@pytest.mark.parametrize("form", FAST_FORMS)
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_speculation_is_unchanged_when_every_product_uses_one_fast_form(tiny_tokenizer, arch, gamma, form):
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    config = GenerationConfig(max_new_tokens=40, gamma=gamma)
    reference, _ = tiny.make_pair(arch, tiny_tokenizer)
    expected = list(Engine(reference, None).generate(prompt, config))[-1].token_ids
    verifier, draft = tiny.make_pair(arch, tiny_tokenizer)
    force(verifier.model, form)
    force(draft.model, form)
    events = list(Engine(verifier, ModelDrafter(draft)).generate(prompt, config))
    assert isinstance(events[-1], Finished)
    assert events[-1].token_ids == expected
    assert events[-1].stats.accepted > 0


def test_plans_are_measured_once_per_machine_then_read_back(tiny_tokenizer, tmp_path):
    measured = []
    first = tiny.make_model("llama", tiny_tokenizer, seed=1)
    plans = cpu_speed.speed_up(first, cache_dir=tmp_path, on_measure=lambda: measured.append(1))
    assert measured == [1]
    assert {p.shape for p in plans} == {tuple(m.weight.shape) for m in first.modules()
                                        if type(m) is torch.nn.Linear}
    for plan in plans:
        assert set(plan.forms) == set(cpu_speed.ROW_COUNTS)
        assert set(plan.ms["linear"]) == set(plan.ms["columns"]) == set(cpu_speed.ROW_COUNTS)
        for rows, form in plan.forms.items():
            if form != "linear":  # another form only when it beat F.linear by the margin
                assert plan.ms[form][rows] < 0.95 * plan.ms["linear"][rows]

    again = cpu_speed.speed_up(tiny.make_model("llama", tiny_tokenizer, seed=2), cache_dir=tmp_path,
                               on_measure=lambda: measured.append(2))
    assert measured == [1] and again == plans


def test_a_damaged_plan_file_is_measured_again(tiny_tokenizer, tmp_path):
    model = tiny.make_model("llama", tiny_tokenizer, seed=1)
    cpu_speed.speed_up(model, cache_dir=tmp_path)
    (plan_file,) = (tmp_path / "cpu-plans").iterdir()
    plan_file.write_text("{not json")
    measured = []
    cpu_speed.speed_up(tiny.make_model("llama", tiny_tokenizer, seed=1), cache_dir=tmp_path,
                       on_measure=lambda: measured.append(1))
    assert measured == [1]
    assert isinstance(json.loads(plan_file.read_text()), list)


def test_the_off_switch_and_float16_models_keep_plain_linear(tiny_tokenizer, tmp_path, monkeypatch):
    half = tiny.make_model("llama", tiny_tokenizer, seed=1).to(torch.float16)
    assert cpu_speed.speed_up(half, cache_dir=tmp_path) == []
    monkeypatch.setenv("SPECDEC_CPU_MATMUL", "off")
    model = tiny.make_model("llama", tiny_tokenizer, seed=1)
    assert cpu_speed.speed_up(model, cache_dir=tmp_path) == []
    assert all("forward" not in vars(m) for m in model.modules())
    assert not (tmp_path / "cpu-plans").exists()


@needs_packing
def test_without_room_for_packed_copies_the_packed_counts_take_the_better_other_form(monkeypatch):
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 48)
    timings = {"linear": dict.fromkeys(cpu_speed.ROW_COUNTS, 10.0),
               "columns": {rows: 5.0 if rows <= 2 else 12.0 for rows in cpu_speed.ROW_COUNTS},
               "packed": dict.fromkeys(cpu_speed.ROW_COUNTS, 4.0)}
    plan = cpu_speed.RowPlan((48, 24), dict.fromkeys(cpu_speed.ROW_COUNTS, "packed"), timings)
    monkeypatch.setattr(memory, "available_memory", lambda: 1000)  # bytes: no room for 4.6 kB twice
    (applied,) = cpu_speed.apply_plans(torch.nn.Sequential(layer), [plan])
    assert applied.forms == {rows: "columns" if rows <= 2 else "linear" for rows in cpu_speed.ROW_COUNTS}
    assert "_specdec_packed" not in vars(layer)


@needs_packing
def test_a_large_models_packed_copies_stay_within_a_share_of_its_weights_best_gain_first(monkeypatch):
    """Packed copies duplicate weights: a model gets them only up to a share of its own weights, for the
    layers that gain most per byte; the others keep the better unpacked form."""
    torch.manual_seed(0)
    small, large, other = torch.nn.Linear(64, 64), torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)
    model = torch.nn.Sequential(small, large, other)

    def plan(shape, packed_ms):
        timings = {"linear": dict.fromkeys(cpu_speed.ROW_COUNTS, 10.0),
                   "columns": dict.fromkeys(cpu_speed.ROW_COUNTS, 12.0),
                   "packed": dict.fromkeys(cpu_speed.ROW_COUNTS, packed_ms)}
        return cpu_speed.RowPlan(shape, dict.fromkeys(cpu_speed.ROW_COUNTS, "packed"), timings)

    plans = [plan((64, 64), 9.0), plan((256, 64), 2.0), plan((64, 256), 9.5)]
    monkeypatch.setattr(cpu_speed, "_PACKED_FLOOR", 0)
    monkeypatch.setattr(cpu_speed, "_PACKED_SHARE_OF_WEIGHTS", 0.5)  # room for the large layer, not for all
    cpu_speed.apply_plans(model, plans)

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    packed = [m for m in model if "_specdec_packed" in vars(m)]
    assert packed == [large]  # the most time saved per byte, and it fits
    assert sum(m.weight.numel() * 4 for m in packed) <= 0.5 * weights
    with torch.no_grad():
        x = torch.randn(5, 64)
        torch.testing.assert_close(model(x), torch.nn.functional.linear(
            torch.nn.functional.linear(torch.nn.functional.linear(x, small.weight, small.bias), large.weight,
                                       large.bias), other.weight, other.bias), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_memory_left_under_a_containers_cgroup_limit_caps_what_is_available(monkeypatch, tmp_path, version):
    group = "box/job"
    if version == "v2":
        folder, files = tmp_path / group, ("memory.max", "memory.current")
        own = f"0::/{group}\n"
    else:
        folder, files = tmp_path / "memory" / group, ("memory.limit_in_bytes", "memory.usage_in_bytes")
        own = f"4:memory:/{group}\n3:cpu:/\n"
    folder.mkdir(parents=True)
    (folder / files[0]).write_text(str(2**30))  # 1 GiB limit ...
    (folder / files[1]).write_text(str(600 * 2**20))  # ... of which 600 MiB are used
    (tmp_path / "self-cgroup").write_text(own)
    monkeypatch.setattr(memory, "_CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(memory, "_OWN_CGROUPS", tmp_path / "self-cgroup")
    monkeypatch.setattr(memory, "_os_available_memory", lambda: 20 * 2**30)
    assert memory.available_memory() == 424 * 2**20
    (folder / files[0]).write_text("max" if version == "v2" else "9223372036854771712")  # no limit
    assert memory.available_memory() == 20 * 2**30


@needs_packing
def test_a_layer_packed_at_every_row_count_holds_its_weight_once_and_computes_the_same():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 256)
    expected_weight, model = layer.weight.detach().clone(), torch.nn.Sequential(layer)
    before = weight_bytes(model)
    applied = force(model, "packed", hold_packed=True)
    assert layer.weight.untyped_storage().nbytes() <= 4  # the plain weight is gone: the packed copy holds it
    assert "256x64: packed 1-33" in cpu_speed.describe(applied)  # and the plans as applied say so
    assert weight_bytes(model) >= before  # ... and the model still reports its size
    with torch.no_grad():
        for rows in (1, 5, cpu_speed.MAX_ROWS + 7):  # the last: a prefill, beyond the timed row counts
            x = torch.randn(rows, 64)
            torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, expected_weight, layer.bias),
                                       rtol=1e-4, atol=1e-4)
        with pytest.raises(RuntimeError, match="float32 on the CPU"):
            layer(torch.randn(2, 64, dtype=torch.bfloat16))
        x = torch.randn(3, 64)
        copied = copy.deepcopy(model)
        torch.testing.assert_close(copied(x), model(x))  # a copy shares the packed weight...
        assert copied[0].weight.untyped_storage().nbytes() <= 4  # ...and allocates no weight of its own
    assert torch.equal(model.state_dict()["0.weight"], expected_weight)  # saved, it is the weight, not the stand-in
    with pytest.raises(RuntimeError, match="no gradient flows"):  # rather than a silent None gradient
        layer(torch.randn(2, 64, requires_grad=True))
    with torch.no_grad(), pytest.raises(RuntimeError, match="load the model again"):
        model.to(torch.bfloat16)(torch.randn(2, 64, dtype=torch.bfloat16))  # moved: a clear word, not oneDNN's


def test_bfloat16_is_packed_only_on_a_cpu_with_bfloat16_instructions(monkeypatch):
    """oneDNN also runs bfloat16 on a plain AVX-512 CPU, emulated and slower than float32: not worth packing."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    for avx512_bf16, amx, native in ((False, False, False), (True, False, True), (False, True, True)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda value=avx512_bf16: value, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda value=amx: value, raising=False)
        assert cpu_speed.native_bfloat16() is native
        cpu_speed.packing_available.cache_clear()
        try:
            if not native:
                assert not cpu_speed.packing_available(torch.bfloat16)
        finally:
            cpu_speed.packing_available.cache_clear()


@needs_packing
def test_shared_and_output_layers_keep_plain_weights_when_the_others_are_held_packed(tiny_tokenizer):
    def held(model) -> list[str]:
        return [name for name, m in model.named_modules() if type(m) is torch.nn.Linear
                and m.weight.untyped_storage().nbytes() <= 4]

    model = tiny.make_model("llama", tiny_tokenizer, seed=1)
    output = model.get_output_embeddings().weight.detach().clone()
    force(model, "packed", hold_packed=True)
    assert held(model) and all(".layers." in name for name in held(model))  # every projection, never lm_head
    assert torch.equal(model.get_output_embeddings().weight, output)  # a draft head reads rows of it
    first, second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    second.weight = first.weight  # tied: the other user of the weight would read the stand-in
    shared = torch.nn.Sequential(first, second)
    force(shared, "packed", hold_packed=True)
    assert held(shared) == []


@needs_packing
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_speculation_is_unchanged_with_weights_held_packed(tiny_tokenizer, arch):
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    config = GenerationConfig(max_new_tokens=40, gamma=3)
    reference, _ = tiny.make_pair(arch, tiny_tokenizer)
    expected = list(Engine(reference, None).generate(prompt, config))[-1].token_ids
    verifier, draft = tiny.make_pair(arch, tiny_tokenizer)
    for loaded in (verifier, draft):
        force(loaded.model, "packed", hold_packed=True)
    events = list(Engine(verifier, ModelDrafter(draft)).generate(prompt, config))
    assert events[-1].token_ids == expected and events[-1].stats.accepted > 0


@needs_packing
def test_a_packed_layer_follows_its_weight_when_it_changes_in_place():
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 48)
    force(torch.nn.Sequential(layer), "packed")
    x = torch.randn(1, 5, 24)
    with torch.no_grad():
        layer(x)
        layer.weight.mul_(2.0)
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        copied = copy.deepcopy(layer)  # a packed copy beside the weight does not stop a deep copy
        copied.weight.mul_(0.5)
        torch.testing.assert_close(copied(x), torch.nn.functional.linear(x, copied.weight, copied.bias))
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_the_growing_cache_gives_a_fresh_passs_logits_after_rollbacks_and_regrowth(tiny_tokenizer):
    model = tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0)
    cached = CachedForward(model, torch.device("cpu"))
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 300, (40,), generator=generator).tolist()
    # Grow past the first buffer (256 positions), roll back into it, and grow again.
    longest = 0
    for _ in range(14):
        keep = max(1, len(ids) - int(torch.randint(0, 12, (1,), generator=generator)))
        ids = ids[:keep] + torch.randint(5, 300, (int(torch.randint(1, 60, (1,), generator=generator)),),
                                         generator=generator).tolist()
        ids = ids[:480]
        longest = max(longest, len(ids))
        got = cached.logits_for(ids, n_last=3)
        with torch.no_grad():
            fresh = model(torch.tensor([ids])).logits[0, -3:]
        torch.testing.assert_close(got, fresh, rtol=1e-4, atol=1e-4)
    assert longest > 256
    assert all(type(layer) is GrowingLayer for layer in cached.cache.layers)
    assert cached.cache.get_seq_length() == len(cached.cached_ids)


def load_on_cpu(folder, cache_dir, monkeypatch, *, backend: bool):
    """`folder` loaded onto the CPU as the app loads it, with the CPU backend or (off switch) without."""
    from specdec_core.loading.models import load_model

    with monkeypatch.context() as patch:
        if not backend:
            patch.setenv("SPECDEC_CPU_MATMUL", "off")
        return load_model(str(folder), device="cpu", dtype="float32", cache_dir=cache_dir)


def verify_logits(loaded, tiny_tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """A chain verify (5 new tokens after a prompt, masked) and a tree verify (its own mask), as the engine runs
    them."""
    ids = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    cached = CachedForward(loaded.model, loaded.device)
    cached.logits_for(ids)
    chain = cached.logits_for(ids + [11, 12, 13, 14, 15], n_last=5)
    cached.logits_for(ids)
    tree = cached.logits_for_tree(ids, [21, 22, 23, 24], [-1, 0, 0, 1])
    return chain, tree


def test_a_model_loaded_without_the_cpu_backend_gives_the_same_logits_and_leaves_transformers_as_it_was(
        tiny_models_dir, tiny_tokenizer, tmp_path, monkeypatch):
    from transformers import AttentionInterface
    from transformers.integrations import sdpa_attention

    own_gqa_rule, own_sdpa = sdpa_attention.use_gqa_in_sdpa, AttentionInterface._global_mapping["sdpa"]
    fast = load_on_cpu(tiny_models_dir["llama-verifier"], tmp_path, monkeypatch, backend=True)
    plain = load_on_cpu(tiny_models_dir["llama-verifier"], tmp_path, monkeypatch, backend=False)
    assert fast.model.config._attn_implementation == cpu_attention.NAME
    assert plain.model.config._attn_implementation == "sdpa"
    assert all("forward" not in vars(m) for m in plain.model.modules())
    for got, expected in zip(verify_logits(fast, tiny_tokenizer), verify_logits(plain, tiny_tokenizer)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert sdpa_attention.use_gqa_in_sdpa is own_gqa_rule  # no transformers function was replaced
    assert AttentionInterface._global_mapping["sdpa"] is own_sdpa


def test_cpu_attention_hands_grouped_heads_to_the_kernel_even_with_a_mask(tiny_models_dir, tiny_tokenizer,
                                                                         tmp_path, monkeypatch):
    kernel = torch.nn.functional.scaled_dot_product_attention
    key_heads: list[int] = []

    def recording(query, key, value, attn_mask=None, **kwargs):
        if attn_mask is not None:
            key_heads.append(key.shape[1])
        return kernel(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    for backend, heads in ((True, 2), (False, 4)):  # the tiny llama: 4 query heads share 2 key/value heads
        key_heads.clear()
        verify_logits(load_on_cpu(tiny_models_dir["llama-verifier"], tmp_path, monkeypatch, backend=backend),
                      tiny_tokenizer)
        assert key_heads and set(key_heads) == {heads}


def test_a_draft_heads_output_layer_gets_its_cpu_forms_at_load(tiny_tokenizer, tmp_path, monkeypatch):
    from specdec_core.drafting.drafters import DraftTarget, HeadDrafter

    verifier = tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0), tiny_tokenizer)
    head = tiny.make_head(verifier, head_ids=list(range(0, 200, 2)))
    head.model.save_pretrained(tmp_path / "head")
    tiny_tokenizer.save_pretrained(tmp_path / "head")
    monkeypatch.setattr(cpu_speed, "measure_plan", lambda weights: cpu_speed.RowPlan(  # as if columns won here
        tuple(weights[0].shape), dict.fromkeys(cpu_speed.ROW_COUNTS, "columns"), {}))
    loaded = load_on_cpu(tmp_path / "head", tmp_path / "cache", monkeypatch, backend=True)
    assert "forward" in vars(loaded.head_output)  # the loader gave it the measured form
    drafter = HeadDrafter(loaded)
    drafter.attach(DraftTarget(CachedForward(verifier.model, verifier.device), verifier.producible_ids, frozenset()))
    assert drafter.output is loaded.head_output
    states = torch.randn(3, verifier.model.config.hidden_size)
    rows = verifier.model.get_output_embeddings().weight.detach()[head.model.head_ids]
    torch.testing.assert_close(drafter._scores(states), torch.nn.functional.linear(states, rows),
                               rtol=1e-5, atol=1e-5)


@needs_packing
def test_the_loader_holds_a_language_models_weights_packed_but_never_a_draft_heads(tiny_models_dir, tiny_tokenizer,
                                                                                   tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_speed, "measure_plan", lambda weights: cpu_speed.RowPlan(  # as if packed won everywhere
        tuple(weights[0].shape), dict.fromkeys(cpu_speed.ROW_COUNTS, "packed"), {}))

    def held(loaded) -> int:
        linears = [m for m in loaded.model.modules() if type(m) is torch.nn.Linear]
        return sum(m.weight.untyped_storage().nbytes() <= 4 for m in linears)

    fast = load_on_cpu(tiny_models_dir["llama-verifier"], tmp_path / "cache", monkeypatch, backend=True)
    plain = load_on_cpu(tiny_models_dir["llama-verifier"], tmp_path / "cache", monkeypatch, backend=False)
    assert held(fast) > 0 and held(plain) == 0
    for got, expected in zip(verify_logits(fast, tiny_tokenizer), verify_logits(plain, tiny_tokenizer)):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    head = tiny.make_head(tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1), tiny_tokenizer))
    head.model.save_pretrained(tmp_path / "head")
    tiny_tokenizer.save_pretrained(tmp_path / "head")
    assert held(load_on_cpu(tmp_path / "head", tmp_path / "cache", monkeypatch, backend=True)) == 0  # it trains


def test_a_mapped_weights_pages_are_given_back_and_read_again_from_its_file(tmp_path):
    import mmap

    import numpy as np

    values = np.arange(4 * mmap.PAGESIZE, dtype=np.float32)
    values.tofile(tmp_path / "weights.bin")
    mapped = torch.from_numpy(np.memmap(tmp_path / "weights.bin", dtype=np.float32, mode="c"))
    assert mapped.sum() > 0  # resident now
    dropped = memory.drop_file_pages(mapped)
    if not sys.platform.startswith("linux"):
        assert dropped == 0
        return
    assert dropped >= 3 * mmap.PAGESIZE * 4
    assert torch.equal(mapped, torch.from_numpy(values))  # the file's bytes come back when read
    assert memory.drop_file_pages(torch.ones(4 * mmap.PAGESIZE)) == 0  # anonymous memory is left alone


@pytest.mark.skipif(not cpu_speed.packing_available(torch.bfloat16), reason="this CPU has no native bfloat16 for "
                    "oneDNN")
def test_a_bfloat16_model_is_timed_apart_and_held_packed_where_the_cpu_packs_bfloat16(tiny_tokenizer, tmp_path):
    model = tiny.make_model("llama", tiny_tokenizer, seed=1).to(torch.bfloat16)
    reference = copy.deepcopy(model)
    assert cpu_speed.speed_up(model, cache_dir=tmp_path, hold_packed=True)
    files = sorted(path.name for path in (tmp_path / "cpu-plans").iterdir())
    assert len(files) == 1 and files[0].endswith("-bfloat16.json")  # float32's plans are another file
    force(model, "packed", hold_packed=True)
    ids = torch.tensor([tiny_tokenizer("Once upon a time").input_ids])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits.float(), reference(ids).logits.float(), rtol=0.05, atol=0.1)


def test_a_bfloat16_draft_for_a_float32_verifier_changes_no_greedy_token(tiny_models_dir, tiny_tokenizer):
    from specdec_core.pairs.pairing import LoadOptions, load_pair

    folders = tiny_models_dir["llama-verifier"], tiny_models_dir["llama-draft"]
    pair = load_pair(*map(str, folders), "model", LoadOptions(device="cpu", draft_dtype="bfloat16"))
    assert pair.verifier.model.dtype == torch.float32 and pair.draft.model.dtype == torch.bfloat16
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    config = GenerationConfig(max_new_tokens=40, gamma=3)
    expected = list(Engine(pair.verifier, None).generate(prompt, config))[-1].token_ids
    finished = list(pair.engine.generate(prompt, config))[-1]
    assert finished.token_ids == expected and finished.stats.drafted > 0


def test_a_draft_model_is_bfloat16_by_default_only_where_the_cpu_runs_it_natively_and_never_a_head(
        tiny_models_dir, tiny_tokenizer, tmp_path, monkeypatch):
    from specdec_core.loading.models import DRAFT_AUTO, load_model
    from specdec_core.pairs.pairing import draft_dtype_for

    assert draft_dtype_for("auto") == draft_dtype_for("auto", "auto") == DRAFT_AUTO
    assert draft_dtype_for("float32") == "float32" and draft_dtype_for("auto", "float32") == "float32"
    assert draft_dtype_for("float32", "bfloat16") == "bfloat16"
    head = tiny.make_head(tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1), tiny_tokenizer))
    head.model.save_pretrained(tmp_path / "head")
    tiny_tokenizer.save_pretrained(tmp_path / "head")
    monkeypatch.setenv("SPECDEC_CPU_MATMUL", "off")  # the choice of dtype only; the backend has its own tests
    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(cpu_speed, "packing_available", lambda dtype=torch.float32, native=native: native)
        draft = load_model(str(tiny_models_dir["llama-draft"]), device="cpu", dtype=DRAFT_AUTO, cache_dir=tmp_path)
        assert draft.model.dtype == expected
        loaded_head = load_model(str(tmp_path / "head"), device="cpu", dtype=DRAFT_AUTO, cache_dir=tmp_path)
        assert loaded_head.model.dtype == torch.float32  # a head trains on the verifier's float32 states
