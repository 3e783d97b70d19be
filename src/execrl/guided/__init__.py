"""Guided decoding: constraints (regex, JSON schema, Lark grammar) the sampler keeps every token inside."""

from execrl.guided.constraints import (
    KINDS,
    ConstraintError,
    Guide,
    Guides,
    grammar_text,
    masks_of,
    pack,
    restrict,
    unpack,
)

__all__ = ["KINDS", "ConstraintError", "Guide", "Guides", "grammar_text", "masks_of", "pack", "restrict", "unpack"]
