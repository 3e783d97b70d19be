"""The optimizer, by NeMo RL's `policy.optimizer.name` (a class by import path, as NeMo RL
instantiates it) and `kwargs`: torch.optim.AdamW, or a low-memory one such as torchao's
(torchao.optim.AdamW8bit: 8-bit moments; torchao.optim._AdamW with bf16_stochastic_round: bf16
weights updated without a master copy). With policy.cpu_offload, AdamW on the host (trainer/offload.py)."""

from __future__ import annotations

import importlib

import torch

from execrl.trainer.offload import OffloadedAdamW, OffloadedWeights
from execrl.trainer.precision import Weights

# fused AdamW kernels of other libraries (NeMo RL's automodel recipes name Transformer Engine's): the same
# update, run as torch.optim.AdamW; their own settings (bf16 moments, master copies) are not read
FUSED_ADAMW = ("transformer_engine.pytorch.optimizers.fused_adam.FusedAdam",
               "transformer_engine.pytorch.optimizers.FusedAdam", "apex.optimizers.FusedAdam")
FUSED_ONLY = ("master_weights", "store_param_remainders", "exp_avg_dtype", "exp_avg_sq_dtype", "master_weight_dtype",
              "capturable", "use_decoupled_grad", "set_grad_none", "adam_w_mode", "bias_correction")


def optimizer_class(name: str) -> type:
    """The class `name` names (AdamW alone also works); ValueError naming the fix otherwise."""
    if name.lower() in ("adamw", "torch.optim.adamw") or name in FUSED_ADAMW:
        return torch.optim.AdamW
    module, _, cls = name.rpartition(":" if ":" in name else ".")  # (module.Class, or module:Class as own code is)
    try:
        found = getattr(importlib.import_module(module), cls) if module else None
    except ImportError as e:
        hint = " (pip install torchao)" if module.startswith("torchao") else ""
        raise ValueError(f"policy.optimizer.name {name!r}: cannot import {module}{hint}: {e}") from None
    except AttributeError:
        raise ValueError(f"policy.optimizer.name {name!r}: {module} has no {cls!r}") from None
    if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
        raise ValueError(f"policy.optimizer.name {name!r} is not an optimizer class: name one by its import path, "
                         "e.g. torch.optim.AdamW or torchao.optim.AdamW8bit")
    return found


def make_optimizer(weights: Weights, name: str, kwargs: dict, lr: float | None = None) -> torch.optim.Optimizer:
    """The optimizer of the master's trainable parameters (`lr`: instead of the kwargs' one)."""
    kwargs = dict(kwargs) | ({"lr": lr} if lr is not None else {})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    kwargs.pop("foreach", None), kwargs.pop("fused", None)
    if name in FUSED_ADAMW:
        if kwargs.get("adam_w_mode") is False or kwargs.get("bias_correction") is False:
            raise ValueError(f"policy.optimizer.name {name}: adam_w_mode=false or bias_correction=false is not "
                             "AdamW; set policy.optimizer.name=torch.optim.Adam (L2 in the gradient) or remove them")
        kwargs = {k: v for k, v in kwargs.items() if k not in FUSED_ONLY}
    if isinstance(weights, OffloadedWeights):  # (config.checks allows AdamW alone with policy.cpu_offload)
        return OffloadedAdamW(weights, **kwargs)
    cls, params = optimizer_class(name), [p for p in weights.master.parameters() if p.requires_grad]
    fused = fused_kernel(cls, params) and not kwargs.get("differentiable")  # (torch's fused kernel is not)
    return cls(params, **kwargs, **({"fused": True} if fused else {}))


def fused_kernel(cls: type, params: list[torch.Tensor]) -> bool:
    """torch's fused Adam(W) kernel for these parameters: plain (not sharded) GPU tensors. The same update
    as the foreach and for-loop implementations up to fp32 rounding (parameters within 1e-8 of the
    for-loop AdamW that NeMo RL's configs name after 3 steps at 1.5B), 2.4-2.8x faster than foreach at
    0.5B-1.5B on an H200 (bench/trainer_parts.py). policy.optimizer.kwargs foreach and fused, an
    implementation choice, are not read."""
    from torch.distributed.tensor import DTensor

    return (cls in (torch.optim.AdamW, torch.optim.Adam) and bool(params)
            and all(p.is_cuda and p.is_floating_point() and not isinstance(p, DTensor) for p in params))
