"""What every rollout backend returns: token ids in, token ids out (never re-tokenized)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache


@dataclass
class Completion:
    ids: list[int]  # the sampled tokens, up to and including EOS or the token that completed a stop string
    text: str
    truncated: bool  # hit max_new_tokens (or the context) without EOS or a stop string
    logprobs: list[float] | None = None  # the sampler's logprob of each token in ids (engine backend)
    guide: object | None = None  # the execrl.guided.Guide the tokens were sampled under (guided decoding)


def text_of(tokenizer, ids: list[int]) -> str:
    """The text of sampled ids as they read after a prompt: tokenizer.decode(ids, skip_special_tokens=True), but
    - a special token that is a tag completions are read by (extract.READ_TAGS: a tokenizer that makes <think>
      special) kept: dropped, every think-format answer lost its </think> and scored 0, and a stop string </think>
      never fired (a hunt's find);
    - decoded after a word, where the tokenizer's decoder strips a sequence's first space (Llama 2's, Mistral's and
      CodeLlama's sentencepiece decoders): alone, "   return a + b" (a body continued under a HumanEval prompt) came
      out indented by 3, and the program did not compile (a hunt's find).
    transformers' decode first checks, element by element in Python, that its input is plain ints (two thirds of its
    time for 256 tokens; ~15 ms of a step's 128 completions on the 2-core machine, the GPU idle after the last decode
    step); its _decode, which that check leads to, is the tokenizer's own decoding. Where a tokenizer class has its
    own decode, that decode."""
    dropped, (lead, head) = _reading(tokenizer)
    if dropped is not None:
        ids = [i for i in ids if i not in dropped]
    text = _decode(tokenizer, [*lead, *ids], dropped is None)
    if lead:
        return text[len(head):] if text.startswith(head) else _decode(tokenizer, ids, dropped is None)
    return text


def _decode(tokenizer, ids: list[int], skip_special: bool) -> str:
    if type(tokenizer).decode is _base_decode():
        return tokenizer._decode(ids, skip_special_tokens=skip_special)
    return tokenizer.decode(ids, skip_special_tokens=skip_special)


def _reading(tokenizer) -> tuple[frozenset[int] | None, tuple[list[int], str]]:
    """How text_of reads this tokenizer's ids: the special ids it leaves out where some special token is a tag
    completions are read by (None where none is: skip_special_tokens, as fast), and a word (its ids, its text) to
    decode before them where the decoder strips a sequence's first space (else none). Found once per tokenizer (and
    again where it grew tokens)."""
    if not isinstance(tokenizer, _tokenizer_base()):  # (a stand-in's: its decode)
        return None, ([], "")
    found = getattr(tokenizer, "_execrl_reading", None)
    if found is not None and found[0] == len(tokenizer):
        return found[1:]
    from execrl.control_tokens import special_ids
    from execrl.extract import READ_TAGS

    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    tags = {i for i, a in added.items() if getattr(a, "special", False) and a.content in READ_TAGS}
    dropped = frozenset(special_ids(tokenizer) - tags) if tags else None
    word, spaced = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("a", "a b"))
    alone, after = _decode(tokenizer, spaced[-1:], True), _decode(tokenizer, spaced, True)
    strips = bool(word) and len(spaced) > 1 and after == _decode(tokenizer, word, True) + " b" and alone == "b"
    lead = (word, _decode(tokenizer, word, True)) if strips else ([], "")
    try:
        tokenizer._execrl_reading = (len(tokenizer), dropped, lead)
    except AttributeError:  # (a tokenizer that takes no attributes: found again each time)
        pass
    return dropped, lead


@cache
def _tokenizer_base():
    from transformers import PreTrainedTokenizerBase  # (here: importing this module need not import transformers)

    return PreTrainedTokenizerBase


def _base_decode():
    return _tokenizer_base().decode


def beyond_vocab(model, tokenizer, ids) -> tuple[list[int], int]:
    """The ids of `ids` the model cannot sample (a typo, another model's id: a stop token that ends nothing), and the
    model's vocabulary size."""
    head = model.get_output_embeddings()
    vocab = head.weight.shape[0] if head is not None else len(tokenizer)
    return [i for i in ids or () if i >= vocab], vocab


def unseen_stop(tokenizer, stops: list[str] | None, ends=()) -> tuple[str, str, int] | None:
    """The first stop string that holds a special token's text which completions are read without (text_of leaves
    special tokens out, as vLLM's detokenizer does), with that token and its id, else None: sampled, the token never
    shows in the text, so the stop string never ends an answer there (a hunt's find: "<end_of_turn>" as a stop string
    ran every Gemma answer past its turn's end in the engine, and the transformers backend, whose generate matches a
    token's own string, stopped there). A token of `ends` (the ids that end a sequence) ends it anyway."""
    if not stops or not isinstance(tokenizer, _tokenizer_base()):
        return None
    from execrl.control_tokens import special_ids

    for i in sorted(special_ids(tokenizer) - set(ends)):
        token = tokenizer.convert_ids_to_tokens(i)
        held = [s for s in stops if isinstance(token, str) and token and token in s]
        if held and token not in text_of(tokenizer, [i]):
            return held[0], token, i
    return None


def end_ids(model, tokenizer, stop_token_ids=None) -> list[int]:
    """The ids that end a sequence: the model's EOS ids (eos_ids) and `stop_token_ids`. Where there are none, every
    answer runs to its length limit: said once per model, with the chat template's end-of-turn token to name; where
    the template ends a turn with a token that is not one of them (a base model's tokenizer under an instruct
    template), an answer runs on past its turn's end: said once too."""
    from execrl.control_tokens import turn_end

    ids = sorted(set(eos_ids(model, tokenizer)) | set(stop_token_ids or []))
    name = str(getattr(model.config, "_name_or_path", "") or "the model")
    turn = turn_end(tokenizer)
    if not ids:
        vocab = tokenizer.get_vocab()
        named = tokenizer.convert_ids_to_tokens(turn) if turn is not None else next(
            (t for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "</s>") if t in vocab), None)
        _say_no_end(name, f"{vocab[named]}] ({named})" if named else "ID]")
    elif turn is not None and turn not in ids:
        _say_turn_runs_on(name, turn, tokenizer.convert_ids_to_tokens(turn),
                          tuple(tokenizer.convert_ids_to_tokens(ids)))
    return ids


@cache
def _say_no_end(name: str, example: str) -> None:
    from execrl.console import stderr_console

    stderr_console().print(f"[yellow]warning: {name}: its tokenizer and generation config name no end token, so "
                           "every answer runs to the length limit (and training learns no answer's end): set "
                           f"policy.generation.stop_token_ids=[{example} (execrl eval: --stop-token-ids), the token "
                           "that ends an answer (the chat template's end of turn, where it has one)[/]")


@cache
def _say_turn_runs_on(name: str, turn: int, token: str, ends: tuple[str, ...]) -> None:
    from rich.markup import escape

    from execrl.console import stderr_console

    stderr_console().print("[yellow]" + escape(
        f"warning: {name}: its chat template ends a turn with {token} (id {turn}), and generation ends only at "
        f"{', '.join(ends)}: an answer that ends its turn runs on past it to the next end token or the length limit "
        f"(text after the turn's end, graded and trained on). Set policy.generation.stop_token_ids=[{turn}] "
        f"(execrl eval: --stop-token-ids {turn})") + "[/]")


def eos_ids(model, tokenizer) -> list[int]:
    """The tokenizer's EOS plus any the model's generation config lists (instruct models often have
    two)."""
    found = [tokenizer.eos_token_id]
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    found += extra if isinstance(extra, list) else [extra]
    return sorted({int(t) for t in found if t is not None})
