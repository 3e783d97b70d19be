from pathlib import Path

import pytest

ASSETS = Path(__file__).resolve().parents[1] / "assets"
QWEN_ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def qwen_like_tokenizer(template: str):
    """A byte-level tokenizer (one token per byte, built here) with Qwen's special tokens (<|im_start|>, <|im_end|>,
    <|endoftext|>), its added non-special tokens (<think>, <tool_response>, ...) and a real chat template from
    tests/assets."""
    from execrl.models import build_tokenizer

    tok = build_tokenizer(["byte level"], vocab_size=259)
    tok.add_tokens(QWEN_ADDED)  # as in Qwen's tokenizers: single tokens, not special (decoding keeps them)
    tok.chat_template = (ASSETS / template).read_text()
    return tok


@pytest.fixture(scope="session")
def qwen25_tok():
    return qwen_like_tokenizer("qwen2_5_instruct.jinja")


@pytest.fixture(scope="session")
def qwen3_tok():
    return qwen_like_tokenizer("qwen3.jinja")


@pytest.fixture(scope="session")
def grader():
    from execrl.sandbox import Grader, Limits

    with Grader(num_workers=2, limits=Limits(timeout_s=1.0, memory_mb=512)) as g:
        yield g
