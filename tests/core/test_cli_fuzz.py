"""Property test: whatever the arguments, `specdec` answers with an exit status, never a traceback."""

from __future__ import annotations

import builtins
import io
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_core.commands import cli
from specdec_core.errors import ModelLoadError
from specdec_core.loading import models
from specdec_core.pairs import pairing

FLAGS = ["--verifier", "--draft", "--drafter", "--draft-tokens", "--device", "--dtype", "--device-map",
         "--max-memory", "--gamma", "--confidence-cutoff", "--max-new-tokens", "--temperature", "--top-k",
         "--top-p", "--seed", "--system", "--color", "--samples", "--raw", "--json", "--adaptive",
         "--no-speculation", "--trust-remote-code", "--help-me", "-"]
VALUES = ["0", "-1", "1", "4", "nan", "inf", "-inf", "1e999", "0.5", "9223372036854775808", "auto", "model",
          "hybrid", "prompt-lookup", "cpu", "cuda:7", "float32", "0=lots", "cpu=1MiB", "cpu=8GiB", "", "x" * 300,
          "\udcff", "Hi \udcff", "é", "\x00"]
argument = st.sampled_from(FLAGS) | st.sampled_from(VALUES) | st.text(max_size=6)


class NoModels(Exception):
    pass


@pytest.fixture(autouse=True)
def no_model_loading(monkeypatch):
    """Everything up to loading runs for real; loading stops with the error a missing model gives."""
    def refuse(*args, **kwargs):
        raise ModelLoadError("(fuzzing: no model is loaded)")

    monkeypatch.setattr(pairing, "load_model", refuse)
    monkeypatch.setattr(models, "load_model", refuse)
    monkeypatch.setattr(builtins, "input", lambda prompt="": (_ for _ in ()).throw(EOFError))


class Stdin(io.TextIOWrapper):
    def isatty(self):
        return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(command=st.sampled_from(["generate", "chat", "doctor", "bogus"]), args=st.lists(argument, max_size=6),
       stdin=st.binary(max_size=12))
def test_any_arguments_give_an_exit_status_and_at_most_one_error_line(capsys, monkeypatch, command, args, stdin):
    monkeypatch.setattr(sys, "stdin", Stdin(io.BytesIO(stdin)))
    try:
        code = cli.main([command, *args])
    except SystemExit as done:  # only --help may exit this way (status 0, after printing the usage)
        assert done.code == 0
        return
    err = capsys.readouterr().err
    assert code in (0, 1, 2)
    assert "Traceback" not in err and "unexpected" not in err, err
    if code == 2:  # bad input: exactly one line, starting with "error:"
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), err
