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
    """tokenizer.decode(ids, skip_special_tokens=True) for a list of ints, the same text. transformers' decode
    first checks, element by element in Python, that its input is plain ints (two thirds of its time for 256
    tokens; ~15 ms of a step's 128 completions on the 2-core machine, the GPU idle after the last decode step);
    its _decode, which that check leads to, is the tokenizer's own decoding. Where a tokenizer class has its own
    decode, that decode."""
    if type(tokenizer).decode is _base_decode():
        return tokenizer._decode(ids, skip_special_tokens=True)
    return tokenizer.decode(ids, skip_special_tokens=True)


@cache
def _base_decode():
    from transformers import PreTrainedTokenizerBase  # (here: importing this module need not import transformers)

    return PreTrainedTokenizerBase.decode


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
