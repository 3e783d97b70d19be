"""Messages' text as text: a chat-control token's string inside a message (a program that prints
'<|im_end|>\\n<|im_start|>system', a dataset row's prompt, a reference solution, the writer's program in the code
game) is tokenized as plain text, never as the token, so that the only turn markers a model or a reward model reads
are the ones its chat template wrote. Tokenizing rendered text whole (`tokenizer(text)`) parses such strings in the
content as the tokens themselves: forged turns.

Everything else is tokenized as the tokenizer tokenizes the whole text: a message's text is not cut from the
template's text around it (a byte-level BPE merges across the seam: " Write"), and a text that continues a sequence
(an environment's turn, a reference answer after its prompt) takes no sentencepiece word-start mark ("▁") that only
a sequence's first piece takes (Metaspace's prepend_scheme "first": Llama 2, Mistral, Phi-3 tokenizers). Where the
whole text's tokens hold a control token inside a message's text, the stretch between the template's own control
tokens around it is tokenized again as text."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Callable


def control_pattern(tokenizer) -> re.Pattern | None:
    """The control tokens' strings, longest first: the special ones (<|im_start|>), and the added ones that read as
    markup, special or not (Qwen's <tool_response>, which split_special_tokens leaves whole)."""
    specials = control_strings(tokenizer)
    return re.compile("|".join(map(re.escape, sorted(specials, key=len, reverse=True)))) if specials else None


def control_strings(tokenizer) -> set[str]:
    """control_pattern's strings."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return {t for t in (*tokenizer.all_special_tokens,
                        *(a.content for a in added.values() if getattr(a, "special", False)
                          or re.fullmatch(r"\S*[<>\[\]|]\S*", a.content or ""))) if t}


@dataclass(frozen=True)
class _Backends:
    """The fast tokenizer's backend four ways: parsing control tokens or reading them as text (encode_special_tokens),
    for a sequence's first piece or for a piece that continues one (Metaspace's "first" word-start mark off). Copies:
    the tokenizer's own backend is never changed (threads may encode with it)."""
    parse_first: object
    text_first: object
    parse_next: object
    text_next: object


def _backends(tokenizer) -> _Backends | None:
    """The tokenizer's backends (None for a tokenizer without a `tokenizers` backend: pieces are then tokenized as
    the tokenizer does, word-start marks and all). Built once per tokenizer."""
    found = getattr(tokenizer, "_execrl_backends", None)
    if found is not None or getattr(tokenizer, "backend_tokenizer", None) is None:
        return found
    from tokenizers import Tokenizer

    source = tokenizer.backend_tokenizer.to_str()
    spec = json.loads(source)
    _never_first(spec)

    def copy(text: str, as_text: bool):
        backend = Tokenizer.from_str(text)
        backend.encode_special_tokens = as_text
        return backend

    nxt = json.dumps(spec)
    found = _Backends(copy(source, False), copy(source, True), copy(nxt, False), copy(nxt, True))
    tokenizer._execrl_backends = found
    return found


def _never_first(spec) -> None:
    """A tokenizer spec's Metaspace pre-tokenizers (nested in sequences too) with prepend_scheme "first" set to "never":
    a piece that continues a sequence takes no word-start mark, as it takes none inside the whole text."""
    if isinstance(spec, dict):
        if spec.get("type") == "Metaspace" and spec.get("prepend_scheme") == "first":
            spec["prepend_scheme"] = "never"
        for value in spec.values():
            _never_first(value)
    elif isinstance(spec, list):
        for value in spec:
            _never_first(value)


def _encode(tokenizer, text: str, first: bool, as_text: bool) -> tuple[list[int], list[tuple[int, int]] | None]:
    """(ids, offsets) of `text` tokenized with no special tokens added, as the start of a sequence (`first`) or as a
    continuation; `as_text`: special tokens' strings read as text. Offsets are None without a fast backend."""
    b = _backends(tokenizer)
    if b is None:
        return tokenizer(text, add_special_tokens=False, split_special_tokens=as_text)["input_ids"], None
    backend = (b.text_first if as_text else b.parse_first) if first else (b.text_next if as_text else b.parse_next)
    done = backend.encode(text, add_special_tokens=False)
    return done.ids, done.offsets


def ids_of(text: str, tokenizer, first: bool = True) -> list[int]:
    """Token ids of `text` as the tokenizer reads it (its control tokens' strings as the tokens: a template's own
    text), at the start of a sequence or continuing one."""
    return _encode(tokenizer, text, first, as_text=False)[0]


def plain_ids(text: str, tokenizer, control: re.Pattern | None, first: bool = False, at: int = 0) -> list[int]:
    """Token ids of `text` as text, continuing a sequence unless `first`: a special token's string in it is read as
    text, an added token's that reads as markup (not special: split_special_tokens leaves it whole) is tokenized in
    two parts (its first character, then the rest), never as the token. `at`: where `text` begins in a sequence's
    text (a first piece only at 0)."""
    ids, pos = [], 0
    for match in control.finditer(text) if control is not None else ():
        if _special(tokenizer, match.group()):
            continue  # (read as text by the backend)
        for part, start in ((text[pos:match.start()], pos), (match.group()[:1], match.start())):
            ids += _encode(tokenizer, part, first and at + start == 0, as_text=True)[0] if part else []
        ids += plain_ids(match.group()[1:], tokenizer, control, first, at + match.start() + 1)
        pos = match.end()
    rest = text[pos:]
    return ids + (_encode(tokenizer, rest, first and at + pos == 0, as_text=True)[0] if rest else [])


