"""A trained draft -> a shippable folder: fp16 weights, the verifier's tokenizer files, and the facts
of its making (distill.json) that the model card is written from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

import specdec_core.loading.draft_head  # noqa: F401 - registers both draft types with transformers
import specdec_core.loading.draft_model  # noqa: F401


def _earlier_runs(history: dict) -> list[dict]:
    """The runs this one started from (`init_from`, then theirs), oldest first: settings and last figures."""
    chain, seen = [], set()
    folder = history.get("settings", {}).get("init_from")
    while folder and folder not in seen:
        seen.add(folder)
        exported = Path(folder) / "distill.json"
        if exported.is_file():  # an exported head (assets/<name>): its own run and the runs behind it
            head = json.loads(exported.read_text())
            last = (head.get("history") or [{}])[-1]
            chain.extend([{"run": head.get("run", "head"), "settings": head.get("settings", {}), "last": last,
                           "best_val_agreement": head.get("best_val_agreement")},
                          *head.get("earlier_runs", [])[::-1]])
            break
        run = Path(folder).parent  # init_from names <run>/model
        try:
            earlier = json.loads((run / "train.json").read_text())
        except (OSError, ValueError):
            break
        last = (earlier.get("history") or [{}])[-1]
        chain.append({"run": run.name, "settings": earlier.get("settings", {}), "last": last,
                      "best_val_agreement": earlier.get("best_val_agreement")})
        folder = earlier.get("settings", {}).get("init_from")
    return chain[::-1]


def average_weights(model: torch.nn.Module, start: Path, share: float) -> None:
    """Move `model`'s weights to (1 - share) x those of the head in `start` + share x its own (token ids
    and other integer buffers stay its own): after fine-tuning on new text, an average with the weights it
    started from keeps most of the gain there and more of what it knew (Wortsman et al. 2022, WiSE-FT)."""
    from transformers import AutoModelForCausalLM

    earlier = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32).state_dict()
    mine = model.state_dict()
    if any(k not in earlier or earlier[k].shape != v.shape for k, v in mine.items()):
        raise SystemExit(f"cannot average with {start}: its weights have other names or shapes")
    model.load_state_dict({k: (1 - share) * earlier[k] + share * v if v.is_floating_point() else v
                           for k, v in mine.items()})


def export_draft(trained: Path, tokenizer, dest: Path, facts: dict, average_with: tuple[Path, float] | None = None
                 ) -> Path:
    """Write `dest` (replacing it) from the `model` folder a training run saved under `trained`;
    `average_with` = (the head it started from, this run's share): average_weights first."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(trained / "model", dtype=torch.float32)
    if average_with:
        average_weights(model, *average_with)
        facts = {**facts, "averaged_with": {"head": str(average_with[0]), "share": average_with[1]}}
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.to(torch.float16).save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    history = json.loads((trained / "train.json").read_text())
    earlier = _earlier_runs(history)
    (partial / "distill.json").write_text(json.dumps({**facts, **history, "earlier_runs": earlier}, indent=2) + "\n")
    from specdec_core.drafting.phrases import FILE_NAME as PHRASES

    # the card survives a re-export (`card` measures it again), and so does the verifier's phrase store
    for name in ("README.md", "card.json", PHRASES):
        if (dest / name).exists():
            shutil.copy(dest / name, partial / name)
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return dest
