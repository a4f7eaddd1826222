"""The bench's llama.cpp lanes (measuring/llama_cpp.py) against a fake `llama-server`: a small Python script
serving /health, /completion and /metrics on 127.0.0.1 with canned timings, so the lanes' start and stop,
parsing, timeouts, skip lines and JSON are checked without a llama.cpp build. Also the build script's arguments."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tiny

from specdec_core.commands.cli import main
from specdec_core.measuring.llama_cpp import (
    ALONE,
    WITH_DRAFT,
    LaneModels,
    LaneSettings,
    LlamaCppError,
    find_server,
    lane_models,
    parse_completion,
    run_lane,
    run_llama_cpp,
)

ROOT = Path(__file__).resolve().parents[2]

# The fake: every reply is n_predict tokens in 10 ms each (100 tokens/s by its own timings) after 1 ms per
# prompt token; with --model-draft it drafts 4 tokens a step and half are accepted. FAKE_LLAMA_MODE picks a
# misbehaviour; FAKE_LLAMA_RECORD names a file where it writes its pid, its argv and each request's JSON.
FAKE_SERVER = textwrap.dedent('''\
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    argv = sys.argv[1:]
    mode = os.environ.get("FAKE_LLAMA_MODE", "ok")
    if argv == ["--version"]:
        print("version: 4242 (fake)")
        sys.exit(0)
    if mode == "crash":
        print("llama_model_load: error loading model: tensor data is not within the file bounds", flush=True)
        sys.exit(3)
    record = os.environ.get("FAKE_LLAMA_RECORD")
    def note(kind, value):
        if record:
            with open(record, "a") as out:
                out.write(json.dumps({kind: value}) + "\\n")
    note("pid", os.getpid())
    note("argv", argv)
    drafting = "--model-draft" in argv
    counters = {"drafts": 0, "draft": 0, "accepted": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass
        def answer(self, code, body, kind="application/json"):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path == "/health":
                self.answer(503 if mode == "never-ready" else 200, {"status": "ok"})
            elif self.path == "/metrics":
                lines = [f"llamacpp:spec_decode_num_drafts_total {counters['drafts']}",
                         f"llamacpp:spec_decode_num_draft_tokens_total {counters['draft']}",
                         f"llamacpp:spec_decode_num_accepted_tokens_total {counters['accepted']}"]
                self.answer(200, "\\n".join(lines) + "\\n", "text/plain")
            else:
                self.answer(404, {"error": "no such path"})
        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            note("request", request)
            if mode == "hang":
                time.sleep(30)
            if mode == "no-timings":
                return self.answer(200, {"content": "hello"})
            n = request["n_predict"]
            timings = {"prompt_n": len(request["prompt"]), "prompt_ms": 1.0 * len(request["prompt"]),
                       "predicted_n": n, "predicted_ms": 10.0 * n}
            if drafting:
                steps = n // 3
                counters["drafts"] += steps
                counters["draft"] += 4 * steps
                counters["accepted"] += 2 * steps
                timings.update(draft_n=4 * steps, draft_n_accepted=2 * steps)
            self.answer(200, {"content": f" reply to {len(request['prompt'])} tokens", "timings": timings})

    ThreadingHTTPServer(("127.0.0.1", int(argv[argv.index("--port") + 1])), Handler).serve_forever()
''')


@pytest.fixture
def fake_server(tmp_path, monkeypatch):
    """A build folder holding the fake as build/bin/llama-server; its record file."""
    binary = tmp_path / "llama.cpp" / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!{sys.executable}\n" + FAKE_SERVER)
    binary.chmod(0o755)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("FAKE_LLAMA_RECORD", str(record))
    monkeypatch.delenv("FAKE_LLAMA_MODE", raising=False)
    return binary, record


def recorded(record: Path, kind: str) -> list:
    if not record.exists():
        return []
    return [entry[kind] for entry in map(json.loads, record.read_text().splitlines()) if kind in entry]


def stopped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


SETTINGS = LaneSettings(threads=2, max_new_tokens=12, repeats=2, draft_max=3, warmup_tokens=4,
                        start_timeout_s=30, request_timeout_s=30)
PROMPTS = [[1, 2, 3, 4], [5, 6, 7, 8, 9, 10]]


def test_the_server_is_found_as_a_binary_or_in_a_build_folder(fake_server, tmp_path):
    binary, _ = fake_server
    top = binary.parents[2]
    assert find_server(binary) == binary
    assert find_server(top) == binary  # build/bin/ under the folder given
    assert find_server(binary.parent) == binary
    with pytest.raises(LlamaCppError, match="no llama-server in"):
        find_server(tmp_path / "nowhere")
    plain = tmp_path / "not-executable"
    plain.write_text("")
    with pytest.raises(LlamaCppError, match="not executable"):
        find_server(plain)


def test_a_lane_times_every_prompt_by_the_servers_timings_and_stops_the_server(fake_server, tmp_path):
    binary, record = fake_server
    model = tmp_path / "verifier.gguf"
    model.write_bytes(b"GGUF")
    lane = run_lane(ALONE, binary, model, None, PROMPTS, ["a", "b"], SETTINGS,
                    ours=[" reply to 4 tokens", "something else"])
    assert lane["tokens_per_s"] == pytest.approx(100.0)  # 12 tokens in 120 ms, as the fake's timings say
    assert lane["new_tokens"] == 24 and lane["prefill_s_per_reply"] == pytest.approx(0.005)
    assert lane["acceptance_rate"] is None and lane["draft"] is None
    assert [row["same_text_as_ours"] for row in lane["per_prompt"]] == [True, False]
    argv = recorded(record, "argv")[0]
    assert argv[argv.index("--model") + 1] == str(model)
    assert argv[argv.index("--threads") + 1] == "2" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--model-draft" not in argv
    requests = recorded(record, "request")
    assert len(requests) == 1 + 2 * 2  # the warm-up, then each prompt in each repeat
    assert requests[0]["n_predict"] == 4 and all(r["n_predict"] == 12 for r in requests[1:])
    assert [r["prompt"] for r in requests[1:3]] == PROMPTS
    assert all(r["temperature"] == 0.0 and r["cache_prompt"] is False for r in requests)
    assert stopped(recorded(record, "pid")[0])


def test_the_draft_lane_passes_the_draft_and_reads_acceptance_and_tokens_per_step(fake_server, tmp_path):
    binary, record = fake_server
    model, draft = tmp_path / "verifier.gguf", tmp_path / "draft.gguf"
    lane = run_lane(WITH_DRAFT, binary, model, draft, PROMPTS, ["a", "b"], SETTINGS)
    argv = recorded(record, "argv")[0]
    assert argv[argv.index("--model-draft") + 1] == str(draft) and argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "3" and argv[argv.index("--threads-draft") + 1] == "2"
    assert lane["acceptance_rate"] == pytest.approx(0.5) and lane["drafted"] == 4 * 4 * 4
    assert lane["verify_steps"] == 4 * 4 and lane["mean_accepted_length"] == pytest.approx(3.0)
    assert lane["draft_max"] == 3 and "same_text_as_ours" not in lane["per_prompt"][0]


def test_llama_cpp_alone_also_runs_at_another_thread_count_and_its_best_is_the_figure_kept(fake_server, tmp_path):
    """Where our products run on both CPUs and PyTorch on one, llama.cpp alone runs at both counts (a small model on a
    2-CPU machine is faster on one thread than on two beside the server's own), and the app is shown its best."""
    from specdec_core.measuring import llama_cpp_figures

    binary, record = fake_server
    models = LaneModels(tmp_path / "verifier.gguf", tmp_path / "draft.gguf")
    result = run_llama_cpp(binary, models, PROMPTS, ["a", "b"], SETTINGS, alone_threads=(1, 2))
    assert [(lane["lane"], lane["threads"]) for lane in result["lanes"]] == [
        (ALONE, 2), (f"{ALONE}, 1 thread", 1), (WITH_DRAFT, 2)]
    argvs = recorded(record, "argv")
    assert [argv[argv.index("--threads") + 1] for argv in argvs] == ["2", "1", "2"]
    result["lanes"][1]["tokens_per_s"] = 150.0  # as if one thread had been the faster
    kept = llama_cpp_figures.remember(tmp_path / "cache", models.verifier, result, 120.0, 2, 12)
    assert kept is not None and (kept.alone_tokens_per_s, kept.threads) == (150.0, 1)


@pytest.mark.parametrize("mode, message", [
    ("crash", "ended while starting (exit code 3): llama_model_load: error loading model"),
    ("never-ready", "was not ready within 1 s"),
    ("hang", "gave no answer to /completion within 1 s"),
    ("no-timings", "answered without timings"),
])
def test_a_server_that_misbehaves_fails_its_lane_with_one_line_and_is_stopped(fake_server, tmp_path, monkeypatch,
                                                                              mode, message):
    binary, record = fake_server
    monkeypatch.setenv("FAKE_LLAMA_MODE", mode)
    # Only the failure asked for is quick: a slow machine must not turn a crash into a timeout.
    quick = LaneSettings(threads=1, max_new_tokens=4, start_timeout_s=1 if mode == "never-ready" else 60,
                         request_timeout_s=1 if mode == "hang" else 60)
    models = LaneModels(tmp_path / "verifier.gguf", None, "", "no draft model")
    said = []
    result = run_llama_cpp(binary, models, PROMPTS, ["a", "b"], quick, say=said.append)
    assert result["version"] == "version: 4242 (fake)"
    assert message in result["lanes"][0]["failed"] and "\n" not in result["lanes"][0]["failed"]
    assert result["lanes"][1] == {"lane": WITH_DRAFT, "skipped": "no draft model"}
    assert any(line.startswith(f"{ALONE}: failed") for line in said)
    assert all(stopped(pid) for pid in recorded(record, "pid"))


def test_lanes_without_gguf_files_are_skipped_with_the_reason_and_start_nothing(fake_server, tmp_path,
                                                                                tiny_models_dir):
    binary, record = fake_server
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    folder = str(tiny_models_dir["llama-verifier"])
    assert lane_models(folder, None, tmp_path).verifier_skip == f"the verifier {folder!r} is not a GGUF file"
    both = lane_models(str(gguf), folder, tmp_path)
    assert both.verifier == gguf and both.draft is None
    assert both.draft_skip == f"the draft {folder!r} is not a GGUF file"
    assert lane_models(str(tmp_path), str(gguf), tmp_path).draft == gguf  # a folder with one GGUF file means it
    result = run_llama_cpp(binary, lane_models(folder, str(gguf), tmp_path), PROMPTS, ["a", "b"], SETTINGS)
    assert [lane["skipped"] for lane in result["lanes"]] == [f"the verifier {folder!r} is not a GGUF file"] * 2
    assert recorded(record, "argv") == []


def test_a_completion_without_timings_is_an_error_not_a_zero():
    with pytest.raises(LlamaCppError, match="without timings"):
        parse_completion({"content": "hi"}, 0.1)
    reply = parse_completion({"content": "hi", "timings": {"predicted_n": 5, "predicted_ms": 50.0, "prompt_ms": 2.0,
                                                           "draft_n": 8, "draft_n_accepted": 6}}, 0.1)
    assert (reply.new_tokens, reply.decode_s, reply.drafted, reply.accepted) == (5, 0.05, 8, 6)


# --------------------------------------------------------------------------- through `specdec bench`


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("llama_cpp_ggufs")
    verifier = tiny.write_gguf(root / "verifier.gguf", tiny.make_model("llama", tiny_tokenizer, seed=1,
                                                                       logit_scale=8.0), tiny_tokenizer)
    draft = tiny.write_gguf(root / "draft.gguf", tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0,
                                                                 noise=0.3, noise_seed=7), tiny_tokenizer)
    prompts = root / "prompts.jsonl"
    prompts.write_text("The capital of France is\nOnce upon a time\n")
    return {"verifier": str(verifier), "draft": str(draft), "prompts": str(prompts)}


