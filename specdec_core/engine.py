"""The speculative decoding loop: prefill, then rounds of draft -> verify -> accept -> roll back -> emit.

Generation is a generator of typed events (events.py); the CLI, the benchmarks and the app consume it.
The engine knows token ids, not chat messages (chat.py builds prompts), and touches each model only
through kv.CachedForward, which also holds the one rollback rule.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafters import Draft, Drafter, ModelDrafter, attach_drafter, model_part
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
)
from specdec_core.kv import CachedForward
from specdec_core.sampling import accept_drafts, processed_probs
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


def _output_rows(model: torch.nn.Module) -> int:
    head = model.get_output_embeddings()
    return int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)


def _synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so that timings belong to the step that caused them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class Engine:
    """A verifier, an optional drafter, and the KV caches they keep between replies."""

    def __init__(self, verifier: LoadedModel, drafter: Drafter | None = None):
        self.verifier = verifier
        self.target = CachedForward(verifier.model, verifier.device)
        self.generator = torch.Generator(device=verifier.device)
        self._token_texts: dict[int, str] = {}
        self.drafter: Drafter | None = None
        self.set_drafter(drafter)

    def set_drafter(self, drafter: Drafter | None) -> None:
        self.drafter = drafter
        # Distributions are compared over the token ids both sides know; padded logit rows are cut.
        rows = [len(self.verifier.tokenizer), _output_rows(self.verifier.model)]
        runs_model = model_part(drafter)
        if isinstance(runs_model, ModelDrafter):
            rows += [len(runs_model.draft.tokenizer), _output_rows(runs_model.draft.model)]
        self.vocab_size = min(rows)
        attach_drafter(drafter, self.target)  # a draft head reads the verifier's hidden states

    def reset_caches(self) -> None:
        self.target.reset()
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
        attach_drafter(self.drafter, self.target)
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
            self.target.logits_for(prompt)
            reused = len(prompt) - self.target.last_run
            if self.drafter is not None and self._speculating(config, controls):
                self.drafter.prefill(prompt)
            _synchronize(self.verifier.device)
        except (RuntimeError, torch.OutOfMemoryError) as error:
            yield self._failed(error, "", [], stats)
            return
        stats.prefill_s = time.perf_counter() - start
        yield Prefilled(prompt_tokens=len(prompt), reused_tokens=reused, prefill_s=stats.prefill_s)

        ids = list(prompt)
        new_ids: list[int] = []
        text = ""
        stream = TextStream(tokenizer, prompt)
        gamma = config.gamma
        round_index = 0
        while True:
            if controls.cancelled:
                stop = StopReason.CANCELLED
                break
            remaining = budget - len(new_ids)
            if remaining <= 0:
                stop = StopReason.MAX_TOKENS if budget == config.max_new_tokens else StopReason.CONTEXT
                break
            try:
                events, committed = self._round(round_index, ids, gamma, remaining, config, controls,
                                                stream, stats)
            except (RuntimeError, torch.OutOfMemoryError) as error:
                yield self._failed(error, text, new_ids, stats)
                return
            verdict = events[1] if isinstance(events[0], RoundDrafted) else events[0]
            assert isinstance(verdict, RoundVerified)
            if config.adaptive and verdict.drafted:
                # transformers' heuristic: +2 after a fully accepted round, -1 after a rejection.
                full = verdict.n_accepted == len(verdict.drafted)
                gamma = min(gamma + 2, config.gamma_max) if full else max(1, gamma - 1)
            ids.extend(committed)
            new_ids.extend(committed)
            for event in events:
                if isinstance(event, TokenCommitted):
                    text += event.text
                yield event
            round_index += 1
            if committed and committed[-1] in eos:
                stop = StopReason.EOS
                break
            hit = next((s for s in config.stop_strings if s and s in text), None)
            if hit is not None:
                text = text[:text.index(hit)]
                stop = StopReason.STOP_STRING
                break
        if stop is not StopReason.STOP_STRING:
            text = tokenizer.decode(new_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        yield Finished(stop_reason=stop, text=text, token_ids=tuple(new_ids), stats=stats.snapshot())

    def _speculating(self, config: GenerationConfig, controls: Controls) -> bool:
        wanted = config.speculate if controls.speculate is None else controls.speculate
        return wanted and self.drafter is not None

    def _round(self, round_index: int, ids: list[int], gamma: int, remaining: int, config: GenerationConfig,
               controls: Controls, stream: TextStream, stats: StatsAccumulator
               ) -> tuple[list[Event], list[int]]:
        """One verifier call. Returns the round's events and the token ids it commits."""
        round_start = time.perf_counter()
        vocab = self.vocab_size
        speculating = self._speculating(config, controls)

        # 2. Draft: up to gamma tokens, leaving room in the budget for the correction or bonus token.
        if speculating:
            assert self.drafter is not None
            draft = self.drafter.propose(ids, min(gamma, remaining - 1), config, vocab,
                                         self.verifier.eos_token_ids)
        else:
            draft = Draft((), torch.empty(0, vocab), (), DraftStop.OFF, 0.0)
        k = len(draft.token_ids)

        # 3. Verify: one forward pass over the last committed token and the k drafts gives the verifier's
        #    distribution at each drafted position plus one more (the bonus position).
        verify_start = time.perf_counter()
        logits = self.target.logits_for(ids + list(draft.token_ids), n_last=k + 1)[:, :vocab]
        target_probs = processed_probs(logits, config)
        _synchronize(self.verifier.device)
        verify_s = time.perf_counter() - verify_start

        # 4. Accept: a prefix of the drafts, then the verifier's correction or bonus token.
        drafted = torch.tensor(draft.token_ids, dtype=torch.long, device=target_probs.device)
        acceptance = accept_drafts(drafted, draft.draft_probs.to(target_probs.device), target_probs,
                                   self.generator)
        n = acceptance.n_accepted
        eos = self.verifier.eos_token_ids
        ends_on_eos = n == k and k > 0 and draft.token_ids[-1] in eos  # nothing follows an accepted EOS
        committed = list(draft.token_ids[:n]) if ends_on_eos else [*draft.token_ids[:n], acceptance.next_token]

        # 5. Roll back happens lazily: the next logits_for() call cuts both caches back to the longest
        #    prefix that matches the committed sequence (kv.py), dropping the rejected drafts' positions.

        # 6. Emit. People read the probabilities: when greedy the sampled distributions are one-hots,
        #    so show the verifier's softmax instead; the acceptance probability stays the rule's own.
        shown = torch.softmax(logits.float(), -1) if config.greedy else target_probs
        top = torch.topk(shown, min(config.top_alternatives, vocab), dim=-1) if config.top_alternatives else None
        alternatives = [self._alternatives(top, row) for row in range(k + 1)] if top is not None else \
            [()] * (k + 1)
        shown_target = shown[torch.arange(k, device=shown.device), drafted].tolist() if k else []
        verdicts = tuple(
            DraftedTokenVerdict(token_id=t, text="", draft_prob=draft.display_probs[i], target_prob=shown_target[i],
                                accept_prob=acceptance.accept_probs[i], accepted=i < n)
            for i, t in enumerate(draft.token_ids))
        events: list[Event] = []
        tokens: list[Event] = []
        for i in range(n):
            tokens.append(TokenCommitted(
                token_id=draft.token_ids[i], text=stream.push(draft.token_ids[i]), state=TokenState.ACCEPTED,
                round_index=round_index, position=i, draft_prob=draft.display_probs[i],
                target_prob=shown_target[i], accept_prob=acceptance.accept_probs[i],
                alternatives=alternatives[i]))
        rejected_texts = stream.peek(draft.token_ids[n:])
        for j, i in enumerate(range(n, k)):
            tokens.append(TokenRejected(
                token_id=draft.token_ids[i], text=rejected_texts[j], round_index=round_index, position=i,
                draft_prob=draft.display_probs[i], target_prob=shown_target[i],
                accept_prob=acceptance.accept_probs[i], alternatives=alternatives[i]))
        if not ends_on_eos:
            state = TokenState.PLAIN if k == 0 else (TokenState.BONUS if n == k else TokenState.CORRECTED)
            token = acceptance.next_token
            tokens.append(TokenCommitted(
                token_id=token, text=stream.push(token), state=state, round_index=round_index, position=n,
                draft_prob=None, target_prob=float(shown[n, token]), accept_prob=None,
                alternatives=alternatives[n]))
            emitted_state = state
        else:
            emitted_state = TokenState.ACCEPTED
        verdicts = tuple(
            DraftedTokenVerdict(token_id=v.token_id, text=self._text_of(tokens, i), draft_prob=v.draft_prob,
                                target_prob=v.target_prob, accept_prob=v.accept_prob, accepted=v.accepted)
            for i, v in enumerate(verdicts))
        if self.drafter is not None and speculating:
            self.drafter.observe(k, n)
        overhead_s = max(0.0, time.perf_counter() - round_start - draft.draft_s - verify_s)
        stats.add_round(drafted=k, accepted=n, emitted=len(committed), draft_s=draft.draft_s,
                        verify_s=verify_s, overhead_s=overhead_s)
        if speculating:
            events.append(RoundDrafted(round_index=round_index, token_ids=draft.token_ids,
                                       texts=tuple(v.text for v in verdicts), draft_probs=draft.display_probs,
                                       stop=draft.stop, gamma=gamma, draft_s=draft.draft_s))
        events.append(RoundVerified(
            round_index=round_index, drafted=verdicts, n_accepted=n, emitted_token_id=committed[-1],
            emitted_state=emitted_state, stop=draft.stop, gamma=gamma if speculating else 0,
            draft_s=draft.draft_s, verify_s=verify_s, overhead_s=overhead_s))
        events.extend(tokens)
        return events, committed

    @staticmethod
    def _text_of(tokens: list[Event], position: int) -> str:
        for event in tokens:
            if isinstance(event, (TokenCommitted, TokenRejected)) and event.position == position \
                    and event.state is not TokenState.CORRECTED and event.state is not TokenState.BONUS:
                return event.text
        return ""

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
