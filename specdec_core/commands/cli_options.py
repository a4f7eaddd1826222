"""What the `specdec` commands share: their option builders, settings and model loading from options.

`cli.py` (generate, chat, doctor) and `bench_cli.py` (bench, rank-drafts) both import this module and
neither imports the other's commands, so the command line has no import cycle.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Any

from specdec_core import defaults
from specdec_core.config import TREE_AUTO, GenerationConfig
from specdec_core.errors import SpecdecError


class UsageError(SpecdecError):
    pass


def finite_float(text: str) -> float:
    """A float argument that is a real number: "nan" and "inf" parse as floats but break sampling."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def tree_nodes(text: str) -> int:
    if text.strip().lower() == "auto":
        return TREE_AUTO
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of nodes or auto, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--verifier", metavar="SPEC", help="hub id, local folder, .gguf file or embedded name "
                       f"(default: {defaults.VERIFIER}, embedded)")
    group.add_argument("--draft", metavar="SPEC", help="draft model spec (implies --drafter model)")
    group.add_argument("--drafter", choices=defaults.DRAFTER_KINDS,
                       help="what proposes tokens: a draft model, copies from the conversation (prompt-lookup), "
                       "copies where they exist and the draft model elsewhere (hybrid), or a draft with another "
                       "tokenizer through the text: the tokens both vocabularies hold (tli; what model and hybrid "
                       "use for such a draft) or its greedy text re-tokenised (slem) (default: model with --draft, "
                       "else prompt-lookup)")
    group.add_argument("--draft-tokens", type=int, metavar="N",
                       help="hybrid: at most N tokens from the draft model in a round without a match "
                       "(default: gamma)")
    group.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    group.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    group.add_argument("--draft-dtype", choices=("auto", "float32", "bfloat16", "float16"),
                       help="the draft model's dtype (default: with --dtype auto, bfloat16 on a CPU with native "
                       "bfloat16 and auto elsewhere; else --dtype's). The verifier checks every drafted token, so "
                       "the output is the same; a bfloat16 draft reads half the bytes per token. A draft head keeps "
                       "float32. A quantised GGUF draft on the CPU runs in its own quantisation with its 5- to 8-bit "
                       "layers requantised to 4 bits (auto) or as in the file (float32)")
    group.add_argument("--weights", default="auto", choices=("auto", "float", "int8", "int4"),
                       help="what the models' weights run as on a CPU: auto runs a quantised GGUF file in its own "
                       "quantisation (exact: the verifier is the model in that format) and anything else as floats "
                       "(--dtype); float converts GGUF files to floats; int8 and int4 quantise float weights at "
                       "load, in groups of 32 (default: auto)")
    group.add_argument("--activations", type=int, default=16, choices=(16, 8),
                       help="quantised weights: how finely each product quantises its input, 16 bits (about 15 "
                       "significant) or 8, as llama.cpp does: half the integer work, and a small model's replies may "
                       "change (default: 16)")
    group.add_argument("--device-map", choices=("auto",), help="spread a large verifier over GPUs and CPU")
    group.add_argument("--max-memory", metavar="DEV=SIZE,...", help="with --device-map: e.g. 0=20GiB,cpu=64GiB")
    group.add_argument("--trust-remote-code", action="store_true",
                       help="allow code from a model repository to run (off by default)")


def add_generation_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("generation")
    group.add_argument("--no-speculation", action="store_true", help="decode with the verifier alone")
    group.add_argument("--gamma", type=int, default=defaults.GAMMA,
                       help=f"tokens drafted per round (default {defaults.GAMMA})")
    group.add_argument("--adaptive", action="store_true", help="grow gamma after full acceptance, shrink after "
                       "a rejection")
    group.add_argument("--confidence-cutoff", type=finite_float, default=0.0,
                       help="stop drafting when the draft's top probability is below this")
    group.add_argument("--tree-nodes", type=tree_nodes, default="auto", metavar="N|auto",
                       help="draft trees: at most N candidates checked per round in one verifier pass, the cost "
                       "model keeping what pays on this machine; 0 drafts one chain (default auto: trees of up to "
                       f"{defaults.TREE_NODES} when greedy, the chain when sampling, so that a seed reproduces a "
                       "reply)")
    group.add_argument("--max-new-tokens", type=int, default=256)
    group.add_argument("--temperature", type=finite_float, default=0.0, help="0 is greedy (default)")
    group.add_argument("--top-k", type=int, default=0)
    group.add_argument("--top-p", type=finite_float, default=1.0)
    group.add_argument("--repetition-penalty", type=finite_float, default=1.0, metavar="P",
                       help="divide the logits of tokens already in the text by P (multiply negative ones), as "
                       "transformers does; both models apply it, so speculation stays exact (default 1: off)")
    group.add_argument("--seed", type=int, default=0,
                       help="seed of every random draw, 0 to 2^63-1; when sampling with --tree-nodes N, a seed "
                       "reproduces a reply only with the same N (the draws follow the tree's size)")
    group.add_argument("--system", metavar="TEXT", help="system prompt")
    group.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                       help="colour tokens by state (default: when writing to a terminal)")


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, metavar="N",
                        help="CPU threads for PyTorch (default: $SPECDEC_THREADS, else 1 on machines with 2 "
                             "CPUs or fewer, else PyTorch's choice; see docs/performance.md)")


