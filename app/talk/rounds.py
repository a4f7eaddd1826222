"""A reply told round by round, in beats: the deterministic model behind the replay (Qt-free).

A `ReplyTrace` holds every token with its round, position and state. `rounds_of` regroups them into
one `RoundStory` per verifier call (what the draft proposed, what the verifier kept, the token the
verifier added), and `ReplayState` walks a flat list of beats:

    DRAFT i   the draft proposes its i-th token, conditioned on the context and tokens 0..i-1
    VERIFY    the verifier scores every drafted position in one forward pass
    RESOLVE   accepted drafts turn green, the first rejected one and the rest are struck through,
              and the verifier's correction (or bonus token) appears

A round in which nothing was drafted (speculation off, or prompt lookup found nothing to copy) has a
single RESOLVE beat. The state is an index into the beat list, so a timer can drive it and a test
can step it; nothing here knows about Qt or clocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from app.trace import ReplyTrace, RoundRecord, TokenRecord
from specdec_core.events import TokenState

DRAFTED_STATES = (TokenState.ACCEPTED.value, TokenState.REJECTED.value)


class Beat(str, Enum):
    DRAFT = "draft"
    VERIFY = "verify"
    RESOLVE = "resolve"


@dataclass(frozen=True)
class RoundStory:
    index: int  # the engine's round index
    drafted: tuple[TokenRecord, ...]  # in draft order: the accepted prefix, then the rejected rest
    emitted: TokenRecord | None  # correction, bonus or plain token (None after an accepted EOS draft)
    record: RoundRecord | None  # timings and why drafting stopped, when the trace has them
    text_before: str  # the reply text committed before this round

    @property
    def n_accepted(self) -> int:
        return sum(1 for t in self.drafted if t.state == TokenState.ACCEPTED.value)

    @property
    def first_rejected(self) -> int | None:
        return next((i for i, t in enumerate(self.drafted) if t.state == TokenState.REJECTED.value), None)

    @property
    def emitted_count(self) -> int:
        """Reply tokens the round added."""
        return self.n_accepted + (self.emitted is not None)

    @property
    def text_after(self) -> str:
        added = "".join(t.text for t in self.drafted if t.in_reply)
        return self.text_before + added + (self.emitted.text if self.emitted is not None else "")

    @property
    def tree_nodes(self) -> int:
        """The round's draft tree's candidates (0: a chain)."""
        return len(self.record.tree) if self.record is not None and self.record.tree else 0

    def beats(self) -> list[tuple[Beat, int]]:
        """A chain: one DRAFT beat per drafted token; a tree: one per candidate, in the order the draft grew them.
        Then the verifier's one pass, then the verdict."""
        if not self.drafted and not self.tree_nodes:
            return [(Beat.RESOLVE, 0)]
        grown = self.tree_nodes or len(self.drafted)
        return [(Beat.DRAFT, i) for i in range(grown)] + [(Beat.VERIFY, 0), (Beat.RESOLVE, 0)]


@dataclass(frozen=True)
class Step:
    round: int  # index into ReplayState.rounds (not the engine's round index)
    beat: Beat
    i: int = 0  # for DRAFT: the drafted token this beat reveals


def rounds_of(trace: ReplyTrace) -> list[RoundStory]:
    """Group the trace's tokens by round, in the order the engine emitted the rounds."""
    grouped: dict[int, list[TokenRecord]] = {}
    order: list[int] = []
    for tok in trace.tokens:
        if tok.round not in grouped:
            grouped[tok.round] = []
            order.append(tok.round)
        grouped[tok.round].append(tok)
    records = {r.index: r for r in trace.rounds}
    stories: list[RoundStory] = []
    text = ""
    for r in order:
        toks = grouped[r]
        drafted = sorted((t for t in toks if t.state in DRAFTED_STATES), key=lambda t: t.position)
        emitted = next((t for t in toks if t.state not in DRAFTED_STATES), None)
        story = RoundStory(index=r, drafted=tuple(drafted), emitted=emitted, record=records.get(r),
                           text_before=text)
        stories.append(story)
        text = story.text_after
    return stories


