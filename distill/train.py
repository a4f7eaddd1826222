"""Train a SpecdecDraftForCausalLM to match the verifier's next-token distributions on its own replies.

The loss at each reply position is the cross-entropy from the verifier's top-k distribution (restricted
to the draft's output subset and renormalised) to the draft's distribution over that subset: it teaches
the argmax (what greedy acceptance needs) and the spread around it (what sampled acceptance needs).

Initialisation reuses the verifier: the draft's token table is the verifier's embedding projected onto
its top principal directions, ordered by how often the verifier emits each token, so that the draft
starts out reading and scoring tokens much like the verifier does. Layers start random.

Checkpoints (model, optimiser, step, random states) are written every few minutes and at the end;
running the same command again resumes from the last one.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from distill.data import load_sequences, reply_files, save_atomic
from specdec_core.loading.draft_model import SpecdecDraftConfig, SpecdecDraftForCausalLM


@dataclass(frozen=True)
class DraftShape:
    layers: int = 2
    hidden: int = 384
    heads: int = 6
    kv_heads: int = 2
    intermediate: int = 1024
    embedding_rank: int = 128  # width of the shared token table (input and output)
    head_size: int = 8192  # the most frequent tokens the draft can propose
    # Start the layers as copies of these verifier layers ("0,1"; needs the verifier's hidden, heads and
    # intermediate sizes): the draft then begins as an early exit from the verifier and only has to
    # learn the correction, which pays when data is scarce. Empty: layers start random.
    copy_layers: str = ""

    @classmethod
    def parse(cls, text: str) -> DraftShape:
        """"layers=3,hidden=384" -> DraftShape with those fields changed."""
        values = dict(item.split("=") for item in text.split(";" if ";" in text else ",") if item)
        return cls(**{key: value if key == "copy_layers" else int(value) for key, value in values.items()})

    @classmethod
    def like_verifier(cls, config, layers: str, **changes: int) -> DraftShape:
        """The verifier's layer shape, starting from copies of its `layers` ("0,1")."""
        return cls(layers=len(layers.split(",")), hidden=config.hidden_size, heads=config.num_attention_heads,
                   kv_heads=config.num_key_value_heads, intermediate=config.intermediate_size,
                   copy_layers=layers, **changes)


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 2000
    max_minutes: float = 60.0  # stop (and checkpoint) after this much wall time in this run
    batch_tokens: int = 8192  # reply positions per step (sequences are packed up to this many tokens)
    max_length: int = 768  # longer sequences are cut (the prompt is kept, the reply tail dropped)
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    checkpoint_minutes: float = 5.0
    validate_every: int = 100  # steps; the exported model is the one with the best validation agreement
    validation_fraction: float = 0.03


# --------------------------------------------------------------------------- data in memory


@dataclass
class Example:
    ids: torch.Tensor  # [n] prompt + reply
    first: int  # position predicting the first reply token (= len(prompt) - 1)
    top_ids: torch.Tensor  # [m, k] teacher's top-k ids at positions first .. first + m - 1
    top_logp: torch.Tensor  # [m, k]


def load_examples(work: Path, max_length: int) -> list[Example]:
    examples = []
    for path in tqdm(reply_files(work), desc="load data", unit="shard"):
        label_path = work / "labels" / path.name
        if not label_path.exists():
            continue
        labels = torch.load(label_path)
        for sequence, ids, logp in zip(load_sequences(path), labels["top_ids"], labels["top_logp"]):
            full = sequence.prompt_ids + sequence.reply_ids
            if len(sequence.prompt_ids) >= max_length:
                continue
            full = full[:max_length]
            first = len(sequence.prompt_ids) - 1
            m = len(full) - 1 - first
            examples.append(Example(torch.tensor(full), first, ids[:m].long(), logp[:m].float()))
    return examples


