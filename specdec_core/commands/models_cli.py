"""`specdec models list|install|remove`: the models known by name, and their installs in the user cache."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_core.loading import catalog


def add_parser(subparsers) -> None:
    models = subparsers.add_parser("models", help="list, install or remove the models known by name")
    models.add_argument("--cache-dir", metavar="DIR", help="the model cache (default: $SPECDEC_CACHE_DIR or the "
                                                           "user cache folder)")
    actions = models.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="known models: installed or not, size, licence; and good pairs")
    install = actions.add_parser("install", help="fetch, check (size, SHA-256) and convert models; resumes")
    install.add_argument("names", nargs="+", metavar="NAME")
    remove = actions.add_parser("remove", help="delete an installed model and its converted copy")
    remove.add_argument("names", nargs="+", metavar="NAME")
    models.set_defaults(func=cmd_models)


def _cache(args) -> Path:
    from specdec_core.loading.gguf_cache import default_cache_dir

    return Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()


def cmd_models(args: argparse.Namespace) -> int:
    cache = _cache(args)
    if args.action == "list":
        print(list_text(cache))
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
