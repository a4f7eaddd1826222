"""`specdec bench` and `specdec rank-drafts` on tiny folder models: the documented JSON, the identity
check, per-prompt rows, and a ranking that lists an incompatible draft with the doctor's reason."""

import importlib.util
import json

import pytest
import tiny

from specdec_core.commands.cli import main
from specdec_core.measuring.bench import category_of, predict_speedup
from specdec_core.measuring.prompt_sets import load_prompts
from specdec_core.stats import predicted_speedup


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("bench_models")
    verifier = tiny.save_model(root / "verifier", "llama", tiny_tokenizer, seed=1, logit_scale=8.0)
    draft = tiny.save_model(root / "draft", "llama", tiny_tokenizer, seed=1, logit_scale=8.0, noise=0.3,
                            noise_seed=7)
    other = tiny.make_tokenizer(vocab_size=300, corpus=[line.upper() for line in tiny.CORPUS])  # another vocabulary
    stranger = tiny.save_model(root / "stranger", "llama", other, seed=2)
    wide = tiny.save_wide_head(root / "wide-head", tiny_tokenizer)
    prompts = root / "prompts.jsonl"
    prompts.write_text(
        "# a comment, then plain text, a JSON string, a multi-turn list and an object with a system prompt\n"
        "The capital of France is\n"
        '"Once upon a time\\nthere was"\n'
        '[{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi."},'
        ' {"role": "user", "content": "1 2 3 4"}]\n'
        '{"name": "robot", "system": "Be brief.", "messages": [{"role": "user", "content": "a little robot"}]}\n')
    return {"verifier": str(verifier), "draft": str(draft), "stranger": str(stranger), "wide head": str(wide),
            "prompts": str(prompts),
            "root": root}


