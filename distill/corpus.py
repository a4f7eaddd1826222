"""The lasting corpus: prompts of many shapes (corpus_prompts.py) and the verifier's greedy replies, kept in
the repository so that it grows from one round of work to the next instead of starting over.

A shard is one compressed .npz under distill/corpus/ (by default), `shard-<index>.npz`:

    prompts        uint8, UTF-8 JSON: [{"kind": str, "messages": [...]}] in shard order
    prompt_ids     uint16 (int32 for a vocabulary past 65,536): every prompt's token ids, concatenated
    prompt_ends    int64: where each prompt's ids end in prompt_ids
    reply_ids      the verifier's greedy replies, concatenated (EOS kept where it stopped)
    reply_ends     int64
    facts          uint8, UTF-8 JSON: verifier, max_new_tokens, seed, written

Hidden states and top-k labels are not stored: `corpus-replies` turns the shards into the replies files
the other steps read (<work>/replies/corpus-<index>.pt), and `label` and `features` recompute them with
one batched forward pass each.

`grow_corpus` resumes and appends: a shard file is written under a temporary name and renamed, so a file
that exists is complete and a killed job loses at most the shard it was writing; the next run skips every
prompt already in a shard (by its text, so a changed generator never duplicates one) and numbers its new
shards after the last.

Teacher-forced positions (`teacher_forced=True` in corpus_to_replies): the sequence's prompt text counts
as training positions too, not only the reply, as the first EAGLE was trained on fixed text. The split
point is where a prompt stops sharing its opening ids with the shard's other prompts (the chat template's
preamble, a shared system prompt), so no tokenizer is needed and the template is not learnt over and over.
"""

from __future__ import annotations

import json
import os
import time
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from distill.corpus_derived import derived_prompts, material_from_shards
from distill.corpus_languages import MAN_ROOT, language_passages, language_prompts
from distill.corpus_prompts import corpus_prompts
from distill.data import cut_after_eos, encode_messages, left_padded, save_atomic

CORPUS_DIR = Path(__file__).parent / "corpus"


def _key(prompt: dict) -> str:
    return json.dumps(prompt["messages"], ensure_ascii=False, sort_keys=True)


def shard_paths(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob("shard-*.npz"))


