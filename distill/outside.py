"""Teacher-forced text the project did not write: what the Python interpreter running distill ships with.

Every other prompt and reply the head learns from comes from this project's generators (prompts.py,
corpus_prompts.py, corpus_derived.py) and the verifier's own replies to them, and the head's agreement on
prompts nobody here wrote stays far below its agreement on those. These machines reach only package
registries, so the one large body of outside text at hand is the standard library of the interpreter itself:
its functions with their docstrings (code written by other people, in many styles) and the language
reference's topics in `pydoc_data` (technical English prose); and, in other languages, the message catalogues
the system's programs ship (/usr/share/locale/<lang>/LC_MESSAGES/*.mo: English messages beside their human
translations). Nothing of it is copied into the repository: `outside_replies` reads it from the machine each
time, deterministically for one Python version and one set of installed packages (the catalogues differ
between machines; a machine without them gets the Python text only).

Each text becomes one chat turn whose reply is the outside text, teacher-forced (the first EAGLE was trained
on fixed replies the same way): a user asks for a function by its name and docstring, and the reply is the
function's source in a fenced block; or asks about a language topic, and the reply is the reference's text;
or asks for a few messages in another language (or for their meaning in English), and the reply is the
catalogue's other side.
`features` then records the verifier's own states and top-k distributions over those replies, so the head
still learns the verifier's next-token distribution, on contexts of someone else's text.

Replies files: <work>/replies/outside-<index>.pt (data.py's layout, "mode": "outside").
"""

from __future__ import annotations

import ast
import gettext
import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from distill.data import encode_messages, save_atomic, shards

MODE = "outside"

FUNCTION_ASKS = [
    "Write a Python function `{signature}` that {summary}",
    "Can you show me how to implement `{name}` in Python? It should {summary}",
    "I need a function {signature}. {doc}",
    "python: {summary} -- how would I write that as `{name}`?",
    "Please write `{signature}`.\n\nDocstring:\n{doc}",
]
FUNCTION_OPENINGS = [
    "Here is one way to write it:\n\n", "Sure! Here's `{name}`:\n\n", "", "Here's an implementation:\n\n",
]
TOPIC_ASKS = [
    "Explain {topic} in Python.", "How does {topic} work in Python?", "what does python do with {topic}",
    "Can you describe the rules for {topic} in Python, with the details?",
]
TRANSLATION_ASKS = [
    "Translate into {language}:\n\n{text}", "How would I say this in {language}?\n{text}",
    "Can you translate these messages into {language}, one per line?\n\n{text}",
    "{language} please:\n{text}",
]
BACK_ASKS = [
    "What does this mean in English?\n\n{text}", "Translate into English:\n{text}",
    "I got these messages and don't speak {language}. What do they say?\n\n{text}",
]
LANGUAGES = {"fr": "French", "de": "German", "es": "Spanish", "it": "Italian", "pt_BR": "Portuguese",
             "zh_CN": "Chinese", "ja": "Japanese", "ru": "Russian"}
