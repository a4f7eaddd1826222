"""Distilling the shipped draft model from the embedded verifier (self-distillation), step by step.

    prompts   compose the prompt sets (train and held-out) from templates x topics -> assets/prompts/
    generate  the verifier's own replies to the training prompts, greedy and sampled -> <work>/replies/
    label     the verifier's top-k next-token distribution at every reply position -> <work>/labels/
    train     a SpecdecDraftForCausalLM on those distributions -> <work>/checkpoints/
    export    the trained draft as an fp16 folder with the verifier's tokenizer -> assets/<name>/
    measure   acceptance and speed of the pair on held-out prompts, through the real engine

Every step is seeded, shows a progress bar, and resumes from the files it has already written.
Run it with ``python -m specdec_core.distill <step> ...`` (``--help`` lists the options).
This package is a tool for building an asset; the engine never imports it.
"""
