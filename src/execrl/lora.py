"""LoRA (policy.lora, NeMo RL's policy.dtensor_cfg.lora_cfg), built on peft: low-rank adapters on
the policy's linear layers, the base weights frozen.

One model, three views of it:
  the policy      base + s * B A on every adapted layer: peft's own forward in training; in rollouts the engine's
                  (rollout/decoder.py: B A merged into the base for each generate call, whose exact bytes come back
                  after it, or, while the trainer runs beside rollouts, the low-rank path added: rollout/adapters.py)
  the reference   the base alone (`base_only`: peft's adapters switched off), for the KL term: no second model
  checkpoints     the adapter in peft's format (PeftModel.from_pretrained loads it), and on request the merged model

The base is never copied. The adapters are fp32 (CPU; under FSDP2, gathered in bf16), or, in a bf16
mixed-precision run, bf16 in the model every forward uses, with fp32 master copies
(trainer/precision.lora_master).
"""

from __future__ import annotations

import copy
import fnmatch
import json
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

ADAPTER = "default"  # peft's adapter name: the one adapter a run trains


def target_names(model: nn.Module, cfg) -> list[str]:
    """The full names of the linear layers policy.lora adapts: every linear layer of the decoder
    (match_all_linear, or no target_modules beside exclude_modules, as NeMo Automodel's matcher
    falls back to: not the LM head), or those target_modules names (a layer's own name, e.g.
    q_proj, or a wildcard pattern on its full name, e.g. *.mlp.*), less those exclude_modules names.
    Raises ValueError naming the fix."""
    if cfg.match_all_linear and cfg.target_modules:
        raise ValueError("policy.lora: match_all_linear=true adapts every linear layer, so target_modules "
                         f"{cfg.target_modules} would do nothing: set match_all_linear=false to pick target_modules")
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    blocks = decoder_blocks(model)  # (model.layers, transformer.h, gpt_neox.layers...: not the LM head)
    decoder = {name for name in linears if name.startswith(f"{blocks}.")}

    def named(name: str, patterns: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name.rsplit(".", 1)[-1], p) for p in patterns)

    if cfg.match_all_linear or (not cfg.target_modules and cfg.exclude_modules):
        chosen = sorted(decoder)
    else:
        chosen = sorted(n for n in linears if named(n, cfg.target_modules))
        for p in cfg.target_modules:
            if not any(named(n, [p]) for n in linears):
                raise ValueError(f"policy.lora.target_modules: {p!r} names no linear layer of this model (its "
                                 f"layers' are {sorted({n.rsplit('.', 1)[-1] for n in decoder})})")
    for p in cfg.exclude_modules:  # (a mistyped one adapted every layer, unsaid)
        if not any(named(n, [p]) for n in linears):
            raise ValueError(f"policy.lora.exclude_modules: {p!r} names no linear layer of this model (its layers' "
                             f"are {sorted({n.rsplit('.', 1)[-1] for n in decoder})})")
    chosen = [n for n in chosen if not named(n, cfg.exclude_modules)]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    outside = [n for n in chosen if linears[n] is head]  # (a vision tower's layers, named, are adapted as before)
    if outside:
        raise ValueError(f"policy.lora: adapting {outside[:3]} (outside the decoder layers: the LM head) is not "
                         "supported: target the decoder layers' projections")
    if not chosen and not decoder:
        kinds = sorted({type(m).__name__ for name, m in model.named_modules() if name.startswith(f"{blocks}.")
                        and not list(m.children()) and hasattr(m, "weight") and m.weight.dim() == 2})
        raise ValueError(f"policy.lora: this model's decoder layers ({blocks}) hold no torch Linear layer to adapt "
                         f"(their weights are in {kinds}: GPT-2's Conv1D is not adapted); train it without LoRA "
                         "(policy.lora.enabled=false)")
    if not chosen:
        raise ValueError("policy.lora targets no layer: " + ("every linear layer is excluded by exclude_modules"
                         if cfg.match_all_linear else "set match_all_linear=true or name target_modules (e.g. "
                         "[q_proj, k_proj, v_proj, o_proj]), and check exclude_modules"))
    return chosen


def decoder_blocks(model: nn.Module) -> str:
    """The name of the model's list of decoder layers: its ModuleList of the most parameters."""
    lists = [(sum(p.numel() for p in m.parameters()), name) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m)]
    if not lists:
        raise ValueError(f"policy.lora: {type(model).__name__} has no list of decoder layers to adapt")
    return max(lists)[1]


