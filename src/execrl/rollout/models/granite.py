"""Granite 3: Llama with four scalars: embeddings x embedding_multiplier, attention scale
attention_multiplier (transformers' attn.scaling), each sublayer's output x residual_multiplier
before the residual add, logits / logits_scaling."""

from execrl.rollout.models.base import Architecture, register


@register
class Granite(Architecture):
    model_types = ("granite",)

    def block(self, layer, x, attention, mlp):
        m = self.cfg.residual_multiplier
        x = x + attention(self.norm(layer.input_layernorm, x)) * m
        return x, mlp(self.norm(layer.post_attention_layernorm, x)) * m

    def embed(self, tokens):
        return self.embed_tokens(tokens) * self.cfg.embedding_multiplier

    def logits(self, x):
        return super().logits(x) / self.cfg.logits_scaling
