"""The shipped draft's model card (README.md), written from the figures measured for it (card.json) and
the facts of its training (distill.json), so that the card states only what was measured."""

from __future__ import annotations


def build_card(figures: dict, quick: dict, quick_check: dict, folder_bytes: int, command: str) -> dict:
    """card.json: the headline figures of `measure_pair` on the held-out prompts (with the hybrid as
    shipped), the quick check the slow tests repeat, and the whole measurement."""
    import os

    import torch

    shipped, quick_shipped = figures["hybrid"] or {}, quick["hybrid"] or {}
    return {
        "greedy_acceptance_rate": round(figures["greedy_acceptance_rate"], 4),
        "sampled_acceptance_rate_t0.7": round(figures["sampled_acceptance_rate"], 4),
        "speedup": round(figures["speedup"], 3),
        "best_gamma": figures["best_gamma"],
        "identical_greedy_output": figures["identical_greedy_output"],
        "draft_ms_per_token": round(figures["draft_ms_per_token"], 2),
        "verifier_ms_per_token": round(figures["verifier_ms_per_token"], 2),
        "c": round(figures["c"], 4),
        "folder_bytes": folder_bytes,
        "as_shipped": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in shipped.items()},
        "quick_check": {**quick_check, "greedy_acceptance_rate": round(quick["greedy_acceptance_rate"], 4),
                        "as_shipped_greedy_acceptance_rate": round(quick_shipped.get("acceptance_rate", 0), 4)},
        "measurement": {**figures, "command": command, "torch_threads": torch.get_num_threads(),
                        "load_average": os.getloadavg()},
    }


def render_card(card: dict, distill: dict) -> str:
    if distill.get("kind") == "head":
        return render_head_card(card, distill)
    shape = distill.get("shape", {})
    settings = distill.get("settings", {})
    last = (distill.get("history") or [{}])[-1]
    status = ("" if card["speedup"] >= 1.0 else
              f"\n**Status: speculation with this draft is slower than the verifier alone ({card['speedup']:.2f}x).** "
              f"It was trained on {last.get('train_sequences', 0):,} replies only ({last.get('train_positions', 0):,} "
              "tokens), far too few for open chat: validation replies (same templates) agree well, held-out "
              "topics do not. Run the pipeline below at full size (all training prompts, greedy and sampled) "
              "before relying on it.\n")
    modes = _reply_modes(distill, ", ")
    layers = f"copies of verifier layers {shape['copy_layers']}" if shape.get("copy_layers") else "random init"
    return f"""# smollm2-135m-draft

A draft model for speculative decoding with the embedded verifier SmolLM2-135M-Instruct, distilled from
that verifier's own replies. Load it as `smollm2-135m-draft`; it uses the verifier's tokenizer (files
included here), so the compatibility doctor passes the pair with no warnings.
{status}
{_figures(card)}
## Architecture

`SpecdecDraftForCausalLM` (`specdec_core/drafting/draft_model.py`): a Llama with {shape.get('layers')} layer(s)
of width {shape.get('hidden')} ({shape.get('heads')} heads, {shape.get('kv_heads')} KV heads,
MLP {shape.get('intermediate')}; {layers}), a token table of rank {shape.get('embedding_rank')} shared by
input and output (initialised from the verifier's embedding, projected on its principal directions),
and an output layer over the
{shape.get('head_size')} tokens the verifier emits most often (covering {last.get('coverage', 0):.1%} of its
next-token probability mass on the training replies). The forward pass returns full-vocabulary logits
(-inf outside the subset), so the engine uses it like any causal LM and verification stays exact.

## Data and training

- prompts: `assets/prompts/distill-train.jsonl`, composed from templates x topics
  (`distill/prompts.py`); held-out prompts use topics, code and passages never trained on.
- data: the verifier's own replies ({modes}) with its top-16 next-token
  log-probabilities recorded while generating: {last.get('train_sequences', 0):,} replies,
  {last.get('train_positions', 0):,} reply positions.
- loss: cross-entropy from the verifier's top-k distribution (restricted to the output subset) to the draft's.
- training: {last.get('step', 0)} steps of {settings.get('batch_tokens')} reply positions, AdamW lr
  {settings.get('lr')}, {last.get('train_minutes', 0):.0f} minutes in the last run; validation
  agreement with the verifier's argmax {last.get('best_val_agreement', 0):.3f} (the best validation
  checkpoint is the one exported).

Reproduce (CPU; resumable, each step skips what is already written under `.distill/`):

```
python -m distill prompts
python -m distill generate --modes greedy,t07 --batch-size 48 --max-new-tokens 160
python -m distill train --run main --shape '{_shape_arg(shape)}' --max-minutes 60
python -m distill export --run main
python -m distill card
```
"""


