"""Drafting: everything that proposes tokens for the verifier to check.

Owns the drafter contract and its implementations (`drafters`: a draft model, the draft head, prompt
lookup, both together), draft trees (`trees`: growth after EAGLE-2, the tree's records), drafts with
another tokenizer (`cross_vocab`) and the vocabularies' map and text bridge they use (`vocabularies`), the
draft architectures (`draft_head`, `draft_model`), online adaptation of the head (`adapt`) and the draft
planner (`planner`: how much each round drafts). May import the root vocabulary, loading, text and
verification; never the engine loop, pairs, measuring or the command line.
"""