def token_counts(examples: list[Example], vocab_size: int) -> torch.Tensor:
    """How much probability the verifier put on each token over all reply positions (top-k mass)."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for example in examples:
        counts.index_add_(0, example.top_ids.reshape(-1), example.top_logp.exp().reshape(-1).double())
    return counts


def ranking_from_counts(counts: torch.Tensor, always: list[int]) -> torch.Tensor:
    """All token ids, most probable first; `always` (EOS and the like) are put at the top."""
    score = counts.clone()
    score[always] = float("inf")
    # Stable order for ties (id order) so the ranking is reproducible.
    return torch.argsort(-score, stable=True)


def batches(examples: list, batch_tokens: int, rng: random.Random, size=lambda example: len(example.top_ids)):
    """Endless random batches of whole sequences, about `batch_tokens` positions that count each
    (`size(example)` of them per example)."""
    order: list[int] = []
    while True:
        if not order:
            order = list(range(len(examples)))
            rng.shuffle(order)
        batch, positions = [], 0
        while order and positions < batch_tokens:
            example = examples[order.pop()]
            batch.append(example)
            positions += size(example)
        yield batch


def collate(batch: list[Example], rank_of: torch.Tensor, device: torch.device):
    """Padded ids [B, T], the flat indices of reply positions in [B*T], targets over the subset."""
    width = max(len(e.ids) for e in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    flat, top_ids, top_logp = [], [], []
    for row, example in enumerate(batch):
        ids[row, :len(example.ids)] = example.ids
        m = len(example.top_ids)
        flat.append(row * width + example.first + torch.arange(m))
        top_ids.append(example.top_ids)
        top_logp.append(example.top_logp)
    top_ranks = rank_of[torch.cat(top_ids)]
    return (ids.to(device), torch.cat(flat).to(device), top_ranks.to(device), torch.cat(top_logp).to(device))


def distill_loss(model: SpecdecDraftForCausalLM, ids, flat, top_ranks, top_logp):
    """Mean cross-entropy from the verifier's subset-restricted top-k distribution to the draft's,
    and the draft's top-1 agreement with the verifier's argmax (positions where it is in the subset)."""
    head = model.lm_head
    hidden = model.model(input_ids=ids).last_hidden_state  # [B, T, d]
    hidden = hidden.reshape(-1, hidden.shape[-1])[flat]  # [N, d] reply positions only
    logq = torch.log_softmax(head.subset_logits(hidden).float(), -1)  # [N, K]
    inside = top_ranks < head.head_size  # [N, k]
    target = top_logp.exp() * inside
    mass = target.sum(-1, keepdim=True)
    target = target / mass.clamp_min(1e-9)
    picked = logq.gather(1, top_ranks.clamp_max(head.head_size - 1))
    loss = -(target * picked).sum(-1).mean()
    # top_ids are sorted by probability, so column 0 is the verifier's argmax.
    agree = (logq.argmax(-1) == top_ranks[:, 0]).float().mean()
    return loss, agree


# --------------------------------------------------------------------------- the model


def build_draft(shape: DraftShape, verifier_model, ranking: torch.Tensor, counts: torch.Tensor,
                seed: int) -> SpecdecDraftForCausalLM:
    """A draft with the verifier's token facts (vocabulary, special ids, RoPE) and a PCA-initialised table."""
    vconfig = verifier_model.config
    torch.manual_seed(seed)
    config = SpecdecDraftConfig(
        vocab_size=vconfig.vocab_size, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.hidden // shape.heads, max_position_embeddings=vconfig.max_position_embeddings,
        rope_parameters=getattr(vconfig, "rope_parameters", None), rms_norm_eps=vconfig.rms_norm_eps,
        bos_token_id=vconfig.bos_token_id, eos_token_id=vconfig.eos_token_id, pad_token_id=vconfig.pad_token_id,
        embedding_rank=shape.embedding_rank, head_size=shape.head_size)
    draft = SpecdecDraftForCausalLM(config)
    draft.set_token_ranking(ranking)
    with torch.no_grad():
        embedding = verifier_model.get_input_embeddings().weight.detach().float().cpu()  # [V, D]
        # Principal directions of the verifier's embedding: table = E V_r, up = Q V_r^T ... so that
        # up(table[token]) is (a rotation of) the token's verifier embedding, projected to rank r.
        _, _, vh = torch.linalg.svd(embedding, full_matrices=False)
        basis = vh[:shape.embedding_rank].T  # [D, r]
        table = embedding[ranking] @ basis  # [V, r] in rank order
        width = embedding.shape[1]
        if shape.copy_layers:
            # An early exit from the verifier: its embedding and tied head (at rank r), its layers, its norm.
            up = basis
            for index, source in enumerate(int(i) for i in shape.copy_layers.split(",")):
                draft.model.layers[index].load_state_dict(verifier_model.model.layers[source].state_dict())
            draft.model.norm.load_state_dict(verifier_model.model.norm.state_dict())
        else:
            table = table / table.std() * 0.08  # logits start with a standard deviation near 1
            rotation = torch.linalg.qr(torch.randn(max(width, shape.hidden), max(width, shape.hidden)))[0]
            up = rotation[:shape.hidden, :width] @ basis  # [d, r]
            # The unigram prior of the verifier's outputs as the head's bias.
            prior = counts[ranking[:shape.head_size]].float() + 1.0
            draft.lm_head.bias.copy_(torch.log(prior / prior.sum()))
        draft.model.embed_tokens.weight.copy_(table)
        draft.model.embed_tokens.up.weight.copy_(up)
        draft.lm_head.down.weight.copy_(up.T)
    return draft


# --------------------------------------------------------------------------- the loop


