"""What the engine needs to know of one model family, with Llama's answers as the defaults.

The decoder (rollout/decoder.py) owns the cache, the attention and the GEMMs; an `Architecture` says
where the family's weights are and in what order its layer applies them. A family file subclasses
it and overrides only what differs from Llama (see qwen3.py, gemma3.py, moe.py, ...), and registers itself
for the `model_type`s of its HF configs.

Projection groups: the linear layers whose outputs the engine computes as one GEMM (and LoRA adds
its low-rank path to as one): qkv, o, gate_up, down (an MLP without a gate: up, down). A family
whose checkpoint already joins a group (Phi-3's qkv_proj, gate_up_proj) lists one module for it.
"""

from __future__ import annotations

import weakref
from typing import Callable

import torch
from torch import nn

from execrl.rollout.models.layers import rms_norm, sliding_window


def length_bound(rotary, layer_type: str | None = None) -> int | None:
    """The sequence length past which transformers changes a rotary's frequencies for the whole sequence (longrope:
    Phi-3.5's and Phi-4-mini's long factors past original_max_position_embeddings; dynamic NTK: rescaled past the
    original length); None for a rope that gives each position the same values at any length."""
    kind = getattr(rotary, "rope_type", "default")
    kind = kind.get(layer_type, "default") if isinstance(kind, dict) else kind
    if kind == "longrope":  # (transformers 4 keeps the scaling in rope_scaling, the bound at the config's top)
        cfg = rotary.config
        params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        params = params.get(layer_type, params) if layer_type is not None else params
        return (params.get("original_max_position_embeddings")
                or getattr(cfg, "original_max_position_embeddings", None) or cfg.max_position_embeddings)
    return rotary.original_max_seq_len if "dynamic" in kind else None


_BOUNDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> rotary_bound(model)


def rotary_bound(model: nn.Module) -> int | None:
    """The least length_bound of a model's rotaries: rows up to it and rows past it must not share a forward (the
    trainer's micro-batch, a pack), in which transformers would give every row the frequencies of the longest.
    Found once per model (a walk over every module, ~1 ms on CPU at 28 layers, asked a few times a step)."""
    if model not in _BOUNDS:
        _BOUNDS[model] = _least_bound(model)
    return _BOUNDS[model]


def _least_bound(model: nn.Module) -> int | None:
    bounds = []
    for module in model.modules():
        kind = getattr(module, "rope_type", None)
        if kind is not None and hasattr(module, "config"):
            bounds += [length_bound(module, t) for t in (kind if isinstance(kind, dict) else [None])]
    return min((b for b in bounds if b is not None), default=None)


def rotary_at(rotary, like: torch.Tensor, positions: torch.Tensor, layer_type: str | None = None):
    """(cos, sin) [L, R] at `positions` (0..L-1), as transformers computes them; where they depend on the sequence's
    length (length_bound), each position takes its values from a sequence as long as the bound or, past it, as long
    as the cache: a sample that stays within the bound is scored by the trainer with the same ones (a longer one is
    scored with the long frequencies at every position, which no cache written as it grows can match)."""
    extra = () if layer_type is None else (layer_type,)
    bound = length_bound(rotary, layer_type)
    if bound is not None:  # (dynamic NTK: transformers' module back at its original length, whatever it read last: a
        rotary(like, positions[None, :1], *extra)  # forward over a longer sequence left it at the long frequencies)
    if bound is None or len(positions) <= bound:
        cos, sin = rotary(like, positions[None], *extra)
        return cos[0], sin[0]
    short = rotary(like, positions[None, :bound], *extra)
    cos, sin = rotary(like, positions[None], *extra)
    rotary(like, positions[None, :1], *extra)  # (dynamic NTK: transformers' module back at its original length)
    return torch.cat([short[0][0], cos[0, bound:]]), torch.cat([short[1][0], sin[0, bound:]])


class UnsupportedModel(ValueError):
    """A model the engine cannot run; the message names the fix."""


Sublayer = Callable[[torch.Tensor], torch.Tensor]  # [B, T, d] -> [B, T, d]