LOCALE_DIR = Path("/usr/share/locale")
SKIPPED_PARTS = {"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "site-packages", "ensurepip"}


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's modules (tests, IDLE and installed packages left out), in a stable order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if not SKIPPED_PARTS & set(p.relative_to(root).parts))


def _summary(doc: str) -> str:
    first = doc.strip().split("\n\n")[0]
    text = " ".join(first.split())
    return (text[0].lower() + text[1:]) if text else text


def function_texts(files: list[Path], *, min_lines: int = 4, max_lines: int = 40) -> Iterator[dict]:
    """{"name", "signature", "doc", "source"} for every function with a docstring of `min_lines`..`max_lines`
    lines in `files` (methods included, unreadable files skipped)."""
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("__"):
                continue
            doc = ast.get_docstring(node)
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            if not doc or len(doc) < 20 or not min_lines <= span <= max_lines:
                continue
            start = node.lineno - 1 - len(node.decorator_list)
            body = lines[start:node.end_lineno]
            indent = min(len(line) - len(line.lstrip()) for line in body if line.strip())
            text = "\n".join(line[indent:] for line in body)
            signature = f"{node.name}({ast.unparse(node.args)})"
            yield {"name": node.name, "signature": signature, "doc": doc.strip(), "source": text}


def topic_texts(max_chars: int = 2400) -> Iterator[dict]:
    """{"topic", "text"} for each topic of the language reference the interpreter ships (pydoc_data)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return
    for key in sorted(topics):
        text = topics[key].strip()
        if len(text) > 200:
            yield {"topic": key.replace("-", " "), "text": text[:max_chars].rsplit("\n", 1)[0]}


def catalogue_pairs(language: str, locale_dir: Path = LOCALE_DIR, min_chars: int = 40) -> list[tuple[str, str]]:
    """(English message, its translation) from every message catalogue installed for `language`: messages of
    at least `min_chars` characters with at most two format fields, in a stable order, each once."""
    pairs = {}
    for path in sorted((locale_dir / language / "LC_MESSAGES").glob("*.mo")):
        try:
            with path.open("rb") as file:
                catalogue = gettext.GNUTranslations(file)._catalog
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        for english, translated in catalogue.items():
            if (isinstance(english, str) and isinstance(translated, str) and len(english) >= min_chars
                    and translated and translated != english and english.count("%") <= 2):
                pairs.setdefault(english.strip(), translated.strip())
    return sorted(pairs.items())


def translation_conversations(rng: random.Random, per_language: int, locale_dir: Path = LOCALE_DIR) -> list[tuple]:
    """(messages, reply) pairs of 1-4 catalogue messages each, per language in LANGUAGES that has catalogues:
    into the language (two thirds) or back into English."""
    pairs = []
    for code, language in LANGUAGES.items():
        found = catalogue_pairs(code, locale_dir)
        rng.shuffle(found)
        at = 0
        for _ in range(per_language):
            group = found[at:at + rng.randint(1, 4)]
            at += len(group)
            if not group:
                break
            source, target = [e for e, _ in group], [t for _, t in group]
            if rng.random() < 2 / 3:
                ask = rng.choice(TRANSLATION_ASKS)
            else:
                ask, source, target = rng.choice(BACK_ASKS), target, source
            pairs.append(([{"role": "user", "content": ask.format(language=language, text="\n".join(source))}],
                          "\n".join(target)))
    return pairs


def outside_conversations(seed: int = 0, *, functions: int = 3000, translations: int = 250,
                          files: list[Path] | None = None, locale_dir: Path = LOCALE_DIR) -> list[tuple]:
    """(messages, reply text) pairs: `functions` standard-library functions (a seeded sample), every
    reference topic and `translations` catalogue turns per language, each with a phrasing drawn from the
    lists above."""
    rng = random.Random(seed)
    found = list(function_texts(stdlib_files() if files is None else files))
    rng.shuffle(found)
    pairs = []
    for item in found[:functions]:
        ask = rng.choice(FUNCTION_ASKS).format(summary=_summary(item["doc"]), **item)
        opening = rng.choice(FUNCTION_OPENINGS).format(**item)
        pairs.append(([{"role": "user", "content": ask}], f"{opening}```python\n{item['source']}\n```"))
    for item in topic_texts():
        ask = rng.choice(TOPIC_ASKS).format(topic=item["topic"])
        pairs.append(([{"role": "user", "content": ask}], item["text"]))
    pairs += translation_conversations(rng, translations, locale_dir)
    rng.shuffle(pairs)
    return pairs


def outside_replies(tokenizer, work: Path, *, seed: int = 0, functions: int = 3000, translations: int = 250,
                    shard_size: int = 256, max_reply_tokens: int = 384, eos_id: int | None = None,
                    context_length: int = 2048) -> list[Path]:
    """Replies files of outside text under <work>/replies (outside-<index>.pt), teacher-forced: the reply is
    the text itself, cut to `max_reply_tokens`, ending in `eos_id` where it was not cut; the prompt is cut to
    fit `context_length` with the reply (the verifier's, as the other steps cut theirs). Files that exist are
    kept (a rerun writes the missing ones). Returns the files written."""
    pairs = outside_conversations(seed, functions=functions, translations=translations)
    written = []
    for index, chunk in shards(pairs, shard_size):
        dest = Path(work) / "replies" / f"{MODE}-{index:05d}.pt"
        if dest.exists():
            continue
        prompt_ids, reply_ids = [], []
        for messages, text in chunk:
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) < max_reply_tokens and eos_id is not None:
                ids.append(eos_id)
            prompt_ids.append(encode_messages(tokenizer, messages, context_length, max_reply_tokens))
            reply_ids.append(ids[:max_reply_tokens])
        save_atomic({"prompt_ids": prompt_ids, "reply_ids": reply_ids, "mode": MODE}, dest)
        written.append(dest)
    return written


def add_steps(steps, load_verifier) -> None:
    """The `outside-replies` step on distill's command line."""

    def cmd_outside_replies(args) -> None:
        verifier = load_verifier(args)
        written = outside_replies(verifier.tokenizer, args.work, seed=args.seed, functions=args.functions,
                                  translations=args.translations, max_reply_tokens=args.max_reply_tokens,
                                  eos_id=min(verifier.eos_token_ids), context_length=verifier.context_length)
        print(f"{len(written)} replies files of outside text under {args.work / 'replies'}; run features next")

    p = steps.add_parser("outside-replies", help="teacher-forced replies of text the project did not write (the "
                         "interpreter's standard library: functions, reference topics; message catalogues)")
    p.add_argument("--functions", type=int, default=3000, help="standard-library functions to sample")
    p.add_argument("--translations", type=int, default=250,
                   help="message-catalogue turns per language (0: none)")
    p.add_argument("--max-reply-tokens", type=int, default=384)
    p.set_defaults(run_step=cmd_outside_replies)
