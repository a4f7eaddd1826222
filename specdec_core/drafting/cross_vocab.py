"""Drafting across tokenizers: a draft whose vocabulary differs from the verifier's.

Two drafters after Timor et al. 2025, "Accelerating LLM Inference with Lossless Speculative Decoding
Algorithms for Heterogeneous Vocabularies" (ICML 2025); transformers ships both as "universal assisted
generation" (`UniversalSpeculativeDecodingGenerator`, `AssistedCandidateGeneratorDifferentTokenizers`):

- Token-level intersection (TLI, the paper's Algorithm 4): the draft samples only among the tokens whose
  text both vocabularies hold, from its own distribution restricted to them and renormalised, and proposes
  each as the verifier's id of the same text, with that exact distribution. The standard acceptance rule
  then applies unchanged (sampling.accept_drafts): the verifier's tokens outside the intersection get zero
  draft mass, so the residual max(0, target - draft) keeps all of their probability. Lossless, greedy or
  sampled; a draft tree works too.
- String-level exact match (SLEM, the paper's Algorithm 1): the draft writes its greedy continuation in its
  own tokens; that text is re-tokenised with the verifier's tokenizer and checked as one-hot proposals, so
  it may propose any verifier token. A one-hot proposal is accepted with probability target(x) and rejected
  into target without x: lossless too, whatever proposed it.

Both read the committed text, which the engine knows as verifier ids: `Retokenizer` decodes it and encodes
it again with the draft's tokenizer, whole, every round. The draft's KV cache keeps the longest prefix of
those ids it already holds (kv.CachedForward's one rollback rule), so a rejected draft, or a re-encoding
that splits the end of the text differently once more text follows, costs only the positions that changed.

The boundary: this module knows tokenizers and the draft model; the engine sees a Drafter like any other.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import torch

from specdec_core.defaults import SLEM, TLI
from specdec_core.drafting.drafters import Draft, DrafterBase, _autoregress
from specdec_core.drafting.trees import DraftTree, TreeRequest, level_as_tree
from specdec_core.events import DraftStop
from specdec_core.verification.kv import CachedForward, supports_trees

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel

STRATEGIES = {TLI: "token-level intersection", SLEM: "string-level exact match"}


# --------------------------------------------------------------------------- token texts


@lru_cache(maxsize=1)
def _byte_level_table() -> dict[int, int]:
    """GPT-2's byte-level alphabet read backwards, as a str.translate table: the printable stand-in of each
    byte -> the character of that code (so that .encode('latin-1') gives the byte)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = byte
        else:
            table[256 + extra] = byte
            extra += 1
    return table


def _spelling(tokenizer) -> str:
    """How the token strings spell text: "byte-level" (GPT-2: 'Ġthe'), "metaspace" (SentencePiece: '▁the',
    '<0x0A>'), "plain" (no decoder: the string is the text) or "other" (read each token through the
    tokenizer)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return "plain" if backend is not None else "other"  # no decoder: a token's string is its text
    try:
        spec = json.dumps(json.loads(decoder.__getstate__()))
    except (AttributeError, TypeError, ValueError):
        return "other"
    if '"ByteLevel"' in spec:
        return "byte-level"
    if '"Metaspace"' in spec or "\u2581" in spec:
        return "metaspace"
    return "other"


def token_texts(tokenizer, size: int) -> list[bytes | None]:
    """id -> the bytes its token stands for, for ids 0..size-1 (None: a hole). Byte-level and SentencePiece
    spellings are read into the same bytes, so 'Ġthe' and '▁the' are both b' the'; added tokens (chat
    markers) stand for their own text."""
    spelling = _spelling(tokenizer)
    added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    texts: list[bytes | None] = [None] * size
    table = _byte_level_table()
    for token, i in tokenizer.get_vocab().items():
        if not 0 <= i < size:
            continue
        if i in added:
            texts[i] = added[i].encode("utf-8")
        elif spelling == "byte-level":
            try:
                texts[i] = token.translate(table).encode("latin-1")
            except UnicodeEncodeError:  # a character outside the alphabet: the token's own text
                texts[i] = token.encode("utf-8")
        elif spelling == "plain":
            texts[i] = token.encode("utf-8")
        elif spelling == "metaspace":
            if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
                texts[i] = bytes([int(token[3:5], 16)])  # SentencePiece's byte fallback
            else:
                texts[i] = token.replace("\u2581", " ").encode("utf-8")
        else:
            texts[i] = tokenizer.convert_tokens_to_string([token]).encode("utf-8")
    return texts


@dataclass(frozen=True)
class VocabMap:
    """The tokens both vocabularies hold, by text: draft_ids[j] and verifier_ids[j] stand for the same bytes.
    One to one (a text held twice on one side keeps its lowest id)."""

    draft_ids: torch.Tensor  # [n] long
    verifier_ids: torch.Tensor  # [n] long
    verifier_size: int  # the verifier's producible ids
    draft_size: int

    @property
    def shared(self) -> int:
        return int(self.draft_ids.numel())

    @property
    def id_share(self) -> float:
        """The share of the verifier's ids the draft can propose (TLI)."""
        return self.shared / self.verifier_size if self.verifier_size else 0.0

    def to_draft(self) -> dict[int, int]:
        return dict(zip(self.verifier_ids.tolist(), self.draft_ids.tolist()))