class ReplayState:
    """Which beat of which round is on screen. `index == -1` is before the first beat."""

    def __init__(self, trace: ReplyTrace) -> None:
        self.trace = trace
        self.rounds = rounds_of(trace)
        self.steps: list[Step] = [Step(k, beat, i) for k, story in enumerate(self.rounds)
                                  for beat, i in story.beats()]
        self.index = -1

    # -- moving ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.steps)

    @property
    def at_start(self) -> bool:
        return self.index < 0

    @property
    def at_end(self) -> bool:
        return self.index >= len(self.steps) - 1

    def seek(self, index: int) -> None:
        self.index = max(-1, min(index, len(self.steps) - 1))

    def step_forward(self) -> bool:
        """One beat on; False (and no change) at the end."""
        if self.at_end:
            return False
        self.index += 1
        return True

    def step_back(self) -> bool:
        if self.at_start:
            return False
        self.index -= 1
        return True

    def next_round(self) -> bool:
        """To the RESOLVE beat of the current round, or of the next one if already there."""
        if self.at_end:
            return False
        k = self.index + 1
        while k < len(self.steps) - 1 and self.steps[k].beat is not Beat.RESOLVE:
            k += 1
        self.index = k
        return True

    def prev_round(self) -> bool:
        """To the RESOLVE beat of the previous round (or to the start)."""
        if self.at_start:
            return False
        k = self.index - 1
        while k >= 0 and self.steps[k].beat is not Beat.RESOLVE:
            k -= 1
        self.index = k
        return True

    # -- what is on screen ------------------------------------------------------------------------------
    @property
    def step(self) -> Step | None:
        return self.steps[self.index] if self.index >= 0 else None

    @property
    def story(self) -> RoundStory | None:
        s = self.step
        return self.rounds[s.round] if s is not None else None

    def committed_text(self) -> str:
        """The reply as far as the replay has shown it: rounds resolved so far."""
        s = self.step
        if s is None:
            return ""
        story = self.rounds[s.round]
        return story.text_after if s.beat is Beat.RESOLVE else story.text_before

    def committed_tokens(self) -> list[TokenRecord]:
        """Tokens of the resolved rounds (rejected drafts included, where the draft proposed them)."""
        s = self.step
        if s is None:
            return []
        last = s.round if s.beat is Beat.RESOLVE else s.round - 1
        out: list[TokenRecord] = []
        for story in self.rounds[: last + 1]:
            out.extend(story.drafted)
            if story.emitted is not None:
                out.append(story.emitted)
        return out

    def caption(self) -> str:
        """One sentence for the beat on screen."""
        s, story = self.step, self.story
        if s is None or story is None:
            return "Press play (Space) or step (→) to replay the reply round by round."
        k = len(story.drafted)
        nodes = len(story.record.tree) if story.record is not None and story.record.tree else 0
        if s.beat is Beat.DRAFT:
            given = ("the context" if s.i == 0 else "the context and draft token 1" if s.i == 1
                     else f"the context and draft tokens 1–{s.i}")
            if nodes:
                tree = story.record.tree
                node = tree[s.i]
                parent = int(node["parent"])
                after = ("the context" if parent < 0 else
                         f"candidate {parent + 1} {quoted(tree[parent].get('text', ''))}")
                return (f"The draft grows its tree: candidate {s.i + 1} of {nodes}, {quoted(node.get('text', ''))}, "
                        f"after {after} (its most likely continuations first).")
            return f"The draft proposes token {s.i + 1} of {k}, given {given}."
        if s.beat is Beat.VERIFY:
            if nodes:
                return (f"The verifier checks all {nodes} candidates of the tree in one forward pass, each "
                        "seeing only its own branch.")
            if k == 1:
                return ("The verifier checks the drafted token in one forward pass "
                        "(2 positions: the draft plus one more).")
            return (f"The verifier checks all {k} drafted tokens in one forward pass "
                    f"({k + 1} positions: one per draft plus one more).")
        n = story.n_accepted
        emitted = story.emitted
        if not k:
            why = stop_words(story.record.stop if story.record else "off")
            return f"Nothing was drafted ({why}): the verifier decodes one token alone."
        if nodes:
            path = "none of its candidates" if n == 0 else f"a branch of {n} of its {nodes} candidates"
            end = ("ending on end-of-sequence" if emitted is None else
                   "and the verifier adds a bonus token" if emitted.state == TokenState.BONUS.value else
                   "then the verifier's own token")
            count = story.emitted_count
            return (f"The tree's verdict: the verifier agrees with {path}, {end}: {count} token"
                    f"{'s' if count != 1 else ''} for one call.")
        drafts = "The drafted token was" if k == 1 else f"All {k} drafts"
        if emitted is None:
            return f"{drafts} accepted, ending on end-of-sequence."
        if emitted.state == TokenState.BONUS.value:
            return f"{drafts} accepted, and the verifier adds a bonus token: {k + 1} tokens for one call."
        if n == 0:
            return ("The first draft is rejected" + ("" if k == 1 else " and everything after it is thrown away")
                    + ": the verifier's correction takes its place, 1 token for one call.")
        return (f"{n} of {k} accepted; the first rejected draft and everything after it are thrown away, "
                f"and the verifier's correction takes its place: {n + 1} tokens for one call.")


NO_BREAK = "\u00a0"  # a space the caption's line breaking keeps


def quoted(text: str) -> str:
    """A token's text in a caption's quotes, never broken across lines: its line breaks and tabs drawn as ↵ and ⇥
    (a newline token broke the caption inside its quotes), its spaces kept from wrapping, "∅" for no text."""
    if not text:
        return "“∅”"
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    shown = shown.replace(" ", "␣") if not shown.strip() else shown.replace(" ", NO_BREAK)
    return f"“{shown}”"


STOP_WORDS = {  # why drafting stopped (a DraftStop value), in words a room reads without the code
    "off": "speculation is off",
    "gamma": "it reached the round's length limit γ",
    "draft_cap": "the draft model reached its own cap on tokens per round",
    "tree": "the tree grew as large as pays on this machine",
    "cost": "checking any draft would cost more than it brings on this machine",
    "probe": "a plain step, timed again so drafts are weighed against this machine's current speed",
    "no_match": "prompt lookup found nothing to copy",
    "max_tokens": "the reply's token budget is spent",
    "confidence": "the draft was unsure",
    "eos": "the draft proposed end of sequence",
}


def stop_words(stop: str) -> str:
    return STOP_WORDS.get(stop, "drafting stopped")


def round_info(record: RoundRecord) -> str:
    """What a drafting round proposed, in a few words for the replay's header."""
    if record.tree:
        return f"a tree of {len(record.tree)} candidates, main line of {record.drafted}"
    return f"{record.drafted} drafted (limit γ = {record.gamma})"


def is_greedy(trace: ReplyTrace) -> bool:
    return float((trace.config or {}).get("temperature", 0.0) or 0.0) == 0.0
