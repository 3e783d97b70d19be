"""Guided decoding's mask work off the GIL: llguidance's C API (in the library its Python package
ships) driven by a pool of native threads (maskpool.c, compiled once into the user's cache with the
system's C compiler).

Why not Python threads: a decode step hands out one job per constrained slot (advance its matcher by
the sampled token, write its next mask) and must not wait for a slow one; per-job Python threads
pass the GIL to each other after every mask, and on the GPU machine's host that cost more than the
masks (bench/README.md). llguidance's own parallel call waits for its slowest mask. The pool's
threads take jobs one at a time and store each job's state after its mask, which the decode loop
reads without a lock.

The matchers here are llguidance's C matchers (execrl.guided.native), the same the trainer's masks
are computed with (Guide.masks), so the masks are the same bits.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
from pathlib import Path

from execrl.guided.native import llg

SOURCE = Path(__file__).with_name("maskpool.c")
SPINS = 100_000  # pauses an idle mask thread spins for the next job before sleeping (a few milliseconds)
P = ctypes.c_void_p


@functools.cache
def pool_library() -> ctypes.CDLL:
    """maskpool.c built once per version of its source (a C compiler is needed the first time)."""
    source = SOURCE.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "execrl"
    built = cache / f"maskpool-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if not built.exists():
        cache.mkdir(parents=True, exist_ok=True)
        part = built.with_name(f"{built.name}.{os.getpid()}.part")
        cc = os.environ.get("CC", "cc")
        try:
            subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-o", str(part), str(SOURCE)], check=True,
                           capture_output=True, text=True)
        except FileNotFoundError:
            raise RuntimeError(f"guided decoding in the rollout engine builds a small C library once ({SOURCE.name}) "
                               f"and found no C compiler ({cc!r}): install one (Debian/Ubuntu: apt-get install gcc) "
                               "or name it in CC") from None
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"building {SOURCE} with {cc!r} failed: {e.stderr[-800:]}") from None
        os.replace(part, built)
    lib = ctypes.CDLL(str(built))
    lib.maskpool_new.restype = P
    lib.maskpool_new.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, P, P, P, ctypes.c_size_t]
    lib.maskpool_step.restype = ctypes.c_int
    lib.maskpool_step.argtypes = [P, ctypes.c_size_t] + [P] * 8
    lib.maskpool_threads.argtypes = [P]
    lib.maskpool_counts.argtypes = [P, P]
    lib.maskpool_wait.restype = ctypes.c_int
    lib.maskpool_wait.argtypes = [ctypes.c_size_t, P, P, ctypes.c_double, ctypes.c_double, P, P]
    return lib


class Pool:
    """Native threads running mask jobs for masks of `mask_bytes` bytes (one pool per process and
    mask size)."""

    def __init__(self, mask_bytes: int, capacity: int = 1 << 16):
        lib, c = pool_library(), llg()
        threads = max(1, min(32, (os.cpu_count() or 2) - 1))  # every core but the decode loop's
        fn = [ctypes.cast(getattr(c, name), P) for name in
              ("llg_matcher_consume_token", "llg_matcher_compute_mask_into", "llg_matcher_is_stopped")]
        self.lib, self.capacity = lib, capacity
        spins = SPINS if threads >= 4 else 0  # (where cores are few, a spinning thread takes one from the forward)
        self.pool = lib.maskpool_new(threads, spins, capacity, *fn, mask_bytes)
        if lib.maskpool_threads(self.pool) < 1:
            raise RuntimeError("guided decoding: no mask thread could be started")

    def step(self, handle, tokens, live, ends, state, held, rows, keys) -> int:
        """The jobs of a decode step (maskpool.c's maskpool_step): [S] tensors handle, tokens, live,
        ends (row addresses), keys (int64), held (bool), state (int32), rows [S, W] int32; the
        number of jobs handed out."""
        n = self.lib.maskpool_step(self.pool, len(handle), *(t.data_ptr() for t in (handle, tokens, live, ends,
                                                                                     state, held, rows, keys)))
        if n < 0:
            raise RuntimeError(f"guided decoding: more than {self.capacity} mask jobs in flight")
        return n

    def counts(self) -> tuple[int, int]:
        """(jobs done, masks computed) so far: a group's followers compute none (maskpool.c)."""
        out = (ctypes.c_int64 * 2)()
        self.lib.maskpool_counts(self.pool, out)
        return out[0], out[1]


@functools.cache
def pool(mask_bytes: int) -> Pool:
    return Pool(mask_bytes)


