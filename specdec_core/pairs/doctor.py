"""Can this draft pair with this verifier, and if not, exactly why.

Speculation feeds the verifier's token ids to the draft and the draft's proposed ids back to the
verifier. When every id means the same text on both sides the ids pass as they are; that is what this
module checks first, id by id. When they do not (another tokenizer), the pair still works through the
text (cross_vocab.py): the draft reads the verifier's text in its own tokens and proposes the verifier's
ids of the tokens both vocabularies hold. The verdict then names the first id that differs, how much the
vocabularies overlap (the share of the verifier's ids, and of its tokens in everyday text, that the draft
can propose; `specdec doctor` also weighs the share of the verifier's next-token probability there), the
strategy, and warns when the overlap is too low to pay.

Things that do not break exactness are findings of a lower level:
- padded output layers (151,936 vs 152,064 logit rows with one tokenizer): the padding is cut off;
- extra tokens on one side only: those ids lie past `shared_vocab_size`. The verifier still samples
  over all of its own ids (the draft gives the ids it lacks zero probability, and the acceptance rule's
  residual carries their mass), so the draft only never proposes them;
- different EOS / BOS / PAD settings on identical vocabularies: the verifier's EOS decides where a
  reply ends and prompts are built with the verifier's tokenizer (base drafts for instruct verifiers,
  e.g. SmolLM2-135M for SmolLM2-360M-Instruct, differ exactly like this and work well);
- a missing chat template on the draft: only the verifier's template is ever used.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdec_core.errors import IncompatiblePairError

if TYPE_CHECKING:
    from specdec_core.drafting.vocabularies import VocabMap
    from specdec_core.loading.models import LoadedModel

@dataclass(frozen=True)
class Finding:
    level: str  # "ok" | "warning" | "error"
    message: str


@dataclass(frozen=True)
class Verdict:
    compatible: bool  # no error: speculation with this pair reproduces the verifier's distribution
    findings: tuple[Finding, ...]
    shared_vocab_size: int  # the draft proposes from these token ids (0 .. n-1), which mean the same to both
    verifier_vocab_size: int = 0  # the verifier samples over these (0 .. n-1): its whole vocabulary
    # Another tokenizer: the draft proposes through the shared_vocab_size token texts both hold (cross_vocab.py).
    cross_vocabulary: bool = False
    id_share: float | None = None  # of the verifier's ids, the share the draft can propose
    text_share: float | None = None  # of the verifier's tokens in sample text, the share the draft can propose
    # Of the verifier's next-token probability over sample text, the share on tokens the draft can propose (a bound
    # on TLI's acceptance); None: not measured (it costs a verifier pass per text: `specdec doctor` measures it).
    mass_share: float | None = None

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "warning")

    def summary(self) -> str:
        """One line: "compatible: same tokenizer (49,152 tokens)", or why not."""
        if not self.compatible:
            return f"incompatible: {self.errors[0].message}"
        # The vocabulary finding comes first, and is "ok" when the pair is compatible.
        head = next((f.message for f in self.findings if f.level == "ok"), f"{self.shared_vocab_size:,} shared tokens")
        warnings = self.warnings
        if warnings:
            count = f"{len(warnings)} warning" + ("s" if len(warnings) > 1 else "")
            return f"compatible: {head}; {count}: {warnings[0].message}"
        return f"compatible: {head}"

    def report(self) -> str:
        """Every finding on its own line, for `specdec doctor`."""
        lines = [("Compatible" if self.compatible else "Not compatible") + ": verifier and draft"]
        lines += [f"  {finding.level:<8}{finding.message}" for finding in self.findings]
        verifier, shared = max(self.verifier_vocab_size, self.shared_vocab_size), self.shared_vocab_size
        if self.cross_vocabulary:
            lines.append(f"The draft proposes the verifier's ids of the {shared:,} token texts both vocabularies hold; "
                         f"the verifier samples over all its {self.verifier_vocab_size:,} token ids.")
            return "\n".join(lines)
        lines.append(f"Both models use the same {shared:,} token ids." if verifier == shared else
                     f"The verifier samples over all its {verifier:,} token ids; the draft proposes from the "
                     f"first {shared:,}.")
        return "\n".join(lines)

    def raise_if_incompatible(self) -> Verdict:
        """Raise IncompatiblePairError with the first error; return self otherwise (for chaining)."""
        if not self.compatible:
            raise IncompatiblePairError(self.summary())
        return self


def check_models(verifier: LoadedModel, draft: LoadedModel, *, weigh_mass: bool = False) -> Verdict:
    """check_pair on two loaded models, with the row counts of their output layers (and, for a draft
    head, whether it can read this verifier's hidden states). `weigh_mass`: for another tokenizer, also run
    the verifier over sample text for the share of its probability the draft can propose (Verdict.mass_share)."""
    share_of_mass = None
    if weigh_mass:
        from specdec_core.drafting.vocabularies import probability_share

        share_of_mass = functools.partial(probability_share, verifier)
    verdict = check_pair(verifier.tokenizer, draft.tokenizer, verifier_logits=_output_rows(verifier.model),
                         draft_logits=_output_rows(draft.model), share_of_mass=share_of_mass)
    findings = _head_findings(verifier, draft)
    if not findings:
        return verdict
    compatible = verdict.compatible and not any(f.level == "error" for f in findings)
    return dataclasses.replace(verdict, compatible=compatible, findings=verdict.findings + findings)


def _head_findings(verifier: LoadedModel, draft: LoadedModel) -> tuple[Finding, ...]:
    """A draft head reads the verifier's final hidden states: their width must match, and a head trained
    on another verifier still works (exactly) but will rarely be accepted."""
    from specdec_core.loading.draft_head import MODEL_TYPE, embedding_fingerprint

    config = draft.model.config
    if getattr(config, "model_type", None) != MODEL_TYPE:
        return ()
    text_config = verifier.model.config.get_text_config()
    width = getattr(text_config, "hidden_size", None)
    trained_on = config.verifier_name or "another verifier"
    if width != config.hidden_size:
        return (Finding("error", f"the draft head reads hidden states {config.hidden_size} wide but this "
                                 f"verifier's are {width}: it was made for {trained_on}"),)
    layers = list(getattr(config, "feature_layers", None) or [])
    depth = getattr(text_config, "num_hidden_layers", None)
    if layers and (depth is None or max(layers) >= depth - 1):
        return (Finding("error", f"the draft head reads the verifier's layers {layers} but this verifier has "
                                 f"{depth or 'an unknown number of'} layers: it was made for {trained_on}"),)
    embeddings = verifier.model.get_input_embeddings()
    fingerprint = embedding_fingerprint(embeddings.weight) if embeddings is not None else None
    if fingerprint is None or abs(fingerprint - config.verifier_fingerprint) > 1e-3 * (1 + abs(fingerprint)):
        return (Finding("warning", f"the draft head was trained on {trained_on}, not on this verifier: its "
                                   "drafts stay exact but few will be accepted"),)
    return (Finding("ok", f"draft head trained on this verifier ({trained_on}); it reads its hidden states"),)


def _output_rows(model) -> int | None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and (hasattr(head, "storage") or getattr(head, "weight", None) is not None):
        from specdec_core.loading import quantised  # torch: only here, where models are loaded already

        return quantised.row_count(head)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(vocab) if vocab else None


def check_pair(verifier_tokenizer, draft_tokenizer, *, verifier_logits: int | None = None,
               draft_logits: int | None = None, share_of_mass: Callable[[VocabMap], float] | None = None) -> Verdict:
    """Compare two tokenizers (and optionally the row counts of the models' output layers). For different
    vocabularies `share_of_mass`, given their map, weighs the verifier's probability the draft can propose."""
    findings: list[Finding] = []
    v_size, d_size = len(verifier_tokenizer), len(draft_tokenizer)
    shared = min(v_size, d_size)

    # 1. Every shared id must mean the same text. This is the one check that decides compatibility.
    v_tokens, d_tokens = _tokens_by_id(verifier_tokenizer, v_size), _tokens_by_id(draft_tokenizer, d_size)
    difference = _first_difference(verifier_tokenizer, draft_tokenizer, v_tokens, d_tokens, shared)
    if difference is not None:
        return _cross_vocabulary(verifier_tokenizer, draft_tokenizer, difference, shared, verifier_logits,
                                 draft_logits, share_of_mass)
    if v_size == d_size:
        findings.append(Finding("ok", f"same tokenizer ({v_size:,} tokens)"))
    elif v_size > d_size:
        lacks = _extra_tokens(verifier_tokenizer, v_tokens, shared)
        findings.append(Finding("ok", f"the draft knows {shared:,} of the verifier's {v_size:,} tokens; the "
                                      f"others can still be produced, never drafted (the draft lacks {lacks})"))
    else:
        findings.append(Finding("ok", f"the first {shared:,} token ids mean the same text in both"))
        lacks = _extra_tokens(draft_tokenizer, d_tokens, shared)
        findings.append(Finding("warning", f"the draft has {d_size - shared:,} token(s) the verifier lacks "
                                           f"({lacks}); the draft never proposes them"))

    # 2. Output layers: padding rows past the tokenizer are harmless; too few rows drop real tokens.
    for who, rows, size, never in (("verifier", verifier_logits, v_size, "generated"),
                                    ("draft", draft_logits, d_size, "drafted")):
        if rows is not None and rows < size:
            findings.append(Finding("warning", f"the {who}'s tokenizer has {size:,} tokens but its output layer "
                                               f"only {rows:,} rows: ids from {rows:,} on can never be {never}"))
    if verifier_logits is not None and draft_logits is not None and verifier_logits != draft_logits:
        findings.append(Finding("ok", f"output layers have {verifier_logits:,} (verifier) and {draft_logits:,} "
                                      f"(draft) rows; rows past {shared:,} are padding and are ignored"))
    shared = min([shared] + [rows for rows in (verifier_logits, draft_logits) if rows is not None])

    # 3. Special tokens and chat templates.
    findings += _special_tokens(verifier_tokenizer, draft_tokenizer)
    findings += _chat_templates(verifier_tokenizer, draft_tokenizer)

    compatible = not any(f.level == "error" for f in findings)
    verifier_vocab = min(v_size, verifier_logits) if verifier_logits is not None else v_size
    return Verdict(compatible=compatible, findings=tuple(findings), shared_vocab_size=shared,
                   verifier_vocab_size=verifier_vocab)


# Below this share of the verifier's tokens (or of its probability) in everyday text, token-level intersection can
# rarely propose the token the verifier writes: acceptance, and with it any speedup, is capped by it.
LOW_OVERLAP = 0.5


def _cross_vocabulary(verifier_tokenizer, draft_tokenizer, difference: tuple[int, str, str, int], shared_ids: int,
                      verifier_logits: int | None, draft_logits: int | None,
                      share_of_mass: Callable[[VocabMap], float] | None) -> Verdict:
    """Different vocabularies: the pair drafts through the text (cross_vocab.py); how much they overlap."""
    from specdec_core.defaults import TLI
    from specdec_core.drafting.cross_vocab import STRATEGIES
    from specdec_core.drafting.vocabularies import map_vocabularies, text_share

    v_size = min(len(verifier_tokenizer), verifier_logits or len(verifier_tokenizer))
    d_size = min(len(draft_tokenizer), draft_logits or len(draft_tokenizer))
    vocab_map = map_vocabularies(verifier_tokenizer, draft_tokenizer, v_size, d_size)
    in_text = text_share(vocab_map, verifier_tokenizer)
    token_id, v_text, d_text, count = difference
    more = f", {count:,} of the {shared_ids:,} ids both have differ" if count > 1 else ""
    findings = [Finding("ok", f"different vocabularies (token {token_id} is {v_text} in the verifier and {d_text} "
                              f"in the draft{more}): the draft proposes through the {vocab_map.shared:,} token "
                              f"texts both hold, {vocab_map.id_share:.0%} of the verifier's ids and {in_text:.0%} "
                              f"of its tokens in sample text; strategy: {STRATEGIES[TLI]}")]
    mass = share_of_mass(vocab_map) if share_of_mass is not None else None
    if mass is not None:
        findings.append(Finding("ok", f"the verifier puts {mass:.0%} of its next-token probability in sample text on "
                                      "tokens the draft can propose: at most that share of drafts can be accepted"))
    # The warning weighs the probability where it was measured (the closer bound), else the tokens
    share, of_what = (mass, "next-token probability") if mass is not None else (in_text, "tokens")
    if share < LOW_OVERLAP:
        findings.append(Finding("warning", f"the draft can propose only {share:.0%} of the verifier's {of_what} in "
                                           "sample text: few drafts will be accepted, so speculation will rarely "
                                           "pay (--drafter slem proposes any token, from the draft's text)"))
    findings += _chat_templates(verifier_tokenizer, draft_tokenizer)
    return Verdict(compatible=True, findings=tuple(findings), shared_vocab_size=vocab_map.shared,
                   verifier_vocab_size=v_size, cross_vocabulary=True, id_share=vocab_map.id_share,
                   text_share=in_text, mass_share=mass)


def _tokens_by_id(tokenizer, size: int) -> list[str | None]:
    """id -> token string for ids 0..size-1 (None for a hole in the vocabulary)."""
    tokens: list[str | None] = [None] * size
    for token, token_id in tokenizer.get_vocab().items():
        if 0 <= token_id < size:
            tokens[token_id] = token
    return tokens


def _first_difference(v_tok, d_tok, v_tokens, d_tokens, shared: int) -> tuple[int, str, str, int] | None:
    """`(id, verifier text, draft text, how many ids differ)` for the first id whose text differs."""
    differing = [i for i, (a, b) in enumerate(zip(v_tokens[:shared], d_tokens[:shared])) if a != b]
    if not differing:
        return None
    if _decoder_signature(v_tok) == _decoder_signature(d_tok):
        # Same decoder: different token strings are different texts, no decoding needed.
        first = differing[0]
        return first, _shown(v_tok, v_tokens[first]), _shown(d_tok, d_tokens[first]), len(differing)
    # Different decoders may spell one text two ways ('Ġthe' vs '▁the'): compare what they decode to.
    real = [i for i in differing if _text(v_tok, v_tokens[i]) != _text(d_tok, d_tokens[i])]
    if not real:
        return None
    first = real[0]
    return first, _shown(v_tok, v_tokens[first]), _shown(d_tok, d_tokens[first]), len(real)


def _decoder_signature(tokenizer) -> str:
    """What turns this tokenizer's token strings into text: equal signatures spell text the same way."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if decoder is None:
        return type(tokenizer).__name__
    try:
        return decoder.__getstate__().decode()  # the decoder's JSON, without serialising the vocabulary
    except (AttributeError, TypeError, ValueError):
        return type(decoder).__name__


def _text(tokenizer, token: str | None) -> str | None:
    """The text a token stands for ('Ġthe' -> ' the'); None for a hole."""
    if token is None:
        return None
    try:
        return tokenizer.convert_tokens_to_string([token])
    except Exception:  # noqa: BLE001 - odd tokenizers: the raw token is still informative
        return token


def _shown(tokenizer, token: str | None) -> str:
    text = _text(tokenizer, token)
    return "missing" if text is None else repr(text)


def _extra_tokens(tokenizer, tokens: list[str | None], shared: int) -> str:
    """The ids of `tokens` past `shared`, with a few examples: "ids 300-319: ' x', ' y', ' z', ..."."""
    extra = len(tokens) - shared
    examples = ", ".join(_shown(tokenizer, t) for t in tokens[shared:shared + 3])
    span = f"id {shared:,}" if extra == 1 else f"ids {shared:,}-{len(tokens) - 1:,}"
    return f"{span}: {examples}{', ...' if extra > 3 else ''}"


def _special_tokens(v_tok, d_tok) -> list[Finding]:
    findings = []
    for name, level, consequence in (
        ("eos", "warning", ("replies end at the verifier's EOS, so this only makes the draft worse at "
                            "guessing where a reply ends")),
        ("bos", "warning", ("prompts are built with the verifier's tokenizer, so the draft may see a start it "
                            "was not trained on")),
        ("pad", "ok", "padding is never used when generating one reply"),
    ):
        v_id, d_id = getattr(v_tok, f"{name}_token_id", None), getattr(d_tok, f"{name}_token_id", None)
        if v_id == d_id:
            continue
        findings.append(Finding(level, f"{name.upper()} differs: {_describe_special(v_tok, v_id)} in the verifier, "
                                       f"{_describe_special(d_tok, d_id)} in the draft; {consequence}"))
    return findings


def _describe_special(tokenizer, token_id: int | None) -> str:
    if token_id is None:
        return "none"
    return f"{_shown(tokenizer, tokenizer.convert_ids_to_tokens(token_id))} (id {token_id})"


def _chat_templates(v_tok, d_tok) -> list[Finding]:
    v_template, d_template = getattr(v_tok, "chat_template", None), getattr(d_tok, "chat_template", None)
    if not v_template:
        return [Finding("warning", "the verifier has no chat template: chat turns are sent as plain text")]
    if not d_template:
        return [Finding("ok", "the draft has no chat template; only the verifier's is used")]
    if v_template != d_template:
        return [Finding("ok", "the chat templates differ; only the verifier's is used")]
    return []
