"""Sampling without top-k/top-p in one pass over the logits (GPU, Triton): Gumbel-max choice and
log-sum-exp together.

`sampling.sample_torch` does the same with torch ops: compiled, the noise, the argmax and the
log-sum-exp walk the [B, V] logits in several reductions of one program per row. Here each row is
cut into chunks of CHUNK columns; one program per (ROWS rows, chunk) computes each row's running
max, sum of exponentials and best noisy score with its column over the chunk (the column's half of
the noise hash once for its ROWS rows), and a few [B, chunks] torch ops combine them. The noise is
sampling.gumbel's, bit for bit in its integer hash.

Shapes: B rows, V vocabulary, P = ceil(V / CHUNK) chunks per row.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs: sampling.sample's torch path
    triton = None

ROWS, CHUNK, BLOCK, WARPS = 1, 4096, 1024, 4  # within noise of the best in profile_engine.py's sweep (H100)


def supported(logits: torch.Tensor) -> bool:
    return triton is not None and logits.is_cuda and logits.dim() == 2


if triton is not None:
    @triton.jit
    def _mix(h):
        """sampling.mix32_ on an int32 block: MurmurHash3's finalizer (multiplies wrap; shifts
        masked to logical)."""
        h = h ^ ((h >> 16) & 0xFFFF)
        h = h * -2048144789  # 0x85EBCA6B as int32
        h = h ^ ((h >> 13) & 0x7FFFF)
        h = h * -1028477387  # 0xC2B2AE35 as int32
        return h ^ ((h >> 16) & 0xFFFF)

    @triton.jit
    def _lg2(x):
        """log2(x) by the GPU's fast approximation (MUFU; absolute error ~2**-22), where libdevice's accurate log
        takes a dozen instructions."""
        return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)

    @triton.jit
    def _partials_kernel(logits_ptr, keys_ptr, mask_ptr, max_ptr, sum_ptr, best_ptr, arg_ptr, rows, vocab, row_stride,
                         words, temperature, parts, NOISE: tl.constexpr, SCALE: tl.constexpr, MASK: tl.constexpr,
                         ROWS: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr, FAST_LOG: tl.constexpr):
        """Program (r, part): rows [r * ROWS, (r + 1) * ROWS) x columns [part * CHUNK, (part + 1) *
        CHUNK). MASK: a column counts only where its bit is set in the row's packed mask (guided
        decoding)."""
        row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)  # [R]
        part = tl.program_id(1)
        live = row < rows
        key = tl.load(keys_ptr + row, mask=live, other=0)  # [R]
        m = tl.full([ROWS], float("-inf"), tl.float32)  # per row: running max of the scaled logits
        total = tl.zeros([ROWS, BLOCK], tl.float32)  # per lane: running sum of exp(scaled - m)
        best = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)  # best noisy score, and its column
        arg = tl.zeros([ROWS, BLOCK], tl.int32)
        for start in range(0, CHUNK, BLOCK):
            cols = part * CHUNK + start + tl.arange(0, BLOCK)  # [K]
            inside = live[:, None] & (cols < vocab)[None, :]  # [R, K]
            x = tl.load(logits_ptr + row[:, None] * row_stride + cols[None, :], mask=inside, other=float("-inf"))
            x = x.to(tl.float32)
            if MASK:  # bit (col % 32) of word (col // 32) of the row's mask
                word = tl.load(mask_ptr + row[:, None] * words + (cols // 32)[None, :], mask=inside, other=0)
                x = tl.where(((word >> (cols % 32)[None, :]) & 1) != 0, x, float("-inf"))
            if SCALE:
                x = x / temperature
            # the row's max, not each lane's: one exponential per logit (a lane's own max took two: 1.08x on the
            # kernel and its combine, 128-256 rows of 151,936 logits on an H200)
            m_new = tl.maximum(m, tl.max(x, 1))  # [R]
            base = tl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
            total = total * tl.exp(m - base)[:, None] + tl.exp(x - base[:, None])
            m = m_new
            score = x
            if NOISE:  # the column's hash once for the R rows, then each row's
                bits = (_mix(key[:, None] ^ _mix(cols * 2 + 1)[None, :]) >> 8) & 0xFFFFFF  # 24 random bits
                u = tl.minimum((bits.to(tl.float32) + 0.5) * (1.0 / 16777216.0), 0.99999994)  # sampling.uniform
                # The Gumbel noise -log(-log u). The inner log stays the accurate one: u comes near 1 for the
                # largest noises, the likely winners, where the fast one's absolute error would swamp log u
                # (1 - u is as small as 3e-8; agreement with sample_torch fell to 99.2% of 128 rows). The outer one's
                # argument, -log u, is 3e-8 to 17: there the fast one moves a score by ~1e-7 (1.18-1.22x on the
                # kernel and its combine, 128-256 rows of 151,936 logits on an H200; every token as sample_torch's).
                e = -tl.log(u)
                if FAST_LOG:
                    score = x - 0.6931471805599453 * _lg2(e)
                else:
                    score = x - tl.log(e)
            score = tl.where(inside, score, float("-inf"))
            better = score > best  # strict: the earlier column wins a tie, as torch.argmax
            best = tl.where(better, score, best)
            arg = tl.where(better, cols[None, :], arg)
        out = row * parts + part
        tl.store(max_ptr + out, m, mask=live)
        tl.store(sum_ptr + out, tl.sum(total, 1), mask=live)
        winner = tl.max(best, 1)
        tl.store(best_ptr + out, winner, mask=live)
        tl.store(arg_ptr + out, tl.min(tl.where(best == winner[:, None], arg, 2147483647), 1), mask=live)

    @torch.library.custom_op("execrl::sampling_partials", mutates_args=())
    def _partials(logits: torch.Tensor, keys: torch.Tensor, bitmask: torch.Tensor, temperature: float, noise: bool,
                  masked: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """An opaque operator (torch.compile and CUDA graphs take it as it is): per (row, chunk)
        max, sum of exps, best score and its column, each [B, P]; `masked`: over the columns the
        bitmask [B, W] allows only."""
        b, v = logits.shape
        parts = triton.cdiv(v, CHUNK)
        f = dict(dtype=torch.float32, device=logits.device)
        top, total, best = (torch.empty(b, parts, **f) for _ in range(3))
        arg = torch.empty(b, parts, dtype=torch.int32, device=logits.device)
        _partials_kernel[(triton.cdiv(b, ROWS), parts)](
            logits, keys, bitmask, top, total, best, arg, b, v, logits.stride(0), bitmask.shape[-1], temperature,
            parts, NOISE=noise, SCALE=temperature != 1.0, MASK=masked, ROWS=ROWS, CHUNK=CHUNK, BLOCK=BLOCK,
            FAST_LOG=torch.version.hip is None, num_warps=WARPS)  # (the fast log is NVIDIA's PTX)
        return top, total, best, arg

    @_partials.register_fake
    def _(logits, keys, bitmask, temperature, noise, masked):
        b, v = logits.shape
        shape = (b, -(-v // CHUNK))
        f = [logits.new_empty(shape, dtype=torch.float32) for _ in range(3)]
        return f[0], f[1], f[2], logits.new_empty(shape, dtype=torch.int32)


def sample_plain(logits: torch.Tensor, temperature: float, keys: torch.Tensor | None,
                 bitmask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] (any float dtype, rows contiguous), keys [B] int32 (None: greedy), bitmask [B,
    W] int32 (guided decoding: the allowed tokens; None: all) -> (tokens [B], logprobs [B] under
    softmax(logits / temperature) over the allowed tokens): sampling.sample for top_k None and top_p
    1, which passes its scoring temperature."""
    noise = keys is not None
    if keys is None:
        keys = torch.zeros(logits.shape[0], dtype=torch.int32, device=logits.device)
    masked = bitmask is not None
    if bitmask is None:
        bitmask = keys[:, None]  # (never read)
    top, total, best, arg = _partials(logits.contiguous(), keys.int(), bitmask.contiguous(), temperature, noise,
                                      masked)  # [B, P] each
    peak = top.max(-1, keepdim=True).values  # [B, 1]
    lse = peak[:, 0] + torch.log((total * torch.exp(top - peak)).sum(-1))  # [B]
    tokens = arg.gather(-1, best.argmax(-1, keepdim=True))[:, 0].long()  # [B]: the first chunk's winner on a tie
    picked = logits.gather(-1, tokens[:, None])[:, 0].float() / temperature
    return tokens, picked - lse
