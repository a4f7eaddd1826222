"""Online adaptation of a draft head to the user's own conversations (after Liu et al. 2024, "Online
Speculative Decoding").

Every finished exchange is a lesson the verifier gives for free: its reply *is* the verifier's greedy or
sampled continuation. Between replies, one batched no-grad forward of the verifier recomputes its final
hidden states over the exchanges not yet learnt, and a bounded number of optimiser steps teach a *copy*
of the draft head (draft_head.py) to predict them, the way distill/head.py trains it: at each reply
position a regression on the verifier's next hidden state plus the cross-entropy from the verifier's
distribution over the head's tokens to the head's, over the first few drafting steps (the head fed its
own predictions, SpecdecHeadModel.forward_chain). `swap_into` then copies the copy's weights into the
live head for the next reply.

Bounds: a replay buffer of at most `buffer_tokens` positions (oldest exchanges dropped first), at most
`steps` optimiser steps and `max_seconds` per adaptation, `batch_tokens` positions per step.

Boundary: Qt-free, and no part of the engine. The caller runs `adapt` between replies and `swap_into`
before the next one, never while the head drafts. The verifier's weights are only read, so what it
outputs (greedy: token for token) is unchanged; only how often it accepts the draft changes.
"""

from __future__ import annotations

import json
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from specdec_core.loading import quantised
from specdec_core.loading.draft_head import SpecdecHeadModel, chain_scores, with_layers
from specdec_core.loading.kept_files import DamagedFile, read_bytes, read_json

ADAPTED_FILE = "adapted.json"  # beside an exported head: what it learnt from


