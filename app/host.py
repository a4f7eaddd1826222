"""The chat's replies and races decoded in a child process, so that the window's own Python does not slow them.

Both threads of one process share the GIL: the decoding thread needs it between almost all of its operations
(a small model's forward pass is hundreds of them, each called from Python), and the GUI thread holds it for
every tick, paint and label it handles in Python. Measured on a 2-core CPU with the embedded default
(bench/ui_latency.py --cli-ab, docs/performance.md, "The headline speedup in three places"): in one process the
window cost the reply 6-10 % of its tokens/s; 3-4 points of it the decoding thread waited for the GIL, the
rest it ran about 5 % slower on the CPU beside the GUI thread's Python. The same window showing a reply decoded
in another process cost it 0 % (±3 % per pair).

The host is forked from the app once the models have loaded, so it shares their weights with the app page
for page (copy on write: weights are only read) instead of loading them a second time. A forked child has
only the thread that forked it; it never touches Qt, only the session's engine, and it freezes what Python's
collector would otherwise walk (the app's Qt objects must never be finalised there, see gc_pin.py).

Forking is safe only under conditions `why_not` checks: Linux, and models on the CPU (a CUDA context does not
survive a fork; macOS does not allow forking a process that runs Cocoa). Elsewhere replies decode in the app's
process, as before. The child runs as many PyTorch threads per pass as the app. An OpenMP thread pool does not
survive a fork: a child forked by a thread that has run a parallel region waits forever for that region's
threads at its own first one. So the app forks from a new thread made for it, which has never run one; the
child's first parallel region then starts a pool of its own. The child checks at start that PyTorch computes in
parallel, and the app waits for that before it sends a reply; a child that does not answer is ended and the app
decodes itself.

The child runs jobs: a reply (app.session.reply_events) or a race (app.runs.race_events), each a
module-level generator of events taking (session, *args, controls), which the caller passes to `run_here` or
`ReplyHost.run` itself. Only the job's import name crosses the pipe (`_name_of`); the forked child has the same
modules and looks it up there, so a job is always a function of the app's own code.

A job's chat template is rendered by the app's own renderer process (chat.py), asked over the pipe: the one
the child inherited belongs to the app, and starting one of its own delayed each child's first reply by a
Python start (~1.4 s on a 2-core AVX2 VM).

What the window changes during a reply reaches the child through two shared bytes: cancel, and speculation on
or off (Ctrl+D), read by the engine at each round. Events come back pickled over a pipe, in order; an error
in the child arrives as the same exception (or, if it cannot be pickled, a SpecdecError with its message).

A child can stop answering without dying (SIGSTOP, a debugger, a suspended or thrashing machine): a thread of
its own writes the time into shared memory every HEARTBEAT_S. A reply whose Stop the child has not honoured
within STOP_WAIT_S, or whose child shows no sign of life for SILENT_S, ends the child and says so
(`Unresponsive`); the reply so far is kept, and the next one decodes in a freshly forked child. A child stopped
halfway through writing a message would block the app's read of it, where the reply's own checks cannot run: a
watchdog thread applies the same limits while the app reads or writes the pipe, and ends the child, which ends
the read.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specdec_core.errors import SpecdecError

OFF_ENV = "SPECDEC_HOST"  # "0": replies decode in the app's own process
READY_TIMEOUT_S = 5.0  # the child's first answer (the GUI waits): it only has to compute two small products
POLL_S = 0.02  # how often the waiting side passes a cancel or a speculation switch on to the child
DRAIN_TIMEOUT_S = 5.0  # a reply abandoned midway: how long to wait for the child to end it
_CANCEL, _SPECULATE = 0, 1  # the shared bytes: cancel (0/1), speculate (-1: the config's, 0 off, 1 on)
HEARTBEAT_S = 0.25  # how often the child's heartbeat thread writes the time
STOP_WAIT_S = 2.0  # after Stop: how long the child has to end the reply before it is ended
# With no Stop: how long a child may show no sign of life. Its heartbeat thread needs only the GIL for a moment
# every HEARTBEAT_S, which a decoding thread in a long forward pass still gives up: silence this long is a stop.
SILENT_S = 15.0


class Unresponsive(SpecdecError):
    """The decoding process stopped answering and was ended. Said even after Stop (app.worker reports it)."""

    reported_after_abort = True


@dataclass(frozen=True)
class _Ready:
    """The child computes: with this many PyTorch threads per pass."""

    threads: int


@dataclass(frozen=True)
class _Ended:
    """After a reply's last event: the decoding thread's CPU seconds and the reply's wall seconds."""

    cpu_s: float
    wall_s: float


