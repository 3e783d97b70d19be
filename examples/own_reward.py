"""A reward component of your own: fn(sample, **params) -> float. Name it in reward.components by import path, with
its weight and parameters (checked against the function's signature):

    reward:
      components:
        - {name: test_pass_fraction, weight: 1.0}
        - {name: examples/own_reward.py:brevity, weight: 0.1, max_chars: 300}

`sample` is an execrl.rewards.Sample: the completion's text, what was extracted from it (code, answer), the
sandbox's result for code (verdict, tests passed), its length in tokens, and the problem.
"""


def brevity(sample, max_chars: int = 400) -> float:
    """1 for an answer of at most max_chars characters, falling linearly to 0 at twice that."""
    n = len(sample.completion)
    return max(0.0, min(1.0, 2.0 - n / max_chars))
