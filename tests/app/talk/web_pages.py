"""Hand-built traces for the web page's tests: every token state, a draft tree, and text that HTML would misread."""

from __future__ import annotations

from app.trace import ReplyTrace, RoundRecord, TokenRecord

# (text, state) per round: drafts first, then the verifier's own token, as the engine emits them.
SPECULATIVE = [
    [("Hello", "accepted"), (" <b>world", "accepted"), ("</script>", "rejected"), (",", "corrected")],
    [(" fine\n", "accepted"), ("  <!-- day", "bonus")],
    [("\u2028&amp;!", "plain")],
]


def _tree(group: list[tuple[str, str]]) -> list[dict]:
    """The round's drafts as a tree's main line, and one candidate beside it that the verifier never reached."""
    drafts = [(text, state) for text, state in group if state in ("accepted", "rejected")]
    nodes = [{"token_id": i, "text": text, "parent": i - 1, "draft_prob": 0.5, "target_prob": 0.5,
              "accept_prob": 0.5, "accepted": state == "accepted"} for i, (text, state) in enumerate(drafts)]
    nodes.append({"token_id": 99, "text": "beside", "parent": -1, "draft_prob": 0.1, "target_prob": None,
                  "accept_prob": None, "accepted": False})
    return nodes


def hand_trace(rounds: list[list[tuple[str, str]]], seconds_per_round: float = 0.05,
               trees: bool = False) -> ReplyTrace:
    trace = ReplyTrace(verifier="tiny-verifier", drafter="tiny-draft")
    t, after, drafted, accepted = 0.0, 0, 0, 0
    for index, group in enumerate(rounds):
        t += seconds_per_round
        n_accepted = sum(1 for _, s in group if s == "accepted")
        n_drafted = sum(1 for _, s in group if s in ("accepted", "rejected"))
        own = [s for _, s in group if s not in ("accepted", "rejected")]
        after += n_accepted + len(own)
        drafted, accepted = drafted + n_drafted, accepted + n_accepted
        trace.rounds.append(RoundRecord(
            index=index, drafted=n_drafted, accepted=n_accepted, emitted_state=own[0] if own else "accepted",
            stop="gamma", gamma=4, draft_s=seconds_per_round / 2, verify_s=seconds_per_round / 2, overhead_s=0.0,
            t_end=t, tokens_after=after, tree=_tree(group) if trees and n_drafted else []))
        for position, (text, state) in enumerate(group):
            trace.tokens.append(TokenRecord(token_id=position, text=text, state=state, round=index,
                                            position=position, draft_prob=None, target_prob=None, accept_prob=None,
                                            t=t))
    trace.stats = {"new_tokens": after, "tokens_per_s": after / t, "drafted": drafted,
                   "accepted": accepted, "acceptance_rate": accepted / drafted if drafted else 0.0,
                   "mean_accepted_length": after / len(rounds)}
    trace.stop_reason = "eos"
    return trace


def plain_trace(texts: list[str], seconds_per_token: float) -> ReplyTrace:
    return hand_trace([[(text, "plain")] for text in texts], seconds_per_token)