def _concat(rows: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    flat = np.fromiter((t for row in rows for t in row), dtype=dtype, count=sum(len(r) for r in rows))
    return flat, np.cumsum([len(r) for r in rows], dtype=np.int64)


def _split(flat: np.ndarray, ends: np.ndarray) -> list[list[int]]:
    starts = np.concatenate([[0], ends[:-1]])
    return [flat[s:e].astype(np.int64).tolist() for s, e in zip(starts, ends)]


def write_shard(path: Path, prompts: list[dict], prompt_ids: list[list[int]], reply_ids: list[list[int]],
                facts: dict, vocab_size: int) -> None:
    """One shard (see the module docstring), written whole or not at all."""
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.int32
    p_flat, p_ends = _concat(prompt_ids, dtype)
    r_flat, r_ends = _concat(reply_ids, dtype)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    with partial.open("wb") as file:
        np.savez_compressed(file, prompts=np.frombuffer(json.dumps(prompts, ensure_ascii=False).encode(), np.uint8),
                            prompt_ids=p_flat, prompt_ends=p_ends, reply_ids=r_flat, reply_ends=r_ends,
                            facts=np.frombuffer(json.dumps(facts).encode(), np.uint8))
    partial.replace(path)


def read_shard(path: Path) -> tuple[list[dict], list[list[int]], list[list[int]], dict]:
    """(prompts, prompt ids, reply ids, facts) of one shard."""
    with np.load(path) as data:
        return (json.loads(data["prompts"].tobytes()), _split(data["prompt_ids"], data["prompt_ends"]),
                _split(data["reply_ids"], data["reply_ends"]), json.loads(data["facts"].tobytes()))


@torch.inference_mode()
def greedy_replies(verifier, encoded: list[list[int]], *, batch_size: int, max_new_tokens: int) -> list[list[int]]:
    """The verifier's greedy reply to each prompt (token ids, cut after the first EOS), batched with left
    padding, prompts of similar length together."""
    eos = sorted(verifier.eos_token_ids)
    pad = verifier.tokenizer.pad_token_id if verifier.tokenizer.pad_token_id is not None else eos[0]
    replies: list[list[int]] = [[] for _ in encoded]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        input_ids, mask = left_padded([encoded[i] for i in batch], pad)
        width = input_ids.shape[1]
        out = verifier.model.generate(input_ids=input_ids.to(verifier.device), attention_mask=mask.to(verifier.device),
                                      max_new_tokens=max_new_tokens, do_sample=False, temperature=None, top_k=None,
                                      top_p=None, eos_token_id=eos, pad_token_id=pad, repetition_penalty=None)
        for row, i in enumerate(batch):
            replies[i] = cut_after_eos(out[row, width:].tolist(), verifier.eos_token_ids)
    return replies


SOURCES = ("written", "derived", "both", "languages")


def _prompt_stream(source: str, seed: int, shards_read, tokenizer, man_root: Path = MAN_ROOT):
    """The prompts a run draws from: corpus_prompts.py's (written), corpus_derived.py's over the replies
    already in the corpus (derived), the two taken in turn (both), or corpus_languages.py's over the
    translated manual pages under man_root (languages)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    if source == "languages":
        passages = language_passages(man_root, seed=seed)
        if not passages:
            raise SystemExit(f"no translated manual pages under {man_root} (<language>/man<N>/): install Debian's "
                             "manpages-fr, -de, -es, -it, -pt-br and -zh, or unpack them and pass --man-root")
        yield from language_prompts(passages, seed)
        return
    streams = [corpus_prompts(seed)] if source != "derived" else []
    if source != "written":
        streams.append(derived_prompts(material_from_shards(shards_read, tokenizer), seed))
    while streams:
        for stream in list(streams):
            item = next(stream, None)
            if item is None:
                streams.remove(stream)
            else:
                yield item


def grow_corpus(verifier, folder: Path = CORPUS_DIR, *, shards: int, shard_size: int = 32, batch_size: int = 8,
                max_new_tokens: int = 192, seed: int = 0, max_minutes: float = 0.0, prompts=None,
                source: str = "written", man_root: Path = MAN_ROOT) -> list[Path]:
    """Append up to `shards` shards of new prompts (from `prompts`, by default _prompt_stream(source): the
    written prompts, prompts derived from the replies already here, or both) with the verifier's greedy
    replies; returns the shards written. Stops early when time (checked between shards) or new prompts run
    out."""
    folder = Path(folder)
    existing = shard_paths(folder)
    shards_read = [read_shard(path) for path in existing]
    others = sorted({facts.get("verifier") for *_, facts in shards_read} - {verifier.name})
    if others:  # the replies are one verifier's; another's would teach the head the wrong model
        raise SystemExit(f"{folder} holds replies of {', '.join(map(str, others))}, not {verifier.name}: "
                         "grow it with that verifier, or pass another --folder")
    done = {_key(p) for prompts, *_ in shards_read for p in prompts}
    if prompts is None:
        prompts = _prompt_stream(source, seed, shards_read, verifier.tokenizer, man_root)
    else:
        source = "given"
    fresh = (p for p in prompts if _key(p) not in done)
    dtype = str(next(verifier.model.parameters()).dtype).removeprefix("torch.")
    index = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
    started, written = time.monotonic(), []
    for _ in tqdm(range(shards), desc="corpus", unit="shard"):
        if max_minutes and time.monotonic() - started > max_minutes * 60:
            tqdm.write(f"corpus: stopping after {max_minutes} minutes; run again to continue")
            break
        chunk = list(islice(fresh, shard_size))
        if not chunk:
            tqdm.write("corpus: the prompt generator has no new prompts left")
            break
        encoded = [encode_messages(verifier.tokenizer, p["messages"], verifier.context_length, max_new_tokens)
                   for p in chunk]
        replies = greedy_replies(verifier, encoded, batch_size=batch_size, max_new_tokens=max_new_tokens)
        path = folder / f"shard-{index:05d}.npz"
        write_shard(path, chunk, encoded, replies, {"verifier": verifier.name, "max_new_tokens": max_new_tokens,
                                                    "seed": seed, "source": source, "dtype": dtype,
                                                    "written": time.strftime("%Y-%m-%d %H:%M:%S")},
                    len(verifier.tokenizer))
        written.append(path)
        index += 1
    return written


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _teacher_forced_starts(prompt_ids: list[list[int]]) -> list[int]:
    """For each prompt, where its own text starts: one past the longest opening it shares with another
    prompt of the shard (at least 1, at most its length). In sorted order the longest opening a prompt shares
    with any other is the one it shares with a neighbour, so a shard of n prompts costs n log n, not n^2."""
    order = sorted(range(len(prompt_ids)), key=lambda i: prompt_ids[i])
    shared = [0] * len(prompt_ids)
    for before, after in zip(order, order[1:]):
        n = _common_prefix(prompt_ids[before], prompt_ids[after])
        shared[before], shared[after] = max(shared[before], n), max(shared[after], n)
    return [min(max(1, shared[i]), len(ids)) for i, ids in enumerate(prompt_ids)]


def corpus_to_replies(folder: Path, work: Path, *, teacher_forced: bool = False) -> list[Path]:
    """Replies files (data.py's layout) from the corpus shards not yet turned into one: <work>/replies/
    corpus-<index>.pt, or corpustf-<index>.pt whose "replies" start where each prompt's own text does
    (see the module docstring). Returns the files written."""
    mode = "corpustf" if teacher_forced else "corpus"
    written = []
    for path in shard_paths(folder):
        dest = Path(work) / "replies" / f"{mode}-{path.stem.split('-')[1]}.pt"
        if dest.exists():
            continue
        _, prompt_ids, reply_ids, _ = read_shard(path)
        if teacher_forced:
            starts = _teacher_forced_starts(prompt_ids)
            pairs = [(p[:s], p[s:] + r) for p, r, s in zip(prompt_ids, reply_ids, starts)]
        else:
            pairs = list(zip(prompt_ids, reply_ids))
        save_atomic({"prompt_ids": [p for p, _ in pairs], "reply_ids": [r for _, r in pairs], "mode": mode}, dest)
        written.append(dest)
    return written


# --------------------------------------------------------------------------- command line (python -m distill)


def write_phrases(folder: Path, dest: Path) -> tuple[int, int]:
    """The phrase store (specdec_core/drafting/phrases.py) of every reply in the corpus, written to `dest`:
    (replies, tokens). Only the verifier's replies go in, not the prompts: the store is what it says."""
    from specdec_core.drafting.phrases import PhraseStore

    replies = [reply for path in shard_paths(folder) for reply in read_shard(path)[2]]
    store = PhraseStore(replies)
    dest.parent.mkdir(parents=True, exist_ok=True)
    temporary = dest.with_name(dest.stem + ".partial.npz")
    store.save(temporary)
    os.replace(temporary, dest)
    return len(store), store.tokens


def add_steps(steps, load_verifier) -> None:
    """The `corpus`, `corpus-replies` and `phrases` steps on distill's command line."""

    def cmd_corpus(args) -> None:
        written = grow_corpus(load_verifier(args), args.folder, shards=args.shards, shard_size=args.shard_size,
                              batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, seed=args.seed,
                              max_minutes=args.max_minutes, source=args.source, man_root=args.man_root)
        total = sum(p.stat().st_size for p in shard_paths(args.folder))
        print(f"{len(written)} new shards; {len(shard_paths(args.folder))} in {args.folder} ({total / 1e6:.2f} MB)")

    def cmd_corpus_replies(args) -> None:
        written = corpus_to_replies(args.folder, args.work, teacher_forced=args.teacher_forced)
        print(f"{len(written)} replies files under {args.work / 'replies'}; run label and features next")

    p = steps.add_parser("corpus", help="grow the lasting corpus: new prompts and the verifier's greedy replies")
    p.add_argument("--folder", type=Path, default=CORPUS_DIR, help="where the shards are (default: distill/corpus)")
    p.add_argument("--shards", type=int, default=10, help="new shards to write at most")
    p.add_argument("--shard-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop after this long (0: no limit)")
    p.add_argument("--source", choices=SOURCES, default="written",
                   help="new prompts from corpus_prompts.py (written), tasks put to the replies already in the "
                        "corpus (derived: follow-ups, passages, snippets, sentences; corpus_derived.py), both, "
                        "or requests about translated manual pages (languages; corpus_languages.py)")
    p.add_argument("--man-root", type=Path, default=MAN_ROOT,
                   help="with --source languages: the manual's root, holding <language>/man<N>/ pages")
    p.set_defaults(run_step=cmd_corpus)

    p = steps.add_parser("corpus-replies", help="replies files under <work> from the corpus shards")
    p.add_argument("--folder", type=Path, default=CORPUS_DIR)
    p.add_argument("--teacher-forced", action="store_true",
                   help="the prompts' own text counts as training positions too (corpustf-<index>.pt)")
    p.set_defaults(run_step=cmd_corpus_replies)

    def cmd_phrases(args) -> None:
        replies, tokens = write_phrases(args.folder, args.dest)
        print(f"{replies} replies, {tokens} tokens -> {args.dest} ({args.dest.stat().st_size / 1e6:.2f} MB)")

    from specdec_core.drafting.phrases import FILE_NAME
    from specdec_core.loading.resources import assets_dir

    p = steps.add_parser("phrases", help="the verifier's own phrases (n-gram store of the corpus's replies), "
                         "shipped beside the draft head")
    p.add_argument("--folder", type=Path, default=CORPUS_DIR)
    p.add_argument("--dest", type=Path, default=assets_dir() / "smollm2-135m-draft" / FILE_NAME)
    p.set_defaults(run_step=cmd_phrases)