def _reply_modes(distill: dict, joiner: str) -> str:
    """The reply modes of the data in words ("greedy0" and "t07b" are more shards of greedy and t07)."""
    names = {"greedy": "greedy", "t07": "sampled at temperature 0.7", "t10": "sampled at temperature 1",
             "corpus": "greedy, over the lasting corpus", "corpustf": "greedy, over the lasting corpus, with the "
             "prompts' own text as teacher-forced positions"}
    if "corpustf" in distill.get("reply_modes", []):
        return names["corpustf"]
    if "corpus" in distill.get("reply_modes", []):
        return names["corpus"]
    return joiner.join(sorted({names.get("greedy" if m.startswith("greedy") else m.rstrip("b"), m)
                               for m in distill.get("reply_modes", [])}))


def _shape_arg(shape: dict) -> str:
    return ";".join(f"{k}={v}" for k, v in shape.items() if v != "")


def _as_shipped(card: dict) -> str:
    shipped = card.get("as_shipped")
    if not shipped:
        return ""
    return f"""## As shipped: the embedded pair's default drafter

The embedded verifier speculates with this draft as a hybrid (`--drafter hybrid`): prompt lookup where
the conversation has a match, else {shipped['draft_tokens']} token(s) from this draft; gamma {shipped['gamma']}.
On the same held-out prompts, in the same run:

- measured speedup over speculation off: **{shipped['speedup']:.2f}x** ({shipped['tokens_per_s']:.2f} tokens/s)
- greedy acceptance rate: {shipped['acceptance_rate']:.3f}; {shipped['tokens_per_round']:.2f} tokens per verifier call
- acceptance rate at temperature 0.7: {shipped['sampled_t0.7_acceptance_rate']:.3f}
- greedy output identical to the verifier alone on every measured prompt: {shipped['identical_greedy_output']}

"""


def _figures(card: dict) -> str:
    m = card["measurement"]
    per_gamma = "\n".join(
        f"| {g} | {f['acceptance_rate']:.3f} | {f['tokens_per_round']:.2f} | {f['tokens_per_s']:.2f} | "
        f"{f['speedup']:.2f}x | {f['draft_ms_per_token']:.1f} |" for g, f in m["speculative"].items())
    heading = "## The draft alone (held-out prompts, measured by `python -m distill card`)"
    return _as_shipped(card) + heading + f"""

- greedy acceptance rate: {card['greedy_acceptance_rate']:.3f} (best gamma {card['best_gamma']})
- acceptance rate at temperature 0.7: {card['sampled_acceptance_rate_t0.7']:.3f} (gamma {m['sampled_t0.7']['gamma']})
- measured speedup over speculation off, same run: {card['speedup']:.2f}x
- greedy output identical to the verifier alone on every measured prompt: {card['identical_greedy_output']}
- draft cost: {card['draft_ms_per_token']:.1f} ms per drafted token; verifier {card['verifier_ms_per_token']:.1f} ms
  per plain token; c = {card['c']:.3f} (draft time per drafted token / verifier time per speculative call)
- size on disk: {card['folder_bytes'] / 1e6:.1f} MB (weights in fp16, loaded as fp32 on the CPU)

| gamma | acceptance | tokens per verifier call | tokens/s | speedup | draft ms/token |
| --- | --- | --- | --- | --- | --- |
{per_gamma}

Verifier alone: {m['verifier_alone']['tokens_per_s']:.2f} tokens/s. {m['prompts']} held-out prompts
(`assets/prompts/distill-heldout.jsonl`, first {m['prompts']}), {m['max_new_tokens']} new tokens each,
torch threads {m['torch_threads']}, load average during the run {', '.join(f'{x:.1f}' for x in m['load_average'])}
(tokens/s depend on the machine's load; acceptance rates do not depend on timing).
Command: `{m['command']}`.
"""


def _train_command(run: str, settings: dict, work: str = "") -> str:
    parts = [f"--run {run}"]
    init = settings.get("init_from")
    if init:  # a run's <work>/runs/<run>/model is named by its run, a head's folder by its path
        parts.append(f"--init-from {init.rstrip('/').split('/')[-2] if init.endswith('/model') else init}")
    for flag, key, default in (("--head-ids", "head_ids", "data"), ("--chain-steps", "chain_steps", 3),
                               ("--depth-decay", "depth_decay", 1.0),
                               ("--steps", "steps", None),
                               ("--warmup", "warmup", 100), ("--lr", "lr", 1e-3),
                               ("--batch-tokens", "batch_tokens", None), ("--noise", "noise", 0.2),
                               ("--validate-every", "validate_every", 100), ("--fp32", "bf16", True),
                               ("--validation-shards", "validation_shards", ""),
                               ("--feature-layers", "feature_layers", "")):
        value = settings.get(key)
        if value is not None and value != default:
            parts.append(flag if isinstance(value, bool) else f"{flag} {value:g}" if isinstance(value, float)
                         else f"{flag} {value}")
    return f"python -m distill {work}train-head " + " ".join(parts)


