"""Drafts for a verifier among the models found on this machine (discovery.py), best first, with the doctor's word.

First the smaller models with the verifier's own vocabulary (the same hash of their token lists), smallest first:
their ids pass as they are. The doctor's verdict on those is cheap: the token lists, special tokens and chat
template come from the GGUF headers, with no model and no tokenizer built. Then the smaller models with another
tokenizer that the doctor accepts (they draft through the text, cross_vocab.py), most overlap first: measuring the
overlap encodes sample text, so for those the real tokenizers are built (from the GGUF or the folder), never
the weights. Nothing is loaded or written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec_core.errors import ModelLoadError, first_line
from specdec_core.loading import discovery, gguf_header, model_facts
from specdec_core.loading.discovery import FoundModel, Listing
from specdec_core.pairs.doctor import Verdict, check_pair


@dataclass(frozen=True)
class Suggestion:
    draft: FoundModel
    verdict: Verdict
    same_vocabulary: bool

    @property
    def overlap(self) -> float:
        """Of the verifier's tokens in sample text, the share this draft can propose (1.0: the same ids)."""
        return 1.0 if self.same_vocabulary else self.verdict.text_share or 0.0


@dataclass(frozen=True)
class Suggestions:
    verifier: FoundModel
    same: tuple[Suggestion, ...]  # the verifier's vocabulary, smallest first (incompatible ones included)
    other: tuple[Suggestion, ...]  # another tokenizer, accepted by the doctor, most overlap first
    skipped: tuple[str, ...]  # drafts left out: "<name>: <why>"

    @property
    def best(self) -> Suggestion | None:
        return next((s for s in (*self.same, *self.other) if s.verdict.compatible), None)


TokenizerLoader = Callable[[FoundModel], object]


def suggest_drafts(verifier_spec: str, listing: Listing, *, load_tokenizer: TokenizerLoader | None = None,
                   other_tokenizers: bool = True) -> Suggestions:
    """The drafts in `listing` for the verifier `verifier_spec` (a found name, or a GGUF file or folder here).
    `other_tokenizers=False` weighs only drafts of the verifier's own vocabulary (no tokenizer is built)."""
    load_tokenizer = load_tokenizer or real_tokenizer
    verifier = describe(verifier_spec, listing)
    if verifier.facts.vocabulary_hash is None:
        raise ModelLoadError(f"{verifier_spec!r} has no token list in its header or folder (tokenizer.json), so "
                             "no draft can be matched to it")
    smaller = sorted((m for m in listing.models if _smaller(m, verifier)), key=_size_key)
    same, other, skipped = [], [], []
    verifier_vocab = _header_vocab(verifier) if verifier.facts.format == "gguf" else load_tokenizer(verifier)
    for draft in (m for m in smaller if m.facts.vocabulary_hash == verifier.facts.vocabulary_hash):
        try:
            vocab = _header_vocab(draft) if draft.facts.format == "gguf" else load_tokenizer(draft)
        except Exception as error:  # noqa: BLE001 - a draft that cannot be read is left out, with why
            skipped.append(f"{draft.name}: {first_line(error)}")
            continue
        same.append(Suggestion(draft, check_pair(verifier_vocab, vocab), same_vocabulary=True))
    others = [m for m in smaller if m.facts.vocabulary_hash not in (None, verifier.facts.vocabulary_hash)]
    if others and other_tokenizers:
        other, lines = _other_vocabularies(verifier, others, load_tokenizer)
        skipped += lines
    return Suggestions(verifier, tuple(same), tuple(other), tuple(skipped))


def best_pair(listing: Listing) -> Suggestions | None:
    """The pair to offer first among the models found: the largest verifier with a smaller draft of its own
    vocabulary that the doctor accepts, and its drafts of that vocabulary (smallest first). None when no two
    models found share a vocabulary. Only headers are read (no tokenizer is built)."""
    by_vocabulary: dict[str, list[FoundModel]] = {}
    for model in listing.models:
        if model.facts.vocabulary_hash is not None:
            by_vocabulary.setdefault(model.facts.vocabulary_hash, []).append(model)
    verifiers = [m for group in by_vocabulary.values() for m in group if any(_smaller(d, m) for d in group)]
    for verifier in sorted(verifiers, key=_size_key, reverse=True):
        try:
            found = suggest_drafts(verifier.name, listing, other_tokenizers=False)
        except (ModelLoadError, OSError, ValueError):  # a file changed since it was listed: try the next
            continue
        if found.best is not None:
            return found
    return None