def config_from_args(args: Any) -> GenerationConfig:
    return GenerationConfig.chosen(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        max_new_tokens=args.max_new_tokens, speculate=not args.no_speculation, gamma=args.gamma,
        adaptive=args.adaptive, confidence_cutoff=args.confidence_cutoff,
        tree_nodes=getattr(args, "tree_nodes", TREE_AUTO), repetition_penalty=getattr(args, "repetition_penalty", 1.0))


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_MIN_DEVICE_BYTES = 64 * 2**20  # less than this cannot hold even a tiny model's working set


def parse_max_memory(text: str | None, device_map: str | None) -> dict | None:
    """--max-memory DEV=SIZE,...: devices are GPU indices, cpu, mps or disk; sizes like 20GiB or 512MB."""
    if not text:
        return None
    if device_map is None:
        raise UsageError("--max-memory only applies with --device-map auto (it caps what each device gets)")
    out: dict = {}
    for part in text.split(","):
        key, _, value = (x.strip() for x in part.partition("="))
        if not value or not key:
            raise UsageError(f"--max-memory expects DEV=SIZE pairs such as 0=20GiB,cpu=64GiB, got {part!r}")
        if not (key.isdigit() or key in ("cpu", "mps", "disk")):
            raise UsageError(f"--max-memory: unknown device {key!r} (use a GPU index, cpu, mps or disk)")
        size = _SIZE.fullmatch(value)
        if size is None:
            raise UsageError(f"--max-memory: {value!r} is not a size (use e.g. 20GiB, 512MB or a byte count)")
        nbytes = float(size.group(1)) * _SIZE_UNITS[(size.group(2) or "B").lower()]
        if key != "disk" and nbytes < _MIN_DEVICE_BYTES:
            raise UsageError(f"--max-memory: {key}={value} is too little memory to load a model on (at least "
                             f"{_MIN_DEVICE_BYTES // 2**20} MiB)")
        out[int(key) if key.isdigit() else key] = value
    return out


class _ProgressState:
    drawn = False  # a progress bar may have left the cursor mid-line on stderr


progress_state = _ProgressState()


def progress_bar():
    """A loading progress callback drawing on stderr (remembers whether it left a line unfinished)."""
    from specdec_core.loading.progress import tqdm_progress

    draw = tqdm_progress(sys.stderr)

    def report(progress) -> None:
        progress_state.drawn = progress.stage != "done"
        draw(progress)

    return report


def load_from_args(args: Any):
    """The verifier and drafter the options name, paired and checked (pairing.load_pair)."""
    from specdec_core.pairs.pairing import LoadOptions, load_pair

    not_hybrid = (defaults.MODEL, defaults.PROMPT_LOOKUP, *defaults.CROSS_VOCABULARY)
    if args.draft_tokens is not None and (args.drafter in not_hybrid or (args.drafter is None and args.draft)):
        raise UsageError("--draft-tokens applies to --drafter hybrid only")
    options = LoadOptions(device=args.device, dtype=args.dtype, draft_dtype=args.draft_dtype or "",
                          weights=getattr(args, "weights", "auto"),
                          activation_bits=getattr(args, "activations", 16),
                          trust_remote_code=args.trust_remote_code,
                          device_map=args.device_map, max_memory=parse_max_memory(args.max_memory, args.device_map))
    pair = load_pair(args.verifier, args.draft, args.drafter, options, progress=progress_bar(),
                     draft_tokens=args.draft_tokens)
    for model in (pair.verifier, pair.draft):
        for note in model.notes if model is not None else ():
            print(f"note: {note}", file=sys.stderr, flush=True)
    return pair
