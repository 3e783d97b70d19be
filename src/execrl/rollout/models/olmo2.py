"""OLMo 2: norms after each sublayer (on its output, before the residual add; none before it), and
queries and keys RMS-normalized over all heads together (the whole projection) before rotary."""

from execrl.rollout.models.base import Architecture, register


@register
class Olmo2(Architecture):
    model_types = ("olmo2",)

    def qk_norm(self, attn, q, k):  # q [B, T, H, D]: the norm's weight spans H x D
        return (self.norm(attn.q_norm, q.flatten(-2)).view(q.shape),
                self.norm(attn.k_norm, k.flatten(-2)).view(k.shape))

    def block(self, layer, x, attention, mlp):
        x = x + self.norm(layer.post_attention_layernorm, attention(x))
        return x, self.norm(layer.post_feedforward_layernorm, mlp(x))
