"""A temporary home holding tiny models where other apps keep theirs (LM Studio, Ollama, the Hugging Face cache,
GPT4All, Jan, a folder of the user's), for the tests of discovery.py and what uses it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import tiny
from own_home import PLACES

from specdec_core.loading import discovery

OLLAMA_MODEL = "application/vnd.ollama.image.model"


# A different corpus trains a different BPE: a vocabulary of its own that shares many texts with the tiny one.
OTHER_CORPUS = ["The capital of Spain is Madrid; zebras and quokkas read maps.", "def mul(x, y): return x * y"] * 30


def isolate(monkeypatch, home: Path) -> Path:
    """Point HOME (and nothing else) at `home`, and the conversion cache at a folder beside it."""
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    for name in PLACES:  # only these decide where discovery looks: each test sets what it needs under its home
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(discovery, "OLLAMA_SERVICE_MODELS", home / "no-ollama-service")
    monkeypatch.setattr(discovery, "PLATFORM", "linux")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(home.parent / "specdec-cache"))
    return home


def tiny_ggufs(folder: Path, tokenizer) -> dict[str, bytes]:
    """GGUF bytes: a verifier, a smaller draft with its vocabulary, and a smaller draft with another one."""
    folder.mkdir(parents=True, exist_ok=True)
    other = tiny.make_tokenizer(corpus=OTHER_CORPUS)
    models = {"verifier": (tokenizer, dict(seed=1, logit_scale=8.0)),
              "draft": (tokenizer, dict(seed=2, layers=1, hidden=16)),
              "other": (other, dict(seed=3, layers=1, hidden=16))}
    return {name: tiny.write_gguf(folder / f"{name}.gguf", tiny.make_model("llama", tok, **kw), tok).read_bytes()
            for name, (tok, kw) in models.items()}


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def ollama_model(root: Path, model: str, tag: str, data: bytes, *, namespace: str = "library") -> Path:
    """Ollama's layout: the GGUF as blobs/sha256-<hash>, named by a manifest's model layer. The manifest's path."""
    digest = hashlib.sha256(data).hexdigest()
    write(root / "blobs" / f"sha256-{digest}", data)
    manifest = {"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 10},
        {"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}", "size": len(data)}]}
    path = root / "manifests" / "registry.ollama.ai" / namespace / model / tag
    write(path, json.dumps(manifest).encode())
    return path


def hub_repo(hub: Path, repo_id: str, revision: str = "0123abcd") -> Path:
    """An empty snapshot of `repo_id` in a hub cache, `main` pointing at it; the snapshot folder."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    write(repo / "refs" / "main", revision.encode())
    return snapshot


def hub_gguf(hub: Path, repo_id: str, filename: str, data: bytes) -> Path:
    """A GGUF in a hub snapshot, stored as the hub stores it: a link to a blob."""
    snapshot = hub_repo(hub, repo_id)
    blob = write(snapshot.parents[1] / "blobs" / hashlib.sha256(data).hexdigest(), data)
    (snapshot / filename).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot / filename


def every_layout(monkeypatch, home: Path, ggufs: dict[str, bytes], tokenizer) -> dict[str, Path]:
    """One tiny model in each place discovery searches: found name -> the file or folder it names."""
    hub = home / ".cache" / "huggingface" / "hub"
    folder = tiny.save_model(hub_repo(hub, "org/tiny-chat"), "llama", tokenizer, seed=4, layers=1, hidden=16)
    user = home / "my-models"
    monkeypatch.setenv("SPECDEC_MODEL_DIRS", str(user))
    ollama_root = home / ".ollama" / "models"
    ollama_model(ollama_root, "qwen2.5-coder", "1.5b", ggufs["verifier"])
    return {
        "lmstudio:pub/tiny-GGUF/tiny-q8.gguf": write(home / ".lmstudio/models/pub/tiny-GGUF/tiny-q8.gguf",
                                                     ggufs["draft"]),
        "lmstudio:old/repo/old.gguf": write(home / ".cache/lm-studio/models/old/repo/old.gguf", ggufs["other"]),
        "ollama:qwen2.5-coder:1.5b": ollama_root / "blobs" / f"sha256-{hashlib.sha256(ggufs['verifier']).hexdigest()}",
        "hf:org/tiny-GGUF/tiny.Q8_0.gguf": hub_gguf(hub, "org/tiny-GGUF", "tiny.Q8_0.gguf", ggufs["draft"]),
        "hf:org/tiny-chat": folder,
        "gpt4all:tiny.gguf": write(home / ".local/share/nomic.ai/GPT4All/tiny.gguf", ggufs["draft"]),
        "jan:tiny-1b/model.gguf": write(home / "jan/models/tiny-1b/model.gguf", ggufs["draft"]),
        "jan:tiny-new/model.gguf": write(home / ".local/share/Jan/data/llamacpp/models/tiny-new/model.gguf",
                                         ggufs["draft"]),
        str(user / "mine.gguf"): write(user / "mine.gguf", ggufs["other"]),
    }


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time (links not followed): to prove nothing changed."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            status = os.lstat(path)
            out[path] = (status.st_size, status.st_mtime_ns)
    return out
