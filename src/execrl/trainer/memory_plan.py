"""The memory plan: before anything loads, the peak one GPU will reach, by part, and when it does not
fit the GPU, the settings that would. `execrl train --dry-run` and the start of a run print it.

The model's shapes come from its config alone (an empty model on the meta device: no weights read).
Bytes per part, on one GPU (P parameters, T trained ones, W processes):

  weights         P x 2 (bf16 compute copy; fp32 on a CPU)
  master          T x 4 (fp32; on the host with policy.cpu_offload; / W under FSDP2; none with
                  bf16_stochastic_round, where the bf16 weights are their own master)
  gradients       T x 4 (fp32; / W; bf16, 2, with bf16_stochastic_round)
  optimizer       T x 8 (AdamW's two fp32 moments; host with cpu_offload; / W); torchao's AdamW8bit
                  T x 2, AdamW4bit T x 1; bf16 moments T x 4 with bf16_stochastic_round
  reference       P x 2 (with a KL penalty, not with LoRA)
  KV cache        slots x max_total_sequence_length x layers x 2 x kv_heads x head_dim x 2
  activations     one micro-batch's tokens (its rows at max_total_sequence_length; where a group's prompt is
                  forwarded once, its rows' completions at max_new_tokens and the prompt once) x (with
                  activation checkpointing: layers x hidden x 2, each layer's input kept, + intermediate x 2,
                  the recomputed layer's MLP; without: layers x (8 hidden + 4 intermediate) x 2)
  transients      the largest parameter's gradient in bf16 and fp32 (6 bytes per element), the LM head's
                  logits chunk (1 GiB), with cpu_offload the staging chunk (the largest of 1 GiB and the
                  largest parameter in fp32)

The peak is the training phase's (every part) or generation's (no gradients or activations), the larger.
The constants are fitted to measured peaks (bench/README.md, memory options); the plan is an estimate."""

from __future__ import annotations

from dataclasses import dataclass

from execrl.config import MasterConfig
from execrl.config.batch import gpus
from execrl.config.batch import plan as batch_plan
from execrl.config.tree import attribute, set_attribute

GiB = 1024 ** 3
LOGITS_CHUNK = GiB  # the trainer's chunked LM head (algo/logprobs.py) and the engine's prefill logits


@dataclass(frozen=True)
class Shape:
    params: int
    largest: int  # elements of the largest parameter
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    linear_in_out: int  # the decoder's linear layers' (in + out) summed: LoRA's parameters per unit of rank
    shares_prompts: bool = False  # its passes can pack a group's prompt once (trainer/shared_prompt.shareable)


def shape_of(cfg: MasterConfig) -> Shape | None:
    """The policy's shapes from its config (None where its config.json is not on this machine)."""
    import torch
    from transformers import AutoModelForCausalLM

    from execrl.models import TINY_CODERS, build_tiny_model, kv_shape, local_config, tiny_tokenizer, with_overrides
    from execrl.trainer.shared_prompt import shareable

    p = cfg.policy
    if p.model_name in TINY_CODERS:
        with torch.device("meta"):
            model = build_tiny_model(tiny_tokenizer(p.model_name), hidden=128, layers=2, heads=4)
    else:
        config = local_config(p.model_name)
        if config is None:
            return None
        try:
            overrides = with_overrides(config, p.hf_config_overrides)
        except ValueError:  # (validate names the key)
            return None
        for name, value in overrides.items():
            setattr(config, name, value)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    c = getattr(model.config, "text_config", None) or model.config
    layers, kv_heads, head_dim = kv_shape(model.config)
    linears = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in name]
    return Shape(params=sum(t.numel() for t in model.parameters()), largest=max(t.numel() for t in model.parameters()),
                 layers=layers, hidden=c.hidden_size,
                 intermediate=getattr(c, "intermediate_size", None) or 4 * c.hidden_size, kv_heads=kv_heads,
                 head_dim=head_dim, linear_in_out=sum(m.in_features + m.out_features for m in linears),
                 shares_prompts=shareable(model))


