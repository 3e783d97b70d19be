"""Sampling without top-k/top-p on a GPU (Triton) in two kernels: one pass over the logits for each chunk's
log-sum-exp, then one program per row that draws the row's token by inverse CDF and scores it.

`sampling.sample_torch` does the same with torch ops (`sampling.inverse_cdf`): the row's running sum of
exp(scaled - max), the first column where it passes the row's draw u times its total. Here each row is cut into
chunks of CHUNK columns; the first kernel's program per (ROWS rows, chunk) writes each row's max and sum of
exponentials over the chunk (and, greedy, its largest logit's column); the second, per row, combines them into the
log-sum-exp, picks the chunk the draw falls in and walks that chunk's columns only. A token costs one exponential
per logit, where Gumbel-max noise took a hash and two logarithms (bench/README.md, "Sampling by inverse CDF").
The draw is sampling.row_uniform's, bit for bit in its integer hash; the sums are taken in another order than
torch's cumulative sum, so a row whose draw lies within rounding of a column's edge may take the neighbouring
column (up to about one row in a hundred over a 152K vocabulary of near-equal logits): either is a sample of the
same distribution.

Shapes: B rows, V vocabulary, P = ceil(V / CHUNK) chunks per row.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs: sampling.sample's torch path
    triton = None

# the partials' and the finish's tilings: the best of 60 at 16, 128 and 256 rows of 151,936 logits on an H200 (the
# finish walks a chunk in one block)
ROWS, CHUNK, BLOCK, WARPS = 1, 2048, 2048, 4
SCAN_BLOCK, SCAN_WARPS = 2048, 8
SALT = 0x2545F491  # sampling.row_uniform's: a row's draw is its key's hash, apart from the keys themselves


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
    def _scaled(logits_ptr, mask_ptr, row, cols, inside, row_stride, words, temperature, SCALE: tl.constexpr,
                MASK: tl.constexpr):
        """logits[row, cols] / temperature in fp32, -inf outside the vocabulary and, MASK, where the row's packed
        mask (guided decoding) clears the column's bit (bit col % 32 of word col // 32)."""
        x = tl.load(logits_ptr + row * row_stride + cols, mask=inside, other=float("-inf")).to(tl.float32)
        if MASK:
            word = tl.load(mask_ptr + row * words + cols // 32, mask=inside, other=0)
            x = tl.where(((word >> (cols % 32)) & 1) != 0, x, float("-inf"))
        if SCALE:
            x = x / temperature
        return x

    @triton.jit
    def _partials_kernel(logits_ptr, mask_ptr, max_ptr, sum_ptr, best_ptr, arg_ptr, rows, vocab, row_stride, words,
                         temperature, parts, GREEDY: tl.constexpr, SCALE: tl.constexpr, MASK: tl.constexpr,
                         ROWS: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
        """Program (r, part): rows [r * ROWS, (r + 1) * ROWS) x columns [part * CHUNK, (part + 1) * CHUNK): each
        row's max of the scaled logits, sum of exp(scaled - max), and (GREEDY) its largest logit's column."""
        row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)  # [R]
        part = tl.program_id(1)
        live = row < rows
        m = tl.full([ROWS], float("-inf"), tl.float32)  # per row: running max of the scaled logits
        total = tl.zeros([ROWS, BLOCK], tl.float32)  # per lane: running sum of exp(scaled - m)
        arg = tl.zeros([ROWS, BLOCK], tl.int32)  # (GREEDY) per lane: the column of its largest logit
        best = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
        for start in range(0, CHUNK, BLOCK):
            cols = part * CHUNK + start + tl.arange(0, BLOCK)  # [K]
            inside = live[:, None] & (cols < vocab)[None, :]  # [R, K]
            x = _scaled(logits_ptr, mask_ptr, row[:, None], cols[None, :], inside, row_stride, words, temperature,
                        SCALE, MASK)
            # the row's max, not each lane's: one exponential per logit
            m_new = tl.maximum(m, tl.max(x, 1))  # [R]
            base = tl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
            total = total * tl.exp(m - base)[:, None] + tl.exp(x - base[:, None])
            m = m_new
            if GREEDY:
                better = x > best  # strict: the earlier column wins a tie, as torch.argmax
                best = tl.where(better, x, best)
                arg = tl.where(better, cols[None, :], arg)
        out = row * parts + part
        tl.store(max_ptr + out, m, mask=live)
        tl.store(sum_ptr + out, tl.sum(total, 1), mask=live)
        if GREEDY:
            winner = tl.max(best, 1)
            tl.store(best_ptr + out, winner, mask=live)
            tl.store(arg_ptr + out, tl.min(tl.where(best == winner[:, None], arg, 2147483647), 1), mask=live)

    @triton.jit
    def _finish_kernel(logits_ptr, keys_ptr, mask_ptr, max_ptr, sum_ptr, best_ptr, arg_ptr, token_ptr, logprob_ptr,
                       vocab, row_stride, words, temperature, parts, GREEDY: tl.constexpr, SCALE: tl.constexpr,
                       MASK: tl.constexpr, PARTS: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
                       SALT: tl.constexpr):
        """Program r: row r's token and its logprob from the row's P chunk partials. Sampling: the draw u (the row
        key's hash), the chunk where the running sum of the chunks' exp(scaled - peak) passes u times their total,
        then the first column of that chunk where the running sum passes what is left (the chunk's last allowed
        column where rounding leaves the sum short). Greedy: the first chunk's winner among the largest."""
        row = tl.program_id(0)
        j = tl.arange(0, PARTS)  # [P']
        valid = j < parts
        top = tl.load(max_ptr + row * parts + j, mask=valid, other=float("-inf"))
        peak = tl.max(top)
        mass = tl.where(valid & (top > float("-inf")), tl.load(sum_ptr + row * parts + j, mask=valid, other=0.0)
                        * tl.exp(top - peak), 0.0)  # [P']: each chunk's sum of exp(scaled - peak)
        cum = tl.cumsum(mass, 0)
        whole = tl.max(cum)
        if GREEDY:
            best = tl.load(best_ptr + row * parts + j, mask=valid, other=float("-inf"))
            arg = tl.load(arg_ptr + row * parts + j, mask=valid, other=2147483647)
            token = tl.min(tl.where(best == tl.max(best), arg, 2147483647))
        else:
            key = tl.load(keys_ptr + row)
            bits = (_mix(key ^ SALT) >> 8) & 0xFFFFFF
            u = tl.minimum((bits.to(tl.float32) + 0.5) * (1.0 / 16777216.0), 0.99999994)  # sampling.uniform
            target = u * whole
            last = tl.max(tl.where(mass > 0, j, -1))  # the last chunk with an allowed column
            chunk = tl.minimum(tl.sum(((cum <= target) & valid).to(tl.int32)), last)
            excess = target - tl.sum(tl.where(j == chunk, cum - mass, 0.0))  # the draw past the chunks before
            carry = tl.zeros([], tl.float32)  # the sum of the chunk's earlier blocks
            token, end = tl.full([], -1, tl.int32), tl.full([], -1, tl.int32)
            for start in range(0, CHUNK, BLOCK):
                cols = chunk * CHUNK + start + tl.arange(0, BLOCK)  # [K]
                x = _scaled(logits_ptr, mask_ptr, row, cols, cols < vocab, row_stride, words, temperature, SCALE,
                            MASK)
                p = tl.exp(x - peak)  # [K], 0 where not allowed
                run = tl.cumsum(p, 0) + carry
                first = tl.min(tl.where((run > excess) & (p > 0), cols, 2147483647))  # (p > 0: excess may be < 0)
                token = tl.where((token < 0) & (first < 2147483647), first, token)
                end = tl.maximum(end, tl.max(tl.where(p > 0, cols, -1)))
                carry += tl.sum(p)
            token = tl.where(token < 0, end, token)
        picked = tl.load(logits_ptr + row * row_stride + token).to(tl.float32)
        if SCALE:
            picked = picked / temperature
        tl.store(token_ptr + row, token)
        tl.store(logprob_ptr + row, picked - (peak + tl.log(whole)))

    @torch.library.custom_op("execrl::sample_plain", mutates_args=())
    def _sample(logits: torch.Tensor, keys: torch.Tensor, bitmask: torch.Tensor, temperature: float, greedy: bool,
                masked: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """An opaque operator (torch.compile and CUDA graphs take it as it is): tokens [B] (int32) and their
        logprobs [B]; `masked`: over the columns the bitmask [B, W] allows only."""
        b, v = logits.shape
        parts = triton.cdiv(v, CHUNK)
        f = dict(dtype=torch.float32, device=logits.device)
        top, total = torch.empty(b, parts, **f), torch.empty(b, parts, **f)
        best, arg = (torch.empty(b, parts, **f), torch.empty(b, parts, dtype=torch.int32, device=logits.device)) \
            if greedy else (top, keys)  # (never read)
        flags = dict(GREEDY=greedy, SCALE=temperature != 1.0, MASK=masked, CHUNK=CHUNK)
        _partials_kernel[(triton.cdiv(b, ROWS), parts)](
            logits, bitmask, top, total, best, arg, b, v, logits.stride(0), bitmask.shape[-1], temperature, parts,
            ROWS=ROWS, BLOCK=BLOCK, num_warps=WARPS, **flags)
        tokens, logprobs = torch.empty(b, dtype=torch.int32, device=logits.device), torch.empty(b, **f)
        _finish_kernel[(b,)](logits, keys, bitmask, top, total, best, arg, tokens, logprobs, v, logits.stride(0),
                             bitmask.shape[-1], temperature, parts, PARTS=triton.next_power_of_2(parts),
                             BLOCK=SCAN_BLOCK, SALT=SALT, num_warps=SCAN_WARPS, **flags)
        return tokens, logprobs

    @_sample.register_fake
    def _(logits, keys, bitmask, temperature, greedy, masked):
        b = logits.shape[0]
        return logits.new_empty(b, dtype=torch.int32), logits.new_empty(b, dtype=torch.float32)


def sample_plain(logits: torch.Tensor, temperature: float, keys: torch.Tensor | None,
                 bitmask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] (any float dtype, rows contiguous), keys [B] int32 (None: greedy), bitmask [B,
    W] int32 (guided decoding: the allowed tokens; None: all) -> (tokens [B], logprobs [B] under
    softmax(logits / temperature) over the allowed tokens): sampling.sample for top_k None and top_p
    1, which passes its scoring temperature."""
    greedy = keys is None
    if keys is None:
        keys = torch.zeros(logits.shape[0], dtype=torch.int32, device=logits.device)
    masked = bitmask is not None
    if bitmask is None:
        bitmask = keys[:, None]  # (never read)
    tokens, logprobs = _sample(logits.contiguous(), keys.int(), bitmask.contiguous(), temperature, greedy, masked)
    return tokens.long(), logprobs
