"""llama.cpp beside specdec: the bench's llama.cpp lanes, run through llama.cpp's own `llama-server`.

`specdec bench --llama-cpp PATH` runs two more lanes after ours: llama.cpp alone on the GGUF file our verifier was
loaded from, and llama.cpp with the draft's GGUF file (`--model-draft`), at our thread count, with our sampling
settings, on the same prompts. The prompts go to llama.cpp as token ids built by our chat template
(bench.chat_prompts), so both engines read the same tokens; its /apply-template would format them with its own
reading of the template, which may differ from ours. Each lane starts its own server on 127.0.0.1, asks
/completion for each prompt, reads the server's own timings, and stops the server when it ends, whatever happens.

Boundary: no torch, no Qt. The caller hands over token ids and file paths, and gets back a dict for the bench's
JSON; a lane that cannot run says why in one line (`skipped` or `failed`) instead of ending the bench.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec_core.errors import SpecdecError

SERVER_NAME = "llama-server"
ALONE, WITH_DRAFT = "llama.cpp alone", "llama.cpp + draft"
PROMPT_FORMAT = "our chat template's token ids, sent as /completion's prompt"
# The /metrics counters of speculation (llama-server --metrics): drafted, accepted, and verification steps.
_METRICS = {"drafted": "llamacpp:spec_decode_num_draft_tokens_total",
            "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
            "steps": "llamacpp:spec_decode_num_drafts_total"}


class LlamaCppError(SpecdecError):
    pass


@dataclass(frozen=True)
class LaneSettings:
    threads: int  # -t and -tb: the thread count our lanes ran with
    max_new_tokens: int  # /completion's n_predict
    repeats: int = 1
    draft_max: int = 4  # the draft lane's --spec-draft-n-max: our gamma, so both draft as many tokens a round
    temperature: float = 0.0  # 0: greedy, as ours
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    warmup_tokens: int = 16  # one short reply before the timed ones (first calls allocate and pick kernels)
    start_timeout_s: float = 300.0  # loading a large file from a cold disk on a busy machine
    request_timeout_s: float = 900.0  # one reply; generous, since a wrong answer here only ends one lane


@dataclass(frozen=True)
class Completion:
    """One reply, as llama-server timed it (its `timings`) and as our clock saw the request."""

    text: str
    new_tokens: int  # timings.predicted_n
    decode_s: float  # timings.predicted_ms: the tokens after the prompt
    prompt_s: float  # timings.prompt_ms
    wall_s: float  # the HTTP request, prompt included
    drafted: int | None = None  # timings.draft_n: only when the server drafted
    accepted: int | None = None  # timings.draft_n_accepted


def find_server(path: str | os.PathLike) -> Path:
    """`PATH` of --llama-cpp: a llama-server binary, or a build folder holding one (in it, bin/ or build/bin/)."""
    given = Path(path).expanduser()
    candidates = [given] if given.is_file() else [given / SERVER_NAME, given / "bin" / SERVER_NAME,
                                                  given / "build" / "bin" / SERVER_NAME]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    if given.is_file():
        raise LlamaCppError(f"--llama-cpp: {given} is not executable")
    raise LlamaCppError(f"--llama-cpp: no {SERVER_NAME} in {given} (nor in its bin/ or build/bin/): pass a llama.cpp "
                        "build folder or the binary (scripts/build_llama_cpp.sh builds one)")


def server_version(binary: Path) -> str:
    """The first line of `llama-server --version` that names the version ("" when it says nothing)."""
    try:
        run = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (run.stdout + "\n" + run.stderr).splitlines()
    return next((line.strip() for line in lines if line.strip().startswith("version")), "")


def parse_completion(body: Any, wall_s: float) -> Completion:
    """/completion's answer -> its reply and timings; an answer without them is an error, not a zero."""
    timings = body.get("timings") if isinstance(body, dict) else None
    try:
        new_tokens, decode_ms = int(timings["predicted_n"]), float(timings["predicted_ms"])
        prompt_ms = float(timings.get("prompt_ms", 0.0))
    except (TypeError, KeyError, ValueError):
        raise LlamaCppError(f"{SERVER_NAME} answered without timings (predicted_n, predicted_ms): "
                            f"{str(body)[:200]}") from None
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    return Completion(text=str(body.get("content", "")), new_tokens=new_tokens, decode_s=decode_ms / 1e3,
                      prompt_s=prompt_ms / 1e3, wall_s=wall_s,
                      drafted=int(drafted) if drafted is not None else None,
                      accepted=int(accepted) if accepted is not None else None)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> the speculation counters of _METRICS that it holds."""
    wanted = {metric: key for key, metric in _METRICS.items()}
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            try:
                out[wanted[name]] = float(value)
            except ValueError:
                continue
    return out


def free_port() -> int:
    """A port no one listens on now (the OS's choice); the server binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """One llama-server process on 127.0.0.1, started by `with` and always stopped when the block ends."""

    def __init__(self, binary: Path, model: Path, settings: LaneSettings, context: int, draft: Path | None = None):
        self.binary, self.model, self.draft = binary, model, draft
        self.settings, self.context = settings, context
        self.port = 0
        self.process: subprocess.Popen | None = None
        self._log = None

    def command(self) -> list[str]:
        threads = str(self.settings.threads)
        command = [str(self.binary), "--model", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
                   "--threads", threads, "--threads-batch", threads, "--ctx-size", str(self.context),
                   "--parallel", "1", "--metrics"]
        if self.draft is not None:
            # --spec-type: a plain model's GGUF names no kind of speculation, and without one the server (0.94.0's
            # sources) loads the draft and never drafts.
            command += ["--model-draft", str(self.draft), "--spec-type", "draft-simple", "--threads-draft", threads,
                        "--threads-batch-draft", threads, "--spec-draft-n-max", str(self.settings.draft_max)]
        return command

    def __enter__(self) -> LlamaServer:
        self.port = free_port()
        self._log = tempfile.TemporaryFile(mode="w+", prefix="llama-server-")
        try:
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self._log,
                                            stderr=subprocess.STDOUT)
        except OSError as error:
            self._log.close()
            raise LlamaCppError(f"could not start {self.binary}: {error}") from None
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self) -> None:
        """Poll /health until it answers 200 (503 while the model loads), the process ends, or time runs out."""
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = self.process.returncode if self.process is not None else None
                raise LlamaCppError(f"{SERVER_NAME} ended while starting (exit code {code}): {self.log_tail()}")
            try:
                self._request("GET", "/health", None, timeout=5.0)
                return
            except (LlamaCppError, OSError):
                time.sleep(0.1)
        raise LlamaCppError(f"{SERVER_NAME} was not ready within {self.settings.start_timeout_s:.0f} s: "
                            f"{self.log_tail()}")

    def __exit__(self, *exc) -> None:
        """Stop the server: ask politely, then insist."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self) -> str:
        """The last line the server printed (llama.cpp says why it stopped there)."""
        if self._log is None:
            return "no output"
        self._log.flush()
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().splitlines() if line.strip()]
        return lines[-1][:300] if lines else "no output"

    def _request(self, method: str, path: str, payload: dict | None, timeout: float) -> bytes:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            raise LlamaCppError(f"{SERVER_NAME} answered {path} with HTTP {error.code}: "
                                f"{error.read()[:200].decode(errors='replace')}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            ended = self.process is not None and self.process.poll() is not None
            raise LlamaCppError(f"{SERVER_NAME} ended during {path}: {self.log_tail()}" if ended else
                                f"{SERVER_NAME} gave no answer to {path} within {timeout:.0f} s: {reason}") from None

    def complete(self, prompt: Sequence[int], n_predict: int) -> Completion:
        """One reply to `prompt` (token ids), from an empty cache as ours start, timed by the server."""
        s = self.settings
        payload = {"prompt": list(prompt), "n_predict": n_predict, "cache_prompt": False, "stream": False,
                   "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": 0.0,
                   "repeat_penalty": 1.0, "seed": s.seed}
        start = time.perf_counter()
        raw = self._request("POST", "/completion", payload, timeout=s.request_timeout_s)
        wall = time.perf_counter() - start
        try:
            body = json.loads(raw)
        except ValueError:
            raise LlamaCppError(f"{SERVER_NAME} answered /completion with something other than JSON: "
                                f"{raw[:200].decode(errors='replace')}") from None
        return parse_completion(body, wall)

    def metrics(self) -> dict[str, float]:
        """The speculation counters so far ({} when the server keeps none)."""
        try:
            return parse_metrics(self._request("GET", "/metrics", None, timeout=30.0).decode(errors="replace"))
        except LlamaCppError:
            return {}


# --------------------------------------------------------------------------- the lanes


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _rate(tokens: float, seconds: float) -> float | None:
    return tokens / seconds if seconds > 0 else None


def lane_figures(replies: list[list[Completion]], repeats: int) -> dict[str, Any]:
    """`replies[prompt][repeat]` -> the lane's figures, computed as bench.py's are: the median over repeats of
    the prompt set's totals."""
    totals = [[replies[p][r] for p in range(len(replies))] for r in range(repeats)]

    def per_repeat(tokens: Callable[[Completion], float], seconds: Callable[[Completion], float]) -> float | None:
        return _median([rate for run in totals
                        if (rate := _rate(sum(map(tokens, run)), sum(map(seconds, run)))) is not None])

    everything = [reply for row in replies for reply in row]
    drafted = [reply.drafted for reply in everything if reply.drafted is not None]
    accepted = sum(reply.accepted or 0 for reply in everything)
    return {
        "tokens_per_s": per_repeat(lambda c: c.new_tokens, lambda c: c.decode_s),
        "end_to_end_tokens_per_s": per_repeat(lambda c: c.new_tokens, lambda c: c.wall_s),
        "new_tokens": int(_median([sum(c.new_tokens for c in run) for run in totals]) or 0),
        "prefill_s_per_reply": _median([c.prompt_s for c in everything]),
        "drafted": sum(drafted) if drafted else None,
        "accepted": accepted if drafted else None,
        "acceptance_rate": accepted / sum(drafted) if drafted and sum(drafted) else None,
    }


