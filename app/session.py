"""The Qt-free work the window hands to its workers: load a model pair, measure the baseline, run a
reply or a race. Everything here is plain Python over specdec_core; the window runs it on threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from specdec_core.config import GenerationConfig
from specdec_core.defaults import HYBRID, PROMPT_LOOKUP, USES_DRAFT
from specdec_core.events import Finished

CALIBRATION_PROMPT = "Write a few sentences about why the sky is blue."
CALIBRATION_TOKENS = 48


class Busy(str, Enum):
    """What the window's one engine is doing. IDLE is falsy (`if window.busy:` reads as "busy")."""

    IDLE = ""
    LOAD = "load"
    REPLY = "reply"
    RACE = "race"
    RANK = "rank"
    MEASURE = "measure"  # the verifier alone and speculation, measured after a load (app/baseline_controller.py)


@dataclass(frozen=True)
class LoadRequest:
    verifier: str
    draft: str = ""
    drafter: str = PROMPT_LOOKUP  # "model" | "prompt-lookup" | "hybrid"
    draft_tokens: int = 0  # hybrid: the draft model's tokens per round without a lookup match (0: γ)
    device: str = "auto"
    dtype: str = "auto"
    calibrate: bool = True

    def verifier_key(self) -> tuple:
        return (self.verifier, self.device, self.dtype)

    def draft_key(self) -> tuple:
        return (self.draft, self.device, self.dtype)


@dataclass(frozen=True)
class LoadStep:
    """Progress of a load, for the progress bar: which model, and the loader's own report."""

    what: str  # "verifier" | "draft" | "doctor" | "baseline"
    message: str
    fraction: float | None = None  # None: indeterminate


@dataclass
class Session:
    request: LoadRequest
    verifier: Any  # LoadedModel
    engine: Any  # Engine
    draft: Any = None  # LoadedModel, when the drafter is a model
    drafter: Any = None  # the Drafter in use, or None (incompatible pair, or verifier alone)
    verdict_ok: bool = True
    verdict: str = ""  # the doctor's verdict (or the prompt-lookup note), in words
    verdict_report: str = ""
    baseline_tps: float | None = None
    baseline_source: str = ""
    baseline_verify_s: float | None = None  # the calibration's verifier time per decode step
    # The chat's cost model as the last reply began, with that reply's messages and system prompt: a race of the same
    # prompt starts from it (runs.chat_planner), as the reply did, not from what the reply went on to learn.
    reply_planner: tuple[list[dict], str | None, Any] | None = None
    notes: list[str] = field(default_factory=list)
    # What llama.cpp decoded on the verifier's GGUF file here, from the last `specdec bench --llama-cpp` over it
    # (specdec_core/measuring/llama_cpp_figures.py); None where no bench ran, or the verifier is no GGUF file.
    llama_cpp: Any = None

    @property
    def verifier_name(self) -> str:
        return getattr(self.verifier, "name", "") or self.request.verifier

    @property
    def drafter_name(self) -> str:
        if self.drafter is None:
            return ""
        if self.request.drafter == PROMPT_LOOKUP:
            return "prompt lookup"
        name = getattr(self.draft, "name", "") or self.request.draft
        return f"{name} + prompt lookup" if self.request.drafter == HYBRID else name


def _loader_progress(progress: Callable[[LoadStep], None], what: str) -> Callable[[Any], None]:
    def report(p: Any) -> None:
        message = getattr(p, "message", "") or getattr(p, "stage", "") or str(p)
        progress(LoadStep(what, message, getattr(p, "fraction", None)))
    return report


def load_session(request: LoadRequest, progress: Callable[[LoadStep], None], cancelled: Callable[[], bool],
                 previous: Session | None = None) -> Session:
    """Load (or reuse) the verifier and the draft, ask the doctor, build the engine, measure the baseline.

    The pairing is the CLI's own (specdec_core.pairs.pairing.load_pair); the app adds three things through its
    model loader: models the previous session already holds with the same spec, device and dtype are
    reused, each load is reported, and a cancel takes effect after each model. An incompatible draft
    does not fail the load: the session keeps the verifier alone and carries the doctor's reason,
    which the window shows next to the draft selector.
    """
    load = _reusing_loader(request, previous, progress, cancelled)
    verifier, draft, drafter, engine, verdict_ok, verdict, report = _load_pair(request, load, previous)
    if engine is None:  # no draft chosen: the verifier alone (the previous engine, if it runs this verifier)
        if previous is not None and previous.verifier is verifier:
            engine = previous.engine
            engine.set_drafter(None)
        else:
            from specdec_core.engine import Engine

            engine = Engine(verifier, None)
    session = Session(request=request, verifier=verifier, engine=engine, draft=draft, drafter=drafter,
                      verdict_ok=verdict_ok, verdict=verdict, verdict_report=report,
                      llama_cpp=_llama_cpp_figure(request.verifier, verifier))
    _set_baseline(session, previous, progress, cancelled)
    return session