@dataclass(frozen=True)
class AdaptSettings:
    steps: int = 6  # optimiser steps per adaptation (between two replies) ...
    max_seconds: float = 6.0  # ... and at most this long (checked between steps)
    batch_tokens: int = 512  # positions per step: the newest exchange first, then older ones at random
    buffer_tokens: int = 8192  # replay buffer (positions, fp16 states: ~9 MB at the embedded width)
    # An exchange keeps its last max_length positions: the reply and what came just before it (a step's
    # cost grows with every position the head reads, though only the reply's are scored).
    max_length: int = 256
    # Score the head on every kept position, the user's message and the history too (the verifier's states
    # there are as exact as over its reply), instead of on the reply's alone.
    prompt_positions: bool = False
    # Fine-tuning a trained head: at 1e-3 (distill's peak, reached there after a warm-up) six Adam steps on
    # one reply cut the next turn's acceptance from 0.27 to 0.10 (docs/performance.md, online adaptation).
    lr: float = 1e-4
    chain_steps: int = 2  # drafting steps trained on the head's own predictions
    cls_weight: float = 1.0  # cross-entropy next to the state regression (distill's default)
    # A pull towards the original weights: anchor x the sum of squared differences, added to the loss, so that
    # a few replies cannot undo what the head learnt from many (0: none).
    anchor: float = 0.0
    # Only parameters whose names start with one of these train (empty: all), e.g. ("fc.",) or ("layer.mlp.",).
    trained: tuple[str, ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class Lesson:
    """One finished exchange, ready to learn from."""

    ids: torch.Tensor  # [n] token ids: the conversation, then the verifier's reply
    states: torch.Tensor  # [n, d] fp16: the verifier's final hidden state at each position
    first: int  # first head position whose target state lies in the reply


@dataclass(frozen=True)
class AdaptReport:
    steps: int  # optimiser steps taken this time
    seconds: float
    loss: float  # mean training loss over those steps (nan: none taken)
    tokens: int  # reply tokens learnt from since the head was last reset


def is_adaptable(head: Any) -> bool:
    """Only a draft head adapts (a draft model or prompt lookup does not)."""
    return isinstance(head, SpecdecHeadModel)


class HeadAdapter:
    """Adapts a copy of a draft head to finished exchanges; see the module docstring.

    `head` is the live head (HeadDrafter.model), `verifier` the verifier's transformers model."""

    def __init__(self, head: SpecdecHeadModel, verifier: torch.nn.Module, settings: AdaptSettings = AdaptSettings()):
        if not is_adaptable(head):
            raise TypeError("only a draft head (draft_head.py) can adapt")
        self.settings = settings
        self.verifier = verifier
        device = head.head_ids.device
        # The copy trained here, in float32 whatever the live head's dtype; the original weights, for reset.
        self.head = SpecdecHeadModel(head.config).to(device)
        self.original = {name: value.detach().float().clone() for name, value in head.state_dict().items()}
        self.rows = quantised.output_rows(verifier.get_output_embeddings(), head.head_ids).to(device, torch.float32)
        self.rng = random.Random(settings.seed)
        self.reset()

    def reset(self) -> None:
        """Back to the original head: weights, optimiser, buffer and count."""
        self.head.load_state_dict(self.original)
        self.head.train()
        prefixes = tuple(self.settings.trained)
        self.trained = {name: p for name, p in self.head.named_parameters()
                        if not prefixes or name.startswith(prefixes)}
        for name, parameter in self.head.named_parameters():
            parameter.requires_grad_(name in self.trained)
        self.optimizer = torch.optim.AdamW(self.trained.values(), lr=self.settings.lr, betas=(0.9, 0.95),
                                           weight_decay=0.0)
        self.pending: list[tuple[list[int], int]] = []
        self.buffer: deque[Lesson] = deque()
        self.tokens = 0

    def observe(self, conversation_ids: list[int], reply_ids: list[int]) -> None:
        """Note a finished exchange (cheap: the verifier runs over it in the next `adapt`)."""
        if len(reply_ids) >= 2:  # a head position needs a reply token to read and one to predict
            self.pending.append((list(conversation_ids) + list(reply_ids), len(conversation_ids)))

    def adapt(self, stop: Callable[[], bool] = lambda: False) -> AdaptReport:
        """Learn the pending exchanges (and replay older ones) within the step and time budgets, or until
        `stop()` says so (checked between steps: a reply is about to start)."""
        start = time.perf_counter()
        self._learn_pending()
        losses: list[float] = []
        while self.buffer and len(losses) < self.settings.steps and not stop() \
                and time.perf_counter() - start < self.settings.max_seconds:
            losses.append(self._step(self._batch()))
        loss = sum(losses) / len(losses) if losses else float("nan")
        return AdaptReport(len(losses), time.perf_counter() - start, loss, self.tokens)

    def _learn_pending(self) -> None:
        """The verifier's states over the pending exchanges, in one batched forward, into the buffer."""
        if not self.pending:
            return
        exchanges, self.pending = self.pending, []
        states = verifier_states(self.verifier, [ids for ids, _ in exchanges], self.head.config.feature_layers)
        for (ids, reply_start), state in zip(exchanges, states):
            cut = max(0, len(ids) - self.settings.max_length)
            first = max(reply_start - 2, cut) - cut  # head position i predicts the state scoring token i + 2
            first = 0 if self.settings.prompt_positions else first
            self.buffer.append(Lesson(torch.tensor(ids[cut:]), state[cut:].to(self.rows.device), first))
            self.tokens += len(ids) - reply_start
        while sum(len(lesson.ids) for lesson in self.buffer) > self.settings.buffer_tokens and len(self.buffer) > 1:
            self.buffer.popleft()

    def _batch(self) -> list[Lesson]:
        """The newest exchange, then older ones at random, up to batch_tokens positions."""
        newest, *older = reversed(self.buffer)
        self.rng.shuffle(older)
        batch, size = [newest], len(newest.ids)
        for lesson in older:
            if size + len(lesson.ids) > self.settings.batch_tokens:
                break
            batch.append(lesson)
            size += len(lesson.ids)
        return batch

    def _step(self, batch: list[Lesson]) -> float:
        ids, states, mask = collate(batch)
        embed = self.verifier.get_input_embeddings()
        loss = head_loss(self.head, embed, self.rows, ids, states, mask, steps=self.settings.chain_steps,
                         cls_weight=self.settings.cls_weight)
        if self.settings.anchor:
            loss = loss + self.settings.anchor * sum(((p - self.original[name].to(p.device)) ** 2).sum()
                                                     for name, p in self.trained.items())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.trained.values(), 1.0)
        self.optimizer.step()
        return float(loss.detach())

    def swap_into(self, drafter: Any) -> None:
        """Copy the adapted weights into the drafter's live head (a HeadDrafter) and drop its cache, which
        was computed with the old ones. Call between replies only."""
        copy_weights(self.head, drafter.model)
        drafter.reset_cache()

    def swap_original_into(self, drafter: Any) -> None:
        """Put the head as loaded back into the drafter's live head, keeping what this copy learnt (adaptation
        switched off: the shipped draft drafts until it is switched on again). Call between replies only."""
        copy_state(self.original, drafter.model)
        drafter.reset_cache()

    def save(self, folder: Path, tokenizer: Any = None) -> None:
        """Write the adapted head as a head folder (loads as a draft spec when it has a tokenizer)."""
        folder = Path(folder)
        self.head.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        (folder / ADAPTED_FILE).write_text(json.dumps({"tokens": self.tokens}) + "\n")

    def load(self, folder: Path) -> None:
        """Continue from a head `save` wrote (weights and count; the optimiser and buffer start empty). Raises
        DamagedFile (kept_files.py) for a folder `save` did not write, before anything is changed."""
        folder = Path(folder)
        tokens = read_json(folder / ADAPTED_FILE, _adapted_tokens)
        # No more than twice the live head's bytes: a header claiming terabytes is refused before it is read.
        limit = 2 * sum(t.numel() * t.element_size() for t in self.head.state_dict().values()) + (1 << 20)
        for name in ("config.json", "model.safetensors"):
            if read_bytes(folder / name, limit) is None:
                raise DamagedFile(f"its {name} is missing")
        try:
            saved = SpecdecHeadModel.from_pretrained(folder)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RuntimeError, RecursionError,
                SafetensorError) as error:
            raise DamagedFile(f"its weights cannot be read ({type(error).__name__}: {str(error)[:80]})") from error
        if saved.config.hidden_size != self.head.config.hidden_size or \
                not torch.equal(saved.head_ids.cpu(), self.head.head_ids.cpu()):
            raise DamagedFile(f"{folder} holds a head of another shape or token set")
        self.reset()
        copy_weights(saved, self.head)
        self.tokens = tokens or 0


