"""Pairs: from a user's choice of verifier and draft to a checked pair and a ready engine.

Owns the compatibility doctor (`doctor`), the drafts on offer for a verifier (`draft_candidates`) and
building the engine from specs (`pairing`). May import everything below it (root, loading, text,
verification, drafting, the engine); never measuring or the command line.
"""