def _runs(distill: dict) -> list[dict]:
    """Every training run behind the exported head, oldest first (each started from the one before)."""
    last = (distill.get("history") or [{}])[-1]
    return [*distill.get("earlier_runs", []),
            {"run": distill.get("run", "head"), "settings": distill.get("settings", {}), "last": last,
             "best_val_agreement": distill.get("best_val_agreement")}]


def _comparison(card: dict) -> str:
    """The before/after table `card --compare FILE` copied into card.json: each row a held-out set, a figure,
    the earlier head's value and this head's, and the command that measured both."""
    comparison = card.get("comparison")
    if not comparison:
        return ""
    rows = "\n".join(f"| {r['set']} | {r['figure']} | {r['before']} | {r['after']} | `{r['command']}` |"
                     for r in comparison["rows"])
    return f"""## Before and after: {comparison['title']}

| prompts | figure | {comparison['before']} | {comparison['after']} | measured by |
| --- | --- | --- | --- | --- |
{rows}

{comparison.get('note', '')}

"""


def _corpus_data(distill: dict) -> tuple[str, str]:
    """The card's data line and reproduce commands for a last run over the lasting corpus ("" when not)."""
    settings = distill.get("settings", {})
    if "corpus" not in distill.get("prompt_sets", []):
        return "", ""
    teacher_forced = "corpustf" in distill.get("reply_modes", [])
    line = (f"\n- the last run (`{distill.get('run')}`) continued on the lasting corpus (`distill/corpus/`: prompts of "
            "many shapes from `distill/corpus_prompts.py`, not templates x topics, and the verifier's greedy replies"
            + (", the prompts' own text counting as teacher-forced positions too" if teacher_forced else "")
            + f"; validated on {settings.get('validation_shards', 'a random share').replace(',', ', ')}, never "
            f"trained on; seed {settings.get('seed', 0)}).")
    work = "--work .distill/tf " if teacher_forced else "--work .distill/c "
    commands = (f"python -m distill {work}corpus-replies" + (" --teacher-forced" if teacher_forced else "")
                + f"\npython -m distill {work}features\npython -m distill {work}label\n")
    if settings.get("feature_layers"):  # the run read inner layers' states: features computed with them too
        commands += f"python -m distill {work}features --layers {settings['feature_layers']}\n"
    if teacher_forced and "corpus" in distill.get("reply_modes", []):
        commands += ("# validation shards as plain replies (reply positions only): corpus-replies without "
                     "--teacher-forced,\n# their files in place of the corpustf ones of the same index\n")
    return line, commands


