"""Workers that run the core's Qt-free code on threads and report back through Qt signals.

The superqt pattern (see superqt.utils.thread_worker): the work is a plain generator or function with
no Qt in it; a worker runs it on a thread, emits each yielded value on a typed signal, reports an
exception on `errored`, and always ends with `finished`. Abort is cooperative: `abort()` sets a flag
checked at every yield and calls the engine's `Controls.cancel()` so a generation stops within a round.

Why not superqt's GeneratorWorker itself: it runs on the global QThreadPool, whose teardown waits for
every runnable, so closing the window during a 30 s model load would hang for 30 s. These workers run
on daemon Python threads (Qt adopts them for signal delivery, which is queued to the GUI thread), so
the app can always exit within the 2 s the spec allows; `wait_all()` gives running work that long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication

from app.session import Cancelled  # raised by the work (Qt-free), or by `progress` after an abort
from specdec_core.errors import SpecdecError


def error_text(exc: BaseException) -> str:
    """A user-facing sentence for an exception a worker reported (our own errors carry one already)."""
    if isinstance(exc, SpecdecError):
        return str(exc)
    name = type(exc).__name__
    msg = str(exc).strip()
    if "out of memory" in msg.lower() or name == "OutOfMemoryError":
        return ("The device ran out of memory. Try a smaller model, dtype float16/bfloat16, fewer max new "
                f"tokens, or the CPU. ({msg.splitlines()[0] if msg else name})")
    return f"{name}: {msg}" if msg else name


_live: set[BaseWorker] = set()  # workers keep themselves alive until `finished` has been emitted
_live_lock = threading.Lock()


class BaseWorker(QObject):
    started = Signal()
    errored = Signal(object)  # the exception
    finished = Signal()  # always last, after success, error or abort

    def __init__(self, name: str = "worker") -> None:
        super().__init__()
        self.name = name
        self._abort = threading.Event()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()

    # -- control ------------------------------------------------------------------------------------
    def start(self) -> None:
        with _live_lock:
            _live.add(self)
        self._thread = threading.Thread(target=self._run, name=f"specdec-{self.name}", daemon=True)
        self._thread.start()

    def abort(self) -> None:
        self._abort.set()

    @property
    def abort_requested(self) -> bool:
        return self._abort.is_set()

    @property
    def is_running(self) -> bool:
        return self._thread is not None and not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the work has ended; True if it did within `timeout` seconds."""
        if self._thread is None:
            return True
        return self._done.wait(timeout)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        self.started.emit()
        error: BaseException | None = None
        try:
            self.work()
        except Cancelled:
            pass
        except Exception as exc:  # noqa: BLE001 - reported to the user, never swallowed silently
            # After an abort, whatever the work raised on its way out (a loader wrapping our Cancelled
            # in its own error, say) is the cancellation, not a failure to report: unless the error says it
            # must be said all the same (app.host.Unresponsive: a decoding process ended for not stopping).
            if not self._abort.is_set() or getattr(exc, "reported_after_abort", False):
                error = exc
        finally:
            self._done.set()
            self._end(error)

    def _end(self, error: BaseException | None) -> None:
        """Report the end (on the worker thread; the signals are queued to the GUI thread) and let go."""
        if error is not None:
            self.errored.emit(error)
        self.finished.emit()
        with _live_lock:
            _live.discard(self)

    def work(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


_END = object()  # in an EventWorker's queue: the work has ended (with the error that follows it, or None)


class EventWorker(BaseWorker):
    """Runs a generator of engine events; each one is emitted on `event`, on the GUI thread.

    `make_events` is called on the worker thread, so building the prompt (tokenising) happens there too.
    `on_abort` (typically `controls.cancel`) is called from `abort()` so the engine stops mid-reply.

    What the window costs the decoding thread per token: the worker thread only appends each event to a
    queue. It wakes the GUI thread once per batch (when the queue was empty); the GUI thread then waits
    BATCH_MS, so events pile up, and emits them all in order. A queued signal per event would wake the GUI
    thread (and make the two threads trade the GIL) for every token. `errored` and `finished` go through the
    same queue, so they always arrive after the last event.

    `polled=True`: the worker never wakes the GUI thread for events; its owner calls `deliver()` from a timer
    it runs anyway (the window's flush), so a reply costs the decoding thread one GIL hand-over per tick
    instead of three (a wake-up, the batch timer, the tick). Every hand-over, on a busy machine, can leave the
    decoding thread waiting for a core. The end still arrives on its own, at once.
    """

    BATCH_MS = 25  # under the window's 40 ms flush, so a batch is ready for every flush

    event = Signal(object)
    _posted = Signal()  # worker thread -> GUI thread: the queue has events again
    _ended = Signal()  # worker thread -> GUI thread: the work has ended; deliver what is queued now

    def __init__(self, make_events: Callable[[], Iterator[Any]], *, on_abort: Callable[[], None] | None = None,
                 name: str = "generate", polled: bool = False) -> None:
        from PySide6.QtCore import QTimer

        super().__init__(name)
        self._make_events = make_events
        self._on_abort = on_abort
        self._polled = polled
        self._queue: list[Any] = []
        self._queue_lock = threading.Lock()
        self._batch = QTimer(self)
        self._batch.setSingleShot(True)
        self._batch.setInterval(self.BATCH_MS)
        self._batch.timeout.connect(self._deliver)
        self._posted.connect(self._batch.start)  # queued: emitted on the worker thread
        self._ended.connect(self._deliver)

    def _push(self, *items: Any) -> None:
        with self._queue_lock:
            first = not self._queue
            self._queue.extend(items)
        if first and not self._polled:
            self._posted.emit()

    def _end(self, error: BaseException | None) -> None:
        with self._queue_lock:
            self._queue.extend((_END, error))
        self._ended.emit()  # delivered at once (not after a batch's wait), after every event, by _deliver

    def deliver(self) -> None:
        """On the GUI thread: emit the events queued so far, in order (a polled worker's owner calls this on
        its timer; the end, which follows the last event, is left for the worker to deliver at once)."""
        with self._queue_lock:
            end = next((i for i, item in enumerate(self._queue) if item is _END), len(self._queue))
            items, self._queue = self._queue[:end], self._queue[end:]
        for item in items:
            self.event.emit(item)

    def _deliver(self) -> None:
        """On the GUI thread: emit every queued event in order, then the end if it has come."""
        self._batch.stop()
        with self._queue_lock:
            items, self._queue = self._queue, []
        it = iter(items)
        for item in it:
            if item is _END:
                super()._end(next(it))
                return
            self.event.emit(item)

    def abort(self) -> None:
        super().abort()
        if self._on_abort is not None:
            self._on_abort()

    def work(self) -> None:
        gen = self._make_events()
        try:
            for ev in gen:
                self._push(ev)
                # The engine sees the cancel through Controls and ends with Finished(CANCELLED); keep
                # reading so that final event arrives. Without an on_abort hook, stop at this yield.
                if self._abort.is_set() and self._on_abort is None:
                    break
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                close()


class FunctionWorker(BaseWorker):
    """Runs `fn(progress, cancelled)`; its return value arrives on `returned`.

    `progress(obj)` emits `progress` (safe from the thread); `cancelled()` says whether to stop. If the
    work calls `progress` after an abort, `progress` raises `Cancelled`, which ends it quietly: this is
    how model loading (which reports progress as it goes) becomes cancellable.
    """

    progress = Signal(object)
    returned = Signal(object)

    def __init__(self, fn: Callable[..., Any], *, name: str = "task") -> None:
        super().__init__(name)
        self._fn = fn

    def _progress(self, value: Any) -> None:
        if self._abort.is_set():
            raise Cancelled()
        self.progress.emit(value)

    def work(self) -> None:
        result = self._fn(self._progress, self._abort.is_set)
        if self._abort.is_set():
            raise Cancelled()
        self.returned.emit(result)


def live_workers() -> list[BaseWorker]:
    with _live_lock:
        return [w for w in _live if w.is_running]


def abort_all() -> None:
    for w in live_workers():
        w.abort()


def wait_all(timeout: float) -> bool:
    """Abort every running worker and wait up to `timeout` seconds in total; True if all ended."""
    deadline = time.monotonic() + timeout
    abort_all()
    for w in live_workers():
        if not w.wait(max(0.0, deadline - time.monotonic())):
            return False
    return True


def shutdown_clean(timeout: float = 1.5) -> bool:
    """Abort every worker and wait for them; used by main() before the interpreter exits."""
    ok = wait_all(timeout)
    QApplication.processEvents()
    return ok
