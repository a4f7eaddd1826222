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
    figure = getattr(s, "llama_cpp", None)
    if figure is not None:
        parts.append(f"· llama.cpp alone {figure.alone_tokens_per_s:.1f} tok/s")
    return " ".join(parts)


def llama_cpp_tooltip(figure: Any) -> str:
    """Where the models line's llama.cpp figure comes from, in words ("" without one)."""
    if figure is None:
        return ""
    lines = [f"llama.cpp {figure.version} alone on this GGUF file: {figure.alone_tokens_per_s:.1f} tok/s "
             f"({figure.threads} thread{'s' if figure.threads != 1 else ''}, {figure.prompts} prompts of up to "
             f"{figure.max_new_tokens} tokens), measured by specdec bench --llama-cpp on {figure.measured[:10]}."]
    if figure.ours_alone_tokens_per_s:
        lines.append(f"In the same run specdec's verifier alone decoded {figure.ours_alone_tokens_per_s:.1f} tok/s "
                     f"({figure.ours_over_llama_cpp:.2f} of llama.cpp's).")
    if figure.with_draft_tokens_per_s:
        lines.append(f"llama.cpp with the draft {figure.draft}: {figure.with_draft_tokens_per_s:.1f} tok/s.")
    return "\n".join(lines)
