"""Phi-3 and Phi-4-mini: Llama whose checkpoint already joins q/k/v (qkv_proj) and gate/up
(gate_up_proj); Phi-4-mini rotates only part of each head (partial_rotary_factor: the rotary tables
are narrower than the head, layers.rotate passes the rest through)."""

from execrl.rollout.models.base import Architecture, register


@register
class Phi3(Architecture):
    model_types = ("phi3",)

    def groups(self, layer):
        a, m = layer.self_attn, layer.mlp
        return {"qkv": [a.qkv_proj], "o": [a.o_proj], "gate_up": [m.gate_up_proj], "down": [m.down_proj]}

    def activation(self, layer):
        return layer.mlp.activation_fn
