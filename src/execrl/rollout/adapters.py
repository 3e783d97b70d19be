"""LoRA adapters as the engine applies them: two GEMMs per projection group, not two per layer and a
cast each.

A decoder layer's projections come in groups that the engine computes as one output: q/k/v, o,
gate/up, down. For a group with adapters, its A matrices are stacked, [n r, in], and its B matrices
(the scale s = alpha / r folded in) form one block-diagonal matrix, [sum of outs, n r], zero where a
projection has no adapter. The group's low-rank path is then (x A^T) B^T, added to the base output
by the second GEMM itself (addmm); in merge mode (decoder.adapters_merged) B A is added into the
base weight instead. The buffers are in the model's compute dtype and are filled from the trainer's
adapters at the start of each generate call (`refresh`: a few small copies), so an optimizer step is
seen by the next rollout, and the trainer may switch its adapters off (the reference policy) while
rollouts go on.

Shapes: x [..., in]; A [n r, in]; B [out, n r]; y [..., out].
"""

from __future__ import annotations

import torch

from execrl.lora import ADAPTER, base_layer, is_adapted


class GroupAdapters:
    """The adapters of one projection group (e.g. a layer's q, k, v)."""

    def __init__(self, modules: list[torch.nn.Module], dtype: torch.dtype):
        adapted = [m for m in modules if is_adapted(m)]
        outs = [base_layer(m).out_features for m in modules]
        a0 = adapted[0].lora_A[ADAPTER].weight
        ranks = [m.lora_A[ADAPTER].weight.shape[0] for m in adapted]
        self.a = torch.zeros(sum(ranks), a0.shape[1], dtype=dtype, device=a0.device)  # [n r, in]
        self.b = torch.zeros(sum(outs), sum(ranks), dtype=dtype, device=a0.device)  # [out, n r] block-diagonal
        self._blocks = []  # (module, rows of b, columns of b / rows of a)
        row, col = 0, 0
        for m, out in zip(modules, outs):
            if is_adapted(m):
                r = m.lora_A[ADAPTER].weight.shape[0]
                self._blocks.append((m, slice(row, row + out), slice(col, col + r)))
                col += r
            row += out
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """The trainer's current adapter weights into the buffers (in place: CUDA graphs keep
        reading them)."""
        for m, rows, cols in self._blocks:
            self.a[cols].copy_(m.lora_A[ADAPTER].weight)
            self.b[rows, cols].copy_(m.lora_B[ADAPTER].weight * m.scaling[ADAPTER])

    def add(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y + (x A^T) B^T: the group's base output with its low-rank path."""
        x2 = x.reshape(-1, x.shape[-1])
        low = x2 @ self.a.t()  # [tokens, n r]
        return torch.addmm(y.reshape(-1, y.shape[-1]), low, self.b.t()).view(y.shape)


class LayerAdapters:
    """A decoder layer's groups: qkv, o, gate_up, down (None where a group has no adapter)."""

    def __init__(self, groups: dict[str, list[torch.nn.Module]], dtype: torch.dtype):
        self.groups = {name: GroupAdapters(ms, dtype) if any(is_adapted(m) for m in ms) else None
                       for name, ms in groups.items()}

    def refresh(self) -> None:
        for g in self.groups.values():
            if g is not None:
                g.refresh()

    def add(self, name: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        g = self.groups[name]
        return y if g is None else g.add(x, y)


def layer_adapters(groups: list[dict[str, list[torch.nn.Module]]], dtype: torch.dtype) -> list[LayerAdapters | None]:
    """Each layer's adapters, from its projection groups (the architecture's): None for a layer
    without any (a model without LoRA has none at all)."""
    return [LayerAdapters(g, dtype) if any(is_adapted(m) for ms in g.values() for m in ms) else None for g in groups]
