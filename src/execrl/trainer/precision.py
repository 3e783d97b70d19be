"""Mixed precision as NeMo RL means `policy.precision: bfloat16`: bf16 compute, fp32 master weights,
fp32 gradient accumulation and fp32 optimizer state.

Why: an AdamW update is about `lr` in size. Stored in bf16 (8 bits of mantissa) a weight moves only
when the update exceeds half a bf16 step of it, so at lr 1e-6 almost no weight moves at all;
accumulating gradients over many micro-batches in bf16 loses more. Here:

  master   the fp32 model: the optimizer's parameters and state, gradients accumulated in fp32, what checkpoints save
  compute  a bf16 copy of it: every forward and backward (the trainer's and the rollout engine's), so training runs
           at bf16 speed; after each backward its gradients are added into the master's in fp32 and freed, and
           after each optimizer step the master's weights are copied into it (the engine's CUDA graphs keep working:
           the copy writes into the same tensors).

Costs over pure bf16, per parameter: 4 bytes of fp32 master, 4 of fp32 gradient, and Adam's two
moments in fp32 (8 instead of 4): 18 bytes plus a transient bf16 gradient, against 8. Under FSDP2
(several processes) the same arrangement is FSDP's MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32): sharded fp32 parameters are the master, gathered in bf16 for compute, gradients
reduced in fp32 (trainer/distributed.py); master and compute are then one module. With fp32 (the CPU
default) master and compute are one module too and nothing here does anything.

With LoRA (execrl.lora) only the adapters train: compute is the model with bf16 adapters over its
frozen bf16 base, and master a second model that shares that base (the same tensors: no copy) and
holds fp32 copies of the adapters (`lora_master`). Under FSDP2 the adapters are fp32 in the one
model, gathered in bf16 like the rest.
"""

from __future__ import annotations

import copy

import torch

from execrl.models import pick_dtype

PURE_LOW_PRECISION = False  # True: no fp32 master (the pre-issue-18 behaviour, kept only for the benchmarks)


class Weights:
    """The model as the optimizer sees it (master) and as forward passes use it (compute)."""

    def __init__(self, master: torch.nn.Module, compute: torch.nn.Module, compute_dtype: torch.dtype):
        self.master, self.compute, self.compute_dtype = master, compute, compute_dtype
        self._pairs = []
        if compute is not master:
            names = [n for n, _ in master.named_parameters()]
            assert names == [n for n, _ in compute.named_parameters()], "master and compute models differ"
            self._pairs = [(m, c) for (_, m), (_, c) in zip(master.named_parameters(), compute.named_parameters())
                           if m is not c]  # (LoRA: the base is one set of tensors)
        for i, (_, c) in enumerate(self._pairs):  # each gradient moves to the master as the backward makes it
            c.register_post_accumulate_grad_hook(lambda c, i=i: self._take(i, c))

    @torch.no_grad()
    def _take(self, i: int, c: torch.Tensor) -> None:
        """Compute parameter i's gradient, added to its master's in fp32, then freed: at most one
        parameter's compute-dtype gradient exists at a time (for a 7B model, 14 GiB fewer at the
        backward's end)."""
        m = self._pairs[i][0]
        if m.grad is None:
            m.grad = c.grad.to(m.dtype)
        else:
            m.grad.add_(c.grad)
        c.grad = None

    def accumulate_grads(self) -> None:
        """After a backward of the compute model: any of its gradients not yet moved to the master
        (the hooks move them as they come)."""
        for i, (_, c) in enumerate(self._pairs):
            if c.grad is not None:
                self._take(i, c)

    def zero_grad(self, optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)

    def clip(self, max_norm: float) -> torch.Tensor:
        """Clips the master's gradients to a global norm of `max_norm`; their norm before."""
        return torch.nn.utils.clip_grad_norm_(self.master.parameters(), max_norm)

    def step(self, optimizer, skip: torch.Tensor | None = None) -> None:
        """The optimizer's step, and the new weights into the compute copy. `skip` (a bool [] on the device;
        torch's fused Adam(W) alone reads it): where True no weight or moment moves, decided by the kernel
        (GradScaler's found_inf flag), without the host reading the flag."""
        if skip is None:
            optimizer.step()
        else:
            optimizer.found_inf = skip.float()
            try:
                optimizer.step()
            finally:
                del optimizer.found_inf
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """After an optimizer step (or loading a checkpoint): the master's weights into the compute
        copy, in one foreach copy (2.4x faster than a copy_ per tensor at 0.5B, whose 290 kernels are
        mostly launch time: bench/trainer_parts.py)."""
        if self._pairs:
            torch._foreach_copy_([c for _, c in self._pairs], [m for m, _ in self._pairs])


