"""Corpus prompts in other languages, around text the project did not write: translated manual pages.

The lasting corpus is about 95 % English (replies by token, 2026-12-04), while a quarter of the independent
held-out prompts are in or about French, German, Spanish, Italian, Portuguese and Chinese, and there the
shipped head agrees with the verifier least, even where the verifier itself is sure (`distill agreement
--by-confidence --by-category`). These prompts put a passage of a manual page in one of those languages (the
Debian `manpages-fr`, `-de`, `-es`, `-it`, `-pt-br` and `-zh` packages: text people translated by hand) in front
of a short request in the same language (summarise it, explain it simply, say what the command is for) or in
English (translate it, explain it in English), so the verifier answers about real text, mostly in its
language. The passage itself becomes teacher-forced positions with `corpus-replies --teacher-forced`.

The pages are read from a folder holding `<language>/man<N>/*.gz` (default /usr/share/man) and rendered with
groff, or from a JSON file of the passages rendered on another machine (scripts/device_prepare.sh writes one for
a device machine, whose image lists neither the pages nor groff); nothing of them is copied into the repository
except the prompts of the shards written.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from distill.corpus_prompts import distinct_stream

MAN_ROOT = Path("/usr/share/man")

# Folder under the manual's root -> (the language's English name, requests in that language).
LANGUAGES: dict[str, tuple[str, list[str]]] = {
    "fr": ("French", [
        "Peux-tu résumer ce texte en quelques phrases ?\n\n{p}",
        "Explique-moi simplement ce que ça veut dire :\n\n{p}",
        "D'après ce texte, à quoi sert {name} ?\n\n{p}",
        "Je ne comprends pas bien ce passage de la documentation de {name}. Tu peux m'aider ?\n\n{p}",
    ]),
    "de": ("German", [
        "Kannst du diesen Text in ein paar Sätzen zusammenfassen?\n\n{p}",
        "Erklär mir bitte in einfachen Worten, was das bedeutet:\n\n{p}",
        "Wofür ist {name} laut diesem Text gut?\n\n{p}",
        "Ich verstehe diesen Abschnitt aus der Anleitung zu {name} nicht ganz. Kannst du helfen?\n\n{p}",
    ]),
    "es": ("Spanish", [
        "¿Puedes resumir este texto en pocas frases?\n\n{p}",
        "Explícame con palabras sencillas qué significa esto:\n\n{p}",
        "Según este texto, ¿para qué sirve {name}?\n\n{p}",
        "No entiendo bien este fragmento del manual de {name}. ¿Me ayudas?\n\n{p}",
    ]),
    "it": ("Italian", [
        "Puoi riassumere questo testo in poche frasi?\n\n{p}",
        "Spiegami con parole semplici cosa significa:\n\n{p}",
        "Secondo questo testo, a cosa serve {name}?\n\n{p}",
        "Non capisco bene questo passaggio del manuale di {name}. Mi aiuti?\n\n{p}",
    ]),
    "pt_BR": ("Portuguese", [
        "Você pode resumir este texto em poucas frases?\n\n{p}",
        "Explique com palavras simples o que isto quer dizer:\n\n{p}",
        "De acordo com este texto, para que serve {name}?\n\n{p}",
        "Não entendi bem este trecho do manual do {name}. Pode me ajudar?\n\n{p}",
    ]),
    "zh_CN": ("Chinese", [
        "请用几句话总结这段文字：\n\n{p}",
        "请用简单的话解释这段话的意思：\n\n{p}",
        "根据这段文字，{name} 是用来做什么的？\n\n{p}",
        "我看不太懂 {name} 手册里的这一段，你能帮我解释一下吗？\n\n{p}",
    ]),
}

ENGLISH_ASKS = [
    "Translate into English:\n\n{p}",
    "What does this {language} text say? Please answer in English.\n\n{p}",
    "Can you explain this paragraph from the {language} manual of {name} in plain English?\n\n{p}",
]

_CJK = r"\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
_END = re.compile(r"[.!?。！？]$")


def render_page(path: Path) -> str:
    """A manual page as plain UTF-8 text (groff, no colours, bold, underlining or hyphenation, lines long enough
    for a paragraph); "" where groff fails."""
    try:
        source = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        command = ["groff", "-k", "-Kutf-8", "-man", "-Tutf8", "-P-cbou", "-rHY=0", "-rLL=500n"]
        done = subprocess.run(command, input=source, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.decode("utf-8", "replace")


def _join(lines: list[str]) -> str:
    text = re.sub(r"\s+", " ", " ".join(line.strip() for line in lines)).strip()
    return re.sub(f"(?<=[{_CJK}]) (?=[{_CJK}])", "", text)  # groff's justification spaces between CJK


def line_indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def page_paragraphs(text: str) -> list[str]:
    """A rendered page's body paragraphs: indented as running text (not headings, option lists, synopses or
    examples), not starting with an option, and ending a sentence."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        while lines and not line_indent(lines[0]):
            lines.pop(0)  # a heading right above its section's first paragraph
        if not lines or any(line_indent(line) != 7 for line in lines):
            continue  # headings (indent 0), option descriptions (14), examples and the page's header
        paragraph = _join(lines)
        if not paragraph.startswith("-") and _END.search(paragraph):
            paragraphs.append(paragraph)
    return paragraphs


