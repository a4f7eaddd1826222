"""A round's data, and how a checked round reads as events: what the engine's loop (engine/loop.py) passes
between its steps, kept apart so that the loop reads as the algorithm.

`Reply` is the reply being generated; `Drafted` a round's drafting, done (on a thread of its own during the
prefill: `DraftingAhead`); `MainLine` the drafted tokens a round reads as, judged; `emit` turns them into the
round's events (events.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import Draft
from specdec_core.drafting.planner import DraftPolicy
from specdec_core.drafting.trees import DraftTree
from specdec_core.events import (
    Alternative,
    DraftStop,
    Event,
    RoundVerified,
    TokenCommitted,
    TokenRejected,
    TokenState,
    Verdict,
    drafted_token,
)
from specdec_core.stats import StatsAccumulator
from specdec_core.text.textstream import TextStream
from specdec_core.verification.sampling import TreeAcceptance


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
class Reply:
    """The state of the reply being generated, which each round extends."""

    ids: list[int]  # prompt + committed tokens
    stream: TextStream
    stats: StatsAccumulator
    gamma: int  # this round's draft length limit (adaptive drafting changes it)
    policy: DraftPolicy
    new_ids: list[int] = field(default_factory=list)
    text: str = ""
    round_index: int = 0
    ahead: DraftingAhead | None = None  # round 1's drafting, under way on a thread of its own during the prefill
    catching_up: DraftingAhead | None = None  # a priced-out draft reading what it sat out, beside the verifier

    def commit(self, result: RoundResult) -> None:
        result.verified.add_to(self.stats)
        self.ids.extend(result.committed)
        self.new_ids.extend(result.committed)
        self.text += "".join(t.text for t in result.tokens if isinstance(t, TokenCommitted))
        self.round_index += 1

    def take_ahead(self) -> Drafted | None:
        """Round 1's drafting done ahead (None: there is none): waits for it, and re-raises its error."""
        ahead, self.ahead = self.ahead, None
        return None if ahead is None else ahead.result()

    def end_ahead(self) -> None:
        """Wait for drafting ahead that no round will take (the reply stopped, failed or was closed first), and for
        the draft's catching up: their threads use the caches and the planner, so they end before those are reset
        or read."""
        for running in (self.ahead, self.catching_up):
            if running is not None:
                running.wait()
        self.ahead = self.catching_up = None

    def caught_up(self) -> None:
        """Wait for the draft's catching up beside the verifier, if under way, and re-raise its error: before
        anything else uses the draft's cache."""
        catching_up, self.catching_up = self.catching_up, None
        if catching_up is not None:
            catching_up.result()


@dataclass(frozen=True)
class MainLine:
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
    copied: tuple[bool, ...] = ()  # each token copied from earlier text rather than drafted (empty: none)

    def verdicts(self, texts: Sequence[str], shown: torch.Tensor) -> tuple[Verdict, ...]:
        """Each token with what it adds to the reply (`texts`) and the verifier's view of it (`shown`, the
        main line's rows as people read them)."""
        k = len(self.token_ids)
        drafted = torch.tensor(self.token_ids, dtype=torch.long, device=shown.device)
        targets = shown[torch.arange(k, device=shown.device), drafted].tolist() if k else []
        return tuple(Verdict(token_id=token, text=texts[i], parent=i - 1, draft_prob=self.draft_probs[i],
                             target_prob=targets[i], accept_prob=self.accept_probs[i], accepted=i < self.n_accepted,
                             draft_source=self.sources[i] if i < len(self.sources) else None,
                             copied=i < len(self.copied) and self.copied[i])
                     for i, token in enumerate(self.token_ids))


@dataclass(frozen=True)
class Timing:
    draft_s: float
    verify_s: float
    overhead_s: float
    rows: int  # positions the verifier's pass fed
    hidden_draft_s: float = 0.0  # drafting done ahead, during the prefill, that the round did not wait for


