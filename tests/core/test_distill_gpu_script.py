"""scripts/distill_gpu.sh end to end (several Python starts: its own file, so that `make test`'s two
processes can run it beside the other draft-head tests)."""

import json

import tiny

from specdec_core.drafting.drafters import HeadDrafter, drafter_for
from specdec_core.loading.models import load_model
from specdec_core.pairs.doctor import check_models


def test_the_gpu_script_grows_a_corpus_copy_trains_heads_side_by_side_and_brings_back_loadable_heads(
        tmp_path, tiny_tokenizer):
    """scripts/distill_gpu.sh, scaled down on the CPU with a tiny verifier whose width suits the head: two new
    corpus shards (the checkout's corpus untouched), two runs at once, each brought back as a tar."""
    import os
    import subprocess
    import sys
    import tarfile
    from pathlib import Path

    folder = tiny.save_model(tmp_path / "verifier", "llama", tiny_tokenizer, seed=1, hidden=72, logit_scale=8.0)
    out, corpus = tmp_path / "out", tmp_path / "corpus"
    corpus.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DEVICE": "cpu", "WORK": str(tmp_path / "work"), "CORPUS": str(corpus), "CORPUS_SHARDS": "2",
           "SOURCE": "written", "BATCH": "4", "MAX_NEW": "12", "STEPS": "3", "TRAIN_BATCH": "128", "CHAIN": "2",
           "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(["bash", str(root / "scripts" / "distill_gpu.sh"), str(folder), str(out), "first",
                             "second:--lr 0.002 --head-size 64"], cwd=root, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert list(corpus.iterdir()) == []
    with tarfile.open(out / "corpus-new.tar") as tar:
        assert sorted(tar.getnames()) == ["shard-00000.npz", "shard-00001.npz"]
    verifier = load_model(str(folder), device="cpu")
    for name in ("first", "second"):
        with tarfile.open(out / f"{name}.tar") as tar:
            tar.extractall(tmp_path, filter="data")
        assert json.loads((tmp_path / name / "train.json").read_text())["history"][-1]["step"] == 3
        head = load_model(str(tmp_path / name), device="cpu")
        assert isinstance(drafter_for(head), HeadDrafter) and check_models(verifier, head).compatible
    assert json.loads((tmp_path / "second" / "train.json").read_text())["settings"]["lr"] == 0.002
