"""A decoder forward over a transformers model's *own* modules with a static KV cache: prefill of
new prompts into cache slots, and one decode step for every slot. No weight is copied; the engine
calls the trainer's nn.Linear, RMSNorm and MLP modules, so an optimizer step is seen by the next
rollout with no synchronization. With LoRA it merges the adapters into the base weights for each
generate call (`adapters_merged`), or adds each projection group's low-rank path to the frozen
base's output (rollout/adapters.py); neither keeps a merged copy.

Shapes: S cache slots, L = max_len positions per slot, H query heads, Hkv key/value heads, G = H /
Hkv, D head dim.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F

from execrl.lora import base_layer
from execrl.rollout.adapters import layer_adapters
from execrl.rollout.attention import decode_attention
from execrl.rollout.fuse import joined

SUPPORTED = ("qwen2", "qwen3", "llama")


class UnsupportedModel(ValueError):
    pass


def check_supported(model) -> None:
    """Raise UnsupportedModel with the fix when the engine cannot run this architecture."""
    cfg = model.config
    kind = getattr(cfg, "model_type", "?")
    fix = "set policy.generation.backend=transformers to use transformers' generate instead"
    if kind not in SUPPORTED:
        raise UnsupportedModel(f"the execrl rollout engine supports {', '.join(SUPPORTED)} models, not {kind!r}: {fix}")
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        raise UnsupportedModel(f"sliding-window attention layers are not supported by the execrl engine: {fix}")


def rms_norm(module, x: torch.Tensor) -> torch.Tensor:
    """A transformers RMSNorm module's function as one fused op (its own code is seven kernels in
    decode)."""
    return F.rms_norm(x, module.weight.shape, module.weight, getattr(module, "variance_epsilon", 1e-6))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as transformers applies it (halves rotated). x [B, heads, T, D], cos/sin [B,
    1, T, D]."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up from the joined [..., 2I] gate/up projection -> [..., I]."""
    gate, up = gate_up.chunk(2, -1)
    return F.silu(gate) * up


