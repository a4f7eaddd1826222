"""Self-distillation data: the verifier's own replies (generate) and its next-token distributions (label).

Both steps write one file per shard of prompts under the work folder and skip shards already written,
so an interrupted run resumes where it stopped. A shard file is written to a temporary name and renamed,
so a file that exists is complete.

Layout:
    <work>/replies/<mode>-<shard>.pt   {"prompt_ids": [[int]], "reply_ids": [[int]]}
    <work>/labels/<mode>-<shard>.pt    {"top_ids": [int32 [n, k]], "top_logp": [fp16 [n, k]]}, one entry
                                       per non-empty reply, one row per reply token (the verifier's
                                       distribution before sampling it)
    <work>/features/<mode>-<shard>.pt  {"states": [fp16 [m, d]]}, one entry per sequence of the replies
                                       file: the verifier's final hidden state at each position of prompt
                                       + reply (the last position may be missing: generation never feeds
                                       the last token back in); what a draft head learns from (head.py)

Generation records the labels and the hidden states as it goes (TopKRecorder, StateRecorder);
`label_replies` and head.compute_features compute them with a separate forward pass for replies that
came from elsewhere.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from distill.prompts import Messages
from specdec_core.text.chat import build_prompt

MODES = {"greedy": 0.0, "t07": 0.7, "t07b": 0.7, "t10": 1.0}  # reply mode -> sampling temperature


@dataclass(frozen=True)
class PromptReply:
    """One training example: a prompt's token ids and the verifier's reply to it."""

    prompt_ids: list[int]
    reply_ids: list[int]


def save_atomic(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    torch.save(obj, partial)
    partial.replace(path)


def shards(prompts: list[Messages], shard_size: int) -> Iterator[tuple[int, list[Messages]]]:
    for index, start in enumerate(range(0, len(prompts), shard_size)):
        yield index, prompts[start:start + shard_size]


class TopKRecorder:
    """A logits processor that notes the verifier's top-k log-probabilities at every generation step
    (the labels, for free: no second forward pass), then applies the sampling temperature itself so
    that it sees the raw logits whatever the mode."""

    def __init__(self, top_k: int, temperature: float):
        self.top_k = top_k
        self.temperature = temperature
        self.steps: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        values, indices = torch.topk(torch.log_softmax(scores.float(), -1), self.top_k, dim=-1)
        self.steps.append((indices.to(torch.int32).cpu(), values.to(torch.float16).cpu()))
        return scores / self.temperature if self.temperature else scores

    def rows(self, row: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[n, k] ids and log-probs of batch row `row` for its first n generated tokens."""
        return (torch.stack([ids[row] for ids, _ in self.steps[:n]]),
                torch.stack([logp[row] for _, logp in self.steps[:n]]))


class StateRecorder:
    """A forward hook on the verifier's decoder that keeps its final hidden states during generate():
    the prompt's (prefill) and then one per decoding step."""

    def __init__(self, decoder: torch.nn.Module):
        self.steps: list[torch.Tensor] = []
        self.handle = decoder.register_forward_hook(self)

    def __call__(self, module, args, output) -> None:
        hidden = output[0] if isinstance(output, tuple) else output.last_hidden_state
        self.steps.append(hidden.to(torch.float16).cpu())

    def row(self, row: int, prompt_length: int, n_reply: int) -> torch.Tensor:
        """[prompt_length + n_reply - 1, d]: every position but the last reply token's (never fed back)."""
        prefill = self.steps[0][row, self.steps[0].shape[1] - prompt_length:]
        fed = [step[row] for step in self.steps[1:n_reply]]
        return torch.cat([prefill, *fed]) if fed else prefill


@torch.inference_mode()
def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id rows as one batch padded on the left (generation continues every row at the right edge),
    and its attention mask."""
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return input_ids, mask


def cut_after_eos(reply: list[int], eos_ids) -> list[int]:
    """A generated row up to and including its first end-of-sequence token (the rest is padding)."""
    cut = next((j + 1 for j, t in enumerate(reply) if t in eos_ids), len(reply))
    return reply[:cut]


def encode_messages(tokenizer, messages: Messages, context_length: int, max_new_tokens: int) -> list[int]:
    """A prompt's token ids as the engine builds them: a leading system message is the system prompt (build_prompt
    drops system turns it is not given as `system`, so passing the list alone would lose it)."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    return build_prompt(tokenizer, messages, system=system, context_length=context_length,
                        reserve_new_tokens=max_new_tokens).ids


