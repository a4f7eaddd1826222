"""From user choices (model specs, drafter kind) to a ready Engine; shared by the CLI and the app."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specdec_core import defaults
from specdec_core.drafting.drafters import Drafter, HybridDrafter, PromptLookupDrafter, drafter_for, is_draft_head
from specdec_core.engine import Engine
from specdec_core.errors import ConfigError
from specdec_core.loading.models import LoadedModel, load_model
from specdec_core.loading.progress import ProgressCallback
from specdec_core.pairs.doctor import Verdict, check_models


@dataclass(frozen=True)
class DraftDefault:
    """How a verifier speculates when the user names no draft: which draft, run how."""

    spec: str
    kind: str = defaults.MODEL  # defaults.MODEL | defaults.HYBRID
    draft_tokens: int | None = None  # hybrid: the model's tokens per round without a lookup match (None: γ)


# A draft listed here becomes the default of its verifier; any verifier without one speculates with
# prompt lookup. The embedded pair's choice (the head as a hybrid, one token per round) and its measured
# speedups are in docs/performance.md, "The embedded pair".
DEFAULT_DRAFTS: dict[str, DraftDefault] = {
    defaults.VERIFIER: DraftDefault(defaults.DRAFT, kind=defaults.DRAFTER, draft_tokens=defaults.DRAFT_TOKENS),
}


def default_draft(verifier_spec: str | None) -> DraftDefault | None:
    """The draft that ships for this verifier, if any."""
    return DEFAULT_DRAFTS.get(verifier_spec or defaults.VERIFIER)


@dataclass(frozen=True)
class LoadOptions:
    device: str = "auto"
    dtype: str = "auto"
    draft_dtype: str = ""  # the draft's dtype ("": see draft_dtype_for); every drafted token is checked
    weights: str = "auto"  # what weights run as on a CPU (models.WEIGHT_FORMATS): a GGUF's own quantisation by default
    activation_bits: int = 16  # how finely quantised weights quantise their input rows (8: as llama.cpp)
    trust_remote_code: bool = False
    device_map: str | None = None
    max_memory: dict | None = None


@dataclass
class Pair:
    engine: Engine
    verifier: LoadedModel
    draft: LoadedModel | None
    drafter: Drafter | None
    verdict: Verdict | None  # the doctor's word on the draft model, when there is one


def make_drafter(kind: str, verifier: LoadedModel, draft: LoadedModel, verdict: Verdict,
                 draft_tokens: int | None = None) -> Drafter:
    """The drafter that runs `draft` for `verifier` as `kind` asks. `tli` and `slem` draft through the text
    (cross_vocab.py); so does `model` (and the model inside `hybrid`) when the doctor found another
    vocabulary, with token-level intersection, which is exact when sampling too. Otherwise ids pass as they are."""
    if kind in defaults.CROSS_VOCABULARY or verdict.cross_vocabulary:
        from specdec_core.drafting.cross_vocab import cross_vocab_drafter

        if is_draft_head(draft):
            raise ConfigError(f"{draft.name} is a draft head: it reads the verifier's hidden states and proposes its "
                              "ids, so it cannot draft through the text (use --drafter model or hybrid)")
        runs = cross_vocab_drafter(kind if kind in defaults.CROSS_VOCABULARY else defaults.TLI, draft, verifier)
        return HybridDrafter(runs, model_tokens=draft_tokens) if kind == defaults.HYBRID else runs
    return drafter_for(draft, with_lookup=kind == defaults.HYBRID, model_tokens=draft_tokens)


def choose_drafter_kind(drafter: str | None, draft_spec: str | None) -> str:
    """`--draft X` implies a model drafter; no draft model means prompt lookup."""
    if drafter is None:
        return defaults.MODEL if draft_spec else defaults.PROMPT_LOOKUP
    return drafter


# load(role, spec) -> the loaded model, role "verifier" or "draft": how load_pair gets its models. The app
# passes its own to reuse models it already holds, report which model loads, and cancel between steps.
ModelLoader = Callable[[str, str], LoadedModel]


def load_pair(verifier_spec: str | None = None, draft_spec: str | None = None, drafter: str | None = None,
              options: LoadOptions = LoadOptions(), progress: ProgressCallback | None = None,
              draft_tokens: int | None = None, *, loader: ModelLoader | None = None,
              strict: bool = True, engine: Engine | None = None) -> Pair:
    """Load the verifier, then the draft (if any), check the pair, and build the engine.

    `draft_tokens` caps what the model drafts per round in a hybrid (None: γ). Raises ModelLoadError
    for a model that cannot load and IncompatiblePairError (with the doctor's reason) for a pair that
    cannot work together; with `strict=False` an incompatible pair comes back as the verifier alone
    (no drafter), with the doctor's verdict, instead. `loader` replaces load_model (then `options` and
    `progress` are the loader's business). `engine`, when it runs the verifier that comes back, is kept
    (with the new drafter) instead of building another: its caches hold the conversation so far."""
    shipped = default_draft(verifier_spec) if draft_spec is None else None
    if shipped is not None and drafter in (None, defaults.MODEL, defaults.HYBRID):
        draft_spec = shipped.spec
        drafter = drafter or shipped.kind
        if drafter == shipped.kind == defaults.HYBRID and draft_tokens is None:
            draft_tokens = shipped.draft_tokens
    kind = choose_drafter_kind(drafter, draft_spec)
    if kind in defaults.USES_DRAFT and not draft_spec:
        raise ConfigError(f"the {kind} drafter needs a draft model: pass --draft SPEC (or use prompt-lookup)")
    if loader is None:
        loader = _model_loader(options, progress)
    from specdec_core.text.chat import template_renderer

    template_renderer().start()  # the chat template's child process: its start overlaps with loading
    verifier = loader("verifier", verifier_spec or defaults.VERIFIER)
    draft = verdict = None
    drafter_obj: Drafter | None
    if kind in defaults.USES_DRAFT:
        assert draft_spec is not None
        draft = loader("draft", draft_spec)
        verdict = check_models(verifier, draft)
        if strict:
            verdict.raise_if_incompatible()
        drafter_obj = make_drafter(kind, verifier, draft, verdict, draft_tokens) if verdict.compatible else None
    else:
        drafter_obj = PromptLookupDrafter()
    if engine is not None and engine.verifier is verifier:
        engine.set_drafter(drafter_obj)
    else:
        engine = Engine(verifier, drafter_obj)
    return Pair(engine=engine, verifier=verifier, draft=draft, drafter=drafter_obj, verdict=verdict)


def draft_dtype_for(dtype: str, draft_dtype: str = "") -> str:
    """The dtype a draft model loads in: `draft_dtype` when given ("auto": the draft's own auto, models.DRAFT_AUTO:
    bfloat16 on a CPU with native bfloat16); otherwise the draft's auto when the verifier's is auto too, and the
    verifier's dtype when that was chosen."""
    from specdec_core.loading.models import DRAFT_AUTO

    chosen = draft_dtype or dtype
    return DRAFT_AUTO if (chosen or "auto") == "auto" else chosen


def _model_loader(options: LoadOptions, progress: ProgressCallback | None) -> ModelLoader:
    load = dict(device=options.device, dtype=options.dtype, trust_remote_code=options.trust_remote_code,
                progress=progress, weights=options.weights, activation_bits=options.activation_bits)

    def loader(role: str, spec: str) -> LoadedModel:
        if role == "verifier":  # only the verifier may be spread over devices
            return load_model(spec, device_map=options.device_map, max_memory=options.max_memory, **load)
        return load_model(spec, **{**load, "dtype": draft_dtype_for(options.dtype, options.draft_dtype)})

    return loader
