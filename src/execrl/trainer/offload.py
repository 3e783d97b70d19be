"""policy.cpu_offload: the fp32 master weights and AdamW's state in host memory, so that a GPU holds
only what forward and backward need.

  GPU   the bf16 compute model (forward, backward, rollouts) and the fp32 gradients it accumulates
  host  the fp32 master model (page-locked), AdamW's two fp32 moments, a ring of pinned gradient buffers

Per parameter that moves 12 of mixed precision's 18 bytes off the GPU: 7.6B parameters hold 15 GB
of bf16 weights and 30 GB of fp32 gradients on the GPU, and 91 GB on the host. The optimizer step
runs on the CPU in chunks of about `chunk_bytes`, pipelined: while the CPU updates chunk k, chunk
k + 1's gradients come down on one CUDA stream and chunk k - 1's new weights go up on another.
Numerically it is the same AdamW in fp32 (the CPU's fused kernel instead of the GPU's).

NeMo RL's `policy.dtensor_cfg.cpu_offload` (FSDP2's CPUOffloadPolicy) also keeps the gradients on
the host; here they stay on the GPU in fp32 so that gradient accumulation over micro-batches costs
no PCIe traffic (one transfer per optimizer step). With several GPUs the setting has no effect: FSDP2
shards the master and its state over them instead (named at start-up)."""

from __future__ import annotations

import torch

from execrl.trainer.precision import Weights


def pinned(numel: int) -> torch.Tensor:
    """fp32 host memory, page-locked (the GPU copies to and from it asynchronously), in one
    allocation: torch's pinned allocator rounds each allocation up to a power of two."""
    return torch.empty(numel, dtype=torch.float32, pin_memory=True)


def page_lock(t: torch.Tensor) -> None:
    """Page-locks a host tensor's memory in place (cudaHostRegister), so that copies to and from
    the GPU run asynchronously. In place, not pin_memory(): that copies, into an allocation rounded
    up to a power of two. A tensor whose pages another one already locked stays as it is (its
    copies then wait for the host: only small tensors share pages)."""
    if not t.is_pinned():
        torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)


class OffloadedWeights(Weights):
    """The master on the host, pinned; gradients accumulated on the GPU in fp32 (`grads`)."""

    def __init__(self, master: torch.nn.Module, compute: torch.nn.Module, compute_dtype: torch.dtype):
        self.grads: list[torch.Tensor | None] = []
        super().__init__(master, compute, compute_dtype)
        for m, _ in self._pairs:
            page_lock(m)
        self.grads = [None] * len(self._pairs)

    @torch.no_grad()
    def _take(self, i: int, c: torch.Tensor) -> None:
        if self.grads[i] is None:
            self.grads[i] = c.grad.float()
        else:
            self.grads[i].add_(c.grad)
        c.grad = None

    def zero_grad(self, optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)
        self.grads = [None] * len(self._pairs)

    def clip(self, max_norm: float) -> torch.Tensor:
        """As clip_grad_norm_, over the GPU gradients."""
        grads = [g for g in self.grads if g is not None]
        if not grads:
            return torch.zeros(())
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm

    def step(self, optimizer) -> None:
        optimizer.step()  # (OffloadedAdamW: the new weights go up as it goes)

    @torch.no_grad()
    def refresh(self) -> None:
        for m, c in self._pairs:
            c.copy_(m)


class OffloadedAdamW(torch.optim.AdamW):
    """AdamW over the host master, one parameter group per chunk (the learning-rate schedule sees
    them all alike), stepped chunk by chunk as the gradients arrive."""

    def __init__(self, weights: OffloadedWeights, chunk_bytes: int = 1 << 30, ring: int = 3, **kwargs):
        self.weights = weights
        kwargs = {k: v for k, v in kwargs.items() if k not in ("fused", "foreach")}  # (the CPU's fused kernel)
        chunks: list[list[int]] = [[]]  # indices into weights._pairs
        size = 0  # bytes of the last chunk
        for i, (m, _) in enumerate(weights._pairs):
            if chunks[-1] and size + m.numel() * 4 > chunk_bytes:
                chunks.append([])
                size = 0
            chunks[-1].append(i)
            size += m.numel() * 4
        self.chunks = chunks
        super().__init__([{"params": [weights._pairs[i][0] for i in c]} for c in chunks], fused=True, **kwargs)
        largest = max(sum(weights._pairs[i][0].numel() for i in c) for c in chunks)
        ring = pinned(largest * min(ring, len(chunks)))
        self.buffers = list(ring.view(-1, largest))
        # the new weights go up in fp32 and are cast on the GPU (a cast on the host would copy from
        # unpinned memory, synchronously)
        self.staging = torch.empty(largest, dtype=torch.float32, device=next(weights.compute.parameters()).device)
        self.down, self.up = torch.cuda.Stream(), torch.cuda.Stream()

    @torch.no_grad()
    def _fetch(self, k: int) -> torch.cuda.Event:
        """Chunk k's gradients into ring buffer k % ring, on the down stream; its master parameters'
        .grad become views of it."""
        buffer, at = self.buffers[k % len(self.buffers)], 0
        with torch.cuda.stream(self.down):
            for i in self.chunks[k]:
                m, g = self.weights._pairs[i][0], self.weights.grads[i]
                if g is None:
                    m.grad = None
                    continue
                view = buffer[at:at + m.numel()].view_as(m)
                view.copy_(g, non_blocking=True)
                m.grad, at = view, at + m.numel()
            done = torch.cuda.Event()
            done.record()
        return done

    @torch.no_grad()
    def step(self, closure=None):
        groups, n = self.param_groups, len(self.chunks)
        self.down.wait_stream(torch.cuda.current_stream())  # the gradients are complete
        pending = {k: self._fetch(k) for k in range(min(len(self.buffers), n))}
        try:
            for k in range(n):
                pending.pop(k).synchronize()
                self.param_groups = [groups[k]]
                super().step()
                for i in self.chunks[k]:
                    self.weights._pairs[i][0].grad = None
                if k + len(self.buffers) < n:  # its buffer is free again
                    pending[k + len(self.buffers)] = self._fetch(k + len(self.buffers))
                with torch.cuda.stream(self.up):
                    at = 0
                    for i in self.chunks[k]:
                        m, c = self.weights._pairs[i]
                        staged = self.staging[at:at + m.numel()].view_as(m)
                        staged.copy_(m, non_blocking=True)
                        c.copy_(staged)
                        at += m.numel()
        finally:
            self.param_groups = groups
        torch.cuda.current_stream().wait_stream(self.up)
        self.up.synchronize()  # the host may change the master again only after it has gone up
        return None
