"""distill.outside: teacher-forced replies of text the project did not write (the interpreter's standard library,
the system's message catalogues)."""

import struct

from distill.outside import catalogue_pairs, function_texts, outside_conversations

MODULE = '''
import os


class Box:
    @staticmethod
    def area(width, height=1):
        """Return the area of a rectangle.

        Both sides in the same unit."""
        product = width * height
        return product


def short(x):
    """Too short to be worth a reply."""
    return x
'''


def _write_mo(path, messages: dict[str, str]) -> None:
    # GNU gettext's .mo layout: magic, revision, count, offsets of the original and translated tables, hash size.
    keys = sorted(messages)
    ids, strs = b"", b""
    id_table, str_table = [], []
    for key in keys:
        id_table.append((len(key.encode()), len(ids)))
        ids += key.encode() + b"\0"
        str_table.append((len(messages[key].encode()), len(strs)))
        strs += messages[key].encode() + b"\0"
    header = 7 * 4
    ids_at = header + 2 * 8 * len(keys)
    strs_at = ids_at + len(ids)
    out = struct.pack("<7I", 0x950412DE, 0, len(keys), header, header + 8 * len(keys), 0, 0)
    out += b"".join(struct.pack("<2I", n, ids_at + at) for n, at in id_table)
    out += b"".join(struct.pack("<2I", n, strs_at + at) for n, at in str_table)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out + ids + strs)


def test_a_function_with_a_docstring_becomes_its_dedented_source_and_short_ones_are_skipped(tmp_path):
    (tmp_path / "geometry.py").write_text(MODULE, encoding="utf-8")
    (tmp_path / "broken.py").write_text("def (:\n", encoding="utf-8")
    found = list(function_texts([tmp_path / "broken.py", tmp_path / "geometry.py"]))
    assert [f["name"] for f in found] == ["area"]
    assert found[0]["signature"] == "area(width, height=1)"
    assert found[0]["source"].startswith("@staticmethod\ndef area(width, height=1):\n")
    assert found[0]["doc"].startswith("Return the area of a rectangle.")


def test_catalogues_give_long_messages_beside_their_translation_once_each(tmp_path):
    messages = {"": "Content-Type: text/plain; charset=UTF-8\n",
                "cannot open the configuration file for reading": "Konfigurationsdatei kann nicht gelesen werden",
                "too short": "zu kurz", "%s %s %s %s: four format fields are too many": "%s %s %s %s: zu viele"}
    _write_mo(tmp_path / "de" / "LC_MESSAGES" / "one.mo", messages)
    _write_mo(tmp_path / "de" / "LC_MESSAGES" / "two.mo", messages)
    assert catalogue_pairs("de", tmp_path) == [("cannot open the configuration file for reading",
                                                "Konfigurationsdatei kann nicht gelesen werden")]
    assert catalogue_pairs("fr", tmp_path) == []


def test_outside_conversations_are_seeded_chat_turns_whose_reply_is_the_outside_text(tmp_path):
    (tmp_path / "geometry.py").write_text(MODULE, encoding="utf-8")
    _write_mo(tmp_path / "locale" / "fr" / "LC_MESSAGES" / "app.mo",
              {f"message number {i}, long enough to be kept": f"message numéro {i} assez long" for i in range(8)})
    def make(seed):
        return outside_conversations(seed, functions=5, translations=3, files=[tmp_path / "geometry.py"],
                                     locale_dir=tmp_path / "locale")

    pairs = make(0)
    assert pairs == make(0)
    code = [reply for _, reply in pairs if "```python" in reply]
    assert len(code) == 1 and "def area(width, height=1):" in code[0]
    french = [(m, r) for m, r in pairs if "message" in r and "```" not in r]
    assert 1 <= len(french) <= 3
    for messages, reply in french:
        assert messages[0]["role"] == "user" and reply and reply not in messages[0]["content"]
