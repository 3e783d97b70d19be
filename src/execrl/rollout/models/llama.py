"""Llama and the families that are Llama on the engine's path: Qwen2 (q/k/v biases), Mistral (a
sliding window where its config has one)."""

from execrl.rollout.models.base import Architecture, register


@register
class Llama(Architecture):
    model_types = ("llama", "qwen2", "mistral")
