"""Measuring: benchmarks and the prompt sets they run.

Owns `specdec bench`'s measurements (`bench`, `adapt_bench`), `specdec rank-drafts`' (`rank`) and the bundled
prompt sets (`prompt_sets`). May import everything except the command line; the engine never imports it.
"""
