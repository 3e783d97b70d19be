"""Values between the host and the device without the host waiting for the device's queued work."""

from __future__ import annotations

from collections.abc import Callable

import torch


def to_device(values, device, dtype: torch.dtype | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """`values` (a CPU tensor, or a list of numbers made one of `dtype`) on `device`; `out`: copied into that
    tensor on the device (a CUDA graph's input buffer), not a new one. torch.tensor(values, device=...) and a
    blocking .to() wait for every kernel queued before them, a host sync each, and a non-blocking copy from
    pageable memory may wait too (the driver stages it); from pinned memory the copy is queued, the GPU reads it
    when it gets there, and the host goes on."""
    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device) if out is None else out.copy_(t)
    t = t if t.is_pinned() else t.pin_memory()
    return t.to(device, non_blocking=True) if out is None else out.copy_(t, non_blocking=True)


def on_host(values: torch.Tensor) -> Callable[[], list[float]]:
    """values [n] copied to the host as the GPU gets there, without the host waiting now; the function returns
    them, waiting for that copy alone (not for work queued after it)."""
    if values.device.type != "cuda":
        return values.tolist
    host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
    host.copy_(values, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()

    def read() -> list[float]:
        copied.synchronize()
        return host.tolist()
    return read
