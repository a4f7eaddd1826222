"""`specdec-chat`: the desktop app's entry point, with flags for automation (tests, README screenshot).

    specdec-chat [--verifier SPEC] [--draft SPEC] [--drafter model|prompt-lookup|hybrid] [--prompt TEXT]
                 [--race] [--screenshot PATH] [--quit-when-done] [--timeout S] [--data-dir DIR]

With --prompt the prompt is sent once the models are loaded; --race then races speculation off vs on;
--screenshot saves a PNG of the whole window once the reply (and race) are finished and the graphs drawn;
--quit-when-done exits with 0, or 1 with the error on stderr if anything failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

EXIT_OK, EXIT_FAIL = 0, 1

MAX_TIMEOUT_S = (2**31 - 1) // 1000  # a Qt timer counts milliseconds in a signed 32-bit int: about 24 days


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 <= value <= MAX_TIMEOUT_S):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be from 0 (no limit) to {MAX_TIMEOUT_S:,} seconds (got {text})")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _utf8_text(text: str) -> str:
    """Arguments that are not UTF-8 reach Python with surrogate escapes; such text could never be saved."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("is not valid UTF-8 text") from None
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="specdec-chat", description="A chat window that shows speculative "
                                "decoding as it happens.")
    p.add_argument("--verifier", metavar="SPEC", help="embedded name, model folder, .gguf file or hub id")
    p.add_argument("--draft", metavar="SPEC", help="draft model (implies --drafter model)")
    p.add_argument("--drafter", choices=["model", "prompt-lookup", "hybrid"],
                   help="who drafts: a draft model, copies from the conversation, or copies where they exist and "
                   "the draft model elsewhere (default: settings)")
    p.add_argument("--device", help="auto, cpu, cuda, mps")
    p.add_argument("--dtype", help="auto, float32, bfloat16, float16")
    p.add_argument("--prompt", type=_utf8_text, metavar="TEXT", help="send this prompt once the models are loaded")
    p.add_argument("--max-new-tokens", type=_positive_int, metavar="N", help="override the reply length")
    p.add_argument("--race", action="store_true", help="after the reply, race speculation off against on")
    p.add_argument("--no-speculation", action="store_true", help="start with speculation off")
    p.add_argument("--screenshot", metavar="PATH", help="save a PNG of the window when done")
    p.add_argument("--quit-when-done", action="store_true", help="exit when done (status 0, or 1 on error)")
    p.add_argument("--timeout", type=_seconds, default=0.0, metavar="S",
                   help=f"fail if not done after S seconds (0: no limit; at most {MAX_TIMEOUT_S:,} s)")
    p.add_argument("--data-dir", metavar="DIR", help="where conversations and settings live")
    p.add_argument("--size", default="", metavar="WxH",
                   help="window size (default: 1480x900, or the screen's available area if smaller)")
    p.add_argument("--close-mid-reply", type=int, default=0, metavar="N",
                   help="close the window once the reply has N tokens, as a user quitting mid-reply would "
                   "(prints when; the partial reply is saved)")
    return p.parse_args(argv)


def _settings_from_flags(args: argparse.Namespace, settings: Any) -> bool:
    """Apply the model and generation flags to `settings` (app.settings.Settings); True if any was given."""
    overrides = False
    if args.verifier:
        settings.verifier, overrides = args.verifier, True
    if args.draft:
        settings.draft, settings.drafter, overrides = args.draft, "model", True
    if args.drafter:
        settings.drafter, overrides = args.drafter, True
    if args.device:
        settings.device, overrides = args.device, True
    if args.dtype:
        settings.dtype, overrides = args.dtype, True
    if args.max_new_tokens:
        settings.max_new_tokens, overrides = args.max_new_tokens, True
    if args.no_speculation:
        settings.speculate, overrides = False, True
    return overrides


