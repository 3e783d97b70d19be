"""Unbiased pass@k (Chen et al. 2021): the chance that at least one of k samples drawn without
replacement from n samples, c of them correct, is correct."""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k), as a running product (no huge binomials)."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(counts: list[tuple[int, int]], k: int) -> tuple[float, int]:
    """Mean pass@k over problems given (n valid samples, c correct); problems with n < k are left
    out and counted."""
    values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return (sum(values) / len(values) if values else float("nan")), len(counts) - len(values)
