"""Rewards from the completion's text alone."""

from __future__ import annotations

import math

from execrl.rewards.base import Sample, component


@component("format", bounds=(0.0, 1.0))
def format_reward(sample: Sample) -> float:
    """1 when the completion follows the answer format: a closed code block for code, the tags for
    reasoning/think."""
    if sample.problem.kind == "code":
        return 1.0 if sample.extracted.format_ok and sample.extracted.code is not None else 0.0
    return 1.0 if sample.extracted.format_ok else 0.0


def _repeated_fraction(items: list) -> float:
    return 1.0 - len(set(items)) / len(items) if items else 0.0


@component("repetition_penalty", bounds=(-1.0, 0.0))
def repetition_penalty(sample: Sample, ngram: int = 4, min_lines: int = 4) -> float:
    """Minus the larger of: the fraction of repeated non-blank lines (from `min_lines` lines on),
    and the fraction of repeated word n-grams. 0 for varied text, towards -1 for a policy stuck
    repeating itself."""
    text = sample.completion
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    by_line = _repeated_fraction(lines) if len(lines) >= min_lines else 0.0
    words = text.split()
    grams = [tuple(words[i:i + ngram]) for i in range(len(words) - ngram + 1)]
    return -max(by_line, _repeated_fraction(grams))


@component("overlong_penalty", bounds=lambda p: (-1.0 if p["floor"] else -math.inf, 0.0), shaping=True)
def overlong_penalty(sample: Sample, buffer_tokens: int = 256, max_tokens: int | None = None,
                     floor: bool = True) -> float:
    """DAPO's soft overlong penalty: 0 up to max_tokens - buffer, then linearly down to -1 at
    max_tokens (default: the generation limit the sample was drawn under; NeMo RL's
    reward_shaping.max_response_length). floor: never below -1, the DAPO paper's form (false: on
    down past max_tokens, as NeMo RL's reward_shaping)."""
    limit = sample.max_tokens if max_tokens is None else max_tokens
    if limit <= 0:
        return 0.0
    start = limit - buffer_tokens
    if sample.num_tokens <= start:
        return 0.0
    penalty = (start - sample.num_tokens) / buffer_tokens
    return max(-1.0, penalty) if floor else penalty