class Architecture:
    model_types: tuple[str, ...] = ()

    @classmethod
    def runs(cls, config) -> bool:
        """Whether this file computes what a model of `config` computes; a variant it does not (OLMoE's clip_qkv)
        goes the generic path, transformers' own layers."""
        return True

    def __init__(self, model):
        self.model, self.cfg = model, model.config
        base = model.model
        self.layers, self.embed_tokens, self.final_norm, self.head = base.layers, base.embed_tokens, base.norm, \
            model.lm_head
        attn = self.layers[0].self_attn
        self.heads, self.kv_heads = self.cfg.num_attention_heads, self.cfg.num_key_value_heads
        self.head_dim, self.scale = attn.head_dim, attn.scaling

    # -- where the weights are --
    def groups(self, layer) -> dict[str, list[nn.Module]]:
        """The layer's projection groups (a layer of routed experts has no gate_up or down: `experts`
        computes its MLP)."""
        a, m = layer.self_attn, layer.mlp
        groups = {"qkv": [a.q_proj, a.k_proj, a.v_proj], "o": [a.o_proj]}
        if not self.routed(layer):
            groups.update(gate_up=[m.gate_proj, m.up_proj], down=[m.down_proj])
        return groups

    def routed(self, layer) -> bool:
        """Whether the layer's MLP is a mixture of experts (moe.py)."""
        return False

    def experts(self, layer, h: torch.Tensor) -> torch.Tensor:
        """A routed layer's MLP on h [B, T, d] (moe.py)."""
        raise NotImplementedError

    def qkv_sizes(self) -> list[int]:
        """The widths of q, k and v in the joined qkv output."""
        d = self.head_dim
        return [self.heads * d, self.kv_heads * d, self.kv_heads * d]

    def activation(self, layer) -> Callable[[torch.Tensor], torch.Tensor]:
        return layer.mlp.act_fn

    # -- per layer --
    def sliding_window(self, i: int) -> int | None:
        """Layer i's window (a key is seen while query - key < window), or None (full attention)."""
        return sliding_window(self.cfg, i)

    def rotary_tables(self, like: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's (cos, sin) [L, R] for `positions` [L], as transformers computes them."""
        return [rotary_at(self.model.model.rotary_emb, like, positions)] * len(self.layers)

    # -- the layer's order --
    def norm(self, module, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(module, x)

    def qk_norm(self, attn, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys [B, T, heads, D] after their projection, before rotary (Llama: as they
        are)."""
        return q, k

    def block(self, layer, x: torch.Tensor, attention: Sublayer, mlp: Sublayer) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder layer on the residual stream x [B, T, d] (pre-norm), as (the stream after the
        attention, the MLP's output): the layer's output is their sum, which the caller adds (a decode
        step in the next layer's first kernel, with that layer's norm: one kernel fewer per layer)."""
        x = x + attention(self.norm(layer.input_layernorm, x))
        return x, mlp(self.norm(layer.post_attention_layernorm, x))

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(tokens)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.final_norm, x))


REGISTRY: dict[str, type[Architecture]] = {}


def has_family(model) -> bool:
    """Whether a family file of rollout/models/ runs `model` (else the generic path does, or nothing)."""
    kind = getattr(model.config, "model_type", None)
    return kind in REGISTRY and REGISTRY[kind].runs(model.config)


HEAD_CAPS = ("final_logit_softcapping", "logits_soft_cap", "output_logit_soft_cap")  # Gemma 2/3, RecurrentGemma, xLSTM


def head_soft_cap(config) -> float | None:
    """The soft-cap a model puts on its LM head's logits (cap * tanh(logits / cap)), under any of the names families
    give it (a text model's inside a multimodal config too); None: none."""
    configs = [config] + ([config.get_text_config()] if hasattr(config, "get_text_config") else [])
    return next((getattr(c, n) for c in configs for n in HEAD_CAPS if getattr(c, n, None)), None)


def register(cls: type[Architecture]) -> type[Architecture]:
    """Class decorator: the family of each of `cls.model_types`."""
    for kind in cls.model_types:
        REGISTRY[kind] = cls
    return cls
