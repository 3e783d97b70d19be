"""Qwen3: Llama with queries and keys RMS-normalized per head before rotary; sliding-window layers
where its config's layer_types say so."""

from execrl.rollout.models.base import Architecture, register


@register
class Qwen3(Architecture):
    model_types = ("qwen3",)

    def qk_norm(self, attn, q, k):
        return self.norm(attn.q_norm, q), self.norm(attn.k_norm, k)
