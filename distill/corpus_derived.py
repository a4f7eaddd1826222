"""Prompts derived from the corpus's own replies: the corpus widens itself from one round of work to the next.

corpus_prompts.py starts from text written by hand, and runs out after a few hundred prompts. The replies the
verifier already wrote are material for many more prompts of the shapes users send: a follow-up turn after a
reply (a real multi-turn conversation), a passage to summarise, question or reshape (a reply of several
sentences), a snippet to explain, fix, document or port (a fenced code block from a code reply), and single
sentences to rewrite or translate. Every derived prompt is one of those tasks put to text of the corpus, so its
reply is again the verifier's own distribution on a new kind of context.

Nothing here reads a held-out set: the material is the corpus's replies to corpus prompts (corpus_prompts.py,
itself checked against HELD_OUT_FILES), and the task phrasings below are written for this module.

`derived_prompts(material, seed)` yields an endless-until-exhausted, seeded stream of {"kind", "messages"}
dicts, kinds taken in turn; `material_from_shards(shards, tokenizer)` turns read shards into the material.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from distill.corpus_prompts import TARGET_LANGUAGES, distinct_stream
from distill.prompts import Messages

FOLLOW_UPS = [
    "Can you give me a concrete example?", "Make that shorter, please.", "Why is that?",
    "Can you explain the second point in more detail?", "What would you do first?",
    "Put that in a table.", "Is there a simpler way?", "What are the risks?", "ok thanks. anything else I should know?",
    "Can you say that again for a complete beginner?", "Which of those matters most?",
    "Turn that into a checklist.", "Now write it as a short email to my team.", "What's the most common mistake here?",
    "hm, I'm not sure that's right. can you double-check?", "Give me three alternatives.",
    "How long would that take?", "Summarise your answer in one sentence.", "What if I'm on a tight budget?",
    "Can you add a short example in code?", "That's helpful. What should I read next?",
]

PASSAGE_TASKS = [
    "Summarise this in two sentences:\n\n{text}", "TL;DR please:\n{text}",
    "What is the main point of this text?\n\n{text}", "Give this text a short title.\n\n{text}",
    "Turn this into three bullet points:\n\n{text}", "List the key facts in the text below.\n\n{text}",
    "Rewrite this paragraph so a ten-year-old can follow it:\n\n{text}",
    "Here is some text:\n\"\"\"\n{text}\n\"\"\"\nWrite one question a reader could answer from it, then answer it.",
    "Read this and tell me what is missing or unclear.\n\n{text}",
    "Make this more concise without losing information:\n\n{text}",
    "Write a one-line summary for a newsletter:\n{text}",
    "Based only on the text below, what should I do first?\n\n{text}",
]

CODE_TASKS = [
    "What does this code do?\n\n```{lang}\n{code}\n```", "Explain this line by line:\n```{lang}\n{code}\n```",
    "Add comments to this code:\n\n```{lang}\n{code}\n```", "Can this be improved?\n```{lang}\n{code}\n```",
    "Write a unit test for this:\n\n```{lang}\n{code}\n```", "Is there a bug here?\n```{lang}\n{code}\n```",
    "Rewrite this in {other}:\n\n```{lang}\n{code}\n```", "Add error handling to this code.\n```{lang}\n{code}\n```",
    "What is the time complexity of this?\n```{lang}\n{code}\n```",
    "I got this from a tutorial, can you simplify it?\n```{lang}\n{code}\n```",
]
PORT_TARGETS = ["Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C++", "C#", "Ruby", "Kotlin"]

SENTENCE_TASKS = [
    "Make this sound more formal: {s}", "Make this friendlier: \"{s}\"", "Shorten this: {s}",
    "Say this more simply: {s}", "Rewrite as a question: {s}", "Is this sentence correct? {s}",
    "Give me two other ways to say: \"{s}\"", "Translate into {lang}: {s}", "How would you say this in {lang}? {s}",
    "{lang}, please: \"{s}\"", "Explain this sentence to me: {s}",
]

KINDS = ["follow-up", "passage", "snippet", "sentence"]

_FENCE = re.compile(r"```([A-Za-z0-9+#_-]*)\n(.*?)```", re.S)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Material:
    """What earlier replies offer: (messages, reply text) exchanges, passages, (language, code) snippets and
    single sentences, each list in corpus order."""

    exchanges: list[tuple[Messages, str]]
    passages: list[str]
    snippets: list[tuple[str, str]]
    sentences: list[str]


def _whole_sentences(text: str) -> str:
    """A reply cut at the length limit, up to its last finished sentence (and without an open code fence)."""
    if text.count("```") % 2:
        text = text[:text.rindex("```")]
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", text)]
    return text[:ends[-1]] if ends else ""


def material_from_texts(exchanges: list[tuple[Messages, str, bool]]) -> Material:
    """Split replies (prompt messages, reply text, whether the reply finished) into the material of each
    derived kind. Only a finished reply is continued by a follow-up; one cut at the length limit still gives
    passages, snippets and sentences up to its last finished sentence. A reply is a passage when it has 3 to 12
    sentences and no code; a code block of 2 to 30 lines is a snippet; a sentence of 6 to 30 words from prose
    is a sentence."""
    passages, snippets, sentences = [], [], []
    for _, reply, finished in exchanges:
        reply = reply if finished else _whole_sentences(reply)
        blocks = _FENCE.findall(reply)
        for lang, code in blocks:
            lines = code.strip("\n").splitlines()
            if 2 <= len(lines) <= 30:
                snippets.append((lang.lower() or "python", "\n".join(lines)))
        prose = _FENCE.sub(" ", reply).strip()
        parts = [p.strip() for p in _SENTENCE.split(prose) if p.strip()]
        if not blocks and 3 <= len(parts) <= 12 and len(prose) <= 1500:
            passages.append(prose)
        sentences += [p for p in parts if 6 <= len(p.split()) <= 30 and "\n" not in p and p[-1] in ".!?"]
    keep = [(m, r) for m, r, finished in exchanges if finished and r.strip() and len(r) <= 1500]
    return Material(keep, list(dict.fromkeys(passages)), list(dict.fromkeys(snippets)),
                    list(dict.fromkeys(sentences)))


def material_from_shards(shards, tokenizer) -> Material:
    """Material from read corpus shards ((prompts, prompt ids, reply ids, facts) each, corpus.read_shard),
    their replies decoded; a reply as long as the shard's max_new_tokens counts as cut, not finished."""
    exchanges = []
    for prompts, _, reply_ids, facts in shards:
        limit = facts.get("max_new_tokens", 0)
        for prompt, reply in zip(prompts, reply_ids):
            if reply:
                text = tokenizer.decode(reply, skip_special_tokens=True).strip()
                exchanges.append((prompt["messages"], text, not (limit and len(reply) >= limit)))
    return material_from_texts(exchanges)


