"""The speculative decoding loop: prefill, then rounds of draft -> verify -> accept -> roll back -> emit.

Generation is a generator of typed events (events.py); the CLI, the benchmarks and the app consume it.
The engine knows token ids, not chat messages (chat.py builds prompts), and touches each model only
through kv.CachedForward, which also holds the one rollback rule.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from specdec_core import defaults
from specdec_core.config import TREE_AUTO, GenerationConfig
from specdec_core.cost import PositionRecord, TreeSizer, VerifyCost
from specdec_core.drafters import Draft, Drafter, DraftTree, attach_drafter, grows_trees
from specdec_core.errors import ConfigError, PromptTooLongError
from specdec_core.events import (
    Alternative,
    DraftedTokenVerdict,
    DraftStop,
    Event,
    Finished,
    Prefilled,
    RoundDrafted,
    RoundVerified,
    StopReason,
    TokenCommitted,
    TokenRejected,
    TokenState,
    TreeNodeVerdict,
)
from specdec_core.kv import CachedForward, supports_trees
from specdec_core.sampling import (
    Acceptance,
    TreeAcceptance,
    accept_drafts,
    accept_tree,
    processed_probs,
    seen_tokens,
)
from specdec_core.stats import StatsAccumulator
from specdec_core.textstream import TextStream

if TYPE_CHECKING:
    from specdec_core.models import LoadedModel


class Controls:
    """What another thread may change during a generation: cancel it, or switch speculation on or off
    from the next round. Plain attribute writes are atomic in CPython; the flag is a threading.Event."""

    def __init__(self, speculate: bool | None = None):
        self._cancelled = threading.Event()
        self.speculate: bool | None = speculate  # None: follow GenerationConfig.speculate

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


def _synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so that timings belong to the step that caused them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@dataclass(frozen=True)
class RoundResult:
    """What one round produced; the loop reads it, consumers get its events."""

    drafted: RoundDrafted | None  # None when the round did not speculate
    verified: RoundVerified
    tokens: tuple[TokenCommitted | TokenRejected, ...]  # in the order a viewer shows them
    committed: tuple[int, ...]  # token ids the round adds to the reply

    def events(self) -> Iterator[Event]:
        if self.drafted is not None:
            yield self.drafted
        yield self.verified
        yield from self.tokens


@dataclass
class _Reply:
    """The state of the reply being generated, which each round extends."""

    ids: list[int]  # prompt + committed tokens
    stream: TextStream
    stats: StatsAccumulator
    gamma: int  # this round's draft length limit (adaptive drafting changes it)
    new_ids: list[int] = field(default_factory=list)
    text: str = ""
    round_index: int = 0

    def commit(self, result: RoundResult) -> None:
        self.ids.extend(result.committed)
        self.new_ids.extend(result.committed)
        self.text += "".join(t.text for t in result.tokens if isinstance(t, TokenCommitted))
        self.round_index += 1


@dataclass(frozen=True)
class _Timing:
    draft_s: float
    verify_s: float
    overhead_s: float
    rows: int  # positions the verifier's pass fed


def adapted_gamma(gamma: int, verified: RoundVerified, gamma_max: int) -> int:
    """transformers' heuristic: +2 after a fully accepted round, -1 after a rejection."""
    if verified.n_accepted == len(verified.drafted):
        return min(gamma + 2, gamma_max)
    return max(1, gamma - 1)


def _ends_on_eos(draft: Draft, n_accepted: int, eos_token_ids: frozenset[int]) -> bool:
    return n_accepted == len(draft.token_ids) > 0 and draft.token_ids[-1] in eos_token_ids


def _mainline(tree: DraftTree, path: tuple[int, ...]) -> list[int]:
    """The accepted path, then the draft's best guess below it (each node's first child, as drafted)."""
    line = list(path)
    while True:
        parent = line[-1] if line else -1
        child = next((node for node, p in enumerate(tree.parents) if p == parent), None)
        if child is None:
            return line
        line.append(child)