@dataclass
class Plan:
    parts: dict[str, float]  # bytes on one GPU, by part
    host: float  # bytes in host memory (cpu_offload)
    generation: float  # the generation phase's peak
    training: float  # the training phase's peak

    @property
    def peak(self) -> float:
        return max(self.generation, self.training)

    def describe(self, gpu_bytes: float | None) -> str:
        parts = ", ".join(f"{k} {v / GiB:.1f}" for k, v in self.parts.items() if v >= 0.05 * GiB)
        text = f"memory plan, per GPU (GiB): {parts}; peak ~{self.peak / GiB:.1f} in " + (
            "training" if self.training >= self.generation else "generation")
        if self.host:
            text += f"; host memory ~{self.host / GiB:.0f}"
        if gpu_bytes:
            text += f"; this GPU has {gpu_bytes / GiB:.1f}"
        return text


def plan(cfg: MasterConfig, shape: Shape) -> Plan:
    """The estimate for `cfg` on a model of `shape`."""
    p, n = cfg.policy, gpus(cfg)
    mixed = p.precision not in ("float32", "fp32") and p.device != "cpu"
    cb = 2 if mixed else 4  # compute bytes per element
    trained = p.lora.dim * shape.linear_in_out if p.lora.enabled else shape.params
    offload = p.cpu_offload
    master_b, moments_b, grad_b = state_bytes(cfg, mixed)
    state = trained * (master_b + moments_b)  # master (mixed precision) + the optimizer's moments
    slots = engine_slots(cfg)
    per_token = activation_elements(cfg, shape) * cb
    parts = {
        "weights": shape.params * cb,
        "master and AdamW": 0.0 if offload else state / n,
        "gradients": trained * grad_b / n,
        "reference": shape.params * cb if cfg.loss_fn.reference_policy_kl_penalty > 0 and not p.lora.enabled else 0.0,
        "KV cache": slots * p.max_total_sequence_length * shape.layers * 2 * shape.kv_heads * shape.head_dim * cb,
        "activations": micro_tokens(cfg, shape) * per_token,
        "transients": shape.largest * 6 + LOGITS_CHUNK + (max(GiB, shape.largest * 4) if offload else 0),
    }
    if cfg.env.reward_model.enabled:
        parts["reward model"] = 0.0  # (its size is not read here)
    resident = parts["weights"] + parts["master and AdamW"] + parts["reference"] + parts["KV cache"]
    staging = 3 * max(GiB, shape.largest * 4)  # (trainer/offload.py's ring of gradient chunks)
    return Plan(parts, host=state + staging if offload else 0.0,
                generation=resident + LOGITS_CHUNK,
                training=sum(parts.values()))


