"""Screenshots of every step of Talk ▸ Run the demo, made by the app itself on a real screen (Xvfb on a server):

    DISPLAY=:99 python -m app.talk.demo_shots --out shots/1280x800 [--verifier SPEC] [--draft SPEC]
                                              [--web-page PATH] [--max-new-tokens N]

Opens the main window on the embedded pair by default, full screen in presenter mode, runs the demo, and saves the
screen once each step has its result (step-1-alone.png ... step-8-llama.png). --web-page also writes what the demo
recorded as the web page of Talk ▸ Export as web page.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def settle(ms: int) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def wait_for(condition, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError(f"no {what} after {timeout_s:g} s")
        settle(100)


def grab_screen(widget, path: Path) -> None:
    """The whole screen as the room sees it (the widget alone where the platform cannot grab the screen)."""
    from PySide6.QtGui import QGuiApplication

    pixmap = QGuiApplication.primaryScreen().grabWindow(0)
    if pixmap.isNull() or pixmap.width() == 0:
        pixmap = widget.grab()
    pixmap.save(str(path), "PNG")


def open_window(args):
    from PySide6.QtGui import QGuiApplication

    from app.settings import Settings
    from app.store import ConversationStore
    from app.window import MainWindow

    settings = Settings()
    if args.verifier:
        settings.verifier = args.verifier
    if args.draft:
        settings.draft, settings.drafter = args.draft, "model"
    settings.calibrate = False  # the demo compares with its own step 1, not with the calibration
    window = MainWindow(settings, ConversationStore(), persist_settings=False)
    window.setGeometry(QGuiApplication.primaryScreen().availableGeometry())
    window.show()
    loaded: list = []
    window.models_loaded.connect(lambda *a: loaded.append(a))
    window.loader.load()
    wait_for(lambda: bool(loaded), 900, "models loaded")
    wait_for(lambda: window.busy == "", 120, "idle window")
    return window


def run_demo(window, out: Path, step_timeout_s: float, max_new_tokens: int | None = None) -> None:
    from PySide6.QtGui import QGuiApplication

    from app.talk.demo_script import STEPS

    window.talk.presenter.set_active(True)
    settle(500)
    dialog = window.talk.open_demo(max_new_tokens)
    if dialog is None:
        raise RuntimeError(window.status_label.toolTip() or window.status_label.text())
    dialog.setGeometry(QGuiApplication.primaryScreen().availableGeometry())  # no window manager maximises it
    view = dialog.view
    for index, step in enumerate(STEPS):
        wait_for(lambda i=index: i in view.pages and view.pages[i].finished, step_timeout_s, f"step {index + 1}")
        if step.key == "round":  # the replay plays its round's beats, then holds at the round's end
            wait_for(lambda i=index: not view.pages[i].playing, 60, "the round's replay")
        settle(600)
        path = out / f"step-{index + 1}-{step.key}.png"
        grab_screen(dialog, path)
        page = view.pages[index]
        print(f"{path}: {view.headline.text()}" + (f" · error: {page.error}" if page.error else ""), flush=True)
        view.next()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.talk.demo_shots")
    p.add_argument("--out", default="shots")
    p.add_argument("--verifier", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--web-page", metavar="PATH", help="also write the recorded demo as a web page")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="each step's reply length (default: the talk's, 64); shorter on a busy machine")
    p.add_argument("--step-timeout", type=float, default=900.0, help="seconds each step may take (default 900)")
    args = p.parse_args(argv)
    os.environ.setdefault("SPECDEC_DATA_DIR", tempfile.mkdtemp(prefix="specdec-demo-shots-"))
    from PySide6.QtWidgets import QApplication

    from app.worker import shutdown_clean

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    window = open_window(args)
    run_demo(window, out, args.step_timeout, args.max_new_tokens)
    if args.web_page:
        print(f"web page: {window.talk.export_web_page(args.web_page)}", flush=True)
    window.close()
    shutdown_clean(1.5)
    sys.stdout.flush()
    os._exit(0)  # without interpreter teardown: Qt objects would be destroyed in no particular order


if __name__ == "__main__":
    raise SystemExit(main())