_ENGLISH = re.compile(r"\b(the|and|of|to|is|for|with|that|this|are|be|if|it)\b", re.IGNORECASE)


def in_language(paragraph: str, folder: str) -> bool:
    """Whether a paragraph is in its page's language, not left in English (untranslated pages, code
    comments): Chinese ones are at least a third CJK characters; the others have few English function words."""
    if folder.startswith("zh"):
        return len(re.findall(f"[{_CJK}]", paragraph)) >= len(paragraph) / 3
    return len(_ENGLISH.findall(paragraph)) <= 0.03 * max(1, len(paragraph.split()))


def passages_from(paragraphs: list[str], *, min_chars: int = 120, max_chars: int = 900) -> list[str]:
    """Consecutive paragraphs joined into passages of at most max_chars; each at least min_chars."""
    passages, current = [], ""
    for paragraph in paragraphs:
        if current and len(current) + len(paragraph) + 2 > max_chars:
            passages.append(current)
            current = ""
        if len(paragraph) <= max_chars:
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        passages.append(current)
    return [p for p in passages if len(p) >= min_chars]


def language_passages(root: Path = MAN_ROOT, *, pages: int = 200, seed: int = 0) -> dict[str, list[tuple]]:
    """For each language of LANGUAGES present under root: (command name, passage) pairs from up to `pages` of
    its pages, taken in a seeded order. A paragraph found on three pages or more (the translators' notice,
    the bug-report address) is boilerplate and left out, as is one left in English. A root that is a JSON file
    holds this function's result from another machine (where groff or the pages are missing)."""
    if root.is_file():
        return {folder: [tuple(pair) for pair in pairs] for folder, pairs in json.loads(root.read_text()).items()}
    found = {}
    for folder in LANGUAGES:
        files = sorted((root / folder).glob("man*/*"))
        random.Random(f"{seed}-{folder}").shuffle(files)
        rendered = [(path.name.split(".")[0], page_paragraphs(render_page(path))) for path in files[:pages]]
        seen = Counter(p for _, paragraphs in rendered for p in set(paragraphs))
        pairs = [(name, passage) for name, paragraphs in rendered
                 for passage in passages_from([p for p in paragraphs if seen[p] < 3 and in_language(p, folder)])]
        if pairs:
            found[folder] = pairs
    return found


def language_prompts(passages: dict[str, list[tuple]], seed: int = 0) -> Iterator[dict]:
    """A seeded stream of distinct prompts about the passages, the languages taken in turn: three in four ask
    in the passage's language, one in four in English ("kind": "language-<folder>")."""

    def maker(folder: str):
        language, asks = LANGUAGES[folder]

        def make(r: random.Random):
            name, passage = r.choice(passages[folder])
            ask = r.choice(asks) if r.random() < 0.75 else r.choice(ENGLISH_ASKS)
            return [{"role": "user", "content": ask.format(p=passage, name=name, language=language)}]
        return make

    return distinct_stream({folder: maker(folder) for folder in passages}, random.Random(seed), prefix="language-")
