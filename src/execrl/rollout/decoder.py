"""A decoder forward over a transformers model's *own* modules with a static KV cache: prefill of
new prompts into cache slots, and one decode step for every slot. No weight is copied; the engine
calls the trainer's nn.Linear, RMSNorm and MLP modules, so an optimizer step is seen by the next
rollout with no synchronization. With LoRA it merges the adapters into the base weights for each
generate call (`adapters_merged`), or adds each projection group's low-rank path to the frozen
base's output (rollout/adapters.py); neither keeps a merged copy. What differs between model families
(where the weights are, the order of norms and residual adds, q/k norms, rotary tables, sliding
windows) is the family's Architecture (rollout/models/).

Shapes: S cache slots, L = max_len positions per slot, H query heads, Hkv key/value heads, G = H /
Hkv, D head dim.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from execrl.lora import base_layer
from execrl.rollout import gated_gemm
from execrl.rollout.adapters import LayerAdapters, layer_adapters
from execrl.rollout.attention import decode_attention
from execrl.rollout.fuse import joined
from execrl.rollout.models import architecture_of
from execrl.rollout.models.base import Architecture
from execrl.rollout.models.layers import causal_mask, gated, rotate

DOWN_PARTS = 4  # decode's down projection: fp32 partial products over this many parts of its input (down_parts)


def _fused(group: list) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """A group's weights and biases as one matrix and vector, when fuse_projections made them so
    (None for a group of one module: it is called as it is)."""
    if len(group) == 1:
        return None
    weight, bias = joined(group), joined(group, "bias")
    if weight is None or (bias is None and base_layer(group[0]).bias is not None):
        return None
    return weight, bias


def generic_in(x: torch.Tensor, *dims: int) -> torch.Tensor:
    """x, with torch.compile told to compile these dims as symbols from the first call."""
    from torch._dynamo import maybe_mark_dynamic

    for d in dims:
        maybe_mark_dynamic(x, d)
    return x


def down_parts(arch, groups: list[dict], adapters: list, weight: torch.Tensor) -> int:
    """How many parts decode's down projection splits its input dim into (1: one GEMM). At a decode step's 16-256
    rows cuBLAS runs it as a split-K GEMM plus a kernel that sums the splits; as DOWN_PARTS GEMMs of one batched
    call with fp32 outputs, summed and rounded once in the next layer's first kernel (with the residual add and the
    norm), it runs 1.07-1.20x faster at 16-256 rows (bench/README.md, "The down projection in parts"). Only where
    the MLP's output is the layer's second term as it is (the base architecture's block: no norm or scale after the
    MLP), every layer has a plain bias-free, contiguous down weight and no LoRA path on it, on a GPU in 16-bit."""
    if not weight.is_cuda or weight.dtype not in (torch.bfloat16, torch.float16) or \
            type(arch).block is not Architecture.block:
        return 1
    for layer, g, ad in zip(arch.layers, groups, adapters):
        down = g.get("down", [])
        if arch.routed(layer) or "gate_up" not in g or len(down) != 1 or (ad is not None and ad.groups.get("down")):
            return 1
        lin = base_layer(down[0])
        if lin.bias is not None or lin.weight.shape[1] % DOWN_PARTS or not lin.weight.is_contiguous():
            return 1
    return DOWN_PARTS


def gated_up_fits(parts: list, act) -> bool:
    """Whether decode may compute every layer's gate/up and silu x up as one kernel (gated_gemm) at few rows: a SiLU
    MLP whose gate/up weights are one joined matrix without bias (fuse.py) the kernel takes, no routed experts and no
    LoRA path on gate/up (merged adapters are in the weight)."""
    if type(act).__name__ not in ("SiLU", "SiLUActivation"):
        return False
    for p in parts:
        gate_up = p.fused.get("gate_up")  # (weight, bias)
        if p.routed or gate_up is None or gate_up[1] is not None or not gated_gemm.fits(gate_up[0]) or \
                (p.adapters is not None and p.adapters.groups.get("gate_up")):
            return False
    return True


def partial_down(a: torch.Tensor, w: torch.Tensor, parts: int) -> torch.Tensor:
    """a [B, T, I] times w [d, I] transposed as `parts` fp32 partial products over I's parts: [P, B, T, d]."""
    b, t, i = a.shape
    d = w.shape[0]
    x = a.reshape(b * t, parts, i // parts).transpose(0, 1)  # [P, B T, I / P]
    wt = w.view(d, parts, i // parts).permute(1, 2, 0)  # [P, I / P, d]
    y = torch.bmm(x, wt, out_dtype=torch.float32) if a.is_cuda else torch.bmm(x.float(), wt.float())  # (CPU: no
    # out_dtype; the tests' path)
    return y.view(parts, b, t, d)


def summed(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A layer's second term as x's: partial_down's parts [P, ...] summed and rounded, or out as it is."""
    return out.sum(0).to(x.dtype) if out.dim() == x.dim() + 1 else out


@torch.library.custom_op("execrl::write_prompts", mutates_args=("k_cache", "v_cache"))
def write_prompts(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor,
                  source: torch.Tensor) -> None:
    """Prefill's cache writes: slot slots[n] of the caches [S, Hkv, L, D] takes prompt source[n]'s keys and values
    k, v [P, Hkv, T, D] at positions [0, T). An opaque operator that declares the caches mutated, so that compiled,
    it writes them where they are (as a graph's own index_put, the caches would be inputs mutated, and may be
    copied whole)."""
    t = k.shape[2]
    k_cache[slots, :, :t] = k[source]
    v_cache[slots, :, :t] = v[source]


@write_prompts.register_fake
def _(k_cache, v_cache, k, v, slots, source) -> None:
    return None


@dataclass(eq=False)
class LayerParts:
    """What layer i's forward reads, as arguments rather than indices into per-layer lists: the compiled decode
    step then traces and generates code for one layer that every layer of the same kind reuses (dynamo guards
    on these values' kinds and shapes, not on which layer they belong to)."""
    layer: nn.Module
    groups: dict[str, list[nn.Module]]  # the projection groups: qkv, o, gate_up, down
    fused: dict[str, tuple[torch.Tensor, torch.Tensor | None]]  # the groups computed as one GEMM (fuse.py)
    adapters: LayerAdapters | None  # LoRA's low-rank paths (None: none, or merged into the weights)
    k: torch.Tensor  # [S, Hkv, L, D] the layer's key cache
    v: torch.Tensor  # [S, Hkv, L, D] its value cache
    table: int  # which of the distinct rotary tables the layer uses
    sliding: int | None  # its sliding window (None: full attention)
    routed: bool  # its MLP is a mixture of experts (the architecture's answer: it may read the layer's index)


class CachedDecoder:
    def __init__(self, model, slots: int, max_len: int, merge_adapters: bool = False):
        self.arch = arch = architecture_of(model)
        self.layers, self.embed, self.head = arch.layers, arch.embed_tokens, arch.head
        self.heads, self.kv_heads, self.head_dim, self.scale = arch.heads, arch.kv_heads, arch.head_dim, arch.scale
        self.slots, self.max_len = slots, max_len
        weight = self.embed.weight
        shape = (slots, self.kv_heads, max_len, self.head_dim)
        self.k = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in self.layers]
        self.v = [torch.zeros_like(k) for k in self.k]
        with torch.no_grad():  # each layer's (cos, sin) [L, R], as transformers computes them (in the model's dtype)
            per_layer = arch.rotary_tables(self.k[0], torch.arange(max_len, device=weight.device))
        self.tables = list({id(c): (c, s) for c, s in per_layer}.values())  # the distinct ones
        self.table_of = [next(j for j, t in enumerate(self.tables) if t[0] is c) for c, _ in per_layer]
        self.windows = [arch.sliding_window(i) for i in range(len(self.layers))]  # None: full attention
        self.groups = [arch.groups(l) for l in self.layers]  # qkv, o, gate_up, down: each one GEMM
        self.fused = [{name: f for name in ("qkv", "gate_up") if name in g and (f := _fused(g[name])) is not None}
                      for g in self.groups]
        self.qkv_sizes = arch.qkv_sizes()
        # the widest joined projection's output (a bound on a token's activations, engine._admission_shape); None
        # with routed experts, whose activations it does not bound
        self.widest = None if any(arch.routed(l) for l in self.layers) else \
            max(sum(m.weight.shape[0] for m in group) for g in self.groups for group in g.values())
        self.adapters = layer_adapters(self.groups, weight.dtype)  # LoRA: per layer, its groups' A and B (or None)
        # LoRA, merge mode: the adapters merged into the base weights for each generate call
        # (adapters_merged)
        self.merge = merge_adapters and all(self._base_weights(i)[name] is not None for i, ad in
                                            enumerate(self.adapters) if ad for name, g in ad.groups.items() if g)
        self._saved: list[torch.Tensor] | None = None  # merge mode: the adapted base weights' bytes, on the host
        self.rows = torch.arange(slots, device=weight.device)  # [S]
        self.act = arch.activation(self.layers[0])
        self.glu = gated(self.act)
        self.parts = [LayerParts(layer, self.groups[i], self.fused[i], None if self.merge else self.adapters[i],
                                 self.k[i], self.v[i], self.table_of[i], self.windows[i], arch.routed(layer))
                      for i, layer in enumerate(self.layers)]
        self.decode_layer, self.final_logits = self._decode_layer, self._final_logits  # (compile_decode: compiled)
        self.prefill_layer = self._prefill_layer  # (compile_prefill: compiled)
        self.down_parts = down_parts(arch, self.groups, self.adapters, weight)  # decode's, in the layer's 2nd term
        # gate/up and silu x up as one kernel at up to this many rows a step (0: never; every layer's max_rows)
        self.gated_rows = min(gated_gemm.max_rows(p.fused["gate_up"][0]) for p in self.parts) \
            if gated_up_fits(self.parts, self.act) else 0

    def compile_prefill(self, compiler) -> None:
        """Compile prefill's layer with `compiler` (engine.compiled), as decode's is: one layer traced and generated
        for every layer of its kind, generic from the first compilation in the prompts' count and width and the
        samples' count, which change from call to call (a count of 1 is compiled on its own, once: dynamo
        specializes sizes 0 and 1); the model's dimensions stay constants (symbolic ones make the index math slow:
        bench/README.md). A prefill is host-bound: a few ms of GPU work behind ~15 ops per layer; compiled as one
        layer, an admission of 1-16 prompts costs about half the time (bench/README.md: "Where a step's GPU waits, and
        prefill compiled as one layer")."""
        self.prefill_layer = compiler(self._prefill_layer)

    def compile_decode(self, compiler) -> None:
        """Compile decode's layer step with `compiler` (engine.compiled): one layer is traced and
        generated, and every layer of the same kind (its sliding window, its projection groups'
        shapes) runs that code; compiling the whole step would trace and generate every layer of the
        unrolled model again (the most of a start-up's compilation at 24-28 layers)."""
        self.decode_layer, self.final_logits = compiler(self._decode_layer), compiler(self._final_logits)

    def _layer(self, part: LayerParts, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend,
               parts: int = 1, few: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """A layer on x [B, T, d]: the architecture's order (arch.block) of its attention and MLP,
        each a few GEMMs of projection groups; cos, sin: its rotary table at x's positions;
        attend(part, q, k, v, rotate) its attention, given queries and keys not yet rotated (rotate
        does it; decode's kernel rotates the queries and keys as it loads them). Returns the layer's output as
        two terms to add (arch.block); with `parts` > 1 (decode, down_parts) the second is the MLP's fp32 partial
        products [P, B, T, d] (summed); `few` (decode at up to gated_rows rows, where gated_up_fits): gate/up
        and silu x up as one kernel."""
        # (self.act, layer 0's activation module, is read only where it is called: a routed layer's trace that read
        # it would be guarded on it being that layer's own)
        arch, layer, groups, fused, ad = self.arch, part.layer, part.groups, part.fused, part.adapters

        def linear(name: str, h: torch.Tensor) -> torch.Tensor:  # a group's joined output, with its LoRA path
            modules = groups[name]
            if name in fused:  # one GEMM (see fuse.py)
                y = F.linear(h, *fused[name])
            elif len(modules) == 1:
                y = base_layer(modules[0])(h)
            else:
                y = torch.cat([base_layer(m)(h) for m in modules], -1)
            return y if ad is None else ad.add(name, h, y)

        def attention(h: torch.Tensor) -> torch.Tensor:
            b, t, _ = h.shape
            q, k, v = (z.view(b, t, -1, self.head_dim) for z in linear("qkv", h).split(self.qkv_sizes, -1))
            q, k = arch.qk_norm(layer.self_attn, q, k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
            o = attend(part, q, k, v, lambda z: rotate(z, cos, sin))  # [B, H, T, D]
            return linear("o", o.transpose(1, 2).reshape(b, t, -1))  # [B, T, H D] -> [B, T, d]

        def mlp(h: torch.Tensor) -> torch.Tensor:
            if part.routed:  # a mixture of experts: the router and the experts' grouped GEMMs
                return arch.experts(layer, h)
            if "up" in groups:  # an MLP without a gate (StarCoder2)
                return linear("down", self.act(linear("up", h)))
            a = gated_gemm.gated_up(h, fused["gate_up"][0]) if few else self.glu(linear("gate_up", h))
            return partial_down(a, base_layer(groups["down"][0]).weight, parts) if parts > 1 else linear("down", a)

        terms = arch.block(layer, x, attention, mlp)
        if not isinstance(terms, tuple):  # (a tensor would unpack along its batch: a silent wrong answer)
            raise TypeError(f"{type(arch).__name__}.block returned one tensor: it returns the residual stream after "
                            "the attention and the MLP's output, as a pair, which the decoder adds (models/base.py)")
        return terms

    def _base_weights(self, i: int) -> dict[str, torch.Tensor | None]:
        """Layer i's base weight of each projection group, as one tensor (None where a group is not
        one)."""
        out = {}
        for name, modules in self.groups[i].items():
            if name in self.fused[i]:
                out[name] = self.fused[i][name][0]
            else:
                out[name] = base_layer(modules[0]).weight if len(modules) == 1 else None
        return out

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
        return self.arch.logits(x)

    def prefill(self, tokens: torch.Tensor, lengths: torch.Tensor, slots: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """Run P right-padded prompts tokens [P, T] (true lengths [P]) once and write their
        keys/values into cache `slots` [N], slot n taking prompt `source[n]`: a prompt's G samples
        share one prefill. Returns the last-position logits [P, V]."""
        p, t = tokens.shape
        # each table's (cos, sin) [1, 1, T, R]; the causal mask of each sliding window (None: plain causal)
        tables = [(generic_in(c[:t][None, None], 2), generic_in(s[:t][None, None], 2)) for c, s in self.tables]
        masks = {w: None if (m := causal_mask(t, w, tokens.device)) is None else generic_in(m, 0, 1)
                 for w in set(self.windows)}
        slots, source = generic_in(slots, 0), generic_in(source, 0)
        x = self.arch.embed(tokens)  # [P, T, d]
        for part in self.parts:
            x = self.prefill_layer(part, generic_in(x, 0, 1), *tables[part.table], masks[part.sliding], slots, source)
        last = x[torch.arange(p, device=x.device), lengths - 1]  # [P, d]
        return self.logits(last)

    def _prefill_layer(self, part: LayerParts, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       mask: torch.Tensor | None, slots: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """One layer of a prefill (see prefill) on x [P, T, d]: causal attention over the prompts themselves (right
        padding never reaches real tokens; mask: a sliding window's [T, T], None: plain causal), their keys and
        values written into the cache `slots` [N] from prompts `source` [N] on the way."""
        def attend(part, q, k, v, rotate):
            q, k = rotate(q), rotate(k)
            write_prompts(part.k, part.v, k, v, slots, source)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=self.scale,
                                                  enable_gqa=self.heads != self.kv_heads)

        x, out = self._layer(part, x, cos, sin, attend)
        return x + out

    def decode(self, tokens: torch.Tensor, pos: torch.Tensor, window: int, reads: torch.Tensor,
               tail: int = 1, rows: torch.Tensor | None = None,
               shared: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """One token for every slot: tokens [S] at positions pos [S]. Keys/values are written at
        pos, attention reads each slot's positions <= reads [S] (pos; 0 for a slot whose sample
        has ended, which would otherwise read its whole cache on every step until the batch ends)
        and > reads - its sliding window, all within [0, window); `tail`: attention's split of each
        slot's positions over programs (attention.tail_splits). Returns logits [S, V]. `rows` [R]:
        a step over these R cache slots only (tokens, pos, reads [R], logits [R, V]): the tail of a
        batch, where few still decode, runs its GEMMs and sampling on R rows, not S. `shared`: the slots
        that hold one prompt, in units (attention.decode_attention), each unit's prompt read once. Shapes are
        static (CUDA-graph safe)."""
        # over some rows: one compiled version for every R (a tail's R halves as samples end)
        rowwise = (lambda t: t) if rows is None else (lambda t: generic_in(t, 0))
        # each table's (cos, sin) at the rows' positions [S, 1, 1, rotary dim]
        tables = [(rowwise(c[pos][:, None, None]), rowwise(s[pos][:, None, None])) for c, s in self.tables]
        x = self.arch.embed(tokens[:, None])  # [S, 1, d]
        # the last layer's MLP output, which the next layer adds to x first: [S, 1, d], or its fp32 partial products
        # [P, S, 1, d] (down_parts)
        parts = self.down_parts
        out = torch.zeros_like(x) if parts == 1 else x.new_zeros((parts, *x.shape), dtype=torch.float32)
        rowwise_out = (lambda t: t) if rows is None else (lambda t: generic_in(t, 0 if parts == 1 else 1))
        # few rows (a batch's tail, a small engine): gate/up and silu x up as one kernel (a version of its own)
        few = (self.slots if rows is None else len(rows)) <= self.gated_rows
        pos, reads, rows = rowwise(pos), rowwise(reads), rowwise(rows)
        for part in self.parts:
            x, out = self.decode_layer(part, rowwise(x), rowwise_out(out), *tables[part.table], pos, reads, window,
                                       tail, rows, few, *(shared or (None, None)))
        return self.final_logits(rowwise(x[:, 0]), rowwise_out(out[..., 0, :]))

    def _final_logits(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The logits [S, V] of the last layer's output x + out [S, d] (or out's parts [P, S, d] summed; the add
        fused with the final norm)."""
        return self.logits(x + summed(out, x))

    def _decode_layer(self, part: LayerParts, x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor,
                      sin: torch.Tensor, pos: torch.Tensor, reads: torch.Tensor, window: int, tail: int,
                      rows: torch.Tensor | None = None, few: bool = False, units: torch.Tensor | None = None,
                      unit_rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer of a decode step (see decode) on the residual stream x + out [S, 1, d] (the
        previous layer's two terms, out as fp32 partial products [P, S, 1, d] with down_parts: their sum and
        add are fused with this layer's first norm), as its own two terms (rows: [R, 1, d], the cache slots they
        are); units, unit_rows: decode's `shared` (two arguments, not a tuple: dynamo's guards on a tuple that may be
        None failed to report a recompilation and left the layer uncompiled)."""
        x = x + summed(out, x)
        s, g = x.shape[0], self.heads // self.kv_heads

        def attend(part, q, k, v, rotate):  # q [S, H, 1, D], k, v [S, Hkv, 1, D] (rotated and cached by the kernel)
            # the G query heads of one kv head act as G query rows over the same keys: no repeat of
            # the cache
            out = decode_attention(q.reshape(s, self.kv_heads, g, self.head_dim), part.k, part.v, reads, window,
                                   self.scale, part.sliding, tail, rows, rope=(cos[:, 0, 0], sin[:, 0, 0]),
                                   new=(k[:, :, 0], v[:, :, 0], pos),
                                   shared=None if units is None else (units, unit_rows))
            return out.reshape(s, self.heads, 1, self.head_dim)

        return self._layer(part, x, cos, sin, attend, parts=self.down_parts, few=few)
