"""Issue 56: the CLI's streams and signals (a closed stdout, a reader that leaves, SIGTERM) and numeric options
bounded where they are read. Each ends in at most one line and a conventional exit code, never a message about a
bug in specdec."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from specdec_core.commands import models_cli
from specdec_core.commands.cli import main

POSIX = pytest.mark.skipif(os.name != "posix", reason="POSIX streams and signals")


def specdec(*args: str, **popen) -> subprocess.CompletedProcess:
    """`specdec ARGS` in a process of its own, with this checkout first on its path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "specdec_core.commands.cli", *args], env=env, stderr=subprocess.PIPE,
                          text=True, timeout=120, **popen)


def no_bug(err: str) -> bool:
    return "a bug in specdec" not in err and "Traceback" not in err and "Exception ignored" not in err


@POSIX
def test_a_closed_stdout_is_one_line_and_exit_1(tmp_path):
    """Issue 56: `specdec generate ... >&-` said `unexpected AttributeError: 'NoneType' object has no attribute
    'isatty'` as a bug in specdec."""
    done = specdec("generate", "Hi", "--verifier", str(tmp_path / "none"), preexec_fn=lambda: os.close(1))
    assert done.returncode == 1 and no_bug(done.stderr)
    assert done.stderr.strip().splitlines() == [
        "error: standard output is closed, so nothing could be written (redirect it to a file or /dev/null)"]


@POSIX
def test_a_reader_that_left_ends_the_command_as_sigpipe_would(tmp_path):
    read, write = os.pipe()
    os.close(read)  # `specdec models list | true`, once `true` has gone
    try:
        done = specdec("models", "--cache-dir", str(tmp_path), "list", stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 128 + signal.SIGPIPE and done.stderr == ""


@POSIX
def test_sigterm_ends_a_command_with_143_and_one_line(tmp_path, capsys, monkeypatch):
    def terminated_midway(_cache):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not end the command")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(models_cli, "list_text", terminated_midway)
    assert main(["models", "--cache-dir", str(tmp_path), "list"]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.strip() == "terminated" and no_bug(err)
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


def test_more_threads_than_the_machine_can_run_are_refused_before_anything_loads(capsys):
    """Issue 56: `--threads 100000` segfaulted."""
    assert main(["bench", "--threads", "100000", "--verifier", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --threads must be from 1 to ") and "100000" in err and no_bug(err)


def test_a_repetition_penalty_that_would_overflow_the_logits_is_refused(capsys):
    """Issue 56: `--repetition-penalty 1e-300` with sampling failed later, blaming the dtype."""
    code = main(["generate", "Hi", "--repetition-penalty", "1e-300", "--temperature", "0.8",
                 "--verifier", "no-such-model"])
    err = capsys.readouterr().err
    assert code == 2 and "repetition penalty must be from 0.01 to 100" in err and "dtype" not in err


@pytest.mark.parametrize("where", ["a folder", "a missing folder"])
def test_a_json_output_that_cannot_be_written_is_refused_before_the_bench_runs(capsys, tmp_path, where):
    """Issue 56: `bench --json DIR` failed only after the whole run."""
    target = tmp_path if where == "a folder" else tmp_path / "missing" / "out.json"
    assert main(["bench", "--json", str(target), "--verifier", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --json {target}: ")