def _other_vocabularies(verifier: FoundModel, drafts: list[FoundModel], load_tokenizer: TokenizerLoader
                        ) -> tuple[list[Suggestion], list[str]]:
    try:
        verifier_tokenizer = load_tokenizer(verifier)
    except Exception as error:  # noqa: BLE001 - then only same-vocabulary drafts can be offered
        return [], [f"{verifier.name}: its tokenizer cannot be built ({first_line(error)}), so drafts with "
                    "another tokenizer were not weighed"]
    accepted, skipped = [], []
    for draft in drafts:
        try:
            verdict = check_pair(verifier_tokenizer, load_tokenizer(draft))
        except Exception as error:  # noqa: BLE001 - one unreadable draft must not hide the others
            skipped.append(f"{draft.name}: {first_line(error)}")
            continue
        if verdict.compatible:
            accepted.append(Suggestion(draft, verdict, same_vocabulary=not verdict.cross_vocabulary))
    accepted.sort(key=lambda s: (-s.overlap, _size_key(s.draft)))
    return accepted, skipped


def describe(spec: str, listing: Listing) -> FoundModel:
    """`spec` as a found model: one of the listing's (by name or path), a found name, or a local GGUF file or
    transformers folder (an embedded model's name means its GGUF file)."""
    spec = spec.strip()
    for model in listing.models:
        if spec in (model.name, str(model.path)):
            return model
    if discovery.is_found_name(spec):
        return discovery.locate(spec)
    from specdec_core.loading import catalog, embedded
    from specdec_core.loading.gguf_cache import default_cache_dir

    path, known = Path(spec).expanduser(), catalog.known(spec.lower())
    if spec.lower() == embedded.EMBEDDED_VERIFIER:
        path = embedded.embedded_gguf_path()
    elif known is not None and known.download is not None:  # installed with `specdec models install`
        path = catalog.installed_file(known, default_cache_dir()) or path
    try:
        if path.is_dir():
            return FoundModel(spec, path, "folder", model_facts.folder_facts(path))
        if path.is_file():
            return FoundModel(spec, path, "folder", model_facts.gguf_facts(path))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{spec!r} cannot be read: {first_line(error)}") from error
    raise ModelLoadError(f"{spec!r} is not a model found on this machine, a GGUF file or a model folder "
                         "(`specdec models list` shows what was found)")


def _smaller(draft: FoundModel, verifier: FoundModel) -> bool:
    """A draft must cost less than its verifier: fewer parameters (or, where unknown, fewer bytes)."""
    if draft.path == verifier.path:
        return False
    if draft.facts.parameters and verifier.facts.parameters:
        return draft.facts.parameters < verifier.facts.parameters
    return draft.facts.size < verifier.facts.size


def _size_key(model: FoundModel) -> tuple[int, int, str]:
    return model.facts.parameters or model.facts.size, model.facts.size, model.name


# ---------------------------------------------------------------------------------------------- tokenizers


def real_tokenizer(model: FoundModel):
    """The model's tokenizer, built from its GGUF header or its folder (no weights, nothing downloaded)."""
    from transformers import AutoTokenizer

    from specdec_core.loading.progress import quiet_transformers_bars

    with quiet_transformers_bars():
        if model.facts.format == "gguf":
            return AutoTokenizer.from_pretrained(str(model.path.parent), gguf_file=model.path.name)
        return AutoTokenizer.from_pretrained(str(model.path), local_files_only=True)


class HeaderVocabulary:
    """What the doctor reads of a tokenizer, from a GGUF header: the tokens by id, the special tokens, the chat
    template. Enough for two models with one vocabulary (no text is encoded or decoded)."""

    def __init__(self, header: gguf_header.GgufFacts) -> None:
        self.tokens = header.tokens or ()
        meta = header.metadata
        self.bos_token_id = meta.get("tokenizer.ggml.bos_token_id")
        self.eos_token_id = meta.get("tokenizer.ggml.eos_token_id")
        self.pad_token_id = meta.get("tokenizer.ggml.padding_token_id")
        self.chat_template = meta.get("tokenizer.chat_template")

    def __len__(self) -> int:
        return len(self.tokens)

    def get_vocab(self) -> dict[str, int]:
        return {token: index for index, token in enumerate(self.tokens)}

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.tokens[token_id] if 0 <= token_id < len(self.tokens) else ""

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)  # shown in findings as the token itself


def _header_vocab(model: FoundModel) -> HeaderVocabulary:
    return HeaderVocabulary(gguf_header.read_gguf_facts(model.path, keep_tokens=True))
