"""Greedy decoding of one request: target only, or the speculative transaction.

Target only
    The prompt is one caller (split by the runtime into micro-batches of the arm's
    capacity U); each further token is one single-row caller.

Speculative transaction (greedy)
    Each cycle the draft proposes up to k tokens (one draft caller per proposal;
    committed tokens the draft has not seen yet are fed first). The target then
    evaluates the pending token plus the proposals in ONE caller batch. The longest
    prefix of proposals that agrees with the target's own greedy tokens is accepted;
    the target's token at the first disagreement is the correction, and when all k
    agree the target's next token is the bonus. Rejected positions are removed from
    both KV caches (``llama_memory_seq_rm``) before the next cycle. The new pending
    token (correction or bonus) is visible but not yet in the target's KV: it is
    consumed exactly once, as the first row of the next verification batch.

Both stop on an end-of-generation token (also when it arrives inside an accepted
run of proposals) or at the cap, truncating exactly at that token.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.arms import Arm
from ..core.endpoint import Endpoint
from ..core.errors import AdmissionError, DecodeError
from ..core.layouts import LAYOUTS
from ..native.runtime import COUNTERS, Capture, Context, ContextSpec, Model, greedy, layout_refusal, top2_margin

COUNTER_KEYS = (*COUNTERS, *(f"micrographs_{layout}" for layout in LAYOUTS))


def greedy_continuation(
    ctx: Context,
    model: Model,
    logits,
    pos: int,
    cap: int,
    *,
    each_row: Callable[[Any], None] | None = None,
    after_step: Callable[[int], None] | None = None,
) -> list[int]:
    """Micro-batch-1 greedy continuation from a pending state, in the continuation phase.

    ``logits`` (the row after the last submitted position, ``pos`` the next position) gives
    output 0; each output is the argmax of its row, and the next row comes from decoding that
    token alone, until an EOG token or ``cap`` outputs. ``each_row`` sees every row an output
    is taken from; ``after_step`` gets the new position after each single-token decode.
    """
    ctx.set_phase("continuation")
    generated: list[int] = []
    while True:
        if each_row is not None:
            each_row(logits)
        tok = greedy(logits)
        generated.append(tok)
        if model.is_eog(tok) or len(generated) >= cap:
            return generated
        logits = ctx.decode([tok], pos)[0]
        pos += 1
        if after_step is not None:
            after_step(pos)


@dataclass
class RequestStats:
    proposals: int = 0
    accepted: int = 0
    rollbacks: int = 0  # cycles that removed rejected positions
    cycles: int = 0
    target: dict = field(default_factory=dict)  # target context counters for this request
    draft: dict = field(default_factory=dict)

    def flat(self) -> dict:
        out = {
            "proposals": self.proposals,
            "accepted": self.accepted,
            "rollbacks": self.rollbacks,
            "cycles": self.cycles,
        }
        for k in COUNTER_KEYS:
            out[k] = int(self.target.get(k, 0))
        out["draft_callers"] = int(self.draft.get("callers", 0))
        out["draft_micrographs"] = int(self.draft.get("micrographs", 0))
        return out

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.proposals if self.proposals else None


@dataclass
class RequestResult:
    endpoint: Endpoint
    stats: RequestStats
    margins: list[float]  # top-2 logit margin of the target at each generated index
    prompt_len: int
    seconds: float  # compute time inside the engine (not the timed client interval)


class ArmRunner:
    """Holds the contexts of one arm (loaded once) and runs requests on them."""

    def __init__(self, arm: Arm, target: Model, draft: Model | None = None, *, target_capture: Capture | None = None):
        if arm.speculative and draft is None:
            raise DecodeError(f"arm {arm.name} is speculative and needs a draft model")
        self.arm = arm
        self.target_model = target
        self.draft_model = draft if arm.speculative else None
        n_batch = max(512, arm.k + 1)
        self.tctx = Context(
            target,
            ContextSpec(
                n_ctx=arm.n_ctx,
                n_batch=n_batch,
                n_ubatch=min(arm.ub, n_batch),
                threads=arm.threads,
                kv_type=arm.kv_type,
                layout=arm.layout,
                role="target",
                mask=arm.mask,
            ),
            capture=target_capture,
        )
        self.dctx = None
        if self.draft_model is not None:
            self.dctx = Context(
                self.draft_model,
                ContextSpec(
                    n_ctx=arm.n_ctx,
                    n_batch=n_batch,
                    n_ubatch=min(arm.draft_ub, n_batch),
                    threads=arm.threads,
                    kv_type=arm.kv_type,
                    layout=arm.layout,
                    role="draft",
                    mask=arm.mask,
                ),
            )

        # a layout the device refuses is refused here, before any request (never run elsewhere)
        for model, ctx in ((target, self.tctx), (self.draft_model, self.dctx)):
            why = layout_refusal(model, ctx.spec) if ctx is not None else None
            if why:
                self.close()
                raise AdmissionError(
                    f"arm {arm.name}: layout {arm.layout} refused on {model.placement['device']}: {why}"
                )

    def close(self) -> None:
        self.tctx.close()
        if self.dctx is not None:
            self.dctx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _prefill(ctx: Context, prompt: list[int]):
        """Submit the prompt in callers of at most n_batch tokens; return the last row's logits."""
        logits = None
        nb = ctx.spec.n_batch
        for s in range(0, len(prompt), nb):
            logits = ctx.decode(prompt[s : s + nb], s, outputs="last")
        return logits

    @staticmethod
    def _check_kv(ctx: Context, expected: int, who: str) -> None:
        got = ctx.pos_max() + 1
        if got != expected:
            raise DecodeError(f"{who} KV holds {got} positions, the transaction committed {expected}")

    def _check_prompt(self, prompt: list[int], cap: int) -> None:
        if not prompt:
            raise DecodeError("empty prompt")
        if len(prompt) + cap + self.arm.k + 1 > self.arm.n_ctx:
            raise DecodeError(f"prompt of {len(prompt)} tokens plus cap {cap} exceeds the context of {self.arm.n_ctx}")
        nv = self.target_model.n_vocab
        bad = [t for t in prompt if not 0 <= t < nv]
        if bad:
            raise DecodeError(f"prompt token {bad[0]} outside the vocabulary (0..{nv - 1})")

    def _finish(self, generated: list[int], cap: int) -> Endpoint:
        """Truncate at the first EOG token or at the cap."""
        for i, t in enumerate(generated[:cap]):
            if self.target_model.is_eog(t):
                return Endpoint(tuple(generated[: i + 1]), True, "eog")
        return Endpoint(tuple(generated[:cap]), False, "cap")

    # ------------------------------------------------------------------ requests
    def run(self, prompt: list[int], cap: int | None = None) -> RequestResult:
        cap = int(cap or self.arm.cap)
        self._check_prompt(prompt, cap)
        t0 = time.perf_counter()
        if self.arm.speculative:
            ep, stats, margins = self._run_spec(prompt, cap)
        else:
            ep, stats, margins = self._run_target(prompt, cap)
        return RequestResult(ep, stats, margins, len(prompt), time.perf_counter() - t0)

    def _run_target(self, prompt: list[int], cap: int):
        t = self.tctx
        t.begin_request()
        t.reset_counters()
        logits = self._prefill(t, prompt)[0]
        margins: list[float] = []
        generated = greedy_continuation(
            t,
            self.target_model,
            logits,
            len(prompt),
            cap,
            each_row=lambda row: margins.append(top2_margin(row)),
            after_step=lambda pos: self._check_kv(t, pos, "target"),
        )
        stats = RequestStats(target=t.counters())
        return self._finish(generated, cap), stats, margins

    def _run_spec(self, prompt: list[int], cap: int):
        t, d = self.tctx, self.dctx
        assert d is not None
        k = self.arm.k
        t.begin_request()
        d.begin_request()
        t.reset_counters()
        d.reset_counters()
        stats = RequestStats()

        logits = self._prefill(t, prompt)[0]
        t.set_phase("continuation")
        first = greedy(logits)
        margins = [top2_margin(logits)]
        committed = list(prompt) + [first]  # prompt + generated
        n_prompt = len(prompt)
        n_t = n_prompt  # target KV length: everything but the pending token
        # the draft sees the prompt in its own prefill phase
        self._prefill(d, prompt)
        d.set_phase("continuation")
        n_d = n_prompt  # draft KV length

        def n_gen() -> int:
            return len(committed) - n_prompt

        def done() -> bool:
            return self.target_model.is_eog(committed[-1]) or n_gen() >= cap

        while not done():
            stats.cycles += 1
            k_eff = min(k, cap - n_gen() - 1)  # the verification yields up to k_eff + 1 tokens
            proposals, n_d = self._propose(d, committed, n_d, k_eff)
            stats.proposals += len(proposals)

            # target: pending token + proposals in one caller
            pending = committed[-1]
            assert n_t == len(committed) - 1, "pending token must be the only committed token outside the KV"
            rows = t.decode([pending, *proposals], n_t, outputs="all")
            n_t += 1 + len(proposals)
            accepted, new_tokens = self._verify(rows, proposals, margins)
            stats.accepted += accepted
            # positions of rejected proposals leave both caches
            keep = len(committed) + accepted  # pending + accepted proposals are now in the target KV
            if n_t > keep:
                t.seq_rm(keep)
                n_t = keep
                stats.rollbacks += 1
            if n_d > keep:
                d.seq_rm(keep)
                n_d = keep
            self._check_kv(t, n_t, "target")
            self._check_kv(d, n_d, "draft")
            committed.extend(new_tokens)

        generated = committed[n_prompt:]
        stats.target = t.counters()
        stats.draft = d.counters()
        return self._finish(generated, cap), stats, margins[:cap]

    @staticmethod
    def _propose(d: Context, committed: list[int], n_d: int, k_eff: int) -> tuple[list[int], int]:
        """The draft's ``k_eff`` greedy proposals, after it catches up with the committed tokens it has not
        seen; returns them and the draft's new KV length (no proposal, and nothing fed, when ``k_eff`` is 0)."""
        proposals: list[int] = []
        if k_eff > 0:
            feed = committed[n_d:]
            dl = d.decode(feed, n_d)[0]
            n_d += len(feed)
            while True:
                p = greedy(dl)
                proposals.append(p)
                if len(proposals) == k_eff:
                    break
                dl = d.decode([p], n_d)[0]
                n_d += 1
        return proposals, n_d

    def _verify(self, rows: Any, proposals: list[int], margins: list[float]) -> tuple[int, list[int]]:
        """The target's verification of the proposals from its rows (the pending token's, then each
        proposal's): the proposals accepted and the tokens it commits, up to the first correction, the bonus
        token or an accepted EOG. Appends each row's margin read to ``margins``."""
        accepted = 0
        new_tokens: list[int] = []
        for i in range(len(proposals) + 1):
            y = greedy(rows[i])
            margins.append(top2_margin(rows[i]))
            if i < len(proposals) and proposals[i] == y:
                accepted += 1
                new_tokens.append(y)
                if self.target_model.is_eog(y):
                    break  # EOG inside the accepted run ends the request there
                continue
            new_tokens.append(y)  # correction (i < k) or bonus (i == k)
            break
        return accepted, new_tokens
