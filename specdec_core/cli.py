"""`specdec`: generate, chat, doctor and bench from the terminal, on the engine's event stream.

Bad input gets one line on stderr starting with "error:" and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import TextIO

from specdec_core.config import GenerationConfig
from specdec_core.errors import ConfigError, IncompatiblePairError, SpecdecError
from specdec_core.events import Event, Finished, RoundVerified, TokenCommitted, TokenRejected, TokenState

ANSI = {
    TokenState.ACCEPTED: "\x1b[32m",  # green
    TokenState.REJECTED: "\x1b[31;9m",  # red, struck through
    TokenState.CORRECTED: "\x1b[33m",  # amber
    TokenState.BONUS: "\x1b[34m",  # blue
    TokenState.PLAIN: "",
}
RESET = "\x1b[0m"
LEGEND = "\x1b[32maccepted\x1b[0m \x1b[31;9mrejected\x1b[0m \x1b[33mcorrected\x1b[0m \x1b[34mbonus\x1b[0m plain"


class UsageError(SpecdecError):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one `error:` line (main() prints it), not usage + error."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _finite_float(text: str) -> float:
    """A float argument that is a real number: "nan" and "inf" parse as floats but break sampling."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--verifier", metavar="SPEC", help="hub id, local folder, .gguf file or embedded name "
                       "(default: smollm2-135m-instruct, embedded)")
    group.add_argument("--draft", metavar="SPEC", help="draft model spec (implies --drafter model)")
    group.add_argument("--drafter", choices=("model", "prompt-lookup", "hybrid"),
                       help="what proposes tokens: a draft model, copies from the conversation (prompt-lookup), "
                       "or copies where they exist and the draft model elsewhere (hybrid) (default: model with "
                       "--draft, else prompt-lookup)")
    group.add_argument("--draft-tokens", type=int, metavar="N",
                       help="hybrid: at most N tokens from the draft model in a round without a match "
                       "(default: gamma)")
    group.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    group.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    group.add_argument("--device-map", choices=("auto",), help="spread a large verifier over GPUs and CPU")
    group.add_argument("--max-memory", metavar="DEV=SIZE,...", help="with --device-map: e.g. 0=20GiB,cpu=64GiB")
    group.add_argument("--trust-remote-code", action="store_true",
                       help="allow code from a model repository to run (off by default)")


def _add_generation_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("generation")
    group.add_argument("--no-speculation", action="store_true", help="decode with the verifier alone")
    group.add_argument("--gamma", type=int, default=4, help="tokens drafted per round (default 4)")
    group.add_argument("--adaptive", action="store_true", help="grow gamma after full acceptance, shrink after "
                       "a rejection")
    group.add_argument("--confidence-cutoff", type=_finite_float, default=0.0,
                       help="stop drafting when the draft's top probability is below this")
    group.add_argument("--max-new-tokens", type=int, default=256)
    group.add_argument("--temperature", type=_finite_float, default=0.0, help="0 is greedy (default)")
    group.add_argument("--top-k", type=int, default=0)
    group.add_argument("--top-p", type=_finite_float, default=1.0)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--system", metavar="TEXT", help="system prompt")
    group.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                       help="colour tokens by state (default: when writing to a terminal)")


def _config(args) -> GenerationConfig:
    return GenerationConfig(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        max_new_tokens=args.max_new_tokens, speculate=not args.no_speculation, gamma=args.gamma,
        adaptive=args.adaptive, gamma_max=max(16, args.gamma), confidence_cutoff=args.confidence_cutoff,
    ).validate()


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_MIN_DEVICE_BYTES = 64 * 2**20  # less than this cannot hold even a tiny model's working set


def _max_memory(text: str | None, device_map: str | None) -> dict | None:
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


_progress_drawn = False  # a progress bar may have left the cursor mid-line on stderr