def bench(capsys, tmp_path, ggufs, *extra):
    out = tmp_path / "bench.json"
    code = main(["bench", "--prompts", ggufs["prompts"], "--verifier", ggufs["verifier"], "--device", "cpu",
                 "--repeats", "1", "--max-new-tokens", "6", "--threads", "1", "--tree-nodes", "0", "--json", str(out),
                 *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(out.read_text()), captured.out


def test_bench_runs_both_llama_cpp_lanes_in_the_same_json_and_table(capsys, tmp_path, monkeypatch, ggufs,
                                                                    fake_server):
    binary, record = fake_server
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    result, table = bench(capsys, tmp_path, ggufs, "--draft", ggufs["draft"], "--gamma", "3", "--llama-cpp",
                          str(binary.parents[2]))
    llama = result["llama_cpp"]
    assert llama["server"] == str(binary) and llama["threads"] == 1
    alone, drafted = llama["lanes"]
    assert (alone["lane"], alone["model"], alone["draft"]) == (ALONE, ggufs["verifier"], None)
    assert (drafted["lane"], drafted["draft"], drafted["draft_max"]) == (WITH_DRAFT, ggufs["draft"], 3)
    assert alone["tokens_per_s"] == pytest.approx(100.0)
    assert alone["over_ours_alone"] == pytest.approx(100.0 / result["baseline"]["tokens_per_s"])
    assert [row["name"] for row in alone["per_prompt"]] == [case["name"] for case in result["per_prompt"]]
    sent = [request["prompt"] for request in recorded(record, "request")]
    assert len(sent[1]) == result["per_prompt"][0]["prompt_tokens"]  # our chat template's ids, as ours read them
    for line in ("specdec alone", "specdec speculative", ALONE, WITH_DRAFT, "version: 4242 (fake)"):
        assert line in table


def test_the_bench_keeps_llama_cpp_figures_for_the_gguf_file_it_ran(capsys, tmp_path, monkeypatch, ggufs,
                                                                     fake_server):
    """What the app shows beside the model (app/models_line.py): llama.cpp's lanes and ours alone, from one run."""
    import torch

    from specdec_core.measuring import llama_cpp_figures

    binary, _ = fake_server
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(cache))
    monkeypatch.setenv("SPECDEC_COST_MEMORY", "on")
    threads = torch.get_num_threads()
    try:
        result, _ = bench(capsys, tmp_path, ggufs, "--draft", ggufs["draft"], "--gamma", "3", "--llama-cpp",
                          str(binary.parents[2]))
        kept = llama_cpp_figures.recalled(cache, Path(ggufs["verifier"]))  # at the bench's thread count
    finally:
        torch.set_num_threads(threads)
    assert kept is not None and kept.alone_tokens_per_s == pytest.approx(100.0)
    assert kept.ours_alone_tokens_per_s == pytest.approx(result["baseline"]["tokens_per_s"])
    assert kept.with_draft_tokens_per_s == pytest.approx(result["llama_cpp"]["lanes"][1]["tokens_per_s"])
    assert (kept.draft, kept.threads, kept.version, kept.prompts) == ("draft.gguf", 1, "4242 (fake)", 2)
    # Nothing for another file, or with the memory off.
    assert llama_cpp_figures.recalled(cache, Path(ggufs["draft"])) is None
    monkeypatch.setenv("SPECDEC_COST_MEMORY", "off")
    assert llama_cpp_figures.recalled(cache, Path(ggufs["verifier"])) is None


def test_a_damaged_llama_cpp_figure_is_set_aside_and_shows_nothing(tmp_path, monkeypatch):
    from specdec_core.measuring import llama_cpp_figures

    monkeypatch.setenv("SPECDEC_COST_MEMORY", "on")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    lanes = {"threads": 2, "version": "1 (x)", "lanes": [{"lane": ALONE, "tokens_per_s": 50.0}]}
    kept = llama_cpp_figures.remember(tmp_path, gguf, lanes, 25.0, prompts=4, max_new_tokens=64)
    assert kept.ours_over_llama_cpp == pytest.approx(0.5) and kept.with_draft_tokens_per_s is None
    path = llama_cpp_figures.figure_file(tmp_path, gguf)
    for damage in ('{"alone_tokens_per_s": -3}', "not json", '{"alone_tokens_per_s": 1e9, "threads": 1}'):
        path.write_text(damage)
        assert llama_cpp_figures.recalled(tmp_path, gguf) is None
    assert not path.exists()  # set aside (kept_files.py)
    gguf.write_bytes(b"GGUF" + bytes(80))  # another file under the same name: not its figure
    llama_cpp_figures.remember(tmp_path, tmp_path / "model.gguf", lanes, None, prompts=4, max_new_tokens=64)
    assert llama_cpp_figures.recalled(tmp_path, gguf).ours_alone_tokens_per_s is None
    assert llama_cpp_figures.remember(tmp_path, gguf, {"lanes": [{"lane": ALONE, "skipped": "no"}]}, 1.0, 1, 1) \
        is None


def test_bench_without_the_flag_or_a_gguf_says_in_one_line_why_llama_cpp_did_not_run(capsys, tmp_path,
                                                                                     monkeypatch, ggufs,
                                                                                     fake_server):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    result, table = bench(capsys, tmp_path, ggufs)
    assert result["llama_cpp"] == {"skipped": "no --llama-cpp PATH"}
    assert "llama.cpp lanes: skipped, no --llama-cpp PATH" in table
    result, table = bench(capsys, tmp_path, ggufs, "--llama-cpp", str(fake_server[0]))
    assert result["llama_cpp"]["lanes"][1]["skipped"] == "no draft model (the drafter copies from the prompt)"
    assert "skipped: no draft model" in table


def test_a_wrong_llama_cpp_path_is_one_error_line_before_any_model_loads(capsys, tmp_path, ggufs):
    code = main(["bench", "--verifier", ggufs["verifier"], "--llama-cpp", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert code != 0 and err.strip().count("\n") == 0 and "error: --llama-cpp: no llama-server in" in err


# --------------------------------------------------------------------------- scripts/build_llama_cpp.sh


def build_script(*args, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "build_llama_cpp.sh"), *args], capture_output=True,
                          text=True, env={**os.environ, "SPECDEC_CACHE_DIR": str(cache)}, timeout=60)


def test_the_build_script_plans_into_the_cache_and_refuses_bad_arguments(tmp_path):
    plan = build_script("--dry-run", "--version", "0.93.0", "--jobs", "3", cache=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert f"binaries: {tmp_path}/llama.cpp/0.93.0/build/bin" in plan.stdout
    assert "-DGGML_NATIVE=ON" in plan.stdout and "-j 3" in plan.stdout and "llama-server" in plan.stdout
    for bad, message in ((["--jobs", "0"], "--jobs must be"), (["--version"], "--version needs a value"),
                         (["--version", "../x"], "not a version"), (["--frobnicate"], "unknown argument")):
        run = build_script("--dry-run", *bad, cache=tmp_path)
        assert run.returncode == 2 and message in run.stderr, (bad, run.stderr)
    assert not (tmp_path / "llama.cpp").exists()
