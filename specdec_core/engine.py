"""The speculative decoding loop: prefill, then rounds of draft -> verify -> accept -> roll back -> emit.

A round drafts (Engine._draft_round), then checks a chain of drafted tokens (Engine._check_chain) or, when the
drafter grows them, a tree of candidates (Engine._check_tree, trees.py), with the same steps; either is shown as
the main line it reads as. A separate draft model drafts round 1 beside the verifier's prefill (drafts_ahead).
Generation is a generator of typed events (events.py); the CLI, the benchmarks and the app consume it.
The engine knows token ids, not chat messages (chat.py builds prompts), and touches each model only
through kv.CachedForward, which also holds the one rollback rule.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from specdec_core import defaults
from specdec_core.config import TREE_AUTO, GenerationConfig
from specdec_core.drafting.drafters import Draft, Drafter
from specdec_core.drafting.trees import DraftTree
from specdec_core.errors import ConfigError, PromptTooLongError
from specdec_core.events import (
    Alternative,
    DraftStop,
    Event,
    Finished,
    Prefilled,
    RoundVerified,
    StopReason,
    TokenCommitted,
    TokenRejected,
    TokenState,
    Verdict,
    drafted_token,
)
from specdec_core.loading import cost_memory
from specdec_core.stats import StatsAccumulator
from specdec_core.text.textstream import TextStream
from specdec_core.verification.cost import PositionRecord, TreeSizer, VerifyCost
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

    verified: RoundVerified
    tokens: tuple[TokenCommitted | TokenRejected, ...]  # in the order a viewer shows them
    committed: tuple[int, ...]  # token ids the round adds to the reply

    def events(self) -> Iterator[Event]:
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
class _MainLine:
    """A round's drafted tokens in reading order, judged: a chain, or a tree's main line (the accepted path,
    then the draft's best guess below it). The round shows it, so a chain is a tree of width one."""

    token_ids: tuple[int, ...]
    draft_probs: tuple[float | None, ...]  # as people read them (None: proposed by string match)
    accept_probs: tuple[float, ...]  # the rule's probability of accepting each
    n_accepted: int
    committed: tuple[int, ...]  # the accepted tokens, then the verifier's own (none after an accepted end)
    rows: tuple[int, ...]  # the verifier pass's row at each token, and after the last (a chain: 0..k)
    stop: DraftStop  # why drafting stopped
    gamma: int  # the round's length limit (0: the round did not speculate)
    sources: tuple[str | None, ...] = ()  # a draft with another tokenizer: its own token(s) behind each

    def verdicts(self, texts: Sequence[str], shown: torch.Tensor) -> tuple[Verdict, ...]:
        """Each token with what it adds to the reply (`texts`) and the verifier's view of it (`shown`, the
        main line's rows as people read them)."""
        k = len(self.token_ids)
        drafted = torch.tensor(self.token_ids, dtype=torch.long, device=shown.device)
        targets = shown[torch.arange(k, device=shown.device), drafted].tolist() if k else []
        return tuple(Verdict(token_id=token, text=texts[i], parent=i - 1, draft_prob=self.draft_probs[i],
                             target_prob=targets[i], accept_prob=self.accept_probs[i], accepted=i < self.n_accepted,
                             draft_source=self.sources[i] if i < len(self.sources) else None)
                     for i, token in enumerate(self.token_ids))


@dataclass(frozen=True)
class _Timing:
    draft_s: float
    verify_s: float
    overhead_s: float
    rows: int  # positions the verifier's pass fed
    hidden_draft_s: float = 0.0  # drafting done ahead, during the prefill, that the round did not wait for


@dataclass(frozen=True)
class _Drafted:
    """A round's drafting, done: a tree, or a chain with its length limit (`limit`; 0: the round does not speculate)."""

    draft: Draft | DraftTree
    limit: int = 0
    speculating: bool = True
    waited_s: float | None = None  # drafted ahead, during the prefill: what the round still waited for it

    @property
    def round_draft_s(self) -> float:
        """The drafting time the round spent: all of it, or only the wait when it was drafted ahead."""
        return self.draft.draft_s if self.waited_s is None else self.waited_s

    @property
    def hidden_draft_s(self) -> float:
        """Drafting time spent ahead, during the prefill, that the round did not wait for."""
        return 0.0 if self.waited_s is None else max(0.0, self.draft.draft_s - self.waited_s)


class _Ahead:
    """Work started on a thread of its own while this one goes on; `result()` waits for it and re-raises its error."""

    def __init__(self, work: Callable[[], _Drafted]):
        self._result: _Drafted | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="specdec-draft-ahead", daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], _Drafted]) -> None:
        try:
            self._result = work()
        except BaseException as error:  # noqa: BLE001 - handed to the thread that waits for the result
            self._error = error

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> _Drafted:
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def adapted_gamma(gamma: int, verified: RoundVerified, gamma_max: int) -> int:
    """transformers' heuristic: +2 after a fully accepted round, -1 after a rejection."""
    if verified.n_accepted == len(verified.drafted):
        return min(gamma + 2, gamma_max)
    return max(1, gamma - 1)


