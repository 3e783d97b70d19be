"""The model families the rollout engine runs: one file each, found by the HF config's model_type.

Adding one: a file here with an `Architecture` subclass that overrides what differs from Llama
(base.py), registered for its model_types, imported below, and its case in
tests/rollout/test_architectures.py (a tiny random model of the family against transformers)."""

from __future__ import annotations

from execrl.rollout.models import gemma3, granite, llama, moe, olmo2, phi3, qwen3, starcoder2  # noqa: F401 (register)
from execrl.rollout.models.base import REGISTRY, Architecture, UnsupportedModel, has_family


def architecture_of(model) -> Architecture:
    """The engine's view of `model`; UnsupportedModel, naming the fix, for a family it does not
    run."""
    cfg = model.config
    kind = getattr(cfg, "model_type", "?")
    if not has_family(model):
        raise UnsupportedModel(f"the execrl rollout engine's family files run {', '.join(sorted(REGISTRY))} models, "
                               f"not this {kind!r}: "
                               "set policy.generation.backend=transformers to use transformers' generate instead")
    return REGISTRY[kind](model)


__all__ = ["REGISTRY", "Architecture", "UnsupportedModel", "architecture_of", "has_family"]
