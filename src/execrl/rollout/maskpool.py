"""Guided decoding's mask work off the GIL: llguidance's C API (in the library its Python package
ships) driven by a pool of native threads (maskpool.c, compiled once into the user's cache with the
system's C compiler).

Why not Python threads: a decode step hands out one job per constrained slot (advance its matcher by
the sampled token, write its next mask) and must not wait for a slow one; per-job Python threads
pass the GIL to each other after every mask, and on the GPU machine's host that cost more than the
masks (bench/README.md). llguidance's own parallel call waits for its slowest mask. The pool's
threads take jobs one at a time and store each job's state after its mask, which the decode loop
reads without a lock.

The matchers here are llguidance's C matchers, built from the same tokenizer JSON, vocabulary size,
end tokens, slices and tokenize function as the Python ones the trainer uses (execrl.guided), so the
masks are the same bits (tests/guided/test_guided.py compares them).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import weakref
from copy import copy
from pathlib import Path

from execrl.guided.constraints import parallel

SOURCE = Path(__file__).with_name("maskpool.c")
IDLE_GRAMMARS = 64  # grammars whose finished matchers are kept for reuse
SPINS = 100_000  # pauses an idle mask thread spins for the next job before sleeping (a few milliseconds)
P = ctypes.c_void_p


class TokenizerInit(ctypes.Structure):  # llguidance's LlgTokenizerInitV2
    _fields_ = [("struct_size", ctypes.c_size_t), ("vocab_size", ctypes.c_uint32), ("tok_eos", ctypes.c_uint32),
                ("token_lens", P), ("token_bytes", P), ("tokenizer_json", ctypes.c_char_p),
                ("tokenize_assumes_string", ctypes.c_bool), ("tokenize_fn", P),
                ("use_approximate_greedy_tokenize_fn", ctypes.c_bool), ("tokenize_user_data", P),
                ("slices", ctypes.POINTER(ctypes.c_char_p)), ("tok_eos_extra", ctypes.POINTER(ctypes.c_uint32)),
                ("tok_eos_extra_count", ctypes.c_uint32)]


TOKENIZE = ctypes.CFUNCTYPE(ctypes.c_size_t, P, ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t,
                            ctypes.POINTER(ctypes.c_uint32), ctypes.c_size_t)


@functools.cache
def llg() -> ctypes.CDLL:
    """llguidance's C API, from the library its Python package loads."""
    import llguidance

    lib = ctypes.CDLL(llguidance._lib.__file__)
    for name, res, args in [
            ("llg_new_tokenizer_v2", P, [P, ctypes.c_char_p, ctypes.c_size_t]),
            ("llg_constraint_init_set_defaults", None, [P, P]),
            ("llg_new_matcher", P, [P, ctypes.c_char_p, ctypes.c_char_p]),
            ("llg_matcher_get_error", ctypes.c_char_p, [P]),
            ("llg_matcher_reset", ctypes.c_int32, [P]),
            ("llg_matcher_is_error", ctypes.c_bool, [P]),
            ("llg_free_matcher", None, [P]),
            ("llg_free_tokenizer", None, [P])]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


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


_natives: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Guides -> {slices: NativeGuides}


def native(guide) -> NativeGuides:
    """The C side of an execrl.guided.Guide: its Guides' tokenizer with its slices (made on first
    use)."""
    made = _natives.setdefault(guide.guides, {})
    if guide.slices not in made:
        guides = guide.guides
        made[guide.slices] = NativeGuides(guides.hf_tokenizer, guides.vocab, guides.eos_ids, list(guide.slices),
                                          guide.tokenizer)
    return made[guide.slices]


