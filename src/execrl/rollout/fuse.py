"""One matrix for each layer's q/k/v projections and one for its gate/up projections, with no second
copy.

Decode multiplies a few hundred rows by every weight: five small GEMMs per layer cost far more than
two wide ones. `fuse_projections` moves each group's weights into one tensor and makes the model's
parameters *views* of it, so the trainer still sees (and the optimizer updates in place) the usual
separate parameters, while the engine reads the same memory as one matrix. Call it before building
the optimizer. With LoRA the base layers are fused (the adapters stay apart: the engine adds their
low-rank path itself, execrl.lora)."""

from __future__ import annotations

import torch
from torch import nn

from execrl.lora import base_layer
from execrl.rollout.models import architecture_of, has_family


def _rehome(linears: list[nn.Linear], name: str) -> None:
    linears = [base_layer(m) for m in linears]
    parts = [getattr(m, name) for m in linears]
    if any(p is None for p in parts):
        return
    joined = torch.cat([p.detach() for p in parts])  # [sum of rows, ...]: the only storage from now on
    start = 0
    for m, p in zip(linears, parts):
        setattr(m, name, nn.Parameter(joined[start:start + p.shape[0]], requires_grad=p.requires_grad))
        start += p.shape[0]


def fuse_projections(model) -> None:
    """Each layer's q/k/v and gate/up groups (as the model's architecture names them) into one
    tensor each; nothing for a family the engine does not run (it refuses the model itself)."""
    if not has_family(model):
        return
    arch = architecture_of(model)
    for layer in arch.layers:
        groups = arch.groups(layer)
        for group in (groups["qkv"], groups.get("gate_up", [])):
            if len(group) > 1:
                _rehome(group, "weight")
                _rehome(group, "bias")


def joined(linears: list[nn.Linear], name: str = "weight") -> torch.Tensor | None:
    """The group's parameters as one tensor when they are adjacent views of one storage (after
    fuse_projections); of the base layers, with LoRA."""
    parts = [getattr(base_layer(m), name) for m in linears]
    if any(p is None for p in parts):
        return None
    first = parts[0]
    at = first.storage_offset()
    for p in parts:
        if p.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or p.storage_offset() != at \
                or not p.is_contiguous():
            return None
        at += p.numel()
    rows = sum(p.shape[0] for p in parts)
    return first.detach().new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (rows, *first.shape[1:]))