def _prompt_rows(names: Sequence[str], replies: list[list[Completion]], ours: Sequence[str] | None) -> list[dict]:
    rows = []
    for p, name in enumerate(names):
        first = replies[p][0]
        row = {"name": name, "new_tokens": first.new_tokens,
               "tokens_per_s": _median([rate for c in replies[p] if (rate := _rate(c.new_tokens, c.decode_s))]),
               "text": first.text}
        if ours is not None:  # greedy: the same model should say the same; kernels' rounding may part them
            row["same_text_as_ours"] = first.text.strip() == ours[p].strip()
        rows.append(row)
    return rows


def _speculation(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Verification steps and tokens per step over the timed replies, from the /metrics counters."""
    if not all(key in before and key in after for key in _METRICS):
        return {}
    steps = after["steps"] - before["steps"]
    accepted = after["accepted"] - before["accepted"]
    return {"verify_steps": int(steps), "mean_accepted_length": 1.0 + accepted / steps if steps else None}


def run_lane(lane: str, binary: Path, model: Path, draft: Path | None, prompts: Sequence[Sequence[int]],
             names: Sequence[str], settings: LaneSettings, ours: Sequence[str] | None = None,
             say: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """One lane: start a server, warm it up, time every prompt `repeats` times, stop it."""
    context = max(len(p) for p in prompts) + settings.max_new_tokens + settings.draft_max + 16
    replies: list[list[Completion]] = [[] for _ in prompts]
    say(f"{lane}: starting {SERVER_NAME} on {model.name}" + (f" with {draft.name}" if draft else ""))
    with LlamaServer(binary, model, settings, context, draft) as server:
        server.complete(prompts[0], min(settings.warmup_tokens, settings.max_new_tokens))
        before = server.metrics()
        for repeat in range(settings.repeats):
            for p, prompt in enumerate(prompts):
                say(f"{lane}: repeat {repeat + 1}/{settings.repeats}, prompt {p + 1}/{len(prompts)}")
                replies[p].append(server.complete(prompt, settings.max_new_tokens))
        after = server.metrics()
    result = {"lane": lane, "model": str(model), "draft": str(draft) if draft else None,
              **lane_figures(replies, settings.repeats)}
    if draft is not None:
        result.update(draft_max=settings.draft_max, **_speculation(before, after))
    result["per_prompt"] = _prompt_rows(names, replies, ours)
    return result


@dataclass(frozen=True)
class LaneModels:
    """The GGUF files the lanes run, or why a lane cannot run."""

    verifier: Path | None
    draft: Path | None
    verifier_skip: str = ""  # why the verifier has no GGUF file ("" when it has)
    draft_skip: str = ""


def lane_models(verifier_spec: str, draft_spec: str | None, cache_dir: Path) -> LaneModels:
    """The verifier's and draft's GGUF files, as our loader finds them (specs.gguf_file)."""
    from specdec_core.loading.specs import gguf_file

    verifier = gguf_file(verifier_spec, cache_dir)
    verifier_skip = "" if verifier else f"the verifier {verifier_spec!r} is not a GGUF file"
    if draft_spec is None:
        return LaneModels(verifier, None, verifier_skip, "no draft model (the drafter copies from the prompt)")
    draft = gguf_file(draft_spec, cache_dir) if verifier else None
    draft_skip = verifier_skip or ("" if draft else f"the draft {draft_spec!r} is not a GGUF file")
    return LaneModels(verifier, draft, verifier_skip, draft_skip)


def run_llama_cpp(binary: Path, models: LaneModels, prompts: Sequence[Sequence[int]], names: Sequence[str],
                  settings: LaneSettings, ours: Sequence[str] | None = None,
                  say: Callable[[str], None] = lambda message: None, alone_threads: Sequence[int] = ()
                  ) -> dict[str, Any]:
    """Both lanes, one after the other; each that cannot run says why in `skipped` or `failed`. `alone_threads`: other
    thread counts to run llama.cpp alone at too (its lane then named with the count), where its best may lie
    elsewhere than at our count (a small model on a 2-CPU machine runs faster on one thread than on two beside the
    server's own)."""
    out: dict[str, Any] = {"server": str(binary), "version": server_version(binary), "prompt_format": PROMPT_FORMAT,
                           "threads": settings.threads, "lanes": []}
    counts = [settings.threads, *sorted({t for t in alone_threads if t != settings.threads})]
    plan = [(ALONE, None, models.verifier_skip, t) for t in counts]
    plan.append((WITH_DRAFT, models.draft, models.draft_skip, settings.threads))
    for lane, draft, skip, threads in plan:
        if threads != settings.threads:
            lane = f"{lane}, {threads} thread{'s' if threads > 1 else ''}"
        if skip or models.verifier is None:
            say(f"{lane}: skipped, {skip}")
            out["lanes"].append({"lane": lane, "skipped": skip})
            continue
        try:
            result = run_lane(lane, binary, models.verifier, draft, prompts, names,
                              dataclasses.replace(settings, threads=threads), ours, say)
            out["lanes"].append({**result, "threads": threads})
        except LlamaCppError as error:
            say(f"{lane}: failed, {error}")
            out["lanes"].append({"lane": lane, "failed": str(error)})
    return out
