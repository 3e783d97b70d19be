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
from typing import Callable


def control_pattern(tokenizer) -> re.Pattern | None:
    """The control tokens' strings, longest first: the special ones (<|im_start|>), and the added ones that read as
    markup, special or not (Qwen's <tool_response>, which split_special_tokens leaves whole), but for a plain tag
    that the chat template never writes (Gemma's <code>, <b>, <table>: HTML its tokenizer reads as one token; split,
    the model read its own interpreter instructions' '<code>' in pieces, a hunt's find)."""
    specials = control_strings(tokenizer)
    return re.compile("|".join(map(re.escape, sorted(specials, key=len, reverse=True)))) if specials else None


def control_strings(tokenizer) -> set[str]:
    """control_pattern's strings."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    template = str(getattr(tokenizer, "chat_template", None) or "")

    def markup(token: str) -> bool:
        return bool(re.fullmatch(r"\S*[<>\[\]|]\S*", token)) and (
            not re.fullmatch(r"</?[A-Za-z][\w-]*>", token) or token in template)

    return {t for t in (*tokenizer.all_special_tokens,
                        *(a.content for a in added.values() if getattr(a, "special", False)
                          or markup(a.content or ""))) if t}


FIRST, SEGMENT, MID = "first", "segment", "mid"  # where a piece of text starts: the sequence's start; right after a
# control token (a sentencepiece tokenizer with prepend_scheme "always", or a legacy one whose normalizer prepends
# "▁", marks each such piece's first word); inside a stretch of text (no mark, whatever the tokenizer)


class _Backends:
    """The fast tokenizer's backend in the variants a piece needs: by where it starts (FIRST: as it is; SEGMENT:
    Metaspace "first" off; MID: every word-start mark off) and by how it reads control tokens' strings (as the
    tokens, or as text: encode_special_tokens). Copies, built as first needed (a variant equal to another is that
    one): the tokenizer's own backend is never changed (threads may encode with it). Rebuilt where the tokenizer
    grew tokens, or a copy lost its settings (a pickled tokenizers.Tokenizer drops encode_special_tokens)."""

    def __init__(self, tokenizer):
        self.size = len(tokenizer)
        source = tokenizer.backend_tokenizer.to_str()
        self.specs = {FIRST: source, SEGMENT: _variant(source, False), MID: _variant(source, True)}
        self.built: dict = {}
        self.breaks: dict[str, bool] = {}

    def get(self, where: str, as_text: bool):
        from tokenizers import Tokenizer

        spec = self.specs[where]
        key = (spec, as_text)
        if key not in self.built:
            self.built[key] = Tokenizer.from_str(spec)
            self.built[key].encode_special_tokens = as_text
        return self.built[key]

    def fresh(self, tokenizer) -> bool:
        return self.size == len(tokenizer) and all(b.encode_special_tokens == text
                                                   for (_, text), b in self.built.items())


def _backends(tokenizer) -> _Backends | None:
    """The tokenizer's backends (None for a tokenizer without a `tokenizers` backend: pieces are then tokenized as
    the tokenizer does, word-start marks and all)."""
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        return None
    found = getattr(tokenizer, "_execrl_backends", None)
    if found is None or not found.fresh(tokenizer):
        found = tokenizer._execrl_backends = _Backends(tokenizer)
    return found


def _variant(source: str, mid: bool) -> str:
    """A tokenizer spec with Metaspace's prepend_scheme "first" set to "never" (a piece after a control token takes
    no mark; "always" still marks it); `mid`: every Metaspace's to "never", and a normalizer's Prepend dropped."""
    spec = json.loads(source)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "Metaspace" and (mid or node.get("prepend_scheme") == "first"):
                node["prepend_scheme"] = "never"
                if "add_prefix_space" in node:
                    node["add_prefix_space"] = False
            if mid and node.get("type") == "Sequence" and isinstance(node.get("normalizers"), list):
                node["normalizers"] = [n for n in node["normalizers"] if n.get("type") != "Prepend"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    if mid and isinstance(spec.get("normalizer"), dict) and spec["normalizer"].get("type") == "Prepend":
        spec["normalizer"] = None
    return json.dumps(spec)


def _encode(tokenizer, text: str, where: str, as_text: bool) -> tuple[list[int], list[tuple[int, int]] | None]:
    """(ids, offsets) of `text` tokenized with no special tokens added, as a piece starting `where` (FIRST, SEGMENT,
    MID); `as_text`: special tokens' strings read as text. Offsets are None without a fast backend."""
    b = _backends(tokenizer)
    if b is None:
        return tokenizer(text, add_special_tokens=False, split_special_tokens=as_text)["input_ids"], None
    done = b.get(where, as_text).encode(text, add_special_tokens=False)
    return done.ids, done.offsets


