"""The engine's side of guided decoding: each constrained slot's matcher, and the masks of the next token.

Before each decode step the host reads the token each constrained slot sampled last, advances its matcher by it and
writes the slot's next mask into a buffer the step reads on the device (an unconstrained slot's row allows every
token). Sampling then draws from the masked, renormalized distribution and reports logprobs under it
(execrl.rollout.sampling), which is also what the trainer scores (execrl.guided.Guide.masks).

Shapes: S slots, W int32 words per mask (execrl.guided).
"""

from __future__ import annotations

import torch


class SlotMasks:
    def __init__(self, slots: int, vocab: int, device: torch.device):
        self.slots, self.vocab, self.device = slots, vocab, device
        self.matchers: list = [None] * slots  # slot -> (guide, matcher) while a constrained request holds it
        self.host: torch.Tensor | None = None  # [S, W] masks as the host writes them (pinned on GPUs)
        self.masks: torch.Tensor | None = None  # [S, W] on the device: what the decode step reads
        self._executor = None

    @property
    def executor(self):
        if self._executor is None:
            import llguidance

            self._executor = llguidance.LLExecutor()  # (80% of the cores, up to 32)
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
        for s, g in zip(slots, guides):
            if g is None:
                self.matchers[s] = None
            if self.host is not None:
                self.host[s] = -1

    def any(self) -> bool:
        return any(m is not None for m in self.matchers)

    def bitmask(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """[S or len(rows), W] int32 on the device: the tokens each slot may sample next."""
        return self.masks if rows is None else self.masks[rows]

    def refresh(self, slots: list[int], tokens: list[int] | None = None) -> None:
        """Advance the constrained ones of `slots` by their last sampled token (`tokens`, one per slot; None: they
        sampled nothing yet), then write their next masks and send them to the device."""
        import llguidance.torch as lt

        parallel = []
        for n, s in enumerate(slots):
            if self.matchers[s] is None:
                continue
            guide, matcher = self.matchers[s]
            if tokens is not None and not matcher.is_stopped():
                matcher.consume_token(tokens[n])
            if matcher.is_stopped():
                guide.fill(matcher, self.host, s)  # only the end of the sequence may follow
            else:
                parallel.append((matcher, s))
        if parallel:  # llguidance's threads, without the GIL
            lt.fill_next_token_bitmask_par(self.executor, parallel, self.host)
        if self.masks is not None:
            self.masks.copy_(self.host, non_blocking=True)

    def release(self, slot: int) -> None:
        self.matchers[slot] = None
