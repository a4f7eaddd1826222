"""Save a replay as an animated GIF (Pillow) or MP4 (ffmpeg, when present), and widgets as PNG.

Frames are grabbed from the replay widget itself, one per beat, held for as long as the beat lasts
at the replay's speed; nothing is re-implemented for the export, so the file shows exactly what the
room would see.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QWidget

MP4_FPS = 25


def qimage_to_pil(image: QImage):
    """A QImage as a Pillow RGB image (copied, so the QImage may go)."""
    from PIL import Image

    img = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = img.width(), img.height(), img.bytesPerLine()
    data = bytes(img.constBits())[: stride * h]
    return Image.frombuffer("RGB", (w, h), data, "raw", "RGB", stride, 1).copy()


def replay_frames(replay, *, max_width: int = 1280) -> Iterator[tuple[QImage, int]]:
    """(frame, milliseconds) for every beat of the replay, from the first to the last.

    The replay is paused and left where it was before the export."""
    replay.pause()
    before = replay.state.index
    if not replay.isVisible():
        replay.resize(replay.size().expandedTo(replay.sizeHint()))
        if replay.layout() is not None:
            replay.layout().activate()
    try:
        for i in range(len(replay.state)):
            replay.seek(i)
            QApplication.processEvents()
            image = replay.grab().toImage()
            if image.width() > max_width:
                image = image.scaledToWidth(max_width, Qt.TransformationMode.SmoothTransformation)
            yield image, replay.beat_ms(replay.state.step)
    finally:
        replay.seek(before)


def export_gif(replay, path: str | Path, *, max_width: int = 1100) -> int:
    """Write an animated GIF with one frame per beat; returns the number of frames."""
    frames, durations = [], []
    for image, ms in replay_frames(replay, max_width=max_width):
        frames.append(qimage_to_pil(image))
        durations.append(ms)
    if not frames:
        raise RuntimeError("this reply has no rounds to replay")
    durations[-1] = max(durations[-1], 3000)  # hold the last frame before the loop restarts
    frames[0].save(str(path), save_all=True, append_images=frames[1:], duration=durations, loop=0,
                   optimize=False, disposal=1)
    return len(frames)


def ffmpeg_exe() -> str | None:
    exe = shutil.which("ffmpeg")
    if exe:
        return exe
    try:
        import imageio_ffmpeg  # type: ignore[import-not-found]

        return imageio_ffmpeg.get_ffmpeg_exe()
    except Exception:  # noqa: BLE001 - not installed, or its binary is missing
        return None


def mp4_available() -> bool:
    return ffmpeg_exe() is not None


def export_mp4(replay, path: str | Path, *, max_width: int = 1280) -> int:
    """Write an H.264 MP4 (needs ffmpeg); returns the number of beats written."""
    exe = ffmpeg_exe()
    if exe is None:
        raise RuntimeError("MP4 export needs ffmpeg: install it, or `pip install imageio-ffmpeg`; GIF works without")
    proc = None
    n = 0
    try:
        for image, ms in replay_frames(replay, max_width=max_width):
            img = image.convertToFormat(QImage.Format.Format_RGB888)
            w, h = img.width() // 2 * 2, img.height() // 2 * 2
            img = img.copy(0, 0, w, h)
            if proc is None:
                proc = subprocess.Popen(
                    [exe, "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
                     "-r", str(MP4_FPS), "-i", "-", "-pix_fmt", "yuv420p", "-c:v", "libx264", str(path)],
                    stdin=subprocess.PIPE)
            row = w * 3
            raw = bytes(img.constBits())
            data = b"".join(raw[y * img.bytesPerLine(): y * img.bytesPerLine() + row] for y in range(h))
            assert proc.stdin is not None
            for _ in range(max(1, round(ms * MP4_FPS / 1000))):
                proc.stdin.write(data)
            n += 1
    finally:
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            proc.wait(60)
    if proc is None or proc.returncode != 0:
        raise RuntimeError("ffmpeg could not write the MP4")
    return n


def export_replay(replay, path: str | Path) -> int:
    return export_mp4(replay, path) if str(path).lower().endswith(".mp4") else export_gif(replay, path)


def export_png(widget: QWidget, path: str | Path, scale: float = 1.0) -> bool:
    """A PNG of `widget` as drawn (graphs included); `scale` > 1 for sharper slides."""
    pixmap = widget.grab()
    if scale != 1.0:
        pixmap = pixmap.scaled(int(pixmap.width() * scale), int(pixmap.height() * scale),
                               Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
    return pixmap.save(str(path), "PNG")
