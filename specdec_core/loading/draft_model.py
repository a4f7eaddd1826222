"""A Llama whose vocabulary is cheap at both ends: the shipped draft's architecture.

A small draft spends most of its time on the vocabulary, not its layers: a full 49,152-row output layer
of width 256 is 12.6M multiply-adds per token, several times what a few narrow layers cost. This model
keeps the layers of a plain Llama and changes the two ends:

- input: a low-rank embedding, ``table[rank_of[id]] @ up`` (every token id has a row, so any verified
  token can be read), and
- output: ``down(h) @ table[:head_size].T + bias``, scores for the `head_size` most frequent tokens only
  (the table is stored in frequency-rank order, so those rows are one contiguous slice, tied to the input).

The forward pass still returns logits over the full vocabulary: the scores are scattered into a
background of -inf, so every token outside the subset has probability 0 for the draft. Speculative
sampling stays exact with such a draft (the verifier's correction distribution keeps their mass); the
draft just never proposes them. Everything else (KV cache, `logits_to_keep`, the cache keyword of the
installed transformers) is the parent LlamaForCausalLM's own code, untouched.

Importing this module registers the model type with transformers' Auto classes, so a saved draft
loads with ``AutoModelForCausalLM.from_pretrained(folder)`` and no remote code.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

MODEL_TYPE = "specdec_draft"


class SpecdecDraftConfig(LlamaConfig):
    model_type = MODEL_TYPE

    def __init__(self, embedding_rank: int = 128, head_size: int = 8192, **kwargs):
        kwargs["tie_word_embeddings"] = False  # the tie is internal (a slice of one table), not transformers'
        super().__init__(**kwargs)
        self.embedding_rank = embedding_rank  # width of the shared token table
        self.head_size = head_size  # how many of the most frequent token ids the draft can propose


class LowRankEmbedding(nn.Module):
    """token id -> row of a [vocab, rank] table -> hidden width.

    The table is stored in frequency-rank order (`ranked_ids[r]` is the token id of rank r, 0 = most
    frequent; `rank_of` is its inverse) so that the output layer's rows are one contiguous slice of it.
    `weight` is the table, which callers read for the model's device and dtype.
    """

    def __init__(self, vocab_size: int, rank: int, hidden_size: int, std: float = 0.02):
        super().__init__()
        # Initialised here: transformers' post_init does not reach a parameter of a module it did not build.
        self.weight = nn.Parameter(torch.randn(vocab_size, rank) * std)
        self.register_buffer("ranked_ids", torch.arange(vocab_size))
        self.register_buffer("rank_of", torch.arange(vocab_size))
        self.up = nn.Linear(rank, hidden_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.up(self.weight[self.rank_of[input_ids]])


class SubsetHead(nn.Module):
    """hidden [..., d] -> full-vocabulary logits [..., V]: scores for the head subset, -inf elsewhere."""

    def __init__(self, embedding: LowRankEmbedding, hidden_size: int, head_size: int):
        super().__init__()
        # A plain reference, not a submodule: the table belongs to the embedding and is saved once.
        self.__dict__["embedding"] = embedding
        self.head_size = head_size
        self.down = nn.Linear(hidden_size, embedding.weight.shape[1], bias=False)
        self.bias = nn.Parameter(torch.zeros(head_size))

    def subset_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., d] -> [..., head_size], column r scoring the token of rank r (what training reads)."""
        return torch.nn.functional.linear(self.down(hidden), self.embedding.weight[:self.head_size], self.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        scores = self.subset_logits(hidden)
        logits = scores.new_full((*scores.shape[:-1], self.embedding.weight.shape[0]), float("-inf"))
        return logits.index_copy_(-1, self.embedding.ranked_ids[:self.head_size], scores)


class SpecdecDraftForCausalLM(LlamaForCausalLM):
    config_class = SpecdecDraftConfig
    _tied_weights_keys: dict[str, str] = {}  # nothing for transformers to tie: the head reads the embedding's table

    def __init__(self, config: SpecdecDraftConfig):
        super().__init__(config)
        # Replace the parent's full-width ends (built by LlamaForCausalLM.__init__) with the cheap ones.
        embedding = LowRankEmbedding(config.vocab_size, config.embedding_rank, config.hidden_size,
                                     config.initializer_range)
        self.model.embed_tokens = embedding
        self.lm_head = SubsetHead(embedding, config.hidden_size, config.head_size)
        self.post_init()

    def get_output_embeddings(self):
        # None, so that callers size the output by config.vocab_size (the forward's real width), not by
        # the head_size rows of the table the head multiplies with.
        return None

    def set_output_embeddings(self, new_embeddings) -> None:
        raise NotImplementedError("the draft's output layer is a frequency subset; it cannot be replaced")

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (LowRankEmbedding, SubsetHead)):
            return  # initialised in their constructors (their Linear submodules come through here)
        super()._init_weights(module)

    def set_token_ranking(self, ranked_ids: torch.Tensor) -> None:
        """Order the table by `ranked_ids` (a permutation of all token ids, most frequent first)."""
        table = self.model.embed_tokens
        ranked_ids = ranked_ids.to(device=table.ranked_ids.device, dtype=torch.long)
        if not torch.equal(torch.sort(ranked_ids).values, torch.arange(len(table.rank_of), device=ranked_ids.device)):
            raise ValueError("ranked_ids must be a permutation of all token ids")
        table.ranked_ids.copy_(ranked_ids)
        table.rank_of.copy_(torch.argsort(ranked_ids))


AutoConfig.register(MODEL_TYPE, SpecdecDraftConfig, exist_ok=True)
AutoModelForCausalLM.register(SpecdecDraftConfig, SpecdecDraftForCausalLM, exist_ok=True)
