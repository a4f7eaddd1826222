"""``python -m distill <step>``: the distillation pipeline's command line (see __init__)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from specdec_core.loading.resources import assets_dir

# Before torch loads (commands import it lazily): idle OpenMP threads sleep instead of spinning, which
# keeps two threads from crawling when another process shares the cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ASSETS = assets_dir()  # the checkout's assets/ (in an editable install): where the steps write
DEFAULT_WORK = Path(".distill")
DEFAULT_NAME = "smollm2-135m-draft"


def _load_verifier(args):
    from specdec_core.loading.models import load_model
    from specdec_core.loading.progress import tqdm_progress

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return load_model(args.verifier, device=args.device, dtype=args.dtype, progress=tqdm_progress())


def _special_ids(verifier) -> list[int]:
    tokenizer = verifier.tokenizer
    ids = set(verifier.eos_token_ids) | set(tokenizer.all_special_ids)
    return sorted(i for i in ids if i is not None and 0 <= i < len(tokenizer))


def cmd_prompts(args) -> None:
    from distill.prompts import build_extra_train_set, build_prompt_sets, write_jsonl

    train, held_out = build_prompt_sets(seed=args.seed)
    extra = build_extra_train_set(seed=args.seed)
    write_jsonl(args.prompts / "distill-train.jsonl", train)
    write_jsonl(args.prompts / "distill-train-extra.jsonl", extra)
    write_jsonl(args.prompts / "distill-heldout.jsonl", held_out)
    print(f"{len(train)} + {len(extra)} training and {len(held_out)} held-out prompts in {args.prompts}")


def cmd_generate(args) -> None:
    from distill.data import generate_replies
    from distill.prompts import read_training_jsonl

    set_name = "" if args.set == "train" else args.set  # the first set keeps its unsuffixed names
    prompts = read_training_jsonl(args.prompts / f"distill-train{'-' * bool(set_name)}{set_name}.jsonl")
    generate_replies(_load_verifier(args), prompts[args.skip:][:args.limit or None], args.work,
                     modes=args.modes.split(","), shard_size=args.shard_size, batch_size=args.batch_size,
                     max_new_tokens=args.max_new_tokens, seed=args.seed, max_minutes=args.max_minutes,
                     set_name=set_name)


def _conversation(case) -> list[dict]:
    """A bundled prompt case as distill's messages: its system prompt, if any, as the leading message (the
    bench's prompt; data.encode_messages reads it back)."""
    return [{"role": "system", "content": case.system}] * bool(case.system) + list(case.messages)


def cmd_heldout_replies(args) -> None:
    """The verifier's greedy replies to a held-out prompt set, with their states and top-k labels, under <work>:
    what `agreement --work <work>` measures a head on. Never trained on: the shards are named
    greedy-heldout_<set>-<index>, and train-head and train refuse a work folder that holds one."""
    from distill.data import generate_replies
    from specdec_core.measuring.prompt_sets import load_prompts

    cases = load_prompts(str(args.prompts / args.held_out))[:args.n_prompts or None]
    set_name = HELD_OUT_SET_PREFIX + Path(args.held_out).stem.replace("-", "_")
    generate_replies(_load_verifier(args), [_conversation(case) for case in cases], args.work, modes=["greedy"],
                     shard_size=len(cases), batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                     seed=args.seed, set_name=set_name)
    print(f"{len(cases)} greedy replies ({args.max_new_tokens} tokens at most) under {args.work / 'replies'}; "
          f"measure a head there with: python -m distill --work {args.work} agreement --draft HEAD --steps 4 --fp32")


HELD_OUT_SET_PREFIX = "heldout_"  # replies shards of a held-out set: greedy-heldout_<set>-<index>


def _refuse_held_out_replies(work: Path) -> None:
    from distill.data import reply_files

    held = [path.name for path in reply_files(work)
            if (path.stem.split("-") + [""])[1].startswith(HELD_OUT_SET_PREFIX)]
    if held:
        raise SystemExit(f"{work} holds replies to a held-out prompt set ({', '.join(held)}): they measure a head "
                         "and are never trained on; train in another --work folder")


