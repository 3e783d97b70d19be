"""Gemma 3 (text): RMSNorm of (1 + w) in float32, four norms a layer (before and after each
sublayer), embeddings scaled by sqrt(hidden) (transformers' embedding module does it), queries and
keys normalized per head, attention scale query_pre_attn_scalar^-1/2 (attn.scaling), GELU-gated MLP,
and interleaved layers: sliding-window ones with their own rotary base beside global ones."""

from execrl.rollout.models.base import Architecture, register, rotary_at
from execrl.rollout.models.layers import offset_rms_norm


@register
class Gemma3(Architecture):
    model_types = ("gemma3_text",)

    def norm(self, module, x):
        return offset_rms_norm(module, x)

    def qk_norm(self, attn, q, k):
        return self.norm(attn.q_norm, q), self.norm(attn.k_norm, k)

    def block(self, layer, x, attention, mlp):
        x = x + self.norm(layer.post_attention_layernorm, attention(self.norm(layer.input_layernorm, x)))
        return x, self.norm(layer.post_feedforward_layernorm, mlp(self.norm(layer.pre_feedforward_layernorm, x)))

    def rotary_tables(self, like, positions):
        kinds = {t: rotary_at(self.model.model.rotary_emb, like, positions, t) for t in set(self.cfg.layer_types)}
        return [kinds[t] for t in self.cfg.layer_types]

    def logits(self, x):
        logits = super().logits(x)
        cap = getattr(self.cfg, "final_logit_softcapping", None)
        return logits if cap is None else (logits / cap).tanh() * cap
