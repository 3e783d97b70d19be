"""Nested configs as dotted keys."""

from __future__ import annotations


def dotted_leaves(tree: dict, prefix: str = ""):
    """(dotted key, value) of each leaf of a nested dict; an empty dict is a leaf."""
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from dotted_leaves(v, key + ".")
        else:
            yield key, v


def attribute(obj, dotted: str):
    """The value at a dotted key of a config object (policy.lora.enabled)."""
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj
