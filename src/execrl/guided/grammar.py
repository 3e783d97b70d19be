"""Constraints as llguidance reads them: a regex, a JSON schema or a Lark grammar compiled to llguidance's grammar
text (ConstraintError where it does not compile), the token slices each kind is given, and the threads that build
matchers and fill masks off the GIL."""

from __future__ import annotations

import functools
import json
import os
from concurrent.futures import ThreadPoolExecutor

KINDS = ("regex", "json_schema", "grammar")


class ConstraintError(ValueError):
    """A constraint llguidance cannot compile (the message says why)."""


def grammar_text(kind: str, value) -> str:
    """llguidance's form of a constraint (kind: regex | json_schema | grammar (Lark));
    ConstraintError if invalid."""
    import llguidance

    if kind == "regex":
        text = llguidance.LLMatcher.grammar_from_regex(value)
    elif kind == "json_schema":
        schema = value if isinstance(value, str) else json.dumps(value)
        try:
            # compact: no whitespace between tokens (flexible whitespace lets a sampler pad
            # forever); a schema's own "x-guidance" options say otherwise
            text = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        except Exception as e:  # noqa: BLE001 - llguidance raises for a schema it cannot read
            raise ConstraintError(f"the JSON schema does not compile: {e}") from None
    elif kind == "grammar":
        text = llguidance.LLMatcher.grammar_from_lark(value)
    else:
        raise ConstraintError(f"constraint kind {kind!r}: choose one of {', '.join(KINDS)}")
    error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text)
    if error:
        raise ConstraintError(f"the {kind} does not compile: {messages[0]}")
    return text


# Token sets llguidance computes once per tokenizer and then allows whole wherever a lexeme admits
# every string of them (its "slices"; each token belongs to the first slice it matches, and a slice
# the state does not admit is walked token by token). Chosen per constraint kind. A regex or a
# grammar gets the free text of code formats (CODE_SLICES: the body of a fenced block, and of a
# tagged block such as <think>); with llguidance's JSON-string slices ahead of them, as every kind
# had before, those claimed most tokens, a block's body does not admit them (they hold backticks and
# "<"), and each mask there walked them: 4.2 ms against 0.03 ms on a 151,000-token vocabulary
# (bench/README.md). A JSON schema keeps both, its strings' first.
CODE_SLICES = [r"[^`]+", r"[^<]+"]


def slices_for(kind: str) -> list[str]:
    import llguidance

    return llguidance.LLTokenizer.general_slices() + CODE_SLICES if kind == "json_schema" else CODE_SLICES


@functools.cache
def _builders() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max(1, min(16, (os.cpu_count() or 2) - 1)), thread_name_prefix="execrl-matchers")


def parallel(fn, items) -> list:
    """fn over items in threads (for work that drops the GIL: llguidance's)."""
    return list(_builders().map(fn, items))


