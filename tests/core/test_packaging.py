"""What a wheel carries: every package, and the shipped files as package data (.ci/run installs one); the system
packages .ci/run installs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_for_the_wheel():
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("specdec_core", "app", "distill")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found <= listed, f"add to pyproject.toml's packages: {sorted(found - listed)}"
    assert "specdec_core.assets" in listed


def test_the_shipped_files_are_found_through_the_package():
    from specdec_core.loading.resources import assets_dir
    from specdec_core.loading.specs import EMBEDDED_DRAFT

    assert (assets_dir() / EMBEDDED_DRAFT / "config.json").is_file()
    assert (assets_dir() / "prompts" / "chat.jsonl").is_file()


def test_ci_installs_the_system_packages_the_readme_lists_and_no_more():
    import re

    readme = re.search(r"`apt-get install ([^`]+)`", (ROOT / "README.md").read_text())
    ci = re.search(r"PACKAGES=\(([^)]+)\)", (ROOT / ".ci" / "run").read_text())
    assert readme and ci
    assert sorted(readme.group(1).split()) == sorted(ci.group(1).split())
