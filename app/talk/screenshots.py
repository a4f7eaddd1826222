"""Screenshots of talk mode made by the app itself: presenter mode, a replay frame, the race, and more.

    python -m app.talk.screenshots [--out docs/screenshots] [--verifier SPEC] [--draft SPEC]
                                   [--prompt TEXT] [--max-new-tokens N] [--gif]

Runs the real main window on the embedded pair by default (the verifier with prompt lookup), sends
the prompt, then opens each talk view through the Talk menu's own controller and grabs it. Offscreen
(QT_QPA_PLATFORM=offscreen) it renders on a virtual 1920×1080 screen, the size of a projector.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

DEFAULT_PROMPT = ("Repeat this list exactly, then add one more animal in the same style: "
                  "the red fox runs, the grey wolf howls, the brown bear sleeps.")


def _screen_config() -> None:
    if os.environ.get("QT_QPA_PLATFORM", "") == "offscreen":
        cfg = Path(tempfile.gettempdir()) / "specdec-offscreen-1080p.json"
        cfg.write_text(json.dumps({"screens": [{"name": "projector", "x": 0, "y": 0, "width": 1920,
                                                "height": 1080, "logicalDpi": 96, "dpr": 1}]}))
        os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={cfg}"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app.talk.screenshots")
    p.add_argument("--out", default="docs/screenshots")
    p.add_argument("--verifier", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--gif", action="store_true", help="also save the replay of the first rounds as a GIF")
    p.add_argument("--save-trace", metavar="PATH", help="write the reply's trace JSON here")
    return p.parse_args(argv)


def _wait(signal, timeout_s: float) -> list:
    """The arguments of `signal`'s next emission (the event loop runs meanwhile); TimeoutError after timeout_s."""
    from PySide6.QtCore import QEventLoop, QTimer

    got: list = []
    loop = QEventLoop()

    def done(*a):
        got.append(a)
        loop.quit()
    signal.connect(done)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(done)
    if not got:
        raise TimeoutError(f"no {signal} after {timeout_s:g} s")
    return list(got[0])


def _settle(ms: int = 300) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    _screen_config()
    os.environ.setdefault("SPECDEC_DATA_DIR", tempfile.mkdtemp(prefix="specdec-shots-"))

    from PySide6.QtWidgets import QApplication

    from app.talk.export import export_png
    from app.worker import shutdown_clean

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    window, talk, trace = _window_with_a_reply(args)

    # 1. presenter mode, on the 1920x1080 screen
    talk.presenter.set_active(True)
    _settle(600)
    export_png(window, out / "presenter-mode.png")
    _shoot_replay(talk, trace, out, args.gif)  # 2. a replay frame: a round with drafts, beat by beat
    _shoot_race_and_demos(talk, out)  # 3. the race (and what makes it slow, and the explainer)

    talk.presenter.set_active(False)
    window.close()
    shutdown_clean(1.5)
    print(f"screenshots in {out}", flush=True)
    sys.stderr.flush()
    # Leave without interpreter teardown: Qt objects would be destroyed in no particular order.
    os._exit(0)


def _window_with_a_reply(args: argparse.Namespace) -> tuple:
    """The real main window on the pair the flags name, its talk mode, and the trace of the prompt's reply."""
    from app.settings import Settings
    from app.store import ConversationStore
    from app.talk import install_talk_mode
    from app.window import MainWindow

    settings = Settings()
    if args.verifier:
        settings.verifier = args.verifier
    if args.draft:
        settings.draft, settings.drafter = args.draft, "model"
    settings.max_new_tokens = args.max_new_tokens
    settings.calibrate = True
    window = MainWindow(settings, ConversationStore(), persist_settings=False)
    talk = install_talk_mode(window)
    window.resize(1600, 950)
    window.show()
    window.loader.load()
    _wait(window.models_loaded, 600)
    _settle(200)
    window.composer.setPlainText(args.prompt)
    window.send_from_composer()
    (trace,) = _wait(window.reply_finished, 600)
    if args.save_trace:
        Path(args.save_trace).write_text(json.dumps(trace.to_dict()), encoding="utf-8")
    print(f"reply: {trace.summary()}", flush=True)
    return window, talk, trace