def map_vocabularies(verifier_tokenizer, draft_tokenizer, verifier_size: int | None = None,
                     draft_size: int | None = None) -> VocabMap:
    """The shared tokens of two tokenizers, over ids 0..size-1 on each side (default: the whole tokenizer)."""
    verifier_size = len(verifier_tokenizer) if verifier_size is None else verifier_size
    draft_size = len(draft_tokenizer) if draft_size is None else draft_size
    verifier_by_text: dict[bytes, int] = {}
    for i, text in enumerate(token_texts(verifier_tokenizer, verifier_size)):
        if text and text not in verifier_by_text:
            verifier_by_text[text] = i
    draft_ids, verifier_ids = [], []
    for i, text in enumerate(token_texts(draft_tokenizer, draft_size)):
        target = verifier_by_text.pop(text, None) if text else None
        if target is not None:
            draft_ids.append(i)
            verifier_ids.append(target)
    return VocabMap(torch.tensor(draft_ids, dtype=torch.long), torch.tensor(verifier_ids, dtype=torch.long),
                    verifier_size, draft_size)


SAMPLE_TEXTS = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts a few tokens with a small "
    "model and checks them all in one pass of the large one, so the reply comes sooner and stays the same.",
    "def fibonacci(n: int) -> list[int]:\n    \"\"\"The first n Fibonacci numbers.\"\"\"\n    out = [0, 1]\n"
    "    while len(out) < n:\n        out.append(out[-1] + out[-2])\n    return out[:n]\n",
    "Q: What is the capital of France?\nA: Paris. It has been the capital since 987, and about 2.1 million "
    "people live there.",
)


def text_share(vocab_map: VocabMap, verifier_tokenizer, texts: Sequence[str] = SAMPLE_TEXTS) -> float:
    """The share of the verifier's tokens in some everyday text (prose, code, a question) that the draft
    could propose: how much of the verifier's usual mass TLI can reach."""
    shared = set(vocab_map.verifier_ids.tolist())
    ids = [t for text in texts for t in verifier_tokenizer(text, add_special_tokens=False).input_ids]
    return sum(t in shared for t in ids) / len(ids) if ids else 0.0


@torch.inference_mode()
def probability_share(verifier: LoadedModel, vocab_map: VocabMap, texts: Sequence[str] = SAMPLE_TEXTS) -> float:
    """The share of the verifier's next-token probability that falls on tokens the draft can propose, averaged
    over every position of some everyday text: a bound on TLI's acceptance there (a draft token is accepted
    with probability at most the verifier's, and TLI drafts only shared tokens). One verifier pass per text."""
    shared = vocab_map.verifier_ids.to(verifier.device)
    total = positions = 0.0
    for text in texts:
        ids = verifier.tokenizer(text, add_special_tokens=False).input_ids
        if not ids:
            continue
        logits = verifier.model(input_ids=torch.tensor([ids], device=verifier.device), use_cache=False).logits[0]
        probs = torch.softmax(logits[:, :vocab_map.verifier_size].float(), dim=-1)  # padding rows cut off
        total += float(probs[:, shared].sum())
        positions += len(ids)
    return total / positions if positions else 0.0