class Engine:
    """A verifier, an optional drafter, and the KV caches they keep between replies."""

    def __init__(self, verifier: LoadedModel, drafter: Drafter | None = None):
        self.verifier = verifier
        self.verifier_forward = CachedForward(verifier.model, verifier.device)
        self.generator = torch.Generator(device=verifier.device)
        self._token_texts: dict[int, str] = {}
        self.sizer = TreeSizer()  # measured verify cost on this machine, and the tree size that pays
        self.chain_record = PositionRecord()  # how often each chain position was accepted lately
        self.drafter: Drafter | None = None
        self.set_drafter(drafter)

    def set_drafter(self, drafter: Drafter | None) -> None:
        self.drafter = drafter
        # The verifier samples over its own whole vocabulary: only output rows past its tokenizer (padding)
        # are cut. A drafter proposes from the ids it knows and gives the others zero mass (drafters.py),
        # so a draft with a smaller vocabulary never stops the verifier from producing any of its tokens.
        self.vocab_size = self.verifier.producible_ids
        attach_drafter(drafter, self.verifier_forward)  # a draft head reads the verifier's hidden states
        self.grows_trees = grows_trees(drafter) and supports_trees(self.verifier.model)

    def forget_verify_costs(self) -> None:
        """Drop the verify timings measured so far: they were taken under other conditions than the replies
        to come (the app's calibration runs while its window is idle; replies run while it repaints)."""
        self.sizer.cost = VerifyCost()

    def reset_caches(self) -> None:
        self.verifier_forward.reset()
        reset = getattr(self.drafter, "reset_cache", None)  # drafters with a cache of their own
        if reset is not None:
            reset()

    def generate(self, prompt_ids: Sequence[int], config: GenerationConfig,
                 controls: Controls | None = None) -> Iterator[Event]:
        """Yield the events of one reply to `prompt_ids` (see events.py for their order)."""
        config.validate()
        prompt = list(prompt_ids)
        if not prompt:
            raise ConfigError("the prompt is empty: there is nothing to continue")
        context = self.verifier.context_length
        if len(prompt) >= context:
            raise PromptTooLongError(
                f"the prompt is {len(prompt)} tokens long but the verifier's context holds {context}")
        # A drafter shared with another engine (the app's side-by-side lanes) reads this one's verifier now.
        attach_drafter(self.drafter, self.verifier_forward)
        return self._generate(prompt, config, controls or Controls())

    def _generate(self, prompt: list[int], config: GenerationConfig, controls: Controls) -> Iterator[Event]:
        tokenizer = self.verifier.tokenizer
        eos = self.verifier.eos_token_ids
        budget = min(config.max_new_tokens, self.verifier.context_length - len(prompt))
        stats = StatsAccumulator(prompt_tokens=len(prompt))
        self.generator.manual_seed(config.seed)
        if self.drafter is not None:
            self.drafter.reset(config.seed)

        # 1. Prefill: both models read the whole prompt. Each round's verifier input is the last committed
        #    token + the drafts; in the first round the last committed token is the prompt's, whose
        #    distribution the prefill already computed (kv.py keeps it), so only the drafts are fed.
        start = time.perf_counter()
        try:
            self.verifier_forward.logits_for(prompt)
            reused = len(prompt) - self.verifier_forward.last_run
            if self.drafter is not None and self._speculating(config, controls):
                self.drafter.prefill(prompt)
            _synchronize(self.verifier.device)
        except (RuntimeError, torch.OutOfMemoryError) as error:
            yield self._failed(error, "", [], stats)
            return
        stats.prefill_s = time.perf_counter() - start
        yield Prefilled(prompt_tokens=len(prompt), reused_tokens=reused, prefill_s=stats.prefill_s)

        reply = _Reply(ids=list(prompt), stream=TextStream(tokenizer, prompt), stats=stats, gamma=config.gamma)
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
            stats.plain_step_s = self.sizer.cost.estimate(1) or 0.0  # for the predicted speedup (stats.py)
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
        text = reply.text if stop is StopReason.STOP_STRING else tokenizer.decode(
            reply.new_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        yield Finished(stop_reason=stop, text=text, token_ids=tuple(reply.new_ids), stats=stats.snapshot())

    def _speculating(self, config: GenerationConfig, controls: Controls) -> bool:
        wanted = config.speculate if controls.speculate is None else controls.speculate
        return wanted and self.drafter is not None

    def _round(self, reply: _Reply, remaining: int, config: GenerationConfig, controls: Controls) -> RoundResult:
        """One verifier call: draft, verify, accept (rollback is implicit, see step 5), emit."""
        round_start = time.perf_counter()
        speculating = self._speculating(config, controls)
        if speculating and self.grows_trees and self.tree_nodes(config):
            return self._tree_round(reply, remaining, config, round_start)
        # 2. Draft: up to gamma tokens (greedy `auto`: as many as pay here), leaving room in the budget for the
        #    correction or bonus token.
        length, why = self._chain_length(reply, config) if speculating else (0, DraftStop.OFF)
        draft = self._draft(reply.ids, length, remaining - 1, config, sized=length < reply.gamma) if length else \
            Draft((), torch.empty(0, self.vocab_size), (), why or DraftStop.COST, 0.0)
        # 3. Verify: the verifier's distribution at each drafted position plus one more (the bonus position).
        verify_start = time.perf_counter()
        logits, target_probs = self._verify(reply.ids, draft, config)
        verify_s = time.perf_counter() - verify_start
        verified_rows = self.verifier_forward.last_run
        self.sizer.cost.observe(verified_rows, verify_s)
        # 4. Accept: a prefix of the drafts, then the verifier's correction or bonus token.
        acceptance, committed = self._accept(draft, target_probs)
        # 5. Roll back happens lazily: the next logits_for() call cuts both caches back to the longest
        #    prefix that matches the committed sequence (kv.py), dropping the rejected drafts' positions.
        if speculating:
            assert self.drafter is not None
            self.drafter.observe(len(draft.token_ids), acceptance.n_accepted)
            self._record_chain(draft, acceptance.n_accepted, config)
        overhead_s = max(0.0, time.perf_counter() - round_start - draft.draft_s - verify_s)
        reply.stats.add_round(drafted=len(draft.token_ids), accepted=acceptance.n_accepted,
                              emitted=len(committed), draft_s=draft.draft_s, verify_s=verify_s,
                              overhead_s=overhead_s)
        # 6. Emit the round's events.
        timing = _Timing(draft_s=draft.draft_s, verify_s=verify_s, overhead_s=overhead_s, rows=verified_rows)
        return self._emit(reply, draft, logits, target_probs, acceptance, committed, timing, config,
                          length if speculating else None)

    def _sizes_chains(self, config: GenerationConfig) -> bool:
        """Greedy `auto`: a chain drafts as many tokens as pay on this machine, up to γ (cost.TreeSizer.
        best_length, from the cost of checking k tokens measured here, the draft's time per token, and how
        often each position was accepted lately). An explicit --tree-nodes 0 keeps γ, and so does sampling:
        sizes that follow timings would decide which random draws a round makes, and a seed would no longer
        reproduce a reply."""
        return config.cost_aware and config.tree_nodes == TREE_AUTO and config.greedy

    def _chain_length(self, reply: _Reply, config: GenerationConfig) -> tuple[int, DraftStop | None]:
        """This round's draft length, and why it is 0 when it is (a plain step that times itself, or none pays)."""
        if not self._sizes_chains(config):
            return reply.gamma, None
        if reply.round_index and self.sizer.cost.stale(1):  # see cost.VerifyCost.stale
            return 0, DraftStop.PROBE
        length = self.sizer.best_length(self.chain_record.rates(), reply.gamma)
        return length, None if length else DraftStop.COST

    def _record_chain(self, draft: Draft, n_accepted: int, config: GenerationConfig) -> None:
        if not self._sizes_chains(config):
            return
        if draft.token_ids:
            self.chain_record.observe(len(draft.token_ids), n_accepted)
            self.sizer.observe_draft(len(draft.token_ids), draft.draft_s)
        elif draft.stop is DraftStop.COST:
            self.chain_record.age()  # priced out: drift back to the prior, and try again in a while

    def _tree_round(self, reply: _Reply, remaining: int, config: GenerationConfig, round_start: float
                    ) -> RoundResult:
        """One verifier call over a tree of candidates: the same steps as a chain's round."""
        # 2. Draft a tree best first, and keep as many of its nodes as pay on this machine (cost.py). Every
        #    size is weighed against a plain step: while that has fewer than a few recent timings
        #    (cost.VerifyCost.stale), the round is a plain step that times it. The first round feeds nothing
        #    for one (the prefill gave its distribution), so it never probes.
        if config.cost_aware and reply.round_index and self.sizer.cost.stale(1):
            tree = DraftTree((), (), (), (), DraftStop.PROBE, 0.0)
        else:
            tree = self._draft_tree(reply.ids, reply.gamma, remaining - 1, config)
        # 3. Verify every node in one forward pass, each seeing only its own ancestors (tree attention).
        verify_start = time.perf_counter()
        logits = self.verifier_forward.logits_for_tree(reply.ids, tree.token_ids, tree.parents)[:, :self.vocab_size]
        seen = None
        if config.repetition_penalty != 1.0:  # each row's history: the committed tokens and its node's path
            paths = [[tree.token_ids[n] for n in tree.path_to(node)] for node in range(len(tree))]
            seen = seen_tokens(config, reply.ids, [[], *paths], self.vocab_size, logits.device)
        target_probs = processed_probs(logits, config, seen)
        _synchronize(self.verifier.device)
        verify_s = time.perf_counter() - verify_start
        verified_rows = self.verifier_forward.last_run
        self.sizer.cost.observe(verified_rows, verify_s)
        # 4. Accept the longest path the verifier agrees with, then its correction or bonus token.
        acceptance = accept_tree(tree.token_ids, tree.parents, target_probs, self.generator)
        path_tokens = tuple(tree.token_ids[node] for node in acceptance.path)
        ends_on_eos = bool(path_tokens) and path_tokens[-1] in self.verifier.eos_token_ids
        committed = path_tokens if ends_on_eos else (*path_tokens, acceptance.next_token)
        # 5. Roll back: the verifier's cache keeps the accepted path's rows and drops every other node.
        if len(tree):
            self.verifier_forward.keep_path(acceptance.path)
        # Calibrate the draft's own values (a copy's rates are learned apart); a round that checked none of
        # them only ages the evidence.
        drafted = [node for node in range(len(tree)) if not tree.is_copy(node)] if tree.stop is DraftStop.TREE else []
        self.sizer.observe([tree.values[node] for node in drafted],
                           sum(not tree.is_copy(node) for node in acceptance.path) if drafted else 0)
        assert self.drafter is not None
        self.drafter.observe(len(tree), len(acceptance.path))
        mainline = _mainline(tree, acceptance.path)
        overhead_s = max(0.0, time.perf_counter() - round_start - tree.draft_s - verify_s)
        reply.stats.add_round(drafted=len(tree), accepted=len(acceptance.path), emitted=len(committed),
                              draft_s=tree.draft_s, verify_s=verify_s, overhead_s=overhead_s,
                              positions=len(mainline))
        # 6. Emit the main line (the accepted path and the draft's best guess below it) as a chain would be,
        #    and every node of the tree with the verdict.
        rows = [0] + [node + 1 for node in mainline]  # the distribution each main-line position was drawn at
        chain = Draft(tuple(tree.token_ids[i] for i in mainline), torch.empty(0), tuple(tree.display_probs[i]
                      for i in mainline), tree.stop, tree.draft_s)
        chain_acceptance = Acceptance(len(acceptance.path), acceptance.next_token,
                                      tuple(acceptance.accept_probs[i] or 0.0 for i in mainline), (), ())
        timing = _Timing(draft_s=tree.draft_s, verify_s=verify_s, overhead_s=overhead_s, rows=verified_rows)
        result = self._emit(reply, chain, logits[rows], target_probs[rows], chain_acceptance, committed, timing,
                            config, reply.gamma)
        nodes = self._tree_verdicts(tree, acceptance, logits, target_probs, config)
        return dataclasses.replace(result, verified=dataclasses.replace(result.verified, tree=nodes))

    def tree_nodes(self, config: GenerationConfig) -> int:
        """The most tree nodes a round may check (0: a chain); for `auto` see defaults.tree_nodes_for."""
        if config.tree_nodes == TREE_AUTO:
            return defaults.tree_nodes_for(greedy=config.greedy)
        return config.tree_nodes

    def _draft_tree(self, ids: list[int], gamma: int, room: int, config: GenerationConfig) -> DraftTree:
        assert self.drafter is not None
        worth = self.sizer.least_value if config.cost_aware else None
        tree = self.drafter.propose_tree(ids, self.tree_nodes(config), min(gamma, room), config,  # type: ignore[attr-defined]
                                         self.vocab_size, self.verifier.eos_token_ids, worth=worth)
        self.sizer.observe_draft(tree.expansions, tree.draft_s)
        if config.cost_aware and tree.stop is DraftStop.TREE:
            size = self.sizer.best_size(tree.values, tree.draft_s)  # the drafting is spent whatever is kept
            tree = tree.prefix(size) if size else dataclasses.replace(tree.prefix(0), stop=DraftStop.COST)
        return tree

    def _tree_verdicts(self, tree: DraftTree, acceptance: TreeAcceptance, logits: torch.Tensor,
                       target_probs: torch.Tensor, config: GenerationConfig) -> tuple[TreeNodeVerdict, ...]:
        shown = torch.softmax(logits.float(), -1) if config.greedy else target_probs
        on_path = set(acceptance.path)
        return tuple(
            TreeNodeVerdict(token_id=token, text=self._token_text(token), parent=parent,
                            draft_prob=tree.display_probs[node], target_prob=float(shown[parent + 1, token]),
                            accept_prob=acceptance.accept_probs[node], accepted=node in on_path)
            for node, (token, parent) in enumerate(zip(tree.token_ids, tree.parents)))

    def _draft(self, ids: list[int], gamma: int, room: int, config: GenerationConfig, sized: bool = False) -> Draft:
        """Up to `gamma` tokens, and at most `room` (what the reply's budget leaves besides the verifier's token).
        `sized`: the cost model set `gamma` below the round's γ."""
        assert self.drafter is not None
        draft = self.drafter.propose(ids, min(gamma, room), config, self.vocab_size, self.verifier.eos_token_ids)
        if draft.stop is DraftStop.GAMMA and room < gamma:  # the budget, not γ, limited the round
            return dataclasses.replace(draft, stop=DraftStop.MAX_TOKENS)
        if draft.stop is DraftStop.GAMMA and sized:  # the cost model, not γ, limited the round
            return dataclasses.replace(draft, stop=DraftStop.COST)
        return draft

    def _verify(self, ids: list[int], draft: Draft, config: GenerationConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass over the last committed token and the k drafts: logits and processed target_probs,
        both [k+1, V] over the verifier's vocabulary."""
        k = len(draft.token_ids)
        logits = self.verifier_forward.logits_for(ids + list(draft.token_ids), n_last=k + 1)[:, :self.vocab_size]
        seen = seen_tokens(config, ids, [draft.token_ids[:j] for j in range(k + 1)], self.vocab_size, logits.device)
        target_probs = processed_probs(logits, config, seen)
        _synchronize(self.verifier.device)
        return logits, target_probs

    def _accept(self, draft: Draft, target_probs: torch.Tensor) -> tuple[Acceptance, tuple[int, ...]]:
        """The acceptance rule's verdict, and the token ids the round commits."""
        drafted = torch.tensor(draft.token_ids, dtype=torch.long, device=target_probs.device)
        acceptance = accept_drafts(drafted, draft.draft_probs.to(target_probs.device), target_probs, self.generator)
        n = acceptance.n_accepted
        if _ends_on_eos(draft, n, self.verifier.eos_token_ids):
            return acceptance, draft.token_ids[:n]  # nothing follows an accepted end of sequence
        return acceptance, (*draft.token_ids[:n], acceptance.next_token)

    def _emit(self, reply: _Reply, draft: Draft, logits: torch.Tensor, target_probs: torch.Tensor,
              acceptance: Acceptance, committed: tuple[int, ...], timing: _Timing, config: GenerationConfig,
              gamma: int | None) -> RoundResult:
        """The round as events: the accepted drafts, the rejected ones where they were proposed, then the
        correction or bonus token. `gamma` is None when the round did not speculate."""
        k, n, index = len(draft.token_ids), acceptance.n_accepted, reply.round_index
        # People read the probabilities: when greedy the sampled distributions are one-hots, so show the
        # verifier's softmax instead; the acceptance probability stays the rule's own.
        shown = torch.softmax(logits.float(), -1) if config.greedy else target_probs
        alternatives = self._alternatives_by_row(shown, k + 1, config.top_alternatives)
        drafted = torch.tensor(draft.token_ids, dtype=torch.long, device=shown.device)
        shown_target = shown[torch.arange(k, device=shown.device), drafted].tolist() if k else []
        texts = [reply.stream.push(token) for token in draft.token_ids[:n]] + reply.stream.peek(draft.token_ids[n:])
        tokens: list[TokenCommitted | TokenRejected] = []
        for i, token in enumerate(draft.token_ids):
            common = dict(token_id=token, text=texts[i], round_index=index, position=i,
                          draft_prob=draft.display_probs[i], target_prob=shown_target[i],
                          accept_prob=acceptance.accept_probs[i], alternatives=alternatives[i],
                          draft_source=draft.sources[i] if i < len(draft.sources) else None)
            tokens.append(TokenCommitted(state=TokenState.ACCEPTED, **common) if i < n else TokenRejected(**common))
        emitted_state = TokenState.ACCEPTED
        if len(committed) > n:  # the verifier's own token: a correction, a bonus, or a plain decode step
            emitted_state = TokenState.PLAIN if k == 0 else (TokenState.BONUS if n == k else TokenState.CORRECTED)
            token = committed[-1]
            tokens.append(TokenCommitted(
                token_id=token, text=reply.stream.push(token), state=emitted_state, round_index=index, position=n,
                draft_prob=None, target_prob=float(shown[n, token]), accept_prob=None, alternatives=alternatives[n]))
        verdicts = tuple(
            DraftedTokenVerdict(token_id=token, text=texts[i], draft_prob=draft.display_probs[i],
                                target_prob=shown_target[i], accept_prob=acceptance.accept_probs[i], accepted=i < n)
            for i, token in enumerate(draft.token_ids))
        proposed = None if gamma is None else RoundDrafted(
            round_index=index, token_ids=draft.token_ids, texts=tuple(texts), draft_probs=draft.display_probs,
            stop=draft.stop, gamma=gamma, draft_s=draft.draft_s)
        verified = RoundVerified(
            round_index=index, drafted=verdicts, n_accepted=n, emitted_token_id=committed[-1],
            emitted_state=emitted_state, stop=draft.stop, gamma=gamma or 0, draft_s=timing.draft_s,
            verify_s=timing.verify_s, overhead_s=timing.overhead_s, rows=timing.rows)
        return RoundResult(drafted=proposed, verified=verified, tokens=tuple(tokens), committed=committed)

    def _alternatives_by_row(self, shown: torch.Tensor, rows: int, count: int) -> list[tuple[Alternative, ...]]:
        """The verifier's `count` most likely tokens at each of the first `rows` positions (for tooltips)."""
        if not count:
            return [()] * rows
        top = torch.topk(shown[:rows], min(count, shown.shape[-1]), dim=-1)
        return [self._alternatives(top, row) for row in range(rows)]

    def _alternatives(self, top, row: int) -> tuple[Alternative, ...]:
        return tuple(Alternative(token_id=t, text=self._token_text(t), prob=p)
                     for t, p in zip(top.indices[row].tolist(), top.values[row].tolist()))

    def _token_text(self, token_id: int) -> str:
        """One token decoded on its own (for tooltips), memoised: a few alternatives per position
        would otherwise cost a tokenizer call each, every round."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self.verifier.tokenizer.decode([token_id])
        return text

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