def _adapted_tokens(content: object) -> int:
    """The count in adapted.json's content; ValueError or TypeError for anything `save` would not write."""
    tokens = content["tokens"]  # type: ignore[index]
    if type(tokens) is not int or not 0 <= tokens < 1 << 53:
        raise ValueError(f"its token count is {str(tokens)[:40]}")
    return tokens


@torch.no_grad()
def verifier_states(verifier: torch.nn.Module, sequences: list[list[int]], layers: list[int] | tuple[int, ...] = ()
                    ) -> list[torch.Tensor]:
    """The verifier's final hidden states [n, d] (fp16, CPU) over each sequence, followed by its `layers`'
    outputs (draft_head.with_layers): one right-padded batch (causal attention never reads the padding)."""
    width = max(len(ids) for ids in sequences)
    input_ids = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, ids in enumerate(sequences):
        input_ids[row, :len(ids)] = torch.tensor(ids)
    device = quantised.device_of(verifier.get_input_embeddings())
    # The decoder's forward, not its __call__: the engine's hook on the decoder (kv.CachedForward keeps the
    # hidden states of the reply it runs) must not see this pass.
    output = verifier.base_model.forward(input_ids=input_ids.to(device), output_hidden_states=bool(layers))
    hidden = with_layers(output, layers)
    hidden = hidden.clamp(-6e4, 6e4)  # inner layers' largest activations, kept inside float16's range
    return [hidden[row, :len(ids)].to("cpu", torch.float16) for row, ids in enumerate(sequences)]


def collate(batch: list[Lesson]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids [B, T], states [B, T, d] (float32), mask [B, T - 1] of the head positions that count."""
    width = max(len(lesson.ids) for lesson in batch)
    device = batch[0].states.device
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    states = torch.zeros((len(batch), width, batch[0].states.shape[-1]), device=device)
    mask = torch.zeros((len(batch), width - 1), dtype=torch.bool)
    for row, lesson in enumerate(batch):
        n = len(lesson.ids)
        ids[row, :n] = lesson.ids
        states[row, :n] = lesson.states.float()
        mask[row, lesson.first:n - 1] = True
    return ids, states, mask.to(device)


def head_loss(head: SpecdecHeadModel, embed: torch.nn.Module, rows: torch.Tensor, ids: torch.Tensor,
              states: torch.Tensor, mask: torch.Tensor, *, steps: int, cls_weight: float) -> torch.Tensor:
    """Mean over `steps` drafting steps of smooth L1 to the verifier's next state plus the cross-entropy
    from the verifier's distribution over the head's tokens (`rows` [K, d], its output rows) to the head's.
    ids [B, T], states [B, T, d], mask [B, T - 1]: head position i reads (state i, token i + 1) and
    predicts state i + 1; step s scores position i only from i >= s (it needs s earlier predictions)."""
    inputs, target = states[:, :-1], states[:, 1:, :head.config.hidden_size]
    with torch.no_grad():
        token_embeds = embed(ids[:, 1:].to(quantised.device_of(embed))).to(states)
        # The verifier's own distribution restricted to the head's tokens: softmax over their logits.
        target_p = torch.softmax(target[mask] @ rows.T, -1)  # [N, K]
    scored = chain_scores(head, inputs, token_embeds, target, mask, rows, steps)
    total = states.new_zeros(())
    for step in scored:
        cross_entropy = -(target_p[step.keep] * step.logp).sum(-1).mean()
        total = total + step.regression + cls_weight * cross_entropy
    return total / len(scored)


@torch.no_grad()
def copy_weights(source: SpecdecHeadModel, target: SpecdecHeadModel) -> None:
    """Copy `source`'s weights into `target` in place (each tensor keeps its dtype and device).

    In place on purpose: a CPU-tuned head (cpu_speed.py) keeps packed copies of its weights, keyed by each
    weight's storage and version counter; `copy_` bumps the counter, so the next draft packs them again."""
    copy_state(source.state_dict(), target)


@torch.no_grad()
def copy_state(weights: dict[str, torch.Tensor], target: SpecdecHeadModel) -> None:
    """copy_weights from a state dict."""
    for name, value in target.state_dict().items():
        if name != "head_ids":
            value.copy_(weights[name])
