"""Text: messages to token ids and token ids back to text.

Owns chat-template rendering (`chat`; in a child process with hard limits, `template_process`) and
streaming detokenisation (`textstream`). May import the root vocabulary only.
"""