def _progress():
    from specdec_core.models import tqdm_progress

    draw = tqdm_progress(sys.stderr)

    def report(progress) -> None:
        global _progress_drawn
        _progress_drawn = progress.stage != "done"
        draw(progress)

    return report


def _load(args):
    from specdec_core.pairing import LoadOptions, load_pair

    if args.draft_tokens is not None and (args.drafter in ("model", "prompt-lookup")
                                          or (args.drafter is None and args.draft)):
        raise UsageError("--draft-tokens applies to --drafter hybrid only")
    options = LoadOptions(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                          device_map=args.device_map, max_memory=_max_memory(args.max_memory, args.device_map))
    return load_pair(args.verifier, args.draft, args.drafter, options, progress=_progress(),
                     draft_tokens=args.draft_tokens)


def _use_color(args, stream: TextIO) -> bool:
    if args.color == "always":
        return True
    if args.color == "never" or os.environ.get("NO_COLOR"):
        return False
    return stream.isatty()


def render(events: Iterable[Event], out: TextIO, color: bool) -> Iterator[Event]:
    """Print the reply as it streams (tokens coloured by state) and pass every event on."""
    for event in events:
        if isinstance(event, (TokenCommitted, TokenRejected)) and event.text:
            if color and ANSI[event.state]:
                out.write(f"{ANSI[event.state]}{event.text}{RESET}")
            elif event.state is not TokenState.REJECTED:  # without colour a rejected token would read as text
                out.write(event.text)
            out.flush()
        yield event


def stats_line(finished: Finished) -> str:
    s = finished.stats
    parts = [f"{s.new_tokens} tokens in {s.decode_s:.2f} s ({s.tokens_per_s:.1f} tok/s)",
             f"{s.rounds} verifier calls"]
    if s.drafted:
        parts += [f"acceptance {s.acceptance_rate:.0%} ({s.accepted}/{s.drafted})",
                  f"{s.mean_accepted_length:.2f} tokens/call",
                  f"draft {s.draft_s:.2f} s, verify {s.verify_s:.2f} s, c={s.c:.2f}",
                  f"predicted speedup {s.predicted_speedup:.2f}x"]
    parts.append(f"stop: {finished.stop_reason.value}")
    if finished.error:
        parts.append(finished.error)
    return " · ".join(parts)


def reply_json(events: list[Event]) -> dict:
    finished = events[-1]
    assert isinstance(finished, Finished)
    rounds = []
    for event in events:
        if isinstance(event, RoundVerified):
            drafted = [v.token_id for v in event.drafted]
            accepted = drafted[:event.n_accepted]
            emitted = accepted + ([event.emitted_token_id] if event.emitted_state is not TokenState.ACCEPTED
                                  else [])
            rounds.append({"drafted": drafted, "accepted": accepted, "emitted": emitted,
                           "stop": event.stop.value, "gamma": event.gamma,
                           "draft_s": event.draft_s, "verify_s": event.verify_s})
    return {"text": finished.text, "token_ids": list(finished.token_ids), "stop_reason": finished.stop_reason.value,
            "error": finished.error, "rounds": rounds, "stats": finished.stats.to_dict()}