def _follow_up(r: random.Random, m: Material) -> Messages | None:
    if not m.exchanges:
        return None
    messages, reply = r.choice(m.exchanges)
    if sum(1 for x in messages if x["role"] == "user") >= 3:
        return None  # long enough already
    return [*[dict(x) for x in messages], {"role": "assistant", "content": reply},
            {"role": "user", "content": r.choice(FOLLOW_UPS)}]


def _passage(r: random.Random, m: Material) -> Messages | None:
    return [{"role": "user", "content": r.choice(PASSAGE_TASKS).format(text=r.choice(m.passages))}] if m.passages \
        else None


def _snippet(r: random.Random, m: Material) -> Messages | None:
    if not m.snippets:
        return None
    lang, code = r.choice(m.snippets)
    other = r.choice([x for x in PORT_TARGETS if x.lower() != lang])
    return [{"role": "user", "content": r.choice(CODE_TASKS).format(lang=lang, code=code, other=other)}]


def _sentence(r: random.Random, m: Material) -> Messages | None:
    if not m.sentences:
        return None
    text = r.choice(SENTENCE_TASKS).format(s=r.choice(m.sentences), lang=r.choice(TARGET_LANGUAGES))
    return [{"role": "user", "content": text}]


MAKERS = {"follow-up": _follow_up, "passage": _passage, "snippet": _snippet, "sentence": _sentence}


def derived_prompts(material: Material, seed: int = 0) -> Iterator[dict]:
    """A seeded stream of distinct derived prompts, the kinds taken in turn (a kind without material is
    skipped), until 2,000 draws in a row bring no new prompt."""
    makers = {kind: (lambda r, make=MAKERS[kind]: make(r, material)) for kind in KINDS}
    return distinct_stream(makers, random.Random(seed), prefix="derived-")
