"""A draft head that reads the verifier's last hidden state: the shipped draft's architecture.

After EAGLE (Li, Wei, Zhang & Zhang 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty"): instead of a small language model that must guess the verifier's next token from text
alone, a one-layer transformer predicts the verifier's *next hidden state* from its current one. At
position i it reads

    fc([embed(x_{i+1}) ; f_i])  ->  decoder layer  ->  norm  ->  f'_{i+1}

where f_i is the verifier's final (post-norm) hidden state at position i and x_{i+1} the token that
followed it, and scores tokens with the verifier's own output layer applied to f'_{i+1}. A head with
`feature_layers` (after EAGLE-3, Li et al. 2025, which fuses low, middle and high layers) also reads those
decoder layers' outputs at the verified positions: f_i there is the final state plus a learnt projection
of the others, each RMS-normalised (the projection starts at zero, so such a head can start from one
without). Positions the head drafts have no verifier states; there it reads its own prediction, as before. The token
embedding and the output layer are the verifier's (read at attach time, never stored here), so the head
is small: a few million parameters. The output layer is cut to the `head_size` token ids most frequent
in the verifier's replies (`head_ids`), which makes a drafted token cost a fraction of the verifier's
full vocabulary; tokens outside the subset get probability 0 for the draft, and speculative sampling
stays exact (the verifier's correction distribution keeps their mass).

When drafting, the verifier's true hidden states are known up to the last verified position; beyond it
the head feeds its own predictions back in (kv.CachedForward records the true ones; the drafter,
drafters.HeadDrafter, keeps the head's KV cache in step with them).

Importing this module registers the model type with transformers' Auto classes, so a saved head loads
through the same model specs as any draft (``AutoModelForCausalLM.from_pretrained(folder)``). It cannot
generate on its own: `drafters.HeadDrafter` runs it next to its verifier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

MODEL_TYPE = "specdec_head"


class SpecdecHeadConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, hidden_size: int = 576, num_attention_heads: int = 9, num_key_value_heads: int = 3,
                 intermediate_size: int = 1536, rms_norm_eps: float = 1e-5, rope_theta: float = 10000.0,
                 vocab_size: int = 49152, head_size: int = 8192, max_position_embeddings: int = 8192,
                 verifier_name: str = "", verifier_fingerprint: float = 0.0,
                 feature_layers: list[int] | tuple[int, ...] = (), **kwargs):
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
        self.hidden_size = hidden_size  # must equal the verifier's
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.intermediate_size = intermediate_size
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.vocab_size = vocab_size  # the verifier's vocabulary (token ids the head can read)
        self.head_size = head_size  # how many of those it can propose
        self.max_position_embeddings = max_position_embeddings
        self.verifier_name = verifier_name
        self.verifier_fingerprint = verifier_fingerprint  # embedding_fingerprint() of the verifier it learned
        # Decoder layers (0-based) whose outputs the head reads beside the final hidden state (fusion after
        # EAGLE-3); empty: the final state only, as every head before it.
        self.feature_layers = [int(layer) for layer in feature_layers]


def embedding_fingerprint(embedding_weight: torch.Tensor) -> float:
    """A number that tells one verifier's token embeddings from another's (same width or not)."""
    rows = embedding_weight[:256].detach().float()
    return float((rows * torch.linspace(-1, 1, rows.shape[-1], device=rows.device)).sum())


def with_layers(output, layers: list[int] | tuple[int, ...]) -> torch.Tensor:
    """[B, T, d * (1 + len(layers))]: a decoder's final hidden states, then the outputs of its `layers`, from
    its output (run with output_hidden_states=True when `layers`): the states a head with those
    feature_layers reads, in kv.CachedForward.record_hidden_states' layout. hidden_states[i + 1] is layer
    i's output for every layer but the last (whose entry is the final, normalised state)."""
    if not layers:
        return output.last_hidden_state
    if max(layers) >= len(output.hidden_states) - 2:
        raise ValueError(f"feature layers {list(layers)}: the verifier's last layer is the final state")
    return torch.cat([output.last_hidden_state, *(output.hidden_states[layer + 1] for layer in layers)], -1)


class HeadCache:
    """The head's keys and values, [1, kv_heads, positions, head_dim], cut back by slicing."""

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[2])

    def crop(self, keep: int) -> None:
        if self.keys is not None and keep < len(self):
            self.keys, self.values = self.keys[:, :, :keep], self.values[:, :, :keep]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys, self.values = torch.cat([self.keys, keys], 2), torch.cat([self.values, values], 2)
        return self.keys, self.values


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