@dataclass(frozen=True)
class _Render:
    """From the child mid-job: render this chat template (chat.Renderer.render's arguments) in the app."""

    args: tuple


@dataclass(frozen=True)
class _RenderAnswer:
    """The app's answer to _Render: the Rendered, or why it was over its limits (template_process.OverLimit)."""

    rendered: Any
    over_limit: str | None = None


class _AppRenderer:
    """The child's chat-template renderer: the app's, asked over the pipe (chat.use_renderer). The child never
    starts a renderer process of its own: the one it inherited belongs to the app, and a new one would cost its
    first reply a Python start (~1.4 s on a 2-core AVX2 VM)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def start(self) -> None:
        pass

    def render(self, *args: Any) -> Any:
        from specdec_core.text.template_process import OverLimit

        self._conn.send(_Render(args))
        try:
            answer = self._conn.recv()
        except (EOFError, OSError):
            answer = None
        if not isinstance(answer, _RenderAnswer):  # the app closed the pipe, or sent None to end this process
            raise OverLimit("could not be rendered: the app is closing")
        if answer.over_limit is not None:
            raise OverLimit(answer.over_limit)
        return answer.rendered


def _render_for(conn: Any, request: _Render) -> None:
    """Answer a child's _Render with this process's renderer."""
    from specdec_core.text.chat import template_renderer
    from specdec_core.text.template_process import OverLimit

    try:
        answer = _RenderAnswer(template_renderer().render(*request.args))
    except OverLimit as exc:
        answer = _RenderAnswer(None, str(exc))
    conn.send(answer)


@dataclass(frozen=True)
class _Failed:
    """The reply raised: the exception itself when it pickles, else its message."""

    error: bytes | None
    message: str


# A job: a module-level generator function (session, *args, controls) -> events, e.g. app.session.reply_events.
Job = Callable[..., Iterator[object]]


def _name_of(job: Job) -> str:
    """How the child finds `job`: its import name ("module:function"). The function itself is not pickled: a
    forked child already has the module, and looks the job up there (`_job`)."""
    if "<locals>" in job.__qualname__ or "." in job.__qualname__:
        raise ValueError(f"a job must be a module-level function, not {job.__qualname__}")
    return f"{job.__module__}:{job.__qualname__}"


def _job(name: str) -> Job:
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def run_here(session: Any, job: Job, args: tuple, controls: Any) -> Iterator[object]:
    """The job's events, decoded in this process: what `ReplyHost.run` does in the child."""
    return job(session, *args, controls)


Runner = Callable[[Job, tuple, Any], Iterator[object]]  # (job, args, controls) -> its events: a host's, or run_here


def why_not(session: Any) -> str | None:
    """None if a host can decode this session's replies here; otherwise the reason, in words."""
    if os.environ.get(OFF_ENV, "").strip() == "0":
        return f"turned off ({OFF_ENV}=0)"
    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return "a process running the window can be forked safely only on Linux"

    models = [m for m in (session.verifier, session.draft) if m is not None]
    devices = {str(getattr(m, "device", "cpu")) for m in models}
    if devices - {"cpu"}:
        return f"the models run on {', '.join(sorted(devices - {'cpu'}))}"
    return None


class _SharedControls:
    """The engine's Controls in the child: cancel and speculation read from the bytes the app writes."""

    def __init__(self, flags: Any) -> None:
        self._flags = flags

    @property
    def cancelled(self) -> bool:
        return bool(self._flags[_CANCEL])

    @property
    def speculate(self) -> bool | None:
        value = self._flags[_SPECULATE]
        return None if value < 0 else bool(value)

    def cancel(self) -> None:
        self._flags[_CANCEL] = 1


def _failure(exc: BaseException) -> _Failed:
    # As the window words an error (app.worker.error_text), for one that cannot come back as itself.
    message = str(exc) if isinstance(exc, SpecdecError) else f"{type(exc).__name__}: {exc}".removesuffix(": ")
    try:
        error = pickle.dumps(exc)
        pickle.loads(error)  # an exception whose __init__ takes other arguments does not come back
    except Exception:  # noqa: BLE001 - then its message does
        error = None
    return _Failed(error, message)