def train(verifier_model, work: Path, out: Path, shape: DraftShape, settings: TrainSettings,
          device: torch.device, special_ids: list[int]) -> dict:
    """Train (or resume training) the draft in `out`; returns the last validation figures."""
    out.mkdir(parents=True, exist_ok=True)
    checkpoint_path = out / "checkpoint.pt"
    rng = random.Random(settings.seed)
    examples = load_examples(work, settings.max_length)
    if not examples:
        raise SystemExit(f"no labelled replies under {work}: run generate and label first")
    held = set(random.Random(settings.seed + 1).sample(range(len(examples)),
                                                        max(1, int(len(examples) * settings.validation_fraction))))
    validation = [e for i, e in enumerate(examples) if i in held]
    training = [e for i, e in enumerate(examples) if i not in held]
    vocab = verifier_model.config.vocab_size
    counts = token_counts(training, vocab)
    ranking = ranking_from_counts(counts, special_ids)
    coverage = float(counts[ranking[:shape.head_size]].sum() / counts.sum())

    draft = build_draft(shape, verifier_model, ranking, counts, settings.seed).to(device)
    optimiser = torch.optim.AdamW(draft.parameters(), lr=settings.lr, weight_decay=settings.weight_decay,
                                  betas=(0.9, 0.95))
    step, history = 0, []
    if checkpoint_path.exists():
        state = torch.load(checkpoint_path, weights_only=False)
        draft.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        step, history = state["step"], state["history"]
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
    rank_of = draft.model.embed_tokens.rank_of.cpu()

    def schedule(s: int) -> float:
        if s < settings.warmup:
            return (s + 1) / settings.warmup
        # Cosine decay over whichever runs out first: the steps, or this run's minutes.
        progress = min(1.0, max((s - settings.warmup) / max(1, settings.steps - settings.warmup),
                                (time.monotonic() - started) / (settings.max_minutes * 60)))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else \
        torch.autocast("cpu", enabled=False)

    def validate() -> dict:
        draft.eval()
        total_loss = total_agree = total_n = 0.0
        with torch.no_grad(), autocast:
            for start in range(0, len(validation), 16):
                batch = validation[start:start + 16]
                tensors = collate(batch, rank_of, device)
                loss, agree = distill_loss(draft, *tensors)
                n = len(tensors[1])
                total_loss += float(loss) * n
                total_agree += float(agree) * n
                total_n += n
        draft.train()
        return {"step": step, "val_loss": total_loss / total_n, "val_agreement": total_agree / total_n}

    def save_checkpoint() -> None:
        save_atomic({"model": draft.state_dict(), "optimiser": optimiser.state_dict(), "step": step,
                     "history": history, "rng": rng.getstate(), "torch_rng": torch.get_rng_state(),
                     "shape": asdict(shape), "settings": asdict(settings)}, checkpoint_path)

    best = max((h.get("val_agreement", -1.0) for h in history), default=-1.0)

    def keep_if_best(figures: dict) -> None:
        nonlocal best
        if figures["val_agreement"] > best:  # early stopping: small data sets are memorised quickly
            best = figures["val_agreement"]
            draft.save_pretrained(out / "model")

    started = last_checkpoint = time.monotonic()
    stream = batches(training, settings.batch_tokens, rng)
    draft.train()
    bar = tqdm(total=settings.steps, initial=step, desc=f"train {shape.layers}x{shape.hidden}", unit="step")
    running = None
    while step < settings.steps:
        if time.monotonic() - started > settings.max_minutes * 60:
            break
        for group in optimiser.param_groups:
            group["lr"] = settings.lr * schedule(step)
        with autocast:
            loss, agree = distill_loss(draft, *collate(next(stream), rank_of, device))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        optimiser.step()
        step += 1
        loss_value, agree_value = float(loss.detach()), float(agree)
        running = (loss_value, agree_value) if running is None else \
            (0.98 * running[0] + 0.02 * loss_value, 0.98 * running[1] + 0.02 * agree_value)
        bar.update(1)
        if step % 20 == 0:
            bar.set_postfix(loss=f"{running[0]:.3f}", agree=f"{running[1]:.3f}")
        if step % settings.validate_every == 0:
            history.append(validate())
            keep_if_best(history[-1])
            tqdm.write(json.dumps(history[-1]))
        if time.monotonic() - last_checkpoint > settings.checkpoint_minutes * 60:
            save_checkpoint()
            last_checkpoint = time.monotonic()
    bar.close()
    figures = validate()
    figures.update(train_minutes=(time.monotonic() - started) / 60, coverage=coverage,
                   train_sequences=len(training), train_positions=sum(len(e.top_ids) for e in training))
    keep_if_best(figures)
    figures["best_val_agreement"] = best  # what the saved model scores
    history.append(figures)
    save_checkpoint()
    (out / "train.json").write_text(json.dumps({"shape": asdict(shape), "settings": asdict(settings),
                                                "history": history}, indent=2))
    return figures
