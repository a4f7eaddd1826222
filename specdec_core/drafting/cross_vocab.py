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

The boundary: this module knows the draft model and drafts; the vocabularies' map and the text bridge live in
vocabularies.py. The engine sees a Drafter like any other.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from specdec_core.defaults import SLEM, TLI
from specdec_core.drafting.base import Draft, DrafterBase, autoregress
from specdec_core.drafting.trees import DraftTree, TreeRequest, level_as_tree
from specdec_core.drafting.vocabularies import Retokenizer, map_vocabularies
from specdec_core.events import DraftStop
from specdec_core.verification.kv import CachedForward, supports_trees

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel

STRATEGIES = {TLI: "token-level intersection", SLEM: "string-level exact match"}


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

        draft = autoregress(next_logits, start, max_tokens, self.target, self.generator, ids=ids)
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
