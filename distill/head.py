"""Train a draft head (draft_head.py, after EAGLE) on the verifier's hidden states over its own replies.

Two steps:

- `compute_features`: one batched forward of the verifier over every (prompt + reply) sequence, keeping
  its final hidden state at every position (fp16) -> <work>/features/<shard>.pt. Resumable per shard.
- `train_head`: teacher forcing over those sequences. At position i the head reads the true state f_i
  and the token x_{i+1}, and predicts f_{i+1}. The loss (Li et al. 2024) is a regression on the state,
  smooth L1(f'_{i+1}, f_{i+1}), plus the cross-entropy from the verifier's distribution at i+1 to the
  head's, both computed with the verifier's own output rows over the head's token subset. Input states
  get a little uniform noise, because when drafting the head reads its own (imperfect) predictions.
  Only positions whose target lies in the reply count. Checkpoints every few minutes; running the same
  command again resumes.

The token subset is the `head_size` token ids the verifier put most probability on over its replies
(the labels the generate step recorded), plus every end-of-sequence id.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from distill.data import load_sequences, padded_batches, reply_files, save_atomic, top_k_rows
from distill.train import batches as endless_batches
from distill.train import ranking_from_counts
from specdec_core.loading import cpu_speed
from specdec_core.loading.draft_head import (
    SpecdecHeadConfig,
    SpecdecHeadModel,
    chain_scores,
    embedding_fingerprint,
    with_layers,
)


@dataclass(frozen=True)
class HeadSettings:
    head_size: int = 8192
    intermediate: int = 1536
    heads: int = 9
    kv_heads: int = 3
    steps: int = 3000
    max_minutes: float = 60.0
    batch_tokens: int = 4096  # target positions per step
    max_length: int = 640  # longer sequences keep their last max_length tokens
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.0
    cls_weight: float = 1.0  # weight of the cross-entropy next to the state regression (EAGLE: 0.1)
    noise: float = 0.2  # input states get uniform noise of this width, in units of their std
    chain_steps: int = 3  # drafting steps trained on the head's own predictions (forward_chain)
    # Weight of drafting step s's losses, depth_decay ** (s - 1), normalised (EAGLE-3 weighs later steps
    # less); 1.0: all steps alike, as every head so far was trained.
    depth_decay: float = 1.0
    seed: int = 0
    checkpoint_minutes: float = 4.0
    validate_every: int = 100
    validation_fraction: float = 0.03
    init_from: str = ""  # a trained head's folder to start from (its weights; ids, optimizer and steps start anew)
    # Comma-separated replies shards (stems) to validate on instead of a random share of sequences. A run
    # that starts from an earlier head needs shards that head never trained on, or its figures flatter it.
    validation_shards: str = ""
    # The head's token ids: "data", the ids this run's data puts most probability on; "merge" (with
    # init_from), the earlier head's ids, its last-ranked ones replaced by the tokens that are the verifier's
    # top-1 somewhere in this data and that it lacks (merged_head_ids); "keep" (with init_from), the earlier
    # head's ids unchanged (runs that compare data sets then compare heads over the same ids).
    head_ids: str = "data"
    # bfloat16 autocast on the CPU, by default only where the CPU has bfloat16 instructions: emulated (AVX2, plain
    # AVX-512) it made the head pipeline test 3x slower than fp32 (docs/performance.md, "Measurements behind
    # comments in the code").
    bf16: bool = field(default_factory=lambda: cpu_speed.native_bfloat16())
    # Comma-separated decoder layers (0-based) whose outputs the head reads beside the final state (fusion
    # after EAGLE-3; their features from `features --layers`); "": the final state only.
    feature_layers: str = ""


# --------------------------------------------------------------------------- features


def features_dir(work: Path, layers: list[int] | tuple[int, ...] = ()) -> Path:
    """Where the states for a head with these feature layers live: `features` for the final state alone,
    `features-l2-15` for the final state with layers 2 and 15 beside it (draft_head.with_layers)."""
    return work / ("features" + ("-l" + "-".join(str(layer) for layer in layers) if layers else ""))


@torch.inference_mode()
def compute_features(verifier, work: Path, *, batch_tokens: int = 4096, top_k: int = 0,
                     layers: list[int] | tuple[int, ...] = ()) -> None:
    """The verifier's final hidden states over every sequence of every replies shard (see module doc). With
    top_k, the same pass also writes the labels a shard lacks (data.label_replies' top-k log-probabilities at
    each reply position), scored by the output rows from those states: one forward pass instead of two, and
    the vocabulary scored at the reply positions only. With `layers`, each position's row holds those decoder
    layers' outputs after the final state (features_dir names the folder)."""
    def wanted(path: Path) -> tuple[Path | None, Path | None]:
        """Where this shard's features and labels go, each None when it is written already (or not asked)."""
        features, labels = features_dir(work, layers) / path.name, work / "labels" / path.name
        return (None if features.exists() else features), (labels if top_k and not labels.exists() else None)

    files = [(path, *wanted(path)) for path in reply_files(work)]
    files = [(path, features, labels) for path, features, labels in files if features or labels]
    base, output_layer = verifier.model.base_model, verifier.model.get_output_embeddings()
    bar = tqdm(total=len(files), desc="features" + " and labels" * bool(top_k), unit="shard")
    for path, features_path, labels_path in files:
        sequences = load_sequences(path)
        states: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        top_ids: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        top_logp: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        for batch, input_ids in padded_batches(sequences, batch_tokens):
            output = base(input_ids=input_ids.to(verifier.device), output_hidden_states=bool(layers))
            hidden = with_layers(output, layers)
            for row, i in enumerate(batch):
                n = len(sequences[i].prompt_ids) + len(sequences[i].reply_ids)
                # Inner layers' "massive activations" reach 2.5e4 here; float16 ends at 6.5e4.
                states[i] = hidden[row, :n].clamp(-6e4, 6e4).to(torch.float16).cpu()
                hidden_final = hidden[row, :, :output.last_hidden_state.shape[-1]]
                if labels_path:
                    first, replies = len(sequences[i].prompt_ids) - 1, len(sequences[i].reply_ids)
                    top_ids[i], top_logp[i] = top_k_rows(output_layer(hidden_final[first:first + replies]), top_k)
        if features_path:
            save_atomic({"states": states}, features_path)
        if labels_path:
            save_atomic({"top_ids": top_ids, "top_logp": top_logp}, labels_path)
        bar.update(1)
    bar.close()