def micro_tokens(cfg: MasterConfig, shape: Shape) -> int:
    """A training micro-batch's tokens at most: its token budget (or one sequence at L, rounded, where that is
    more: a longer sequence goes alone), or its rows at max_total_sequence_length (L); where
    each group's prompt is forwarded once (policy.shared_prompts, one turn, micro-batches holding whole groups or part
    of one), each row's completion at policy.generation.max_new_tokens (c) and each group's prompt once, as long as
    the rest (L - c) or the prompts' limit allow."""
    from execrl.config.checks import prompt_limit
    from execrl.trainer.shared_prompt import keeps_groups

    p, k = cfg.policy, cfg.grpo.num_generations_per_prompt
    split = batch_plan(cfg).train_split
    if split.tokens:
        return max(split.tokens, split.width(p.max_total_sequence_length))
    rows, length = split.sequences, p.max_total_sequence_length
    if not (p.shared_prompts and shape.shares_prompts and k > 1 and cfg.grpo.max_rollout_turns == 1
            and keeps_groups(rows, k)):
        return rows * length
    c = min(p.generation.max_new_tokens, length)
    return -(-rows // k) * max(0, min(prompt_limit(cfg), length - c)) + rows * c


# what compiled decoder layers keep of the eager count without checkpointing: the partitioner recomputes the
# pointwise ops in the backward. Measured 0.77-0.84 (0.5B and 1.5B, 256 and 4,096 new tokens, micro-batches 4-128, an
# H200; bench/README.md, "The memory plan with compiled layers"); 0.85 keeps the plan above each
COMPILED_ACTIVATIONS = 0.85


def activation_elements(cfg: MasterConfig, shape: Shape) -> float:
    """Activations kept for the backward per training token, in elements: without checkpointing ~8 hidden-wide and
    4 intermediate-wide tensors a layer (COMPILED_ACTIVATIONS of them where the trainer compiles its layers: on a GPU,
    policy.torch_compile); checkpointing each layer keeps its input, and one layer's MLP while that layer is
    recomputed; checkpointing each MLP keeps the rest of the layer and the down projection's output."""
    p = cfg.policy
    if not p.activation_checkpointing:
        compiled = p.torch_compile and p.device != "cpu"
        return shape.layers * (8 * shape.hidden + 4 * shape.intermediate) * (COMPILED_ACTIVATIONS if compiled else 1)
    if p.activation_checkpointing_scope == "mlp":
        return shape.layers * 9 * shape.hidden + 4 * shape.intermediate
    return shape.layers * shape.hidden + shape.intermediate


def engine_slots(cfg: MasterConfig) -> int:
    """The sequences the engine decodes at once on one GPU, as configured (before bounded_slots)."""
    samples = cfg.grpo.num_prompts_per_step * cfg.grpo.num_generations_per_prompt
    return slots_of(cfg.policy.generation_batch_size, samples, gpus(cfg))


def slots_of(generation_batch_size: int | None, samples: int, gpus: int) -> int:
    """policy.generation_batch_size's slots for `samples` per step over `gpus` (null: all of a GPU's
    share)."""
    share = max(1, samples // gpus)
    return share if generation_batch_size is None else min(generation_batch_size, share)


def state_bytes(cfg: MasterConfig, mixed: bool) -> tuple[int, int, int]:
    """Bytes per trained element of (the master copy, the optimizer's moments, the gradient):
    AdamW's two moments in the master's dtype, torchao's AdamW8bit / AdamW4bit one or half a byte
    each; with bf16_stochastic_round the bf16 model is its own master (bf16 gradients)."""
    from execrl.trainer.precision import stochastic_round

    o = cfg.policy.optimizer
    rounds = mixed and stochastic_round(cfg)
    master, grad = (0, 2) if rounds else (4 if mixed else 0, 4)
    name = o.name.rsplit(".", 1)[-1]
    moments = {"AdamW8bit": 2, "Adam8bit": 2, "AdamW4bit": 1, "Adam4bit": 1}.get(name, 2 * (2 if rounds else 4))
    return master, moments, grad


def advice(cfg: MasterConfig, shape: Shape, gpu_bytes: float) -> list[str]:
    """Up to two sets of settings that bring the plan's peak under 95% of the GPU's memory, the
    cheapest first (none: it fits, or nothing here would make it)."""
    tried = [{"policy.activation_checkpointing": True},
             {"policy.activation_checkpointing": True, "policy.train_micro_batch_size": 1},
             {"policy.activation_checkpointing": True, "policy.cpu_offload": True},
             {"policy.activation_checkpointing": True, "policy.optimizer.name": "torchao.optim.AdamW8bit",
              "policy.optimizer.kwargs.bf16_stochastic_round": True},
             {"policy.activation_checkpointing": True, "policy.lora.enabled": True}]
    out = []
    for change in tried:
        one_gpu_only = "policy.cpu_offload" in change or "policy.optimizer.name" in change
        if all(attribute(cfg, k) == v for k, v in change.items()) or (gpus(cfg) > 1 and one_gpu_only):
            continue
        changed = cfg.model_copy(deep=True)
        for key, value in change.items():
            set_attribute(changed, key, value)
        peak = plan(changed, shape).peak
        if peak <= 0.95 * gpu_bytes:
            out.append(" ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change.items())
                       + f" (~{peak / GiB:.0f} GiB)")
        if len(out) == 2:
            break
    return out


def without_recompute(cfg: MasterConfig, shape: Shape, gpu_bytes: float) -> str | None:
    """With activation checkpointing on, the setting that trains without it and still leaves a fifth of
    the GPU free in the plan (the micro-batch halved, at most twice, until it does, where micro-batches
    are counted in sequences): at 4K tokens on an H200, training without it took 18% less time at half
    the micro-batch and 11% less at a quarter (bench/README.md, issue 45); else, with each layer
    recomputed, checkpointing only the MLPs at the same micro-batch, where that fits.
    None: checkpointing is off, or nothing fits with less recompute."""
    if not cfg.policy.activation_checkpointing:
        return None
    micro = cfg.policy.train_micro_batch_size
    sizes = [micro] if batch_plan(cfg).train_split.tokens is not None else \
        [m for m in (micro, micro // 2, micro // 4) if m >= 1 and micro % m == 0]
    for size in sizes:
        changed = cfg.model_copy(deep=True)
        set_attribute(changed, "policy.activation_checkpointing", False)
        set_attribute(changed, "policy.train_micro_batch_size", size)
        peak = plan(changed, shape).peak
        if peak <= 0.8 * gpu_bytes:
            setting = "policy.activation_checkpointing=false" + \
                (f" policy.train_micro_batch_size={size}" if size != micro else "")
            return (f"activation checkpointing is on, yet training without it fits this GPU: {setting} "
                    f"(~{peak / GiB:.0f} GiB) skips recomputing each layer's forward in the backward "
                    "(training 10-20% faster)")
    if cfg.policy.activation_checkpointing_scope == "layer":
        changed = cfg.model_copy(deep=True)
        set_attribute(changed, "policy.activation_checkpointing_scope", "mlp")
        peak = plan(changed, shape).peak
        if peak <= 0.8 * gpu_bytes:
            return ("activation checkpointing recomputes each layer, yet recomputing only the MLPs fits this GPU: "
                    f"policy.activation_checkpointing_scope=mlp (~{peak / GiB:.0f} GiB) runs attention and the "
                    "down projection once")
    return None


FULL_MICRO_TOKENS = 8192  # padded tokens per training micro-batch from which larger ones gained little


def larger_micro_batches(cfg: MasterConfig, shape: Shape, gpu_bytes: float) -> str | None:
    """Where training's micro-batches hold fewer than FULL_MICRO_TOKENS padded tokens and micro-batches
    of that many (training's and the scoring passes') fit in 80% of the GPU: the settings that make
    them so. The gradient is the same (the loss is normalized over the optimizer step, not the
    micro-batch); fewer, larger passes keep the GPU busy: NeMo RL's grpo_math_1B.yaml at 1.5B (2,048
    tokens) trained 1.7x faster at 8,192 (bench/README.md, issue 45). None: large enough, or no room."""
    p, split = cfg.policy, batch_plan(cfg).train_split
    tokens = split.tokens or split.sequences * p.max_total_sequence_length
    if tokens >= FULL_MICRO_TOKENS:
        return None
    changed = cfg.model_copy(deep=True)
    if split.tokens is not None:
        change = {"policy.dynamic_batching.train_mb_tokens": FULL_MICRO_TOKENS}
        if (p.dynamic_batching.logprob_mb_tokens or p.max_total_sequence_length * p.logprob_batch_size) \
                < FULL_MICRO_TOKENS:
            change["policy.dynamic_batching.logprob_mb_tokens"] = FULL_MICRO_TOKENS
    else:
        rows = max(1, FULL_MICRO_TOKENS // p.max_total_sequence_length)
        if min(rows, batch_plan(cfg).per_gpu_batch) <= split.sequences:  # (a step trains on fewer samples)
            return None
        change = {"policy.train_micro_batch_size": rows}
        if p.logprob_batch_size < rows:
            change["policy.logprob_batch_size"] = rows
    for key, value in change.items():
        set_attribute(changed, key, value)
    peak = plan(changed, shape).peak
    if peak > 0.8 * gpu_bytes:
        return None
    now = f"{tokens} padded tokens" if split.tokens is not None else \
        f"{split.sequences} sequences (up to {tokens} tokens)"
    return (f"training micro-batches of {now} are small for this GPU: "
            + " ".join(f"{k}={v}" for k, v in change.items())
            + f" (~{peak / GiB:.0f} GiB) trains the same gradient in fewer, larger passes (1.5B from 2,048 tokens: 1.7x faster)")


def more_slots(cfg: MasterConfig, shape: Shape, gpu_bytes: float) -> str | None:
    """Where policy.generation_batch_size leaves the engine decoding a step's samples a few at a time
    and the KV cache of at least twice as many fits: the setting that decodes them together. A decode
    step costs about the same at 32 rows as at 128 (latency-bound), so rollouts at 1.5B ran 3.3x faster
    at 128 slots than at 32 and 5.7x at 512 (bench/slots.py, an H200). None: already all at once, or
    no room for twice as many."""
    if cfg.policy.generation_batch_size is None or cfg.policy.generation.backend != "execrl":
        return None
    asked = engine_slots(cfg)
    every = cfg.model_copy(deep=True)
    set_attribute(every, "policy.generation_batch_size", None)
    fit = bounded_slots(every, shape, gpu_bytes)[0]
    set_attribute(every, "policy.generation_batch_size", fit)
    if fit < 2 * asked or plan(every, shape).training > 0.9 * gpu_bytes:  # (bounded_slots: as asked where none fit)
        return None
    return (f"policy.generation_batch_size={cfg.policy.generation_batch_size} decodes this GPU's "
            f"{engine_slots(every)} samples of a step {asked} at a time, and the KV cache of {fit} fits: "
            "policy.generation_batch_size=null decodes them together (as many as fit), for faster rollouts")


def bounded_slots(cfg: MasterConfig, shape: Shape | None, gpu_bytes: float) -> tuple[int, str | None]:
    """The engine's slots (sequences decoded at once: engine_slots) bounded so that the plan's KV
    cache fits beside training's other parts in 90% of `gpu_bytes`: (slots, a note where fewer than
    asked). The KV cache is sized slots x max_total_sequence_length, so long completions would
    otherwise need a smaller policy.generation_batch_size by hand; continuous batching refills a slot
    as its sequence ends, so fewer slots cost speed, not samples."""
    slots = engine_slots(cfg)
    if shape is None:
        return slots, None
    estimate = plan(cfg, shape)
    per_slot = estimate.parts["KV cache"] / slots
    others = estimate.training - estimate.parts["KV cache"]
    fit = int((0.9 * gpu_bytes - others) // per_slot) if per_slot else slots
    if fit >= slots or fit < 1:
        return slots, None
    return fit, (f"KV cache: {fit} sequences decoded at once ({fit * per_slot / GiB:.1f} GiB for "
                 f"{cfg.policy.max_total_sequence_length} tokens each), not {slots}: the memory plan leaves that "
                 f"much beside training's {others / GiB:.1f} GiB on this {gpu_bytes / GiB:.0f} GiB GPU (slots are "
                 "refilled as sequences end; " + ("policy.cpu_offload leaves more)"
                                                  if cfg.policy.activation_checkpointing
                                                  else "policy.cpu_offload or activation checkpointing leave more)"))


def gpu_memory() -> float | None:
    """The memory of this process's GPU in bytes (None: no GPU)."""
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory if torch.cuda.is_available() \
        else None


def summary(cfg: MasterConfig, shape: Shape | None, gpu_bytes: float | None) -> list[str]:
    """The plan's lines for a run on a GPU of `gpu_bytes` (None: not known here), with the settings
    that would make it fit where it does not; [] where the model's shapes are not known (shape_of).
    The plan is that of the engine's slots bounded to the KV cache that fits (bounded_slots, a line
    saying so), as the run does."""
    if shape is None:
        return []
    bounded = None
    if gpu_bytes and cfg.policy.generation.backend == "execrl":  # (the run decodes as many sequences as fit)
        slots, bounded = bounded_slots(cfg, shape, gpu_bytes)
        if bounded:
            cfg = cfg.model_copy(deep=True)
            set_attribute(cfg, "policy.generation_batch_size", slots)
    estimate = plan(cfg, shape)
    lines = [estimate.describe(gpu_bytes)] + ([bounded] if bounded else [])
    if gpu_bytes and estimate.peak > 0.95 * gpu_bytes:
        fixes = advice(cfg, shape, gpu_bytes)
        lines.append("the plan does not fit this GPU: " + ("; or ".join(fixes) if fixes else
                     "a smaller model, or more GPUs (cluster.gpus_per_node: FSDP2 shards the master and its state)"))
    elif gpu_bytes:
        lines += [hint for hint in (without_recompute(cfg, shape, gpu_bytes), larger_micro_batches(cfg, shape, gpu_bytes),
                                    more_slots(cfg, shape, gpu_bytes)) if hint]
    return lines