def _fused_qkv(attn) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The layer's q/k/v weight and bias as one matrix and vector, when fuse_projections made them
    so."""
    group = [attn.q_proj, attn.k_proj, attn.v_proj]
    weight, bias = joined(group), joined(group, "bias")
    if weight is None or (bias is None and attn.q_proj.bias is not None):
        return None
    return weight, bias


class CachedDecoder:
    def __init__(self, model, slots: int, max_len: int, merge_adapters: bool = False):
        check_supported(model)
        cfg, base = model.config, model.model
        self.layers, self.embed, self.norm, self.head = base.layers, base.embed_tokens, base.norm, model.lm_head
        attn = self.layers[0].self_attn
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim, self.scale = attn.head_dim, attn.scaling
        self.slots, self.max_len = slots, max_len
        weight = self.embed.weight
        shape = (slots, self.kv_heads, max_len, self.head_dim)
        self.k = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in self.layers]
        self.v = [torch.zeros_like(k) for k in self.k]
        with torch.no_grad():
            cos, sin = base.rotary_emb(self.k[0], torch.arange(max_len, device=weight.device)[None])  # [1, L, D]
        self.cos, self.sin = cos[0], sin[0]  # [L, D] in the model's dtype, as transformers computes them
        silu = getattr(cfg, "hidden_act", None) == "silu"
        self.qkv = [_fused_qkv(l.self_attn) for l in self.layers]  # (weight, bias) or None
        self.gate_up = [joined([l.mlp.gate_proj, l.mlp.up_proj]) if silu and l.mlp.gate_proj.bias is None else None
                        for l in self.layers]
        self.adapters = layer_adapters(self.layers, weight.dtype)  # LoRA: per layer, its groups' A and B (or None)
        # LoRA, merge mode: the adapters merged into the base weights for each generate call
        # (adapters_merged)
        self.merge = merge_adapters and all(self._base_weights(i)[name] is not None for i, ad in
                                            enumerate(self.adapters) if ad for name, g in ad.groups.items() if g)
        self._saved: list[torch.Tensor] | None = None  # merge mode: the adapted base weights' bytes, on the host
        self.rows = torch.arange(slots, device=weight.device)  # [S]
        self.prefill_ops = (rotate, swiglu)  # the elementwise work of prefill; decode's is compiled with its step

    def compile_prefill(self, compiler) -> None:
        """Fuse prefill's elementwise ops (rotary, silu * mul: a few passes over [tokens, 2I] in
        eager mode) with `compiler` (engine.compiled): specialized to the first shapes, then generic
        in those that change (batch and prompt width; the model's dimensions stay constants, so the
        index math stays cheap)."""
        self.prefill_ops = tuple(compiler(fn) for fn in (rotate, swiglu))

    def _layer(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend,
               ops=(rotate, swiglu)) -> torch.Tensor:
        rope, swi = ops
        layer = self.layers[i]
        a = layer.self_attn
        h = rms_norm(layer.input_layernorm, x)  # [B, T, d]
        b, t, _ = h.shape
        ad = None if self.merge else self.adapters[i]  # (merge mode: the weights hold the adapters)
        group = [base_layer(m) for m in (a.q_proj, a.k_proj, a.v_proj)]
        sizes = [m.out_features for m in group]
        if self.qkv[i] is not None:  # one GEMM (see fuse.py)
            q, k, v = (F.linear(h, *self.qkv[i]) if ad is None else ad.add("qkv", h, F.linear(h, *self.qkv[i]))
                       ).split(sizes, -1)
        elif ad is None:
            q, k, v = (m(h) for m in group)
        else:
            q, k, v = ad.add("qkv", h, torch.cat([m(h) for m in group], -1)).split(sizes, -1)
        q, k, v = (z.view(b, t, -1, self.head_dim) for z in (q, k, v))
        if hasattr(a, "q_norm"):  # Qwen3 normalizes queries and keys per head
            q, k = rms_norm(a.q_norm, q), rms_norm(a.k_norm, k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        out = attend(i, q, k, v).transpose(1, 2).reshape(b, t, -1)  # [B, T, H D]
        o = base_layer(a.o_proj)(out)
        x = x + (o if ad is None else ad.add("o", out, o))
        h = rms_norm(layer.post_attention_layernorm, x)
        mlp, fused = layer.mlp, self.gate_up[i] is not None
        if ad is None and not fused:
            return x + mlp(h)
        gate_up = F.linear(h, self.gate_up[i]) if fused else torch.cat(
            [base_layer(mlp.gate_proj)(h), base_layer(mlp.up_proj)(h)], -1)  # [B, T, 2I]
        if ad is not None:
            gate_up = ad.add("gate_up", h, gate_up)
        if fused:
            z = swi(gate_up)
        else:  # (an MLP not fused: its own activation)
            gate, up = gate_up.chunk(2, -1)
            z = mlp.act_fn(gate) * up
        down = base_layer(mlp.down_proj)(z)
        return x + (down if ad is None else ad.add("down", z, down))

    def _base_weights(self, i: int) -> dict[str, torch.Tensor | None]:
        """Layer i's base weight of each projection group, as one tensor (None where a group is not
        one)."""
        a, mlp = self.layers[i].self_attn, self.layers[i].mlp
        return {"qkv": self.qkv[i][0] if self.qkv[i] is not None else None, "o": base_layer(a.o_proj).weight,
                "gate_up": self.gate_up[i], "down": base_layer(mlp.down_proj).weight}

    @contextmanager
    def adapters_merged(self):
        """Merge mode (LoRA, sync GRPO on one process): for the block, each group's base weight W
        holds W + B A (its adapters: one addmm per group), so decoding runs at the speed of a model
        without adapters; after it W's exact bytes are put back from a host copy taken at the first
        call (W - B A would round: in bf16 the base would drift a little at every step). Nothing
        else may use the weights meanwhile: async GRPO trains while rollouts run, so it uses the
        low-rank path instead."""
        if not self.merge:
            yield
            return
        targets = [(self._base_weights(i)[name], g) for i, ad in enumerate(self.adapters) if ad
                   for name, g in ad.groups.items() if g]
        if self._saved is None:  # (the first call: after any warm-up, which trains the base)
            self._saved = [w.detach().to("cpu", copy=True) for w, _ in targets]
            if targets and targets[0][0].is_cuda:
                self._saved = [t.pin_memory() for t in self._saved]
        with torch.no_grad():
            for w, g in targets:
                w.addmm_(g.b, g.a)  # [out, n r] @ [n r, in]
        try:
            yield
        finally:
            with torch.no_grad():
                for (w, _), saved in zip(targets, self._saved):
                    w.copy_(saved, non_blocking=True)

    def refresh_adapters(self) -> None:
        """LoRA: the adapters' current weights into the engine's buffers (each generate call, before
        anything)."""
        for ad in self.adapters:
            if ad is not None:
                ad.refresh()

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(rms_norm(self.norm, x))

    def prefill(self, tokens: torch.Tensor, lengths: torch.Tensor, slots: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """Run P right-padded prompts tokens [P, T] (true lengths [P]) once and write their
        keys/values into cache `slots` [N], slot n taking prompt `source[n]`: a prompt's G samples
        share one prefill. Returns the last-position logits [P, V]."""
        p, t = tokens.shape
        cos, sin = self.cos[:t][None, None], self.sin[:t][None, None]  # [1, 1, T, D]

        def attend(i, q, k, v):  # causal attention over the prompt itself; right padding never reaches real tokens
            self.k[i][slots, :, :t] = k[source]
            self.v[i][slots, :, :t] = v[source]
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                                  enable_gqa=self.heads != self.kv_heads)

        x = self.embed(tokens)  # [P, T, d]
        for i in range(len(self.layers)):
            x = self._layer(i, x, cos, sin, attend, self.prefill_ops)
        last = x[torch.arange(p, device=x.device), lengths - 1]  # [P, d]
        return self.logits(last)

    def decode(self, tokens: torch.Tensor, pos: torch.Tensor, window: int) -> torch.Tensor:
        """One token for every slot: tokens [S] at positions pos [S]. Keys/values are written at
        pos, attention reads each slot's positions <= pos, all within [0, window). Returns logits
        [S, V]. Shapes are static (CUDA-graph safe)."""
        s = tokens.shape[0]
        cos, sin = self.cos[pos][:, None, None], self.sin[pos][:, None, None]  # [S, 1, 1, D]
        g = self.heads // self.kv_heads

        def attend(i, q, k, v):  # q [S, H, 1, D]; k, v [S, Hkv, 1, D]
            kc, vc = self.k[i], self.v[i]
            kc[self.rows, :, pos] = k[:, :, 0]
            vc[self.rows, :, pos] = v[:, :, 0]
            # the G query heads of one kv head act as G query rows over the same keys: no repeat of
            # the cache
            out = decode_attention(q.reshape(s, self.kv_heads, g, self.head_dim), kc, vc, pos, window, self.scale)
            return out.reshape(s, self.heads, 1, self.head_dim)

        x = self.embed(tokens[:, None])  # [S, 1, d]
        for i in range(len(self.layers)):
            x = self._layer(i, x, cos, sin, attend)
        return self.logits(x[:, 0])
