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
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)
    return obj


def set_attribute(obj, dotted: str, value) -> None:
    """Sets the value at a dotted key of a config object (a dict's item where the key is inside one,
    as in policy.optimizer.kwargs.eps)."""
    section, name = dotted.rsplit(".", 1)
    parent = attribute(obj, section)
    if isinstance(parent, dict):
        parent[name] = value
    else:
        setattr(parent, name, value)