def render_head_card(card: dict, distill: dict) -> str:
    settings = distill.get("settings", {})
    runs = _runs(distill)
    last = runs[-1]["last"]
    shipped = card.get("as_shipped") or {}
    speedup = shipped.get("speedup", card["speedup"])
    status = ("" if speedup >= 1.0 else
              f"\n**Status: speculation with this draft is slower than the verifier alone ({speedup:.2f}x).**\n")
    modes = _reply_modes(distill, " and ")
    minutes = sum(r["last"].get("train_minutes", 0) for r in runs)
    run_lines = "\n".join(
        f"  {i + 1}. `{r['run']}`: {r['last'].get('step', 0)} steps of {r['settings'].get('batch_tokens')} positions, "
        f"{r['settings'].get('chain_steps', 3)} drafting step(s) per position, lr {r['settings'].get('lr')}, "
        f"on {r['last'].get('train_positions', 0):,} reply positions, {r['last'].get('train_minutes', 0):.0f} "
        f"minutes; validation agreement (step 1) {r['last'].get('val_agreement1', 0):.3f}"
        + (f", starting from `{runs[i - 1]['run']}`" if i else "") for i, r in enumerate(runs))
    corpus_line, corpus_commands = _corpus_data(distill)
    recorded = ("recomputed by a batched forward pass of the verifier" if corpus_line
                else "all recorded while generating")
    averaged = distill.get("averaged_with")
    averaged_flags = f" --average-with {averaged['head']} --share {averaged['share']:g}" if averaged else ""
    if averaged:
        corpus_line += (f"\n- exported as the average of the last run's weights ({averaged['share']:.0%}) and those of "
                        f"the head it started from (`{averaged['head']}`), which keeps more of what that head knew "
                        "(WiSE-FT, Wortsman et al. 2022).")
    commands = "\n".join(_train_command(r["run"], r["settings"]) for r in runs[:-1])
    work = corpus_commands.split("corpus-replies")[0].removeprefix("python -m distill ") if corpus_commands else ""
    init = str(runs[-1]["settings"].get("init_from") or "")
    if len(runs) > 1 and init and not init.endswith("/model"):  # started from an exported head's folder
        corpus_commands += f"# {init}: the exported head of run {runs[-2]['run']} (the head shipped before this one)\n"
    commands += "\n" + corpus_commands + _train_command(runs[-1]["run"], runs[-1]["settings"], work)
    validation = ("validation replies are held back from each run, but earlier runs may have trained on them, "
                  "so these agreements run high: the held-out figures above are the ones to trust")
    if runs[-1]["settings"].get("validation_shards"):
        validation = (f"the last run validated on shards no earlier run saw "
                      f"({runs[-1]['settings']['validation_shards'].replace(',', ', ')}); the earlier runs' "
                      "validation replies may have been trained on by the runs before them")
    extra = "extra" in distill.get("prompt_sets", []) or any("extra" in r["settings"].get("validation_shards", "")
                                                            for r in runs)
    prompt_files = "`assets/prompts/distill-train.jsonl`" + (
        " and `distill-train-extra.jsonl` (more topics)" if extra else "")
    extra_command = ("python -m distill generate --set extra --modes greedy --shard-size 32 "
                     "--batch-size 32\npython -m distill generate --set extra --modes t07 --skip 2000 "
                     "--shard-size 32 --batch-size 32\n" if extra else "")
    return f"""# smollm2-135m-draft

A draft head for speculative decoding with the embedded verifier SmolLM2-135M-Instruct, trained on that
verifier's own replies and hidden states. Load it as `smollm2-135m-draft`; it uses the verifier's
tokenizer (files included here), and the compatibility doctor checks that it reads this verifier.
{status}
{_figures(card)}
{_comparison(card)}## Architecture

`SpecdecHeadModel` (`specdec_core/drafting/draft_head.py`), after EAGLE (Li et al. 2024): one Llama decoder layer
(width {settings.get('hidden', 576)}, {settings.get('heads')} heads, {settings.get('kv_heads')} KV heads,
MLP {settings.get('intermediate')}) that reads the verifier's final hidden state at position i and the
embedding of token i+1 (concatenated, then projected), and predicts the verifier's hidden state at i+1.
Tokens are scored with the verifier's own output layer, cut to the {settings.get('head_size')} token ids it
emits most (covering {distill.get('head_coverage', 0):.1%} of its next-token probability mass on the
training replies); the head proposes no other token, and verification stays exact. The token embedding
and output rows are the verifier's, read when the pair loads, so only the layer is stored here.
When drafting, `HeadDrafter` (`specdec_core/drafting/drafters.py`) feeds the head the verifier's true hidden
states up to the last verified token and its own predictions after that.

## Data and training

- prompts: {prompt_files}, composed from templates x topics
  (`distill/prompts.py`); held-out prompts use topics, code and passages never trained on.
- data: the verifier's own replies ({modes}), its final hidden state at every position of prompt +
  reply and its top-16 next-token probabilities, {recorded}:
  {last.get('train_sequences', 0):,} replies, {last.get('train_positions', 0):,} reply positions in the last run.\
{corpus_line}
- loss: smooth L1 between predicted and true hidden state + {settings.get('cls_weight')} x cross-entropy
  from the verifier's top-16 distribution (restricted to the subset) to the head's, at each drafting
  step, the later steps reading the head's own predictions; input states get uniform noise of width
  {settings.get('noise')} standard deviations; {'bf16 autocast' if settings.get('bf16', True) else 'fp32'} on the CPU.
- training, {minutes:.0f} minutes on the CPU in all, each run continuing the previous one as the data grew
  (the best validation checkpoint of the last run is the one exported; {validation}):
{run_lines}

Reproduce (CPU; resumable, each step skips what is already written under `.distill/`; the data can grow
between runs, as it did here):

```
python -m distill prompts
python -m distill generate --modes greedy --shard-size 32 --batch-size 32
python -m distill generate --modes t07 --skip 3000 --shard-size 32 --batch-size 32
{extra_command}{commands}
python -m distill {work}export --run {runs[-1]['run']}{averaged_flags}
{card['measurement']['command']}
```

On a lent CUDA machine `scripts/distill_gpu.sh` runs generate, train-head and export in one go.
"""