def _llama_cpp_figure(spec: str, verifier: Any) -> Any:
    """llama.cpp's figure for the verifier's GGUF file on this machine, where a bench left one (else None). Only a
    verifier that runs the file's own quantisation is compared: one converted to float weights is another model."""
    from specdec_core.loading.gguf_cache import default_cache_dir
    from specdec_core.loading.quantised import runs_gguf_types
    from specdec_core.loading.specs import gguf_file
    from specdec_core.measuring import llama_cpp_figures

    if not runs_gguf_types(str(getattr(verifier, "weights", ""))):
        return None
    cache = getattr(verifier, "cache_dir", None) or default_cache_dir()
    return llama_cpp_figures.recalled(cache, gguf_file(spec, cache))


def _reusing_loader(request: LoadRequest, prev: Session | None, progress: Callable[[LoadStep], None],
                    cancelled: Callable[[], bool]) -> Callable[[str, str], Any]:
    """The model loader load_pair calls, (role, spec) -> model: a model the previous session holds with the same
    spec, device and dtype is reused, each load is reported, and a cancel takes effect after each model."""
    from specdec_core.loading.models import load_model
    from specdec_core.pairs.pairing import draft_dtype_for

    def load(role: str, spec: str) -> Any:
        if role == "verifier" and prev is not None and prev.request.verifier_key() == request.verifier_key():
            model = prev.verifier
        elif (role == "draft" and prev is not None and prev.draft is not None
              and prev.request.draft_key() == request.draft_key()):
            model = prev.draft
        else:
            progress(LoadStep(role, f"loading {role} {spec}", None))
            dtype = request.dtype if role == "verifier" else draft_dtype_for(request.dtype)
            model = load_model(spec, device=request.device, dtype=dtype, progress=_loader_progress(progress, role))
        if cancelled():
            raise Cancelled()
        if role == "draft":
            progress(LoadStep("doctor", "checking the pair", None))
        return model

    return load


def _load_pair(request: LoadRequest, load: Callable[[str, str], Any], prev: Session | None) -> tuple:
    """(verifier, draft, drafter, engine, verdict_ok, verdict, report): the CLI's pairing over `load`; the engine
    is None when no draft was chosen."""
    from specdec_core.pairs.pairing import load_pair

    draft = drafter = engine = None
    verdict_ok, verdict, report = True, "", ""
    if request.drafter in USES_DRAFT and not request.draft.strip():
        verifier = load("verifier", request.verifier)
        verdict_ok, verdict = False, "No draft model chosen: pick one, or use prompt lookup."
    else:
        pair = load_pair(request.verifier, request.draft.strip() or None, request.drafter,
                         draft_tokens=request.draft_tokens or None, loader=load, strict=False,
                         engine=prev.engine if prev is not None else None)
        verifier, draft, drafter, engine = pair.verifier, pair.draft, pair.drafter, pair.engine
        if pair.verdict is not None:
            verdict_ok, verdict, report = bool(pair.verdict.compatible), pair.verdict.summary(), pair.verdict.report()
        else:
            verdict = "Prompt lookup: drafts by copying earlier text of the conversation; pairs with any verifier."
    return verifier, draft, drafter, engine, verdict_ok, verdict, report


