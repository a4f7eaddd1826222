"""The scripted talk of Talk ▸ Run the demo: its eight steps, each with a fresh preset prompt and one line of speaker
notes, and the llama.cpp figure of step 8, read from a bench result (`specdec bench --llama-cpp PATH --json OUT`).

Qt-free: demo.py and demo_steps.py show these steps.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

TALK_MAX_NEW_TOKENS = 64  # every step's reply: long enough for a figure, short enough for a room to wait for
TALK_RACE_PAIRS = 3
BENCH_ENV = "SPECDEC_BENCH_JSON"  # a bench result file, or a folder of them, for step 8


@dataclass(frozen=True)
class DemoStep:
    key: str
    title: str
    prompt: str  # a fresh single-turn prompt ("": the step reuses an earlier step's reply)
    note: str  # one line for the speaker


# Steps 1 and 3 share a prompt: speculation is compared with the verifier alone on the same prompt, each in a fresh
# single-turn context (no earlier reply for prompt lookup to copy). The others each get their own.
PROMPT_CODE = "Write a Python function that tells whether a number is prime, with a one-line docstring."
STEPS: tuple[DemoStep, ...] = (
    DemoStep("alone", "The verifier alone", PROMPT_CODE,
             "One token per forward pass of the big model: this is the speed to beat."),
    DemoStep("draft", "The draft alone", "Describe a busy train station in the morning, in three sentences.",
             "The small draft is fast but writes its own text: it cannot be trusted alone."),
    DemoStep("spec", "Speculation, in colour", PROMPT_CODE,
             "Green tokens were guessed by the draft and accepted; same text as step 1, fewer verifier passes."),
    DemoStep("round", "The best round, replayed", "",
             "The draft proposes, the verifier checks all proposals in one pass and keeps the agreeing prefix."),
    DemoStep("race", "A short race", "List five tips for writing clear emails, one line each.",
             "Off and on alternate three times each, so warming up favours neither; the headline is their median."),
    DemoStep("slow", "What makes it slow", "Tell me something surprising about octopuses.",
             "A draft that is mostly wrong costs draft time and wider passes, and pays nothing back."),
    DemoStep("theory", "Theory against measured", "",
             "The formula predicts the speedup from acceptance α, draft length γ and cost c; the star is measured."),
    DemoStep("llama", "Beside llama.cpp", "",
             "The same machine, model file and prompts in llama.cpp: where this engine stands."),
)


@dataclass(frozen=True)
class LlamaFigure:
    """What one bench result says of us and of llama.cpp (tokens per second, decode only)."""

    path: Path
    verifier: str
    date: str
    ours_alone: float
    ours_speculative: float
    speedup: float
    llama_alone: float | None
    llama_draft: float | None
    llama_draft_note: str  # why llama.cpp with the draft has no figure ("" when it has one)

    def lines(self) -> list[str]:
        lines = [f"specdec, verifier alone: {self.ours_alone:.1f} tok/s",
                 f"specdec, speculative: {self.ours_speculative:.1f} tok/s ({self.speedup:.2f}×)"]
        if self.llama_alone is not None:
            lines.append(f"llama.cpp alone: {self.llama_alone:.1f} tok/s")
        lines.append(f"llama.cpp with the draft: {self.llama_draft:.1f} tok/s" if self.llama_draft is not None
                     else f"llama.cpp with the draft: no figure ({self.llama_draft_note})")
        lines.append(f"from {self.path.name}, {self.verifier}, {self.date[:10]}")
        return lines


def bench_files(data_dir: Path) -> list[Path]:
    """Bench results step 8 reads: $SPECDEC_BENCH_JSON (a file or a folder), else <data dir>/bench/*.json."""
    env = os.environ.get(BENCH_ENV)
    where = Path(env) if env else data_dir / "bench"
    if where.is_file():
        return [where]
    return sorted(where.glob("*.json")) if where.is_dir() else []


def _lane(llama: dict, name: str) -> dict:
    return next((lane for lane in llama.get("lanes", []) if lane.get("lane") == name), {})


def read_llama_figure(path: Path) -> LlamaFigure | None:
    """The figure of one bench result with llama.cpp lanes that ran; None for any other file."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        llama = result.get("llama_cpp") or {}
        alone, draft = _lane(llama, "llama.cpp alone"), _lane(llama, "llama.cpp + draft")
        if "tokens_per_s" not in alone and "tokens_per_s" not in draft:
            return None
        return LlamaFigure(path, str(result["setup"]["verifier"]), str(result["setup"].get("date", "")),
                           float(result["baseline"]["tokens_per_s"]), float(result["speculative"]["tokens_per_s"]),
                           float(result["speedup"]), alone.get("tokens_per_s"), draft.get("tokens_per_s"),
                           str(draft.get("skipped") or draft.get("failed") or ("" if draft else "no such lane")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def llama_figure(verifier_name: str, data_dir: Path) -> LlamaFigure | str:
    """The newest bench result with llama.cpp figures for this verifier, or a sentence saying plainly why none."""
    figures = [f for f in (read_llama_figure(p) for p in bench_files(data_dir)) if f is not None]
    where = os.environ.get(BENCH_ENV) or str(data_dir / "bench")
    if not figures:
        return (f"No llama.cpp figure: no bench result with llama.cpp lanes in {where}. Run `specdec bench "
                f"--llama-cpp PATH --json {data_dir / 'bench' / 'llama.json'}` first.")
    mine = [f for f in figures if f.verifier.lower() in verifier_name.lower()
            or verifier_name.lower() in f.verifier.lower()]
    if not mine:
        others = ", ".join(sorted({f.verifier for f in figures}))
        return f"No llama.cpp figure for {verifier_name}: the bench results in {where} are for {others}."
    return max(mine, key=lambda f: f.date)
