"""The measuring library behind `specdec bench` and `specdec rank-drafts` (their command line is
bench_cli.py): speculation measured, not assumed.

`bench` runs every prompt with speculation off and on (and, with --hf-reference, through transformers'
own assisted generation), alternating, after a warm-up, in one process, and reports medians.
`rank-drafts` (rank.py) answers "which draft should I use with this verifier on this machine" with these measurements.

How each figure is measured (all runs start from empty KV caches, so no run profits from another):
- tokens/s            = new tokens / decode wall time, from the Prefilled event to the Finished event
                        (the stats module's definition, measured by the caller's clock, so it includes
                        the time spent building and yielding events);
- end-to-end tokens/s = new tokens / wall time from the call to the Finished event (prefill included).
                        transformers' generate() cannot be split, so the comparison with it uses this.
                        A separate draft model reads the prompt and drafts round 1 during the verifier's
                        prefill where a core is free (Engine.drafts_ahead): decode time then leaves that
                        drafting out, so only end-to-end figures compare with runs made without it;
- overhead            = decode wall time minus the time spent inside the two models' forward passes
                        (a draft pass still running beside the prefill when it ends counts as decode:
                        the overhead reads low by up to one draft pass a reply);
- c                   = draft time per drafted token / verifier time per speculative call (stats.py);
- predicted speedup   = (f E + 1 - f) / (f g c + 1), with E = (1 - a^(g+1)) / (1 - a) the expected
                        tokens per call (Leviathan et al. 2023, eq. 1), a the acceptance rate, g the mean
                        draft length of the rounds that drafted and f the share of rounds that drafted
                        (prompt lookup drafts nothing when it finds no match); f = 1 gives the paper's
                        E / (g c + 1);
- efficiency          = measured speedup / predicted speedup;
- verify cost ratio   = verifier time per speculative call / per plain call. The prediction assumes
                        checking g + 1 tokens costs as much as producing one; on a CPU it does not,
                        and this ratio is the factor the prediction misses.
Medians are taken over repeats of per-repeat totals (tokens and seconds summed over the prompt set).

This module knows the engine only through its event stream and its caches' counters; the rounds are
tallied by stats.StatsAccumulator, the engine's own tally. torch and transformers are imported when a
measurement runs, so `specdec --help` stays fast.
"""

from __future__ import annotations

import datetime
import math
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec_core.config import GenerationConfig
from specdec_core.errors import ConfigError, SpecdecError
from specdec_core.events import Finished, Prefilled, RoundVerified
from specdec_core.measuring.prompt_sets import PromptCase
from specdec_core.stats import StatsAccumulator, expected_tokens_per_call

if TYPE_CHECKING:
    from specdec_core.engine import Engine
    from specdec_core.loading.models import LoadedModel


class BenchError(SpecdecError):
    pass


# --------------------------------------------------------------------------- one timed reply


@dataclass
class Reply:
    """One timed reply: ours (speculation off or on) or transformers' own generate()."""

    kind: str  # "off" | "on" | "hf"
    token_ids: tuple[int, ...]
    wall_s: float  # call -> last token, prefill included
    decode_s: float  # Prefilled event -> Finished event (ours only; hf: equals wall_s)
    forward_s: float = 0.0  # inside the models' forward passes during decoding
    verifier_calls: int = 0  # the verifier's forward passes (ours: the prefill is one; hf: its first checks drafts)
    # The rounds, folded from the RoundVerified events (stats.py's tally; empty for hf): verifier calls
    # during decoding, drafted and accepted tokens per position, draft and verify time.
    tally: StatsAccumulator = field(default_factory=StatsAccumulator)

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)


def _forwards(engine: Engine) -> list:
    from specdec_core.drafting.drafters import HeadDrafter, ModelDrafter, model_drafter_of
    from specdec_core.verification.kv import CachedForward

    out = [engine.verifier_forward]
    runs_model = model_drafter_of(engine.drafter)
    if isinstance(runs_model, ModelDrafter) or isinstance(getattr(runs_model, "forward", None), CachedForward):
        out.append(runs_model.forward)  # a draft model's cache (its own vocabulary's too: cross_vocab.py)
    elif isinstance(runs_model, HeadDrafter):
        out.append(runs_model)  # counts the head's own forward time
    return out


