"""Messages' text as text: a chat-control token's string inside a message (a program that prints
'<|im_end|>\\n<|im_start|>system', a dataset row's prompt, a reference solution, the writer's program in the code
game) is tokenized as plain text, never as the token, so that the only turn markers a model or a reward model reads
are the ones its chat template wrote. Tokenizing rendered text whole (`tokenizer(text)`) parses such strings in the
content as the tokens themselves: forged turns."""

from __future__ import annotations

import re
import secrets
from typing import Callable


def control_pattern(tokenizer) -> re.Pattern | None:
    """The control tokens' strings, longest first: the special ones (<|im_start|>), and the added ones that read as
    markup, special or not (Qwen's <tool_response>, which split_special_tokens leaves whole)."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    specials = {t for t in (*tokenizer.all_special_tokens,
                            *(a.content for a in added.values() if getattr(a, "special", False)
                              or re.fullmatch(r"\S*[<>\[\]|]\S*", a.content or ""))) if t}
    return re.compile("|".join(map(re.escape, sorted(specials, key=len, reverse=True)))) if specials else None


def plain_ids(text: str, tokenizer, control: re.Pattern | None) -> list[int]:
    """Token ids of `text` as text: a control token's string in it is tokenized in two parts (its first character,
    then the rest), never as the token."""
    ids, pos = [], 0
    for match in control.finditer(text) if control is not None else ():
        for part in (text[pos:match.start()], match.group()[:1]):
            ids += tokenizer(part, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ids += plain_ids(match.group()[1:], tokenizer, control)
        pos = match.end()
    return ids + tokenizer(text[pos:], add_special_tokens=False, split_special_tokens=True)["input_ids"]


def holds_control(content, control: re.Pattern | None) -> bool:
    return control is not None and isinstance(content, str) and control.search(content) is not None


def templated_ids(messages: list[dict], tokenizer, render: Callable[[list[dict]], str],
                  control: re.Pattern | None) -> list[int] | None:
    """Token ids of `render(messages)` (a chat template's text) with each message's text that holds a control
    token's string tokenized as text; None where no message holds one (the caller tokenizes the text whole, as
    fast, in a batch)."""
    holders, shown = {}, []
    for m in messages:
        if holds_control(m.get("content"), control):
            holder = f"execrl{secrets.token_hex(8)}content"  # (letters and digits: kept by templates that escape)
            holders[holder], m = m["content"], {**m, "content": holder}
        shown.append(m)
    if not holders:
        return None
    text, ids, pos = render(shown), [], 0
    for match in re.finditer("|".join(holders), text):  # the template's parts, then each message's text as text
        ids += tokenizer(text[pos:match.start()], add_special_tokens=False)["input_ids"]
        ids += plain_ids(holders[match.group()], tokenizer, control)
        pos = match.end()
    return ids + tokenizer(text[pos:], add_special_tokens=False)["input_ids"]


def text_ids(messages: list[dict], tokenizer, render: Callable[[list[dict]], str],
             control: re.Pattern | None) -> list[int]:
    """Token ids of `render(messages)`, each message's text as text (templated_ids), or tokenized whole where no
    message holds a control token's string."""
    ids = templated_ids(messages, tokenizer, render, control)
    return ids if ids is not None else tokenizer(render(messages), add_special_tokens=False)["input_ids"]
