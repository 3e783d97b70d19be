"""Mixture-of-experts families: a router and E experts (transformers' layout: gate_up_proj [E, 2I, d],
down_proj [E, d, I]) in place of the MLP, in every layer or those the config names; attention as
their dense relatives'. The experts run through layers.routed_experts (grouped GEMMs on a GPU)."""

import torch

from execrl.rollout.models.base import Architecture, UnsupportedModel, register
from execrl.rollout.models.layers import routed_experts
from execrl.rollout.models.olmo2 import Olmo2
from execrl.rollout.models.qwen3 import Qwen3


class RoutedExperts(Architecture):
    weights_dtype = None  # the routing weights' dtype (None: the model's, as most transformers routers cast)

    def __init__(self, model):
        super().__init__(model)
        wrapped = [i for i, l in enumerate(self.layers) if self.routed(l) and not hasattr(l.mlp.experts, "gate_up_proj")]
        if wrapped:  # (peft's ParamWrapper: LoRA on the experts' 3-D weights)
            raise UnsupportedModel("LoRA adapts the experts of this mixture-of-experts model (layer "
                                   f"{wrapped[0]}), which the execrl engine does not run: keep the adapters on "
                                   "attention (policy.lora.match_all_linear=false, target_modules=[q_proj, k_proj, "
                                   "v_proj, o_proj], or exclude_modules the MLP's), or set "
                                   "policy.generation.backend=transformers")

    def routed(self, layer) -> bool:
        return True

    def activation(self, layer):
        return layer.mlp.experts.act_fn if self.routed(layer) else super().activation(layer)

    def experts(self, layer, h):
        block = layer.mlp
        normalize = getattr(self.cfg, "norm_topk_prob", True)  # (Mixtral always renormalizes)
        y = routed_experts(h.reshape(-1, h.shape[-1]), block.gate.weight, block.gate.top_k, normalize,
                           block.experts.gate_up_proj, block.experts.down_proj, block.experts.act_fn,
                           self.weights_dtype)
        return y.view(h.shape)


@register
class Qwen3Moe(RoutedExperts, Qwen3):
    """Qwen3-MoE (30B-A3B and kin): Qwen3's attention; experts in the layers of every decoder_sparse_step
    but mlp_only_layers."""
    model_types = ("qwen3_moe",)

    def routed(self, layer):
        i, c = layer.self_attn.layer_idx, self.cfg
        return i not in c.mlp_only_layers and c.num_experts > 0 and (i + 1) % c.decoder_sparse_step == 0


@register
class Mixtral(RoutedExperts):
    """Mixtral: Mistral's attention (its sliding window where the config has one), experts in every layer;
    its router keeps the weights in float32."""
    model_types = ("mixtral",)
    weights_dtype = torch.float32


@register
class Olmoe(RoutedExperts):
    """OLMoE: Llama's pre-norm layer with OLMo 2's whole-projection q/k norms, experts in every layer."""
    model_types = ("olmoe",)
    qk_norm = Olmo2.qk_norm

    @classmethod
    def runs(cls, config) -> bool:
        return not getattr(config, "clip_qkv", None)  # (q, k, v clamped: transformers' layers, the generic path)
