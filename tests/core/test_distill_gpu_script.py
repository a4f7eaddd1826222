"""scripts/distill_gpu.sh end to end (several Python starts: its own file, so that `make test`'s two
processes can run it beside the other draft-head tests)."""

import json

import tiny

from specdec_core.drafting.drafters import HeadDrafter, drafter_for
from specdec_core.loading.models import load_model
from specdec_core.pairs.doctor import check_models


def test_the_gpu_script_runs_generate_train_head_and_export_and_brings_back_a_loadable_head(tmp_path,
                                                                                           tiny_tokenizer):
    """scripts/distill_gpu.sh, scaled down on the CPU with a tiny verifier whose width suits the head."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = tiny.save_model(tmp_path / "verifier", "llama", tiny_tokenizer, seed=1, hidden=72, logit_scale=8.0)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DEVICE": "cpu", "WORK": str(tmp_path / "work"), "GEN_MIN": "1", "TRAIN_MIN": "1", "BATCH": "4",
           "LIMIT": "4", "MAX_NEW": "12", "STEPS": "3", "TRAIN_BATCH": "128", "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(["bash", str(root / "scripts" / "distill_gpu.sh"), str(folder), str(out)], cwd=root,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    shards = sorted(p.name for p in (tmp_path / "work" / "replies").glob("*.pt"))
    assert shards == ["greedy-00000.pt", "greedy-extra-00000.pt", "t07-00000.pt", "t07-extra-00000.pt"]
    assert json.loads((out / "train.json").read_text())["history"][-1]["step"] == 3
    verifier = load_model(str(folder), device="cpu")
    head = load_model(str(out / "head"), device="cpu")
    assert isinstance(drafter_for(head), HeadDrafter) and check_models(verifier, head).compatible