def _instructive_round(rounds: list) -> tuple[int, list[int]]:
    """The most instructive round (some drafts accepted and some rejected; else any with a rejection), and the
    rounds whose drafts were all accepted."""
    drafted = [k for k, story in enumerate(rounds) if story.drafted]
    mixed = [k for k in drafted if rounds[k].n_accepted and rounds[k].first_rejected is not None]
    rejected = [k for k in drafted if rounds[k].first_rejected is not None]
    accepted = [k for k in drafted if rounds[k].first_rejected is None]
    k = max(mixed, key=lambda j: len(rounds[j].drafted), default=None)
    if k is None:
        k = rejected[-1] if rejected else (drafted[0] if drafted else 0)
    return k, accepted


def _shoot_replay(talk, trace, out: Path, gif: bool) -> None:
    """A replay frame on the resolve beat of the most instructive round, of a fully accepted round, and the
    draft and verify beats; with `gif`, the first rounds as a GIF."""
    from app.talk.export import export_png
    from app.talk.rounds import Beat

    dlg = talk.open_replay(trace)
    assert dlg is not None
    _settle(400)
    replay = dlg.replay
    steps = replay.state.steps
    k, accepted = _instructive_round(replay.state.rounds)

    def resolve_of(k: int) -> int:
        return next(i for i, s in enumerate(steps) if s.round == k and s.beat is Beat.RESOLVE)

    shots = [(resolve_of(k), "replay-resolve.png")]
    if accepted:
        shots.append((resolve_of(max(accepted, key=lambda j: len(replay.state.rounds[j].drafted))),
                      "replay-accepted.png"))
    shots.append((next((i for i, s in enumerate(steps) if s.round == k and s.beat is Beat.DRAFT and s.i == 1),
                       None), "replay-draft.png"))
    shots.append((next((i for i, s in enumerate(steps) if s.round == k and s.beat is Beat.VERIFY), None),
                  "replay-verify.png"))
    for index, name in shots:
        if index is not None:
            replay.seek(index)
            _settle(200)
            export_png(dlg, out / name)
    if gif:
        _replay_gif(trace, out)
    dlg.close()


def _replay_gif(trace, out: Path) -> None:
    from app.talk.export import export_gif
    from app.talk.replay import ReplayWidget
    from app.trace import ReplyTrace

    short = ReplyTrace.from_dict(trace.to_dict())
    keep = sorted({t.round for t in short.tokens})[:6]
    short.tokens = [t for t in short.tokens if t.round in keep]
    short.rounds = [r for r in short.rounds if r.index in keep]
    w = ReplayWidget(short)
    w.resize(1280, 760)
    w.show()
    n = export_gif(w, out / "replay.gif", max_width=960)
    print(f"replay.gif: {n} frames", flush=True)
    w.close()


def _shoot_race_and_demos(talk, out: Path) -> None:
    """The race, the explainer, the slow-drafts demo and what the draft writes alone."""
    from app.talk.export import export_png

    rdlg = talk.open_race()
    assert rdlg is not None
    (result,) = _wait(rdlg.view.finished, 600)
    _settle(400)
    export_png(rdlg, out / "race.png")
    print(f"race: {result.headline() if result else 'did not finish'}; identical={result and result.identical}",
          flush=True)
    rdlg.close()
    _settle(200)
    edlg = talk.open_explainer()
    _settle(300)
    export_png(edlg, out / "explainer.png")
    edlg.close()
    sdlg = talk.open_slow_demo()
    if sdlg is not None:
        (res,) = _wait(sdlg.view.finished, 600)
        _settle(400)
        export_png(sdlg, out / "slow-demo.png")
        print("slow demo: " + ", ".join(f"{k} {v[0]:.1f} tok/s α {v[1]:.0%} {v[2]:.2f}×" for k, v in res.items()),
              flush=True)
        sdlg.close()
    ddlg = talk.open_draft_alone()
    if ddlg is not None:
        _wait(ddlg.view.finished, 600)
        _settle(300)
        export_png(ddlg, out / "draft-alone.png")
        ddlg.close()


if __name__ == "__main__":
    raise SystemExit(main())
