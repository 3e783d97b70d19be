"""llguidance's C API (in the library its Python package ships): its tokenizer and matchers for a Guides'
vocabulary. The engine's mask threads (execrl.rollout.maskpool) and the trainer's masks (Guide.masks) both run these
matchers, so the masks the sampler used and those the trainer scores are the same bits by construction (the Python
binding's tokenizer read a tokenizer's added, non-special tokens, such as Qwen's <think> and <tool_call>, as special
ones, where the C one reads them as their text: the engine sampled <think> and the trainer's masks refused it)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import threading
import weakref
from copy import copy

import torch

from execrl.guided.grammar import ConstraintError, parallel

IDLE_GRAMMARS = 64  # grammars whose finished matchers are kept for reuse
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
            ("llg_free_tokenizer", None, [P]),
            ("llg_matcher_compute_mask_into", ctypes.c_int32, [P, P, ctypes.c_size_t]),
            ("llg_matcher_consume_token", ctypes.c_int32, [P, ctypes.c_uint32]),
            ("llg_matcher_is_stopped", ctypes.c_bool, [P])]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


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
        self.lock = threading.Lock()
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
            raise ConstraintError(f"llguidance's C matcher: {first_line(error.decode(errors='replace'))}")
        return m

    def matchers(self, grammar: str, n: int) -> list[int]:
        """n matchers at the start of `grammar`: finished ones reset (recycle()) first, new ones for
        the rest (in parallel threads: about a millisecond each)."""
        with self.lock:  # (the engine's thread and the trainer's masks_of threads share the idle ones)
            idle = self.idle.pop(grammar, [])
            if idle:
                self.idle[grammar] = idle  # (now the most recently used)
            mine = [idle.pop() for _ in range(min(n, len(idle)))]
        if n - len(mine) <= 1:  # (one: here, not in the builders' threads, which may be the caller's: masks_of's
            return mine + [self.matcher(grammar) for _ in range(n - len(mine))]  # turns each wait for it, deadlocked)
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
        with self.lock:
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
    """A matcher's error, its first line (llguidance's dump of its state follows, a page of it)."""
    error = llg().llg_matcher_get_error(matcher)
    return first_line(error.decode(errors="replace")) if error else "no error recorded"


def first_line(error: str) -> str:
    return error.strip().splitlines()[0][:300] if error.strip() else "no error recorded"


@contextlib.contextmanager
def started(guide):
    """(llguidance's C API, a matcher at the start of the guide's constraint), recycled after."""
    own = native(guide)
    (m,) = own.matchers(guide.text, 1)
    try:
        yield llg(), m
    finally:
        own.recycle(guide.text, m)


def masks(guide, ids: list[int]) -> torch.Tensor:
    """[n, W] int32: the mask before each of `ids` as the engine's sampler saw it (its C matchers; once the constraint
    is complete, only the end of the sequence). A token the mask did not allow is a ConstraintError."""
    out = torch.full((len(ids), guide.words), -1, dtype=torch.int32)
    with started(guide) as (c, m):
        for i, t in enumerate(ids):
            stopped = c.llg_matcher_is_stopped(m)
            if stopped:
                guide.fill_end(out, i)
            elif c.llg_matcher_compute_mask_into(m, out[i].data_ptr(), guide.words * 4) != 0:
                raise ConstraintError(f"constraint {guide.name} gave no mask at {i}: {error_of(m)}")
            if not (out[i, t >> 5] >> (t & 31)) & 1:
                raise ConstraintError(f"token {t} at {i} is outside constraint {guide.name}")
            if not stopped and c.llg_matcher_consume_token(m, t) != 0:
                raise ConstraintError(f"token {t} at {i} does not continue constraint {guide.name}: {error_of(m)}")
    return out


def first_mask(guide) -> None:
    """ConstraintError where the constraint admits no text at all (a regex of an empty class, a JSON schema whose
    range holds no number): llguidance computes no first mask (it said so from the decode loop, mid-run, in a
    page of its state)."""
    mask = torch.zeros(guide.words, dtype=torch.int32)
    with started(guide) as (c, m):
        if c.llg_matcher_compute_mask_into(m, mask.data_ptr(), guide.words * 4) != 0 or not bool(mask.any()):
            raise ConstraintError(f"constraint {guide.name} admits no text: {error_of(m)}")