def _set_baseline(session: Session, prev: Session | None, progress: Callable[[LoadStep], None],
                  cancelled: Callable[[], bool]) -> None:
    """The baseline: the verifier alone on this machine (kept if the verifier did not change)."""
    if prev is not None and prev.verifier is session.verifier and prev.baseline_tps:
        session.baseline_tps, session.baseline_source = prev.baseline_tps, prev.baseline_source
        session.baseline_verify_s = prev.baseline_verify_s
    elif session.request.calibrate:
        progress(LoadStep("baseline", "measuring the verifier alone (speedup baseline)", None))
        session.baseline_tps = calibrate(session, cancelled)
        session.baseline_source = f"calibration run ({CALIBRATION_TOKENS} tokens, verifier alone)"
        # Its steps were timed with the window idle; replies run while it repaints, and a tree weighed against
        # an idle plain step looks dearer than it is. The first reply starts from the costs the replies before
        # it measured on this machine (cost_memory.py), which the calibration leaves as they were, or, with none,
        # times a plain step of its own.
        session.engine.forget_verify_costs()


class Cancelled(Exception):
    """Raised inside the work (here: a load, after a model) when its worker was asked to abort; the worker
    (app/worker.py) ends such work quietly. Defined here so that the work needs no Qt to raise it."""


def calibrate(session: Session, cancelled: Callable[[], bool] = lambda: False) -> float | None:
    """Tokens/s of the verifier alone, greedy, on a fixed short prompt (after a 4-token warm-up)."""
    from specdec_core.drafting.planner import DraftPolicy
    from specdec_core.engine import Controls
    from specdec_core.text.chat import build_prompt

    v = session.verifier
    ids = build_prompt(v.tokenizer, [{"role": "user", "content": CALIBRATION_PROMPT}], system=None,
                       context_length=v.context_length, reserve_new_tokens=CALIBRATION_TOKENS).ids
    tps = None
    idle = DraftPolicy(remember_costs=False)  # timed with the window idle: not for later engines
    for n in (4, CALIBRATION_TOKENS):
        controls = Controls(speculate=False)
        # Same per-token work as a reply (top alternatives included), so the comparison is fair.
        config = GenerationConfig(max_new_tokens=n, speculate=False)
        for ev in session.engine.generate(ids, config, controls, policy=idle):
            if cancelled():
                controls.cancel()
            if isinstance(ev, Finished):
                if ev.error:
                    return None
                tps = ev.stats.tokens_per_s if ev.stats.new_tokens >= 2 else None
                if tps and ev.stats.rounds:  # what one plain verifier step costs (theory vs practice)
                    session.baseline_verify_s = ev.stats.verify_s / ev.stats.rounds
    return tps


def calibration_prompt_tokens(session: Session) -> int:
    """The calibration prompt's length in tokens (0 when the tokenizer has no chat template)."""
    from specdec_core.text.chat import build_prompt

    v = session.verifier
    try:
        calibration = [{"role": "user", "content": CALIBRATION_PROMPT}]
        return len(build_prompt(v.tokenizer, calibration, system=None, context_length=v.context_length,
                                reserve_new_tokens=CALIBRATION_TOKENS).ids)
    except Exception:  # noqa: BLE001 - a tokenizer without a chat template: length unknown
        return 0


@dataclass(frozen=True)
class PromptInfo:
    """The app's own first event of a reply: how the prompt was built."""

    prompt_tokens: int
    dropped_turns: int


def reply_events(session: Session, messages: list[dict], system: str | None, config: GenerationConfig,
                 controls: Any) -> Iterator[object]:
    """Build the prompt from the conversation (dropping the oldest turns if needed), then stream the reply."""
    from specdec_core.text.chat import build_prompt

    v = session.verifier
    built = build_prompt(v.tokenizer, messages, system=system or None, context_length=v.context_length,
                         reserve_new_tokens=config.max_new_tokens)
    yield PromptInfo(len(built.ids), built.dropped_turns)
    engine = session.engine
    if engine.drafter is not None and engine.drafter is session.drafter:
        session.reply_planner = (messages, system or None, engine.planner.copy())
    yield from engine.generate(built.ids, config, controls)


def config_from_settings(s: Any) -> GenerationConfig:
    """A validated GenerationConfig from the app's settings (raises ConfigError with the reason)."""
    return GenerationConfig.chosen(
        temperature=float(s.temperature), top_k=int(s.top_k), top_p=float(s.top_p), seed=int(s.seed),
        max_new_tokens=int(s.max_new_tokens), speculate=bool(s.speculate), gamma=int(s.gamma),
        adaptive=bool(s.adaptive), confidence_cutoff=float(s.confidence_cutoff), tree_nodes=int(s.tree_nodes),
        repetition_penalty=float(s.repetition_penalty), stop_strings=tuple(q for q in s.stop_sequences if q))