@dataclass(frozen=True)
class Drafted:
    """A round's drafting, done: a tree, or a chain with its length limit (`limit`; 0: the round does not speculate)."""

    draft: Draft | DraftTree
    limit: int = 0
    speculating: bool = True
    waited_s: float | None = None  # drafted ahead, during the prefill: what the round still waited for it
    copied: bool = False  # a copy checked where the model's drafting was priced out (DraftPlanner.copy_length)

    @property
    def round_draft_s(self) -> float:
        """The drafting time the round spent: all of it, or only the wait when it was drafted ahead."""
        return self.draft.draft_s if self.waited_s is None else self.waited_s

    @property
    def hidden_draft_s(self) -> float:
        """Drafting time spent ahead, during the prefill, that the round did not wait for."""
        return 0.0 if self.waited_s is None else max(0.0, self.draft.draft_s - self.waited_s)


class DraftingAhead:
    """Work started on a thread of its own while this one goes on; `result()` waits for it and re-raises its error."""

    def __init__(self, work: Callable[[], Drafted | None]):
        self._result: Drafted | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="specdec-draft-ahead", daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Drafted | None]) -> None:
        try:
            self._result = work()
        except BaseException as error:  # noqa: BLE001 - handed to the thread that waits for the result
            self._error = error

    def wait(self) -> None:
        self._thread.join()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Drafted | None:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._result


def adapted_gamma(gamma: int, verified: RoundVerified, gamma_max: int) -> int:
    """transformers' heuristic: +2 after a fully accepted round, -1 after a rejection."""
    if verified.n_accepted == len(verified.drafted):
        return min(gamma + 2, gamma_max)
    return max(1, gamma - 1)


class TokenTexts:
    """Each token decoded on its own (for tooltips), memoised: a few alternatives per position would otherwise
    cost a tokenizer call each, every round."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._texts: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self._tokenizer.decode([token_id])
        return text


def tree_verdicts(tree: DraftTree, acceptance: TreeAcceptance, shown: torch.Tensor, token_text: TokenTexts
                  ) -> tuple[Verdict, ...]:
    """Every node of the tree with the verifier's view of it (`shown`: the pass's rows as people read them)."""
    on_path = set(acceptance.path)
    return tuple(
        Verdict(token_id=token, text=token_text(token), parent=parent, draft_prob=tree.display_probs[node],
                target_prob=float(shown[parent + 1, token]), accept_prob=acceptance.accept_probs[node],
                accepted=node in on_path, draft_source=tree.source(node), copied=tree.is_copy(node))
        for node, (token, parent) in enumerate(zip(tree.token_ids, tree.parents)))


def emit(reply: Reply, line: MainLine, shown: torch.Tensor, timing: Timing, config: GenerationConfig,
         token_text: TokenTexts, tree: tuple[Verdict, ...] = ()) -> RoundResult:
    """The round as events: its verdicts, then the accepted drafts, the rejected ones where they were
    proposed, and the correction or bonus token. `shown`: the verifier pass's rows as people read them
    (sampling.shown_probs); `tree`: a tree round's nodes."""
    k, n, index = len(line.token_ids), line.n_accepted, reply.round_index
    shown = shown[list(line.rows)]
    alternatives = _alternatives_by_row(shown, k + 1, config.top_alternatives, token_text)
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


def _alternatives_by_row(shown: torch.Tensor, rows: int, count: int, token_text: TokenTexts
                         ) -> list[tuple[Alternative, ...]]:
    """The verifier's `count` most likely tokens at each of the first `rows` positions (for tooltips)."""
    if not count:
        return [()] * rows
    top = torch.topk(shown[:rows], min(count, shown.shape[-1]), dim=-1)
    return [tuple(Alternative(token_id=t, text=token_text(t), prob=p)
                  for t, p in zip(top.indices[row].tolist(), top.values[row].tolist())) for row in range(rows)]