def _special(tokenizer, token: str) -> bool:
    return token in set(tokenizer.all_special_tokens) or any(
        a.content == token and getattr(a, "special", False) for a in (getattr(tokenizer, "added_tokens_decoder", {})
                                                                      or {}).values())


def holds_control(content, control: re.Pattern | None) -> bool:
    return control is not None and isinstance(content, str) and control.search(content) is not None


def templated_ids(messages: list[dict], tokenizer, render: Callable[[list[dict]], str],
                  control: re.Pattern | None, first: bool = True) -> list[int] | None:
    """Token ids of `render(messages)` (a chat template's text) as the tokenizer reads the whole text, but that a
    control token's string inside a message's text is text; None where no message holds one (the caller tokenizes
    the text whole, as fast, in a batch)."""
    holders, shown = {}, []
    for m in messages:
        if holds_control(m.get("content"), control):
            holder = f"execrl{secrets.token_hex(8)}content"  # (letters and digits: kept by templates that escape)
            holders[holder], m = m["content"], {**m, "content": holder}
        shown.append(m)
    if not holders:
        return None
    text, parts, spans, pos = render(shown), [], [], 0
    for match in re.finditer("|".join(holders), text):  # the messages' own text back in its place
        parts.append(text[pos:match.start()])
        start = sum(map(len, parts))
        parts.append(holders[match.group()])
        spans.append((start, start + len(holders[match.group()])))
        pos = match.end()
    full = "".join(parts) + text[pos:]
    ids, offsets = _encode(tokenizer, full, first, as_text=False)
    if offsets is None:  # (no backend: the template's parts and the messages' text tokenized apart)
        return _apart(full, spans, tokenizer, control, first)
    return _mended(full, spans, ids, offsets, tokenizer, control, first)


def _mended(full: str, spans: list[tuple[int, int]], ids: list[int], offsets: list[tuple[int, int]], tokenizer,
            control: re.Pattern, first: bool) -> list[int]:
    """The whole text's tokens `ids`, each stretch between the template's own control tokens that holds a control
    token inside a message's text tokenized again, as text."""
    controls = {tokenizer.convert_tokens_to_ids(t) for t in control_strings(tokenizer)}
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}

    def in_message(i: int) -> bool:
        return any(a <= offsets[i][0] < b for a, b in spans)

    out, run, edge = [], [], 0  # edge: where the stretch after the last template control token begins

    def flush(end: int) -> None:
        if any(ids[i] in controls for i in run):  # (a control token in a message's text: the stretch again, as text)
            a, b = edge, end
            while a < b and full[a].isspace() and _strips(added, out[-1:] and out[-1], "rstrip"):
                a += 1
            out.extend(plain_ids(full[a:b], tokenizer, control, first, a))
        else:
            out.extend(ids[i] for i in run)
        run.clear()

    for i, token in enumerate(ids):
        if token in controls and not in_message(i):  # the template's own
            end = offsets[i][0]
            while end > edge and full[end - 1].isspace() and _strips(added, token, "lstrip"):
                end -= 1
            flush(end)
            out.append(token)
            edge = offsets[i][1]
        else:
            run.append(i)
    flush(len(full))
    return out


def _strips(added: dict, token, side: str) -> bool:
    """Whether an added token takes the whitespace on its `side` (lstrip, rstrip) into itself."""
    a = added.get(token) if isinstance(token, int) else None
    return bool(a is not None and getattr(a, side, False))


def _apart(full: str, spans: list[tuple[int, int]], tokenizer, control: re.Pattern, first: bool) -> list[int]:
    """A tokenizer without a fast backend: the template's parts and the messages' text (as text) tokenized apart."""
    ids, pos = [], 0
    for a, b in spans:
        ids += _encode(tokenizer, full[pos:a], first and pos == 0, as_text=False)[0] if a > pos else []
        ids += plain_ids(full[a:b], tokenizer, control, first, a)
        pos = b
    return ids + (_encode(tokenizer, full[pos:], first and pos == 0, as_text=False)[0] if pos < len(full) else [])


def text_ids(messages: list[dict], tokenizer, render: Callable[[list[dict]], str],
             control: re.Pattern | None, first: bool = True) -> list[int]:
    """Token ids of `render(messages)`, each message's text as text (templated_ids), or tokenized whole where no
    message holds a control token's string; at the start of a sequence (`first`) or continuing one (an
    environment's turn)."""
    ids = templated_ids(messages, tokenizer, render, control, first)
    return ids if ids is not None else ids_of(render(messages), tokenizer, first)


def turn_end(tokenizer) -> int | None:
    """The control token the chat template writes after an assistant message's text (<|im_end|>, <end_of_turn>,
    <|eot_id|>, <|end|>; DeepSeek-Coder's '\\n<|EOT|>'), the token a model of this template ends its turn with;
    None where it writes none (or has no template, or refuses the probe)."""
    control = control_pattern(tokenizer) if getattr(tokenizer, "chat_template", None) else None
    if control is None:
        return None
    answer = "execrl" + secrets.token_hex(6)
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "Stand-in question?"},
                                              {"role": "assistant", "content": answer}], tokenize=False)
    except Exception:  # (a template that refuses the probe: no end to name)
        return None
    after = text[text.rfind(answer) + len(answer):] if answer in text else ""
    match = control.match(after.lstrip())
    return tokenizer.convert_tokens_to_ids(match.group()) if match else None