def _checked_text(text: str, where: str) -> str:
    """`text` if it is valid Unicode. Python hands undecodable bytes of argv (and of stdin in some
    locales) over as lone surrogates, which tokenizers refuse with an unhelpful TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UsageError(f"{where} is not valid UTF-8 (character {error.start + 1} of it is an undecodable "
                         "byte)") from None
    return text


def _read_prompt(args) -> str:
    if args.prompt is not None and args.prompt != "-":
        return _checked_text(args.prompt, "the prompt")
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("no prompt: pass PROMPT or pipe it on standard input")
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a replaced stdin (tests): already text
        return _checked_text(sys.stdin.read(), "standard input")
    try:
        return stream.read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"standard input is not valid UTF-8 (byte {error.start + 1} cannot be decoded)") from None


def cmd_generate(args) -> int:
    from specdec_core.chat import build_prompt, raw_prompt

    config = _config(args)
    if args.samples < 1:
        raise UsageError(f"--samples must be at least 1 (got {args.samples})")
    text = _read_prompt(args)
    pair = _load(args)
    tokenizer = pair.verifier.tokenizer
    if args.raw:
        ids = raw_prompt(tokenizer, text)
    else:
        ids = build_prompt(tokenizer, [{"role": "user", "content": text}], system=args.system,
                           context_length=pair.verifier.context_length).ids
    color = _use_color(args, sys.stdout)
    status = 0
    for i in range(args.samples):
        sample_config = config.with_(seed=config.seed + i)
        events = pair.engine.generate(ids, sample_config)
        if args.json:
            collected = list(events)
            print(json.dumps(reply_json(collected)), flush=True)
        else:
            collected = list(render(events, sys.stdout, color))
            sys.stdout.write("\n")
            print(stats_line(collected[-1]), file=sys.stderr if not args.stats_stdout else sys.stdout, flush=True)
        finished = collected[-1]
        assert isinstance(finished, Finished)
        if finished.error:
            print(f"error: {finished.error}", file=sys.stderr)
            status = 1
    return status


def cmd_chat(args) -> int:
    config = _config(args)
    pair = _load(args)
    color = _use_color(args, sys.stdout)
    print(f"Chatting with {pair.verifier.name} (drafter: {pair.drafter.name if pair.drafter else 'none'}). "
          "/spec on|off, /reset, /quit." + (f"\nColours: {LEGEND}" if color else ""), file=sys.stderr)
    messages: list[dict] = []
    speculate = config.speculate
    while True:
        try:
            line = _checked_text(input("\n> "), "that line")
        except EOFError:
            return 0
        except (UnicodeDecodeError, UsageError) as error:  # one bad line: say so, keep the conversation
            _error(str(error) if isinstance(error, UsageError) else "that line is not valid UTF-8")
            continue
        command = line.strip()
        if command in ("/quit", "/exit"):
            return 0
        if command == "/reset":
            messages = []
            pair.engine.reset_caches()
            print("(new conversation)", file=sys.stderr)
            continue
        if command in ("/spec on", "/spec off"):
            speculate = command.endswith("on")
            print(f"(speculation {'on' if speculate else 'off'})", file=sys.stderr)
            continue
        if not command:
            continue
        messages.append({"role": "user", "content": line})
        try:
            reply = chat_turn(pair, messages, args.system, config.with_(speculate=speculate), color)
        except SpecdecError as error:  # e.g. a template that refuses the conversation: drop the turn
            messages.pop()
            _error(str(error))
            continue
        if reply is not None:
            messages.append(reply)


def chat_turn(pair, messages: list[dict], system: str | None, config: GenerationConfig, color: bool,
              out: TextIO | None = None) -> dict | None:
    """Stream one reply to `messages`; the assistant message to add to the history, or None.

    Ctrl-C can land anywhere, even inside a forward pass that has written some layers' keys and values
    but not yet recorded which token ids they belong to; the engine's caches can no longer be trusted
    then, so they are emptied (the next turn re-reads the prompt). The partial reply the user saw stays
    in the history, marked as interrupted, so the conversation reads the way it happened.
    """
    from specdec_core.chat import build_prompt

    out = out or sys.stdout
    committed: list[str] = []
    finished: Finished | None = None
    events = None
    try:
        build = build_prompt(pair.verifier.tokenizer, messages, system=system,
                             context_length=pair.verifier.context_length, reserve_new_tokens=config.max_new_tokens)
        if build.dropped_turns:
            print(f"(the {build.dropped_turns} oldest messages no longer fit the context and were left out)",
                  file=sys.stderr)
        events = pair.engine.generate(build.ids, config)
        for event in render(events, out, color):
            if isinstance(event, TokenCommitted):
                committed.append(event.text)
            elif isinstance(event, Finished):
                finished = event
    except KeyboardInterrupt:
        if events is not None:
            events.close()
        pair.engine.reset_caches()
        partial = "".join(committed)
        print("\n(stopped: the partial reply is kept" if partial else "\n(stopped before the first token",
              end=")\n", file=sys.stderr)
        return {"role": "assistant", "content": partial, "interrupted": True} if partial else None
    assert finished is not None
    print("\n" + stats_line(finished), file=sys.stderr)
    return {"role": "assistant", "content": finished.text}


def cmd_doctor(args) -> int:
    from specdec_core.doctor import check_models
    from specdec_core.models import load_model

    load = dict(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                progress=_progress())
    verifier = load_model(args.verifier, **load)
    draft = load_model(args.draft, **load)
    verdict = check_models(verifier, draft)
    print(verdict.report())
    return 0 if verdict.compatible else 1


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specdec", description="Speculative decoding you can see.")
    sub = parser.add_subparsers(dest="command", required=True)

    generate = sub.add_parser("generate", help="one reply to a prompt")
    generate.add_argument("prompt", nargs="?", help="the prompt (default: read standard input)")
    _add_model_options(generate)
    _add_generation_options(generate)
    generate.add_argument("--raw", action="store_true", help="send PROMPT as plain text, no chat template")
    generate.add_argument("--samples", type=int, default=1, help="N independent replies (sample i uses seed S+i)")
    generate.add_argument("--json", action="store_true", help="one JSON object per reply per line")
    generate.add_argument("--stats-stdout", action="store_true", help=argparse.SUPPRESS)
    generate.set_defaults(func=cmd_generate)

    chat = sub.add_parser("chat", help="an interactive conversation in the terminal")
    _add_model_options(chat)
    _add_generation_options(chat)
    chat.set_defaults(func=cmd_chat)

    doctor = sub.add_parser("doctor", help="can this draft pair with this verifier, and if not, why")
    doctor.add_argument("--verifier", required=True, metavar="SPEC")
    doctor.add_argument("--draft", required=True, metavar="SPEC")
    doctor.add_argument("--device", default="cpu")
    doctor.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    doctor.add_argument("--trust-remote-code", action="store_true")
    doctor.set_defaults(func=cmd_doctor)

    try:
        from specdec_core import bench
    except ImportError:
        bench = None  # type: ignore[assignment]
    if bench is not None:
        bench.add_parser(sub, _add_model_options, _add_generation_options)
    return parser


def _error(message: str) -> int:
    global _progress_drawn
    if _progress_drawn:  # finish the progress bar's line so the error starts a line of its own
        sys.stderr.write("\n")
        _progress_drawn = False
    # One line, whatever the message quotes (a line break, a carriage return or an escape code in an
    # argument would split it or redraw the terminal): such characters are shown escaped.
    message = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from specdec_core.threads import prefer_passive_waiting

    prefer_passive_waiting()  # before torch loads: idle OpenMP threads sleep rather than spin
    parser = build_parser()
    try:
        for i, arg in enumerate(sys.argv[1:] if argv is None else argv):
            _checked_text(arg, f"argument {i + 1}")
        args = parser.parse_args(argv)
    except UsageError as error:
        return _error(str(error))
    try:
        return int(args.func(args) or 0)
    except IncompatiblePairError as error:
        return _error(f"the draft cannot be paired with this verifier: {error}")
    except (SpecdecError, ConfigError) as error:
        return _error(str(error))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as error:  # a full disk, a read-only or missing folder: the system's own words
        return _error(str(error))
    except Exception as error:
        # A bug, not bad input; SPECDEC_DEBUG=1 shows the traceback.
        if os.environ.get("SPECDEC_DEBUG"):
            raise
        _error(f"unexpected {type(error).__name__}: {error} (a bug in specdec; SPECDEC_DEBUG=1 shows where)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