def apply_lora(model: nn.Module, cfg, seed: int = 0, fp32: bool = True):
    """The model with adapters on its target layers (in place: its linear layers become peft's LoRA
    layers); returns the peft model. B starts at zero, so the policy starts as the base. `fp32`: the
    adapters in fp32 whatever the base's dtype (else in the base's: a bf16 model's compute copy,
    trainer/precision.lora_master)."""
    from peft import LoraConfig, get_peft_model

    if cfg.dropout and cfg.dropout_position == "post":
        raise ValueError("policy.lora.dropout_position=post (dropout on the adapter's output) is not what peft does: "
                         "set dropout_position=pre (dropout on its input), or dropout=0")
    names = target_names(model, cfg)
    config = LoraConfig(r=cfg.dim, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=names, bias="none")
    with warnings.catch_warnings(), as_named():  # (peft asks transformers 5 a deprecated question; nothing for the
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)  # user)
        peft_model = get_peft_model(model, config, autocast_adapter_dtype=fp32)
    got = sorted(n for n, m in model.named_modules() if is_adapted(m))
    if got != names or getattr(peft_model.peft_config[ADAPTER], "target_parameters", None):
        raise ValueError(f"policy.lora: peft adapted {got[:4]}{' ...' if len(got) > 4 else ''} where this run names "
                         f"{names[:4]}{' ...' if len(names) > 4 else ''}: name target_modules that peft adapts as "
                         "they are (e.g. the attention's [q_proj, k_proj, v_proj, o_proj])")
    if cfg.lora_A_init == "xavier":  # NeMo RL's default; peft's own is kaiming-uniform
        g = torch.Generator().manual_seed(seed)
        for module in adapted(model):
            a = module.lora_A[ADAPTER].weight
            with torch.no_grad():
                a.copy_(torch.empty(a.shape, dtype=torch.float32).normal_(0, (2 / sum(a.shape)) ** 0.5, generator=g))
    return peft_model


@contextmanager
def as_named():
    """peft's conversion of adapters trained under transformers 4 turned off while a new adapter is made: for MoE
    models (DeepSeek-V3, GLM-4-MoE, Qwen3-MoE...) it rewrote every target ending in gate_proj/up_proj/down_proj into
    the routed experts' fused weights, so the dense layers' and shared experts' MLPs that the run named got no adapter
    and the experts, which it did not name, got one (a hunt's find)."""
    try:
        from peft.utils import transformers_weight_conversion as conversion
    except ImportError:  # (a peft without it converts nothing)
        conversion = None
    kept = getattr(conversion, "convert_peft_config_for_transformers", None)
    if kept is None:
        yield
        return
    conversion.convert_peft_config_for_transformers = lambda *args, **kwargs: None
    try:
        yield
    finally:
        conversion.convert_peft_config_for_transformers = kept


def adapted(model: nn.Module) -> list[nn.Module]:
    """The model's LoRA layers."""
    return [m for m in model.modules() if is_adapted(m)]


def is_adapted(module: nn.Module) -> bool:
    return hasattr(module, "lora_A") and ADAPTER in getattr(module, "lora_A", {})


def base_layer(module: nn.Module) -> nn.Module:
    """The plain linear layer under a LoRA layer (the module itself otherwise)."""
    return getattr(module, "base_layer", module)


@contextmanager
def base_only(peft_model):
    """The adapters switched off (peft's forward): the model is the base, the reference policy of
    the KL term."""
    if peft_model is None:
        yield
        return
    with peft_model.disable_adapter():
        yield


@contextmanager
def base_trainable(*models: nn.Module):
    """The base trainable for the block, the adapters frozen (the built-in model's supervised
    warm-up, which stands in for its pretraining: it makes the base, which the adapters then start
    from, B still zero). `models`: the master and compute models (precision.py), which may share the
    base."""
    flags = {p: p.requires_grad for m in models for p in m.parameters()}
    for p in flags:
        p.requires_grad_(not flags[p])
    try:
        yield
    finally:
        for p, trainable in flags.items():
            p.requires_grad_(trainable)
            p.grad = None


# ---------------------------------------------------------------------------------------------------------------------
# State dicts: the model's names (x.q_proj.base_layer.weight, x.q_proj.lora_A.default.weight) -> HF's and peft's


