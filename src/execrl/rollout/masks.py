"""The engine's side of guided decoding: each constrained slot's matcher, and the masks of the next token.

Before each decode step the host reads the token each constrained slot sampled last, advances its matcher by it and
writes the slot's next mask into a buffer the step reads on the device (an unconstrained slot's row allows every
token). Sampling then draws from the masked, renormalized distribution and reports logprobs under it
(execrl.rollout.sampling), which is also what the trainer scores (execrl.guided.Guide.masks).

Shapes: S slots, W int32 words per mask (execrl.guided).
"""

from __future__ import annotations

import os

import torch


class SlotMasks:
    def __init__(self, slots: int, vocab: int, device: torch.device):
        self.slots, self.vocab, self.device = slots, vocab, device
        self.matchers: list = [None] * slots  # slot -> (guide, matcher) while a constrained request holds it
        self.ended: set[int] = set()  # slots whose constraint is complete, their rows written (the end only)
        self.host: torch.Tensor | None = None  # [S, W] masks as the host writes them (pinned on GPUs)
        self.masks: torch.Tensor | None = None  # [S, W] on the device: what the decode step reads
        self._executor = None
        self.stream = self.ready = None  # (GPUs) the masks' copy stream, and its copy's event

    @property
    def executor(self):
        if self._executor is None:
            import llguidance

            # every core: the calling thread waits for them (llguidance's default: 80% of the cores, up to 32)
            self._executor = llguidance.LLExecutor(max(1, min(32, os.cpu_count() or 1)))
        return self._executor

    def _buffers(self, words: int) -> None:
        if self.host is None or self.host.shape[1] != words:
            self.host = torch.full((self.slots, words), -1, dtype=torch.int32,
                                   pin_memory=self.device.type == "cuda")
            self.masks = torch.full((self.slots, words), -1, dtype=torch.int32, device=self.device)

    def assign(self, slots: list[int], guides: list) -> None:
        """New requests in `slots`, each constrained by its guide (None: free)."""
        for guide in {id(g): g for g in guides if g is not None}.values():
            self._buffers(guide.words)
            mine = [s for s, g in zip(slots, guides) if g is guide]
            for s, m in zip(mine, guide.matchers(len(mine))):
                self.matchers[s] = (guide, m)
        self.ended.difference_update(slots)
        for s, g in zip(slots, guides):
            if g is None:
                self.matchers[s] = None
        if self.host is not None:
            self.host[slots] = -1

    def any(self) -> bool:
        return any(m is not None for m in self.matchers)

    def bitmask(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """[S or len(rows), W] int32 on the device: the tokens each slot may sample next."""
        return self.masks if rows is None else self.masks[rows]

    def refresh(self, slots: list[int], tokens: list[int] | None = None) -> None:
        """Advance the constrained ones of `slots` by their last sampled token (`tokens`, one per slot; None: they
        sampled nothing yet), then write their next masks and send them to the device."""
        self.advance(slots, tokens)
        self.send()

    def advance(self, slots: list[int], tokens: list[int] | None = None) -> None:
        """refresh's host work: the matchers advanced and the masks written, both in llguidance's threads (without
        the GIL)."""
        import llguidance.torch as lt

        mine = [s for s in slots if self.matchers[s] is not None]
        if tokens is not None:
            last = dict(zip(slots, tokens))
            moving = [s for s in mine if not self.matchers[s][1].is_stopped()]
            ok = lt.consume_token_par(self.executor, [(self.matchers[s][1], last[s]) for s in moving]) if moving else []
            if not all(ok):
                s = next(s for s, good in zip(moving, ok) if not good)
                guide, matcher = self.matchers[s]
                hint = " (an end id that is also ordinary text in this vocabulary?)" if last[s] in guide.eos_ids else ""
                raise RuntimeError(f"guided decoding: sampled token {last[s]} does not continue its constraint{hint}: "
                                   f"{matcher.get_error()[:300]}")
        parallel = []
        for s in mine:
            guide, matcher = self.matchers[s]
            if not matcher.is_stopped():
                parallel.append((matcher, s))
            elif s not in self.ended:  # only the end of the sequence may follow, from now on
                guide.fill(matcher, self.host, s)
                self.ended.add(s)
        if parallel:
            lt.fill_next_token_bitmask_par(self.executor, parallel, self.host)

    def send(self) -> None:
        """The masks to the device. On a GPU the copy runs on a stream of its own, beside the step's forward (which
        the host's work overlaps), and the current stream waits for it before what it runs next (the sampling). The
        host synchronized with the last step that read the masks before it wrote these, so the copy waits for
        nothing."""
        if self.masks is None:
            return
        if self.device.type != "cuda":
            self.masks.copy_(self.host)
            return
        if self.stream is None:
            self.stream, self.ready = torch.cuda.Stream(self.device), torch.cuda.Event()
        with torch.cuda.stream(self.stream):
            self.masks.copy_(self.host, non_blocking=True)
            self.ready.record()
        torch.cuda.current_stream().wait_event(self.ready)

    def release(self, slot: int) -> None:
        self.matchers[slot] = None
        self.ended.discard(slot)