@dataclass
class Example:
    ids: torch.Tensor  # [n] prompt + reply
    states: torch.Tensor  # [<= n, d (x layers)] fp16: the verifier's final hidden state (and layers') at each position
    first: int  # first head position whose target state lies in the reply (= len(prompt) - 2)
    end: int  # one past the last head position that counts
    top_ids: torch.Tensor  # [end - first, k] the verifier's top-k token ids scored by each target state
    top_p: torch.Tensor  # [end - first, k] their probabilities
    shard: str = ""  # the replies file it came from (its stem)


def load_examples(work: Path, max_length: int, eos_ids: set[int], shards: set[str] | None = None,
                  layers: list[int] | tuple[int, ...] = ()) -> list[Example]:
    """Every sequence that has states (with these feature `layers`) and labels (of the named shards only, if
    given), cut to its last `max_length` positions."""
    examples = []
    files = [p for p in reply_files(work) if shards is None or p.stem in shards]
    for path in tqdm(files, desc="load features", unit="shard"):
        feature_path, label_path = features_dir(work, layers) / path.name, work / "labels" / path.name
        if not feature_path.exists() or not label_path.exists():
            continue
        states = torch.load(feature_path)["states"]
        labels = torch.load(label_path)
        for sequence, state, top_ids, top_logp in zip(load_sequences(path), states, labels["top_ids"],
                                                      labels["top_logp"]):
            ids = sequence.prompt_ids + sequence.reply_ids
            # Head position i predicts state i + 1, which scores token i + 2: reply token j (label row j)
            # comes from head position len(prompt) - 2 + j. A final EOS scores nothing that counts.
            first = len(sequence.prompt_ids) - 2
            end = min(len(ids) - 1 - (1 if ids[-1] in eos_ids else 0), len(state) - 1, first + len(top_ids))
            cut = max(0, len(ids) - max_length)
            start = max(first, cut, 0)
            if end - start < 1:
                continue
            rows = slice(start - first, end - first)
            examples.append(Example(torch.tensor(ids[cut:]), state[cut:], start - cut, end - cut,
                                    top_ids[rows].long(), top_logp[rows].float().exp(), path.stem))
    return examples


