"""The `specdec` command on tiny models: output contract and one-line errors."""

import json

import pytest
import tiny

from specdec_core.commands.cli import main


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("cli_models")
    verifier = tiny.save_model(root / "verifier", "llama", tiny_tokenizer, seed=1, logit_scale=8.0)
    draft = tiny.save_model(root / "draft", "llama", tiny_tokenizer, seed=1, logit_scale=8.0, noise=0.3,
                            noise_seed=7)
    other = tiny.make_tokenizer(corpus=[line.upper() for line in tiny.CORPUS])  # a different vocabulary
    stranger = tiny.save_model(root / "stranger", "llama", other, seed=2)
    short = tiny.save_model(root / "short", "llama", tiny_tokenizer, seed=1, ctx=16)
    wide = tiny.save_wide_head(root / "wide-head", tiny_tokenizer)
    return {"verifier": str(verifier), "draft": str(draft), "stranger": str(stranger), "short": str(short),
            "wide head": str(wide)}


def run_json(capsys, *args):
    code = main(["generate", *args, "--json", "--device", "cpu"])
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines() if line.strip()]


def test_generate_json_has_the_documented_fields(capsys, folders):
    code, replies = run_json(capsys, "Hello", "--verifier", folders["verifier"], "--draft", folders["draft"],
                             "--max-new-tokens", "20")
    assert code == 0 and len(replies) == 1
    reply = replies[0]
    assert set(reply) >= {"text", "token_ids", "stop_reason", "rounds", "stats"}
    assert set(reply["stats"]) >= {"new_tokens", "rounds", "drafted", "accepted", "acceptance_rate",
                                   "mean_accepted_length", "decode_s", "tokens_per_s", "draft_s", "verify_s"}
    emitted = [t for r in reply["rounds"] for t in r["emitted"]]
    assert emitted == reply["token_ids"] and len(emitted) == reply["stats"]["new_tokens"]
    for r in reply["rounds"]:
        assert r["accepted"] == r["drafted"][: len(r["accepted"])]


def test_greedy_output_is_the_same_with_and_without_speculation(capsys, folders):
    common = ["Once upon a time", "--verifier", folders["verifier"], "--max-new-tokens", "30"]
    _, on = run_json(capsys, *common, "--draft", folders["draft"], "--gamma", "3")
    _, lookup = run_json(capsys, *common, "--drafter", "prompt-lookup")
    _, hybrid = run_json(capsys, *common, "--drafter", "hybrid", "--draft", folders["draft"], "--draft-tokens", "1")
    _, off = run_json(capsys, *common, "--no-speculation")
    assert on[0]["token_ids"] == lookup[0]["token_ids"] == hybrid[0]["token_ids"] == off[0]["token_ids"]
    assert max(len(r["drafted"]) for r in hybrid[0]["rounds"]) >= 1
    assert off[0]["stats"]["drafted"] == 0


def test_tree_nodes_checks_a_tree_per_round_and_the_json_lists_its_nodes(capsys, folders):
    common = ["Once upon a time", "--verifier", folders["verifier"], "--draft", folders["draft"],
              "--max-new-tokens", "24"]
    _, off = run_json(capsys, *common, "--no-speculation")
    _, tree = run_json(capsys, *common, "--tree-nodes", "6")
    _, chain = run_json(capsys, *common, "--tree-nodes", "0")
    _, auto = run_json(capsys, *common)  # auto, greedy: trees sized by the cost model (possibly none)
    _, sampled = run_json(capsys, *common, "--temperature", "0.8", "--seed", "3")  # auto, sampling: the chain
    assert tree[0]["token_ids"] == chain[0]["token_ids"] == auto[0]["token_ids"] == off[0]["token_ids"]
    trees = [r["tree"] for r in tree[0]["rounds"] if r["tree"]]
    assert trees and all(len(t) <= 6 for t in trees)
    for nodes in trees:
        assert all(-1 <= n["parent"] < i for i, n in enumerate(nodes))
        assert set(nodes[0]) == {"parent", "token_id", "draft_prob", "target_prob", "accept_prob", "accepted"}
    assert not any(r["tree"] for r in chain[0]["rounds"] + sampled[0]["rounds"])
    later = tree[0]["rounds"][1:]  # after the first, a pass feeds the last committed token and every node
    assert all(r["verify_rows"] == len(r["tree"] or r["drafted"]) + 1 for r in later)
    assert main(["generate", "Hi", "--tree-nodes", "-2"]) == 2
    assert "error:" in capsys.readouterr().err


def test_samples_are_seeded_one_after_another(capsys, folders):
    common = ["Hi", "--verifier", folders["verifier"], "--draft", folders["draft"], "--temperature", "1.2",
              "--max-new-tokens", "12"]
    _, three = run_json(capsys, *common, "--samples", "3", "--seed", "5")
    _, third = run_json(capsys, *common, "--seed", "7")
    assert len(three) == 3 and three[2]["token_ids"] == third[0]["token_ids"]
    assert len({tuple(r["token_ids"]) for r in three}) > 1


def test_raw_prompt_skips_the_chat_template(capsys, folders):
    _, templated = run_json(capsys, "Hi", "--verifier", folders["verifier"], "--max-new-tokens", "5")
    _, raw = run_json(capsys, "Hi", "--verifier", folders["verifier"], "--max-new-tokens", "5", "--raw")
    assert templated[0]["stats"]["prompt_tokens"] > raw[0]["stats"]["prompt_tokens"]


