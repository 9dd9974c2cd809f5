"""Continuous batching: one step loop shared by every running sequence.

A single task runs steps while any sequence is waiting or running. A step
admits the sequences that arrived since the last one (their prefill is paid in
this step and yields their first token, as in chunked prefill), advances every
running sequence by one verify step, then waits out the step's modelled cost
(:class:`~deepseekbench._engine._costs.CostModel`) minus the real compute it
took, and only then hands each sequence its tokens — so tokens become visible
at the end of the step that produced them.

Steps that follow one another are paced on a deadline chain: a step's modelled
cost is counted from the previous step's deadline, not from when the loop got
round to it, so the engine's own per-step Python work outside the step (handing
out tokens, writing each stream's SSE chunk, the timer's overshoot) is absorbed
into the modelled cost instead of added to it. Back-to-back steps therefore take
the closed form's cost on average (:meth:`CostModel.step_costs`), as long as that
work is shorter than a step; a step that starts more than one modelled step late
(the machine stalled) restarts the chain rather than running the next steps
short to catch up.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from deepseekbench._engine._costs import CostModel
from deepseekbench._engine._metrics import EngineMetrics
from deepseekbench._engine._model import EOS_CH
from deepseekbench._engine._speculative import Decoder, StepOutcome


@dataclass(frozen=True, slots=True)
class Emission:
    """What one step delivered to one sequence.

    ``reasoning`` / ``content``: text produced in the step; ``tokens``: tokens
    produced (EOS counted only under ``EngineConfig.eos_counted``, never
    streamed); ``drafted`` / ``accepted``: draft tokens checked / kept by the
    step's verify; ``finish_reason``: ``"stop"``, ``"length"`` or
    ``None`` while running; ``step_ms``: the step's modelled cost (ms);
    ``admitted_s``: ``time.perf_counter()`` when the step that admitted the sequence
    began (s): a sequence submitted while a step runs waits for it to end, and that
    wait is its queue time (vLLM's ``queue_time_ms``: arrival to being scheduled).
    """

    reasoning: str
    content: str
    tokens: int
    drafted: int
    accepted: int
    finish_reason: str | None
    step_ms: float
    admitted_s: float | None = None


@dataclass(slots=True)
class Sequence:
    """One request's decoding state inside the scheduler."""

    ctx: str
    decoder: Decoder
    prompt_tokens: int
    reasoning: str
    max_tokens: int
    send: MemoryObjectSendStream[Emission]
    min_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache
    think: Decoder | None = None  # decoded reasoning (EngineConfig.decoded_reasoning)
    think_ctx: str = ""
    think_left: int = 0
    generated: int = 0
    prefilled: bool = False
    admitted_s: float | None = None  # perf_counter() when its admitting step began
    cancelled: bool = False
    finish_reason: str | None = field(default=None)

    def cancel(self) -> None:
        """Stop decoding this sequence at the next step (client gone, stop string)."""
        self.cancelled = True


class Scheduler:
    """Runs the shared step loop; ``submit`` adds a sequence to the next step."""

    def __init__(
        self,
        cost: CostModel,
        metrics: EngineMetrics,
        *,
        model_draft: bool,
        kv_cache_tokens: int = 65536,
        eos_counted: bool = False,
    ) -> None:
        self._kv_tokens = kv_cache_tokens
        self._eos_counted = eos_counted
        self._cost = cost
        self._metrics = metrics
        self._model_draft = model_draft
        self._pending: list[Sequence] = []
        self._running: list[Sequence] = []
        self._wakeup = anyio.Event()
        self._deadline: float | None = None  # the last step's end on the chain (s)

    def submit(
        self,
        ctx: str,
        decoder: Decoder,
        *,
        prompt_tokens: int,
        reasoning: str,
        max_tokens: int,
        min_tokens: int = 0,
        cached_tokens: int = 0,
        think: tuple[Decoder, str, int] | None = None,
    ) -> tuple[Sequence, MemoryObjectReceiveStream[Emission]]:
        """Queue a sequence; returns it (for ``cancel``) and the stream of its emissions.

        ``ctx``: model context; ``reasoning``: forced reasoning text emitted first
        (one token per step); ``max_tokens``: output cap (tokens, ≥ 1);
        ``min_tokens``: below this many output tokens an end-of-sequence is
        replaced by a line break and decoding goes on (``ignore_eos`` sets it to
        ``max_tokens``); ``cached_tokens``: prompt tokens found in the prefix
        cache (not prefilled again); ``think``: decoded reasoning instead of forced
        (its decoder, starting model context and cap in tokens), decoded first.
        """
        send, receive = anyio.create_memory_object_stream[Emission](math.inf)
        seq = Sequence(ctx, decoder, prompt_tokens, reasoning, max_tokens, send, min_tokens)
        seq.cached_tokens = min(cached_tokens, prompt_tokens)
        if think is not None:
            seq.think, seq.think_ctx, seq.think_left = think
        self._metrics.admitted(prompt_tokens)
        self._pending.append(seq)
        self._metrics.waiting(len(self._pending))
        self._wakeup.set()
        return seq, receive

    async def run(self) -> None:
        """Step forever (until cancelled); idles without cost while nothing runs."""
        while True:
            if not self._pending and not self._running:
                self._deadline = None  # idle: the next step starts a new chain
                self._wakeup = anyio.Event()
                await self._wakeup.wait()
            await self._step()

    async def _step(self) -> None:
        started = time.perf_counter()
        new, self._pending = self._pending, []
        batch: list[Sequence] = []
        for seq in (*self._running, *new):
            if seq.cancelled:
                self._metrics.finished("abort")
                seq.send.close()
            else:
                if seq.admitted_s is None:
                    seq.admitted_s = started
                batch.append(seq)
        self._running = batch
        self._metrics.running(len(batch))
        self._metrics.waiting(0)
        held = sum(s.prompt_tokens + s.generated for s in batch)
        self._metrics.kv_usage(min(1.0, held / self._kv_tokens))
        if not batch:
            return
        prefill = sum(s.prompt_tokens - s.cached_tokens for s in batch if not s.prefilled)
        results = [(s, self._advance(s)) for s in batch]
        draft_tokens = max((out.drafted for _, (out, _) in results), default=0)
        # vLLM's tokens per engine step: prompts whose prefill ends here, plus tokens produced
        prompts_done = sum(s.prompt_tokens for s in batch if not s.prefilled)
        cost_ms = self._cost.step_ms(
            len(batch), draft_tokens, prefill, model_draft=self._model_draft
        )
        cost_s = cost_ms / 1000.0
        chained = self._deadline is not None and started - self._deadline < cost_s
        anchor = self._deadline if chained and self._deadline is not None else started
        self._deadline = anchor + cost_s
        await anyio.sleep(max(0.0, self._deadline - time.perf_counter()))
        still: list[Sequence] = []
        emissions = [(seq, self._account(seq, out, text, cost_ms)) for seq, (out, text) in results]
        self._metrics.stepped(prompts_done + sum(e.tokens for _, e in emissions))
        for seq, emission in emissions:
            if seq.cancelled:
                self._metrics.finished("abort")
                seq.send.close()
                continue
            try:
                seq.send.send_nowait(emission)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                seq.cancel()
                self._metrics.finished("abort")
                continue
            if emission.finish_reason is not None:
                self._metrics.finished(emission.finish_reason)
                seq.send.close()
            else:
                still.append(seq)
        # sequences submitted during the sleep stay in _pending for the next step
        self._running = still

    def _advance(self, seq: Sequence) -> tuple[StepOutcome, str]:
        """Run one step of ``seq``: reasoning, the prefill's token, or a verify."""
        if seq.think is not None and seq.think_left > 0:
            out = seq.think.step(seq.think_ctx, seq.think_left)
            text = "".join(t for t in out.tokens if t != EOS_CH)
            seq.think_ctx += text
            seq.think_left = 0 if EOS_CH in out.tokens else seq.think_left - len(text)
            if text:
                return StepOutcome((), out.drafted, out.accepted), text
        if seq.reasoning:
            text, seq.reasoning = seq.reasoning[0], seq.reasoning[1:]
            return StepOutcome((), 0, 0), text
        budget = seq.max_tokens - seq.generated
        # below min_tokens an end-of-sequence is an ordinary token (Decoder.step)
        forced = max(0, seq.min_tokens - seq.generated)
        if not seq.prefilled:
            return seq.decoder.step(seq.ctx, 1, forced), ""
        return seq.decoder.step(seq.ctx, budget, forced), ""

    def _account(
        self, seq: Sequence, out: StepOutcome, reasoning_text: str, cost_ms: float
    ) -> Emission:
        seq.prefilled = True
        eos = EOS_CH in out.tokens  # below min_tokens the decoder emitted a line break
        tokens = [t for t in out.tokens if t != EOS_CH]
        content = "".join(tokens)
        seq.ctx += content
        # an engine that counts the end-of-sequence token (vLLM) decoded one more token
        produced = len(tokens) + len(reasoning_text) + int(eos and self._eos_counted)
        seq.generated += produced
        self._metrics.generated(produced)
        self._metrics.verified(out.drafted, out.accepted)
        finish: str | None = None
        if eos:
            finish = "stop"
        elif seq.generated >= seq.max_tokens:
            finish = "length"
        return Emission(
            reasoning_text,
            content,
            produced,
            out.drafted,
            out.accepted,
            finish,
            cost_ms,
            seq.admitted_s,
        )