def ids_of(text: str, tokenizer, where: str = FIRST) -> list[int]:
    """Token ids of `text` as the tokenizer reads it (its control tokens' strings as the tokens: a template's own
    text), as a piece starting `where`."""
    return _encode(tokenizer, text, where, as_text=False)[0]


def plain_ids(text: str, tokenizer, control: re.Pattern | None, where: str = MID) -> list[int]:
    """Token ids of `text` as text, as a piece starting `where` (default: inside a stretch of text, as an answer
    after its prompt's header): a special token's string in it is read as text, and one the backend would still
    read as the token (an added token that is not special, such as Qwen's <tool_response>; a unigram model's
    vocabulary piece) is tokenized in two parts (its first character, then the rest)."""
    ids, pos = [], 0
    for match in control.finditer(text) if control is not None else ():
        if not _must_break(tokenizer, match.group()):
            continue  # (read as text by the backend)
        for part in (text[pos:match.start()], match.group()[:1]):
            ids += _encode(tokenizer, part, where, as_text=True)[0] if part else []
            where = MID if part else where
        ids += plain_ids(match.group()[1:], tokenizer, control, MID)
        pos = match.end()
    rest = text[pos:]
    return ids + (_encode(tokenizer, rest, where, as_text=True)[0] if rest else [])


def _must_break(tokenizer, token: str) -> bool:
    """Whether a control token's string, read as text, still comes out as the token: an added token that is not
    special (encode_special_tokens reads only special ones as text), or a piece of the model's own vocabulary."""
    b = _backends(tokenizer)
    if b is None:
        return not _special(tokenizer, token)
    if token not in b.breaks:
        own = tokenizer.convert_tokens_to_ids(token)
        b.breaks[token] = not _special(tokenizer, token) or own in _encode(tokenizer, token, MID, True)[0]
    return b.breaks[token]