def test_plain_output_colours_tokens_and_prints_a_stats_line(capsys, folders):
    # A chain: which drafts a cost-aware tree checks follows this machine's timings (and the tiny pair is
    # too fast for drafts to pay), so a tree reply may show no rejected token at all.
    code = main(["generate", "The capital", "--verifier", folders["verifier"], "--draft", folders["draft"],
                 "--max-new-tokens", "30", "--color", "always", "--device", "cpu", "--tree-nodes", "0"])
    captured = capsys.readouterr()
    assert code == 0
    assert "\x1b[32m" in captured.out  # accepted tokens in green
    assert "\x1b[31;9m" in captured.out  # rejected ones struck through in red
    assert "acceptance" in captured.err and "tok/s" in captured.err


def test_doctor_passes_a_matching_pair_and_explains_a_mismatch(capsys, folders):
    assert main(["doctor", "--verifier", folders["verifier"], "--draft", folders["draft"]]) == 0
    capsys.readouterr()
    assert main(["doctor", "--verifier", folders["verifier"], "--draft", folders["wide head"]]) == 1
    assert "48 wide" in capsys.readouterr().out


def test_doctor_accepts_a_draft_with_another_tokenizer_and_reports_the_overlap_and_strategy(capsys, folders):
    assert main(["doctor", "--verifier", folders["verifier"], "--draft", folders["stranger"]]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Compatible: verifier and draft\n  ok      different vocabularies (token ")
    assert "of the verifier's ids and" in out and "of its tokens in sample text; strategy: token-level intersection" \
        in out
    assert "of its next-token probability in sample text on tokens the draft can propose" in out  # measured


@pytest.mark.parametrize("drafter", [None, "tli", "slem", "hybrid"])
def test_generate_with_a_draft_of_another_tokenizer_equals_the_verifier_alone(capsys, folders, drafter):
    chosen = ["--drafter", drafter] if drafter else []
    code, (alone,) = run_json(capsys, "The capital of France is", "--verifier", folders["verifier"],
                              "--no-speculation", "--max-new-tokens", "16")
    code_spec, (spec,) = run_json(capsys, "The capital of France is", "--verifier", folders["verifier"], "--draft",
                                  folders["stranger"], *chosen, "--max-new-tokens", "16", "--tree-nodes", "0")
    assert code == code_spec == 0
    assert spec["token_ids"] == alone["token_ids"] and spec["stats"]["drafted"] > 0


def test_the_json_names_the_draft_token_each_mapped_token_and_tree_node_came_from(capsys, folders):
    common = ["The capital of France is", "--verifier", folders["verifier"], "--max-new-tokens", "16"]
    _, (chain,) = run_json(capsys, *common, "--draft", folders["stranger"], "--tree-nodes", "0")
    _, (tree,) = run_json(capsys, *common, "--draft", folders["stranger"], "--tree-nodes", "6")
    _, (same,) = run_json(capsys, *common, "--draft", folders["draft"], "--tree-nodes", "6")
    drafted = [r for r in chain["rounds"] if r["drafted"]]
    assert drafted and all(len(r["draft_sources"]) == len(r["drafted"]) for r in drafted)
    assert all(source.endswith(")") and "(id " in source for r in drafted for source in r["draft_sources"])
    nodes = [n for r in tree["rounds"] for n in r["tree"]]
    assert nodes and all("(id " in n["draft_source"] for n in nodes)
    # the same tokenizer maps nothing: no source on a round or a node
    assert not any("draft_sources" in r or any("draft_source" in n for n in r["tree"]) for r in same["rounds"])
    assert any(r["tree"] for r in same["rounds"])


def bad_inputs(folders, tmp_path):
    truncated = tmp_path / "broken.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 5)
    v = ["--verifier", folders["verifier"]]
    return {
        "unknown model": ["hi", "--verifier", str(tmp_path / "no-such-model")],
        "incompatible pair": ["hi", *v, "--draft", folders["wide head"]],
        "gamma below one": ["hi", *v, "--gamma", "0"],
        "negative temperature": ["hi", *v, "--temperature", "-1"],
        "top-p zero": ["hi", *v, "--top-p", "0"],
        "top-p above one": ["hi", *v, "--top-p", "1.5"],
        "prompt longer than the context": ["word " * 40, "--verifier", folders["short"]],
        "truncated gguf": ["hi", "--verifier", str(truncated)],
    }


@pytest.mark.parametrize("case", ["unknown model", "incompatible pair", "gamma below one", "negative temperature",
                                  "top-p zero", "top-p above one", "prompt longer than the context",
                                  "truncated gguf"])
def test_bad_input_is_one_error_line_and_exit_status_2(capsys, folders, tmp_path, case):
    code = main(["generate", *bad_inputs(folders, tmp_path)[case], "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err
    if case == "prompt longer than the context":
        assert "16" in lines[0]  # says how long the context is


def test_after_ctrl_c_a_second_one_while_exiting_prints_no_traceback(monkeypatch, capsys):
    """The first Ctrl-C ends the command with 'interrupted'; a second one during the exit is ignored (it would
    otherwise raise out of the clean-up as a traceback)."""
    import signal

    import specdec_core.commands.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_generate", interrupted)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert cli.main(["generate", "hi"]) == 130
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err.strip() == "interrupted"
