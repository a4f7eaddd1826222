"""The typed events a generation yields, in order.

Per reply:  Prefilled, then per round [RoundVerified (the draft and the verifier's verdict on each of its
tokens), then one TokenCommitted per accepted draft token, one TokenRejected per rejected draft token (the
first rejected one and every one after it), and one TokenCommitted for the verifier's correction or bonus
token], then Finished. With speculation off each round is a RoundVerified with no drafted tokens and one
PLAIN token. A round that checked a tree of candidates reports its main line as the chain it reads as.

A viewer that renders TokenCommitted and TokenRejected in arrival order shows the reply with rejected
tokens right where the draft proposed them. All events are frozen: safe to hand to another thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Union

from specdec_core.stats import Stats, StatsAccumulator


class TokenState(str, Enum):
    ACCEPTED = "accepted"  # drafted and accepted by the verifier
    REJECTED = "rejected"  # drafted and rejected (shown struck through; not part of the reply)
    CORRECTED = "corrected"  # the verifier's token that replaced the first rejected draft token
    BONUS = "bonus"  # the verifier's extra token after a fully accepted round
    PLAIN = "plain"  # decoded by the verifier alone (speculation off, or nothing was drafted)


class DraftStop(str, Enum):
    """Why drafting stopped in a round."""

    GAMMA = "gamma"  # drafted the round's full length
    TREE = "tree"  # grew a tree of candidates (its size is the round's node budget or the cost model's pick)
    COST = "cost"  # the cost model found checking no drafted node faster than a plain step (cost.py)
    PROBE = "probe"  # no drafting: a plain step timed again, the reference trees are weighed against (cost.py)
    DRAFT_CAP = "draft_cap"  # a hybrid's draft model drafted its cap (--draft-tokens), below the round's γ
    CONFIDENCE = "confidence"  # the draft's top probability fell under the cutoff
    EOS = "eos"  # the draft proposed end of sequence
    MAX_TOKENS = "max_tokens"  # the reply's token budget leaves no room for more drafts
    NO_MATCH = "no_match"  # nothing to draft from: prompt lookup found no earlier n-gram to copy
    OFF = "off"  # speculation is off


class StopReason(str, Enum):
    EOS = "eos"
    STOP_STRING = "stop_string"
    MAX_TOKENS = "max_tokens"
    CONTEXT = "context"  # the verifier's context window is full
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(frozen=True)
class Alternative:
    token_id: int
    text: str
    prob: float  # the verifier's processed probability


@dataclass(frozen=True)
class Prefilled:
    prompt_tokens: int
    reused_tokens: int  # prompt tokens whose KV cache was kept from the previous turn
    prefill_s: float


@dataclass(frozen=True)
class Verdict:
    """One drafted token and what the verifier made of it: a node of the round's draft (a chain is a tree
    of width one, each token's parent the one before it). The probabilities are as people read them
    (sampling.shown_probs)."""

    token_id: int
    text: str  # see RoundVerified: what it adds to the reply (main line), or the token alone (tree)
    parent: int  # index of the node before it, in the same tuple; -1: the last committed token
    # The draft's probability of this token given the path above it; None: proposed one-hot because its text
    # matched the draft's (string match, cross_vocab.StringMatchDrafter), with no probability of its own.
    draft_prob: float | None
    target_prob: float  # the verifier's, given the same path
    accept_prob: float | None  # probability the rule accepted it when checked (min(1, target/draft)); None: never
    accepted: bool  # on the accepted path
    draft_source: str | None = None  # a draft with another tokenizer: its own token(s) this one came from
    copied: bool = False  # copied from earlier text (prompt lookup, the phrase store), not drafted by a model


@dataclass(frozen=True)
class RoundVerified:
    round_index: int
    # The round's drafted tokens in reading order (a chain, or a tree's main line: the accepted path and the
    # draft's best guess below it), each with the text it adds to the reply if accepted.
    drafted: tuple[Verdict, ...]
    n_accepted: int
    emitted_token_id: int  # the correction (a draft token was rejected) or bonus / plain token
    emitted_state: TokenState
    stop: DraftStop
    gamma: int
    draft_s: float
    verify_s: float
    overhead_s: float  # the rest of the round: sampling, bookkeeping, detokenising
    # Draft trees: every node checked in this round's one verifier pass, each with its token decoded on its
    # own. Empty for a chain.
    tree: tuple[Verdict, ...] = ()
    # Positions the verifier's pass fed: the last committed token and the drafts (a tree: its nodes). 0: no
    # pass ran (the first round's plain step reuses the prefill's distribution). What verify_s paid for.
    rows: int = 0
    # Round 1's drafting when the draft drafted it on a thread of its own during the verifier's prefill
    # (Engine.drafts_ahead): the part the round did not wait for, which draft_s (the wait) leaves out.
    hidden_draft_s: float = 0.0

    def add_to(self, tally: StatsAccumulator) -> None:
        """Fold this round into `tally` (StatsAccumulator.add_verified), as the engine's own tally has it."""
        tally.add_verified(n_accepted=self.n_accepted, ended_on_accepted=self.emitted_state is TokenState.ACCEPTED,
                           mainline=len(self.drafted), tree_nodes=len(self.tree), draft_s=self.draft_s,
                           verify_s=self.verify_s, overhead_s=self.overhead_s, hidden_draft_s=self.hidden_draft_s)


@dataclass(frozen=True)
class TokenCommitted:
    token_id: int
    text: str  # the text this token adds to the reply (may be "" while a multi-byte char is incomplete)
    state: TokenState
    round_index: int
    position: int  # index within the round's draft (the correction/bonus sits at n_accepted)
    draft_prob: float | None  # None for tokens the draft did not propose, or proposed by string match (Verdict)
    target_prob: float
    accept_prob: float | None
    alternatives: tuple[Alternative, ...] = field(default=())
    draft_source: str | None = None  # a draft with another tokenizer: its own token(s) this one came from


@dataclass(frozen=True)
class TokenRejected:
    token_id: int
    text: str
    round_index: int
    position: int
    draft_prob: float | None  # None: proposed by string match (Verdict)
    target_prob: float
    accept_prob: float | None
    alternatives: tuple[Alternative, ...] = field(default=())
    state: TokenState = TokenState.REJECTED
    draft_source: str | None = None  # a draft with another tokenizer: its own token(s) this one came from


@dataclass(frozen=True)
class Finished:
    stop_reason: StopReason
    text: str
    token_ids: tuple[int, ...]
    stats: Stats
    error: str | None = None  # the user-facing message when stop_reason is ERROR


def drafted_token(verdict: Verdict, round_index: int, position: int, alternatives: tuple[Alternative, ...] = ()
                  ) -> TokenCommitted | TokenRejected:
    """A drafted token as the reply shows it: committed if the verifier accepted it, else rejected."""
    common = dict(token_id=verdict.token_id, text=verdict.text, round_index=round_index, position=position,
                  draft_prob=verdict.draft_prob, target_prob=verdict.target_prob, accept_prob=verdict.accept_prob,
                  alternatives=alternatives, draft_source=verdict.draft_source)
    if verdict.accepted:
        return TokenCommitted(state=TokenState.ACCEPTED, **common)
    return TokenRejected(**common)


Event = Union[Prefilled, RoundVerified, TokenCommitted, TokenRejected, Finished]
