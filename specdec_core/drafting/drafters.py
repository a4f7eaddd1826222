"""Drafters: whatever proposes tokens for the verifier to check, and which one runs a given draft.

One drafter a file: the contract and the sampling steps they share (base.py), a draft model of its own
(model_drafter.py), a draft head on the verifier's states (head_drafter.py), prompt lookup (lookup_drafter.py), and
the hybrid of lookup and a model (hybrid_drafter.py); drafters with another tokenizer are in cross_vocab.py. This
module picks one for a loaded draft (`drafter_for`) and names them all for the code that imports them from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.drafting.base import Draft, Drafter, DrafterBase, DraftTarget, autoregress, in_verifier_ids, pick
from specdec_core.drafting.head_drafter import HeadDrafter
from specdec_core.drafting.hybrid_drafter import HybridDrafter
from specdec_core.drafting.lookup_drafter import PromptLookupDrafter
from specdec_core.drafting.model_drafter import ModelDrafter
from specdec_core.drafting.phrases import shipped_store

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel

__all__ = ["Draft", "DraftTarget", "Drafter", "DrafterBase", "HeadDrafter", "HybridDrafter", "ModelDrafter",
           "PromptLookupDrafter", "autoregress", "draft_folder", "drafter_for", "in_verifier_ids", "is_draft_head",
           "model_drafter_of", "pick"]


def model_drafter_of(drafter: Drafter | None) -> Drafter | None:
    """The drafter that runs a model inside `drafter` (itself unless it is a hybrid)."""
    return drafter.model_drafter if isinstance(drafter, HybridDrafter) else drafter


def is_draft_head(draft: LoadedModel) -> bool:
    """A draft head (draft_head.py) reads the verifier's hidden states and cannot run on its own."""
    return getattr(draft.model.config, "model_type", None) == "specdec_head"


def drafter_for(draft: LoadedModel, *, with_lookup: bool = False, model_tokens: int | None = None) -> Drafter:
    """The drafter that runs this draft model: a HeadDrafter for a draft head, else a ModelDrafter;
    `with_lookup` wraps it in a HybridDrafter (prompt lookup first, at most `model_tokens` from the model), with
    the phrase store that ships in the draft's folder, if one does (phrases.py)."""
    runs = HeadDrafter(draft) if is_draft_head(draft) else ModelDrafter(draft)
    if not with_lookup:
        return runs
    return HybridDrafter(runs, model_tokens=model_tokens, phrases=shipped_store(draft_folder(draft)))


def draft_folder(draft: LoadedModel) -> str | None:
    """The local folder the draft's weights came from (where its phrase store would be), if it is one."""
    folder = getattr(draft.model, "name_or_path", None) or getattr(draft.model.config, "_name_or_path", None)
    return folder if folder and Path(folder).is_dir() else None
