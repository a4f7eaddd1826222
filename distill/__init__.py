"""Distilling the shipped draft model from the embedded verifier (self-distillation), step by step.

    prompts   compose the prompt sets (train, extra: more topics, held-out) from templates x topics
              -> assets/prompts/
    generate  the verifier's own replies to the training prompts (--set train or extra), greedy and
              sampled -> <work>/replies/,
              with its top-k next-token distributions (<work>/labels/) and final hidden states
              (<work>/features/) recorded on the way
    corpus    grow the lasting corpus: varied prompts (corpus_prompts.py, not templates x topics) and the
              verifier's greedy replies, compressed shards kept in the repository -> distill/corpus/
    corpus-replies  the corpus shards as replies files (--teacher-forced: the prompts' own text counts
              too) -> <work>/replies/corpus[tf]-<index>.pt; label and features then recompute the rest
    outside-replies  teacher-forced replies of text the project did not write, read from the machine (the
              interpreter's standard library: functions and reference topics; the system's message
              catalogues in other languages) -> <work>/replies/outside-<index>.pt
    label     the top-k distributions again, for replies generated elsewhere -> <work>/labels/
    features  the hidden states again, for replies generated elsewhere -> <work>/features/
    train-head  the shipped draft: a draft head (draft_head.py, after EAGLE) on the hidden states,
              --ttt-depth drafting steps on its own predictions (EAGLE-3) -> <work>/runs/<run>/
    train     the alternative it replaced: a small standalone SpecdecDraftForCausalLM on the top-k
              distributions -> <work>/runs/<run>/
    heldout-replies  the verifier's greedy replies to a held-out set (default independent-heldout.jsonl,
              64 tokens), states and labels included, in a work folder of their own that train-head and
              train refuse -> <work>/replies/greedy-heldout_<set>-00000.pt, for `agreement --work <work>`
    agreement a head's teacher-forced agreement with the verifier, per drafting step, on replies shards
              (--by-category: per prompt category too, on a held-out set's replies)
    export    a trained draft as an fp16 folder with the verifier's tokenizer -> assets/<name>/
    measure   acceptance and speed of the pair on held-out prompts, through the real engine
    card      measure the exported draft and write its model card

Every step is seeded, shows a progress bar, and resumes from the files it has already written.
Run it with ``python -m distill <step> ...`` (``--help`` lists the options).
This package is a tool for building an asset; the engine never imports it.
"""