def time_reply(engine: Engine, prompt_ids: Sequence[int], config: GenerationConfig) -> Reply:
    """Run one reply from empty caches, consuming every event the way a viewer would."""
    engine.reset_caches()
    forwards = _forwards(engine)
    calls = engine.verifier_forward.forward_calls
    start = time.perf_counter()
    decode_start, forward_start = start, 0.0
    reply = Reply(kind="on" if config.speculate else "off", token_ids=(), wall_s=0.0, decode_s=0.0)
    finished: Finished | None = None
    for event in engine.generate(prompt_ids, config):
        if isinstance(event, Prefilled):
            decode_start = time.perf_counter()
            forward_start = sum(f.forward_s for f in forwards)
        elif isinstance(event, RoundVerified):
            event.add_to(reply.tally)
        elif isinstance(event, Finished):
            finished = event
    end = time.perf_counter()
    assert finished is not None
    if finished.error:
        raise BenchError(f"generation failed during the benchmark: {finished.error}")
    reply.token_ids = finished.token_ids
    reply.wall_s = end - start
    reply.decode_s = end - decode_start
    reply.forward_s = sum(f.forward_s for f in forwards) - forward_start
    reply.verifier_calls = engine.verifier_forward.forward_calls - calls
    return reply


def hf_reference(verifier: LoadedModel, draft: LoadedModel | None, prompt_ids: Sequence[int],
                 config: GenerationConfig, max_ngram: int = 3, cross_vocabulary: bool = False) -> Reply:
    """transformers' own assisted generation on the same pair, prompt and draft length.

    With a draft model: generate(assistant_model=draft) with `num_assistant_tokens` = gamma and the
    constant schedule ("heuristic_transient", its +2/-1 rule, when --adaptive), and no confidence cutoff
    unless ours has one. A draft with another tokenizer (`cross_vocabulary`) also passes both tokenizers
    (`tokenizer`, `assistant_tokenizer`): transformers' universal assisted generation, string-level when
    greedy and token-level intersection when sampling (which prunes the draft's output layer in place: pass
    a copy). Without a draft: prompt lookup with `prompt_lookup_num_tokens` = gamma."""
    import torch

    model = verifier.model
    inputs = torch.tensor([list(prompt_ids)], dtype=torch.long, device=verifier.device)
    sampling: dict[str, Any] = {"do_sample": False}
    if not config.greedy:
        sampling = {"do_sample": True, "temperature": config.temperature, "top_k": config.top_k,
                    "top_p": config.top_p}
    eos = sorted(verifier.eos_token_ids)
    kwargs: dict[str, Any] = dict(
        max_new_tokens=config.max_new_tokens, eos_token_id=eos, attention_mask=torch.ones_like(inputs),
        pad_token_id=verifier.tokenizer.pad_token_id if verifier.tokenizer.pad_token_id is not None else eos[0],
        **sampling)
    saved = None
    if draft is not None:
        assistant_config = draft.model.generation_config
        saved = {key: getattr(assistant_config, key, None) for key in
                 ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")}
        # The candidate generator reads these from the assistant's own generation config.
        assistant_config.num_assistant_tokens = config.gamma
        assistant_config.num_assistant_tokens_schedule = "heuristic_transient" if config.adaptive else "constant"
        assistant_config.assistant_confidence_threshold = config.confidence_cutoff
        kwargs.update(assistant_model=draft.model, num_assistant_tokens=config.gamma)
        if cross_vocabulary:
            kwargs.update(tokenizer=verifier.tokenizer, assistant_tokenizer=draft.tokenizer)
    else:
        kwargs.update(prompt_lookup_num_tokens=config.gamma, max_matching_ngram_size=max_ngram)
    if not config.greedy:
        torch.manual_seed(config.seed)
    calls = [0]
    counter = model.register_forward_pre_hook(lambda module, args: calls.__setitem__(0, calls[0] + 1))
    try:
        start = time.perf_counter()
        with torch.inference_mode():
            output = model.generate(inputs, **kwargs)
        if verifier.device.type == "cuda":
            torch.cuda.synchronize(verifier.device)
        wall = time.perf_counter() - start
    finally:
        counter.remove()
        if saved is not None:
            for key, value in saved.items():
                setattr(draft.model.generation_config, key, value)  # type: ignore[union-attr]
    new = output[0, inputs.shape[1]:].tolist()  # like ours, ends with the EOS when one was generated
    return Reply(kind="hf", token_ids=tuple(new), wall_s=wall, decode_s=wall, verifier_calls=calls[0])


# --------------------------------------------------------------------------- aggregation


def _sum(replies: Iterable[Reply], attribute: str) -> float:
    return float(sum(getattr(r, attribute) for r in replies))


def summarize(replies: list[Reply]) -> dict:
    """Totals of one kind of run (off, on or hf) -> its figures.

    Acceptance, c and the draft lengths come from the replies' merged tallies (stats.py's definitions);
    tokens/s and overhead from this module's own clock (see the module docstring)."""
    tokens = _sum(replies, "new_tokens")
    decode, wall, forward_s = _sum(replies, "decode_s"), _sum(replies, "wall_s"), _sum(replies, "forward_s")
    tally = StatsAccumulator.total(r.tally for r in replies)
    figures = tally.snapshot()
    rounds, drafting = tally.rounds, tally.drafting_rounds
    alpha, mean_gamma, c = figures.acceptance_rate, figures.mean_gamma, figures.c
    verify_per_call = tally.verify_s / rounds if rounds else 0.0
    share = drafting / rounds if rounds else 0.0
    overhead = max(0.0, decode - forward_s)
    return {
        "new_tokens": int(tokens),
        "tokens_per_s": tokens / decode if decode else 0.0,
        "end_to_end_tokens_per_s": tokens / wall if wall else 0.0,
        "prefill_s_per_reply": (wall - decode) / len(replies) if replies else 0.0,
        "verifier_calls_per_reply": _sum(replies, "verifier_calls") / len(replies) if replies else 0.0,
        "rounds": int(rounds),
        "acceptance_rate": alpha,
        "mean_accepted_length": tokens / rounds if rounds else 0.0,
        "per_position_acceptance": list(figures.per_position_acceptance),
        "draft_s_per_round": tally.draft_s / rounds if rounds else 0.0,
        "verify_s_per_round": verify_per_call,
        "overhead_s_per_round": overhead / rounds if rounds else 0.0,
        "overhead_fraction": overhead / decode if decode else 0.0,
        "c": c,
        "mean_gamma": mean_gamma,
        "drafting_rounds_fraction": share,
        "predicted_tokens_per_call": share * expected_tokens_per_call(alpha, mean_gamma) + 1 - share
        if drafting else 1.0,
        "predicted_speedup": predict_speedup(alpha, mean_gamma, c, share) if drafting else 1.0,
    }


def predict_speedup(alpha: float, gamma: float, c: float, share: float = 1.0) -> float:
    """Leviathan et al.'s E / (g c + 1), mixed with plain rounds when only a share of rounds drafts."""
    tokens = share * expected_tokens_per_call(alpha, gamma) + (1.0 - share)
    return tokens / (share * gamma * c + 1.0)


def _median(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def _median_summary(per_repeat: list[dict]) -> dict:
    """Each figure's median over repeats (lists element-wise)."""
    out: dict = {}
    for key in per_repeat[0]:
        values = [s[key] for s in per_repeat]
        if isinstance(values[0], list):
            width = min(len(v) for v in values)
            out[key] = [_median([v[i] for v in values]) for i in range(width)]
        elif isinstance(values[0], int):
            out[key] = int(_median(values))
        else:
            out[key] = _median(values)
    return out


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# --------------------------------------------------------------------------- bench


def chat_prompts(verifier: LoadedModel, cases: Sequence[PromptCase], config: GenerationConfig) -> list[list[int]]:
    """Each case through the verifier's chat template, as every lane reads it (llama.cpp's too: llama_cpp.py)."""
    from specdec_core.text.chat import build_prompt

    return [build_prompt(verifier.tokenizer, list(case.messages), system=case.system,
                         context_length=verifier.context_length,
                         reserve_new_tokens=config.max_new_tokens).ids for case in cases]


@dataclass(frozen=True)
class BenchSettings:
    repeats: int = 3
    hf_reference: bool = False
    cross_vocabulary: bool = False  # the draft has another tokenizer (transformers then needs both)
    warmup_tokens: int = 16  # the warm-up reply's length (first calls allocate and pick kernels)


def run_bench(engine: Engine, verifier: LoadedModel, draft: LoadedModel | None, cases: list[PromptCase],
              config: GenerationConfig, settings: BenchSettings,
              progress: Callable[[str], None] | None = None) -> dict:
    """Time every prompt with speculation off and on (and transformers' reference), alternating."""
    say = progress or (lambda message: None)
    if settings.repeats < 1:
        raise ConfigError(f"--repeats must be at least 1 (got {settings.repeats})")
    if engine.drafter is None:
        raise ConfigError("the benchmark needs a drafter (a draft model or prompt lookup)")
    prompts = chat_prompts(verifier, cases, config)
    off, on = config.with_(speculate=False), config.with_(speculate=True)
    kinds = ["off", "on"] + (["hf"] if settings.hf_reference else [])
    hf_draft = draft
    if settings.hf_reference and settings.cross_vocabulary and draft is not None and not config.greedy:
        import copy
        import dataclasses

        # transformers' sampling path prunes its assistant's output layer in place; ours must keep its own.
        hf_draft = dataclasses.replace(draft, model=copy.deepcopy(draft.model))

    def run(kind: str, ids: Sequence[int], cfg_off=off, cfg_on=on) -> Reply:
        if kind == "hf":
            return hf_reference(verifier, hf_draft, ids, cfg_on, cross_vocabulary=settings.cross_vocabulary)
        return time_reply(engine, ids, cfg_off if kind == "off" else cfg_on)

    say("warming up")
    warm = config.with_(max_new_tokens=min(settings.warmup_tokens, config.max_new_tokens))
    warm_off, warm_on = warm.with_(speculate=False), warm.with_(speculate=True)
    for kind in ("off", "on"):
        run(kind, prompts[0], warm_off, warm_on)
    reference_failed = ""
    if "hf" in kinds:
        try:
            run("hf", prompts[0], warm_off, warm_on)
        except Exception as error:  # noqa: BLE001 - transformers' reference is theirs; ours must still run
            import transformers

            reference_failed = (f"transformers {transformers.__version__} assisted generation failed, so the bench "
                                f"runs without it: {type(error).__name__}: {error}")
            say(reference_failed)
            kinds.remove("hf")

    # replies[kind][prompt][repeat]
    replies: dict[str, list[list[Reply]]] = {kind: [[] for _ in cases] for kind in kinds}
    for repeat in range(settings.repeats):
        for p, ids in enumerate(prompts):
            say(f"repeat {repeat + 1}/{settings.repeats}, prompt {p + 1}/{len(prompts)} ({cases[p].name})")
            # Alternate the order from one prompt and repeat to the next, so that neither mode always
            # runs first (caches, clocks and the neighbours' load drift over a run).
            shift = (repeat + p) % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                replies[kind][p].append(run(kind, ids))
    result = _bench_result(cases, prompts, replies, config, settings, verifier, engine, draft)
    if reference_failed:
        result["hf_unavailable"] = reference_failed
    return result


def _bench_result(cases, prompts, replies, config: GenerationConfig, settings: BenchSettings, verifier, engine,
                  draft) -> dict:
    """The benchmark's JSON: the headline figures (medians over repeats), then per prompt and per category."""
    by_repeat = {kind: [summarize([replies[kind][p][r] for p in range(len(cases))]) for r in range(settings.repeats)]
                 for kind in replies}
    result: dict[str, Any] = {"setup": _setup(config, settings, verifier, engine, draft, len(cases)),
                              **_headline(by_repeat)}
    rows = [_prompt_row(case, prompts[p], {kind: replies[kind][p] for kind in replies}, config, verifier)
            for p, case in enumerate(cases)]
    if config.greedy:
        result["identical"] = all(row["identical"] for row in rows)
    if "hf" in replies:
        result["hf_assisted"] = _hf_summary(by_repeat, rows, config, settings, draft)
    result["per_prompt"] = rows
    result["by_category"] = _by_category(cases, replies, settings.repeats)
    return result


def _headline(by_repeat: dict[str, list[dict]]) -> dict[str, Any]:
    """Baseline and speculative figures, and the speedup measured against the one predicted."""
    baseline = _median_summary(by_repeat["off"])
    speculative = _median_summary(by_repeat["on"])
    speedups = [on["tokens_per_s"] / off["tokens_per_s"] for on, off in zip(by_repeat["on"], by_repeat["off"])]
    e2e = [on["end_to_end_tokens_per_s"] / off["end_to_end_tokens_per_s"]
           for on, off in zip(by_repeat["on"], by_repeat["off"])]
    speedup = _median(speedups)
    predicted = speculative["predicted_speedup"]
    verify_ratio = speculative["verify_s_per_round"] / baseline["verify_s_per_round"] \
        if baseline["verify_s_per_round"] else float("nan")
    return {
        "baseline": {k: baseline[k] for k in ("tokens_per_s", "end_to_end_tokens_per_s", "new_tokens",
                                              "prefill_s_per_reply", "verifier_calls_per_reply",
                                              "verify_s_per_round",
                                              "overhead_s_per_round", "overhead_fraction")},
        "speculative": {k: v for k, v in speculative.items() if k != "predicted_speedup"},
        "speedup": speedup,
        "end_to_end_speedup": _median(e2e),
        "predicted_speedup": predicted,
        "efficiency": speedup / predicted if predicted else float("nan"),
        "verify_cost_ratio": verify_ratio,
        "efficiency_given_verify_cost": speedup * verify_ratio / predicted if predicted else float("nan"),
    }


def _prompt_row(case: PromptCase, prompt: Sequence[int], replies: dict[str, list[Reply]], config: GenerationConfig,
                verifier) -> dict[str, Any]:
    """One prompt's figures over its repeats (`replies[kind][repeat]`), and whether every reply was the same."""
    off, on = replies["off"], replies["on"]
    off_s, on_s = summarize(off), summarize(on)
    speedups = [b.new_tokens / b.decode_s / (a.new_tokens / a.decode_s) if a.decode_s and b.decode_s and
                a.new_tokens else float("nan") for a, b in zip(off, on)]
    row: dict[str, Any] = {
        "name": case.name, "prompt_tokens": len(prompt), "turns": len(case.messages),
        "new_tokens": on[0].new_tokens,
        "baseline_tokens_per_s": _median([r.new_tokens / r.decode_s for r in off]),
        "speculative_tokens_per_s": _median([r.new_tokens / r.decode_s for r in on]),
        "speedup": _median(speedups),
        "acceptance_rate": on_s["acceptance_rate"],
        "mean_accepted_length": on_s["mean_accepted_length"],
        "c": on_s["c"],
        "predicted_speedup": on_s["predicted_speedup"],
        "verify_cost_ratio": on_s["verify_s_per_round"] / off_s["verify_s_per_round"]
        if off_s["verify_s_per_round"] else float("nan"),
    }
    reference = off[0].token_ids
    if config.greedy:
        differences = [_first_difference(reference, r.token_ids) for r in on + off]
        first = next((d for d in differences if d is not None), None)
        row["identical"] = first is None
        row["first_difference"] = first
    row["end_to_end_speedup"] = _median([a.wall_s / b.wall_s * b.new_tokens / a.new_tokens
                                         for a, b in zip(off, on) if a.new_tokens])
    if "hf" in replies:
        hf = replies["hf"]
        row["hf_tokens_per_s"] = _median([r.new_tokens / r.wall_s for r in hf])
        row["hf_end_to_end_speedup"] = _median([a.wall_s / h.wall_s * h.new_tokens / a.new_tokens
                                                for a, h in zip(off, hf) if a.new_tokens])
        row["speculative_end_to_end_tokens_per_s"] = _median([r.new_tokens / r.wall_s for r in on])
        if config.greedy:
            row["hf_identical"] = all(r.token_ids == reference for r in hf)
    row["text"] = verifier.tokenizer.decode(list(on[0].token_ids), skip_special_tokens=True)
    return row


def _hf_summary(by_repeat: dict[str, list[dict]], rows: list[dict], config: GenerationConfig,
                settings: BenchSettings, draft) -> dict[str, Any]:
    """transformers' assisted generation on the same prompts, against our baseline and our speculation."""
    hf = _median_summary(by_repeat["hf"])
    ratio = [on["end_to_end_tokens_per_s"] / h["end_to_end_tokens_per_s"]
             for on, h in zip(by_repeat["on"], by_repeat["hf"])]
    summary = {
        "tokens_per_s": hf["end_to_end_tokens_per_s"],  # end to end: generate() cannot be split
        "speedup_vs_baseline": _median([h["end_to_end_tokens_per_s"] / off["end_to_end_tokens_per_s"]
                                        for h, off in zip(by_repeat["hf"], by_repeat["off"])]),
        "ours_over_hf": _median(ratio),
        "verifier_calls_per_reply": hf["verifier_calls_per_reply"],  # its first call also reads the prompt
        "method": ("assistant_model + assistant_tokenizer" if settings.cross_vocabulary else "assistant_model")
        if draft is not None else "prompt_lookup_num_tokens",
    }
    if config.greedy:
        summary["identical"] = all(row["hf_identical"] for row in rows)
    return summary


def category_of(case: PromptCase) -> str:
    """A prompt's category: its name up to the first '-' ("qa-capital" -> "qa"; "tasks-3" -> "tasks")."""
    return case.name.split("-", 1)[0]


def _by_category(cases, replies, repeats: int) -> list[dict]:
    """Each category's speedup and tokens per call, computed as the whole run's are: the median over
    repeats of its prompts' total tokens/s on over off."""
    rows = []
    for category in dict.fromkeys(category_of(case) for case in cases):
        members = [p for p, case in enumerate(cases) if category_of(case) == category]
        per_repeat = {kind: [summarize([replies[kind][p][r] for p in members]) for r in range(repeats)]
                      for kind in ("off", "on")}
        on = _median_summary(per_repeat["on"])
        rows.append({
            "category": category, "prompts": len(members),
            "speedup": _median([a["tokens_per_s"] / b["tokens_per_s"] if b["tokens_per_s"] else float("nan")
                                for a, b in zip(per_repeat["on"], per_repeat["off"])]),
            "acceptance_rate": on["acceptance_rate"], "mean_accepted_length": on["mean_accepted_length"],
        })
    return rows


def _setup(config: GenerationConfig, settings: BenchSettings, verifier, engine, draft, n_prompts: int) -> dict:
    import os

    import torch
    import transformers

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "verifier": verifier.name, "drafter": engine.drafter.name if engine.drafter else None,
        "draft": draft.name if draft is not None else None,
        "device": str(verifier.device), "dtype": str(verifier.dtype).removeprefix("torch."),
        "verifier_weights": verifier.weights, "draft_weights": draft.weights if draft is not None else None,
        "gamma": config.gamma, "adaptive": config.adaptive, "max_new_tokens": config.max_new_tokens,
        "tree_nodes": engine.tree_nodes(config) if engine.grows_trees else 0,
        "temperature": config.temperature, "seed": config.seed, "repeats": settings.repeats,
        "prompts": n_prompts, "torch_threads": torch.get_num_threads(), "kernel_threads": _kernel_threads(verifier),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default (spin)"),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "machine": machine_description(verifier.device),
    }


def _kernel_threads(verifier: LoadedModel) -> int | None:
    """The threads of a quantised verifier's products in the kernel (qkernel.threads), or None where it runs none."""
    from specdec_core.loading import qkernel, quantised

    if verifier.device.type != "cpu" or not quantised.runs_gguf_types(verifier.weights):
        return None
    return qkernel.threads()


def machine_description(device=None) -> str:
    import os

    import torch

    if device is not None and getattr(device, "type", None) == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()}"
