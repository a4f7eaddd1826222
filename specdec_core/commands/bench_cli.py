"""`specdec bench` and `specdec rank-drafts`: the command line of the measuring library (bench.py).

This module parses options, runs the library, prints its tables, writes its JSON and draws its plots.
torch, transformers and matplotlib are imported when a command runs, so `specdec --help` stays fast.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from specdec_core import defaults
from specdec_core.commands.cli_options import (
    add_generation_options,
    add_model_options,
    add_threads_option,
    config_from_args,
    finite_float,
    load_from_args,
    progress_bar,
    tree_nodes,
)
from specdec_core.measuring.bench import BenchError, BenchSettings, run_bench
from specdec_core.measuring.prompt_sets import BUNDLED_SETS, PromptCase, load_prompts
from specdec_core.measuring.rank import Candidate, parse_gammas, rank_drafts

# --------------------------------------------------------------------------- presentation


def _fmt(value: Any, spec: str = ".2f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, spec)
    return str(value)


def _table(header: list[str], rows: list[list[str]], text_columns: tuple[int, ...] = (0,)) -> str:
    """Fixed-width columns: numbers right-aligned, the `text_columns` left-aligned (the last one unpadded)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    last = len(header) - 1

    def line(cells: list[str]) -> str:
        out = [c.ljust(w) if i in text_columns else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        if last in text_columns:
            out[last] = cells[last]
        return "  ".join(out).rstrip()

    rule = ["-" * (len(h) if i == last and i in text_columns else w) for i, (h, w) in enumerate(zip(header, widths))]
    return "\n".join([line(header), line(rule)] + [line(r) for r in rows])


def format_bench(result: dict) -> str:
    """The benchmark as text: the set-up, the headline figures, then a table per prompt and per category."""
    setup = result["setup"]
    head = (f"{setup['verifier']} ({setup.get('verifier_weights') or setup.get('dtype')}) + {setup['drafter']}, "
            f"gamma {setup['gamma']}"
            f"{' (adaptive)' if setup['adaptive'] else ''}, {setup['max_new_tokens']} new tokens, "
            f"temperature {setup['temperature']}, {setup['prompts']} prompts x {setup['repeats']} repeats, "
            f"{setup['torch_threads']} thread(s){_kernel_note(setup)}, {setup['machine']}")
    figures = _bench_figures(result)
    width = max(len(name) for name, _ in figures)
    lines = [head, ""] + [f"{name.ljust(width)}  {value}" for name, value in figures]
    text = "\n".join(lines) + "\n\n" + _prompt_table(result)
    categories = result.get("by_category", [])
    if len(categories) > 1:
        text += "\n\n" + _table(["category", "prompts", "speedup", "accept", "tok/call"], [
            [row["category"], str(row["prompts"]), _fmt(row["speedup"]) + "x", _fmt(row["acceptance_rate"], ".0%"),
             _fmt(row["mean_accepted_length"])] for row in categories])
    if "llama_cpp" in result:
        text += "\n\n" + _engines_table(result)
    return text


def _engines_table(result: dict) -> str:
    """Our lanes and llama.cpp's side by side, or the one line that says why llama.cpp's did not run."""
    llama = result["llama_cpp"]
    if "skipped" in llama:
        return f"llama.cpp lanes: skipped, {llama['skipped']}"
    base, spec = result["baseline"], result["speculative"]
    rows = [["specdec alone", _fmt(base["tokens_per_s"], ".1f"), _fmt(base["end_to_end_tokens_per_s"], ".1f"), "-",
             "-", "1.00x", ""],
            ["specdec speculative", _fmt(spec["tokens_per_s"], ".1f"), _fmt(spec["end_to_end_tokens_per_s"], ".1f"),
             _fmt(spec["acceptance_rate"], ".0%"), _fmt(spec["mean_accepted_length"]), _fmt(result["speedup"]) + "x",
             ""]]
    for lane in llama["lanes"]:
        if "tokens_per_s" not in lane:
            why = "skipped" if "skipped" in lane else "failed"
            rows.append([lane["lane"], "-", "-", "-", "-", "-", f"{why}: {lane[why]}"])
            continue
        same = [row["same_text_as_ours"] for row in lane["per_prompt"] if "same_text_as_ours" in row]
        notes = [f"same text as ours on {sum(same)}/{len(same)} prompts"] if same else []
        if lane["draft"] and not lane["drafted"]:
            notes.append("the server drafted nothing")  # a draft it loaded but never used: the lane is plain
        rows.append([lane["lane"], _fmt(lane["tokens_per_s"], ".1f"), _fmt(lane["end_to_end_tokens_per_s"], ".1f"),
                     _fmt(lane["acceptance_rate"], ".0%"), _fmt(lane.get("mean_accepted_length")),
                     _fmt(lane.get("over_ours_alone")) + "x", "; ".join(notes)])
    head = (f"Beside llama.cpp ({llama['version'] or llama['server']}, {llama['threads']} thread(s), "
            f"prompts: {llama['prompt_format']})")
    return head + "\n\n" + _table(["engine", "tok/s", "end to end", "accept", "tok/call", "vs specdec alone", "note"],
                                   rows, text_columns=(0, 6))


def _bench_figures(result: dict) -> list[tuple[str, str]]:
    """(name, value) of each headline figure, transformers' and the memory's included when measured."""
    base, spec = result["baseline"], result["speculative"]
    figures = [
        ("baseline tokens/s", _fmt(base["tokens_per_s"], ".1f")),
        ("speculative tokens/s", _fmt(spec["tokens_per_s"], ".1f")),
        ("measured speedup", _fmt(result["speedup"]) + "x"),
        ("end-to-end speedup (prefill included)", _fmt(result["end_to_end_speedup"]) + "x"),
        ("acceptance rate", _fmt(spec["acceptance_rate"], ".1%")),
        ("mean accepted length (tokens/call)", _fmt(spec["mean_accepted_length"])),
        ("  predicted from α (independent tokens)", _fmt(spec["predicted_tokens_per_call"])),
        ("per-position acceptance", " ".join(f"{a:.2f}" for a in spec["per_position_acceptance"]) or "-"),
        ("draft / verify ms per round",
         f"{spec['draft_s_per_round'] * 1e3:.1f} / {spec['verify_s_per_round'] * 1e3:.1f}"),
        ("verify ms per call, speculation off", f"{base['verify_s_per_round'] * 1e3:.1f}"),
        ("c (draft per token / verify per call)", _fmt(spec["c"], ".3f")),
        ("rounds that drafted", _fmt(spec["drafting_rounds_fraction"], ".0%")),
        ("predicted speedup", _fmt(result["predicted_speedup"]) + "x"),
        ("efficiency (measured / predicted)", _fmt(result["efficiency"])),
        ("verify cost ratio (k+1 tokens / 1)", _fmt(result["verify_cost_ratio"])),
        ("efficiency given that cost", _fmt(result["efficiency_given_verify_cost"])),
        ("engine overhead per round", f"{spec['overhead_s_per_round'] * 1e3:.2f} ms "
                                      f"({spec['overhead_fraction']:.1%} of decoding)"),
    ]
    if "identical" in result:
        figures.append(("greedy replies identical to baseline", "yes" if result["identical"] else "NO"))
    hf = result.get("hf_assisted")
    if hf:
        figures += [("speculative tokens/s, end to end", _fmt(spec["end_to_end_tokens_per_s"], ".1f")),
                    (f"transformers assisted ({hf['method']}) tokens/s, end to end", _fmt(hf["tokens_per_s"], ".1f")),
                    ("ours / transformers (end to end)", _fmt(hf["ours_over_hf"]) + "x"),
                    ("verifier calls per reply, ours / transformers",
                     f"{spec['verifier_calls_per_reply']:.1f} / {hf['verifier_calls_per_reply']:.1f}")]
        if "identical" in hf:
            figures.append(("transformers' greedy text equals ours", "yes" if hf["identical"] else "NO"))
    if result.get("hf_unavailable"):
        figures.append(("transformers' reference", result["hf_unavailable"]))
    memory = result.get("memory")
    if memory and memory.get("peak_rss_bytes"):
        weights = " + ".join(f"{role} {size / 1e9:.2f}" for role, size in memory["weights_bytes"].items())
        figures.append(("peak RSS / weights (GB)", f"{memory['peak_rss_bytes'] / 1e9:.2f} / {weights} "
                                                   f"({memory['peak_over_weights']:.2f}x)"))
    return figures


def _prompt_table(result: dict) -> str:
    """One row per prompt: its speeds, acceptance, and (when measured) sameness and transformers' speed."""
    hf = result.get("hf_assisted")
    header = ["prompt", "tokens", "off tok/s", "on tok/s", "speedup", "accept", "tok/call", "predicted"]
    if "identical" in result:
        header.append("same")
    if hf:
        header.append("hf tok/s")
    rows = []
    for row in result["per_prompt"]:
        cells = [row["name"], str(row["new_tokens"]), _fmt(row["baseline_tokens_per_s"], ".1f"),
                 _fmt(row["speculative_tokens_per_s"], ".1f"), _fmt(row["speedup"]) + "x",
                 _fmt(row["acceptance_rate"], ".0%"), _fmt(row["mean_accepted_length"]),
                 _fmt(row["predicted_speedup"]) + "x"]
        if "identical" in result:
            cells.append("yes" if row["identical"] else f"no@{row['first_difference']}")
        if hf:
            cells.append(_fmt(row["hf_tokens_per_s"], ".1f"))
        rows.append(cells)
    return _table(header, rows)


def format_ranking(result: dict) -> str:
    setup = result["setup"]
    head = (f"Drafts for {setup['verifier']} on {setup['machine']}: gammas {setup['gammas']}, "
            f"{setup['prompts']} prompts x {setup['repeats']} repeats, {setup['max_new_tokens']} new tokens")
    rows = []
    for rank, row in enumerate(result["ranking"], 1):
        measured = "speedup" in row
        rows.append([str(rank) if measured else "-", row["draft"],
                     _fmt(row.get("speedup")) + ("x" if measured else ""), _fmt(row.get("best_gamma")),
                     _fmt(row.get("acceptance_rate"), ".0%") if measured else "-",
                     _fmt(row.get("c"), ".3f") if measured else "-",
                     _fmt(row.get("tokens_per_s"), ".1f") if measured else "-", row["verdict"]])
    return head + "\n\n" + _table(["#", "draft", "speedup", "best gamma", "accept", "c", "tok/s", "doctor"], rows,
                                    text_columns=(1, 7))


def plot_bench(result: dict, path: str) -> None:
    """Three panels: speedup per prompt, acceptance by draft position, predicted against measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise BenchError("--plot needs matplotlib: pip install matplotlib (or the project's [bench] extra)") \
            from error
    rows = result["per_prompt"]
    names = [r["name"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    x = range(len(rows))
    hf = "hf_assisted" in result
    width = 0.4 if hf else 0.7
    if hf:  # transformers' generate() cannot be timed without its prefill: compare end to end
        ax.bar([i - width / 2 for i in x], [r["end_to_end_speedup"] for r in rows], width, label="specdec")
        ax.bar([i + width / 2 for i in x], [r["hf_end_to_end_speedup"] for r in rows], width,
               label="transformers assisted generation")
        ax.legend(fontsize=8)
        ax.set_ylabel("speedup over speculation off (end to end)")
    else:
        ax.bar(list(x), [r["speedup"] for r in rows], width)
        ax.set_ylabel("speedup over speculation off")
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_xticks(list(x), names, rotation=60, ha="right", fontsize=8)
    ax.set_title("Measured speedup per prompt")
    ax = axes[1]
    acceptance = result["speculative"]["per_position_acceptance"]
    positions = list(range(1, len(acceptance) + 1))
    ax.bar(positions, acceptance, color="tab:green")
    ax.set_xticks(positions)
    ax.set_ylim(0, 1)
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted / drafted")
    ax.set_title("Acceptance by position")
    ax = axes[2]
    predicted = [r["predicted_speedup"] for r in rows]
    measured = [r["speedup"] for r in rows]
    ax.scatter(predicted, measured, label="prompts")
    ax.scatter([result["predicted_speedup"]], [result["speedup"]], marker="*", s=200, color="tab:red",
               label="all prompts")
    top = max([1.5, *predicted, *measured]) * 1.05
    ax.plot([0, top], [0, top], color="grey", lw=1, label="measured = predicted")
    ax.axhline(1.0, color="tab:orange", lw=1, ls="--", label="break-even")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("predicted speedup (measured α, c)")
    ax.set_ylabel("measured speedup")
    ax.set_title("Predicted against measured")
    ax.legend(fontsize=8)
    setup = result["setup"]
    fig.suptitle(f"{setup['verifier']} + {setup['drafter']}, γ={setup['gamma']}, {setup['machine']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- the commands


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _finite(value: Any) -> Any:
    """NaN (a figure with nothing to measure, e.g. no rounds) becomes null: strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _write_json(result: dict, target: str | None) -> None:
    if not target:
        return
    text = json.dumps(_finite(result), indent=2, allow_nan=False)
    if target == "-":
        print(text)
    else:
        Path(target).write_text(text + "\n", encoding="utf-8")
        _say(f"wrote {target}")


def _apply_threads(threads: int | None) -> None:
    from specdec_core.commands.threads import prefer_passive_waiting, set_threads

    prefer_passive_waiting()  # before torch loads (see threads.py)
    set_threads(threads)


def memory_figures(verifier, draft) -> dict:
    """The models' weights and this process's peak resident memory (bytes), and the peak over the weights."""
    from specdec_core.loading.resources import peak_rss_bytes, weight_bytes

    weights = {"verifier": weight_bytes(verifier.model)}
    if draft is not None:
        weights["draft"] = weight_bytes(draft.model)
    peak = peak_rss_bytes()
    return {"weights_bytes": weights, "peak_rss_bytes": peak,
            "peak_over_weights": peak / sum(weights.values()) if peak else None}


def cmd_bench(args) -> int:
    if args.no_speculation:
        raise BenchError("bench runs with speculation both off and on; drop --no-speculation")
    _apply_threads(args.threads)
    config = config_from_args(args)
    cases = load_prompts(args.prompts)
    if args.system:
        cases = [c if c.system else PromptCase(c.name, c.messages, args.system) for c in cases]
    if (args.proxy or args.replies) and not args.adapt:
        raise BenchError("--proxy and --replies measure online adaptation: add --adapt")
    server = _llama_cpp_server(args)  # before the models load: a wrong path is a one-line error at once
    pair = load_from_args(args)
    if args.adapt:
        return _cmd_adapt(args, config, cases, pair)
    from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter

    if args.hf_reference and isinstance(pair.drafter, HeadDrafter):
        raise BenchError(f"transformers' assisted generation cannot run {pair.draft.name}, a draft head that reads "
                         "the verifier's hidden states: drop --hf-reference, or compare with --drafter "
                         "prompt-lookup or a draft model")
    if args.hf_reference and isinstance(pair.drafter, HybridDrafter):
        raise BenchError("transformers' assisted generation has no hybrid of prompt lookup and a draft model: "
                         "drop --hf-reference, or compare with --drafter prompt-lookup or --drafter model")
    cross_vocabulary = pair.verdict is not None and pair.verdict.cross_vocabulary
    if args.hf_reference and cross_vocabulary and _same_row_count(pair.verifier, pair.draft):
        raise BenchError("transformers' assisted generation tells tokenizers apart by the models' vocabulary sizes, "
                         "which are equal here although the tokenizers differ: drop --hf-reference")
    settings = BenchSettings(repeats=args.repeats, hf_reference=args.hf_reference, cross_vocabulary=cross_vocabulary)
    result = run_bench(pair.engine, pair.verifier, pair.draft, cases, config, settings, progress=_say)
    result["setup"]["prompt_file"] = args.prompts
    result["memory"] = memory_figures(pair.verifier, pair.draft)
    result["llama_cpp"] = _llama_cpp_lanes(args, server, pair, cases, config, result) if server else \
        {"skipped": "no --llama-cpp PATH"}
    table_out = sys.stderr if args.json == "-" else sys.stdout
    print(format_bench(result), file=table_out, flush=True)
    _write_json(result, args.json)
    if args.plot:
        plot_bench(result, args.plot)
        _say(f"wrote {args.plot}")
    return 0


def _llama_cpp_server(args):
    """--llama-cpp's llama-server binary (None without the flag)."""
    if not args.llama_cpp:
        return None
    if args.adapt:
        raise BenchError("--llama-cpp runs beside the plain bench, not --adapt: drop one of them")
    from specdec_core.measuring.llama_cpp import find_server

    return find_server(args.llama_cpp)


def _kernel_note(setup: dict) -> str:
    """The header's note of the quantised kernel's threads, where they are not as many as PyTorch's."""
    kernel = setup.get("kernel_threads")
    return f" (products on {kernel})" if kernel and kernel != setup["torch_threads"] else ""


def _llama_cpp_lanes(args, server, pair, cases, config, result: dict) -> dict:
    """llama.cpp alone and with the draft (llama_cpp.py), on our GGUF files, prompts and thread count."""
    import torch

    from specdec_core.loading.gguf_cache import default_cache_dir
    from specdec_core.measuring import llama_cpp_figures
    from specdec_core.measuring.bench import chat_prompts
    from specdec_core.measuring.llama_cpp import LaneSettings, lane_models, run_llama_cpp

    models = lane_models(args.verifier or defaults.VERIFIER, pair.draft.spec if pair.draft else None,
                         default_cache_dir())
    # llama.cpp gets the threads our verifier's products use: the kernel's (both CPUs of a 2-CPU machine) or PyTorch's.
    settings = LaneSettings(threads=result["setup"].get("kernel_threads") or torch.get_num_threads(),
                            max_new_tokens=config.max_new_tokens,
                            repeats=args.repeats, draft_max=config.gamma, temperature=config.temperature,
                            top_k=config.top_k, top_p=config.top_p, seed=config.seed)
    ours = [row["text"] for row in result["per_prompt"]] if config.greedy else None
    # Where our products run on more threads than PyTorch's passes, llama.cpp alone also runs at PyTorch's count: its
    # best of the two is the figure to beat.
    others = (torch.get_num_threads(),) if settings.threads != torch.get_num_threads() else ()
    out = run_llama_cpp(server, models, chat_prompts(pair.verifier, cases, config), [case.name for case in cases],
                        settings, ours, say=_say, alone_threads=others)
    alone = result["baseline"]["tokens_per_s"]
    for lane in out["lanes"]:
        if lane.get("tokens_per_s") and alone:
            lane["over_ours_alone"] = lane["tokens_per_s"] / alone
    # Kept for the app, which shows llama.cpp's figure beside the model it describes (app/models_line.py).
    llama_cpp_figures.remember(default_cache_dir(), models.verifier, out, alone, len(cases), config.max_new_tokens)
    return out


def _cmd_adapt(args, config, cases, pair) -> int:
    """`bench --adapt`: the conversation replayed before and during online adaptation (adapt_bench.py)."""
    from specdec_core.drafting.adapt import AdaptSettings
    from specdec_core.measuring.adapt_bench import format_adapt_bench, run_adapt_bench

    chosen = {"steps": args.adapt_steps, "max_seconds": args.adapt_seconds, **adapt_options(args.adapt_option)}
    settings = AdaptSettings(**{name: value for name, value in chosen.items() if value is not None})
    if args.proxy:
        return _cmd_adapt_proxy(args, config, cases, pair, settings)
    result = run_adapt_bench(pair.engine, pair.verifier, cases, config, settings, history=args.history,
                             progress=_say)
    result["setup"]["prompt_file"] = args.prompts
    print(format_adapt_bench(result), file=sys.stderr if args.json == "-" else sys.stdout, flush=True)
    _write_json(result, args.json)
    return 0


def adapt_options(options: list[str]) -> dict:
    """`--adapt-option NAME=VALUE` -> AdaptSettings fields, each VALUE read as its field's type (a tuple
    field: comma-separated)."""
    import dataclasses

    from specdec_core.drafting.adapt import AdaptSettings

    fields = {field.name: type(field.default) for field in dataclasses.fields(AdaptSettings)}
    chosen = {}
    for option in options or []:
        name, _, value = option.partition("=")
        name = name.strip().replace("-", "_")
        if name not in fields or not value:
            raise BenchError(f"--adapt-option expects NAME=VALUE with NAME one of {', '.join(fields)} (got {option!r})")
        kind = fields[name]
        try:
            chosen[name] = (tuple(v for v in value.split(",") if v) if kind is tuple else
                            value.lower() in ("1", "true", "yes", "on") if kind is bool else kind(value))
        except ValueError:
            raise BenchError(f"--adapt-option {name}: {value!r} is not a {kind.__name__}") from None
    return chosen


def _cmd_adapt_proxy(args, config, cases, pair, settings) -> int:
    """`bench --adapt --proxy`: teacher-forced agreement before and after adaptation (adapt_proxy.py)."""
    from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter, model_drafter_of
    from specdec_core.measuring.adapt_proxy import ChainRounds, format_proxy, record_turns, run_proxy

    head_drafter = model_drafter_of(pair.engine.drafter)
    if not isinstance(head_drafter, HeadDrafter):
        raise BenchError("--adapt needs a draft head (only a head adapts): use the embedded default or pass "
                         "--draft with a head's folder")
    if len(cases) < 2:
        raise BenchError("--adapt replays a conversation: the prompt set needs at least two turns")
    cache = Path(args.replies).expanduser() if args.replies else None
    turns = record_turns(pair.engine, pair.verifier.tokenizer, pair.verifier.context_length, cases,
                         config.max_new_tokens, args.history, cache, progress=_say)
    # The chain's rounds can be replayed for the embedded default's drafter only: lookup, else the phrase
    # store, else one head token.
    hybrid = pair.engine.drafter
    one_token = isinstance(hybrid, HybridDrafter) and hybrid.model_tokens == 1
    rounds = ChainRounds(config.gamma, config.max_new_tokens, pair.verifier.eos_token_ids,
                         pair.engine.vocab_size, hybrid.phrases) if one_token else None
    result = run_proxy(head_drafter.model, pair.verifier.model, turns, settings, rounds, progress=_say)
    result["setup"] = {"prompt_file": args.prompts, "history": args.history, "max_new_tokens": config.max_new_tokens}
    print(format_proxy(result), file=sys.stderr if args.json == "-" else sys.stdout, flush=True)
    _write_json(result, args.json)
    return 0


def _same_row_count(verifier, draft) -> bool:
    return verifier.model.config.get_text_config().vocab_size == draft.model.config.get_text_config().vocab_size


def cmd_rank_drafts(args) -> int:
    from specdec_core.engine import Engine
    from specdec_core.loading.models import load_model
    from specdec_core.pairs.pairing import draft_dtype_for

    _apply_threads(args.threads)
    config = config_from_args(args)
    gammas = parse_gammas(args.gammas)
    cases = load_prompts(args.prompts)
    load = dict(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    verifier = load_model(args.verifier or defaults.VERIFIER, progress=progress_bar(), **load)
    candidates = ([] if args.no_prompt_lookup else [Candidate(None)]) + [Candidate(spec) for spec in args.drafts]
    if not candidates:
        raise BenchError("nothing to rank: pass --drafts SPEC ... (or drop --no-prompt-lookup)")
    if args.hybrid is not None and args.hybrid < 1:
        raise BenchError(f"--hybrid expects the draft's tokens per round, at least 1 (got {args.hybrid})")
    # Each draft in the dtype `specdec generate` would give it (pairing.draft_dtype_for): what ranks is what runs.
    draft_load = {**load, "dtype": draft_dtype_for(args.dtype)}
    result = rank_drafts(Engine(verifier), verifier, candidates, cases, config, gammas, args.repeats,
                         load=lambda spec: load_model(spec, **draft_load), progress=_say, hybrid_tokens=args.hybrid)
    result["setup"]["prompt_file"] = args.prompts
    table_out = sys.stderr if args.json == "-" else sys.stdout
    print(format_ranking(result), file=table_out, flush=True)
    _write_json(result, args.json)
    return 0


def _add_adapt_options(bench) -> None:
    """`bench --adapt` and its settings (adapt_bench.py, adapt_proxy.py)."""
    adapt = bench.add_argument_group("online adaptation of a draft head")
    adapt.add_argument("--adapt", action="store_true",
                       help="replay the prompt set's turns in order as one conversation, with the original head "
                            "and then adapting the head after each reply; report acceptance before and after")
    adapt.add_argument("--history", type=int, default=4, help="--adapt: earlier exchanges each turn sees (default 4)")
    # No defaults here: adapt.py (which imports torch) has them, and `specdec --help` stays fast.
    adapt.add_argument("--adapt-steps", type=int, metavar="N", help="--adapt: optimiser steps after each reply")
    adapt.add_argument("--adapt-seconds", type=finite_float, metavar="S",
                       help="--adapt: at most this long after each reply")
    adapt.add_argument("--adapt-option", action="append", metavar="NAME=VALUE",
                       help="--adapt: any other adaptation setting (specdec_core/drafting/adapt.py, AdaptSettings), "
                            "e.g. lr=3e-4 or chain_steps=1; repeat for more")
    adapt.add_argument("--proxy", action="store_true",
                       help="--adapt without drafting: the head's teacher-forced agreement with the verifier's "
                            "replies on each turn, before and after adapting on the earlier turns (fast)")
    adapt.add_argument("--replies", metavar="FILE",
                       help="--proxy: keep the verifier's recorded replies in FILE and reuse them next time")


def add_parser(subparsers) -> None:
    """Register `specdec bench` and `specdec rank-drafts` (called by cli.build_parser)."""
    bench = subparsers.add_parser(
        "bench", help="measure speculation against plain decoding (and transformers' assisted generation)",
        description="Run each prompt with speculation off and on, alternating, after a warm-up, and report "
                    "medians: tokens/s, speedup, acceptance, c, predicted speedup and efficiency.")
    bench.add_argument("--prompts", default="all", metavar="FILE",
                       help="one chat prompt per line (text or JSON), or a bundled set: "
                            f"{', '.join(BUNDLED_SETS)}, all (default: all)")
    bench.add_argument("--repeats", type=int, default=3, help="runs of each prompt in each mode (default 3)")
    bench.add_argument("--hf-reference", action="store_true",
                       help="also time transformers' generate(assistant_model=..., num_assistant_tokens=gamma) "
                            "(with assistant_tokenizer for a draft with another tokenizer) or its prompt lookup, on "
                            "the same prompts, pair and gamma")
    bench.add_argument("--json", metavar="OUT", help="write the results as one JSON object (- for stdout)")
    bench.add_argument("--plot", metavar="PNG", help="draw speedup per prompt, acceptance by position and "
                                                     "predicted against measured speedup (needs matplotlib)")
    bench.add_argument("--llama-cpp", metavar="PATH",
                       help="also run llama.cpp's llama-server (PATH: a build folder or the binary; "
                            "scripts/build_llama_cpp.sh builds one) on the verifier's GGUF file alone and with the "
                            "draft's, on the same prompts at the same thread count")
    _add_adapt_options(bench)
    add_threads_option(bench)
    add_model_options(bench)
    add_generation_options(bench)
    bench.set_defaults(func=cmd_bench, max_new_tokens=48)

    rank = subparsers.add_parser(
        "rank-drafts", help="rank candidate drafts (and prompt lookup) for a verifier by measured speedup",
        description="For each candidate draft: the doctor's verdict, then the acceptance rate, c and speedup "
                    "measured at each draft length; sorted by the best speedup.")
    rank.add_argument("--verifier", default=None, metavar="SPEC",
                      help="hub id, local folder, .gguf file or embedded name (default: the embedded verifier)")
    rank.add_argument("--drafts", nargs="*", default=[], metavar="SPEC", help="candidate draft models")
    rank.add_argument("--prompts", default="all", metavar="FILE",
                      help=f"prompt file or bundled set ({', '.join(BUNDLED_SETS)}, all; default: all)")
    rank.add_argument("--gammas", default="2,4,8", help="draft lengths to try (default 2,4,8)")
    rank.add_argument("--repeats", type=int, default=1, help="runs of each prompt per setting (default 1)")
    rank.add_argument("--no-prompt-lookup", action="store_true", help="rank draft models only")
    rank.add_argument("--hybrid", type=int, metavar="N", help="also rank each draft as a hybrid with prompt lookup "
                      "(the lookup's copy where it finds one, else N tokens from the draft)")
    rank.add_argument("--json", metavar="OUT", help="write the ranking as JSON (- for stdout)")
    rank.add_argument("--device", default="auto")
    rank.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    rank.add_argument("--trust-remote-code", action="store_true")
    add_threads_option(rank)
    group = rank.add_argument_group("generation")
    group.add_argument("--max-new-tokens", type=int, default=48)
    group.add_argument("--temperature", type=float, default=0.0)
    group.add_argument("--top-k", type=int, default=0)
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--tree-nodes", type=tree_nodes, default="auto", metavar="N|auto",
                       help="draft trees of at most N nodes per round for the draft models (see generate --help)")
    rank.set_defaults(func=cmd_rank_drafts, verifier=None, gamma=defaults.GAMMA, adaptive=False, confidence_cutoff=0.0,
                      no_speculation=False)