# --------------------------------------------------------------------------- reading the verifier's text


def _adds_start_token(tokenizer) -> bool:
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = tokenizer("a").input_ids
    except Exception:  # noqa: BLE001 - an odd tokenizer: assume it adds nothing
        return False
    return bool(ids) and ids[0] == bos


def _common_prefix(a: str, b: str) -> int:
    """Characters `a` and `b` share at their start (a binary search of C-level slice comparisons)."""
    if b.startswith(a):
        return len(a)
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


SPLICE_BACK = 8  # tokens re-encoded before the first changed character (their last ones may merge with it)


class Retokenizer:
    """Token ids of one tokenizer -> the same text in another's ids.

    Special tokens (chat markers) cross over when the other tokenizer has a token of the same text, and are
    dropped otherwise (their text would read as ordinary characters). A start token the target adds to
    every encoding is added once, at the start of the sequence, and never again (encoding a piece of text
    in the middle must not put one there).

    Encoding a long conversation again every round would cost milliseconds per round, so only the end is
    encoded again: from SPLICE_BACK tokens before the first character that changed, kept when those tokens
    come out as they were (the cut then lies between words), else the whole text is encoded."""

    def __init__(self, source_tokenizer, target_tokenizer, known_target: int):
        self.source = source_tokenizer
        self.target = target_tokenizer
        self.known_target = known_target
        target_specials = {t.content for t in getattr(target_tokenizer, "added_tokens_decoder", {}).values()}
        self._dropped = {i for i, t in getattr(source_tokenizer, "added_tokens_decoder", {}).items()
                         if t.content not in target_specials}
        self._start = target_tokenizer.bos_token_id if _adds_start_token(target_tokenizer) else None
        self._offsets = bool(getattr(target_tokenizer, "is_fast", False))
        self._last: tuple[tuple[int, ...], list[int]] = ((), [])
        self._text = ""
        self._body: list[int] = []  # the target's ids of _text, without the start token
        self._ends: list[int] = []  # where each of them ends in _text

    def text(self, ids: Sequence[int]) -> str:
        kept = [t for t in ids if t not in self._dropped]
        return self.source.decode(kept, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _encode(self, text: str) -> tuple[list[int], list[int]]:
        if not self._offsets:
            return self.target(text, add_special_tokens=False).input_ids, []
        encoded = self.target(text, add_special_tokens=False, return_offsets_mapping=True)
        return encoded.input_ids, [end for _, end in encoded.offset_mapping]

    def _spliced(self, text: str) -> tuple[list[int], list[int]]:
        """The target's ids of `text` and their ends, re-encoding only what follows the unchanged start."""
        same = _common_prefix(self._text, text)
        first_changed = bisect.bisect_right(self._ends, same)  # the first token that ends past it
        cut = first_changed - SPLICE_BACK
        if cut < 1 or not self._ends:
            return self._encode(text)
        restart = self._ends[cut - 1]
        tail, tail_ends = self._encode(text[restart:])
        check = first_changed - cut - 1  # old tokens after the cut that lie wholly in the unchanged text, but one
        if check < 1 or tail[:check] != self._body[cut:cut + check]:
            return self._encode(text)
        return self._body[:cut] + tail, self._ends[:cut] + [restart + end for end in tail_ends]

    def __call__(self, ids: Sequence[int]) -> list[int]:
        key = tuple(ids)
        if key == self._last[0]:
            return list(self._last[1])
        text = self.text(ids)
        self._body, self._ends = self._spliced(text)
        self._text = text
        out = self._body
        if self._start is not None and (not out or out[0] != self._start):
            out = [self._start, *out]
        out = [t for t in out if t < self.known_target]  # ids past the draft's output rows it cannot read
        self._last = (key, out)
        return list(out)


# --------------------------------------------------------------------------- the drafters


class _CrossVocabDrafter(DrafterBase):
    """What both drafters share: the draft model with its cache, the vocabulary map and the text bridge."""

    strategy = ""
    reads_verifier = False

    def __init__(self, draft: LoadedModel, verifier: LoadedModel):
        self.draft = draft
        self.name = f"{draft.name} ({STRATEGIES[self.strategy]})"
        self.forward = CachedForward(draft.model, draft.device)
        self.generator = torch.Generator(device=draft.device)
        self.known_ids = draft.producible_ids
        self.map = map_vocabularies(verifier.tokenizer, draft.tokenizer, verifier.producible_ids,
                                    self.known_ids)
        self.verifier_tokenizer = verifier.tokenizer
        self.read = Retokenizer(verifier.tokenizer, draft.tokenizer, self.known_ids)

    def reset(self, seed: int) -> None:
        self.generator.manual_seed(seed * 2 + 1)  # apart from the verifier's stream

    def reset_cache(self) -> None:
        self.forward.reset()

    def prefill(self, ids: Sequence[int]) -> None:
        context = self.read(ids)
        if context:
            self.forward.logits_for(context)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        pass  # rollback is implicit: the next round's context keeps only the cache prefix that still matches

    def _shown(self, draft_ids: Sequence[int]) -> str:
        """The draft's own tokens as people read them: "'▁Par' + 'is' (ids 812, 33)"."""
        tokens = self.draft.tokenizer.convert_ids_to_tokens(list(draft_ids))
        ids = ", ".join(str(t) for t in draft_ids)
        return " + ".join(repr(t) for t in tokens) + f" ({'ids' if len(draft_ids) > 1 else 'id'} {ids})"


class TokenIntersectionDrafter(_CrossVocabDrafter):
    """TLI: the draft's distribution over the shared tokens, proposed as the verifier's ids."""

    strategy = TLI
    grows_trees = True

    def __init__(self, draft: LoadedModel, verifier: LoadedModel):
        super().__init__(draft, verifier)
        self._to_draft = self.map.to_draft()
        self._trees = supports_trees(draft.model)  # a tree level can run as one draft pass
        self._columns = self.map.draft_ids.to(draft.device)
        self._targets = self.map.verifier_ids.to(draft.device)

    def _own(self, ids: Sequence[int], context: list[int], drafted: Sequence[int]) -> list[int]:
        """The draft's ids for `ids` (read as `context`) followed by `drafted` verifier ids: a drafted id maps
        back one to one; a path with another token (prompt lookup's copy, in a hybrid's tree) is read as text."""
        own = [self._to_draft.get(t) for t in drafted]
        if None in own:
            return self.read([*ids, *drafted])
        return context + own  # type: ignore[operator]

    def _placed(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """The draft's logits [V_draft] placed into the verifier's ids [vocab_size]: each shared token at its
        verifier id, -inf (no draft mass) everywhere else. Sampling from their processed softmax is sampling
        from the draft's distribution restricted to the shared tokens and renormalised."""
        placed = logits.new_full((vocab_size,), float("-inf"))
        return placed.index_copy_(0, self._targets, logits[self._columns])

    @torch.inference_mode()
    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        start, vocab_size = time.perf_counter(), self.target.vocab_size
        context = self.read(ids)
        if not context or not self.map.shared:
            return Draft((), torch.empty(0, vocab_size), (), DraftStop.NO_MATCH, time.perf_counter() - start)

        def next_logits(drafted: list[int]) -> torch.Tensor:
            return self._placed(self.forward.logits_for(self._own(ids, context, drafted))[-1], vocab_size)

        draft = _autoregress(next_logits, start, max_tokens, self.target, self.generator, ids=ids)
        return dataclasses.replace(draft, sources=tuple(self._shown([self._to_draft[t]]) for t in draft.token_ids))

    @torch.inference_mode()
    def propose_tree(self, ids: Sequence[int], request: TreeRequest) -> DraftTree:
        """A tree over the shared tokens (see trees.TreeGrowth); each path runs on the draft's cache,
        whose prefix rule makes moving between branches cost only the part that differs."""
        start = time.perf_counter()
        context = self.read(ids)
        if request.empty:
            return DraftTree.empty(DraftStop.MAX_TOKENS, start)
        if not context or not self.map.shared:
            return DraftTree.empty(DraftStop.NO_MATCH, start)

        def logits_for(paths: list[list[int]], paths_tokens: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
            # A level in one draft pass (tree attention) when every token on its paths is a shared one.
            tree = level_as_tree(paths, paths_tokens, self._to_draft.get) if paths != [[]] and self._trees else None
            if tree is not None:
                tokens, parents, at = tree
                logits = self.forward.logits_for_tree(context, tokens, parents)
                self.forward.keep_path([])  # roll back to the committed text's ids
                return logits[at][:, self._columns], self._targets
            rows = [self.forward.logits_for(self._own(ids, context, tokens))[-1, self._columns]
                    for tokens in paths_tokens]
            return torch.stack(rows), self._targets

        tree = request.grow(logits_for, start, self.target.config, self.target.eos_token_ids)
        return dataclasses.replace(tree, sources=tuple(  # a copied node came from the conversation, not the draft
            None if tree.is_copy(node) else self._shown([self._to_draft[token]])
            for node, token in enumerate(tree.token_ids)))


LOOK_BEHIND = 8  # committed verifier tokens re-encoded with the draft's text, so token boundaries line up


class StringMatchDrafter(_CrossVocabDrafter):
    """SLEM: the draft's greedy text, re-tokenised by the verifier, proposed one-hot.

    The re-tokenisation reads the last LOOK_BEHIND committed tokens' text before the draft's text and keeps
    only the tokens after them, so the first proposal is how the verifier would spell the new text after
    what it already wrote (a lone encoding of the new text may start with a start token or a space marker
    the verifier never puts there). The draft's last word is left out unless the draft ended its reply:
    more text may change how it splits (' wor' now, ' world' once the draft writes on)."""

    strategy = SLEM

    def __init__(self, draft: LoadedModel, verifier: LoadedModel):
        super().__init__(draft, verifier)
        self.draft_eos = frozenset(draft.eos_token_ids)
        pre_tokenizer = getattr(getattr(verifier.tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
        self._words = pre_tokenizer.pre_tokenize_str if pre_tokenizer is not None else None

    def proposal(self, committed: Sequence[int], new_text: str, complete: bool) -> list[int]:
        """The verifier's ids for `new_text` written after `committed` (its own ids); without the last word
        unless `complete`. Empty when no spelling of it follows the committed tokens' boundaries."""
        return self._spelled(committed, new_text, complete)[0]

    def _spelled(self, committed: Sequence[int], new_text: str, complete: bool
                 ) -> tuple[list[int], list[tuple[int, int]]]:
        """proposal(), with where each proposed token lies in `new_text` (begin, end)."""
        tail = list(committed[-LOOK_BEHIND:])
        tail_text = self.verifier_tokenizer.decode(tail, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        whole = tail_text + new_text
        encoded = self.verifier_tokenizer(whole, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = encoded.input_ids, encoded.offset_mapping
        # The first token that starts at or after the committed text's end; none may straddle that end.
        first = next((i for i, (begin, _) in enumerate(offsets) if begin >= len(tail_text)), len(ids))
        if first and offsets[first - 1][1] > len(tail_text):
            return [], []  # the committed text's last token would merge with the new text: no boundary lines up
        proposed = ids[first:]
        spans = [(begin - len(tail_text), end - len(tail_text)) for begin, end in offsets[first:]]
        if not complete and proposed:
            cut = self._last_word_start(whole, len(tail_text)) - len(tail_text)
            kept = [i for i, (_, end) in enumerate(spans) if end <= cut]
            proposed, spans = [proposed[i] for i in kept], [spans[i] for i in kept]
        # What is proposed must spell the new text after the committed tokens, exactly.
        spelled = self.verifier_tokenizer.decode(tail + proposed, skip_special_tokens=False,
                                                 clean_up_tokenization_spaces=False)
        if whole.startswith(spelled) and spelled.startswith(tail_text):
            return proposed, spans
        return [], []

    def _last_word_start(self, text: str, floor: int) -> int:
        """Where the last word of `text` begins (the verifier's pre-tokenizer decides what a word is)."""
        if self._words is None:
            return max(floor, len(text) - 1)
        pieces = self._words(text)
        return max(floor, pieces[-1][1][0]) if pieces else floor

    @torch.inference_mode()
    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        start, vocab_size, eos_token_ids = time.perf_counter(), self.target.vocab_size, self.target.eos_token_ids
        context = self.read(ids)
        if not context or max_tokens <= 0:
            stop = DraftStop.MAX_TOKENS if max_tokens <= 0 else DraftStop.NO_MATCH
            return Draft((), torch.empty(0, vocab_size), (), stop, time.perf_counter() - start)
        # 1. The draft's greedy continuation in its own tokens (one more than needed: the last word is cut).
        drafted: list[int] = []
        while len(drafted) <= max_tokens:
            logits = self.forward.logits_for(context + drafted)[-1, :self.known_ids]
            drafted.append(int(logits.argmax()))
            if drafted[-1] in self.draft_eos:
                break
        complete = drafted[-1] in self.draft_eos
        # 2. Its text after the context's (decoded with a few context tokens: a word's leading space).
        behind = context[-LOOK_BEHIND:]
        decode = self.draft.tokenizer.decode
        before = decode(behind, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        after = decode(behind + drafted, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        new_text = after[len(before):] if after.startswith(before) else ""
        # 3. The verifier's tokens for that text, checked one-hot.
        proposed, spans = self._spelled(ids, new_text, complete)
        tokens = list(itertools.takewhile(lambda t: t < vocab_size, proposed))[:max_tokens]
        for i, token in enumerate(tokens):
            if token in eos_token_ids:
                tokens = tokens[:i + 1]
                break
        # Drafting stopped at the draft's length (in its own tokens), at its end of reply, or found no text
        # whose spelling lines up.
        stop = DraftStop.EOS if tokens and tokens[-1] in eos_token_ids else \
            DraftStop.GAMMA if tokens else DraftStop.NO_MATCH
        index = torch.tensor(tokens, dtype=torch.long)
        probs = torch.nn.functional.one_hot(index, vocab_size).float() if tokens else torch.empty(0, vocab_size)
        sources = self._sources(behind, drafted, len(before), spans[:len(tokens)]) if tokens else ()
        # Shown without a draft probability: the proposal is one-hot by string match, not drawn from the draft.
        return Draft(tuple(tokens), probs, tuple(None for _ in tokens), stop, time.perf_counter() - start, sources)

    def _sources(self, behind: list[int], drafted: list[int], before: int, spans: list[tuple[int, int]]
                 ) -> tuple[str, ...]:
        """For each proposed token (its span in the draft's new text), the draft tokens whose text it overlaps."""
        decode = self.draft.tokenizer.decode
        ends = [len(decode(behind + drafted[:i + 1], skip_special_tokens=False, clean_up_tokenization_spaces=False))
                - before for i in range(len(drafted))]
        starts = [0, *ends[:-1]]
        return tuple(self._shown([d for d, s, e in zip(drafted, starts, ends) if s < end and e > begin] or drafted[:1])
                     for begin, end in spans)


def cross_vocab_drafter(strategy: str, draft: LoadedModel, verifier: LoadedModel) -> _CrossVocabDrafter:
    """The drafter of `strategy` (TLI or SLEM) running `draft` for `verifier`."""
    return {TLI: TokenIntersectionDrafter, SLEM: StringMatchDrafter}[strategy](draft, verifier)
