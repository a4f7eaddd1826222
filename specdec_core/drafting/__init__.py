"""Drafting: everything that proposes tokens for the verifier to check.

Owns the drafter contract (`base`) and its implementations, one a file (`model_drafter`, `head_drafter`,
`lookup_drafter`, `hybrid_drafter`; `drafters` picks one for a draft), draft trees (`trees`: growth after
EAGLE-2, the tree's records), drafts with another tokenizer (`cross_vocab`) and the vocabularies' map and text
bridge they use (`vocabularies`), online adaptation of the head (`adapt`) and the draft planner (`planner`: how
much each round drafts). The draft architectures the drafters run are models, in loading/ (`draft_head`,
`draft_model`). May import the root vocabulary, loading, text and
verification; never the engine loop, pairs, measuring or the command line.
"""
