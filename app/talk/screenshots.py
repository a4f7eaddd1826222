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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.talk.screenshots")
    p.add_argument("--out", default="docs/screenshots")
    p.add_argument("--verifier", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--gif", action="store_true", help="also save the replay of the first rounds as a GIF")
    p.add_argument("--save-trace", metavar="PATH", help="write the reply's trace JSON here")
    args = p.parse_args(argv)
    _screen_config()
    os.environ.setdefault("SPECDEC_DATA_DIR", tempfile.mkdtemp(prefix="specdec-shots-"))

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.settings import Settings
    from app.store import ConversationStore
    from app.talk import install_talk_mode
    from app.talk.export import export_gif, export_png
    from app.talk.rounds import Beat
    from app.window import MainWindow
    from app.worker import shutdown_clean

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def wait(signal, timeout_s: float) -> list:
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

    def settle(ms: int = 300) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

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
    wait(window.models_loaded, 600)
    settle(200)
    window.composer.setPlainText(args.prompt)
    window.send_from_composer()
    (trace,) = wait(window.reply_finished, 600)
    if args.save_trace:
        Path(args.save_trace).write_text(json.dumps(trace.to_dict()), encoding="utf-8")
    print(f"reply: {trace.summary()}", flush=True)

    # 1. presenter mode, on the 1920x1080 screen
    talk.presenter.set_active(True)
    settle(600)
    export_png(window, out / "presenter-mode.png")

    # 2. a replay frame: a round with drafts, on its verify and resolve beats
    dlg = talk.open_replay(trace)
    assert dlg is not None
    settle(400)
    replay = dlg.replay
    steps = replay.state.steps
    rounds = replay.state.rounds

    def resolve_of(k: int) -> int:
        return next(i for i, s in enumerate(steps) if s.round == k and s.beat is Beat.RESOLVE)

    # the most instructive round: some drafts accepted and some rejected; else any with a rejection
    drafted = [k for k, story in enumerate(rounds) if story.drafted]
    mixed = [k for k in drafted if rounds[k].n_accepted and rounds[k].first_rejected is not None]
    rejected = [k for k in drafted if rounds[k].first_rejected is not None]
    accepted = [k for k in drafted if rounds[k].first_rejected is None]
    k = max(mixed, key=lambda j: len(rounds[j].drafted), default=None)
    if k is None:
        k = rejected[-1] if rejected else (drafted[0] if drafted else 0)
    replay.seek(resolve_of(k))
    settle(200)
    export_png(dlg, out / "replay-resolve.png")
    if accepted:
        best = max(accepted, key=lambda j: len(rounds[j].drafted))
        replay.seek(resolve_of(best))
        settle(200)
        export_png(dlg, out / "replay-accepted.png")
    draft_beat = next((i for i, s in enumerate(steps) if s.round == k and s.beat is Beat.DRAFT and s.i == 1),
                      None)
    if draft_beat is not None:
        replay.seek(draft_beat)
        settle(200)
        export_png(dlg, out / "replay-draft.png")
    verify = next((i for i, s in enumerate(steps) if s.round == k and s.beat is Beat.VERIFY), None)
    if verify is not None:
        replay.seek(verify)
        settle(200)
        export_png(dlg, out / "replay-verify.png")
    if args.gif:
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
    dlg.close()

    # 3. the race (and what makes it slow, and the explainer)
    rdlg = talk.open_race()
    assert rdlg is not None
    (result,) = wait(rdlg.view.finished, 600)
    settle(400)
    export_png(rdlg, out / "race.png")
    print(f"race: {result.headline() if result else 'did not finish'}; identical={result and result.identical}",
          flush=True)
    rdlg.close()
    settle(200)

    edlg = talk.open_explainer()
    settle(300)
    export_png(edlg, out / "explainer.png")
    edlg.close()

    sdlg = talk.open_slow_demo()
    if sdlg is not None:
        (res,) = wait(sdlg.view.finished, 600)
        settle(400)
        export_png(sdlg, out / "slow-demo.png")
        print("slow demo: " + ", ".join(f"{k} {v[0]:.1f} tok/s α {v[1]:.0%} {v[2]:.2f}×" for k, v in res.items()),
              flush=True)
        sdlg.close()

    ddlg = talk.open_draft_alone()
    if ddlg is not None:
        wait(ddlg.view.finished, 600)
        settle(300)
        export_png(ddlg, out / "draft-alone.png")
        ddlg.close()

    talk.presenter.set_active(False)
    window.close()
    shutdown_clean(1.5)
    print(f"screenshots in {out}", flush=True)
    sys.stderr.flush()
    # Leave without interpreter teardown: Qt objects would be destroyed in no particular order.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
