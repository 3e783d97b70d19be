"""Activation checkpointing (`policy.activation_checkpointing`), by scope
(`policy.activation_checkpointing_scope`):

- layer: each decoder layer's forward recomputed in the backward (transformers' gradient checkpointing): only the
  layers' inputs stay, the least memory;
- mlp: only each layer's MLP up to its down projection recomputed (gate/up and the activation; torch's selective
  activation checkpointing): the MLP's intermediate tensors, most of a layer's activations, are dropped, while
  attention and the down projection are not run twice. Less recompute than `layer`, more memory.

Either way the gradients are the same as without checkpointing (the same ops on the same values, run again)."""

from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from execrl.config.errors import ConfigError

_GEMMS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
          torch.ops.aten.baddbmm.default}


def enable(model: torch.nn.Module, scope: str) -> None:
    """Checkpointing of `scope` on `model`'s decoder layers (in place)."""
    if scope == "layer":
        model.gradient_checkpointing_enable()
        return
    layers = model.get_decoder().layers
    hidden = model.config.hidden_size
    for i, layer in enumerate(layers):
        mlp = getattr(layer, "mlp", None)
        if not isinstance(mlp, torch.nn.Module):
            raise ConfigError(f"policy.activation_checkpointing_scope=mlp: decoder layer {i} of "
                              f"{type(model).__name__} has no `mlp` module to recompute; set "
                              "policy.activation_checkpointing_scope=layer")
        mlp.forward = functools.partial(_recomputed, mlp.forward, hidden)  # (an instance attribute: the class's
        # forward is untouched, and torch.compile traces through it)


def _recomputed(forward, hidden: int, *args, **kwargs):
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    contexts = functools.partial(create_selective_checkpoint_contexts, functools.partial(_keep_output, hidden))
    return checkpoint(forward, *args, use_reentrant=False, context_fn=contexts, **kwargs)


def _keep_output(hidden: int, ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """Keep the products whose rows are `hidden` wide (the down projection's, a LoRA adapter's up to it): the
    backward's recompute then stops at the activation, the down projection's input; recompute the rest."""
    if op in _GEMMS and args[-1].shape[-1] == hidden:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE
