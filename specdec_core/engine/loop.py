"""The speculative decoding loop: prefill, then rounds of draft -> verify -> accept -> roll back -> emit.

A round drafts what the planner asks for (Engine._draft_round, drafting/planner.py), then checks a chain of
drafted tokens (Engine._check_chain) or, when the drafter grows them, a tree of candidates (Engine._check_tree,
trees.py), with the same steps; either is shown as the main line it reads as (rounds.emit). A separate draft
model drafts round 1 beside the verifier's prefill (Engine.drafts_ahead). The engine knows token ids, not chat
messages (chat.py builds prompts), and touches each model only through kv.CachedForward, which also holds the
one rollback rule.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from specdec_core import defaults
from specdec_core.config import TREE_AUTO, GenerationConfig
from specdec_core.drafting.drafters import Draft, Drafter, DraftTarget
from specdec_core.drafting.planner import CheckedRound, DraftPlanner, DraftPolicy, Plan
from specdec_core.drafting.trees import DraftTree, TreeRequest
from specdec_core.engine.rounds import (
    Controls,
    Drafted,
    DraftingAhead,
    MainLine,
    Reply,
    RoundResult,
    Timing,
    TokenTexts,
    adapted_gamma,
    emit,
    tree_verdicts,
)
from specdec_core.errors import ConfigError, PromptTooLongError
from specdec_core.events import DraftStop, Event, Finished, Prefilled, StopReason
from specdec_core.stats import StatsAccumulator
from specdec_core.text.textstream import TextStream
from specdec_core.verification.kv import CachedForward, supports_trees
from specdec_core.verification.sampling import (
    TreeAcceptance,
    accept_drafts,
    accept_tree,
    processed_probs,
    seen_tokens,
    shown_probs,
)

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel


def _synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so that timings belong to the step that caused them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class Engine:
    """A verifier, an optional drafter, the KV caches they keep between replies, and the planner that sizes each
    round's draft (drafting/planner.py: its policy is set in its constructor)."""

    def __init__(self, verifier: LoadedModel, drafter: Drafter | None = None, planner: DraftPlanner | None = None):
        self.verifier = verifier
        self.verifier_forward = CachedForward(verifier.model, verifier.device)
        self.generator = torch.Generator(device=verifier.device)
        self.planner = planner or DraftPlanner()
        self.token_text = TokenTexts(verifier.tokenizer)
        self.drafter: Drafter | None = None
        self.set_drafter(drafter)

    def set_drafter(self, drafter: Drafter | None) -> None:
        self.drafter = drafter
        self.grows_trees = drafter is not None and drafter.grows_trees and supports_trees(self.verifier.model)
        self.planner.meet(drafter, self.grows_trees)
        # The verifier samples over its own whole vocabulary: only output rows past its tokenizer (padding)
        # are cut. A drafter proposes from the ids it knows and gives the others zero mass (base.in_verifier_ids),
        # so a draft with a smaller vocabulary never stops the verifier from producing any of its tokens.
        self.vocab_size = self.verifier.producible_ids
        if drafter is not None:
            drafter.attach(self._target())  # a draft head reads the verifier's hidden states

    def _target(self, config: GenerationConfig | None = None) -> DraftTarget:
        """What this engine's drafter drafts for: this verifier, its ids and ends of sequence, and `config` (none:
        the defaults, until a reply attaches its own)."""
        return DraftTarget(self.verifier_forward, self.vocab_size, self.verifier.eos_token_ids,
                           config or GenerationConfig())

    def forget_verify_costs(self) -> None:
        """Drop the verify timings measured so far (DraftPlanner.forget_verify_costs)."""
        self.planner.forget_verify_costs()

    def reset_caches(self) -> None:
        self.verifier_forward.reset()
        if self.drafter is not None:
            self.drafter.reset_cache()  # drafters with a cache of their own

    def generate(self, prompt_ids: Sequence[int], config: GenerationConfig, controls: Controls | None = None,
                 policy: DraftPolicy | None = None) -> Iterator[Event]:
        """Yield the events of one reply to `prompt_ids` (see events.py for their order). `policy`: this reply's,
        instead of the planner's (the app's calibration keeps no costs)."""
        config.validate()
        prompt = list(prompt_ids)
        if not prompt:
            raise ConfigError("the prompt is empty: there is nothing to continue")
        context = self.verifier.context_length
        if len(prompt) >= context:
            raise PromptTooLongError(
                f"the prompt is {len(prompt)} tokens long but the verifier's context holds {context}")
        # The drafter drafts by this reply's rules, and a drafter shared with another engine (the app's
        # side-by-side lanes) reads this one's verifier now.
        if self.drafter is not None:
            self.drafter.attach(self._target(config))
        self.planner.start_reply(self.verifier)
        return self._generate(prompt, config, controls or Controls(), policy or self.planner.policy)

    def _generate(self, prompt: list[int], config: GenerationConfig, controls: Controls, policy: DraftPolicy
                  ) -> Iterator[Event]:
        budget = min(config.max_new_tokens, self.verifier.context_length - len(prompt))
        self.generator.manual_seed(config.seed)
        if self.drafter is not None:
            self.drafter.reset(config.seed)
        reply = Reply(ids=list(prompt), stream=TextStream(self.verifier.tokenizer, prompt),
                       stats=StatsAccumulator(prompt_tokens=len(prompt)), gamma=config.gamma, policy=policy)
        # A draft that needs nothing from the verifier reads the prompt, and drafts round 1, on another thread
        # during the verifier's prefill where a core is free for it (drafts_ahead); round 1 waits for the rest.
        speculating = self._speculating(config, controls)
        if speculating and self.planner.may_draft_ahead(self.drafter, self.verifier.device, policy):
            reply.ahead = DraftingAhead(lambda: self._read_and_draft(reply, budget, config))
        try:
            prefilled = self._prefill(reply, read_draft=speculating)
            yield prefilled
            if isinstance(prefilled, Prefilled):
                yield from self._rounds(reply, budget, config, controls)
        finally:
            reply.end_ahead()  # a reply closed before its first round: the draft's thread ends first

    def _prefill(self, reply: Reply, read_draft: bool) -> Prefilled | Finished:
        """1. Prefill: the verifier reads the whole prompt, and so does the draft (`read_draft`): after it, or
        meanwhile on the thread drafting ahead. Each round's verifier input is the last committed token + the
        drafts; in the first round the last committed token is the prompt's, whose distribution the prefill
        already computed (kv.py keeps it), so only the drafts are fed. A failure comes back as the reply's
        Finished."""
        prompt, stats = list(reply.ids), reply.stats
        start = time.perf_counter()
        try:
            self.verifier_forward.prefill(prompt)
            reused = len(prompt) - self.verifier_forward.last_run
            if read_draft and reply.ahead is None:
                assert self.drafter is not None
                self.drafter.prefill(prompt)
            _synchronize(self.verifier.device)
        except (RuntimeError, torch.OutOfMemoryError) as error:
            reply.end_ahead()  # before _failed resets the caches it is using
            return self._failed(error, "", [], stats)
        stats.prefill_s = time.perf_counter() - start
        return Prefilled(prompt_tokens=len(prompt), reused_tokens=reused, prefill_s=stats.prefill_s)

    def _rounds(self, reply: Reply, budget: int, config: GenerationConfig, controls: Controls) -> Iterator[Event]:
        """Rounds until the reply ends (its budget, an end of sequence, a stop string, a cancel), then Finished."""
        stats, eos = reply.stats, self.verifier.eos_token_ids
        while True:
            if controls.cancelled:
                stop = StopReason.CANCELLED
                break
            remaining = budget - len(reply.new_ids)
            if remaining <= 0:
                stop = StopReason.MAX_TOKENS if budget == config.max_new_tokens else StopReason.CONTEXT
                break
            try:
                result = self._round(reply, remaining, config, controls)
            except (RuntimeError, torch.OutOfMemoryError) as error:
                yield self._failed(error, reply.text, reply.new_ids, stats)
                return
            reply.commit(result)
            stats.plain_step_s = self.planner.plain_step_s  # for the predicted speedup (stats.py)
            if config.adaptive and result.verified.drafted:
                reply.gamma = adapted_gamma(reply.gamma, result.verified, config.gamma_max)
            yield from result.events()
            if result.committed and result.committed[-1] in eos:
                stop = StopReason.EOS
                break
            hit = next((s for s in config.stop_strings if s and s in reply.text), None)
            if hit is not None:
                reply.text = reply.text[:reply.text.index(hit)]
                stop = StopReason.STOP_STRING
                break
        reply.end_ahead()  # stopped before round 1 (a cancel): the draft's thread ends before the reply does
        self.planner.finish_reply(self.verifier, reply.policy)
        text = reply.text if stop is StopReason.STOP_STRING else self.verifier.tokenizer.decode(
            reply.new_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        yield Finished(stop_reason=stop, text=text, token_ids=tuple(reply.new_ids), stats=stats.snapshot())

    def _speculating(self, config: GenerationConfig, controls: Controls) -> bool:
        wanted = config.speculate if controls.speculate is None else controls.speculate
        return wanted and self.drafter is not None

    def drafts_ahead(self) -> bool:
        """Whether a reply's draft reads the prompt, and drafts round 1, during the verifier's prefill
        (DraftPlanner.may_draft_ahead)."""
        return self.planner.may_draft_ahead(self.drafter, self.verifier.device)

    def _read_and_draft(self, reply: Reply, remaining: int, config: GenerationConfig) -> Drafted:
        """On the draft-ahead thread: the draft reads the prompt, then drafts round 1 as the round would."""
        assert self.drafter is not None
        self.drafter.prefill(reply.ids)
        return self._draft_round(reply, remaining, config, speculating=True, timed=False)

    def _round(self, reply: Reply, remaining: int, config: GenerationConfig, controls: Controls) -> RoundResult:
        """One verifier call: draft (_draft_round: a tree when the drafter grows trees and the configuration asks
        for them, else a chain), then check what was drafted (_check_tree, _check_chain). Round 1 may take its
        drafting from the thread that drafted it during the prefill; it waits for what is left of it."""
        round_start = time.perf_counter()
        speculating = self._speculating(config, controls)
        drafted = reply.take_ahead()
        if drafted is not None:  # kept unless speculation was switched off meanwhile (then its drafting has still
            # counted for the cost model's bookkeeping, and drawn from the draft's generator: as a round would have)
            drafted = dataclasses.replace(drafted, waited_s=time.perf_counter() - round_start) if speculating else \
                self._draft_round(reply, remaining, config, speculating=False)
        else:
            drafted = self._draft_round(reply, remaining, config, speculating)
        if isinstance(drafted.draft, DraftTree):
            return self._check_tree(reply, drafted, config, round_start)
        return self._check_chain(reply, drafted, config, round_start)

    def _draft_round(self, reply: Reply, remaining: int, config: GenerationConfig, speculating: bool,
                     timed: bool = True) -> Drafted:
        """2. Draft what the planner asks for: a tree best first, cut to the nodes that pay here; or a chain of
        up to γ tokens (greedy `auto`: as many as pay here), leaving room in the budget for the correction or
        bonus token. `timed` False: drafted ahead, beside the prefill, its time is not the draft's cost."""
        if not speculating:
            return Drafted(Draft.empty(DraftStop.OFF, self.vocab_size), speculating=False)
        if remaining <= 1:  # the budget leaves room for the verifier's own token only
            return Drafted(Draft.empty(DraftStop.MAX_TOKENS, self.vocab_size))
        tree = self.grows_trees and self.tree_nodes(config) > 0
        plan = self.planner.plan(config, reply.gamma, first_round=not reply.round_index, tree=tree)
        if plan.stop is DraftStop.COST:
            self._catch_up_beside(reply)
            if (copied := self._priced_copy(reply, remaining)) is not None:
                return Drafted(copied, limit=len(copied.token_ids), copied=True)
        if plan.stop is None or plan.length:
            reply.caught_up()  # the model drafts: its cache is the drafting's again
        if tree:
            return Drafted(self._draft_tree(reply, remaining, config, plan, timed))
        draft = self._draft(reply.ids, plan.length, remaining - 1, plan.sized) if plan.length else \
            Draft.empty(plan.stop or DraftStop.COST, self.vocab_size)
        return Drafted(draft, limit=plan.length)

    def _catch_up_beside(self, reply: Reply) -> None:
        """A draft priced out falls behind: its next probe must first read every token it sat out, which for the
        1.5B's 0.5B draft cost about 5 plain steps every 128. From a few rounds before the probe is due
        (DraftPlanner.catch_up_due) the draft reads them on a thread of its own while the verifier steps on, where
        a core is free for it (may_draft_ahead), and then each round's new tokens as they come, so the probe finds
        it caught up but for the last round's."""
        if reply.catching_up is not None and not reply.catching_up.done():
            return
        if not self.planner.catch_up_due(reply.gamma) \
                or not self.planner.may_draft_ahead(self.drafter, self.verifier.device, reply.policy):
            return
        reply.caught_up()  # the last one is done: collect it (and its error, if any)
        assert self.drafter is not None
        drafter, sat_out = self.drafter, list(reply.ids)
        reply.catching_up = DraftingAhead(lambda: drafter.prefill(sat_out))

    def _priced_copy(self, reply: Reply, remaining: int) -> Draft | None:
        """Where the model's drafting is priced out: the drafter's free copy (Drafter.copy), cut to the tokens
        worth their rows (DraftPlanner.copy_length); None where there is none, or none pays."""
        assert self.drafter is not None
        copied = self.drafter.copy(reply.ids, min(reply.gamma, remaining - 1))
        length = 0 if copied is None else self.planner.copy_length(copied, reply.gamma)
        if copied is None or not length:
            return None
        if length == len(copied.token_ids):
            return copied
        return Draft(copied.token_ids[:length], copied.draft_probs[:length], copied.display_probs[:length],
                     DraftStop.COST, copied.draft_s, copied=copied.copied)

    def _check_chain(self, reply: Reply, drafted: Drafted, config: GenerationConfig, round_start: float
                     ) -> RoundResult:
        """The rest of a round over a chain: verify, accept, roll back (implicit, see step 5), emit."""
        draft = drafted.draft
        assert isinstance(draft, Draft)
        # 3. Verify: the verifier's distribution at each drafted position plus one more (the bonus position).
        verify_start = time.perf_counter()
        logits, target_probs = self._verify(reply.ids, draft, config)
        verify_s, rows = time.perf_counter() - verify_start, self.verifier_forward.last_run
        # 4. Accept: a prefix of the drafts, then the verifier's correction or bonus token.
        line = self._accept(draft, target_probs, drafted.limit)
        # 5. Roll back happens lazily: the next logits_for() call cuts both caches back to the longest
        #    prefix that matches the committed sequence (kv.py), dropping the rejected drafts' positions.
        if drafted.speculating and not drafted.copied:
            assert self.drafter is not None
            self.drafter.observe(len(draft.token_ids), line.n_accepted)
        self.planner.learn(CheckedRound(config, rows, verify_s, draft if drafted.speculating else None,
                                        line.n_accepted, timed=drafted.waited_s is None,  # None: not ahead
                                        copied=drafted.copied))
        # 6. Emit the round's events (the reply's tally counts the round from them: Reply.commit).
        timing = self._timing(round_start, drafted, verify_s, rows)
        return emit(reply, line, shown_probs(logits, config, target_probs), timing, config, self.token_text)

    def _check_tree(self, reply: Reply, drafted: Drafted, config: GenerationConfig, round_start: float
                    ) -> RoundResult:
        """The rest of a round over a tree of candidates: the steps of a chain's (_check_chain)."""
        tree = drafted.draft
        assert isinstance(tree, DraftTree)
        # 3. Verify every node in one forward pass, each seeing only its own ancestors (tree attention).
        verify_start = time.perf_counter()
        logits, target_probs = self._verify_tree(reply.ids, tree, config)
        verify_s, rows = time.perf_counter() - verify_start, self.verifier_forward.last_run
        # 4. Accept the longest path the verifier agrees with, then its correction or bonus token.
        acceptance, line = self._accept_tree(tree, target_probs, reply.gamma)
        # 5. Roll back: the verifier's cache keeps the accepted path's rows and drops every other node.
        if len(tree):
            self.verifier_forward.keep_path(acceptance.path)
        self.planner.learn(CheckedRound(config, rows, verify_s, tree, len(acceptance.path), tuple(acceptance.path),
                                        main_line=len(line.token_ids)))
        assert self.drafter is not None
        self.drafter.observe(len(tree), len(acceptance.path))
        # 6. Emit the main line as a chain's round, with every node of the tree and its verdict.
        timing = self._timing(round_start, drafted, verify_s, rows)
        shown = shown_probs(logits, config, target_probs)
        return emit(reply, line, shown, timing, config, self.token_text,
                    tree_verdicts(tree, acceptance, shown, self.token_text))

    @staticmethod
    def _timing(round_start: float, drafted: Drafted, verify_s: float, rows: int) -> Timing:
        """The round's time split: drafting, verifying, and the rest so far (sampling, bookkeeping)."""
        draft_s = drafted.round_draft_s
        return Timing(draft_s, verify_s, max(0.0, time.perf_counter() - round_start - draft_s - verify_s), rows,
                       drafted.hidden_draft_s)

    def _committed(self, accepted: tuple[int, ...], next_token: int) -> tuple[int, ...]:
        """The tokens a round adds: the accepted drafts, then the verifier's correction or bonus token
        (nothing follows an accepted end of sequence)."""
        if accepted and accepted[-1] in self.verifier.eos_token_ids:
            return accepted
        return (*accepted, next_token)

    def tree_nodes(self, config: GenerationConfig) -> int:
        """The most tree nodes a round may check (0: a chain); for `auto` see defaults.tree_nodes_for."""
        if config.tree_nodes == TREE_AUTO:
            return defaults.tree_nodes_for(greedy=config.greedy)
        return config.tree_nodes

    def _draft(self, ids: list[int], gamma: int, room: int, sized: bool = False) -> Draft:
        """Up to `gamma` tokens, and at most `room` (what the reply's budget leaves besides the verifier's token).
        `sized`: the cost model set `gamma` below the round's γ."""
        assert self.drafter is not None
        draft = self.drafter.propose(ids, min(gamma, room))
        if draft.stop is DraftStop.GAMMA and room < gamma:  # the budget, not γ, limited the round
            return dataclasses.replace(draft, stop=DraftStop.MAX_TOKENS)
        if draft.stop is DraftStop.GAMMA and sized:  # the cost model, not γ, limited the round
            return dataclasses.replace(draft, stop=DraftStop.COST)
        return draft

    def _draft_tree(self, reply: Reply, remaining: int, config: GenerationConfig, plan: Plan, timed: bool = True
                    ) -> DraftTree:
        """A tree of at most tree_nodes(config) nodes, γ deep and within the reply's budget, grown as the
        planner's `plan` says and cut to the nodes that pay here (DraftPlanner.cut); or none, and why."""
        if plan.stop is not None:
            return DraftTree.empty(plan.stop)
        assert self.drafter is not None
        depth = min(reply.gamma, remaining - 1)
        nodes = min(self.tree_nodes(config), plan.nodes or self.tree_nodes(config))
        tree = self.drafter.propose_tree(reply.ids, TreeRequest(nodes, depth, worth=plan.worth))
        return self.planner.cut(tree, plan, depth, config, timed)

    def _verify(self, ids: list[int], draft: Draft, config: GenerationConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass over the last committed token and the k drafts: logits and processed target_probs,
        both [k+1, V] over the verifier's vocabulary."""
        k = len(draft.token_ids)
        logits = self.verifier_forward.logits_for(ids + list(draft.token_ids), n_last=k + 1)[:, :self.vocab_size]
        seen = seen_tokens(config, ids, [draft.token_ids[:j] for j in range(k + 1)], self.vocab_size, logits.device)
        target_probs = processed_probs(logits, config, seen)
        _synchronize(self.verifier.device)
        return logits, target_probs

    def _verify_tree(self, ids: list[int], tree: DraftTree, config: GenerationConfig
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass over the last committed token and the n nodes, each node seeing the committed
        tokens and its own ancestors: logits and processed target_probs, both [n+1, V] (row i+1: after node i)."""
        logits = self.verifier_forward.logits_for_tree(ids, tree.token_ids, tree.parents)[:, :self.vocab_size]
        seen = None
        if config.repetition_penalty != 1.0:  # each row's history: the committed tokens and its node's path
            paths = [[tree.token_ids[n] for n in tree.path_to(node)] for node in range(len(tree))]
            seen = seen_tokens(config, ids, [[], *paths], self.vocab_size, logits.device)
        target_probs = processed_probs(logits, config, seen)
        _synchronize(self.verifier.device)
        return logits, target_probs

    def _accept(self, draft: Draft, target_probs: torch.Tensor, gamma: int) -> MainLine:
        """The acceptance rule's verdict on a chain (sampling.accept_drafts)."""
        drafted = torch.tensor(draft.token_ids, dtype=torch.long, device=target_probs.device)
        acceptance = accept_drafts(drafted, draft.draft_probs.to(target_probs.device), target_probs, self.generator)
        n = acceptance.n_accepted
        return MainLine(draft.token_ids, draft.display_probs, acceptance.accept_probs, n,
                         self._committed(draft.token_ids[:n], acceptance.next_token),
                         tuple(range(len(draft.token_ids) + 1)), draft.stop, gamma, draft.sources,
                         (draft.copied,) * len(draft.token_ids) if draft.copied else ())

    def _accept_tree(self, tree: DraftTree, target_probs: torch.Tensor, gamma: int
                     ) -> tuple[TreeAcceptance, MainLine]:
        """The acceptance rule's verdict on a tree (sampling.accept_tree), and the main line it reads as:
        the accepted path, then the draft's best guess below it (nodes never checked: accept_prob 0)."""
        acceptance = accept_tree(tree.token_ids, tree.parents, target_probs, self.generator)
        line = tree.main_line(acceptance.path)
        committed = self._committed(tuple(tree.token_ids[node] for node in acceptance.path), acceptance.next_token)
        return acceptance, MainLine(
            tuple(tree.token_ids[i] for i in line), tuple(tree.display_probs[i] for i in line),
            tuple(acceptance.accept_probs[i] or 0.0 for i in line), len(acceptance.path), committed,
            (0, *(node + 1 for node in line)), tree.stop, gamma, tuple(tree.source(node) for node in line),
            tuple(tree.is_copy(node) for node in line))

    def _failed(self, error: BaseException, text: str, new_ids: list[int], stats: StatsAccumulator) -> Finished:
        # The caches may hold a half-written step: start clean next time.
        self.reset_caches()
        if isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower():
            message = ("the device ran out of memory; try a smaller model, dtype float16/bfloat16, "
                       "fewer max new tokens, or device cpu")
        else:
            message = f"generation failed: {error}"
        return Finished(stop_reason=StopReason.ERROR, text=text, token_ids=tuple(new_ids),
                        stats=stats.snapshot(), error=message)