def cmd_label(args) -> None:
    from distill.data import label_replies

    label_replies(_load_verifier(args), args.work, top_k=args.top_k, batch_tokens=args.batch_tokens)


def cmd_train(args) -> None:
    from distill.train import DraftShape, TrainSettings, train
    from specdec_core.loading.models import resolve_device

    _refuse_held_out_replies(args.work)
    verifier = _load_verifier(args)
    settings = TrainSettings(steps=args.steps, max_minutes=args.max_minutes, batch_tokens=args.batch_tokens,
                             lr=args.lr, seed=args.seed)
    figures = train(verifier.model, args.work, args.work / "runs" / args.run, DraftShape.parse(args.shape),
                    settings, resolve_device(args.device), _special_ids(verifier))
    print(json.dumps(figures, indent=2))


def cmd_features(args) -> None:
    from distill.head import compute_features

    compute_features(_load_verifier(args), args.work, batch_tokens=args.batch_tokens, top_k=args.with_labels,
                     layers=_layers(args.layers))


def _head_folder(work: Path, name: str) -> str:
    """--init-from: a training run's head (<work>/runs/<name>/model), or a head's folder (an exported one)."""
    folder = Path(name)
    if (folder / "config.json").is_file():
        return str(folder)
    return str(work / "runs" / name / "model")


def _precision_options(p) -> None:
    precision = p.add_mutually_exclusive_group()
    precision.add_argument("--bf16", action="store_true",
                           help="bfloat16 autocast on the CPU (default: only where the CPU has bfloat16 instructions)")
    precision.add_argument("--fp32", action="store_true",
                           help="no bfloat16 autocast on the CPU (default on a CPU without native bfloat16)")


def _bf16(args) -> bool:
    from specdec_core.loading import cpu_speed

    return args.bf16 or (not args.fp32 and cpu_speed.native_bfloat16())


def _layers(text: str) -> list[int]:
    """'2,15' -> [2, 15]: decoder layers whose outputs a head reads beside the final state."""
    try:
        return [int(layer) for layer in text.split(",") if layer.strip()]
    except ValueError:
        raise SystemExit(f"--layers/--feature-layers takes comma-separated layer numbers, not {text!r}") from None


def cmd_train_head(args) -> None:
    from distill.head import HeadSettings, train_head

    _refuse_held_out_replies(args.work)
    settings = HeadSettings(head_size=args.head_size, intermediate=args.intermediate, steps=args.steps,
                            max_minutes=args.max_minutes, batch_tokens=args.batch_tokens, lr=args.lr,
                            cls_weight=args.cls_weight, noise=args.noise, seed=args.seed, warmup=args.warmup,
                            chain_steps=args.chain_steps, depth_decay=args.depth_decay,
                            validation_shards=args.validation_shards, head_ids=args.head_ids,
                            validate_every=args.validate_every, bf16=_bf16(args),
                            feature_layers=",".join(str(layer) for layer in _layers(args.feature_layers)),
                            init_from=_head_folder(args.work, args.init_from) if args.init_from else "")
    verifier = _load_verifier(args)
    figures = train_head(verifier, args.work, args.work / "runs" / args.run, settings, _special_ids(verifier))
    print(json.dumps({k: v for k, v in figures.items() if k != "history"}, indent=2))
    if args.export_to:  # as `export --run RUN --dest FOLDER` would, without loading everything again
        _export(args.work, args.run, args.verifier, verifier.tokenizer, args.export_to, None)


