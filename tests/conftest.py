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
