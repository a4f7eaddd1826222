"""From user choices (model specs, drafter kind) to a ready Engine; shared by the CLI and the app."""

from __future__ import annotations

from dataclasses import dataclass

from specdec_core.doctor import Verdict, check_models
from specdec_core.drafters import Drafter, PromptLookupDrafter, drafter_for
from specdec_core.engine import Engine
from specdec_core.models import EMBEDDED_DRAFT, EMBEDDED_VERIFIER, LoadedModel, ProgressCallback, load_model

DRAFTER_KINDS = ("model", "prompt-lookup", "hybrid")  # hybrid: prompt lookup where it matches, else the model


@dataclass(frozen=True)
class DraftDefault:
    """How a verifier speculates when the user names no draft: which draft, run how."""

    spec: str
    kind: str = "model"  # "model" | "hybrid"
    draft_tokens: int | None = None  # hybrid: the model's tokens per round without a lookup match (None: γ)


# The embedded pair is the embedded verifier with the draft head distilled from it (EMBEDDED_DRAFT,
# assets/), as a hybrid: prompt lookup where the conversation has a match, else one token from the head.
# On a 2-core CPU (docs/performance.md, 2026-11-30) it measured 1.38x over the verifier alone on the 16
# bundled prompts, against 1.12x for prompt lookup alone and 1.24x for the head alone at its best γ (1),
# and 1.45-1.48x on the 12 held-out prompts of the head's model card (the head alone: 1.44x). The head's
# second token is accepted too rarely to pay for checking a third row. A draft listed here becomes the
# default of its verifier; any verifier without one speculates with prompt lookup.
DEFAULT_VERIFIER = EMBEDDED_VERIFIER
DEFAULT_DRAFTS: dict[str, DraftDefault] = {
    EMBEDDED_VERIFIER: DraftDefault(EMBEDDED_DRAFT, kind="hybrid", draft_tokens=1),
}


def default_draft(verifier_spec: str | None) -> DraftDefault | None:
    """The draft that ships for this verifier, if any."""
    return DEFAULT_DRAFTS.get(verifier_spec or DEFAULT_VERIFIER)


@dataclass(frozen=True)
class LoadOptions:
    device: str = "auto"
    dtype: str = "auto"
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


def choose_drafter_kind(drafter: str | None, draft_spec: str | None) -> str:
    """`--draft X` implies a model drafter; no draft model means prompt lookup."""
    if drafter is None:
        return "model" if draft_spec else "prompt-lookup"
    return drafter


def load_pair(verifier_spec: str | None = None, draft_spec: str | None = None, drafter: str | None = None,
              options: LoadOptions = LoadOptions(), progress: ProgressCallback | None = None,
              draft_tokens: int | None = None) -> Pair:
    """Load the verifier, then the draft (if any), check the pair, and build the engine.

    `draft_tokens` caps what the model drafts per round in a hybrid (None: γ). Raises ModelLoadError
    for a model that cannot load and IncompatiblePairError (with the doctor's reason) for a pair that
    cannot work together."""
    shipped = default_draft(verifier_spec) if draft_spec is None else None
    if shipped is not None and drafter in (None, "model", "hybrid"):
        draft_spec = shipped.spec
        drafter = drafter or shipped.kind
        if drafter == shipped.kind == "hybrid" and draft_tokens is None:
            draft_tokens = shipped.draft_tokens
    kind = choose_drafter_kind(drafter, draft_spec)
    if kind in ("model", "hybrid") and not draft_spec:
        from specdec_core.errors import ConfigError

        raise ConfigError(f"the {kind} drafter needs a draft model: pass --draft SPEC (or use prompt-lookup)")
    load = dict(device=options.device, dtype=options.dtype, trust_remote_code=options.trust_remote_code,
                progress=progress)
    verifier = load_model(verifier_spec or DEFAULT_VERIFIER, device_map=options.device_map,
                          max_memory=options.max_memory, **load)
    draft = verdict = None
    drafter_obj: Drafter
    if kind in ("model", "hybrid"):
        assert draft_spec is not None
        draft = load_model(draft_spec, **load)
        verdict = check_models(verifier, draft).raise_if_incompatible()
        drafter_obj = drafter_for(draft, with_lookup=kind == "hybrid", model_tokens=draft_tokens)
    else:
        drafter_obj = PromptLookupDrafter()
    return Pair(engine=Engine(verifier, drafter_obj), verifier=verifier, draft=draft, drafter=drafter_obj,
                verdict=verdict)