def cmd_agreement(args) -> None:
    from distill.head import HeadSettings, agreement_by_confidence, agreement_by_step, load_examples
    from specdec_core.loading.draft_head import SpecdecHeadModel

    verifier = _load_verifier(args)
    folder = args.work / "runs" / args.run / "model" if args.run else Path(args.draft)
    head = SpecdecHeadModel.from_pretrained(folder).float().eval()  # as the engine loads it on the CPU
    shards = set(args.shards.split(",")) if args.shards else None
    layers = head.config.feature_layers
    examples = load_examples(args.work, HeadSettings.max_length, set(verifier.eos_token_ids), shards, layers)
    if not examples:
        raise SystemExit(f"no replies with features{' (layers ' + str(layers) + ')' if layers else ''} and labels "
                         f"under {args.work} ({args.shards or 'all shards'})")
    model = verifier.model

    def figures(group) -> dict:
        by_step = agreement_by_step(head, model.get_input_embeddings(),
                                    model.get_output_embeddings().weight.detach(), group, args.steps, bf16=_bf16(args))
        return {"replies": len(group), "positions": sum(e.end - e.first for e in group),
                **{f"agreement{s}": round(v, 4) for s, v in by_step.items()}}

    result = {"head": str(folder), "shards": args.shards or "all", **figures(examples)}
    if args.by_confidence:
        result["by_confidence"] = agreement_by_confidence(head, model.get_input_embeddings(),
                                                          model.get_output_embeddings().weight.detach(), examples,
                                                          bf16=_bf16(args))
    if args.by_category:
        groups: dict[str, list] = {}
        for example, category in zip(examples, _categories(args.work, args.prompts, examples)):
            groups.setdefault(category, []).append(example)
        result["by_category"] = {category: figures(group) for category, group in sorted(groups.items())}
    print(json.dumps(result, indent=2))


def _categories(work: Path, prompts: Path, examples) -> list[str]:
    """Each example's prompt category, for replies of a held-out set (heldout-replies writes them in the set's
    order): read from the set's file by the shard's name; "" where a shard is not a held-out set's."""
    import torch

    from specdec_core.measuring.bench import category_of
    from specdec_core.measuring.prompt_sets import load_prompts

    by_sequence: dict[tuple, str] = {}
    for stem in sorted({e.shard for e in examples}):
        held = (stem.split("-") + ["", ""])[1]
        if not held.startswith(HELD_OUT_SET_PREFIX):
            continue
        name = held[len(HELD_OUT_SET_PREFIX):].replace("_", "-")
        cases = load_prompts(str(prompts / f"{name}.jsonl"))
        data = torch.load(work / "replies" / f"{stem}.pt")
        for case, prompt, reply in zip(cases, data["prompt_ids"], data["reply_ids"]):
            by_sequence[(stem, tuple(prompt + reply)[-24:])] = category_of(case)
    return [by_sequence.get((e.shard, tuple(e.ids.tolist())[-24:]), "") for e in examples]


def cmd_export(args) -> None:
    from specdec_core.loading.models import load_model

    verifier = load_model(args.verifier, device="cpu")
    _export(args.work, args.run, args.verifier, verifier.tokenizer, args.dest,
            (Path(args.average_with), args.share) if args.average_with else None)


def _export(work: Path, run: str, verifier_spec: str, tokenizer, dest: Path, average) -> None:
    """Write run `run`'s best head to `dest`, with the facts of the data it was trained on."""
    from distill.export import export_draft

    stems = [path.stem.split("-") for path in (work / "replies").glob("*.pt")]
    facts = {"verifier": verifier_spec, "exported": time.strftime("%Y-%m-%d %H:%M:%S"), "run": run,
             "reply_modes": sorted({parts[0] for parts in stems}),
             "prompt_sets": sorted({parts[1] if len(parts) > 2 else "corpus" if parts[0].startswith("corpus")
                                    else "train" for parts in stems})}
    dest = export_draft(work / "runs" / run, tokenizer, dest, facts, average)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    print(f"exported to {dest} ({size / 1e6:.1f} MB)")


