"""How much each round drafts: the draft planner, the engine's policy beside its loop.

The engine asks `plan()` before drafting (a chain's length, or whether a tree grows and how it is priced),
`cut()` once a tree is grown (the nodes worth checking), and tells `learn()` what the verifier made of the
round. The planner keeps what that takes: the measured verify and draft costs (verification/cost.py), how
often each main-line position was accepted lately, rounds priced out in a row and the rounds that draft
anyway to gather evidence (probes), and the costs this machine remembers between engines
(loading/cost_memory.py). It knows no models and runs no forward pass.

Policy is set once, in the constructor (DraftPolicy), never by flipping attributes from outside.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specdec_core import defaults
from specdec_core.config import TREE_AUTO, GenerationConfig
from specdec_core.drafting.trees import DraftTree
from specdec_core.events import DraftStop
from specdec_core.loading import cost_memory
from specdec_core.verification.cost import PositionRecord, TreeSizer, UsualRecord, VerifyCost

if TYPE_CHECKING:
    from specdec_core.drafting.drafters import Draft, Drafter
    from specdec_core.loading.models import LoadedModel


@dataclass(frozen=True)
class DraftPolicy:
    """What a user of the engine may decide about drafting, beyond the GenerationConfig of a reply."""

    # Let a draft that needs nothing from the verifier read the prompt, and draft round 1, on a thread of its own
    # during the verifier's prefill (DraftPlanner.may_draft_ahead). Off: it reads the prompt after the prefill.
    draft_during_prefill: bool = True
    # Keep the verify costs measured in a reply for the next engine over this verifier on this machine. Off for
    # timings taken under other conditions than replies (the app's calibration runs with its window idle).
    remember_costs: bool = True


@dataclass(frozen=True)
class Plan:
    """What a round drafts. A chain: up to `length` tokens (0: none, and `stop` says why). A tree: grown unless
    `stop` says why not, its nodes priced by `worth` while it grows (None: at the draft's word)."""

    tree: bool
    length: int = 0
    stop: DraftStop | None = None
    sized: bool = False  # a chain whose length the cost model set below the round's γ
    exploring: bool = False  # a tree drafted for evidence: checked at least γ nodes deep whatever the cut says
    nodes: int | None = None  # the most nodes the tree may grow (None: the configuration's tree_nodes)
    worth: TreeSizer | None = None


@dataclass(frozen=True)
class CheckedRound:
    """A round as the verifier checked it, for the planner to learn from (`learn`)."""

    config: GenerationConfig
    rows: int  # positions the verifier's pass fed
    verify_s: float  # what that pass took
    drafted: Draft | DraftTree | None = None  # what the round drafted (None: it did not speculate)
    n_accepted: int = 0  # drafted tokens accepted (a tree: the accepted path's length)
    path: tuple[int, ...] = ()  # a tree's accepted nodes
    main_line: int = 0  # a tree's main line: the tokens the round reads as
    timed: bool = True  # False: drafted ahead, beside the prefill, so its time is not the draft's cost
    copied: bool = False  # a copy checked in a round where the model's drafting was priced out (copy_length)


class DraftPlanner:
    """The draft-sizing policy and the measurements it decides from."""

    def __init__(self, policy: DraftPolicy = DraftPolicy(), sizer: TreeSizer | None = None):
        self.policy = policy
        self.sizer = sizer or TreeSizer()  # measured verify cost on this machine, and the tree size that pays
        self.chain_record = PositionRecord()  # how often each main-line position was accepted lately
        self.usual = UsualRecord()  # the same over many rounds: what the record drifts back to while priced out
        self.copy_record = PositionRecord()  # the same for copies checked alone (copy_length)
        self.priced_out = 0  # rounds in a row that drafted nothing because no drafting could pay
        self.fruitless_probes = 0  # probes in a row after which the draft was still priced out (_probe_after)
        self.probe_left = 0  # rounds still to draft whatever the cost model says (_pays)
        self.exploring = False  # this round drafts for evidence, not because the cost model expects it to pay
        self.draft_behind = False  # the draft has not read the tokens of the rounds it sat out
        self._measured: object = None  # the drafter whose costs and acceptance the sizer has learned
        self._first_trees = False  # the rounds probing now are a new draft's first trees (meet)
        self._draft_recalled = False  # the draft's time per step (and usual acceptance) was recalled from memory

    # Rounds priced out in a row before one drafts anyway: a draft's cost is learned only by drafting, and a
    # slow first round (a cold draft) would otherwise price it out for good.
    PROBE_AFTER = 16
    # From the second probe in a row that finds the draft still not paying, each doubles the rounds before the next,
    # up to this many times PROBE_AFTER; a round that pays starts again from PROBE_AFTER. (The second probe keeps
    # the usual pace: a draft slow while it warms up may be priced out by its first timings still after one probe.)
    # Probes are what a paused speculation costs: on the embedded pair, where a 4-row check costs 2.4 plain steps
    # of its quantised verifier, they cost each 128-token reply 7 to 12 % against speculation off.
    MAX_PROBE_BACKOFF = 8
    # A draft whose settled cost could not pay well even if every token it drafted were accepted (a draft model
    # costing half the verifier's step, beside a quantised verifier whose check of k rows costs nearly k steps)
    # is probed this many times more rarely: its acceptance may change with the text, its cost hardly does, and
    # each probe costs the draft's catching up on the tokens it sat out as well as its drafting.
    HOPELESS_PROBE_FACTOR = 8
    PROBE_WORTH = 0.25  # the least gain an always-right draft must promise to be probed at the usual pace
    # A new draft's first trees are grown, and checked, whatever the cost model says: its calibration starts
    # as the draft's own word, and a tree cut to nothing on that alone teaches the calibration nothing
    # (docs/performance.md, "The cost model remembers").
    FIRST_TREES_CHECKED = VerifyCost.SETTLED

    def meet(self, drafter: Drafter | None, grows_trees: bool) -> None:
        """The engine's drafter from now on: another draft's cost and worth are learned afresh."""
        if drafter is not None and drafter is not self._measured:
            self.sizer.forget_draft()
            self.chain_record, self.copy_record, self.usual = PositionRecord(), PositionRecord(), UsualRecord()
            self.priced_out, self._measured, self.fruitless_probes = 0, drafter, 0
            self.probe_left = self.FIRST_TREES_CHECKED if grows_trees else 0
            self._first_trees = bool(self.probe_left)  # those probes are the new draft's first trees
            self._draft_recalled = False

    def may_draft_ahead(self, drafter: Drafter | None, device: torch.device, policy: DraftPolicy | None = None
                        ) -> bool:
        """Whether the draft reads the prompt, and drafts round 1, on a thread of its own during the verifier's
        prefill: when the drafter needs nothing from the verifier (a separate model, not a head reading its
        hidden states), the verifier runs on the CPU, torch runs each pass on one thread and a second CPU is free
        for the draft's (with more threads per pass, two passes at once could share cores that a count of logical
        CPUs does not show, SMT siblings, so it stays off). `policy` (default: the planner's) may turn it off.
        The draft's prefill and first tokens then hide within the verifier's prefill on the second core
        (docs/performance.md)."""
        if not (policy or self.policy).draft_during_prefill or drafter is None or drafter.reads_verifier:
            return False
        return device.type == "cpu" and torch.get_num_threads() == 1 and defaults.available_cpus() >= 2

    def copy(self) -> DraftPlanner:
        """A planner that starts from what this one has learned (costs, acceptance, a pause under way) and learns
        apart from it from then on. The drafter it measured is the same one, not a copy."""
        return copy.deepcopy(self, {id(self._measured): self._measured})

    # -- the costs this machine remembers

    def forget_verify_costs(self) -> None:
        """Drop the verify timings measured so far: they were taken under other conditions than the replies
        to come (the app's calibration runs while its window is idle; replies run while it repaints). The next
        reply starts from what this machine remembers (start_reply)."""
        self.sizer.cost = VerifyCost()

    def start_reply(self, verifier: LoadedModel) -> None:
        """Before an engine's first timed pass: start from the verify costs the last engine over this verifier
        measured on this machine (loading/cost_memory.py), not from nothing."""
        if self.sizer.cost.passes == 0 and not self.sizer.cost.recalled:
            self.sizer.cost.recall(cost_memory.recalled(verifier))
        if self._measured is not None and not self.sizer.draft_timings and not self._draft_recalled:
            self._draft_recalled = True
            step_s = cost_memory.recalled_draft(verifier, _described(self._measured))
            for _ in range(VerifyCost.SETTLED if step_s else 0):
                self.sizer.observe_draft(1, step_s)
            rates = cost_memory.recalled_rates(verifier, _described(self._measured)) if step_s else None
            if rates and not self.usual.observed:
                self.usual = UsualRecord.starting_from(rates)
                self.chain_record.prior = self.usual.rates()

    def finish_reply(self, verifier: LoadedModel, policy: DraftPolicy | None = None) -> None:
        """After a reply: keep the settled verify costs for the next engine over this verifier here, and the
        draft's time per step beside it, unless the reply's policy (default: the planner's) says otherwise."""
        if not (policy or self.policy).remember_costs:
            return
        if self.sizer.cost.passes:
            cost_memory.remember(verifier, self.sizer.cost.settled())
        if self._measured is not None and self.sizer.draft_settled:
            cost_memory.remember_draft(verifier, _described(self._measured), self.sizer.draft_per_expansion,
                                       self.usual.rates() if self.usual.observed else ())

    @property
    def plain_step_s(self) -> float:
        """One plain verifier step here, as measured (0: unknown), for the predicted speedup (stats.py)."""
        return self.sizer.cost.estimate(1) or 0.0

    # -- before drafting

    @staticmethod
    def sizes_chains(config: GenerationConfig) -> bool:
        """Greedy `auto`: a chain drafts as many tokens as pay on this machine, up to γ (cost.TreeSizer.
        best_length, from the cost of checking k tokens measured here, the draft's time per token, and how
        often each position was accepted lately). An explicit --tree-nodes 0 keeps γ, and so does sampling:
        sizes that follow timings would decide which random draws a round makes, and a seed would no longer
        reproduce a reply."""
        return config.cost_aware and config.tree_nodes == TREE_AUTO and config.greedy

    def plan(self, config: GenerationConfig, gamma: int, first_round: bool, tree: bool) -> Plan:
        """This round's drafting: a tree (`tree`) or a chain, with the round's length limit `gamma`. Every size is
        weighed against a plain step: while that has fewer than a few recent timings (cost.VerifyCost.stale), the
        round is a plain step that times it. The first round feeds nothing for one (the prefill gave its
        distribution), so it never probes."""
        probe = not first_round and self.sizer.cost.stale(1)
        if tree:
            return self._plan_tree(config, gamma, probe)
        if not self.sizes_chains(config):
            return Plan(tree=False, length=gamma)
        if probe:
            return Plan(tree=False, stop=DraftStop.PROBE)
        length = self._paying_length(gamma)
        if not self._pays(length > 0, gamma):
            return Plan(tree=False, stop=DraftStop.COST)
        return Plan(tree=False, length=max(1, length), sized=max(1, length) < gamma)

    def copy_length(self, copy: Draft, gamma: int) -> int:
        """How many of a copy's tokens to check in a round whose model drafting was priced out: a copy costs no
        drafting, only the verifier's rows, so it is sized as a free chain (cost.TreeSizer.best_length) from how
        often such copies were accepted lately (copy_record)."""
        length = min(gamma, len(copy.token_ids))
        return self.sizer.best_length(self.copy_record.rates(), length, per_token_s=0.0) if length else 0

    def _plan_tree(self, config: GenerationConfig, gamma: int, probe: bool) -> Plan:
        """A tree grown and cut to the nodes that pay here, unless this round probes a plain step, or not even
        the root's children can pay (_tree_pays). A round that drafts for evidence (_pays) grows its tree at the
        draft's word: cut by a calibration that has not seen this draft (or not lately), it would be cut to
        nothing and teach the calibration nothing. It grows no more nodes than a draft that is always right would
        pay for (at most γ), not the configuration's whole tree: that is evidence enough, and where the verifier's
        products are compute-bound (quantised weights on a CPU) a check of 16 rows costs as much as 10 plain
        steps, and growing them as many draft steps."""
        if not config.cost_aware:
            return Plan(tree=True)
        if probe:
            return Plan(tree=True, stop=DraftStop.PROBE)
        if not self._tree_pays(gamma):
            return Plan(tree=True, stop=DraftStop.COST)
        if self.exploring:  # as deep as a draft that is always right would pay for, and at least one node
            depth = self.sizer.best_length([1.0] * max(1, gamma), max(1, gamma))
            return Plan(tree=True, exploring=True, nodes=max(1, depth))
        return Plan(tree=True, worth=self.sizer)

    def _tree_pays(self, gamma: int) -> bool:
        """Whether this round should grow a tree at all. Growing even the root's children costs a draft
        step whatever is kept afterwards (a draft with another tokenizer also re-reads the text), so it is
        weighed as a chain would be (_pays)."""
        return self._pays(self._paying_length(gamma) > 0, gamma)

    def _paying_length(self, gamma: int) -> int:
        """How many tokens a chain drafted now would pay for (cost.TreeSizer.best_length): from the main lines'
        recent acceptance (the position record), the draft's time per step and the cost of checking. Until
        the draft's time is settled (a few timings) drafting is taken as free: its first steps are slow."""
        per_token = None if self.sizer.draft_settled else 0.0
        self.chain_record.prior = self.usual.rates()  # what it drifts back to: this pair's usual (UsualRecord)
        return self.sizer.best_length(self.chain_record.rates(), gamma, per_token_s=per_token)

    def _hopeless(self, gamma: int) -> bool:
        """Whether even a draft that is always right, at the draft's fastest recent time per token, would gain less
        than PROBE_WORTH over plain steps (the fastest: a draft slow while it warms up is not written off by its
        first steps), and each size of check at what it was timed at, even once (not the optimistic guess that
        lets a size be tried). A probe costs the draft's catching up on every token it sat out: on a 1.5B verifier
        with a 0.5B draft, 3.5 plain steps, for a gain that could only be small."""
        plain = self.sizer.cost.estimate(1)
        if not self.sizer.draft_settled or plain is None:
            return False
        per_token = min(self.sizer.draft_timings)
        best = max((k + 1) / ((self.sizer.cost.estimate(k + 1, cautious=True) or plain) + k * per_token)
                   for k in range(1, max(1, gamma) + 1))
        return best < (1.0 + self.PROBE_WORTH) / plain

    # Rounds before a probe is due in which a draft that needs nothing from the verifier starts reading the tokens
    # it sat out beside the verifier's steps (Engine._catch_up_beside): a 0.5B draft reads 128 tokens in about
    # 5 plain steps of its 1.5B verifier.
    CATCH_UP_LEAD = 8

    def catch_up_due(self, gamma: int) -> bool:
        """Whether a probe is due within CATCH_UP_LEAD rounds of plain steps, so the draft, behind, should start
        catching up now."""
        if not self.draft_behind or self.priced_out + self.CATCH_UP_LEAD < self._probe_after:
            return False
        ahead = self.priced_out + self.CATCH_UP_LEAD
        return ahead >= self._probe_after * self.HOPELESS_PROBE_FACTOR or not self._hopeless(gamma)

    @property
    def _probe_after(self) -> int:
        """Rounds priced out in a row before a probe (for a draft that could pay if always right)."""
        return self.PROBE_AFTER * min(2 ** max(0, self.fruitless_probes - 1), self.MAX_PROBE_BACKOFF)

    def _probe_due(self, gamma: int) -> bool:
        """Whether enough rounds were priced out in a row to draft again (_hopeless is weighed only then: it reads
        the cost curve, and a round that is not due to probe needs none of it)."""
        if self.priced_out < self._probe_after:
            return False
        return self.priced_out >= self._probe_after * self.HOPELESS_PROBE_FACTOR or not self._hopeless(gamma)

    def _pays(self, worth_it: bool, gamma: int) -> bool:
        """Whether this round drafts, given whether drafting pays (_paying_length). A round priced out is a
        plain step, and ages the record back towards its prior; after PROBE_AFTER of them in a row (twice as
        many after each further probe that found no pay, up to MAX_PROBE_BACKOFF times; and HOPELESS_PROBE_FACTOR
        times as many for a draft too dear to pay even if always right), two rounds draft
        anyway: the first catches the draft up on the tokens it sat out (its time is not the
        draft's cost, _observe_draft), the second measures it afresh; so do a new draft's first
        FIRST_TREES_CHECKED trees (meet). Such rounds are `exploring`: a tree is checked whatever the
        cut says (cut)."""
        if self._first_trees and self.probe_left and self._hopeless(gamma):
            self.probe_left = 0  # this machine remembers the draft as too dear to pay: its first trees teach nothing
        self._first_trees = self._first_trees and bool(self.probe_left)
        if self._probe_due(gamma):
            self.priced_out, self.probe_left = 0, 2
            self.fruitless_probes += 1  # unless a round pays before the next probe (below)
        self.exploring = bool(self.probe_left)
        if worth_it and not self.exploring:
            self.fruitless_probes = 0
        if worth_it or self.probe_left:
            self.priced_out, self.probe_left = 0, max(0, self.probe_left - 1)
            return True
        self.priced_out += 1
        self.draft_behind = True
        self.chain_record.age()
        return False

    # -- after drafting

    def cut(self, tree: DraftTree, plan: Plan, depth: int, config: GenerationConfig, timed: bool = True
            ) -> DraftTree:
        """A grown tree cut to the nodes worth their rows (the drafting is spent whatever is kept); a tree drafted
        for evidence keeps at least `depth` nodes. Its drafting time goes to the cost model unless `timed` is
        False (_observe_draft)."""
        self._observe_draft(tree.expansions, tree.draft_s, timed)
        if config.cost_aware and tree.stop is DraftStop.TREE:
            size = self.sizer.best_size(tree.values, tree.draft_s)
            size = max(size, depth) if plan.exploring else size
            tree = tree.prefix(size) if size else dataclasses.replace(tree.prefix(0), stop=DraftStop.COST)
        return tree

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

    # -- after verifying

    def learn(self, checked: CheckedRound) -> None:
        """What the verifier's pass cost, and what it made of the round's drafting."""
        self.sizer.cost.observe(checked.rows, checked.verify_s)
        if isinstance(checked.drafted, DraftTree):
            self._learn_tree(checked.drafted, checked.path, checked.main_line)
        elif checked.copied:
            self.copy_record.observe(len(checked.drafted.token_ids), checked.n_accepted)
        elif checked.drafted is not None and checked.drafted.token_ids and self.sizes_chains(checked.config):
            self._main_line(len(checked.drafted.token_ids), checked.n_accepted)
            self._observe_draft(len(checked.drafted.token_ids), checked.drafted.draft_s, checked.timed)

    def _learn_tree(self, tree: DraftTree, path: tuple[int, ...], main_line: int) -> None:
        """Calibrate the draft's own values (a copy's rates are learned apart): the map of its confidence from
        every node whose parent was accepted, and the factor over the tree; a round that checked none of them
        only ages the evidence. Record how far the main line (`main_line` tokens) was accepted, as a chain's
        round would be: the record decides whether the next round drafts at all (_tree_pays)."""
        drafted = [node for node in range(len(tree)) if not tree.is_copy(node)] if tree.stop is DraftStop.TREE else []
        self.sizer.observe([tree.values[node] for node in drafted],
                           sum(not tree.is_copy(node) for node in path) if drafted else 0)
        on_path = {-1, *path}
        trials = [node for node in drafted if tree.parents[node] in on_path]
        self.sizer.confidence.observe([tree.display_probs[node] for node in trials],
                                      [node in on_path for node in trials])
        if tree.stop is DraftStop.TREE:
            self._main_line(main_line, len(path))
        elif tree.stop is DraftStop.COST and tree.expansions:
            self.chain_record.observe(1, 0)  # drafted, and no node was worth its row: nothing gained (none checked)

    def _main_line(self, drafted: int, accepted: int) -> None:
        """A round's main line: `drafted` tokens, the first `accepted` of them accepted (both records)."""
        self.chain_record.observe(drafted, accepted)
        self.usual.observe(drafted, accepted)


def _described(drafter: object) -> str:
    """A drafter as its cost is remembered: its kind, its model's name and weight format."""
    model = getattr(drafter, "draft", None)
    return f"{type(drafter).__name__}:{getattr(drafter, 'name', '')}:{getattr(model, 'weights', '')}"