def base_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The base model's weights under their HF names (adapters left out)."""
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if ".lora_" not in k}


def adapter_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapters' weights under peft's file names (as PeftModel.from_pretrained reads them)."""
    return {"base_model.model." + k.replace(f".{ADAPTER}.", "."): v for k, v in state.items() if ".lora_" in k}


def from_adapter_state(saved: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """adapter_state's inverse: peft's file names -> the model's."""
    out = {}
    for k, v in saved.items():
        name = k.removeprefix("base_model.model.")
        for part in ("lora_A", "lora_B"):
            name = name.replace(f".{part}.weight", f".{part}.{ADAPTER}.weight")
        out[name] = v
    return out


def merged_state(state: dict[str, torch.Tensor], scaling: float, dtype: torch.dtype | None = None) -> dict:
    """The merged model's weights under HF names: W + s * B A for every adapted layer (computed in
    fp32)."""
    merged = base_state(state)
    for k in state:
        if k.endswith(f".lora_A.{ADAPTER}.weight"):
            layer = k.removesuffix(f".lora_A.{ADAPTER}.weight")
            a, b = state[k].float(), state[f"{layer}.lora_B.{ADAPTER}.weight"].float()
            merged[f"{layer}.weight"] = (merged[f"{layer}.weight"].float() + scaling * (b @ a)).to(
                merged[f"{layer}.weight"].dtype)
    return {k: v.to(dtype) if dtype is not None and v.is_floating_point() else v for k, v in merged.items()}


def to_model_names(hf_state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """base_state's inverse: HF names -> the adapted model's (x.q_proj.weight ->
    x.q_proj.base_layer.weight)."""
    names = {n for n, _ in model.named_parameters()}
    out = {}
    for k, v in hf_state.items():
        layer, _, leaf = k.rpartition(".")
        wrapped = f"{layer}.base_layer.{leaf}"
        out[wrapped if wrapped in names else k] = v
    return out


BASE_OVERRIDES = "base_config_overrides.json"  # beside adapter_config.json: the base's config overrides
BASE_IDENTITY = "base_weights_identity.txt"  # ... and its weight files' identity (models.weights_identity)
OWN_BASE = "base_is_the_runs.txt"  # ... and, where the run made its base, that it is the base/ beside its checkpoints


@dataclass
class Adapter:
    """What a LoRA run's checkpoints need to write its adapter: the peft model's config, the base it
    adapts."""
    peft_model: object
    base: str  # base_model_name_or_path: a hub id, or an absolute directory (the run's own base/, where it made one)
    save_merged: bool = False
    own_base: bool = False  # the run made its base (saved with its checkpoints) rather than loading it
    base_overrides: dict | None = None  # policy.hf_config_overrides the base was loaded with (BASE_OVERRIDES)
    base_identity: str | None = None  # the base's weight files as the run started (BASE_IDENTITY)

    @property
    def scaling(self) -> float:
        config = self.peft_model.peft_config[ADAPTER]
        return config.lora_alpha / config.r

    def write(self, directory: Path, weights: dict[str, torch.Tensor]) -> None:
        """The adapter in peft's format, from the model's (full) state dict. Written here, not by
        peft's save_pretrained, which may look the base model up on the hub."""
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in adapter_state(weights).items()}
        save_file(tensors, directory / "adapter_model.safetensors", metadata={"format": "pt"})
        config = copy.copy(self.peft_model.peft_config[ADAPTER])
        config.base_model_name_or_path = self.base
        config.inference_mode = True
        config.task_type = "CAUSAL_LM"  # (peft's AutoPeftModelForCausalLM refused an adapter of no task type)
        config.save_pretrained(str(directory))
        if self.base_overrides:  # (the base's config.json lacks them: loaded without, it is another model)
            (directory / BASE_OVERRIDES).write_text(json.dumps(self.base_overrides, indent=2) + "\n")
        if self.base_identity:  # (a base changed in place keeps its name: a load checks it is the one trained on)
            (directory / BASE_IDENTITY).write_text(self.base_identity + "\n")
        if self.own_base:  # (a copied run's adapter names the old run's base/ by its path: models.adapter_base)
            (directory / OWN_BASE).write_text("the base is ../../base, beside this run's checkpoints\n")

