"""One frozen settings object for a generation; validated once, read everywhere."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

from specdec_core import defaults
from specdec_core.errors import ConfigError

TREE_AUTO = -1  # GenerationConfig.tree_nodes: trees where checking many tokens costs about one step


@dataclass(frozen=True)
class GenerationConfig:
    # --- sampling: the *processed* distribution both models sample from (temperature, top-k, top-p) ---
    temperature: float = 0.0  # 0 means greedy (argmax); speculation is then exact token for token
    top_k: int = 0  # 0 disables; applied after temperature, as transformers does
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]; 1 disables; applied after top-k
    seed: int = 0  # every random draw goes through torch.Generators seeded from this
    # Tokens already in the sequence (prompt and reply so far) get their logit divided by this when positive,
    # multiplied when negative, before everything above (transformers' RepetitionPenaltyLogitsProcessor,
    # after Keskar et al. 2019). 1 disables. Both models apply it to the same history, so speculation stays
    # exact; it applies when greedy too.
    repetition_penalty: float = 1.0

    # --- length ---
    max_new_tokens: int = 256
    stop_strings: tuple[str, ...] = ()  # generation ends when the reply text contains one of these

    # --- speculation ---
    speculate: bool = True  # False: the verifier decodes alone, through the same event stream
    gamma: int = defaults.GAMMA  # tokens drafted per round (the starting value when adaptive)
    adaptive: bool = False  # grow gamma by 2 after a fully accepted round, shrink by 1 after a rejection
    gamma_max: int = defaults.GAMMA_CEILING  # ceiling for adaptive drafting
    # Stop drafting when the draft's most likely next token has a probability below this (0 disables).
    # A hesitant draft is usually wrong, and every rejected token costs draft time for nothing.
    confidence_cutoff: float = 0.0
    # Draft trees (drafters that can grow them: a draft model or head, alone or in a hybrid): at most this
    # many candidate nodes checked per round in one verifier pass, gamma deep at most. 0 keeps one chain;
    # TREE_AUTO lets the engine choose (defaults.tree_nodes_for: trees when greedy, the chain when sampling).
    tree_nodes: int = 0
    # With trees: check only as many of the nodes as maximise expected tokens per second, from the verify
    # cost measured on this machine (cost.py); possibly none. False checks every node drafted.
    cost_aware: bool = True
    top_alternatives: int = 3  # verifier's top tokens reported with each token, for hover tooltips

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> GenerationConfig:
        # Types first: a NaN temperature compares false with everything, so the range checks below would
        # let it through, and NaN probabilities then accept every draft (the output would no longer be
        # the verifier's distribution). A bool is an int to Python but never a valid number here.
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _FLOATS:
                if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                    raise ConfigError(f"{_LABELS.get(f.name, f.name)} must be a finite number (got {value!r})")
            elif f.name in _INTS:
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise ConfigError(f"{_LABELS.get(f.name, f.name)} must be a whole number (got {value!r})")
        if not (0 <= self.seed < 2**63):
            raise ConfigError(f"seed must be in [0, 2^63) (got {self.seed})")
        if self.gamma > _GAMMA_LIMIT or self.gamma_max > _GAMMA_LIMIT:
            raise ConfigError(f"gamma must be at most {_GAMMA_LIMIT} (got {max(self.gamma, self.gamma_max)})")
        if self.gamma < 1:
            raise ConfigError(f"gamma must be at least 1 (got {self.gamma})")
        if self.gamma_max < self.gamma:
            raise ConfigError(f"gamma_max ({self.gamma_max}) must be at least gamma ({self.gamma})")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (got {self.temperature})")
        if not REPETITION_PENALTY_MIN <= self.repetition_penalty <= 1 / REPETITION_PENALTY_MIN:
            raise ConfigError(f"repetition penalty must be from {REPETITION_PENALTY_MIN:g} to "
                              f"{1 / REPETITION_PENALTY_MIN:g} (got {self.repetition_penalty:g})")
        if not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"top-p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            raise ConfigError(f"top-k must be >= 0 (got {self.top_k})")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max new tokens must be at least 1 (got {self.max_new_tokens})")
        if not (TREE_AUTO <= self.tree_nodes <= _TREE_LIMIT):
            raise ConfigError(f"tree nodes must be auto or from 0 to {_TREE_LIMIT} (got {self.tree_nodes})")
        if not (0.0 <= self.confidence_cutoff < 1.0):
            raise ConfigError(f"confidence cutoff must be in [0, 1) (got {self.confidence_cutoff})")
        return self

    @classmethod
    def chosen(cls, *, temperature: float, top_k: int, top_p: float, seed: int, max_new_tokens: int, speculate: bool,
               gamma: int, adaptive: bool, confidence_cutoff: float, tree_nodes: int = TREE_AUTO,
               repetition_penalty: float = 1.0, stop_strings: tuple[str, ...] = ()) -> GenerationConfig:
        """The config of what a user chose (the command line's flags, the app's settings), validated (raises
        ConfigError with the reason). Adaptive drafting's ceiling follows the chosen γ (defaults.gamma_max)."""
        return cls(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, max_new_tokens=max_new_tokens,
                   speculate=speculate, gamma=gamma, adaptive=adaptive, gamma_max=defaults.gamma_max(gamma),
                   confidence_cutoff=confidence_cutoff, tree_nodes=tree_nodes, repetition_penalty=repetition_penalty,
                   stop_strings=stop_strings).validate()

    def with_(self, **changes: object) -> GenerationConfig:
        return replace(self, **changes).validate()  # type: ignore[arg-type]


_FLOATS = ("temperature", "top_p", "confidence_cutoff", "repetition_penalty")
_INTS = ("top_k", "seed", "max_new_tokens", "gamma", "gamma_max", "top_alternatives", "tree_nodes")  # where present
_LABELS = {"top_p": "top-p", "top_k": "top-k", "max_new_tokens": "max new tokens",
           "confidence_cutoff": "confidence cutoff",
           "repetition_penalty": "repetition penalty", "gamma_max": "gamma_max", "top_alternatives": "top alternatives"}
# A penalty divides (or multiplies) a logit: beyond a factor of 100 either way logits overflow half precision
# (1e-300 made them infinite, and the error blamed the dtype) and no reply reads any better.
REPETITION_PENALTY_MIN = 0.01
_GAMMA_LIMIT = 128  # more drafts per round than any draft gets accepted; larger values only waste memory
_TREE_LIMIT = 512  # one verifier pass over this many candidates is already slower than any gain

__all__ = ["TREE_AUTO", "GenerationConfig"]