def _computes_in_parallel() -> None:
    """Products large enough for PyTorch to split across its threads (a matrix product and an elementwise one):
    where the child inherited a dead thread pool, this is where it would wait forever."""
    import torch

    torch.ones(256, 256) @ torch.ones(256, 256)
    torch.ones(1 << 18).add_(1)


def _beat(heartbeat: Any) -> None:
    """The child's sign of life: the time, in shared memory, every HEARTBEAT_S (the clock is the machine's)."""
    while True:
        heartbeat[0] = time.monotonic()
        time.sleep(HEARTBEAT_S)


def _serve(conn: Any, app_end: Any, session: Any, flags: Any, threads: int, heartbeat: Any) -> None:
    """The child: answer _Ready once PyTorch computes with the app's `threads`, then run each (job, args) it is
    sent, sending back every event and then _Ended (or _Failed). None, or the app gone, ends it."""
    app_end.close()  # the app's end of the pipe, inherited: closed, so that the app's exit reads as EOF here
    threading.Thread(target=_beat, args=(heartbeat,), name="specdec-heartbeat", daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in a terminal is the app's to handle
    gc.freeze()  # the app's objects (its Qt objects among them) are never collected here
    gc.enable()  # the replies' own garbage is
    import torch

    from specdec_core.text.chat import use_renderer

    use_renderer(_AppRenderer(conn))
    torch.set_num_threads(threads)
    _computes_in_parallel()
    conn.send(_Ready(torch.get_num_threads()))
    controls = _SharedControls(flags)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        name, args = job
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            for ev in run_here(session, _job(name), args, controls):
                conn.send(ev)
            conn.send(_Ended(time.thread_time() - cpu, time.perf_counter() - wall))
        except (BrokenPipeError, EOFError):
            return
        except Exception as exc:  # noqa: BLE001 - the app reports it, as it would its own
            conn.send(_failure(exc))


class ReplyHost:
    """A child process that decodes the replies and races of one session (see the module's docstring).

    `start()` forks it (on the GUI thread, with no other work running on the session's models); then
    `run(job, args, controls)` is `run_here` without the session, to call on a worker thread. Once the
    child has died, `alive` is False and `failure` says why; the window then decodes in its own process."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.failure: str | None = None
        self.last_reply: _Ended | None = None  # the decoding thread's CPU and wall seconds (for benchmarks)
        self.threads = 0  # PyTorch's threads per pass in the child, once it has started
        self.unresponsive = False  # ended for not answering: a fresh child may take over (HostKeeper)
        self._process: Any = None
        self._heartbeat: Any = None
        self._conn: Any = None
        self._flags: Any = None
        self._busy = False
        self._closing = threading.Lock()
        self._controls: Any = None  # the running reply's (the watchdog reads its Stop)
        self._stopped_at: float | None = None  # when this side first saw the running reply's Stop
        self._in_pipe = False  # a read or write on the pipe is under way: the watchdog applies the limits
        self._watched_out: str | None = None  # why the watchdog ended the child
        self._watch_end = threading.Event()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive() and self.failure is None

    def start(self) -> bool:
        """Fork the child, from a thread made for it (see the module's docstring), and wait for its first
        answer; False (with `failure` set) if it did not come."""
        import torch

        ctx = multiprocessing.get_context("fork")
        self._flags = ctx.RawArray("b", 2)
        self._heartbeat = ctx.RawArray("d", [time.monotonic()])
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, self._conn, self.session, self._flags,
                                                         torch.get_num_threads(), self._heartbeat),
                                    daemon=True, name="specdec-host")
        forked: list[BaseException] = []
        forker = threading.Thread(target=self._fork, args=(forked,), name="specdec-host-fork")
        forker.start()
        forker.join()
        child.close()
        if forked:
            self._process = None
            self._fail(f"the decoding process could not be started ({forked[0]})")
            return False
        try:
            ready = self._conn.recv() if self._conn.poll(READY_TIMEOUT_S) else None
        except (EOFError, OSError):
            ready = None
        if not isinstance(ready, _Ready):
            self._fail(f"the decoding process did not start within {READY_TIMEOUT_S:g} s")
            return False
        self.threads = ready.threads
        threading.Thread(target=self._watch, name="specdec-host-watchdog", daemon=True).start()
        return True

    def _fork(self, failed: list[BaseException]) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork with threads running
                self._process.start()
        except OSError as exc:  # out of memory or processes
            failed.append(exc)

    def run(self, job: Job, args: tuple, controls: Any) -> Iterator[object]:
        """The job's events as the child decodes them; `controls` (the window's) reach it while it does."""
        name = _name_of(job)
        process = self._process  # close() (on the GUI thread) may let go of it while this thread reads
        if not self.alive:
            if self.failure is None:
                self._fail(f"the decoding process ended (exit code {process.exitcode})")
            raise SpecdecError(f"The reply could not start: {self.failure}. The next one decodes in the app.")
        if self._busy:
            raise SpecdecError("The decoding process is already writing a reply.")
        self._busy, ended = True, False
        self._controls, self._stopped_at = controls, None
        self._pass_controls(controls)
        try:
            self._send((name, args))
            while True:
                self._pass_controls(controls)
                if not self._conn.poll(POLL_S):
                    if not process.is_alive():
                        self._fail(f"the decoding process ended (exit code {process.exitcode})")
                        raise SpecdecError(f"The reply stopped: {self.failure}. The next one decodes in the app.")
                    self._check_answering()
                    continue
                msg = self._recv(process)
                if isinstance(msg, _Render):
                    self._answer(msg)
                    continue
                if isinstance(msg, _Ended):
                    self.last_reply, ended = msg, True
                    return
                if isinstance(msg, _Failed):
                    ended = True
                    raise pickle.loads(msg.error) if msg.error is not None else SpecdecError(msg.message)
                yield msg
        finally:
            if not ended and self.alive:
                self._drain()
            self._busy, self._controls = False, None

    def close(self) -> None:
        """End the child (it finishes nothing: a reply still running is cancelled). The GUI thread and the
        thread of a reply whose child stopped answering may both call this."""
        with self._closing:
            process, self._process = self._process, None
        if process is None:
            return
        self._watch_end.set()
        self._flags[_CANCEL] = 1
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        process.join(1.0)
        if process.is_alive():
            process.kill()  # also ends a stopped process
            process.join(1.0)
        self._conn.close()
        self.failure = self.failure or "closed"

    # -- the pipe ------------------------------------------------------------------------------------
    def _pass_controls(self, controls: Any) -> None:
        """The window's Controls into the bytes the child reads (a cancel is never taken back mid-reply)."""
        speculate = controls.speculate
        self._flags[_SPECULATE] = -1 if speculate is None else int(bool(speculate))
        self._flags[_CANCEL] = int(controls.cancelled)

    def _send(self, obj: Any) -> None:
        try:
            self._conn.send(obj)
        except (OSError, ValueError) as exc:
            self._fail(f"the decoding process cannot be reached ({exc})")
            raise SpecdecError(f"The reply could not start: {self.failure}.") from exc

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        """Around a read or write that may block (on a message the child began and never finished): the watchdog
        applies the limits meanwhile."""
        self._in_pipe = True
        try:
            yield
        finally:
            self._in_pipe = False

    def _recv(self, process: Any) -> Any:
        try:
            with self._watched():
                return self._conn.recv()
        except (EOFError, OSError) as exc:
            if self._watched_out is not None:
                self._end_unresponsive(self._watched_out)
            self._fail(f"the decoding process ended (exit code {process.exitcode})")
            raise SpecdecError(f"The reply stopped: {self.failure}. The next one decodes in the app.") from exc

    def _answer(self, request: _Render) -> None:
        try:
            with self._watched():
                _render_for(self._conn, request)
        except (OSError, ValueError) as exc:
            if self._watched_out is not None:
                self._end_unresponsive(self._watched_out)
            self._fail(f"the decoding process cannot be reached ({exc})")
            raise SpecdecError(f"The reply stopped: {self.failure}. The next one decodes in the app.") from exc

    def _unanswered(self) -> str | None:
        """Why the child is to be ended: it has not honoured Stop within STOP_WAIT_S, or shows no sign of life
        for SILENT_S; None while neither. Called by the reply's thread and the watchdog."""
        controls, now = self._controls, time.monotonic()
        if self._stopped_at is None and controls is not None and controls.cancelled:
            self._stopped_at = now
        stopped_at, silent = self._stopped_at, now - self._heartbeat[0]
        if stopped_at is not None and now - stopped_at >= STOP_WAIT_S:
            return (f"stopped answering (no sign of life for {silent:.0f} s)" if silent > 4 * HEARTBEAT_S else
                    f"did not stop the reply within {STOP_WAIT_S:g} s of Stop")
        if silent >= SILENT_S:
            return f"stopped answering (no sign of life for {silent:.0f} s)"
        return None

    def _check_answering(self) -> None:
        why = self._unanswered()
        if why is not None:
            self._end_unresponsive(why)

    def _end_unresponsive(self, why: str) -> None:
        self._fail(f"the decoding process {why}")
        self.unresponsive = True
        self.close()
        raise Unresponsive(f"The {self.failure}, so it was ended; the reply so far is kept, and the next one "
                           "decodes in a fresh process.")

    def _watch(self) -> None:
        """The watchdog: while the reply's thread is blocked on the pipe, where its own checks cannot run, end a
        child past the limits (its end closes the pipe, so the blocked read returns). Wakes every HEARTBEAT_S."""
        while not self._watch_end.wait(HEARTBEAT_S):
            why = self._unanswered() if self._in_pipe and self._watched_out is None else None
            if why is not None:
                self._watched_out = why
                self._fail(f"the decoding process {why}")

    def _drain(self) -> None:
        """A reply left before its end (its consumer stopped reading): cancel it and read up to its end, so the
        next reply's events do not follow this one's; a child that does not end it in time is ended."""
        self._flags[_CANCEL] = 1
        self._stopped_at = self._stopped_at or time.monotonic()  # a cancel: the watchdog's Stop limit applies
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                if not self._conn.poll(POLL_S):
                    continue
                with self._watched():
                    msg = self._conn.recv()
                    if isinstance(msg, _Render):  # refused: the job is being abandoned
                        self._conn.send(_RenderAnswer(None, "was not rendered: the reply was stopped"))
                if isinstance(msg, (_Ended, _Failed)):
                    return
        except (EOFError, OSError):
            pass
        self._fail("the decoding process did not stop a reply in time")
        self.close()

    def _fail(self, why: str) -> None:
        self.failure = why
        process = self._process
        if process is not None and process.is_alive():
            process.kill()


class HostKeeper:
    """The window's one host: made for the session a reply runs on, made again when that session or the draft
    head it decodes with changes, and not used where `why_not` says so, while the head adapts between replies
    (the child would keep the weights it was forked with), or after it failed once for that session."""

    def __init__(self) -> None:
        self.host: ReplyHost | None = None
        self.note = ""  # where replies decode, as a sentence (the model label's tooltip)
        self._key: tuple | None = None  # the session and head the host was forked with
        self._failed: tuple[tuple, str] | None = None  # the key a host failed for, and why

    def runner(self, session: Any, *, head_version: int = 0, adapting: bool = False) -> Runner:
        """Where the next job on `session`'s models runs: the host's `run`, or `run_here` over `session` in this
        process. Forks on the calling (GUI) thread."""
        key = (id(session), head_version)
        if self.host is not None and (self._key != key or not self.host.alive):
            if self._key == key and not self.host.unresponsive:  # it died: not again for this session and head
                self._failed = (key, self.host.failure or "the decoding process ended")
            self.close()
        reason = "the draft adapts between replies" if adapting else why_not(session)
        if reason is None and self._failed is not None and self._failed[0] == key:
            reason = self._failed[1]
        if reason is None and self.host is None:
            host = ReplyHost(session)
            if host.start():
                self.host, self._key = host, key
            else:
                reason, self._failed = host.failure, (key, host.failure)
                host.close()
        if reason is None:
            threads = self.host.threads
            self.note = (f"Replies and races decode in a process of their own ({threads} PyTorch "
                         f"thread{'s' * (threads > 1)}).")
            return self.host.run
        self.close()
        self.note = f"Replies and races decode in the app's process: {reason}."
        return functools.partial(run_here, session)

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
        self.host, self._key = None, None
