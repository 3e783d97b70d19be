"""StarCoder2: LayerNorms with biases, biases on every projection, an MLP without a gate (c_fc, GELU,
c_proj), a sliding window where the config has one."""

import torch.nn.functional as F

from execrl.rollout.models.base import Architecture, register


@register
class Starcoder2(Architecture):
    model_types = ("starcoder2",)

    def groups(self, layer):
        a, m = layer.self_attn, layer.mlp
        return {"qkv": [a.q_proj, a.k_proj, a.v_proj], "o": [a.o_proj], "up": [m.c_fc], "down": [m.c_proj]}

    def activation(self, layer):
        return layer.mlp.act

    def norm(self, module, x):
        return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)
