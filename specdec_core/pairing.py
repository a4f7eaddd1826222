"""From user choices (model specs, drafter kind) to a ready Engine; shared by the CLI and the app."""

from __future__ import annotations

from dataclasses import dataclass

from specdec_core.doctor import Verdict, check_models
from specdec_core.drafters import Drafter, PromptLookupDrafter, drafter_for
from specdec_core.engine import Engine
from specdec_core.models import EMBEDDED_VERIFIER, LoadedModel, ProgressCallback, load_model

DRAFTER_KINDS = ("model", "prompt-lookup")
# The embedded pair is the embedded verifier with prompt lookup. The draft head distilled from it
# (EMBEDDED_DRAFT, assets/) is not the default: on held-out prompts on a 2-core CPU it is slower than the
# verifier alone (its model card), while prompt lookup gains 1.1x (docs/performance.md). A draft listed
# here becomes the default of its verifier; any verifier without one speculates with prompt lookup.
DEFAULT_VERIFIER = EMBEDDED_VERIFIER
DEFAULT_DRAFTS: dict[str, str] = {}


def default_draft(verifier_spec: str | None) -> str | None:
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
              options: LoadOptions = LoadOptions(), progress: ProgressCallback | None = None) -> Pair:
    """Load the verifier, then the draft (if any), check the pair, and build the engine.

    Raises ModelLoadError for a model that cannot load and IncompatiblePairError (with the doctor's
    reason) for a pair that cannot work together."""
    if draft_spec is None and drafter in (None, "model"):
        draft_spec = default_draft(verifier_spec)
    kind = choose_drafter_kind(drafter, draft_spec)
    if kind == "model" and not draft_spec:
        from specdec_core.errors import ConfigError

        raise ConfigError("the model drafter needs a draft model: pass --draft SPEC (or use prompt-lookup)")
    load = dict(device=options.device, dtype=options.dtype, trust_remote_code=options.trust_remote_code,
                progress=progress)
    verifier = load_model(verifier_spec or DEFAULT_VERIFIER, device_map=options.device_map,
                          max_memory=options.max_memory, **load)
    draft = verdict = None
    drafter_obj: Drafter
    if kind == "model":
        assert draft_spec is not None
        draft = load_model(draft_spec, **load)
        verdict = check_models(verifier, draft).raise_if_incompatible()
        drafter_obj = drafter_for(draft)
    else:
        drafter_obj = PromptLookupDrafter()
    return Pair(engine=Engine(verifier, drafter_obj), verifier=verifier, draft=draft, drafter=drafter_obj,
                verdict=verdict)
