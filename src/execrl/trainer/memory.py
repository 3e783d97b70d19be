"""Out of memory, said once: which phase of the run ran out, the peak it reached, and the two or
three settings that make that phase smaller, with their values now. The run's checkpoints are
written atomically, so the last one is whole whatever failed (the loop names it)."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from execrl.config import MasterConfig
from execrl.config.batch import plan as batch_plan
from execrl.rollout.engine import CacheTooLarge
from execrl.trainer.memory_plan import engine_slots

GiB = 1024 ** 3


class OutOfMemory(RuntimeError):
    """A phase ran out of memory; the message says what to change."""

    def __init__(self, phase: str, message: str):
        super().__init__(message)
        self.phase = phase


def out_of_memory(error: BaseException) -> bool:
    """A CUDA out-of-memory error, or the CPU allocator's (a RuntimeError of its own wording), or the engine's
    refusal of a KV cache larger than the device's free memory."""
    return isinstance(error, (torch.OutOfMemoryError, CacheTooLarge)) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error))


@contextmanager
def phase(name: str, cfg: MasterConfig):
    """Turns an out-of-memory error inside into OutOfMemory naming `name` (one of ADVICE's)."""
    try:
        yield
    except Exception as error:
        if isinstance(error, OutOfMemory) or not out_of_memory(error):
            raise
        raise OutOfMemory(name, f"out of memory in {name}: {error if isinstance(error, CacheTooLarge) else peak()}. "
                          "To need less: "
                          + "; ".join(ADVICE[name](cfg) or _state(cfg)) + ".") from None  # (none left to halve)


def peak() -> str:
    """The peak the device reached, against its size."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return "host memory ran out (the CPU allocator)"
    device = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(device).total_memory
    return (f"peak {torch.cuda.max_memory_allocated(device) / GiB:.1f} GiB allocated by torch of "
            f"{total / GiB:.1f} GiB on cuda:{device}")


def _halve(key: str, value: int, least: int = 1) -> str | None:
    """`key` at half its value; None where it is at `least` already, and halving it changes nothing (a long-context
    hunt's find: "policy.train_micro_batch_size=1 (now 1)")."""
    return f"{key}={max(least, value // 2)} (now {value})" if value > least else None


def _given(*advice: str | None) -> list[str]:
    return [a for a in advice if a is not None]


def _shorter(cfg: MasterConfig) -> str | None:
    half = _halve("policy.max_total_sequence_length", cfg.policy.max_total_sequence_length)
    return half and half + " (or a smaller policy.generation.max_new_tokens)"


def _generation(cfg: MasterConfig) -> list[str]:
    slots = _halve("policy.generation_batch_size", engine_slots(cfg))
    return _given(slots and slots + ": fewer sequences decoded at once, a smaller KV cache", _shorter(cfg))


def _scoring(cfg: MasterConfig) -> list[str]:
    p = cfg.policy
    if p.dynamic_batching.enabled:
        split = batch_plan(cfg).score_split  # (a budget's floor: one sequence at its longest, which then goes alone)
        return _given(_halve("policy.dynamic_batching.logprob_mb_tokens", split.tokens,
                             split.width(p.max_total_sequence_length)), _shorter(cfg))
    if p.logprob_batch_size == 1:  # (a pass of one sequence: token budgets would hold the same)
        return _given(_shorter(cfg))
    return [_halve("policy.logprob_batch_size", p.logprob_batch_size), "policy.dynamic_batching.enabled=true: "
            "micro-batches by tokens, so that long samples go fewer at a time"]


def _training(cfg: MasterConfig) -> list[str]:
    p = cfg.policy
    if p.dynamic_batching.enabled:
        split = batch_plan(cfg).train_split
        smaller = _halve("policy.dynamic_batching.train_mb_tokens", split.tokens,
                         split.width(p.max_total_sequence_length))
    else:
        smaller = _halve("policy.train_micro_batch_size", p.train_micro_batch_size)
        smaller = smaller and smaller + " (the same gradient: more accumulation)"
    out = _given(smaller)
    if not p.activation_checkpointing:
        out.append("policy.activation_checkpointing=true (recompute activations in the backward)")
    elif p.activation_checkpointing_scope == "mlp":
        out.append("policy.activation_checkpointing_scope=layer (recompute each layer, not only its MLP)")
    return out + _state(cfg)[:1] + ([] if smaller else _given(_shorter(cfg)))  # (one sequence a pass: shorter ones)


def _state(cfg: MasterConfig) -> list[str]:
    """What shrinks the weights, gradients and optimizer state the run holds throughout."""
    p, out = cfg.policy, []
    if not p.lora.enabled and not p.cpu_offload:
        out.append("policy.cpu_offload=true (the fp32 master weights and AdamW's state in host memory; a new run: "
                   "a resume keeps its checkpoint's)")
    if not p.lora.enabled:
        out.append("policy.lora.enabled=true (train adapters: no full-size gradients or optimizer state; a new run)")
    return out or ["a smaller model, or more GPUs (cluster.gpus_per_node: FSDP2 shards the weights and state)"]


def _reward_model(cfg: MasterConfig) -> list[str]:
    return _given(_halve("env.reward_model.batch_size", cfg.env.reward_model.batch_size),
                  "a smaller reward model (env.reward_model.model_name)")


def _warmup(cfg: MasterConfig) -> list[str]:
    return _given(_halve("warmup.batch_size", cfg.warmup.batch_size), *_state(cfg)[:1])


ADVICE = {
    "loading the model": _state,
    "generation": _generation,
    "validation": _generation,
    "scoring": _scoring,
    "training": _training,
    "the optimizer step": _state,
    "the reward model": _reward_model,
    "the warm-up": _warmup,
}