def generate_replies(verifier, prompts: list[Messages], work: Path, *, modes: list[str], shard_size: int = 256,
                     batch_size: int = 32, max_new_tokens: int = 256, seed: int = 0,
                     max_minutes: float = 0.0, top_k: int = 16, set_name: str = "") -> None:
    """The verifier's replies to `prompts`, once per mode, batched (left padding), one file per shard.

    Shards go in prompt order with the modes interleaved, so a run stopped early (or by `max_minutes`,
    checked between shards) leaves a mix of modes over the first prompts. A `set_name` (another prompt
    set) goes into the shard names, "<mode>-<set_name>-<index>", and into the seeds."""
    model, tokenizer = verifier.model, verifier.tokenizer
    eos = sorted(verifier.eos_token_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    def stem(mode: str, index: int) -> str:
        return f"{mode}-{set_name}-{index:05d}" if set_name else f"{mode}-{index:05d}"

    jobs = [(mode, index, chunk) for index, chunk in shards(prompts, shard_size) for mode in modes
            if not (work / "replies" / f"{stem(mode, index)}.pt").exists()]
    started = time.monotonic()
    bar = tqdm(total=sum(len(chunk) for _, _, chunk in jobs), desc="generate replies", unit="reply")
    for mode, index, chunk in jobs:
        if max_minutes and time.monotonic() - started > max_minutes * 60:
            tqdm.write(f"generate: stopping after {max_minutes} minutes; run again to continue")
            break
        temperature = MODES[mode]
        torch.manual_seed(seed * 100_003 + index * 17 + list(MODES).index(mode) + zlib.crc32(set_name.encode()))
        encoded = [encode_messages(tokenizer, m, verifier.context_length, max_new_tokens) for m in chunk]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # similar lengths share a batch
        replies: list[list[int]] = [[] for _ in encoded]
        labels: list[tuple[torch.Tensor, torch.Tensor] | None] = [None for _ in encoded]
        states: list[torch.Tensor] = [torch.empty(0) for _ in encoded]
        tokens = 0
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            input_ids, mask = left_padded([encoded[i] for i in batch], pad)
            width = input_ids.shape[1]
            # Temperature 1 for transformers: the recorder, which must see raw logits, applies the real one.
            recorder = TopKRecorder(top_k, temperature)
            state_recorder = StateRecorder(model.base_model)
            sampling = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if temperature else \
                dict(do_sample=False, temperature=None, top_k=None, top_p=None)
            out = model.generate(input_ids=input_ids.to(verifier.device), attention_mask=mask.to(verifier.device),
                                 max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad,
                                 repetition_penalty=None, logits_processor=[recorder], **sampling)
            state_recorder.handle.remove()
            for row, i in enumerate(batch):
                replies[i] = cut_after_eos(out[row, width:].tolist(), verifier.eos_token_ids)
                cut = len(replies[i])
                labels[i] = recorder.rows(row, cut) if cut else None
                states[i] = state_recorder.row(row, len(encoded[i]), cut)
                tokens += cut
            bar.update(len(batch))
            bar.set_postfix(mode=mode, shard=index, tokens=tokens)
        # Labels first: a replies file that exists always has its labels (one entry per non-empty reply,
        # the order load_sequences uses).
        save_atomic({"states": [s for s, r in zip(states, replies) if r]},
                    work / "features" / f"{stem(mode, index)}.pt")
        kept = [label for label in labels if label is not None]
        save_atomic({"top_ids": [ids for ids, _ in kept], "top_logp": [logp for _, logp in kept]},
                    work / "labels" / f"{stem(mode, index)}.pt")
        save_atomic({"prompt_ids": encoded, "reply_ids": replies, "mode": mode}, work / "replies" /
                    f"{stem(mode, index)}.pt")
    bar.close()


def reply_files(work: Path) -> list[Path]:
    return sorted((work / "replies").glob("*.pt"))


def load_sequences(path: Path) -> list[PromptReply]:
    data = torch.load(path)
    return [PromptReply(p, r) for p, r in zip(data["prompt_ids"], data["reply_ids"]) if r]


def padded_batches(sequences: list[PromptReply], batch_tokens: int) -> Iterator[tuple[list[int], torch.Tensor]]:
    """(indices, input ids [B, T]) for every prompt + reply, longest first, about `batch_tokens` tokens
    a batch, right-padded (causal attention never reads the padding)."""
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i].prompt_ids + sequences[i].reply_ids))
    start = 0
    while start < len(order):
        width = len(sequences[order[start]].prompt_ids) + len(sequences[order[start]].reply_ids)
        batch = order[start:start + max(1, batch_tokens // width)]
        start += len(batch)
        input_ids = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            ids = sequences[i].prompt_ids + sequences[i].reply_ids
            input_ids[row, :len(ids)] = torch.tensor(ids)
        yield batch, input_ids


def top_k_rows(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, k] int32 ids and fp16 log-probabilities of the k likeliest tokens at each of n positions."""
    values, indices = torch.topk(torch.log_softmax(logits.float(), -1), top_k, dim=-1)
    return indices.to(torch.int32).cpu(), values.to(torch.float16).cpu()


@torch.inference_mode()
def label_replies(verifier, work: Path, *, top_k: int = 16, batch_tokens: int = 8192) -> None:
    """The verifier's top-k log-probabilities at every reply position (the targets the draft learns)."""
    files = [f for f in reply_files(work) if not (work / "labels" / f.name).exists()]
    model = verifier.model
    bar = tqdm(total=len(files), desc="label replies", unit="shard")
    for path in files:
        sequences = load_sequences(path)
        top_ids: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        top_logp: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        for batch, input_ids in padded_batches(sequences, batch_tokens):
            logits = model(input_ids=input_ids.to(verifier.device)).logits
            for row, i in enumerate(batch):
                first, n = len(sequences[i].prompt_ids) - 1, len(sequences[i].reply_ids)
                top_ids[i], top_logp[i] = top_k_rows(logits[row, first:first + n], top_k)
        save_atomic({"top_ids": top_ids, "top_logp": top_logp}, work / "labels" / path.name)
        bar.update(1)
    bar.close()