def cmd_measure(args) -> None:
    from distill.measure import measure_pair
    from specdec_core.loading.models import load_model
    from specdec_core.measuring.prompt_sets import load_prompts

    verifier = _load_verifier(args)
    draft = load_model(str(args.draft), device=args.device, dtype=args.dtype)
    # prompt_sets reads every bundled format ('#' comment lines included, as in independent-heldout.jsonl).
    cases = load_prompts(str(args.prompts / args.held_out))[args.skip:args.skip + args.n_prompts]
    prompts = [_conversation(case) for case in cases]
    figures = measure_pair(verifier, draft, prompts, gammas=tuple(int(g) for g in args.gammas.split(",")),
                           max_new_tokens=args.max_new_tokens, sampled_gamma=args.sampled_gamma,
                           adaptive=args.adaptive)
    figures["command"] = "python -m distill " + shlex.join(sys.argv[1:])
    figures["torch_threads"] = __import__("torch").get_num_threads()
    figures["load_average"] = os.getloadavg()
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


# What tests/slow/test_shipped_draft.py re-measures: the draft alone at `gamma`, and as shipped (a hybrid
# with prompt lookup at `hybrid_gamma`, `draft_tokens` per round).
QUICK_CHECK = {"prompts": 4, "max_new_tokens": 48, "gamma": 1, "hybrid_gamma": 4, "draft_tokens": 1}