class DecoderLayer(nn.Module):
    """One pre-norm Llama layer (grouped-query attention with rotary positions, SwiGLU MLP)."""

    def __init__(self, config: SpecdecHeadConfig):
        super().__init__()
        width, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.attn_norm = nn.RMSNorm(width, eps=config.rms_norm_eps)
        self.q_proj = nn.Linear(width, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, width, bias=False)
        self.mlp_norm = nn.RMSNorm(width, eps=config.rms_norm_eps)
        self.gate_proj = nn.Linear(width, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(width, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, width, bias=False)
        # Computed per call, not kept in a buffer: transformers builds models on the meta device and
        # would leave a buffer that is not in the checkpoint uninitialised.
        self.rope_theta = config.rope_theta

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        exponents = torch.arange(0, self.head_dim, 2, device=x.device).float() / self.head_dim
        angles = positions[:, None].float() / self.rope_theta ** exponents[None]  # [T, head_dim/2]
        angles = torch.cat([angles, angles], -1)
        return (x * angles.cos().to(x.dtype) + _rotate_half(x) * angles.sin().to(x.dtype))

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        batch, length, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        return self._rope(q, positions), self._rope(k, positions), v

    def _attend_and_mlp(self, x: torch.Tensor, q, k, v, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                  enable_gqa=self.kv_heads != self.heads)
        x = x + self.o_proj(attended.transpose(1, 2).reshape(*x.shape[:2], -1))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: HeadCache | None,
                sees: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, d] at `positions` [T]; with a cache (batch 1) the T new positions follow the cached ones,
        and by default query t sees every cached position and the new ones up to itself; `sees`
        [T, cached + T] says otherwise (a tree's branches, each seeing only its own ancestors)."""
        q, k, v = self._qkv(x, positions)
        if cache is None:
            return self._attend_and_mlp(x, q, k, v, None, True)
        past, length = len(cache), x.shape[1]
        k, v = cache.append(k, v)
        if sees is None and length > 1:
            keys = torch.arange(past + length, device=x.device)
            sees = keys[None] <= keys[past:, None]
        return self._attend_and_mlp(x, q, k, v, sees, False)

    def forward_chain(self, x: torch.Tensor, positions: torch.Tensor, keys: list, values: list) -> torch.Tensor:
        """Step s = len(keys) of a drafting chain, for every position at once (training).

        Position i of step s stands for the s-th drafted position of a round whose verified prefix ends at
        i - s: like the drafter's cache at that moment, its query sees the step-0 (true-state) keys up to
        i - s and, of each step t = 1..s, the key at i - s + t. `keys`/`values` hold steps 0..s-1 and get
        this step's appended."""
        q, k, v = self._qkv(x, positions)
        keys.append(k)
        values.append(v)
        steps, length = len(keys) - 1, x.shape[1]
        query = torch.arange(length, device=x.device)[:, None]
        key = torch.arange(length, device=x.device)[None]
        blocks = [key <= query - steps] + [key == query - steps + t for t in range(1, steps + 1)]
        return self._attend_and_mlp(x, q, torch.cat(keys, 2), torch.cat(values, 2), torch.cat(blocks, 1), False)


class SpecdecHeadModel(PreTrainedModel):
    """fc + one decoder layer + norm; see the module docstring. Token embeddings and output rows are
    passed in (the verifier's)."""

    config_class = SpecdecHeadConfig
    base_model_prefix = "head"
    main_input_name = "features"
    _no_split_modules = ["DecoderLayer"]

    def __init__(self, config: SpecdecHeadConfig):
        super().__init__(config)
        width = config.hidden_size
        self.fc = nn.Linear(2 * width, width, bias=True)
        # The other layers' states, each RMS-normalised, added to the final state through this projection.
        # It starts at zero, so a head with fusion starts as the same head without it (see fused).
        layers = len(config.feature_layers)
        self.fuse = nn.Linear(layers * width, width, bias=False) if layers else None
        self.layer = DecoderLayer(config)
        self.norm = nn.RMSNorm(width, eps=config.rms_norm_eps)
        self.register_buffer("head_ids", torch.arange(config.head_size))  # token id of each output row
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if module is self.fuse:
            nn.init.zeros_(module.weight)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=1 / math.sqrt(module.weight.shape[1]))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)

    def get_input_embeddings(self):
        return None  # the verifier's

    def get_output_embeddings(self):
        return None  # the verifier's, cut to head_ids

    @property
    def feature_width(self) -> int:
        """Columns of the verifier's states the head reads: the final state, then each feature layer's."""
        return self.config.hidden_size * (1 + len(self.config.feature_layers))

    def fused(self, features: torch.Tensor) -> torch.Tensor:
        """[..., d] the head's input state: the verifier's final state, plus (with feature layers) the
        projection of the other layers' normalised states when `features` holds them ([..., feature_width]:
        the verifier's true states). A state the head predicted has width d and passes as it is."""
        width = self.config.hidden_size
        if self.fuse is None or features.shape[-1] == width:
            return features[..., :width]
        final, others = features[..., :width], features[..., width:].unflatten(-1, (-1, width))
        others = F.rms_norm(others, (width,), eps=self.config.rms_norm_eps).flatten(-2)
        return final + self.fuse(others)

    def forward(self, features: torch.Tensor, token_embeds: torch.Tensor, positions: torch.Tensor,
                cache: HeadCache | None = None, sees: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted next hidden states [B, T, d] from the verifier's hidden states f_i [B, T, feature_width]
        (or predicted ones, [B, T, d]) and the embeddings of the tokens x_{i+1} that followed them [B, T, d],
        at `positions` [T] (`sees`: see DecoderLayer.forward)."""
        x = self.fc(torch.cat([token_embeds, self.fused(features)], -1))
        return self.norm(self.layer(x, positions, cache, sees))

    def forward_chain(self, states: torch.Tensor, token_embeds: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time drafting (after EAGLE-3's "training-time test"): step 0 reads the true states,
        step s reads at position i the state step s - 1 predicted for it (its output at i - 1), with the
        attention pattern the drafter's cache would have (DecoderLayer.forward_chain). `states` [B, T,
        feature_width] are the true ones. Returns each step's predicted next states [B, T, d]; position i of
        step s is valid from i >= s."""
        positions = torch.arange(states.shape[1], device=states.device)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        outputs = []
        states = self.fused(states)
        current = states
        for _ in range(steps):
            out = self.norm(self.layer.forward_chain(self.fc(torch.cat([token_embeds, current], -1)), positions,
                                                     keys, values))
            outputs.append(out)
            current = torch.cat([states[:, :1], out[:, :-1]], 1)  # position i reads the prediction made at i - 1
        return outputs

    def set_head_ids(self, head_ids: torch.Tensor) -> None:
        if head_ids.numel() != self.config.head_size:
            raise ValueError(f"expected {self.config.head_size} head ids, got {head_ids.numel()}")
        self.head_ids.copy_(head_ids.to(self.head_ids))


AutoConfig.register(MODEL_TYPE, SpecdecHeadConfig, exist_ok=True)
AutoModelForCausalLM.register(SpecdecHeadConfig, SpecdecHeadModel, exist_ok=True)


@dataclass(frozen=True)
class StepScores:
    """What training scores at one drafting step of a head's chain (chain_scores)."""

    regression: torch.Tensor  # smooth L1 from the head's predicted states to the verifier's next ones
    logp: torch.Tensor  # [N_s, K] the head's log-probabilities over its own tokens (K output rows)
    keep: torch.Tensor  # [N] which of the mask-ordered positions this step scores


def chain_scores(head: SpecdecHeadModel, inputs: torch.Tensor, token_embeds: torch.Tensor, target: torch.Tensor,
                 mask: torch.Tensor, rows: torch.Tensor, steps: int, bf16: bool = False) -> list[StepScores]:
    """The one training loss of a head, both offline (distill/head.py) and online (adapt.py), step by step: for
    each of `steps` drafting steps s (forward_chain: step s > 1 reads the head's own prediction from step s - 1,
    the training-time test), at the positions it scores, the regression to the verifier's next state and the
    head's log-probabilities over its tokens (`rows` [K, d]: their output rows), from which each caller takes the
    cross-entropy to its own target distribution. inputs [B, T-1, d (x layers)], token_embeds [B, T-1, d],
    target [B, T-1, d], mask [B, T-1]: head position i reads (state i, token i + 1) and predicts state i + 1;
    step s scores position i only from i >= s (it needs s earlier predictions). `bf16`: the matrix products in
    bfloat16 on the CPU."""
    autocast = bf16 and inputs.device.type == "cpu"
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        chain = head.forward_chain(inputs, token_embeds, steps)
    scored = []
    for step, out in enumerate(chain):
        valid = mask.clone()
        valid[:, :step] = False
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            scores = out[valid] @ rows.T
        scored.append(StepScores(F.smooth_l1_loss(out[valid].float(), target[valid]),
                                 torch.log_softmax(scores.float(), -1), valid[mask]))
    return scored
