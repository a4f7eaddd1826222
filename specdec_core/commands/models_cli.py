"""`specdec models list|install|remove|pair`: the models known by name, their installs in the user cache, the models
other apps keep on this machine (discovery.py), and the drafts found for a verifier (pairs/suggestions.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_core.loading import catalog, discovery
from specdec_core.loading.discovery import FoundModel, Listing
from specdec_core.pairs.suggestions import Suggestions, suggest_drafts


def add_parser(subparsers) -> None:
    models = subparsers.add_parser("models", help="list, install or remove the models known by name")
    models.add_argument("--cache-dir", metavar="DIR", help="the model cache (default: $SPECDEC_CACHE_DIR or the "
                                                           "user cache folder)")
    actions = models.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="known models: installed or not, size, licence; good pairs; and the "
                                              "models found on this machine (LM Studio, Ollama, Hugging Face cache, "
                                              "GPT4All, Jan, $SPECDEC_MODEL_DIRS)")
    pair = actions.add_parser("pair", help="drafts found on this machine for a verifier: its own tokenizer first "
                                           "(smallest first), then others the doctor accepts")
    pair.add_argument("verifier", metavar="VERIFIER", help="a found model's name, a .gguf file or a model folder")
    for action in (listing, pair):
        action.add_argument("--skipped", action="store_true",
                            help=f"list every file skipped (else the first {discovery.SKIPPED_SHOWN} and a count)")
    install = actions.add_parser("install", help="fetch, check (size, SHA-256) and convert models; resumes")
    install.add_argument("names", nargs="+", metavar="NAME")
    remove = actions.add_parser("remove", help="delete an installed model and its converted copy")
    remove.add_argument("names", nargs="+", metavar="NAME")
    models.set_defaults(func=cmd_models)


def _cache(args) -> Path:
    from specdec_core.loading.resources import default_cache_dir

    return Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()


def cmd_models(args: argparse.Namespace) -> int:
    cache = _cache(args)
    if args.action == "list":
        print(list_text(cache))
        print()
        print(found_text(discovery.find_models(), every_skipped=args.skipped))
        return 0
    if args.action == "pair":
        print(pair_text(suggest_drafts(args.verifier, discovery.find_models()), every_skipped=args.skipped))
        return 0
    if args.action == "remove":
        for name in args.names:
            removed = catalog.remove(name, cache)
            print(f"removed {name}" + (f" ({len(removed)} paths)" if removed else " (it was not installed)"))
        return 0
    from specdec_core.commands.cli_options import progress_bar
    from specdec_core.loading.progress import LoadProgress

    for name in args.names:
        # The loads' bar: it remembers a line it left unfinished, so that an error starts a line of its own.
        draw = progress_bar()

        def progress(step: catalog.InstallProgress, draw=draw) -> None:
            draw(LoadProgress(step.stage, step.fraction, step.message))

        path = catalog.install(name, cache, progress=progress)
        print(f"installed {name}" + (f": {path}" if path != Path() else ""))
    return 0


def list_text(cache: Path) -> str:
    rows = [("name", "params", "size", "licence", "state")]
    for row in catalog.listing(cache):
        model = row.model
        size = f"{model.size / 1e9:.2f} GB" if model.size else "bundled"
        rows.append((model.name, model.parameters, size, model.licence, row.state))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(r, widths)).rstrip() for r in rows]
    lines.append("")
    lines.append("pairs (verifier + draft):")
    for verifier, draft, ready in catalog.pairings(cache):
        hint = "" if ready else f"   (install: specdec models install {verifier} {draft})"
        lines.append(f"  {verifier} + {draft}{hint}")
    return "\n".join(lines)


def bytes_text(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size:,} B"


def _table(rows: list[tuple[str, ...]], indent: str = "") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(width) for cell, width in zip(r, widths)).rstrip() for r in rows]


def found_row(model: FoundModel) -> tuple[str, ...]:
    facts = model.facts
    return (model.name, facts.parameters_text(), bytes_text(facts.size), facts.architecture or "?",
            facts.quantisation or "?", facts.vocabulary_hash or "none", model.where)


def _skipped_lines(skipped: tuple[str, ...], every: bool) -> list[str]:
    if not skipped:
        return []
    shown = discovery.skipped_summary(skipped, None if every else discovery.SKIPPED_SHOWN)
    hint = ["  (--skipped lists every one)"] if len(shown) < len(skipped) else []
    return ["Skipped:", *(f"  {line}" for line in shown), *hint]


def found_text(listing: Listing, every_skipped: bool = False) -> str:
    """The "Found on this machine" section of `specdec models list`."""
    lines = ["Found on this machine (each name works as a model spec):"]
    if listing.models:
        header = ("name", "params", "size", "arch", "quant", "vocabulary", "where")
        lines += _table([header, *(found_row(m) for m in listing.models)], "  ")
    else:
        lines.append("  nothing in LM Studio's, Ollama's, GPT4All's or Jan's folders or the Hugging Face cache; name "
                     "other folders in SPECDEC_MODEL_DIRS")
    lines += _skipped_lines(listing.skipped, every_skipped)
    return "\n".join(lines)


def pair_text(found: Suggestions, every_skipped: bool = False) -> str:
    """`specdec models pair`: the drafts for one verifier, and the command that runs the best."""
    verifier = found.verifier
    lines = [f"Drafts on this machine for {verifier.name} ({verifier.facts.parameters_text()} parameters, "
             f"vocabulary {verifier.facts.vocabulary_hash}):"]
    for title, suggestions in (("Same tokenizer (smallest first):", found.same),
                               ("Another tokenizer (most overlap first):", found.other)):
        lines.append(title)
        rows = [(s.draft.name, s.draft.facts.parameters_text(), bytes_text(s.draft.facts.size),
                 f"{s.overlap:.0%} overlap", s.verdict.summary()) for s in suggestions]
        lines += _table(rows, "  ") if rows else ["  none"]
    lines += _skipped_lines(found.skipped, every_skipped)
    best = found.best
    if best is not None:
        lines.append(f"Try: specdec chat --verifier {verifier.name} --draft {best.draft.name}")
    return "\n".join(lines)
