"""Models on this machine that could draft for a verifier, with how well their vocabularies overlap.

For the app's settings: the models installed by name (catalog.py), those in the Hugging Face hub cache and
the specs the user named before, each with the doctor's word on its tokenizer (the same vocabulary, or
another one and the share of the verifier's tokens in sample text that it can propose, cross_vocab.py).
Only tokenizers are read, never weights, and nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specdec_core.pairs.doctor import check_pair

TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "tokenizer.model"})


@dataclass(frozen=True)
class DraftCandidate:
    spec: str
    label: str  # what the settings show beside it: "same tokenizer", "other tokenizer, 87% overlap"
    overlap: float  # the share of the verifier's tokens in sample text the draft can propose (1.0: same ids)


def installed_hub_models(cache_dir: str | None = None) -> list[str]:
    """Hub ids of the causal models in the local hub cache that have a tokenizer (empty without a cache)."""
    try:
        from huggingface_hub import scan_cache_dir

        info = scan_cache_dir(cache_dir)
    except Exception:  # noqa: BLE001 - no cache, or one that cannot be read: nothing is installed
        return []
    found = []
    for repo in info.repos:
        files = {f.file_name for revision in repo.revisions for f in revision.files}
        if repo.repo_type == "model" and "config.json" in files and files & TOKENIZER_FILES:
            found.append(repo.repo_id)
    return sorted(found)


def _local_tokenizer(spec: str):
    from transformers import AutoTokenizer

    from specdec_core.loading.catalog import converted_folder

    # A model known by name (`specdec models install`) keeps its tokenizer in its converted folder.
    return AutoTokenizer.from_pretrained(converted_folder(spec) or spec, local_files_only=True)


def draft_candidates(verifier_tokenizer, specs: Sequence[str], *, exclude: str | None = None,
                     load_tokenizer: Callable[[str], object] = _local_tokenizer,
                     cancelled: Callable[[], bool] = lambda: False) -> list[DraftCandidate]:
    """Each of `specs` whose tokenizer can be read here (a folder or a cached hub id; GGUF files and names
    that resolve to nothing are left out), with its overlap with the verifier's, best first."""
    out = []
    for spec in dict.fromkeys(s for s in specs if s and s != exclude and not s.lower().endswith(".gguf")):
        if cancelled():
            break
        try:
            tokenizer = load_tokenizer(spec)
        except Exception:  # noqa: BLE001 - not a model here (a typo, a name only the loader knows): skip it
            continue
        verdict = check_pair(verifier_tokenizer, tokenizer)
        if not verdict.compatible:
            continue
        if verdict.cross_vocabulary:
            share = verdict.text_share or 0.0
            label = f"other tokenizer, {share:.0%} overlap"
        else:
            share = verdict.shared_vocab_size / max(1, verdict.verifier_vocab_size)
            label = "same tokenizer" if share >= 1.0 else f"same tokenizer, {share:.0%} of its ids"
        out.append(DraftCandidate(spec, label, share))
    return sorted(out, key=lambda c: -c.overlap)
