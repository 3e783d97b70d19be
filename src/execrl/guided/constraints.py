"""Constraints on what the model may write: a regex, a JSON schema or a Lark grammar, compiled by
llguidance into matchers that say, before each token, which tokens keep the text inside the
constraint (a packed bitmask).

Why llguidance, not xgrammar (bench/guided_masks.py; tables in bench/README.md): it compiles a
constraint in milliseconds (a task may bring its own schema at no cost; xgrammar took 0.4-0.8 s per
JSON schema), a mask costs about the same whatever the constraint (xgrammar's JSON-schema masks were
uneven: p95 81-171 ms for a batch), and it reads Lark grammars, in which "a <think> block, then one
fenced python block" is a few lines.

Shapes: V the model's vocabulary (its logits' width), W = ceil(V / 32) int32 words per mask; bit t
of a mask (word t // 32, bit t % 32) is set when token t is allowed.
"""

from __future__ import annotations

import functools
import json
import os
from concurrent.futures import ThreadPoolExecutor

import torch

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


class Guide:
    """One constraint bound to a tokenizer: matchers for new sequences, and the masks of a given
    sequence."""

    def __init__(self, name: str, text: str, tokenizer, words: int, eos_ids: list[int]):
        self.name, self.text, self.tokenizer, self.words, self.eos_ids = name, text, tokenizer, words, eos_ids

    def matcher(self):
        """A matcher at the start of the constraint."""
        return self.matchers(1)[0]

    def matchers(self, n: int) -> list:
        """n matchers at the start of the constraint, built in parallel (each takes about a
        millisecond, without the GIL; llguidance's reset() of a used matcher and its deep_copy()
        were no substitute: a reset one that had completed a JSON value gave wrong masks, copies
        filled their masks several times slower)."""
        import llguidance

        def build(_):
            return llguidance.LLMatcher(self.tokenizer, self.text, log_level=0)

        made = [build(0)] if n == 1 else parallel(build, range(n))
        if made and made[0].is_error():
            raise ConstraintError(f"constraint {self.name}: {made[0].get_error()}")
        return made

    def masks(self, ids: list[int]) -> torch.Tensor:
        """The mask before each of `ids` as the sampler saw it (the trainer scores the same
        distribution): [n, W] int32. A token the constraint did not allow (it cannot have been
        sampled under it) is an error."""
        m, out = self.matcher(), torch.full((len(ids), self.words), -1, dtype=torch.int32)
        for i, t in enumerate(ids):
            self.fill(m, out, i)
            if not (out[i, t >> 5] >> (t & 31)) & 1:
                raise ConstraintError(f"token {t} at {i} is outside constraint {self.name}")
            if not m.is_stopped() and not m.consume_token(t):
                raise ConstraintError(f"token {t} at {i} does not continue constraint {self.name}: "
                                      f"{m.get_error()[:300]}")
        return out

    def fill(self, matcher, bitmask: torch.Tensor, row: int) -> None:
        """bitmask[row] <- what may follow in the matcher's state: the constraint's tokens, or only
        the end of the sequence once the constraint is complete."""
        import llguidance.torch as lt

        if matcher.is_stopped():
            self.fill_end(bitmask, row)
        else:
            lt.fill_next_token_bitmask(matcher, bitmask, row)

    def fill_end(self, bitmask: torch.Tensor, row: int) -> None:
        """bitmask[row] <- only the end of the sequence (a complete constraint)."""
        bitmask[row] = 0
        for t in self.eos_ids:
            bitmask[row, t >> 5] |= _bit(t & 31)


def _bit(b: int) -> int:
    return (1 << b) - 2**32 if b == 31 else 1 << b


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


def masks_of(turns: list[tuple[Guide, list[int]]]) -> list[torch.Tensor]:
    """Guide.masks of many (guide, ids) turns, in parallel threads (llguidance fills a mask without
    the GIL)."""
    return parallel(lambda turn: turn[0].masks(turn[1]), turns)


def parallel(fn, items) -> list:
    """fn over items in threads (for work that drops the GIL: llguidance's)."""
    return list(_builders().map(fn, items))


class Guides:
    """Guides for one tokenizer and vocabulary, compiled once per constraint, each with its kind's
    slices (or the given ones, for every kind)."""

    def __init__(self, hf_tokenizer, vocab: int, eos_ids: list[int], slices: list[str] | None = None):
        self.vocab, self.words, self.eos_ids = vocab, -(-vocab // 32), list(eos_ids)
        self.hf_tokenizer = hf_tokenizer  # (also read by the engine's C tokenizers: execrl.rollout.maskpool)
        self.slices = slices  # None: each kind's own (slices_for)
        self._tokenizers: dict[tuple[str, ...], object] = {}
        self._made: dict[tuple[str, str], Guide] = {}

    def tokenizer(self, slices: tuple[str, ...]):
        """llguidance's tokenizer with these slices (built once: about a second for 150K tokens)."""
        if slices not in self._tokenizers:
            import llguidance.hf

            self._tokenizers[slices] = llguidance.hf.from_tokenizer(self.hf_tokenizer, n_vocab=self.vocab,
                                                                    eos_token=self.eos_ids, slices=list(slices))
        return self._tokenizers[slices]

    def get(self, kind: str, value) -> Guide:
        key = (kind, value if isinstance(value, str) else json.dumps(value, sort_keys=True))
        if key not in self._made:
            text = grammar_text(kind, value)
            slices = tuple(slices_for(kind) if self.slices is None else self.slices)
            guide = Guide(f"{kind} {key[1][:60]!r}", text, self.tokenizer(slices), self.words, self.eos_ids)
            guide.guides, guide.slices = self, slices  # (its C matchers: execrl.rollout.maskpool)
            self._made[key] = guide
        return self._made[key]


def unpack(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """[n, W] int32 -> [n, V] bool: which tokens each mask allows (on the masks' device)."""
    cols = torch.arange(vocab, device=bitmask.device)
    return ((bitmask[:, cols >> 5] >> (cols & 31).to(torch.int32)) & 1).bool()


def restrict(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """logits [n, V] with -inf wherever the bitmask [n, W] allows no token: the masked
    distribution's logits."""
    return logits.masked_fill(~unpack(bitmask, logits.shape[-1]), float("-inf"))


def pack(allowed: torch.Tensor) -> torch.Tensor:
    """[n, V] bool -> [n, W] int32, unpack's inverse."""
    n, vocab = allowed.shape
    bits = torch.zeros(n, -(-vocab // 32) * 32, dtype=torch.int64, device=allowed.device)
    bits[:, :vocab] = allowed.long()
    words = (bits.view(n, -1, 32) << torch.arange(32, device=allowed.device)).sum(-1)  # [n, W] in [0, 2**32)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