def cmd_card(args) -> None:
    """Measure the shipped draft and write the figures its model card states (card.json)."""
    from distill.card import render_card

    folder = Path(args.draft)
    if args.rerender:  # the measured figures as they are, the before/after table from --compare
        card = json.loads((folder / "card.json").read_text())
        if args.compare:
            card["comparison"] = json.loads(Path(args.compare).read_text())
        (folder / "card.json").write_text(json.dumps(card, indent=2) + "\n")
        (folder / "README.md").write_text(render_card(card, json.loads((folder / "distill.json").read_text())))
        return
    from distill.measure import measure_pair
    from distill.prompts import read_jsonl
    from specdec_core.loading.models import load_model

    verifier = _load_verifier(args)
    draft = load_model(str(args.draft), device=args.device, dtype=args.dtype)
    held_out = read_jsonl(args.prompts / "distill-heldout.jsonl")
    gammas = tuple(int(g) for g in args.gammas.split(","))
    figures = measure_pair(verifier, draft, held_out[:args.n_prompts], gammas=gammas,
                           max_new_tokens=args.max_new_tokens, sampled_gamma=args.sampled_gamma,
                           hybrid=(args.hybrid_gamma, args.hybrid_draft_tokens))
    quick = measure_pair(verifier, draft, held_out[:QUICK_CHECK["prompts"]], gammas=(QUICK_CHECK["gamma"],),
                         max_new_tokens=QUICK_CHECK["max_new_tokens"], sampled_gamma=QUICK_CHECK["gamma"],
                         hybrid=(QUICK_CHECK["hybrid_gamma"], QUICK_CHECK["draft_tokens"]))
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.name != "card.json")
    from distill.card import build_card

    card = build_card(figures, quick, QUICK_CHECK, size,
                      command="python -m distill " + shlex.join(sys.argv[1:]))
    if args.compare:  # figures measured elsewhere (before and after this head), shown as the card's table
        card["comparison"] = json.loads(Path(args.compare).read_text())
    elif (folder / "card.json").exists():  # the same head measured again: its before/after table still holds
        kept = json.loads((folder / "card.json").read_text()).get("comparison")
        if kept:
            card["comparison"] = kept
    (folder / "card.json").write_text(json.dumps(card, indent=2) + "\n")

    (folder / "README.md").write_text(render_card(card, json.loads((folder / "distill.json").read_text())))
    print(json.dumps({k: v for k, v in card.items() if k != "measurement"}, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m distill", description=__doc__)
    parser.add_argument("--verifier", default="smollm2-135m-instruct", help="verifier spec (default: embedded)")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="folder for data and checkpoints")
    parser.add_argument("--prompts", type=Path, default=ASSETS / "prompts", help="folder of the prompt sets")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--versions", action="store_true", help="print torch's and transformers' versions first")
    steps = parser.add_subparsers(dest="step", required=True)

    steps.add_parser("prompts", help="compose the prompt sets").set_defaults(run_step=cmd_prompts)

    p = steps.add_parser("generate", help="the verifier's replies to the training prompts")
    p.add_argument("--modes", default="greedy,t07", help="reply modes: greedy, t07, t07b, t10")
    p.add_argument("--set", default="train", choices=["train", "extra"],
                   help="prompt set: distill-train.jsonl, or distill-train-extra.jsonl (more topics)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N prompts (0: all)")
    p.add_argument("--skip", type=int, default=0,
                   help="start at this training prompt (shard files are numbered from there: use another mode "
                        "name per --skip)")
    p.add_argument("--shard-size", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop after this long (0: no limit)")
    p.set_defaults(run_step=cmd_generate)

    p = steps.add_parser("label", help="the verifier's top-k distribution at every reply position")
    p.add_argument("--top-k", type=int, default=16)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.set_defaults(run_step=cmd_label)

    p = steps.add_parser("train", help="train (or resume) a draft")
    p.add_argument("--run", default="main", help="name of this training run (its folder under <work>/runs)")
    p.add_argument("--shape", default="layers=2,hidden=384", help="DraftShape fields, e.g. layers=3,hidden=384")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--max-minutes", type=float, default=120.0)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--lr", type=float, default=2e-3)
    p.set_defaults(run_step=cmd_train)

    p = steps.add_parser("features", help="the verifier's hidden states over every reply (for a draft head)")
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--with-labels", type=int, default=0, metavar="K", help="also write the top-K labels a shard "
                   "lacks, in the same forward pass (the label step's work; 0: features only)")
    p.add_argument("--layers", default="", metavar="L1,L2", help="also keep these decoder layers' outputs (0-based) "
                   "beside the final state, for a head trained with --feature-layers (in features-l<L1>-<L2>/)")
    p.set_defaults(run_step=cmd_features)

    p = steps.add_parser("train-head", help="train (or resume) a draft head on the verifier's hidden states")
    p.add_argument("--run", default="head", help="name of this training run (its folder under <work>/runs)")
    p.add_argument("--init-from", metavar="RUN|FOLDER", help="start from the head trained by this earlier run, "
                   "or from a head's folder such as assets/smollm2-135m-draft (when the "
                   "data has grown: its weights, with token ids, optimizer and schedule anew)")
    p.add_argument("--validation-shards", default="", metavar="STEMS",
                   help="comma-separated replies shards to validate on (default: a random 3%% of sequences)")
    p.add_argument("--warmup", type=int, default=100, help="steps of linear learning-rate warm-up")
    p.add_argument("--validate-every", type=int, default=100, help="steps between validations (the best is kept)")
    _precision_options(p)
    p.add_argument("--head-ids", choices=["data", "merge", "keep"], default="data",
                   help="the token ids the head can propose: those this data puts most probability on (data), "
                        "--init-from's, its rarest replaced by this data's top-1 tokens it lacks (merge), or "
                        "--init-from's unchanged (keep)")
    p.add_argument("--chain-steps", "--ttt-depth", type=int, default=3, help="drafting steps trained per position, "
                   "each on the head's own previous prediction (EAGLE-3's training-time test; 1: teacher forcing only)")
    p.add_argument("--depth-decay", type=float, default=1.0,
                   help="weight drafting step s's losses by this ** (s - 1) (1: all alike)")
    p.add_argument("--feature-layers", default="", metavar="L1,L2", help="decoder layers (0-based) whose outputs the "
                   "head reads beside the final state, fused as in EAGLE-3 (needs features --layers L1,L2)")
    p.add_argument("--head-size", type=int, default=8192, help="token ids the head can propose")
    p.add_argument("--intermediate", type=int, default=1536, help="MLP width of the head's layer")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--max-minutes", type=float, default=60.0)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--cls-weight", type=float, default=1.0)
    p.add_argument("--noise", type=float, default=0.2)
    p.add_argument("--export-to", type=Path, metavar="FOLDER", help="then export the run's best head there (as the "
                   "export step does)")
    p.set_defaults(run_step=cmd_train_head)

    p = steps.add_parser("agreement", help="a head's teacher-forced agreement with the verifier on replies shards")
    p.add_argument("--run", default="", help="the head of this training run (default: --draft)")
    p.add_argument("--draft", default=str(ASSETS / DEFAULT_NAME), help="a head's folder")
    p.add_argument("--shards", default="", metavar="STEMS", help="comma-separated replies shards (default: all)")
    p.add_argument("--steps", type=int, default=3, help="drafting steps")
    p.add_argument("--by-category", action="store_true",
                   help="the figures per prompt category too (replies of a held-out set, from heldout-replies)")
    p.add_argument("--by-confidence", action="store_true",
                   help="step 1's agreement by the verifier's top-1 probability (harder text, or a head off its data?)")
    _precision_options(p)
    p.set_defaults(run_step=cmd_agreement)

    p = steps.add_parser("export", help="write the trained draft to assets/")
    p.add_argument("--run", default="main")
    p.add_argument("--dest", type=Path, default=ASSETS / DEFAULT_NAME)
    p.add_argument("--average-with", metavar="FOLDER", help="the head the run started from: export the average "
                   "of its weights and the run's (keeps more of what it knew; see --share)")
    p.add_argument("--share", type=float, default=0.5, help="with --average-with: the run's share of the average")
    p.set_defaults(run_step=cmd_export)

    p = steps.add_parser("heldout-replies", help="the verifier's greedy replies to a held-out set, states and "
                         "labels included, for `agreement` (never trained on)")
    p.add_argument("--held-out", default="independent-heldout.jsonl", help="prompt set file under --prompts")
    p.add_argument("--n-prompts", type=int, default=0, help="the first N prompts only (0: all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.set_defaults(run_step=cmd_heldout_replies)

    p = steps.add_parser("measure", help="acceptance and speed on held-out prompts")
    p.add_argument("--draft", default=str(ASSETS / DEFAULT_NAME), help="draft spec")
    p.add_argument("--n-prompts", type=int, default=12)
    p.add_argument("--skip", type=int, default=0, help="start at this held-out prompt")
    p.add_argument("--held-out", default="distill-heldout.jsonl", help="prompt set file under --prompts")
    p.add_argument("--gammas", default="3,4,5")
    p.add_argument("--sampled-gamma", type=int, default=4)
    p.add_argument("--adaptive", action="store_true")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", default="", help="also write the figures to this JSON file")
    p.set_defaults(run_step=cmd_measure)

    p = steps.add_parser("card", help="measure the exported draft and write its card.json")
    p.add_argument("--draft", default=str(ASSETS / DEFAULT_NAME), help="the exported draft folder")
    p.add_argument("--n-prompts", type=int, default=12)
    p.add_argument("--gammas", default="2,3,4,5")
    p.add_argument("--sampled-gamma", type=int, default=3)
    p.add_argument("--hybrid-gamma", type=int, default=4, help="gamma of the shipped hybrid (prompt lookup + draft)")
    p.add_argument("--hybrid-draft-tokens", type=int, default=1, help="the draft's tokens per round in the hybrid")
    p.add_argument("--rerender", action="store_true",
                   help="measure nothing: write README.md again from card.json (and --compare's table)")
    p.add_argument("--compare", default="", metavar="JSON", help="a before/after table to show in the card: "
                   '{"title", "before", "after", "rows": [{"set", "figure", "before", "after", "command"}], "note"} '
                   "(default: keep the table card.json already has)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.set_defaults(run_step=cmd_card)

    from distill.corpus import add_steps as add_corpus_steps

    add_corpus_steps(steps, _load_verifier)  # corpus, corpus-replies
    from distill.outside import add_steps as add_outside_steps

    add_outside_steps(steps, _load_verifier)  # outside-replies

    args = parser.parse_args(argv)
    if args.versions:  # from the packages' metadata: no import
        from importlib.metadata import version

        print("torch", version("torch"), "transformers", version("transformers"), flush=True)
    import specdec_core.loading.draft_head  # noqa: F401 - registers the drafts' model types with transformers
    import specdec_core.loading.draft_model  # noqa: F401

    args.run_step(args)


if __name__ == "__main__":
    main()
