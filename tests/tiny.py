"""Tiny random models with a real (trained-in-milliseconds) BPE tokenizer, saved to folders.

Everything here is built from configs: no network, no downloaded weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "Speculative decoding drafts a few tokens with a small model and verifies them in one pass.",
    "def add(a, b):\n    return a + b\n",
    "Once upon a time there was a little robot who loved to read books about the sea.",
    "Hello! How can I help you today? I can answer questions, write code and summarise text.",
    "1 2 3 4 5 6 7 8 9 10, the quick brown fox jumps over the lazy dog.",
] * 20

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def make_tokenizer(vocab_size: int = 320, corpus: list[str] | None = None) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `corpus` (a different corpus gives a different, incompatible vocabulary)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus or CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    return fast


def make_config(arch: str, vocab_size: int, *, layers: int = 2, hidden: int = 32, ctx: int = 512,
                eos_token_id: int = 2):
    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=eos_token_id, pad_token_id=0)
    if arch == "llama":
        return LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ctx,
                           tie_word_embeddings=False, **common)
    if arch == "qwen2":
        return Qwen2Config(hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ctx,
                           tie_word_embeddings=False, **common)
    if arch == "gpt2":
        return GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=ctx, **common)
    raise ValueError(arch)


def make_model(arch: str, tokenizer: PreTrainedTokenizerFast, *, seed: int, logit_scale: float = 1.0,
               vocab_size: int | None = None, noise: float = 0.0, noise_seed: int = 0, **kwargs):
    """A random model; `logit_scale` sharpens its distributions (and keeps argmax ties far apart).

    The same seed and shape with a little `noise` gives a draft that mostly agrees with its verifier,
    so rounds have both acceptances and rejections."""
    torch.manual_seed(seed)
    config = make_config(arch, vocab_size or len(tokenizer), eos_token_id=tokenizer.eos_token_id, **kwargs)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(logit_scale)
        if noise:
            generator = torch.Generator().manual_seed(noise_seed)
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * noise * parameter.std())
    return model


def save_model(folder: Path, arch: str, tokenizer: PreTrainedTokenizerFast, *, seed: int, **kwargs) -> Path:
    model = make_model(arch, tokenizer, seed=seed, **kwargs)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def as_loaded(model, tokenizer, name: str = "tiny", *, context_length: int = 512,
              eos_token_ids: frozenset[int] | None = None):
    """Wrap an in-memory model the way models.load_model would (tests skip the disk round trip)."""
    from specdec_core.loading.models import LoadedModel

    return LoadedModel(
        model=model, tokenizer=tokenizer, spec=name, name=name, device=torch.device("cpu"),
        dtype=torch.float32, context_length=context_length,
        eos_token_ids=frozenset({tokenizer.eos_token_id}) if eos_token_ids is None else eos_token_ids,
        load_s=0.0, source="in memory")


def make_pair(arch: str, tokenizer, *, noise: float = 0.3, **kwargs):
    """A verifier and a noisy copy of it as draft: they agree often but not always."""
    verifier = as_loaded(make_model(arch, tokenizer, seed=1, logit_scale=8.0), tokenizer, f"{arch}-verifier",
                         **kwargs)
    draft = as_loaded(make_model(arch, tokenizer, seed=1, logit_scale=8.0, noise=noise, noise_seed=7),
                      tokenizer, f"{arch}-draft", **kwargs)
    return verifier, draft


def save_head_folder(tmp_path: Path, verifier_folder: Path, tokenizer, *, scale: float = 0.5) -> Path:
    """A tiny draft head for the tiny verifier saved in `verifier_folder`, saved as a draft spec (a head adapts
    to the user's chats; a draft model cannot)."""
    from specdec_core.loading.models import load_model

    head = make_head(load_model(str(verifier_folder), device="cpu"), scale=scale)
    folder = tmp_path / "tiny-head"
    head.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_conversation_bench(tmp_path: Path, tokenizer) -> tuple[Path, Path, Path]:
    """A saved tiny verifier, a draft head for it and a three-turn conversation file: what `specdec bench --adapt`
    reads."""
    verifier_folder = save_model(tmp_path / "verifier", "llama", tokenizer, seed=1, logit_scale=8.0)
    prompts = tmp_path / "conversation.jsonl"
    prompts.write_text("Hello!\nThe capital of France is\n1 2 3 4\n")
    return verifier_folder, save_head_folder(tmp_path, verifier_folder, tokenizer, scale=1.0), prompts


def make_head(verifier, *, seed: int = 5, head_ids: list[int] | None = None, scale: float = 1.0,
              feature_layers: tuple[int, ...] = ()):
    """A random draft head (draft_head.py) for an in-memory verifier, wrapped like a loaded model.

    `scale` multiplies the residual branch so that its prediction starts near the state it read (a
    random head then agrees with the verifier often enough for rounds to mix acceptances and rejections).
    With `feature_layers` it also reads those layers' states, through a random (not zero) fusion."""
    from specdec_core.loading.draft_head import SpecdecHeadConfig, SpecdecHeadModel, embedding_fingerprint

    model = verifier.model
    text_config = model.config.get_text_config()
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = list(range(vocab)) if head_ids is None else head_ids
    torch.manual_seed(seed)
    config = SpecdecHeadConfig(hidden_size=text_config.hidden_size, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=2 * text_config.hidden_size, vocab_size=vocab,
                               head_size=len(ids), verifier_name=verifier.name,
                               verifier_fingerprint=embedding_fingerprint(model.get_input_embeddings().weight),
                               feature_layers=feature_layers)
    head = SpecdecHeadModel(config).eval()
    with torch.no_grad():
        head.set_head_ids(torch.tensor(ids))
        width = text_config.hidden_size
        # fc reads [embedding ; state]: start close to passing the state through.
        head.fc.weight[:, width:] += torch.eye(width) * 3
        head.layer.o_proj.weight.mul_(scale)
        head.layer.down_proj.weight.mul_(scale)
        if head.fuse is not None:
            head.fuse.weight.normal_(std=0.3 / head.fuse.weight.shape[1] ** 0.5)
    return as_loaded(head, verifier.tokenizer, f"{verifier.name}-head")


def write_gguf(path: Path, model, tokenizer, quantise=None, *, size_label: str = "") -> Path:
    """Write a tiny llama as an F32 GGUF file, laid out the way llama.cpp's converter does.

    `quantise(gguf_name, values)`: None to keep a tensor F32, else (raw bytes [rows, bytes], ggml type).
    `size_label`: the general.size_label a publisher gives ("1.5B"), none when empty."""
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny llama")
    if size_label:
        writer.add_size_label(size_label)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    specials = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")  # llama.cpp's name for byte-level BPE
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)

    def rotary_interleave(weight: np.ndarray, heads: int) -> np.ndarray:
        # GGUF stores q/k rows with each head's rotary halves interleaved; transformers undoes this on load.
        return weight.reshape(heads, 2, weight.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        array = tensor.float().numpy()
        if name.endswith("q_proj.weight"):
            array = rotary_interleave(array, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            array = rotary_interleave(array, config.num_key_value_heads)
        gguf_name = names.get_name(name, try_suffixes=(".weight",))
        raw = quantise(gguf_name, array) if quantise is not None else None
        if raw is None:
            writer.add_tensor(gguf_name, np.ascontiguousarray(array))
        else:
            writer.add_tensor(gguf_name, raw[0], raw_dtype=raw[1])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# --------------------------------------------------------------------------- other vocabularies (issue 24)


def hand_tokenizer(tokens: list[str], merges: list[tuple[str, str]], *, spelling: str = "byte-level",
                   start_token: bool = False) -> PreTrainedTokenizerFast:
    """A BPE tokenizer with exactly these tokens (id = position) and merges. `spelling`: "byte-level"
    (spaces as 'Ġ') or "metaspace" (SentencePiece's '▁'). The SPECIALS must be among `tokens`;
    `start_token` makes every encoding begin with <|endoftext|>, as Llama's tokenizers do with <s>."""
    tok = Tokenizer(models.BPE({token: i for i, token in enumerate(tokens)}, merges))
    if spelling == "byte-level":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
        tok.decoder = decoders.Metaspace(prepend_scheme="never")
    tok.add_special_tokens(SPECIALS)
    if start_token:
        from tokenizers import processors

        start = tokens.index("<|endoftext|>")
        tok.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A", pair="<|endoftext|> $A $B",
                                                           special_tokens=[("<|endoftext|>", start)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def renumbered_tokenizer(tokenizer: PreTrainedTokenizerFast, *, drop_merges: int = 0, start_token: bool = False
                         ) -> PreTrainedTokenizerFast:
    """Another vocabulary over the same texts: `tokenizer`'s tokens in reverse order (specials first, so
    every other id means another text), without its last `drop_merges` merges (the tokens they made)."""
    import json

    data = json.loads(tokenizer.backend_tokenizer.to_str())
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    dropped = {"".join(m) for m in merges[len(merges) - drop_merges:]} if drop_merges else set()
    merges = merges[:len(merges) - drop_merges]
    ordinary = [t for t, _ in sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
                if t not in SPECIALS and t not in dropped]
    return hand_tokenizer(SPECIALS + ordinary[::-1], merges, start_token=start_token)


def renumbered_model(verifier_model, verifier_tokenizer, draft_tokenizer, *, noise: float = 0.0, noise_seed: int = 0):
    """The verifier's weights with its embedding and output rows moved to the draft tokenizer's ids of the
    same text (rows of the draft's other tokens stay random): a draft that agrees with the verifier
    wherever both spell the text alike, and less where they do not."""
    import copy

    model = copy.deepcopy(verifier_model)
    ids = verifier_tokenizer.get_vocab()
    moved = [(d, ids[token]) for token, d in draft_tokenizer.get_vocab().items() if token in ids]
    d_ids = torch.tensor([d for d, _ in moved])
    v_ids = torch.tensor([v for _, v in moved])
    with torch.no_grad():
        for layer in (model.get_input_embeddings(), model.get_output_embeddings()):
            weight = layer.weight.clone()
            weight[d_ids] = layer.weight[v_ids]
            layer.weight.copy_(weight)
        if noise:
            generator = torch.Generator().manual_seed(noise_seed)
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * noise * parameter.std())
    return model


def save_wide_head(folder: Path, tokenizer: PreTrainedTokenizerFast, *, hidden: int = 48) -> Path:
    """A draft head made for a verifier `hidden` wide, saved as a model folder: no pair with a verifier of
    another width can work (it reads the verifier's hidden states), whatever the tokenizers."""
    verifier = as_loaded(make_model("llama", tokenizer, seed=9, hidden=hidden), tokenizer, "wide")
    head = make_head(verifier)
    folder.mkdir(parents=True, exist_ok=True)
    head.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
