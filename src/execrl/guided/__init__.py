"""Guided decoding: constraints (regex, JSON schema, Lark grammar) the sampler keeps every token
inside."""

from execrl.guided.constraints import Guide, Guides, masks_of, pack, restrict, unpack
from execrl.guided.grammar import CODE_SLICES, KINDS, ConstraintError, grammar_text

__all__ = ["CODE_SLICES", "KINDS", "ConstraintError", "Guide", "Guides", "grammar_text", "masks_of", "pack", "restrict",
           "unpack"]