def _label_files(work: Path, skip: frozenset[str]) -> list[Path]:
    return [path for path in sorted((work / "labels").glob("*.pt")) if path.stem not in skip]


def label_mass(work: Path, vocab_size: int, skip: frozenset[str] = frozenset()) -> torch.Tensor:
    """How much probability the verifier put on each token id over all recorded reply positions (top-k),
    the shards named in `skip` (validation shards) left out."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for path in _label_files(work, skip):
        labels = torch.load(path)
        for ids, logp in zip(labels["top_ids"], labels["top_logp"]):
            counts.index_add_(0, ids.reshape(-1).long(), logp.float().exp().reshape(-1).double())
    return counts


def top1_counts(work: Path, vocab_size: int, skip: frozenset[str] = frozenset()) -> torch.Tensor:
    """How often each token id is the verifier's top-1 over all recorded reply positions (but `skip`'s)."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for path in _label_files(work, skip):
        for ids in torch.load(path)["top_ids"]:
            counts.index_add_(0, ids[:, 0].long(), torch.ones(len(ids), dtype=torch.float64))
    return counts


def merged_head_ids(earlier: torch.Tensor, mass: torch.Tensor, top1: torch.Tensor) -> torch.Tensor:
    """An earlier head's ids (most probable first, as set_head_ids stores them) with the ids that are the
    verifier's top-1 somewhere in the new data and that it lacks, most probable first, in place of its
    last-ranked ones (at most a quarter of them): a head moved to new kinds of text keeps proposing what it
    did, and can propose the new text's tokens at all."""
    have = set(earlier.tolist())
    new = [i for i in torch.argsort(-mass, stable=True).tolist() if top1[i] > 0 and i not in have]
    new = new[:len(earlier) // 4]
    return torch.cat([earlier[:len(earlier) - len(new)], torch.tensor(new, dtype=earlier.dtype)])


# --------------------------------------------------------------------------- training


def _collate(batch: list[Example], subset_index: torch.Tensor):
    """ids [B, T], states [B, T, d (x layers)] (fp32), mask [B, T-1] of head positions that count, and for those
    positions (in mask order) the teacher's top-k as subset columns [N, k] (-1: outside) and probabilities."""
    width = max(len(e.ids) for e in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    states = torch.zeros((len(batch), width, batch[0].states.shape[-1]))
    mask = torch.zeros((len(batch), width - 1), dtype=torch.bool)
    for row, e in enumerate(batch):
        ids[row, :len(e.ids)] = e.ids
        states[row, :len(e.states)] = e.states.float()
        mask[row, e.first:e.end] = True
    columns = subset_index[torch.cat([e.top_ids for e in batch])]
    probs = torch.cat([e.top_p for e in batch])
    return ids, states, mask, columns, probs


def head_losses(head: SpecdecHeadModel, embed: torch.nn.Module, output_rows: torch.Tensor, batch, *,
                steps: int = 1, noise: float = 0.0, state_std: float = 1.0,
                depth_decay: float = 1.0, bf16: bool | None = None,
                per_position: bool = False) -> dict[str, torch.Tensor]:
    """Over the positions that count, for each of `steps` drafting steps s (SpecdecHeadModel.forward_chain:
    step s > 1 reads the head's own prediction from step s - 1, the training-time test): the state
    regression ("regression<s>"), the cross-entropy from the verifier's top-k distribution (restricted to
    the head's subset) to the head's ("classification<s>") and top-1 agreement with the verifier
    ("agreement<s>"; a top-1 token outside the subset counts as a disagreement, as it would when drafting;
    with per_position, "agreed1": step 1's at each position, in mask order).
    "regression" and "classification" are the steps' means weighted by depth_decay ** (s - 1). `bf16`: the
    matrix products in bfloat16 on the CPU (a CPU without native bfloat16 runs them ~3x slower than fp32;
    None: where the CPU has it, cpu_speed.native_bfloat16)."""
    ids, states, mask, columns, probs = (t.to(output_rows.device) for t in batch)  # the verifier's device
    bf16 = cpu_speed.native_bfloat16() if bf16 is None else bf16
    inputs = states[:, :-1]
    if noise:
        inputs = inputs + (torch.rand_like(inputs) - 0.5) * noise * state_std
    with torch.no_grad():
        token_embeds = embed(ids[:, 1:])
    inside = columns >= 0
    weights = probs * inside
    weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-9)
    target = states[:, 1:, :head.config.hidden_size]  # the final state: the one the output rows score
    losses: dict[str, torch.Tensor] = {}
    weights_by_step = [depth_decay ** step for step in range(steps)]
    for step, scored in enumerate(chain_scores(head, inputs, token_embeds, target, mask, output_rows, steps, bf16)):
        keep, logp = scored.keep, scored.logp  # which of the mask-ordered label rows this step scores
        picked = logp.gather(-1, columns[keep].clamp_min(0))
        agreed = (logp.argmax(-1) == columns[keep, 0]) & inside[keep, 0]
        step_losses = {
            "regression": scored.regression,
            "classification": -(weights[keep] * picked).sum(-1).mean(),
            f"agreement{step + 1}": agreed.float().mean(),
        }
        if step == 0 and per_position:
            losses["agreed1"] = agreed  # each position's, in mask order (the rows of `probs`)
        for name in ("regression", "classification"):
            losses[f"{name}{step + 1}"] = step_losses[name]
            weight = weights_by_step[step] / sum(weights_by_step)
            losses[name] = losses.get(name, 0) + step_losses[name] * weight
        losses[f"agreement{step + 1}"] = step_losses[f"agreement{step + 1}"]
    losses["agreement"] = losses["agreement1"]
    return losses


def _subset(head: SpecdecHeadModel, output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The verifier's output rows for the head's token ids, and each vocabulary id's column among them
    (-1: outside the subset)."""
    ids = head.head_ids.cpu()
    subset_index = torch.full((output.shape[0],), -1, dtype=torch.long)  # on the CPU, where batches are put together
    subset_index[ids] = torch.arange(len(ids))
    return output[ids.to(output.device)], subset_index


def _scored_batches(head: SpecdecHeadModel, embed: torch.nn.Module, output: torch.Tensor, examples: list[Example],
                    steps: int, bf16: bool | None, per_position: bool = False):
    """(batch, head_losses) over `examples` in batches of 8, the head moved to the verifier's device."""
    head.to(output.device)
    output_rows, subset_index = _subset(head, output)
    for start in range(0, len(examples), 8):
        batch = _collate(examples[start:start + 8], subset_index)
        yield batch, head_losses(head, embed, output_rows, batch, steps=steps, bf16=bf16, per_position=per_position)


@torch.no_grad()
def agreement_by_step(head: SpecdecHeadModel, embed: torch.nn.Module, output: torch.Tensor,
                      examples: list[Example], steps: int, bf16: bool | None = None) -> dict[int, float]:
    """Teacher-forced agreement with the verifier's top-1 at drafting steps 1..steps over `examples`
    (head_losses; `output` is the verifier's full output matrix). Step 1 estimates greedy acceptance at
    gamma 1 through the engine, which drafts at only some of the same positions. The head moves to the
    verifier's device."""
    sums, count = dict.fromkeys(range(1, steps + 1), 0.0), 0
    for batch, losses in _scored_batches(head, embed, output, examples, steps, bf16):
        n = int(batch[2].sum())
        for s in sums:
            sums[s] += float(losses[f"agreement{s}"]) * n
        count += n
    return {s: value / max(1, count) for s, value in sums.items()}


CONFIDENCE_EDGES = (0.3, 0.5, 0.7, 0.9)


@torch.no_grad()
def agreement_by_confidence(head: SpecdecHeadModel, embed: torch.nn.Module, output: torch.Tensor,
                            examples: list[Example], edges: tuple[float, ...] = CONFIDENCE_EDGES,
                            bf16: bool | None = None) -> list[dict]:
    """Step-1 agreement by how sure the verifier was: positions binned by the verifier's top-1 probability
    (`edges` between the bins), each bin's share of the positions and the head's agreement in it. It splits a
    gap between two prompt sets into harder text (more positions where the verifier itself is unsure) and a
    head off its training distribution (lower agreement at the same certainty)."""
    bounds = torch.tensor(edges)
    agreed_sum, count = torch.zeros(len(edges) + 1), torch.zeros(len(edges) + 1)
    for batch, losses in _scored_batches(head, embed, output, examples, 1, bf16, per_position=True):
        agreed = losses["agreed1"].cpu()
        bins = torch.bucketize(batch[4][:, 0].float().contiguous(), bounds, right=True)
        agreed_sum += torch.bincount(bins, agreed.float(), minlength=len(edges) + 1)
        count += torch.bincount(bins, minlength=len(edges) + 1)
    names = [f"{low:g}-{high:g}" for low, high in zip((0.0, *edges), (*edges, 1.0))]
    return [{"verifier_top1": name, "share": round(float(n / count.sum().clamp_min(1)), 4),
             "agreement1": round(float(a / n.clamp_min(1)), 4)} for name, a, n in zip(names, agreed_sum, count)]


def _start_from(head: SpecdecHeadModel, folder: Path) -> None:
    """Copy a trained head's weights into `head` (same widths); its token ids are chosen again from the data."""
    previous = SpecdecHeadModel.from_pretrained(folder)
    weights = {k: v for k, v in previous.state_dict().items() if k != "head_ids"}
    mine = head.state_dict()
    wrong = [k for k, v in weights.items() if k not in mine or mine[k].shape != v.shape]
    if wrong:
        raise SystemExit(f"cannot start from {folder}: its shapes differ ({', '.join(wrong[:3])})")
    head.load_state_dict(weights, strict=False)


def train_head(verifier, work: Path, run_dir: Path, settings: HeadSettings, special_ids: list[int]) -> dict:
    """Train (or resume) a head in `run_dir`; saves run_dir/model (best validation agreement) and train.json."""
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    model = verifier.model
    text_config = model.config.get_text_config()
    width = text_config.hidden_size
    layers = [int(layer) for layer in settings.feature_layers.split(",") if layer.strip()]
    examples = load_examples(work, settings.max_length, set(verifier.eos_token_ids), layers=layers)
    if not examples:
        raise SystemExit(f"no features under {features_dir(work, layers)}: run the generate and features steps "
                         f"first{' (features --layers ' + settings.feature_layers + ')' if layers else ''}")
    rng.shuffle(examples)
    if settings.validation_shards:
        named = set(settings.validation_shards.split(","))
        val = [e for e in examples if e.shard in named]
        train = [e for e in examples if e.shard not in named]
        if not val:
            raise SystemExit(f"no sequences in the validation shards {settings.validation_shards}")
    else:
        n_val = max(1, int(len(examples) * settings.validation_fraction))
        val, train = examples[:n_val], examples[n_val:]

    checkpoint_path = run_dir / "checkpoint.pt"
    embed = model.get_input_embeddings()
    output = model.get_output_embeddings().weight.detach()
    if checkpoint_path.exists():
        checkpoint = torch.load(checkpoint_path, weights_only=False)
        config = SpecdecHeadConfig(**checkpoint["config"])
    else:
        checkpoint = None
        config = SpecdecHeadConfig(
            hidden_size=width, num_attention_heads=settings.heads, num_key_value_heads=settings.kv_heads,
            intermediate_size=settings.intermediate, rms_norm_eps=getattr(text_config, "rms_norm_eps", 1e-5),
            vocab_size=output.shape[0], head_size=min(settings.head_size, output.shape[0]),  # a small vocabulary: all
            verifier_name=verifier.name, verifier_fingerprint=embedding_fingerprint(embed.weight),
            feature_layers=layers)
    head = SpecdecHeadModel(config)
    # The token ids are chosen without the named validation shards: their tokens would flatter the head there.
    held = frozenset(settings.validation_shards.split(",")) if settings.validation_shards else frozenset()
    mass = label_mass(work, output.shape[0], held)
    if checkpoint is None:
        if settings.init_from:
            _start_from(head, Path(settings.init_from))
        if settings.head_ids in ("merge", "keep"):
            if not settings.init_from:
                raise SystemExit(f"--head-ids {settings.head_ids} needs --init-from (the head whose ids it keeps)")
            earlier = SpecdecHeadModel.from_pretrained(settings.init_from).head_ids
            if settings.head_ids == "keep":
                head.set_head_ids(earlier)
            else:
                head.set_head_ids(merged_head_ids(earlier, mass, top1_counts(work, output.shape[0], held)))
        else:
            # The ids the verifier put most probability on in its replies, end-of-sequence ids first.
            head.set_head_ids(ranking_from_counts(mass, special_ids)[:config.head_size])
    else:
        head.load_state_dict(checkpoint["model"])
    head.to(output.device)  # trains where the verifier runs (a GPU: the batches move there in head_losses)
    output_rows, subset_index = _subset(head, output)
    state_std = float(torch.cat([e.states[:64, :width].float() for e in train[:200]]).std())

    optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=settings.weight_decay,
                                  betas=(0.9, 0.95))
    step, history, best = 0, [], -1.0
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
        step, history, best = checkpoint["step"], checkpoint["history"], checkpoint["best"]
        rng.setstate(checkpoint["rng"])
        torch.set_rng_state(checkpoint["torch_rng"])

    def lr_at(s: int) -> float:
        if s < settings.warmup:
            return settings.lr * (s + 1) / settings.warmup
        progress = (s - settings.warmup) / max(1, settings.steps - settings.warmup)
        return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    def validate() -> dict[str, float]:
        """Agreement with the verifier's top-1 at each drafting step, on held-back replies."""
        head.eval()
        figures = agreement_by_step(head, embed, output, val, settings.chain_steps, settings.bf16)
        head.train()
        return {f"val_agreement{s}": value for s, value in figures.items()}

    def save_checkpoint() -> None:
        save_atomic({"model": head.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                     "history": history, "best": best, "config": config.to_dict(), "rng": rng.getstate(),
                     "torch_rng": torch.get_rng_state(), "settings": asdict(settings)}, checkpoint_path)

    started = time.monotonic()
    last_checkpoint = started
    head.train()
    batches = endless_batches(train, settings.batch_tokens, rng, size=lambda e: e.end - e.first)
    bar = tqdm(total=settings.steps, initial=step, desc="train head", unit="step")
    window: list[dict[str, float]] = []
    while step < settings.steps:
        if time.monotonic() - started > settings.max_minutes * 60:
            tqdm.write(f"train-head: stopping after {settings.max_minutes} minutes; run again to continue")
            break
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        losses = head_losses(head, embed, output_rows, _collate(next(batches), subset_index),
                             steps=settings.chain_steps, noise=settings.noise, state_std=state_std,
                             depth_decay=settings.depth_decay, bf16=settings.bf16)
        loss = losses["regression"] + settings.cls_weight * losses["classification"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        step += 1
        window.append({k: float(v.detach()) for k, v in losses.items()})
        window = window[-50:]
        mean = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
        bar.update(1)
        bar.set_postfix(reg=f"{mean['regression']:.3f}", cls=f"{mean['classification']:.2f}",
                        agree=f"{mean['agreement']:.3f}")
        if step % settings.validate_every == 0 or step == settings.steps:
            val_figures = validate()
            # The checkpoint kept is the one whose drafting steps agree best on average.
            agreement = sum(val_figures.values()) / len(val_figures)
            history.append({"step": step, "train_minutes": (time.monotonic() - started) / 60, **mean,
                            **val_figures, "val_agreement": agreement, "train_sequences": len(train),
                            "train_positions": sum(e.end - e.first for e in train)})
            tqdm.write(json.dumps(history[-1]))
            if agreement > best:
                best = agreement
                head.save_pretrained(run_dir / "model")
        if time.monotonic() - last_checkpoint > settings.checkpoint_minutes * 60:
            save_checkpoint()
            last_checkpoint = time.monotonic()
    bar.close()
    save_checkpoint()
    if not (run_dir / "model").exists():
        head.save_pretrained(run_dir / "model")
    summary = {"kind": "head", "settings": asdict(settings), "history": history, "best_val_agreement": best,
               # Share of the verifier's top-k probability mass on the training replies the subset covers.
               "head_coverage": float(mass[head.head_ids].sum() / mass.sum().clamp_min(1e-12))}
    (run_dir / "train.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
