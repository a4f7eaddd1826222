"""Commands: the `specdec` command line (generate, chat, bench, doctor, models, rank-drafts).

The top of the ladder: it may import every other package, and nothing in the engine imports it.
"""