class NativeGuides:
    """llguidance's C tokenizer for a Guides' vocabulary, and C matchers of its constraints."""

    def __init__(self, hf_tokenizer, vocab: int, eos_ids: list[int], slices: list[str], py_tokenizer):
        c = llg()
        backend = copy(hf_tokenizer.backend_tokenizer)  # as llguidance.hf.from_tokenizer reads it
        backend.no_padding()
        backend.no_truncation()
        self._keep = [backend.to_str().encode(), (ctypes.c_char_p * (len(slices) + 1))(*[s.encode() for s in slices],
                                                                                      None),
                      (ctypes.c_uint32 * max(1, len(eos_ids) - 1))(*eos_ids[1:])]

        def tokenize(_, data, n, out, room):  # llguidance's Python tokenizer's own tokenization
            ids = py_tokenizer.tokenize_bytes(ctypes.string_at(data, n))
            for i, t in enumerate(ids[:room]):
                out[i] = t
            return len(ids)

        self._tokenize = TOKENIZE(tokenize)
        init = TokenizerInit(struct_size=ctypes.sizeof(TokenizerInit), vocab_size=vocab, tok_eos=eos_ids[0],
                             tokenizer_json=self._keep[0], tokenize_fn=ctypes.cast(self._tokenize, P),
                             slices=self._keep[1], tok_eos_extra=self._keep[2], tok_eos_extra_count=len(eos_ids) - 1)
        error = ctypes.create_string_buffer(2048)
        self.tokenizer = c.llg_new_tokenizer_v2(ctypes.byref(init), error, len(error))
        if not self.tokenizer:
            raise RuntimeError(f"llguidance's C tokenizer: {error.value.decode(errors='replace')}")
        self.init = (ctypes.c_uint8 * 512)()  # LlgConstraintInit (and room to spare), llguidance's defaults
        c.llg_constraint_init_set_defaults(self.init, self.tokenizer)
        ctypes.c_uint32.from_buffer(self.init, 8).value = 0  # log_buffer_level
        ctypes.c_uint32.from_buffer(self.init, 12).value = 0  # log_stderr_level
        self.idle: dict[str, list[int]] = {}  # grammar -> reset matchers waiting for a request (least recent first)
        # freed with this object (at the interpreter's exit the process's memory goes anyway);
        # matchers still in use keep what they need of the tokenizer (llguidance counts its
        # references)
        weakref.finalize(self, _free_native, self.tokenizer, self.idle).atexit = False

    def key(self, grammar: str) -> int:
        """The key a request of `grammar` starts from (maskpool.c: slots of equal keys share their
        masks): one per (tokenizer, slices, grammar) in this process."""
        return int.from_bytes(hashlib.blake2b(f"{id(self)}\0{grammar}".encode(), digest_size=8).digest(), "little",
                              signed=True)

    def matcher(self, grammar: str) -> int:
        """A new C matcher at the start of `grammar` (llguidance's JSON form,
        execrl.guided.Guide.text)."""
        c = llg()
        m = c.llg_new_matcher(self.init, b"llguidance", grammar.encode())
        error = c.llg_matcher_get_error(m)
        if error:
            c.llg_free_matcher(m)
            raise RuntimeError(f"llguidance's C matcher: {error.decode(errors='replace')[:500]}")
        return m

    def matchers(self, grammar: str, n: int) -> list[int]:
        """n matchers at the start of `grammar`: finished ones reset (recycle()) first, new ones for
        the rest (in parallel threads: about a millisecond each)."""
        idle = self.idle.pop(grammar, [])
        if idle:
            self.idle[grammar] = idle  # (now the most recently used)
        mine = [idle.pop() for _ in range(min(n, len(idle)))]
        return mine + parallel(self.matcher, [grammar] * (n - len(mine)))

    def recycle(self, grammar: str, matcher: int) -> None:
        """A finished matcher, reset to its start for a later request of the same grammar: its lexer
        keeps what it built on the way (a fresh matcher builds it again, a few milliseconds per
        state the whole vocabulary is walked from: 256 fresh matchers entering a fenced block
        together cost a second of CPU). One that cannot be reset (a grammar with max_tokens or stop=
        lexemes) is freed; so are the idle matchers of all but the IDLE_GRAMMARS grammars used
        last."""
        c = llg()
        if c.llg_matcher_reset(matcher) != 0 or c.llg_matcher_is_error(matcher):
            c.llg_free_matcher(matcher)
            return
        self.idle.setdefault(grammar, []).append(matcher)
        while len(self.idle) > IDLE_GRAMMARS:
            for m in self.idle.pop(next(iter(self.idle))):
                c.llg_free_matcher(m)


def _free_native(tokenizer: int, idle: dict[str, list[int]]) -> None:
    c = llg()
    for matchers in idle.values():
        for m in matchers:
            c.llg_free_matcher(m)
    idle.clear()
    c.llg_free_tokenizer(tokenizer)


def error_of(matcher: int) -> str:
    error = llg().llg_matcher_get_error(matcher)
    return error.decode(errors="replace") if error else "no error recorded"


