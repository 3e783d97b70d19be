import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SECRET = "execrl-grader-secret-7f3a"
os.environ["EXECRL_TEST_SECRET"] = SECRET  # the sandbox must never show this to a program


def shared_data(*parts: str) -> Path:
    path = SHARED.joinpath("data", *parts)
    if not path.exists():
        pytest.skip(f"{path} not found: tests on real data need ../shared beside the repo")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer Qwen2 and a byte-level BPE tokenizer with a chat template, built here and saved in HF format."""
    from execrl.models import save_tiny

    corpus = ["def add(a, b):\n    return a + b\n", "```python\nprint(sum(map(int, input().split())))\n```\n",
              "The answer is \\boxed{42}.", "Write a function to find the minimum of a list."] * 10
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model", corpus)