def bench(capsys, folders, tmp_path, *extra):
    out = tmp_path / "bench.json"
    code = main(["bench", "--prompts", folders["prompts"], "--verifier", folders["verifier"], "--device", "cpu",
                 "--repeats", "2", "--max-new-tokens", "12", "--json", str(out), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(out.read_text()), captured.out


def test_prompt_files_take_text_json_strings_lists_and_objects(folders):
    cases = load_prompts(folders["prompts"])
    assert [len(c.messages) for c in cases] == [1, 1, 3, 1]
    assert cases[1].messages[0]["content"] == "Once upon a time\nthere was"
    assert cases[3].name == "robot" and cases[3].system == "Be brief."


def test_the_held_out_code_set_asks_for_code_in_several_languages():
    cases = load_prompts("code-heldout")
    assert len(cases) == 8 and len({case.name.split("-")[0] for case in cases}) >= 6


def test_the_tasks_set_has_four_prompts_of_each_task_kind():
    cases = load_prompts("tasks")
    kinds = [category_of(case) for case in cases]
    assert sorted(set(kinds)) == ["conversation", "math", "qa", "rag", "summary", "translation"]
    assert all(kinds.count(kind) == 4 for kind in kinds)
    assert len(load_prompts("all")) == 16  # `all` stays the four sets the performance page compares


def test_bench_writes_the_documented_json_and_greedy_replies_are_identical(capsys, folders, tmp_path):
    plot = ["--plot", str(tmp_path / "bench.png")] if importlib.util.find_spec("matplotlib") else []
    result, table = bench(capsys, folders, tmp_path, "--draft", folders["draft"], "--gamma", "3", "--hf-reference",
                          "--tree-nodes", "0", *plot)  # a chain: the tiny pair is too fast for drafts to pay
    assert result["baseline"]["tokens_per_s"] > 0
    assert set(result["speculative"]) >= {"tokens_per_s", "acceptance_rate", "mean_accepted_length",
                                          "per_position_acceptance", "draft_s_per_round", "verify_s_per_round", "c"}
    for key in ("speedup", "predicted_speedup", "efficiency"):
        assert result[key] > 0
    assert result["identical"] is True
    assert 0 < result["speculative"]["acceptance_rate"] < 1  # the noisy draft is sometimes wrong
    assert len(result["speculative"]["per_position_acceptance"]) == 3
    assert result["hf_assisted"]["tokens_per_s"] > 0 and result["hf_assisted"]["identical"] is True
    rows = result["per_prompt"]
    assert [r["turns"] for r in rows] == [1, 1, 3, 1] and all(r["identical"] for r in rows)
    assert all(r["speedup"] > 0 and r["baseline_tokens_per_s"] > 0 for r in rows)
    assert "measured speedup" in table and "robot" in table
    categories = result["by_category"]  # by the name before its first '-': the file's stem, or "robot"
    assert [(c["category"], c["prompts"]) for c in categories] == [("prompts", 3), ("robot", 1)]
    assert all(c["speedup"] > 0 for c in categories)
    assert categories[1]["mean_accepted_length"] == pytest.approx(rows[3]["mean_accepted_length"])
    assert "category" in table and "tok/call" in table
    memory = result["memory"]  # what each model weighs, and what the process took at its peak
    assert set(memory["weights_bytes"]) == {"verifier", "draft"} and all(memory["weights_bytes"].values())
    assert memory["peak_rss_bytes"] > sum(memory["weights_bytes"].values())
    assert "peak RSS / weights" in table
    if plot:
        assert (tmp_path / "bench.png").stat().st_size > 0


def test_bench_with_prompt_lookup_compares_with_transformers_prompt_lookup(capsys, folders, tmp_path):
    result, _ = bench(capsys, folders, tmp_path, "--drafter", "prompt-lookup", "--hf-reference")
    assert result["setup"]["drafter"] == "prompt lookup"
    assert result["hf_assisted"]["method"] == "prompt_lookup_num_tokens"
    assert result["identical"] is True and result["hf_assisted"]["identical"] is True


@pytest.mark.parametrize("drafter", ["tli", "slem"])
def test_bench_with_a_draft_of_another_tokenizer_runs_transformers_universal_assisted_generation_alongside(
        capsys, folders, tmp_path, drafter):
    result, out = bench(capsys, folders, tmp_path, "--draft", folders["stranger"], "--drafter", drafter,
                        "--hf-reference", "--tree-nodes", "0")
    hf = result["hf_assisted"]
    assert hf["method"] == "assistant_model + assistant_tokenizer"
    assert result["identical"] and hf["identical"]  # greedy: both equal the verifier alone
    assert result["speculative"]["acceptance_rate"] is not None and hf["tokens_per_s"] > 0
    strategy = "string-level exact match" if drafter == "slem" else "token-level intersection"
    assert result["setup"]["drafter"].endswith(f"({strategy})")
    assert "ours / transformers" in out


def test_a_reference_that_fails_inside_transformers_is_reported_and_the_bench_goes_on_without_it(
        capsys, folders, tmp_path, monkeypatch):
    from specdec_core.measuring import bench as bench_module

    def broken(*args, **kwargs):  # as transformers 5.25.0's universal assisted generation did
        raise RuntimeError("cannot reshape tensor of 0 elements")

    monkeypatch.setattr(bench_module, "hf_reference", broken)
    result, out = bench(capsys, folders, tmp_path, "--draft", folders["stranger"], "--hf-reference",
                        "--tree-nodes", "0")
    assert "hf_assisted" not in result and result["speculative"]["rounds"] > 0 and result["identical"]
    assert "cannot reshape tensor of 0 elements" in result["hf_unavailable"]
    assert "assisted generation failed, so the bench runs without it" in out


def test_sampled_bench_with_another_tokenizer_leaves_our_draft_unpruned(capsys, folders, tmp_path):
    # transformers' sampling path prunes its assistant's output layer in place: it gets a copy of ours
    result, _ = bench(capsys, folders, tmp_path, "--draft", folders["stranger"], "--hf-reference",
                      "--temperature", "0.8", "--seed", "1")
    assert result["hf_assisted"]["tokens_per_s"] > 0 and result["speculative"]["rounds"] > 0


def test_sampled_bench_has_no_identity_check(capsys, folders, tmp_path):
    result, _ = bench(capsys, folders, tmp_path, "--draft", folders["draft"], "--temperature", "0.8",
                      "--repeats", "1")
    assert "identical" not in result and "identical" not in result["per_prompt"][0]


def test_rank_drafts_sorts_by_speedup_and_explains_an_incompatible_draft(capsys, folders, tmp_path):
    out = tmp_path / "rank.json"
    code = main(["rank-drafts", "--verifier", folders["verifier"], "--drafts", folders["draft"], folders["stranger"],
                 folders["wide head"], str(folders["root"] / "missing"), "--prompts", folders["prompts"],
                 "--gammas", "1,3", "--max-new-tokens", "10", "--device", "cpu", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = json.loads(out.read_text())["ranking"]
    measured = [r for r in rows if "speedup" in r]
    assert {r["kind"] for r in measured} == {"model", "prompt-lookup", "tli"}  # tli: the stranger's vocabulary
    assert [r["speedup"] for r in measured] == sorted((r["speedup"] for r in measured), reverse=True)
    assert rows[:len(measured)] == measured  # unmeasured candidates come last
    for r in measured:
        assert r["best_gamma"] in (1, 3) and set(r["by_gamma"]) == {"1", "3"}
        assert r["compatible"] and "acceptance_rate" in r and "c" in r
    stranger = next(r for r in rows if r.get("spec") == folders["stranger"])
    assert stranger["compatible"] and stranger["verdict"].startswith("compatible: different vocabularies")
    wide = next(r for r in rows if r.get("spec") == folders["wide head"])
    assert wide["compatible"] is False and "48 wide" in wide["verdict"]
    missing = next(r for r in rows if r["draft"].endswith("missing"))
    assert missing["verdict"].startswith("could not load")
    assert "incompatible" in captured.out and "prompt lookup" in captured.out


def test_rank_drafts_can_rank_each_draft_as_a_hybrid_with_prompt_lookup_too(capsys, folders, tmp_path):
    out = tmp_path / "rank.json"
    code = main(["rank-drafts", "--verifier", folders["verifier"], "--drafts", folders["draft"], "--hybrid", "1",
                 "--prompts", folders["prompts"], "--gammas", "2", "--max-new-tokens", "10", "--device", "cpu",
                 "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(out.read_text())
    rows = {r["kind"]: r for r in result["ranking"]}
    assert set(rows) == {"prompt-lookup", "model", "hybrid"} and result["setup"]["hybrid_draft_tokens"] == 1
    assert rows["hybrid"]["draft"].endswith("+ prompt lookup") and rows["hybrid"]["draft_tokens"] == 1
    assert rows["hybrid"]["compatible"] and 0.0 <= rows["hybrid"]["acceptance_rate"] <= 1.0
    assert "+ prompt lookup" in captured.out
    assert main(["rank-drafts", "--verifier", folders["verifier"], "--hybrid", "0", "--device", "cpu"]) == 2


def test_bad_bench_input_is_one_error_line(capsys, folders, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('[{"role": "assistant", "content": "no user turn"}]\n')
    for args in (["--prompts", str(bad)], ["--prompts", "no-such-set"], ["--no-speculation"], ["--repeats", "0"]):
        code = main(["bench", "--verifier", folders["verifier"], "--device", "cpu", "--max-new-tokens", "4", *args])
        err = capsys.readouterr().err
        assert code == 2 and len([line for line in err.splitlines() if line.startswith("error:")]) == 1, args


def test_prediction_reduces_to_the_papers_formula_when_every_round_drafts():
    assert predict_speedup(0.7, 4, 0.1) == pytest.approx(predicted_speedup(0.7, 4, 0.1))
    assert predict_speedup(0.7, 4, 0.1, share=0.0) == 1.0


def test_transformers_reads_the_prompt_with_its_first_drafts_so_its_tokens_per_call_count_every_call(folders):
    """Ours prefill in a call of their own; transformers' assisted generation checks its first drafts in the
    prompt's call. Counted that way, the same greedy draft gives the same rounds and tokens per call."""
    from bench.real_pair import summarise
    from specdec_core.config import GenerationConfig
    from specdec_core.drafting.drafters import ModelDrafter
    from specdec_core.engine import Engine
    from specdec_core.loading.models import load_model
    from specdec_core.measuring.bench import hf_reference, time_reply

    verifier, draft = load_model(folders["verifier"], device="cpu"), load_model(folders["draft"], device="cpu")
    config = GenerationConfig(max_new_tokens=12, gamma=3, tree_nodes=0, top_alternatives=0)
    ids = verifier.tokenizer.encode("The capital of France is")
    ours = time_reply(Engine(verifier, ModelDrafter(draft)), ids, config)
    theirs = hf_reference(verifier, draft, ids, config)
    assert theirs.token_ids == ours.token_ids
    assert theirs.verifier_calls == ours.verifier_calls - 1 == ours.tally.snapshot().rounds
    rows = [summarise(name, [reply], [ours]) for name, reply in (("ours", ours), ("transformers", theirs))]
    assert rows[0]["tokens_per_call"] == pytest.approx(rows[1]["tokens_per_call"])


def test_rank_drafts_loads_each_draft_in_the_dtype_generate_would_give_it(capsys, folders, tmp_path, monkeypatch):
    import specdec_core.loading.models as models

    real, dtypes = models.load_model, {}

    def recording(spec, **kwargs):
        dtypes[spec] = kwargs.get("dtype")
        return real(spec, **kwargs)

    monkeypatch.setattr(models, "load_model", recording)
    code = main(["rank-drafts", "--verifier", folders["verifier"], "--drafts", folders["draft"], "--no-prompt-lookup",
                 "--prompts", folders["prompts"], "--gammas", "1", "--max-new-tokens", "4", "--repeats", "1",
                 "--device", "cpu", "--json", str(tmp_path / "rank.json")])
    assert code == 0, capsys.readouterr().err
    assert dtypes[folders["verifier"]] == "auto" and dtypes[folders["draft"]] == models.DRAFT_AUTO