class _Automation:
    """What the automation flags make of the window's signals: the exit status (1 once anything failed), the
    screenshot once done, the race after the reply, a close mid-reply."""

    def __init__(self, args: argparse.Namespace, app: Any, window: Any) -> None:
        self.args, self.app, self.window = args, app, window
        self.code, self.errors, self.done = EXIT_OK, [], False

    def connect(self) -> None:
        w, args = self.window, self.args
        w.load_failed.connect(self.fail)
        w.error_shown.connect(lambda msg: self.fail(msg) if args.quit_when_done and w.busy != "load" else None)
        w.reply_finished.connect(self.on_reply)
        w.race_finished.connect(self.on_race)
        w.models_loaded.connect(self.on_loaded)
        if args.close_mid_reply > 0:
            w.generation_event.connect(self.maybe_close)

    def fail(self, message: str) -> None:
        self.errors.append(message)
        if self.args.quit_when_done and not self.done:
            self.done = True
            print(f"specdec-chat: {message}", file=sys.stderr, flush=True)
            self.code = EXIT_FAIL
            self.finish(screenshot=bool(self.args.screenshot))

    def finish(self, screenshot: bool = True) -> None:
        from PySide6.QtCore import QTimer

        QTimer.singleShot(300, lambda: self._shoot_and_quit(screenshot))  # let the last flush and repaint land

    def _shoot_and_quit(self, screenshot: bool) -> None:
        args, window = self.args, self.window
        window.flush()
        self.app.processEvents()
        if screenshot and args.screenshot:
            if not window.grab().save(args.screenshot, "PNG"):
                print(f"specdec-chat: could not write {args.screenshot}", file=sys.stderr, flush=True)
                self.code = EXIT_FAIL
            else:
                print(f"screenshot saved to {args.screenshot}", flush=True)
        if args.quit_when_done:
            window.close()
            self.app.exit(self.code)

    def on_reply(self, trace: Any) -> None:
        if self.done:
            return
        if trace.error or trace.stop_reason == "error":
            self.fail(f"generation failed: {trace.error}")
            return
        if self.args.race:
            self.window.racer.race()
            return
        self.done = True
        self.finish()

    def on_race(self, text: str) -> None:
        if self.done:
            return
        self.done = True
        print(f"race: {text}", flush=True)
        self.finish()

    def on_loaded(self, session: Any) -> None:
        if not session.verdict_ok:  # the app goes on with the verifier alone, but the run failed
            print(f"specdec-chat: {session.verdict}", file=sys.stderr, flush=True)
            self.code = EXIT_FAIL
        if not self.args.prompt and (self.args.quit_when_done or self.args.screenshot) and not self.done:
            self.done = True
            self.finish()

    def maybe_close(self, _ev: object) -> None:
        trace = self.window.graphs.live.trace
        if not self.done and trace is not None and len(trace.tokens) >= self.args.close_mid_reply:
            self.done = True
            import time

            print(f"closing mid-reply at {time.time():.3f} with {len(trace.tokens)} tokens", flush=True)
            self.window.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:  # before torch loads: idle OpenMP threads sleep instead of spinning against the GUI thread
        from specdec_core.commands.threads import prefer_passive_waiting

        prefer_passive_waiting()
    except ImportError:
        pass
    if args.data_dir:
        os.environ["SPECDEC_DATA_DIR"] = args.data_dir

    from PySide6.QtCore import QRect, QTimer
    from PySide6.QtWidgets import QApplication

    from app import gc_pin
    from app.settings import Settings
    from app.store import ConversationStore
    from app.window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("specdec")
    app.setApplicationDisplayName("specdec")
    app.setStyle("Fusion")
    gc_pin.freeze_what_is_loaded()  # before the window: no collection walks the modules (app/gc_pin.py)

    store = ConversationStore()
    settings = Settings.load(store.root)
    overrides = _settings_from_flags(args, settings)
    # One-off flags must not overwrite the user's saved settings.
    window = MainWindow(settings, store, persist_settings=not overrides)
    try:
        w, h = (int(x) for x in args.size.lower().split("x"))
        window.fit_to(QRect(0, 0, w, h))  # that size, with the docks shared out as on a screen of that size
    except ValueError:
        window.fit_to()  # the default size, or the screen's available area where that is smaller
    window.show()
    run = _Automation(args, app, window)
    run.connect()
    if args.timeout > 0:
        QTimer.singleShot(int(args.timeout * 1000), lambda: run.fail(f"not done after {args.timeout:g} s"))
    QTimer.singleShot(0, window.loader.load)
    QTimer.singleShot(0, window.found_offers.refresh)  # the models found here, offered in the settings
    if args.prompt:
        QTimer.singleShot(0, lambda: window.send(args.prompt))
    _exit(app.exec() or run.code, store, window)


def _exit(code: int, store: Any, window: Any) -> NoReturn:
    from app.worker import shutdown_clean

    shutdown_clean(0.2)  # delivers a reply's last events (its Finished is saved), closeEvent waited 0.3 s
    store.close()  # finish the store's queued background writes before the process ends
    if any(store.save_failed(conv_id) for conv_id in window.conversations.lost):  # a chat lost (said on stderr)
        code = EXIT_FAIL
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is saved (conversations and settings are written as they change, the store's queue is
    # finished above). Interpreter teardown (torch, Qt objects, a worker still inside a long torch call) takes
    # seconds and saves nothing, so the process ends here: quitting takes well under a second.
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
