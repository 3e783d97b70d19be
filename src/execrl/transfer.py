"""Host values onto the device without waiting for its queued work."""

from __future__ import annotations

import torch


def to_device(values, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`values` (a CPU tensor, or a list of numbers made one of `dtype`) on `device`. torch.tensor(values,
    device=...) and a blocking .to() wait for every kernel queued before them, a host sync each, and a
    non-blocking copy from pageable memory may wait too (the driver stages it); from pinned memory the copy is
    queued, the GPU reads it when it gets there, and the host goes on."""
    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return (t if t.is_pinned() else t.pin_memory()).to(device, non_blocking=True)
