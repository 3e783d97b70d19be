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
import re

import torch

from execrl.guided import native
from execrl.guided.grammar import ConstraintError, grammar_text, parallel, slices_for


class Guide:
    """One constraint bound to a tokenizer: matchers for new sequences, and the masks of a given
    sequence."""

    def __init__(self, name: str, text: str, tokenizer, words: int, eos_ids: list[int]):
        self.name, self.text, self.tokenizer, self.words, self.eos_ids = name, text, tokenizer, words, eos_ids

    def masks(self, ids: list[int]) -> torch.Tensor:
        """The mask before each of `ids` as the sampler saw it (the trainer scores the same
        distribution): [n, W] int32, from the engine's own C matchers (execrl.guided.native.masks). A
        token the constraint did not allow (it cannot have been sampled under it) is an error."""
        return native.masks(self, ids)

    def fill_end(self, bitmask: torch.Tensor, row: int) -> None:
        """bitmask[row] <- only the end of the sequence (a complete constraint)."""
        bitmask[row] = 0
        for t in self.eos_ids:
            bitmask[row, t >> 5] |= _bit(t & 31)


def _bit(b: int) -> int:
    return (1 << b) - 2**32 if b == 31 else 1 << b


def masks_of(turns: list[tuple[Guide, list[int]]]) -> list[torch.Tensor]:
    """Guide.masks of many (guide, ids) turns, in parallel threads (llguidance fills a mask without
    the GIL)."""
    return parallel(lambda turn: turn[0].masks(turn[1]), turns)


class Guides:
    """Guides for one tokenizer and vocabulary, compiled once per constraint, each with its kind's
    slices (or the given ones, for every kind)."""

    def __init__(self, hf_tokenizer, vocab: int, eos_ids: list[int], slices: list[str] | None = None):
        self.vocab, self.words, self.eos_ids = vocab, -(-vocab // 32), list(eos_ids)
        self.hf_tokenizer = hf_tokenizer  # (also read by the engine's C tokenizers: execrl.guided.native)
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
        """The guide of a constraint, compiled on first use; ConstraintError, one line, where it spells out a special
        token's text or admits no text at all."""
        # (a schema's properties in their order: {answer, reasoning} and {reasoning, answer} are two grammars, and
        # sorted keys served the first's guide for the second)
        key = (kind, value if isinstance(value, str) else json.dumps(value))
        if key not in self._made:
            special_text(kind, key[1], self.hf_tokenizer)
            self._made[key] = self.compile(kind, value, key[1])
        return self._made[key]

    def compile(self, kind: str, value, shown: str) -> Guide:
        """A new guide of the constraint; ConstraintError where it does not compile or admits no text."""
        text = grammar_text(kind, value)
        slices = tuple(slices_for(kind) if self.slices is None else self.slices)
        guide = Guide(f"{kind} {shown[:60]!r}", text, self.tokenizer(slices), self.words, self.eos_ids)
        guide.guides, guide.slices = self, slices  # (its C matchers: execrl.guided.native)
        native.first_mask(guide)
        return guide


@functools.cache
def byte_guides() -> Guides:
    """Guides over a byte-level tokenizer (a token per byte, an end token): a constraint's checks before any model is
    loaded (a dataset row's, as it loads)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    bpe = Tokenizer(models.BPE({ch: i for i, ch in enumerate(sorted(alphabet))}, []))
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|end|>")
    return Guides(tok, len(tok), [tok.eos_token_id], slices=[])


def schema_text(schema) -> list[str]:
    """The texts of a JSON schema that its outputs must hold: const and enum strings, patterns (and their keys)."""
    if isinstance(schema, list):
        return [t for item in schema for t in schema_text(item)]
    if not isinstance(schema, dict):
        return []
    found = [v for k in ("const", "pattern") if isinstance(v := schema.get(k), str)]
    found += [v for v in schema.get("enum") or [] if isinstance(v, str)] if isinstance(schema.get("enum"), list) else []
    found += list(schema.get("patternProperties") or {}) if isinstance(schema.get("patternProperties"), dict) else []
    return found + [t for k, v in schema.items() if k not in ("description", "title", "examples", "$comment", "default")
                    and isinstance(v, (dict, list)) for t in schema_text(v)]


def admits_text(kind: str, value) -> None:
    """ConstraintError where the constraint does not compile or admits no text at all (checked over bytes; a Lark
    grammar that names a model's tokens, <|im_end|> or <[id]>, only compiled: bytes have no such token)."""
    shown = value if isinstance(value, str) else json.dumps(value)
    if kind == "grammar" and re.search(r"<\[\d|<\|", shown):
        grammar_text(kind, value)
    else:
        byte_guides().compile(kind, value, shown)


def special_text(kind: str, value: str, tokenizer) -> None:
    """ConstraintError where a constraint spells out the text of one of the tokenizer's special tokens (a regex
    `<\\|im_end\\|>`): the tokenizer reads that text as the one token, never as text, so the constraint cannot be
    written token by token (llguidance's mask offered the token, the matcher then refused it: a crash mid-run), and
    where it is the end token the answer ends there, unfinished. A Lark grammar's literals and regexes are read; its
    token names (<|im_end|>, <[128009]>, unquoted) name the token itself and are fine."""
    if kind == "grammar":  # (its literals and regexes, its // comments left out)
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"|/((?:[^/\\\n]|\\.)*)/', re.sub(r"(?m)//.*$", "", value))
        value = "\n".join(a or b for a, b in parts)
    elif kind == "json_schema":  # (what constrains the output: a description or a title may name anything)
        value = "\n".join(schema_text(json.loads(value) if value.lstrip().startswith("{") else value))
    text = re.sub(r"\\(.)", r"\1", value)  # (a regex's escapes: \| is |)
    special = {t for t in getattr(tokenizer, "all_special_tokens", []) if len(t) > 1}
    special |= {t.content for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()
                if t.special and len(t.content) > 1}
    spelt = sorted(t for t in special if t in text)
    if spelt:
        named = " (a Lark grammar names the token itself unquoted: " + spelt[0] + ")" if kind == "grammar" else ""
        raise ConstraintError(f"the {kind} spells out {spelt[0]!r}, a special token of the tokenizer: its text is "
                              "read as that one token, never as text, so no answer can write it token by token (the "
                              f"end token would end the answer there): leave it out of the constraint{named}")


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