def stochastic_round(cfg) -> bool:
    """The optimizer rounds bf16 weights stochastically (torchao's bf16_stochastic_round): the bf16
    model is its own master."""
    return bool(cfg.policy.optimizer.kwargs.get("bf16_stochastic_round"))


def dtypes(precision: str, device: torch.device, stochastic_round: bool = False) -> tuple[torch.dtype, torch.dtype]:
    """(master, compute) dtypes for policy.precision on this device. `stochastic_round`: the
    optimizer rounds its bf16 updates stochastically (torchao's bf16_stochastic_round), so that an
    update smaller than half a bf16 step still moves a weight on average: no fp32 master then (the
    bf16 model is the master)."""
    if precision in ("float16", "fp16"):
        raise ValueError("policy.precision float16 needs loss scaling, which execrl does not do: use bfloat16 "
                         "(or float32)")
    compute = pick_dtype(device, precision)
    if stochastic_round and compute != torch.bfloat16:
        raise ValueError(f"policy.optimizer.kwargs.bf16_stochastic_round=true rounds bf16 weights, and this run's are "
                         f"{str(compute).split('.')[1]} (policy.precision={precision} on {device.type}): set "
                         "policy.precision=bfloat16, or drop bf16_stochastic_round")
    master = compute if PURE_LOW_PRECISION or stochastic_round else torch.float32
    return master, compute


def compute_model(master: torch.nn.Module, compute_dtype: torch.dtype, sharded: bool,
                  device: torch.device | None = None) -> torch.nn.Module:
    """The model forward passes run on: a copy of the master with its parameters in the compute dtype (on `device`:
    the master's own unless given), or the master itself where they are one (fp32; or sharded, where FSDP's mixed
    precision casts). Tensor by tensor: no second full-precision copy is made. Buffers keep their dtype, as
    from_pretrained and FSDP's mixed precision keep them: rotary frequencies rounded to bf16 put a position 8,192
    tokens in up to ~10 radians off, a model that neither eval nor serving runs, and one process trained another
    model than several."""
    here = next(master.parameters()).device
    device = here if device is None else torch.device(device)
    if sharded or (next(master.parameters()).dtype == compute_dtype and device == here):
        return master
    memo: dict[int, torch.Tensor] = {}
    for t in [*master.parameters(), *master.buffers()]:
        if id(t) not in memo:  # (a tied head: one tensor, copied once)
            cast = isinstance(t, torch.nn.Parameter) and t.is_floating_point()
            new = t.detach().to(device, compute_dtype if cast else t.dtype)
            memo[id(t)] = torch.nn.Parameter(new, t.requires_grad) if isinstance(t, torch.nn.Parameter) else new
    return copy.deepcopy(master, memo)


def lora_master(compute: torch.nn.Module) -> torch.nn.Module:
    """The master of a LoRA model in mixed precision: the same modules, sharing compute's frozen
    parameters (the base, not copied), with fp32 copies of its trainable ones (the adapters)."""
    shared = {id(p): p for p in compute.parameters() if not p.requires_grad}
    master = copy.deepcopy(compute, memo=shared)
    with torch.no_grad():
        for p in master.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    return master
