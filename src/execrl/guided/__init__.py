"""Guided decoding: constraints (regex, JSON schema, Lark grammar) the sampler keeps every token
inside."""

from execrl.guided.constraints import (
    CODE_SLICES,
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

__all__ = ["CODE_SLICES", "KINDS", "ConstraintError", "Guide", "Guides", "grammar_text", "masks_of", "pack", "restrict",
           "unpack"]
