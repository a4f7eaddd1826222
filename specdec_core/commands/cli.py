"""`specdec`: generate, chat, doctor and bench from the terminal, on the engine's event stream.

Bad input gets one line on stderr starting with "error:" and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterable, Iterator
from typing import TextIO

from specdec_core.commands.cli_options import (
    UsageError,
    add_generation_options,
    add_model_options,
    config_from_args,
    load_from_args,
    progress_bar,
    progress_state,
)
from specdec_core.config import GenerationConfig
from specdec_core.errors import ConfigError, IncompatiblePairError, SpecdecError
from specdec_core.events import Event, Finished, RoundVerified, TokenCommitted, TokenRejected, TokenState, Verdict

ANSI = {
    TokenState.ACCEPTED: "\x1b[32m",  # green
    TokenState.REJECTED: "\x1b[31;9m",  # red, struck through
    TokenState.CORRECTED: "\x1b[33m",  # amber
    TokenState.BONUS: "\x1b[34m",  # blue
    TokenState.PLAIN: "",
}
RESET = "\x1b[0m"
LEGEND = "\x1b[32maccepted\x1b[0m \x1b[31;9mrejected\x1b[0m \x1b[33mcorrected\x1b[0m \x1b[34mbonus\x1b[0m plain"


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one `error:` line (main() prints it), not usage + error."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


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


def stats_line(finished: Finished, weights: str = "") -> str:
    """The figures of one reply on one line; `weights`: what the verifier's weights ran as (LoadedModel.weights)."""
    s = finished.stats
    parts = [f"{s.new_tokens} tokens in {s.decode_s:.2f} s ({s.tokens_per_s:.1f} tok/s)",
             f"{s.rounds} verifier calls"]
    if s.drafted:
        parts += [f"acceptance {s.acceptance_rate:.0%} ({s.accepted}/{s.drafted})",
                  f"{s.mean_accepted_length:.2f} tokens/call",
                  f"draft {s.draft_s:.2f} s"
                  + (f" (+{s.hidden_draft_s:.2f} s beside the prefill)" if s.hidden_draft_s >= 0.005 else "")
                  + f", verify {s.verify_s:.2f} s, c={s.c:.2f}",
                  f"predicted speedup {s.predicted_speedup:.2f}x"]
    parts.append(f"stop: {finished.stop_reason.value}")
    if weights:
        parts.append(f"verifier weights {weights}")
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
                           "draft_s": event.draft_s, "verify_s": event.verify_s,
                           "verify_rows": event.rows,  # positions the verifier's pass fed (0: none ran)
                           # a draft tree: every node checked in the round's one pass (empty for a chain)
                           "tree": [_node_json(n) for n in event.tree]})
            if any(v.draft_source for v in event.drafted):  # a draft with another tokenizer: its own token(s)
                rounds[-1]["draft_sources"] = [v.draft_source for v in event.drafted]
    return {"text": finished.text, "token_ids": list(finished.token_ids), "stop_reason": finished.stop_reason.value,
            "error": finished.error, "rounds": rounds, "stats": finished.stats.to_dict()}


def _node_json(node: Verdict) -> dict:
    out = {"parent": node.parent, "token_id": node.token_id, "draft_prob": node.draft_prob,
           "target_prob": node.target_prob, "accept_prob": node.accept_prob, "accepted": node.accepted}
    if node.draft_source:  # a draft with another tokenizer: the draft's own token(s) this node was mapped from
        out["draft_source"] = node.draft_source
    return out


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
    from specdec_core.text.chat import build_prompt, raw_prompt

    config = config_from_args(args)
    if args.samples < 1:
        raise UsageError(f"--samples must be at least 1 (got {args.samples})")
    text = _read_prompt(args)
    pair = load_from_args(args)
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
            print(json.dumps({**reply_json(collected), "verifier_weights": pair.verifier.weights}), flush=True)
        else:
            collected = list(render(events, sys.stdout, color))
            sys.stdout.write("\n")
            print(stats_line(collected[-1], pair.verifier.weights),
                  file=sys.stderr if not args.stats_stdout else sys.stdout, flush=True)
        finished = collected[-1]
        assert isinstance(finished, Finished)
        if finished.error:
            print(f"error: {finished.error}", file=sys.stderr)
            status = 1
    return status


