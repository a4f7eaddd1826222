"""The line above the chat that names the loaded pair: the verifier, its drafter, the device and what the weights
run as, and the verifier-alone baseline the speedups are measured against. Qt-free."""

from __future__ import annotations

from typing import Any

from specdec_core import defaults


def weights_text(model: Any) -> str:
    """What a model's weights run as: a quantisation ("Q4_K 72 %, Q6_K 28 %", "int8"), else its float dtype."""
    weights = getattr(model, "weights", "")
    dtype = str(getattr(model, "dtype", "")).replace("torch.", "")
    return weights if weights and weights not in ("float32", "bfloat16", "float16") else dtype


def models_line(s: Any, baseline: Any | None) -> str:
    """Rich text naming session `s`'s pair (app.session.Session), with `baseline`'s tokens/s if there is one
    (app.speedup.Baseline)."""
    dtype = weights_text(s.verifier)
    draft_dtype = weights_text(s.draft) if s.drafter is not None else ""
    dtype += f" (draft {draft_dtype})" if draft_dtype and draft_dtype != dtype else ""
    dev = f"{getattr(s.verifier, 'device', '')} {dtype}"
    parts = [f"<b>{s.verifier_name}</b>"]
    if s.drafter is not None:
        parts.append(f"← {s.drafter_name}")
    elif s.request.drafter in defaults.USES_DRAFT:
        parts.append("<span style='color:rgb(215,58,73)'>← no usable draft</span>")
    parts.append(f"· {dev.strip()}")
    if baseline is not None:
        parts.append(f"· verifier alone {baseline.tokens_per_s:.1f} tok/s")
    return " ".join(parts)