def special_ids(tokenizer) -> set[int]:
    """The ids of the special tokens: those the tokenizer names, and the added tokens marked special that it does not
    (Phi-3.5's <|end|>, an end of turn its EOS is not: a turn after it was closed again)."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return set(tokenizer.all_special_ids) | {i for i, a in added.items() if getattr(a, "special", False)}


def _special(tokenizer, token: str) -> bool:
    return token in set(tokenizer.all_special_tokens) or any(
        a.content == token and getattr(a, "special", False) for a in (getattr(tokenizer, "added_tokens_decoder", {})
                                                                      or {}).values())


def holds_control(content, control: re.Pattern | None) -> bool:
    return control is not None and isinstance(content, str) and control.search(content) is not None


def templated_ids(messages: list[dict], tokenizer, render: Callable[[list[dict]], str],
                  control: re.Pattern | None, start: str = FIRST) -> list[int] | None:
    """Token ids of `render(messages)` (a chat template's text) as the tokenizer reads the whole text (a piece
    starting `start`), but that a control token's string inside a message's text is text; None where no message
    holds one (the caller tokenizes the text whole, as fast, in a batch)."""
    if not any(holds_control(m.get("content"), control) for m in messages):
        return None
    full, spans = _located(messages, render, control)
    ids, offsets = _encode(tokenizer, full, start, as_text=False)
    if offsets is None:  # (no backend: the template's parts and the messages' text tokenized apart)
        return _apart(full, spans, tokenizer, control, start)
    return _mended(full, spans, ids, offsets, tokenizer, control, start)


def _located(messages: list[dict], render: Callable[[list[dict]], str], control: re.Pattern
             ) -> tuple[str, list[tuple[int, int]]]:
    """The rendered text and where in it each control token's string inside a message's text is. Each such string is
    rendered as a stand-in of its own (letters and digits, which templates that escape or trim keep as they are) that
    it then replaces: the rest of the message's text goes through the template's filters as any message's does
    (Llama 3.1's `tojson` of a tool's output: with the whole message stood in for, a program's quotes and newlines
    beside such a string came out unescaped, a hunt's find). A template that looks for a string that is a control
    token's (Qwen 3's `</think>`, to drop an earlier answer's reasoning) does not see it in such a message."""
    holders, shown = {}, []

    def stand_in(match: re.Match) -> str:
        holder = f"execrl{secrets.token_hex(8)}control"
        holders[holder] = match.group()
        return holder

    for m in messages:
        content = m.get("content")
        shown.append({**m, "content": control.sub(stand_in, content)} if holds_control(content, control) else m)
    return _substituted(render(shown), holders)


def _substituted(text: str, holders: dict) -> tuple[str, list[tuple[int, int]]]:
    """`text` with each stand-in replaced by its control token's string, and the spans of those strings."""
    parts, spans, pos, size = [], [], 0, 0
    for match in re.finditer("|".join(holders), text):
        string = holders[match.group()]
        parts += [text[pos:match.start()], string]
        size += match.start() - pos
        spans.append((size, size + len(string)))
        size, pos = size + len(string), match.end()
    return "".join(parts) + text[pos:], spans


def _mended(full: str, spans: list[tuple[int, int]], ids: list[int], offsets: list[tuple[int, int]], tokenizer,
            control: re.Pattern, start: str) -> list[int]:
    """The whole text's tokens `ids`, each stretch between the template's own control tokens that holds a control
    token inside a message's text tokenized again, as text."""
    strings = {tokenizer.convert_tokens_to_ids(t): t for t in control_strings(tokenizer)}

    def in_message(i: int) -> bool:  # (where the token's own string is: its offsets hold the whitespace it strips)
        a, b = offsets[i]
        at = full.find(strings[ids[i]], a, b)
        at = a if at < 0 else at
        return any(x <= at < y for x, y in spans)

    out, run, edge = [], [], 0  # edge: where the stretch after the last template control token begins

    def flush(end: int) -> None:
        if any(ids[i] in strings for i in run):  # (a control token in a message's text: the stretch again, as text)
            a = edge
            while a < end and full[a].isspace() and takes_space(tokenizer, out[-1] if out else None, "rstrip"):
                a += 1
            out.extend(plain_ids(full[a:end], tokenizer, control, start if a == 0 else SEGMENT))
        else:
            out.extend(ids[i] for i in run)
        run.clear()

    for i, token in enumerate(ids):
        if token in strings and not in_message(i):  # the template's own
            end = full.find(strings[token], *offsets[i])
            end = offsets[i][0] if end < 0 else end
            while end > edge and full[end - 1].isspace() and takes_space(tokenizer, token, "lstrip"):
                end -= 1
            flush(end)
            out.append(token)
            edge = offsets[i][1]
        else:
            run.append(i)
    flush(len(full))
    return out


def takes_space(tokenizer, token: int | None, side: str) -> bool:
    """Whether an added token takes the whitespace on its `side` (lstrip, rstrip) into itself (Phi-3's <|end|> the
    newline after it)."""
    a = (getattr(tokenizer, "added_tokens_decoder", {}) or {}).get(token)
    return bool(a is not None and getattr(a, side, False))


def _apart(full: str, spans: list[tuple[int, int]], tokenizer, control: re.Pattern, start: str) -> list[int]:
    """A tokenizer without a fast backend: the template's parts and the messages' text (as text) tokenized apart."""
    ids, pos = [], 0
    for a, b in spans:
        ids += _encode(tokenizer, full[pos:a], start if pos == 0 else MID, as_text=False)[0] if a > pos else []
        ids += plain_ids(full[a:b], tokenizer, control, start if a == 0 else MID)
        pos = b
    return ids + (_encode(tokenizer, full[pos:], MID, as_text=False)[0] if pos < len(full) else [])


def text_ids(messages: list[dict], tokenizer, render: Callable[[list[dict]], str],
             control: re.Pattern | None, start: str = FIRST) -> list[int]:
    """Token ids of `render(messages)`, each message's text as text (templated_ids), or tokenized whole where no
    message holds a control token's string; a piece starting `start` (FIRST: a sequence; SEGMENT: after a control
    token, as an environment's turn after the model's end of turn; MID: after text)."""
    ids = templated_ids(messages, tokenizer, render, control, start)
    return ids if ids is not None else ids_of(render(messages), tokenizer, start)


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
