"""Corpus prompts in other languages around translated manual pages (distill/corpus_languages.py)."""

from __future__ import annotations

import gzip
import json
import shutil
from itertools import islice

import pytest

from distill import corpus_languages as languages

PAGE = """LS(1)                    Commandes de l'utilisateur                    LS(1)

NOM
       ls - Afficher le contenu de répertoires

DESCRIPTION
       Afficher les informations des FICHIERs (du répertoire courant par défaut). Les entrées sont triées
       alphabétiquement si aucune des options n'est indiquée.

       -a, --all
              Inclure les entrées débutant par « . ».

       Les paramètres obligatoires pour les options de forme longue le sont aussi pour les options de forme
       courte.

       This paragraph was left in English and is not the page's language at all.

       Cette traduction est une documentation libre ; veuillez vous reporter à la licence.
"""


def test_a_pages_running_paragraphs_are_kept_and_its_headings_options_and_english_left_out():
    paragraphs = languages.page_paragraphs(PAGE)
    assert paragraphs[0].startswith("Afficher les informations des FICHIERs")
    assert paragraphs[0].endswith("indiquée.")
    assert not any(p.startswith(("-a", "ls -", "NOM", "Inclure")) for p in paragraphs)
    kept = [p for p in paragraphs if languages.in_language(p, "fr")]
    assert len(kept) == 3 and not any("English" in p for p in kept)
    assert languages.in_language("如果使用了 --inetd 选项，那么 socket 文件描述符将被用作标准输入。", "zh_CN")
    assert not languages.in_language("If the input file is huge, allocating the memory may fail.", "zh_CN")
    joined = "将被用作被调用进程的标准输入与标准输出。"
    assert languages._join(["将被用作被调用进程的", "标准输入与标准输出。"]) == joined


def test_passages_join_consecutive_paragraphs_up_to_a_length_and_drop_the_short_ones():
    paragraphs = ["a" * 100 + ".", "b" * 100 + ".", "c" * 300 + ".", "d."]
    assert languages.passages_from(paragraphs, min_chars=150, max_chars=250) == [
        "a" * 100 + ".\n\n" + "b" * 100 + "."]  # c is longer than a passage may be; d alone is too short


def test_boilerplate_on_many_pages_is_left_out_and_the_prompts_ask_in_the_language_or_in_english(tmp_path,
                                                                                                monkeypatch):
    pages = tmp_path / "fr" / "man1"
    pages.mkdir(parents=True)
    notice = "Cette traduction est une documentation libre ; veuillez vous reporter à la licence GNU."
    for i in range(4):
        body = (f"       La commande numéro {i} affiche une liste détaillée des fichiers, triée par date. Elle lit\n"
                "       aussi les répertoires cachés quand on le lui demande.")
        (pages / f"cmd{i}.1.gz").write_bytes(gzip.compress(f"{body}\n\n       {notice}\n".encode()))
    monkeypatch.setattr(languages, "render_page", lambda path: gzip.decompress(path.read_bytes()).decode())
    found = languages.language_passages(tmp_path, pages=10)
    assert set(found) == {"fr"} and len(found["fr"]) == 4
    assert all(notice not in passage and name.startswith("cmd") for name, passage in found["fr"])
    saved = tmp_path / "passages.json"  # rendered here, read where there is no groff
    saved.write_text(json.dumps(found, ensure_ascii=False))
    assert languages.language_passages(saved) == found
    prompts = list(islice(languages.language_prompts(found, seed=1), 40))
    assert len({p["messages"][0]["content"] for p in prompts}) == len(prompts)  # distinct
    assert {p["kind"] for p in prompts} == {"language-fr"}
    asks = [p["messages"][0]["content"] for p in prompts]
    assert any("English" in a for a in asks)
    assert any(a.startswith(("Peux-tu", "Explique", "D'après", "Je ne")) for a in asks)
    assert all(any(passage in a for _, passage in found["fr"]) for a in asks)


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff renders the pages; this machine has none")
def test_a_real_roff_page_renders_to_paragraphs(tmp_path):
    source = (".TH LS 1\n.SH NOM\nls \\- afficher\n.SH DESCRIPTION\nAfficher les informations des fichiers du "
              "répertoire courant, triées par ordre alphabétique.\n.PP\nLes entrées cachées sont omises.\n")
    path = tmp_path / "ls.1.gz"
    path.write_bytes(gzip.compress(source.encode()))
    paragraphs = languages.page_paragraphs(languages.render_page(path))
    assert paragraphs == ["Afficher les informations des fichiers du répertoire courant, triées par ordre "
                          "alphabétique.", "Les entrées cachées sont omises."]


def test_a_corpus_grows_from_the_pages_and_records_where_its_prompts_came_from(tmp_path, monkeypatch):
    from tiny import as_loaded, make_model, make_tokenizer

    from distill.corpus import grow_corpus, read_shard

    for folder, text in (("de", "Der Befehl zeigt den Inhalt eines Verzeichnisses an, nach Namen sortiert"),
                         ("es", "La orden muestra el contenido de un directorio, ordenado por nombre")):
        (tmp_path / "man" / folder / "man1").mkdir(parents=True)
        for i in range(3):
            body = f"       {text} ({i}). {text}, {i + 1}."
            (tmp_path / "man" / folder / "man1" / f"cmd{i}.1.gz").write_bytes(gzip.compress(body.encode()))
    monkeypatch.setattr(languages, "render_page", lambda path: gzip.decompress(path.read_bytes()).decode())
    tokenizer = make_tokenizer()
    verifier = as_loaded(make_model("llama", tokenizer, seed=1), tokenizer, "tiny-verifier")
    [path] = grow_corpus(verifier, tmp_path / "corpus", shards=1, shard_size=6, batch_size=6, max_new_tokens=4,
                         source="languages", man_root=tmp_path / "man")
    prompts, _, replies, facts = read_shard(path)
    assert facts["source"] == "languages" and len(prompts) == 6 and all(replies)
    assert {p["kind"] for p in prompts} == {"language-de", "language-es"}


def test_growing_the_corpus_from_languages_without_pages_says_what_to_install(tmp_path):
    from distill.corpus import _prompt_stream

    with pytest.raises(SystemExit, match="manpages-fr"):
        next(_prompt_stream("languages", 0, [], None, tmp_path))
