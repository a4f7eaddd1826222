"""Chat templates rendered in a child process, where a time and memory limit hold whatever the template does.

A limit checked from inside the rendering process (a profile hook, a counter) only sees Python calls; a
Jinja loop over a long string or one huge allocation makes none, so the template could hang the app or
take all its memory. Here the template runs in a persistent child Python that renders with transformers'
own sandboxed renderer (the same text as `apply_chat_template`): the parent waits at most the time limit
for each answer and kills the child past it; the child's address space is capped (RLIMIT_AS, where the
system has it), so a huge allocation is a MemoryError there, not here. A killed child is replaced on the
next render. The child ignores Ctrl-C (the terminal sends it to the whole process group).

Protocol: one JSON object per line each way. Request: {"template", "messages", "variables", "max_chars"}.
Answer: {"text"} or {"error", "kind"} with kind "refused" (the template's error), "memory" or "output".
The child writes one {"ready": true} line once its imports are done.

Run as a script (`python template_process.py MEMORY_LIMIT`), this file is the child.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass

STARTUP_LIMIT_S = 120.0  # importing transformers' renderer in the child: ~0.5 s, far more on busy cores


class OverLimit(Exception):
    """The child did not answer within the time limit (it has been killed) or stopped."""


@dataclass(frozen=True)
class Rendered:
    text: str | None
    error: str | None = None
    kind: str | None = None  # "refused", "memory" or "output"


class TemplateProcess:
    """One persistent child renderer; `render` is thread-safe (renders are serialised)."""

    def __init__(self, memory_limit: int) -> None:
        self.memory_limit = memory_limit
        self._proc: subprocess.Popen | None = None
        self._answers: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._ready = False

    def start(self) -> None:
        """Start the child without waiting for it (its imports overlap with whatever the caller does next)."""
        with self._lock:
            self._ensure_started()

    def render(self, template: str, messages: list, variables: dict, max_chars: int, time_limit: float) -> Rendered:
        request = json.dumps({"template": template, "messages": messages, "variables": variables,
                              "max_chars": max_chars}) + "\n"
        with self._lock:
            self._ensure_started()
            self._wait_ready()
            try:
                self._proc.stdin.write(request.encode("utf-8", "surrogatepass"))
                self._proc.stdin.flush()
            except OSError:  # the child died between renders
                self._stop()
                raise OverLimit("crashed its renderer") from None
            answer = self._next_answer(time_limit)
            if answer is None:
                self._stop()
                raise OverLimit("crashed its renderer (out of memory?)")
            if "text" in answer:
                return Rendered(text=answer["text"])
            return Rendered(text=None, error=answer.get("error", "?"), kind=answer.get("kind", "refused"))

    def close(self) -> None:
        with self._lock:
            self._stop()

    # ---- the child ----------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._answers = queue.Queue()
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(self.memory_limit)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._ready = False
        threading.Thread(target=_read_lines, args=(self._proc.stdout, self._answers), daemon=True,
                         name="template-answers").start()

    def _wait_ready(self) -> None:
        if self._ready:
            return
        answer = self._next_answer(STARTUP_LIMIT_S)
        if not answer or not answer.get("ready"):
            self._stop()
            raise OverLimit("could not start its renderer")
        self._ready = True

    def _next_answer(self, timeout: float) -> dict | None:
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            self._stop()
            raise OverLimit(f"took longer than {timeout:g} s") from None
        return json.loads(line) if line else None

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


def _read_lines(stream, answers: queue.Queue) -> None:
    """The child's answers, one line each; b"" (end of file) once it has gone."""
    for line in iter(stream.readline, b""):
        answers.put(line)
    answers.put(b"")


# ---- the child's side ---------------------------------------------------------------------------------


def _limit_memory(extra: int) -> None:
    """Cap the address space at what the imports left mapped plus `extra` bytes (Linux; elsewhere no-op)."""
    try:
        import resource

        with open("/proc/self/status") as status:
            size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + extra, size + extra))
    except (ImportError, OSError, ValueError, StopIteration):
        pass


def _answer(out, payload: dict) -> None:
    out.write(json.dumps(payload).encode("utf-8", "surrogatepass") + b"\n")
    out.flush()


def _serve(memory_limit: int) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from transformers.utils.chat_template_utils import render_jinja_template

    _limit_memory(memory_limit)
    out = sys.stdout.buffer
    _answer(out, {"ready": True})
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            rendered, _ = render_jinja_template(conversations=[request["messages"]],
                                                chat_template=request["template"], add_generation_prompt=True,
                                                **request["variables"])
            text = rendered[0]
            if not isinstance(text, str):
                payload = {"error": f"produced {type(text).__name__}, not text", "kind": "refused"}
            elif len(text) > request["max_chars"]:
                payload = {"error": f"{len(text):,}", "kind": "output"}
            else:
                payload = {"text": text}
            del rendered, text
        except MemoryError:
            payload = {"error": "ran out of memory", "kind": "memory"}
        except Exception as error:  # jinja2.TemplateError (raise_exception), or any error inside the template
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            payload = {"error": message, "kind": "refused"}
        try:
            _answer(out, payload)
        except MemoryError:
            _answer(out, {"error": "ran out of memory", "kind": "memory"})


if __name__ == "__main__":
    # Run as a script, this file's folder leads sys.path: drop it, so that specdec_core's module names
    # (config, events, ...) cannot shadow what transformers imports.
    sys.path.pop(0)
    _serve(int(sys.argv[1]))
