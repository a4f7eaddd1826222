"""An exported conversation is headed by its whole title, not the sidebar's elided one."""

from __future__ import annotations

from app.conversation import Conversation, Message
from app.export_formats import to_html, to_markdown

PROMPT = ("Summarise this text in two sentences:\n  Honey bees live in colonies of up to sixty thousand workers, "
          "a few hundred drones and a single queen.")


def test_an_exported_markdown_files_heading_is_the_full_title():
    conv = Conversation()
    conv.messages = [Message("user", PROMPT), Message("assistant", "Bees live in colonies.")]
    conv.auto_title()
    assert conv.title.endswith("…") and len(conv.title) < len(PROMPT)  # the sidebar's title is elided
    whole = " ".join(PROMPT.split())
    assert to_markdown(conv).splitlines()[0] == f"# {whole}"
    assert f"<h1>{whole}</h1>" in to_html(conv)


def test_a_title_that_was_never_elided_or_was_renamed_is_exported_as_it_is():
    conv = Conversation()
    conv.messages = [Message("user", "Hi there"), Message("assistant", "Hello")]
    conv.auto_title()
    assert to_markdown(conv).splitlines()[0] == "# Hi there"
    conv.title = "Bees…"  # renamed by the user: not the first message's start
    conv.messages[0].content = "Something else entirely, and long enough to have been cut short in the sidebar"
    assert to_markdown(conv).splitlines()[0] == "# Bees…"