def cmd_chat(args) -> int:
    config = config_from_args(args)
    pair = load_from_args(args)
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
    from specdec_core.text.chat import build_prompt

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
    from specdec_core.loading.models import load_model
    from specdec_core.pairs.doctor import check_models

    load = dict(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                progress=progress_bar())
    verifier = load_model(args.verifier, **load)
    draft = load_model(args.draft, **load)
    verdict = check_models(verifier, draft, weigh_mass=True)  # another tokenizer: weigh the verifier's probability
    print(verdict.report())
    return 0 if verdict.compatible else 1


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specdec", description="Speculative decoding you can see.")
    sub = parser.add_subparsers(dest="command", required=True)

    generate = sub.add_parser("generate", help="one reply to a prompt")
    generate.add_argument("prompt", nargs="?", help="the prompt (default: read standard input)")
    add_model_options(generate)
    add_generation_options(generate)
    generate.add_argument("--raw", action="store_true", help="send PROMPT as plain text, no chat template")
    generate.add_argument("--samples", type=int, default=1, help="N independent replies (sample i uses seed S+i)")
    generate.add_argument("--json", action="store_true", help="one JSON object per reply per line")
    generate.add_argument("--stats-stdout", action="store_true", help=argparse.SUPPRESS)
    generate.set_defaults(func=cmd_generate)

    chat = sub.add_parser("chat", help="an interactive conversation in the terminal")
    add_model_options(chat)
    add_generation_options(chat)
    chat.set_defaults(func=cmd_chat)

    doctor = sub.add_parser("doctor", help="can this draft pair with this verifier, and if not, why")
    doctor.add_argument("--verifier", required=True, metavar="SPEC")
    doctor.add_argument("--draft", required=True, metavar="SPEC")
    doctor.add_argument("--device", default="cpu")
    doctor.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    doctor.add_argument("--trust-remote-code", action="store_true")
    doctor.set_defaults(func=cmd_doctor)

    from specdec_core.commands import bench_cli, models_cli

    bench_cli.add_parser(sub)
    models_cli.add_parser(sub)
    return parser


def _error(message: str) -> int:
    if progress_state.drawn:  # finish the progress bar's line so the error starts a line of its own
        sys.stderr.write("\n")
        progress_state.drawn = False
    # One line, whatever the message quotes (a line break, a carriage return or an escape code in an
    # argument would split it or redraw the terminal): such characters are shown escaped.
    message = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)
    print(f"error: {message}", file=sys.stderr)
    return 2


class _Terminated(BaseException):
    """SIGTERM, raised where the process is so that clean-ups run (a partial download, a progress line)."""


def _terminate(signum: int, _frame: object) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    raise _Terminated()


def _output_gone() -> None:
    """After a broken pipe: later writes (the interpreter's last flush) go nowhere instead of failing again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def _check_outputs(args: argparse.Namespace) -> None:
    """A file an option names as output (--json OUT, --plot PNG) must be writable before a run, not after it."""
    from pathlib import Path

    for option in ("json", "plot"):
        target = getattr(args, option, None)
        if not isinstance(target, str) or target == "-":
            continue
        path = Path(target)
        if path.is_dir():
            raise UsageError(f"--{option} {target}: that is a folder; name a file in it")
        if not path.parent.is_dir():
            raise UsageError(f"--{option} {target}: the folder {path.parent} does not exist")
        if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise UsageError(f"--{option} {target}: it cannot be written here")


def main(argv: list[str] | None = None) -> int:
    from specdec_core.commands.threads import prefer_passive_waiting

    prefer_passive_waiting()  # before torch loads: idle OpenMP threads sleep rather than spin
    if sys.stderr is None:  # started with 2>&-: errors go nowhere rather than into the output
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    if sys.stdout is None:  # started with >&-
        _error("standard output is closed, so nothing could be written (redirect it to a file or /dev/null)")
        return 1
    parser = build_parser()
    try:
        for i, arg in enumerate(sys.argv[1:] if argv is None else argv):
            _checked_text(arg, f"argument {i + 1}")
        args = parser.parse_args(argv)
        _check_outputs(args)
    except UsageError as error:
        return _error(str(error))
    on_term = _on_sigterm()
    try:
        return _run(args)
    finally:
        if on_term is not None:
            signal.signal(signal.SIGTERM, on_term)


def _on_sigterm() -> object:
    """Install the SIGTERM handler (only the main thread may); returns the one it replaced, None if none was."""
    try:
        return signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # main() called from another thread
        return None


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except IncompatiblePairError as error:
        return _error(f"the draft cannot be paired with this verifier: {error}")
    except (SpecdecError, ConfigError) as error:
        return _error(str(error))
    except KeyboardInterrupt:
        # A second Ctrl-C while this one unwinds (or during the exit's clean-up) would otherwise print a
        # traceback: from here on the process is leaving anyway.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("\ninterrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print("\nterminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except BrokenPipeError:  # the reader left (`| head`): as a filter killed by SIGPIPE
        _output_gone()
        return 128 + getattr(signal, "SIGPIPE", 13)
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