class Engine:
    """A verifier, an optional drafter, and the KV caches they keep between replies."""

    def __init__(self, verifier: LoadedModel, drafter: Drafter | None = None):
        self.verifier = verifier
        self.verifier_forward = CachedForward(verifier.model, verifier.device)
        self.generator = torch.Generator(device=verifier.device)
        self._token_texts: dict[int, str] = {}
        self.sizer = TreeSizer()  # measured verify cost on this machine, and the tree size that pays
        self.chain_record = PositionRecord()  # how often each main-line position was accepted lately
        self.priced_out = 0  # rounds in a row that drafted nothing because no drafting could pay
        self.probe_left = 0  # rounds still to draft whatever the cost model says (_pays)
        self.exploring = False  # this round drafts for evidence, not because the cost model expects it to pay
        self.draft_behind = False  # the draft has not read the tokens of the rounds it sat out
        self.draft_ahead = True  # let a draft that runs on its own read the prompt during the prefill (drafts_ahead)
        self.remembers = True  # keep the verify costs measured for the next engine here (_remember_verify_costs)
        self.drafter: Drafter | None = None
        self._measured: Drafter | None = None  # the drafter whose costs and acceptance the sizer has learned
        self.set_drafter(drafter)

    def set_drafter(self, drafter: Drafter | None) -> None:
        self.drafter = drafter
        self.grows_trees = drafter is not None and drafter.grows_trees and supports_trees(self.verifier.model)
        if drafter is not None and drafter is not self._measured:  # another draft: learn its cost and worth afresh
            self.sizer.forget_draft()
            self.chain_record, self.priced_out, self._measured = PositionRecord(), 0, drafter
            self.probe_left = self.FIRST_TREES_CHECKED if self.grows_trees else 0
        # The verifier samples over its own whole vocabulary: only output rows past its tokenizer (padding)
        # are cut. A drafter proposes from the ids it knows and gives the others zero mass (drafters.py),
        # so a draft with a smaller vocabulary never stops the verifier from producing any of its tokens.
        self.vocab_size = self.verifier.producible_ids
        if drafter is not None:
            drafter.attach(self.verifier_forward)  # a draft head reads the verifier's hidden states

    def forget_verify_costs(self) -> None:
        """Drop the verify timings measured so far: they were taken under other conditions than the replies
        to come (the app's calibration runs while its window is idle; replies run while it repaints). The next
        reply starts from what this machine remembers (_recall_verify_costs)."""
        self.sizer.cost = VerifyCost()

    def _recall_verify_costs(self) -> None:
        """Before an engine's first timed pass: start from the verify costs the last engine over this verifier
        measured on this machine (loading/cost_memory.py), not from nothing."""
        if self.sizer.cost.passes == 0 and not self.sizer.cost.recalled:
            self.sizer.cost.recall(cost_memory.recalled(self.verifier))

    def _remember_verify_costs(self) -> None:
        """After a reply: keep the settled verify costs for the next engine over this verifier here."""
        if self.remembers and self.sizer.cost.passes:
            cost_memory.remember(self.verifier, self.sizer.cost.settled())

    def reset_caches(self) -> None:
        self.verifier_forward.reset()
        if self.drafter is not None:
            self.drafter.reset_cache()  # drafters with a cache of their own

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
        if self.drafter is not None:
            self.drafter.attach(self.verifier_forward)
        self._recall_verify_costs()
        return self._generate(prompt, config, controls or Controls())

    def _generate(self, prompt: list[int], config: GenerationConfig, controls: Controls) -> Iterator[Event]:
        budget = min(config.max_new_tokens, self.verifier.context_length - len(prompt))
        stats = StatsAccumulator(prompt_tokens=len(prompt))
        self.generator.manual_seed(config.seed)
        if self.drafter is not None:
            self.drafter.reset(config.seed)
        reply = _Reply(ids=list(prompt), stream=TextStream(self.verifier.tokenizer, prompt), stats=stats,
                       gamma=config.gamma)
        # A draft that needs nothing from the verifier reads the prompt, and drafts round 1, on another thread
        # during the verifier's prefill where a core is free for it (drafts_ahead); round 1 waits for the rest.
        speculating = self._speculating(config, controls)
        ahead = _Ahead(lambda: self._read_and_draft(reply, budget, config)) \
            if speculating and self.drafts_ahead() else None
        try:
            prefilled = self._prefill(prompt, stats, ahead, read_draft=speculating)
            yield prefilled
            if isinstance(prefilled, Prefilled):
                yield from self._rounds(reply, budget, config, controls, ahead)
        finally:
            if ahead is not None:  # a reply closed before its first round: the draft's thread ends first
                ahead.wait()

    def _prefill(self, prompt: list[int], stats: StatsAccumulator, ahead: _Ahead | None, read_draft: bool
                 ) -> Prefilled | Finished:
        """1. Prefill: the verifier reads the whole prompt, and so does the draft (`read_draft`): after it, or
        meanwhile on the thread of `ahead`. Each round's verifier input is the last committed token + the drafts;
        in the first round the last committed token is the prompt's, whose distribution the prefill already
        computed (kv.py keeps it), so only the drafts are fed. A failure comes back as the reply's Finished."""
        start = time.perf_counter()
        try:
            self.verifier_forward.logits_for(prompt)
            reused = len(prompt) - self.verifier_forward.last_run
            if read_draft and ahead is None:
                assert self.drafter is not None
                self.drafter.prefill(prompt)
            _synchronize(self.verifier.device)
        except (RuntimeError, torch.OutOfMemoryError) as error:
            if ahead is not None:
                ahead.wait()  # before _failed resets the caches it is using
            return self._failed(error, "", [], stats)
        stats.prefill_s = time.perf_counter() - start
        return Prefilled(prompt_tokens=len(prompt), reused_tokens=reused, prefill_s=stats.prefill_s)

    def _rounds(self, reply: _Reply, budget: int, config: GenerationConfig, controls: Controls,
                ahead: _Ahead | None) -> Iterator[Event]:
        """Rounds until the reply ends (its budget, an end of sequence, a stop string, a cancel), then Finished.
        `ahead`: round 1's drafting, under way on another thread."""
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
                result = self._round(reply, remaining, config, controls, ahead)
            except (RuntimeError, torch.OutOfMemoryError) as error:
                yield self._failed(error, reply.text, reply.new_ids, stats)
                return
            ahead = None
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
        if ahead is not None:  # stopped before round 1 (a cancel): the draft's thread ends before the reply does
            ahead.wait()
        self._remember_verify_costs()
        text = reply.text if stop is StopReason.STOP_STRING else self.verifier.tokenizer.decode(
            reply.new_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        yield Finished(stop_reason=stop, text=text, token_ids=tuple(reply.new_ids), stats=stats.snapshot())

    def _speculating(self, config: GenerationConfig, controls: Controls) -> bool:
        wanted = config.speculate if controls.speculate is None else controls.speculate
        return wanted and self.drafter is not None

    def drafts_ahead(self) -> bool:
        """Whether the draft reads the prompt, and drafts round 1, on a thread of its own during the verifier's
        prefill: when the drafter needs nothing from the verifier (a separate model, not a head reading its
        hidden states), the verifier runs on the CPU, torch runs each pass on one thread and a second CPU is free
        for the draft's (with more threads per pass, two passes at once could share cores that a count of logical
        CPUs does not show, SMT siblings, so it stays off). `draft_ahead` False turns it off.
        Measured on the real pair (2 CPUs, 1 thread each, docs/performance.md): a 61-67-token code prompt's
        verifier prefill 0.86-1.00 s, the draft's prefill and 4 tokens 0.26-0.35 s after it, or hidden within
        it on the second core (0.88-0.98 s for both)."""
        drafter = self.drafter
        if not self.draft_ahead or drafter is None or getattr(drafter, "reads_verifier", True):
            return False
        return self.verifier.device.type == "cpu" and torch.get_num_threads() == 1 and defaults.available_cpus() >= 2

    def _read_and_draft(self, reply: _Reply, remaining: int, config: GenerationConfig) -> _Drafted:
        """On the draft-ahead thread: the draft reads the prompt, then drafts round 1 as the round would."""
        assert self.drafter is not None
        self.drafter.prefill(reply.ids)
        return self._draft_round(reply, remaining, config, speculating=True, timed=False)

    def _round(self, reply: _Reply, remaining: int, config: GenerationConfig, controls: Controls,
               ahead: _Ahead | None = None) -> RoundResult:
        """One verifier call: draft (_draft_round: a tree when the drafter grows trees and the configuration asks
        for them, else a chain), then check what was drafted (_check_tree, _check_chain). `ahead`: this round's
        drafting, started on another thread during the prefill (_prefill); the round waits for what is left of it."""
        round_start = time.perf_counter()
        speculating = self._speculating(config, controls)
        if ahead is not None:  # kept unless speculation was switched off meanwhile (then its drafting has still
            # counted for the cost model's bookkeeping, and drawn from the draft's generator: as a round would have)
            drafted = ahead.result()
            drafted = dataclasses.replace(drafted, waited_s=time.perf_counter() - round_start) if speculating else \
                self._draft_round(reply, remaining, config, speculating=False)
        else:
            drafted = self._draft_round(reply, remaining, config, speculating)
        if isinstance(drafted.draft, DraftTree):
            return self._check_tree(reply, drafted, config, round_start)
        return self._check_chain(reply, drafted, config, round_start)

    def _draft_round(self, reply: _Reply, remaining: int, config: GenerationConfig, speculating: bool,
                     timed: bool = True) -> _Drafted:
        """2. Draft: a tree best first, cut to the nodes that pay here (cost.py); or a chain of up to gamma tokens
        (greedy `auto`: as many as pay here), leaving room in the budget for the correction or bonus token.
        `timed` False: drafted ahead, beside the prefill, its time is not the draft's cost (_observe_draft)."""
        if speculating and self.grows_trees and self.tree_nodes(config):
            return _Drafted(self._draft_tree(reply, remaining, config, timed))
        length, why = self._chain_length(reply, config) if speculating else (0, DraftStop.OFF)
        draft = self._draft(reply.ids, length, remaining - 1, config, sized=length < reply.gamma) if length else \
            Draft.empty(why or DraftStop.COST, self.vocab_size)
        return _Drafted(draft, limit=length if speculating else 0, speculating=speculating)

    def _check_chain(self, reply: _Reply, drafted: _Drafted, config: GenerationConfig, round_start: float
                     ) -> RoundResult:
        """The rest of a round over a chain: verify, accept, roll back (implicit, see step 5), emit."""
        draft = drafted.draft
        assert isinstance(draft, Draft)
        # 3. Verify: the verifier's distribution at each drafted position plus one more (the bonus position).
        verify_start = time.perf_counter()
        logits, target_probs = self._verify(reply.ids, draft, config)
        verify_s, rows = self._verified(verify_start)
        # 4. Accept: a prefix of the drafts, then the verifier's correction or bonus token.
        line = self._accept(draft, target_probs, drafted.limit)
        # 5. Roll back happens lazily: the next logits_for() call cuts both caches back to the longest
        #    prefix that matches the committed sequence (kv.py), dropping the rejected drafts' positions.
        if drafted.speculating:
            assert self.drafter is not None
            self.drafter.observe(len(draft.token_ids), line.n_accepted)
            self._record_chain(draft, line.n_accepted, config, timed=drafted.waited_s is None)  # None: not ahead
        timing = self._timing(round_start, drafted, verify_s, rows)
        reply.stats.add_round(drafted=len(draft.token_ids), accepted=line.n_accepted, emitted=len(line.committed),
                              draft_s=timing.draft_s, verify_s=timing.verify_s, overhead_s=timing.overhead_s,
                              hidden_draft_s=timing.hidden_draft_s)
        # 6. Emit the round's events.
        return self._emit(reply, line, shown_probs(logits, config, target_probs), timing, config)

    def _check_tree(self, reply: _Reply, drafted: _Drafted, config: GenerationConfig, round_start: float
                    ) -> RoundResult:
        """The rest of a round over a tree of candidates: the steps of a chain's (_check_chain)."""
        tree = drafted.draft
        assert isinstance(tree, DraftTree)
        # 3. Verify every node in one forward pass, each seeing only its own ancestors (tree attention).
        verify_start = time.perf_counter()
        logits, target_probs = self._verify_tree(reply.ids, tree, config)
        verify_s, rows = self._verified(verify_start)
        # 4. Accept the longest path the verifier agrees with, then its correction or bonus token.
        acceptance, line = self._accept_tree(tree, target_probs, reply.gamma)
        # 5. Roll back: the verifier's cache keeps the accepted path's rows and drops every other node.
        if len(tree):
            self.verifier_forward.keep_path(acceptance.path)
        self._record_tree(tree, acceptance, len(line.token_ids))
        timing = self._timing(round_start, drafted, verify_s, rows)
        reply.stats.add_round(drafted=len(tree), accepted=line.n_accepted, emitted=len(line.committed),
                              draft_s=timing.draft_s, verify_s=timing.verify_s, overhead_s=timing.overhead_s,
                              positions=len(line.token_ids), hidden_draft_s=timing.hidden_draft_s)
        # 6. Emit the main line as a chain's round, with every node of the tree and its verdict.
        shown = shown_probs(logits, config, target_probs)
        return self._emit(reply, line, shown, timing, config, self._tree_verdicts(tree, acceptance, shown))

    def _verified(self, verify_start: float) -> tuple[float, int]:
        """The verifier pass just run: its seconds and the positions it fed, which the cost model learns from."""
        verify_s, rows = time.perf_counter() - verify_start, self.verifier_forward.last_run
        self.sizer.cost.observe(rows, verify_s)
        return verify_s, rows

    @staticmethod
    def _timing(round_start: float, drafted: _Drafted, verify_s: float, rows: int) -> _Timing:
        """The round's time split: drafting, verifying, and the rest so far (sampling, bookkeeping)."""
        draft_s = drafted.round_draft_s
        return _Timing(draft_s, verify_s, max(0.0, time.perf_counter() - round_start - draft_s - verify_s), rows,
                       drafted.hidden_draft_s)

    def _committed(self, accepted: tuple[int, ...], next_token: int) -> tuple[int, ...]:
        """The tokens a round adds: the accepted drafts, then the verifier's correction or bonus token
        (nothing follows an accepted end of sequence)."""
        if accepted and accepted[-1] in self.verifier.eos_token_ids:
            return accepted
        return (*accepted, next_token)

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
        length = self._paying_length(reply)
        return (max(1, length), None) if self._pays(length > 0) else (0, DraftStop.COST)

    def _record_chain(self, draft: Draft, n_accepted: int, config: GenerationConfig, timed: bool = True) -> None:
        """The chain's acceptance for the position record, and its drafting time for the cost model unless it ran
        ahead, beside the prefill (`timed` False, see _observe_draft)."""
        if not self._sizes_chains(config):
            return
        if draft.token_ids:
            self.chain_record.observe(len(draft.token_ids), n_accepted)
            self._observe_draft(len(draft.token_ids), draft.draft_s, timed)

    def tree_nodes(self, config: GenerationConfig) -> int:
        """The most tree nodes a round may check (0: a chain); for `auto` see defaults.tree_nodes_for."""
        if config.tree_nodes == TREE_AUTO:
            return defaults.tree_nodes_for(greedy=config.greedy)
        return config.tree_nodes

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

    def _draft_tree(self, reply: _Reply, remaining: int, config: GenerationConfig, timed: bool = True) -> DraftTree:
        """A tree of at most tree_nodes(config) nodes, γ deep and within the reply's budget, cut to the nodes
        that pay here. Every size is weighed against a plain step: while that has fewer than a few recent
        timings (cost.VerifyCost.stale), the round is a plain step that times it. The first round feeds
        nothing for one (the prefill gave its distribution), so it never probes. Where not even the root's
        children can pay, nothing is drafted (_tree_pays)."""
        if config.cost_aware and reply.round_index and self.sizer.cost.stale(1):
            return DraftTree.empty(DraftStop.PROBE)
        if config.cost_aware and not self._tree_pays(reply):
            return DraftTree.empty(DraftStop.COST)
        assert self.drafter is not None
        # A round that drafts for evidence (_pays) grows its tree at the draft's word and checks at least its γ best
        # nodes: cut by a calibration that has not seen this draft (or not lately), it would be cut to nothing and
        # teach the calibration nothing.
        exploring = config.cost_aware and self.exploring
        depth = min(reply.gamma, remaining - 1)
        tree = self.drafter.propose_tree(reply.ids, self.tree_nodes(config), depth, config, self.vocab_size,
                                         self.verifier.eos_token_ids,
                                         worth=self.sizer if config.cost_aware and not exploring else None)
        self._observe_draft(tree.expansions, tree.draft_s, timed)
        if config.cost_aware and tree.stop is DraftStop.TREE:
            size = self.sizer.best_size(tree.values, tree.draft_s)  # the drafting is spent whatever is kept
            size = max(size, depth) if exploring else size
            tree = tree.prefix(size) if size else dataclasses.replace(tree.prefix(0), stop=DraftStop.COST)
        return tree

    # Rounds priced out in a row before one drafts anyway: a draft's cost is learned only by drafting, and a
    # slow first round (a cold draft: ~1 s in the app's first reply) would otherwise price it out for good.
    PROBE_AFTER = 16
    # A new draft's first trees are grown, and checked, whatever the cost model says: its calibration starts
    # as the draft's own word, and a tree cut to nothing on that alone teaches the calibration nothing (on the
    # Qwen2.5-Coder pair, with this machine's costs recalled, a shell-script prompt drafted in 3-4 of 39-44 rounds
    # and ran 14-26 % slower than an engine that knew no costs: docs/performance.md, "The cost model remembers").
    FIRST_TREES_CHECKED = VerifyCost.SETTLED

    def _tree_pays(self, reply: _Reply) -> bool:
        """Whether this round should grow a tree at all. Growing even the root's children costs a draft
        step whatever is kept afterwards (a draft with another tokenizer also re-reads the text), so it is
        weighed as a chain would be (_pays)."""
        return self._pays(self._paying_length(reply) > 0)

    def _paying_length(self, reply: _Reply) -> int:
        """How many tokens a chain drafted now would pay for (cost.TreeSizer.best_length): from the main lines'
        recent acceptance (the position record), the draft's time per step and the cost of checking. Until
        the draft's time is settled (a few timings) drafting is taken as free: its first steps are slow."""
        per_token = None if self.sizer.draft_settled else 0.0
        return self.sizer.best_length(self.chain_record.rates(), reply.gamma, per_token_s=per_token)

    def _pays(self, worth_it: bool) -> bool:
        """Whether this round drafts, given whether drafting pays (_paying_length). A round priced out is a
        plain step, and ages the record back towards its prior; after PROBE_AFTER of them in a row, two
        rounds draft anyway: the first catches the draft up on the tokens it sat out (its time is not the
        draft's cost, _observe_draft), the second measures it afresh; so do a new draft's first
        FIRST_TREES_CHECKED trees (set_drafter). Such rounds are `exploring`: a tree is checked whatever the
        cut says (_draft_tree)."""
        if self.priced_out >= self.PROBE_AFTER:
            self.priced_out, self.probe_left = 0, 2
        self.exploring = bool(self.probe_left)
        if worth_it or self.probe_left:
            self.priced_out, self.probe_left = 0, max(0, self.probe_left - 1)
            return True
        self.priced_out += 1
        self.draft_behind = True
        self.chain_record.age()
        return False

    def _observe_draft(self, steps: int, draft_s: float, timed: bool = True) -> None:
        """A drafting round's time, for the cost model, unless the draft first had to read the tokens of
        the rounds it sat out (16 plain steps are 16 tokens to read, and timed as the draft's cost they
        would keep it priced out), or it drafted beside the prefill (`timed` False: two passes at once
        share the memory bus)."""
        if self.draft_behind:
            self.draft_behind = False
            return
        if timed:
            self.sizer.observe_draft(steps, draft_s)

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

    def _accept(self, draft: Draft, target_probs: torch.Tensor, gamma: int) -> _MainLine:
        """The acceptance rule's verdict on a chain (sampling.accept_drafts)."""
        drafted = torch.tensor(draft.token_ids, dtype=torch.long, device=target_probs.device)
        acceptance = accept_drafts(drafted, draft.draft_probs.to(target_probs.device), target_probs, self.generator)
        n = acceptance.n_accepted
        return _MainLine(draft.token_ids, draft.display_probs, acceptance.accept_probs, n,
                         self._committed(draft.token_ids[:n], acceptance.next_token),
                         tuple(range(len(draft.token_ids) + 1)), draft.stop, gamma, draft.sources)

    def _accept_tree(self, tree: DraftTree, target_probs: torch.Tensor, gamma: int
                     ) -> tuple[TreeAcceptance, _MainLine]:
        """The acceptance rule's verdict on a tree (sampling.accept_tree), and the main line it reads as:
        the accepted path, then the draft's best guess below it (nodes never checked: accept_prob 0)."""
        acceptance = accept_tree(tree.token_ids, tree.parents, target_probs, self.generator)
        line = tree.main_line(acceptance.path)
        committed = self._committed(tuple(tree.token_ids[node] for node in acceptance.path), acceptance.next_token)
        return acceptance, _MainLine(
            tuple(tree.token_ids[i] for i in line), tuple(tree.display_probs[i] for i in line),
            tuple(acceptance.accept_probs[i] or 0.0 for i in line), len(acceptance.path), committed,
            (0, *(node + 1 for node in line)), tree.stop, gamma, tuple(tree.source(node) for node in line))

    def _record_tree(self, tree: DraftTree, acceptance: TreeAcceptance, main_line: int) -> None:
        """Calibrate the draft's own values (a copy's rates are learned apart): the map of its confidence from
        every node whose parent was accepted, and the factor over the tree; a round that checked none of them
        only ages the evidence. Record how far the main line (`main_line` tokens) was accepted, as a chain's
        round would be: the record decides whether the next round drafts at all (_tree_pays). Then tell the
        drafter."""
        drafted = [node for node in range(len(tree)) if not tree.is_copy(node)] if tree.stop is DraftStop.TREE else []
        self.sizer.observe([tree.values[node] for node in drafted],
                           sum(not tree.is_copy(node) for node in acceptance.path) if drafted else 0)
        on_path = {-1, *acceptance.path}
        trials = [node for node in drafted if tree.parents[node] in on_path]
        self.sizer.confidence.observe([tree.display_probs[node] for node in trials],
                                      [node in on_path for node in trials])
        if tree.stop is DraftStop.TREE:
            self.chain_record.observe(main_line, len(acceptance.path))
        elif tree.stop is DraftStop.COST and tree.expansions:
            self.chain_record.observe(1, 0)  # drafted, and no node was worth its row: nothing gained
        assert self.drafter is not None
        self.drafter.observe(len(tree), len(acceptance.path))

    def _tree_verdicts(self, tree: DraftTree, acceptance: TreeAcceptance, shown: torch.Tensor
                       ) -> tuple[Verdict, ...]:
        """Every node of the tree with the verifier's view of it (`shown`: the pass's rows as people read them)."""
        on_path = set(acceptance.path)
        return tuple(
            Verdict(token_id=token, text=self._token_text(token), parent=parent, draft_prob=tree.display_probs[node],
                    target_prob=float(shown[parent + 1, token]), accept_prob=acceptance.accept_probs[node],
                    accepted=node in on_path, draft_source=tree.source(node))
            for node, (token, parent) in enumerate(zip(tree.token_ids, tree.parents)))

    def _emit(self, reply: _Reply, line: _MainLine, shown: torch.Tensor, timing: _Timing, config: GenerationConfig,
              tree: tuple[Verdict, ...] = ()) -> RoundResult:
        """The round as events: its verdicts, then the accepted drafts, the rejected ones where they were
        proposed, and the correction or bonus token. `shown`: the verifier pass's rows as people read them
        (sampling.shown_probs); `tree`: a tree round's nodes."""
        k, n, index = len(line.token_ids), line.n_accepted, reply.round_index
        shown = shown[list(line.rows)]
        alternatives = self._alternatives_by_row(shown, k + 1, config.top_alternatives)
        texts = [reply.stream.push(token) for token in line.token_ids[:n]] + reply.stream.peek(line.token_ids[n:])
        verdicts = line.verdicts(texts, shown)
        tokens = [drafted_token(v, index, i, alternatives[i]) for i, v in enumerate(verdicts)]
        emitted_state = TokenState.ACCEPTED
        if len(line.committed) > n:  # the verifier's own token: a correction, a bonus, or a plain decode step
            emitted_state = TokenState.PLAIN if k == 0 else (TokenState.BONUS if n == k else TokenState.CORRECTED)
            token = line.committed[-1]
            tokens.append(TokenCommitted(
                token_id=token, text=reply.stream.push(token), state=emitted_state, round_index=index, position=n,
                draft_prob=None, target_prob=float(shown[n, token]), accept_prob=None, alternatives=alternatives[n]))
        verified = RoundVerified(
            round_index=index, drafted=verdicts, n_accepted=n, emitted_token_id=line.committed[-1],
            emitted_state=emitted_state, stop=line.stop, gamma=line.gamma, draft_s=timing.draft_s,
            verify_s=timing.verify_s, overhead_s=timing.overhead_s, tree=tree, rows=timing.rows,
            hidden_draft_s=timing.hidden_draft_s)
        return RoundResult(verified=verified, tokens=tuple(tokens), committed=line.committed)

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
