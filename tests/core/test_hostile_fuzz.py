"""Property tests (issue 25): chat templates, model configs and temperatures, whatever their values,
end in a result or a clear error, within bounds, never NaN, a hang or a traceback."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_core.config import GenerationConfig
from specdec_core.errors import ChatTemplateError
from specdec_core.loading.weights_check import implied_parameters
from specdec_core.text import chat
from specdec_core.text.chat import build_prompt
from specdec_core.verification.sampling import accept_drafts, processed_probs, sample

FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# ---- temperatures ------------------------------------------------------------------------------------

temperatures = (st.floats(min_value=0.0, max_value=1.7976931348623157e308, allow_nan=False)
                | st.sampled_from([5e-324, 1e-300, 1e-45, 1e-40, 1e-38, 1e-30, 3.4e38, 3.5e38, 1e39, 1e300]))
logit_rows = st.lists(st.floats(-1e4, 1e4) | st.just(float("-inf")), min_size=2, max_size=12).filter(
    lambda row: any(math.isfinite(x) for x in row))


@settings(max_examples=200, **FUZZ)
@given(temperature=temperatures, rows=st.lists(logit_rows, min_size=1, max_size=3).filter(
    lambda rows: len({len(r) for r in rows}) == 1), top_k=st.integers(0, 5), top_p=st.floats(0.01, 1.0),
       seed=st.integers(0, 2**32))
def test_any_finite_temperature_gives_a_distribution_and_a_valid_sample(temperature, rows, top_k, top_p, seed):
    logits = torch.tensor(rows)
    config = GenerationConfig(temperature=temperature, top_k=top_k, top_p=top_p).validate()
    probs = processed_probs(logits, config)
    assert bool(torch.isfinite(probs).all()) and bool((probs >= 0).all())
    assert torch.allclose(probs.sum(-1), torch.ones(len(rows)), atol=1e-4)
    assert bool((probs[torch.isinf(logits)] == 0).all())  # a token ruled out stays ruled out
    generator = torch.Generator().manual_seed(seed)
    token = sample(probs[0], generator)
    assert probs[0, token] > 0
    if len(rows) >= 2:
        result = accept_drafts(probs[:1].argmax(-1), probs[:1], probs[:2], generator)
        assert all(math.isfinite(p) for p in result.accept_probs) and probs[1 if result.n_accepted else 0][
            result.next_token] > 0


# ---- chat templates ----------------------------------------------------------------------------------

pieces = st.sampled_from([
    "{{ messages[0]['content'] }}", "{{ bos_token }}", "<|im_start|>", "{% if add_generation_prompt %}A:{% endif %}",
    "{{ raise_exception('no') }}", "{{ messages[0].nope.deeper }}", "{{ 'x' | undefined_filter }}",
    "{% for m in messages %}{{ m['role'] }}{% endfor %}", "{{ ('x' * {n})[:5] }}",
    "{% for c in 'y' * {n} %}{% endfor %}",
    "{% for i in range({n}) %}{% for j in range({n}) %}{% endfor %}{% endfor %}",
    "{{ 'z ' * {n} }}", "{{ messages | tojson }}", "{% set ns = namespace(a=1) %}{{ ns.a }}", "{{ ",
])
sizes = st.sampled_from([1, 10, 1000, 100_000, 10_000_000, 3_000_000_000])


@settings(max_examples=25, **FUZZ)
@given(parts=st.lists(st.tuples(pieces, sizes), min_size=1, max_size=3))
def test_any_chat_template_renders_or_is_refused_within_its_limits(tiny_tokenizer, monkeypatch, parts):
    monkeypatch.setattr(chat, "TEMPLATE_TIME_LIMIT_S", 0.5)
    tokenizer = _with_template(tiny_tokenizer, "".join(p.replace("{n}", str(n)) for p, n in parts))
    try:
        ids = build_prompt(tokenizer, [{"role": "user", "content": "hi"}], context_length=1 << 20).ids
        assert all(isinstance(i, int) for i in ids)
    except ChatTemplateError as error:
        assert str(error) and "\n" not in str(error)
    except Exception as error:  # noqa: BLE001 - the prompt may not fit: that is its own error
        assert type(error).__name__ == "PromptTooLongError", error


_clones: dict[str, object] = {}


def _with_template(tokenizer, template: str):
    import copy

    clone = _clones.get("tokenizer")
    if clone is None:
        clone = _clones["tokenizer"] = copy.deepcopy(tokenizer)
    clone.chat_template = template
    return clone


# ---- configs -----------------------------------------------------------------------------------------


@settings(max_examples=20, **FUZZ)
@given(arch=st.sampled_from(["llama", "qwen2", "gpt2"]), heads=st.integers(1, 8), half_head=st.integers(1, 32),
       kv_divisor=st.integers(1, 8), layers=st.integers(1, 64), inner=st.integers(1, 4096),
       vocab=st.integers(1, 100_000))
def test_the_implied_parameters_never_exceed_what_the_model_really_has(arch, heads, half_head, kv_divisor, layers,
                                                                       inner, vocab):
    """The weights check refuses a config whose implied parameters the weights cannot hold: the bound must
    be a lower bound on the real model, or a real model could be refused."""
    from transformers import AutoConfig, AutoModelForCausalLM

    hidden = heads * 2 * half_head  # rotary embeddings need an even head size
    kv_heads = heads // kv_divisor if heads % kv_divisor == 0 else heads
    if arch == "gpt2":
        fields = dict(n_embd=hidden, n_head=heads, n_layer=layers, n_inner=inner, vocab_size=vocab, n_positions=64)
    else:
        fields = dict(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      num_hidden_layers=layers, intermediate_size=inner, vocab_size=vocab,
                      max_position_embeddings=64)
    config = AutoConfig.for_model(arch, **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    real = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    assert implied_parameters(json.loads(config.to_json_string())) <= real


@pytest.mark.parametrize("field", ["num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"])
@settings(max_examples=10, **FUZZ)
@given(value=st.integers(10**7, 10**15))
def test_a_config_claiming_any_absurd_size_is_refused(tiny_models_dir, field, value):
    from specdec_core.errors import ModelLoadError
    from specdec_core.loading.weights_check import check_weights

    folder = tiny_models_dir["llama-verifier"]
    config = json.loads((folder / "config.json").read_text())
    original = dict(config)
    try:
        config[field] = value
        (folder / "config.json").write_text(json.dumps(config))
        with pytest.raises(ModelLoadError, match="describes at least"):
            check_weights(folder, spec="x")
    finally:
        (folder / "config.json").write_text(json.dumps(original))
