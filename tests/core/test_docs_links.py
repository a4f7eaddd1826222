"""The README and docs/ link to each other's sections by anchor; dated entries move into docs/log/ by month, and a
link left pointing at a section's old place would open the page's top without a word."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6}) (.*)$")


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens kept), spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def outside_code(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_code(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            anchor = github_anchor(match.group(2))
            seen[anchor] = seen.get(anchor, -1) + 1
            found.add(f"{anchor}-{seen[anchor]}" if seen[anchor] else anchor)
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for line in outside_code(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def test_every_link_in_the_readme_and_docs_reaches_its_file_and_heading():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert [link for page in pages for link in broken_links(page)] == []


def test_the_anchor_of_a_heading_is_githubs():
    assert github_anchor("A real pair: Qwen2.5-Coder 1.5B with its 0.5B draft") == \
        "a-real-pair-qwen25-coder-15b-with-its-05b-draft"
    assert github_anchor("2026-12-02, later (04:31–05:30 UTC): the same") == "2026-12-02-later-04310530-utc-the-same"
