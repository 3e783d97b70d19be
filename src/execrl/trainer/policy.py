"""The policy a run trains, built in one place: its parts depend on each other in this order, and
only here.

  1. weights and tokenizer       master dtype (LoRA: the frozen base in the compute dtype)
  2. LoRA adapters               wrap the base before any copy is made of it
  3. compute copy                every forward pass runs on it (the master itself where the dtypes agree;
                                 with policy.cpu_offload the master stays on the host, this on the GPU)
  4. reference model             a copy of the compute model as the run starts, before fusing (KL penalty)
  5. fused projections           the engine's wide GEMMs, on the compute model (one process only)
  6. LoRA master split           the fp32 adapters of a mixed-precision LoRA run, sharing the fused base
  7. activation checkpointing
  8. compiled layers             after fusing: the engine calls the compiled layers' submodules
  9. sharding                    FSDP2 over the training processes (in place)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from execrl.compiling import compile_settings
from execrl.config import ConfigError, MasterConfig
from execrl.lora import apply_lora
from execrl.models import SAVED_PROMPT, STOP_STRINGS, load_model_and_tokenizer, no_dropout, pick_device
from execrl.prompts import TEMPLATE_KWARGS, set_template_kwargs, template_notes
from execrl.rollout.completion import beyond_vocab, end_ids, unseen_stop
from execrl.rollout.fuse import fuse_projections
from execrl.tasks.problem import err
from execrl.trainer import distributed as dist
from execrl.trainer import precision, recompute
from execrl.trainer.offload import OffloadedWeights
from execrl.trainer.step import head_shortcut


@dataclass
class Policy:
    weights: precision.Weights  # master (optimizer, checkpoints) and compute (forward passes, rollouts)
    tokenizer: object
    ref: torch.nn.Module | None  # the KL penalty's reference, where it has one
    peft_model: object | None  # with policy.lora: the peft model around the base


def build_policy(cfg: MasterConfig) -> Policy:
    device = pick_device(cfg.policy.device)
    rounds = precision.stochastic_round(cfg)
    if rounds and dist.world_size() > 1:
        raise ValueError("policy.optimizer.kwargs.bf16_stochastic_round=true is not checked with several processes yet "
                         "(FSDP2 shards an fp32 master and its state instead): drop it")
    master_dtype, compute_dtype = precision.dtypes(cfg.policy.precision, device, rounds)
    # (several GPUs: FSDP2 shards the master and its state instead; the start-up note says so)
    lora, offload = cfg.policy.lora.enabled, cfg.policy.cpu_offload and dist.world_size() == 1
    if offload and (device.type != "cuda" or master_dtype == compute_dtype):
        raise ValueError("policy.cpu_offload=true moves the fp32 master off the GPU, and this run has no GPU (or "
                         "no separate master: float32): set policy.cpu_offload=false")
    model, tok = load_weights(cfg, compute_dtype if lora else master_dtype, "cpu" if offload else None)
    record_ends(model, tok, cfg.policy.generation.stop_token_ids, cfg.policy.generation.stop_strings,
                cfg.prompt.model_dump())
    head_shortcut(model)  # (how the trainer reads its logits, found while the model is whole: before FSDP shards it)
    sharded = dist.world_size() > 1
    # LoRA: fp32 adapters, unless they are the bf16 compute copy of a mixed-precision run (its
    # master: step 6)
    split_master = lora and not sharded and compute_dtype != master_dtype
    peft_model = apply_lora(model, cfg.policy.lora, cfg.grpo.seed, fp32=not split_master) if lora else None
    compute = precision.compute_model(model, compute_dtype, sharded=sharded, device=device if offload else None)
    ref = reference_model(cfg, compute)
    if cfg.policy.generation.backend == "execrl" and not sharded:
        # parameters stay separate views (before the optimizer); FSDP shards each parameter on its
        # own, and the engine then uses the separate projections
        fuse_projections(compute)
    if split_master:
        model = precision.lora_master(compute)
    if cfg.policy.activation_checkpointing:
        recompute.enable(compute, cfg.policy.activation_checkpointing_scope)
        if lora:  # the frozen embeddings give checkpointed layers no input that needs a gradient
            compute.enable_input_require_grads()
    if cfg.policy.torch_compile and next(compute.parameters()).is_cuda:
        compile_layers(compute, ref)
    model, ref = dist.shard(model, compute_dtype), dist.shard(ref, compute_dtype)  # in place: compute is model still
    weights = (OffloadedWeights if offload else precision.Weights)(model, compute, compute_dtype)
    return Policy(weights, tok, ref, peft_model)


def record_ends(model, tokenizer, stop_token_ids: list[int] | None, stop_strings: list[str] | None = None,
                prompt: dict | None = None) -> None:
    """policy.generation.stop_token_ids into the model's generation config (its EOS ids), so that a checkpoint's
    saved model ends its answers where the run's did (execrl eval, transformers' generate, a serving engine); its
    stop_strings as execrl_stop_strings, which execrl eval applies (a hunt's find: they were recorded nowhere; not as
    transformers' own stop_strings, whose generate then refuses to run without a tokenizer); `prompt`, the run's
    prompt section, as execrl_prompt (models.saved_prompt)."""
    gen = getattr(model, "generation_config", None)
    if gen is not None:
        setattr(gen, STOP_STRINGS, None if stop_strings is None else list(stop_strings))  # ([]: none, not the default)
        if prompt is not None:  # (how the run posed problems: execrl eval of a policy/ folder copied out of its run)
            setattr(gen, SAVED_PROMPT, prompt)
    if stop_token_ids and gen is not None:
        from execrl.rollout.completion import end_ids

        gen.eos_token_id = end_ids(model, tokenizer, stop_token_ids)


def load_weights(cfg: MasterConfig, dtype: torch.dtype, device: str | None = None):
    """The model (hub id, local directory or builtin) in `dtype` (on `device`: policy.device's
    unless given), and its tokenizer with the config's chat template."""
    p = cfg.policy
    model, tok = load_model_and_tokenizer(p.model_name, device or p.device, str(dtype).split(".")[1],
                                          offline=cfg.offline or None,
                                          tokenizer=p.tokenizer.name if p.tokenizer.name != p.model_name else None,
                                          seed=cfg.grpo.seed, config_overrides=p.hf_config_overrides)
    if p.tokenizer.chat_template:
        tok.chat_template = p.tokenizer.chat_template
    if p.tokenizer.chat_template_kwargs is not None:  # (null: the tokenizer's own, those a checkpoint was saved with)
        set_template_kwargs(tok, p.tokenizer.chat_template_kwargs)  # (kept in the checkpoints' tokenizer_config.json)
    elif getattr(tok, TEMPLATE_KWARGS, None) and dist.is_main():  # (config.yaml's null: said, as what the prompts use)
        err.print(f"note: the chat template's kwargs are {getattr(tok, TEMPLATE_KWARGS)}, as {p.model_name} was "
                  "saved with them (policy.tokenizer.chat_template_kwargs={} for none)", markup=False)
    unknown, vocab = beyond_vocab(model, tok, p.generation.stop_token_ids)
    if unknown:
        raise ConfigError(f"policy.generation.stop_token_ids: {unknown[0]} is not a token of {p.model_name} "
                          f"({vocab:,} tokens): it would end no answer; give the id the model ends a turn with (its "
                          "tokenizer's convert_tokens_to_ids of the end-of-turn token)")
    if hidden := unseen_stop(tok, p.generation.stop_strings, end_ids(model, tok, p.generation.stop_token_ids)):
        stop, token, i = hidden
        raise ConfigError(f"policy.generation.stop_strings: {stop!r} holds {token}, a special token of "
                          f"{p.model_name} (id {i}) that completions are read without (as vLLM reads them): it never "
                          f"ends an answer at that token. Stop on the token: policy.generation.stop_token_ids=[{i}], "
                          "and drop the stop string")
    # (raises where the template refuses the prompt)
    for note in template_notes(tok, cfg.prompt.system_prompt, cfg.prompt.answer_format):
        if dist.is_main():
            err.print(note, markup=False)
    dropped = no_dropout(model)
    if dropped and dist.is_main():
        err.print(f"policy: dropout off ({', '.join(dropped)} were above 0 in the model's config): the engine "
                  "samples without it, and the trainer scores a sample as it was sampled", markup=False)
    return model, tok


def reference_model(cfg: MasterConfig, compute: torch.nn.Module) -> torch.nn.Module | None:
    """The policy as it loads, frozen; after a supervised warm-up the warmed-up policy (loop.warm_up, which saves
    it for a resumed run: checkpoint.load_reference). None without a KL penalty, and with LoRA, whose reference is
    the base itself, adapters off (execrl.lora.base_only)."""
    if cfg.loss_fn.reference_policy_kl_penalty > 0 and not cfg.policy.lora.enabled:
        return copy.deepcopy(compute).eval().requires_grad_(False)
    return None


def compile_layers(compute: torch.nn.Module, ref: torch.nn.Module | None) -> None:
    """torch.compile each decoder layer (eager where compilation fails, with torch's warning):
    generic in batch and length from the first compilation (micro-batches differ in both), with
    inductor's fusing of the norms' mixed-order reductions not conditioned on the tokens in a
    micro-batch (that condition guards each graph on its size: one more compilation when a longer
    micro-batch crosses it)."""
    import torch._inductor.config as inductor_config

    compile_settings()
    options = {"triton.mix_order_reduction_non_strict_mode": True} \
        if hasattr(inductor_config.triton, "mix_order_reduction_non_strict_mode") else None
    for layer in [*compute.get_decoder().layers, *(ref.get_decoder().layers if ref is not None else [])]:
        layer.compile(dynamic=True, options=options)
