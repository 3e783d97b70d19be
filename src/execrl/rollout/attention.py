"""Decode attention: one new query token per cache slot against that slot's cached keys and values.

On a GPU this is a Triton kernel: one program per (slot, kv head) holds the G query heads that share
the kv head as G rows of one tile, and walks that slot's positions [0, pos] only (a slot 40 tokens
into its completion reads 40 + prompt positions, whatever the window), with an online softmax.
Against the general attention kernels it reads about half the keys and values, and does no work on
other rows' padding. With few slots and long windows (splits_for) each slot's positions are split over
several programs, whose softmax states a second kernel combines (split-K). A decode step hands it the
new token's keys (unrotated) and values too: the program that reads a slot's last position first
writes them into the cache, the keys rotated as the queries are (no kernel of their own: 254 -> 230
kernels per 0.5B decode step, bench/README.md). Elsewhere (CPU, no Triton, an odd head size) the same
function is torch ops: the cache writes, then scaled_dot_product_attention with a position mask.

Shapes: S slots, Hkv kv heads, G query heads per kv head, W window (cache positions that may be
read), D head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from execrl.rollout.models.layers import rotate

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs: the reference path below
    triton = None


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, window: int,
              scale: float, sliding: int | None = None) -> torch.Tensor:
    """q [S, Hkv, G, D], k/v [S, Hkv, L, D] (the cache), pos [S] -> [S, Hkv, G, D]: attention to
    positions <= pos (and > pos - sliding, with a sliding window)."""
    n = torch.arange(window, device=q.device)[None]  # [1, W]
    visible = n <= pos[:, None]
    if sliding is not None:
        visible = visible & (n > pos[:, None] - sliding)
    visible = visible[:, None, None]  # [S, 1, 1, W]
    return F.scaled_dot_product_attention(q, k[:, :, :window], v[:, :, :window], attn_mask=visible, scale=scale)


def kernel_supported(q: torch.Tensor) -> bool:
    return q.is_cuda and kernel_fits(q.shape[-1], q.shape[-2])


def kernel_fits(head_dim: int, group: int) -> bool:
    """Whether the Triton kernels take this head dim and query heads per kv head (where Triton is installed)."""
    return triton is not None and head_dim in (32, 64, 128, 256) and group <= 64


if triton is not None:
    @triton.jit
    def _block(q, k_base, v_base, start, lo, end, sk_l, sv_l, scale, m, total, acc, d, BLOCK: tl.constexpr):
        """One block of BLOCK positions from `start` (those in [lo, end)): the online-softmax update
        of (m, total, acc)."""
        n = start + tl.arange(0, BLOCK)
        inside = (n < end) & (n >= lo)
        k = tl.load(k_base + n[:, None] * sk_l + d[None, :], mask=inside[:, None], other=0.0)  # [BLOCK, D]
        scores = tl.dot(q, tl.trans(k)) * scale  # [GP, BLOCK]
        scores = tl.where(inside[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        p = tl.exp(scores - m_new[:, None])
        rescale = tl.exp(m - m_new)
        total = total * rescale + tl.sum(p, 1)
        v = tl.load(v_base + n[:, None] * sv_l + d[None, :], mask=inside[:, None], other=0.0)  # [BLOCK, D]
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        return m_new, total, acc

    @triton.jit
    def _query(q_ptr, cos_ptr, sin_ptr, s, h, sq_s, sq_h, sq_g, sc_s, G: tl.constexpr, GP: tl.constexpr,
               D: tl.constexpr, R: tl.constexpr):
        """Row s's G queries of kv head h [GP, D], rotated (R > 0: their first R dims by row s's cos/sin
        [R], halves rotated, in float32 and rounded back to the queries' dtype, as rotate does)."""
        g = tl.arange(0, GP)
        return _queries(q_ptr, cos_ptr, sin_ptr, tl.zeros([GP], tl.int32) + s, g, g < G, h, sq_s, sq_h, sq_g, sc_s,
                        GP, D, R)

    @triton.jit
    def _queries(q_ptr, cos_ptr, sin_ptr, rows, g, real, h, sq_s, sq_h, sq_g, sc_s, N: tl.constexpr,
                 D: tl.constexpr, R: tl.constexpr):
        """Query head g[i] of kv head h's group, of row rows[i], for i < N (those not `real`: 0) [N, D],
        rotated by each row's cos/sin as _query rotates them."""
        d = tl.arange(0, D)
        base = q_ptr + rows[:, None] * sq_s + h * sq_h + g[:, None] * sq_g
        q = tl.load(base + d[None, :], mask=real[:, None], other=0.0)
        if R > 0:
            turned = d < R
            partner = tl.where(d < R // 2, d + R // 2, d - R // 2)
            mask = real[:, None] & turned[None, :]
            other = tl.load(base + partner[None, :], mask=mask, other=0.0).to(tl.float32)
            table = rows[:, None] * sc_s + d[None, :]
            c = tl.load(cos_ptr + table, mask=mask, other=1.0).to(tl.float32)
            n = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
            sign = tl.where(d < R // 2, -1.0, 1.0)
            q = (q.to(tl.float32) * c + sign[None, :] * n * other).to(q_ptr.dtype.element_ty)
        return q

    @triton.jit
    def _append(kn_ptr, vn_ptr, cos_ptr, sin_ptr, k_base, v_base, at, s, h, skn_s, skn_h, svn_s, svn_h, sk_l, sv_l,
                sc_s, D: tl.constexpr, R: tl.constexpr):
        """Row s's new key of kv head h, rotated as its queries are (_query), and its value, into the
        cache at position `at`."""
        d = tl.arange(0, D)
        key = _query(kn_ptr, cos_ptr, sin_ptr, s, h, skn_s, skn_h, 0, sc_s, 1, 1, D, R)  # [1, D]
        tl.store(k_base + at * sk_l + d[None, :], key.to(k_base.dtype.element_ty))
        tl.store(v_base + at * sv_l + d, tl.load(vn_ptr + s * svn_s + h * svn_h + d).to(v_base.dtype.element_ty))

    @triton.jit
    def _empty(GP: tl.constexpr, D: tl.constexpr):
        """An online softmax's state over no positions: running max -inf, sum of exp(score - max) 0, and the sum of
        exp(score - max) * value 0."""
        return tl.full([GP], float("-inf"), tl.float32), tl.zeros([GP], tl.float32), tl.zeros([GP, D], tl.float32)

    @triton.jit
    def _states(q_ptr, k_ptr, v_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, kn_ptr, vn_ptr, at_ptr, window, sliding,
                scale, sq_s, sq_h, sq_g, sk_s, sk_h, sk_l, sv_s, sv_h, sv_l, sc_s, skn_s, skn_h, svn_s, svn_h, s, h, j,
                G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr,
                MAPPED: tl.constexpr, R: tl.constexpr, APPEND: tl.constexpr, skip, m, total, acc):
        """The online softmax's state (m, total, acc) of row s's queries of kv head h over run j of
        its positions from `skip` on (its blocks dealt out in SPLITS contiguous runs; SPLITS = 1: all of them),
        from the state (m, total, acc) of the positions before (none: -inf, 0, 0), and
        the run's [begin, stop) (empty for a run past the row's positions: m stays -inf). Row s reads
        cache slot s, or slot_ptr[s] when MAPPED (a step over some of the slots); R > 0: its queries
        are rotated first (_query). APPEND: the run that reads the row's last position first writes
        the row's new key (rotated as the queries are) and value at position at_ptr[s] (_append)."""
        d = tl.arange(0, D)
        q = _query(q_ptr, cos_ptr, sin_ptr, s, h, sq_s, sq_h, sq_g, sc_s, G, GP, D, R)
        p = tl.load(pos_ptr + s)
        end = tl.minimum(p + 1, window)  # positions [lo, end) are this slot's
        # (sliding = window: no sliding window; skip <= p but in an ended slot, which reads position 0 only)
        lo = tl.maximum(tl.maximum(p + 1 - sliding, 0), tl.minimum(skip, p))
        first = (lo // BLOCK) * BLOCK
        per = tl.cdiv(tl.cdiv(end - first, BLOCK), SPLITS)  # blocks per run
        begin = first + j * per * BLOCK
        stop = tl.minimum(begin + per * BLOCK, end)
        c = s
        if MAPPED:
            c = tl.load(slot_ptr + s)
        k_base, v_base = k_ptr + c * sk_s + h * sk_h, v_ptr + c * sv_s + h * sv_h
        if APPEND:
            if j == ((end - 1 - first) // BLOCK) // per:  # (no other program reads the position written)
                _append(kn_ptr, vn_ptr, cos_ptr, sin_ptr, k_base, v_base, tl.load(at_ptr + s), s, h, skn_s, skn_h,
                        svn_s, svn_h, sk_l, sv_l, sc_s, D, R)
            tl.debug_barrier()  # the program's threads read what its threads wrote
        for start in range(begin, stop, BLOCK):  # this slot's positions only
            m, total, acc = _block(q, k_base, v_base, start, lo, end, sk_l, sv_l, scale, m, total, acc, d, BLOCK)
        return m, total, acc, begin, stop

    @triton.jit
    def _decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, kn_ptr, vn_ptr, at_ptr, window,
                       sliding, scale, sq_s, sq_h, sq_g, sk_s, sk_h, sk_l, sv_s, sv_h, sv_l, so_s, so_h, so_g, sc_s,
                       skn_s, skn_h, svn_s, svn_h, units_ptr, rows_ptr, pm_ptr, pl_ptr, pacc_ptr,
                       G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, MAPPED: tl.constexpr,
                       R: tl.constexpr, APPEND: tl.constexpr, SHARED: tl.constexpr, K: tl.constexpr,
                       RP: tl.constexpr, PSPLITS: tl.constexpr):
        """Row s's attention for kv head h. SHARED: where the row is member i of a unit (rows_ptr [S, 3]: unit, i, the
        unit's prompt length; unit -1: none), the row walks its positions after the prompt, then merges the state of
        the prompt's positions that _prefix_kernel wrote into the partials pm/pl/pacc [U, Hkv, PSPLITS, RP(, D)]:
        launched as that kernel's dependent (PDL), the walk runs while it does, and the merge waits for it."""
        s, h = tl.program_id(0), tl.program_id(1)
        g, d = tl.arange(0, GP), tl.arange(0, D)
        unit, member, skip = -1, 0, 0
        if SHARED:
            unit, member, skip = tl.load(rows_ptr + 3 * s), tl.load(rows_ptr + 3 * s + 1), tl.load(rows_ptr + 3 * s + 2)
        m, total, acc = _empty(GP, D)
        m, total, acc, _, _ = _states(q_ptr, k_ptr, v_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, kn_ptr, vn_ptr, at_ptr,
                                      window, sliding, scale, sq_s, sq_h, sq_g, sk_s, sk_h, sk_l, sv_s, sv_h, sv_l,
                                      sc_s, skn_s, skn_h, svn_s, svn_h, s, h, 0, G, GP, D, BLOCK, 1, MAPPED, R, APPEND,
                                      skip, m, total, acc)
        if SHARED:
            tl.extra.cuda.gdc_wait()  # (_prefix_kernel's partials written and visible)
            if unit >= 0:
                m, total, acc = _merge_prompt(m, total, acc, unit, member, h, pm_ptr, pl_ptr, pacc_ptr, G, GP, D, RP,
                                              PSPLITS)
        out = acc / total[:, None]
        tl.store(o_ptr + s * so_s + h * so_h + g[:, None] * so_g + d[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=g[:, None] < G)

    @triton.jit
    def _merge_prompt(m, total, acc, unit, member, h, pm_ptr, pl_ptr, pacc_ptr, G: tl.constexpr, GP: tl.constexpr,
                      D: tl.constexpr, RP: tl.constexpr, PSPLITS: tl.constexpr):
        """A row's online-softmax state (m, total, acc) over its own positions merged with the state of its unit's
        prompt: member `member` of unit `unit`'s runs in the partials [U, Hkv, PSPLITS, RP(, D)] of _prefix_kernel."""
        g, d = tl.arange(0, GP), tl.arange(0, D)
        real = g < G
        first = ((unit * tl.num_programs(1) + h) * PSPLITS) * RP + member * G + g
        for j in range(PSPLITS):  # (a run past the prompt's positions: m -inf, weight 0)
            mj = tl.load(pm_ptr + first + j * RP, mask=real, other=float("-inf"))
            top = tl.maximum(m, mj)  # finite: the prompt's first run holds position 0
            a = tl.where(m > float("-inf"), tl.exp(m - top), 0.0)
            b = tl.where(mj > float("-inf"), tl.exp(mj - top), 0.0)
            total = total * a + tl.load(pl_ptr + first + j * RP, mask=real, other=0.0) * b
            acc = acc * a[:, None] + tl.load(pacc_ptr + (first + j * RP)[:, None] * D + d[None, :],
                                             mask=(real & (b > 0))[:, None], other=0.0) * b[:, None]
            m = top
        return m, total, acc

    @triton.jit
    def _prefix_kernel(q_ptr, k_ptr, v_ptr, units_ptr, pm_ptr, pl_ptr, pacc_ptr, cos_ptr, sin_ptr, scale, sq_s, sq_h,
                       sq_g, sk_s, sk_h, sk_l, sv_s, sv_h, sv_l, sc_s, G: tl.constexpr, K: tl.constexpr,
                       RP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, PSPLITS: tl.constexpr,
                       R: tl.constexpr):
        """Run j of unit u's prompt positions for all its members' queries at once (kv head h): units_ptr [U, K + 2]
        holds each unit's prompt length (0: no unit), the cache slot its prompt is read from, and its up to K member
        rows (-1: none), every member's cache holding the same prompt. Its RP rows are (member i, query head g) at
        i * G + g; the online softmax's state of each into the partials [U, Hkv, PSPLITS, RP(, D)] (_decode_kernel
        merges them into each row's). One read of the prompt's keys and values for the unit's K members, where each
        member's own program read them once each."""
        tl.extra.cuda.gdc_launch_dependents()  # (_decode_kernel's programs start their own walks meanwhile)
        u, h, j = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        length = tl.load(units_ptr + u * (K + 2))
        if length > 0:
            r, d = tl.arange(0, RP), tl.arange(0, D)
            member = r // G
            row = tl.load(units_ptr + u * (K + 2) + 2 + member, mask=member < K, other=-1)
            q = _queries(q_ptr, cos_ptr, sin_ptr, tl.maximum(row, 0), r % G, row >= 0, h, sq_s, sq_h, sq_g, sc_s,
                         RP, D, R)
            src = tl.load(units_ptr + u * (K + 2) + 1)
            k_base, v_base = k_ptr + src * sk_s + h * sk_h, v_ptr + src * sv_s + h * sv_h
            per = tl.cdiv(tl.cdiv(length, BLOCK), PSPLITS)
            begin = j * per * BLOCK
            stop = tl.minimum(begin + per * BLOCK, length)
            m = tl.full([RP], float("-inf"), tl.float32)
            total = tl.zeros([RP], tl.float32)
            acc = tl.zeros([RP, D], tl.float32)
            for start in range(begin, stop, BLOCK):
                m, total, acc = _block(q, k_base, v_base, start, 0, stop, sk_l, sv_l, scale, m, total, acc, d, BLOCK)
            at = ((u * tl.num_programs(1) + h) * PSPLITS + j) * RP + r
            tl.store(pm_ptr + at, m)
            tl.store(pl_ptr + at, total)
            tl.store(pacc_ptr + at[:, None] * D + d[None, :], acc)

    @triton.jit
    def _split_kernel(q_ptr, k_ptr, v_ptr, m_ptr, l_ptr, acc_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, kn_ptr, vn_ptr,
                      at_ptr, window, sliding, scale, sq_s, sq_h, sq_g, sk_s, sk_h, sk_l, sv_s, sv_h, sv_l, sc_s,
                      skn_s, skn_h, svn_s, svn_h, rows_ptr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                      BLOCK: tl.constexpr, SPLITS: tl.constexpr, MAPPED: tl.constexpr, R: tl.constexpr,
                      APPEND: tl.constexpr, SHARED: tl.constexpr):
        """Run j of a slot's positions: its online softmax's state, into the partials [S, Hkv,
        SPLITS, G(, D)] (the G real query rows only). SHARED: the positions after the row's unit's prompt
        (rows_ptr, as _decode_kernel's), the program a dependent of _prefix_kernel's (PDL) that ends after it."""
        s, h, j = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        skip = 0
        if SHARED:
            skip = tl.load(rows_ptr + 3 * s + 2)
        m, total, acc = _empty(GP, D)
        m, total, acc, begin, stop = _states(q_ptr, k_ptr, v_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, kn_ptr, vn_ptr,
                                             at_ptr, window, sliding, scale, sq_s, sq_h, sq_g, sk_s, sk_h, sk_l, sv_s,
                                             sv_h, sv_l, sc_s, skn_s, skn_h, svn_s, svn_h, s, h, j, G, GP, D, BLOCK,
                                             SPLITS, MAPPED, R, APPEND, skip, m, total, acc)
        if SHARED:
            tl.extra.cuda.gdc_wait()  # (the combine kernel after this one reads _prefix_kernel's partials)
        g, d = tl.arange(0, GP), tl.arange(0, D)
        at = (s * tl.num_programs(1) + h) * SPLITS + j
        real = g < G
        tl.store(m_ptr + at * G + g, m, mask=real)
        tl.store(l_ptr + at * G + g, total, mask=real)
        width = tl.where(begin < stop, D, 0)  # (an empty split's acc is never read: not written)
        tl.store(acc_ptr + (at * G + g[:, None]) * D + d[None, :], acc, mask=real[:, None] & (d[None, :] < width))

    @triton.jit
    def _combine_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, so_s, so_h, so_g, rows_ptr, pm_ptr, pl_ptr, pacc_ptr,
                        G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr, SP: tl.constexpr,
                        SHARED: tl.constexpr, RP: tl.constexpr, PSPLITS: tl.constexpr):
        """The splits' states of one (slot, kv head) rescaled to their common max and summed: the
        attention over all its positions. One split's [G, D] accumulator in registers at a time. SHARED: and the
        state of the row's unit's prompt (_merge_prompt)."""
        s, h = tl.program_id(0), tl.program_id(1)
        j, g, d = tl.arange(0, SP), tl.arange(0, GP), tl.arange(0, D)
        base = (s * tl.num_programs(1) + h) * SPLITS
        real = g < G
        every = tl.load(m_ptr + (base + j[:, None]) * G + g[None, :], mask=(j[:, None] < SPLITS) & real[None, :],
                        other=float("-inf"))  # [SP, GP]
        top = tl.max(every, 0)  # [GP]: finite on real rows (split 0 holds the slot's first position)
        total = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        for i in range(SPLITS):
            m = tl.load(m_ptr + (base + i) * G + g, mask=real, other=float("-inf"))
            part = tl.load(l_ptr + (base + i) * G + g, mask=real, other=0.0)
            w = tl.where(part > 0, tl.exp(m - top), 0.0)  # [GP]: 0 for an empty split (its acc was not written)
            total += part * w
            acc += w[:, None] * tl.load(acc_ptr + ((base + i) * G + g[:, None]) * D + d[None, :],
                                        mask=(real & (part > 0))[:, None], other=0.0)
        if SHARED:
            unit = tl.load(rows_ptr + 3 * s)
            if unit >= 0:
                top, total, acc = _merge_prompt(top, total, acc, unit, tl.load(rows_ptr + 3 * s + 1), h, pm_ptr,
                                                pl_ptr, pacc_ptr, G, GP, D, RP, PSPLITS)
        out = acc / total[:, None]
        tl.store(o_ptr + s * so_s + h * so_h + g[:, None] * so_g + d[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=real[:, None])


# Split only where it measured faster on an H200 (bench/README.md, `bench/decode_attention.py`): one program per
# (slot, kv head) already reads 128-256 slots' keys at 3.8-4.4 TB/s, and splitting them cost up to 13% at 4K
# positions; with 64 programs or fewer and 16K positions, 4 splits read 1.98x faster.
SPLIT_FROM = 16384  # positions in the window
SPLIT_PROGRAMS = 64  # (slot, kv head) pairs at most
SPLITS = 4
# Few live slots (tail_splits): the tail of a batch, where a few long samples still run, or a small engine's
# batch at long windows. One program per (slot, kv head) walks a slot's cache at about one multiprocessor's share of
# the bandwidth (~31 GB/s measured) while the rest of the GPU waits: 16 slots at 2,176 positions, 2 kv heads, read
# their keys and values at 0.85 TB/s, 47% of that 1.5B decode step's kernel time (bench/README.md).
TAIL_FROM = 1024  # positions in the window
TAIL_PAIRS = 64  # live (slot, kv head) pairs at most: more fill the GPU's multiprocessors unsplit
TAIL_PROGRAMS = 256  # programs to aim for, about two per multiprocessor
TAIL_POSITIONS = 512  # positions per split, at least about
MAX_SPLITS = 16
# A GRPO group's samples share their prompt: where the engine passes units of them (decode_attention's `shared`), one
# program per (unit, kv head, run) reads the prompt's keys and values for all the unit's queries, where each sample's
# own program read them (a 640-token prompt 3.2x faster at 1.5B, 128 slots in units of 8: bench/README.md).
PROMPT_SPLITS = 4  # runs of each unit's prompt positions (the best of 1, 2, 4, 8 at 640-2,048 positions)
SHARED_ROWS = 64  # a unit's query rows (members x query heads per kv head) at most: one tile
# A unit's prompt at least this many elements of keys (or values) per layer (prompt tokens x kv heads x head dim): a
# shorter one reads about as fast or faster from each slot's copy (measured: 1.5B, 2 x 128, even at 256 tokens, 1.07x
# at 512 for 0.5B's 2 x 64; this is 256 and 512 tokens there)
SHARED_FROM = 1 << 16


def shared_from(kv_heads: int, head_dim: int) -> int:
    """The shortest prompt (tokens) whose samples read it once per unit (SHARED_FROM)."""
    return -(-SHARED_FROM // (kv_heads * head_dim))


def unit_members(heads: int, kv_heads: int) -> int:
    """How many samples one unit of a shared prompt holds at most (0: too few to share: one program's tile holds
    SHARED_ROWS query rows)."""
    k = SHARED_ROWS // (heads // kv_heads)
    return k if k >= 2 else 0


def splits_for(slots: int, kv_heads: int, window: int) -> int:
    """How many programs share one (slot, kv head)'s positions when every slot may read the whole
    window (1: no split)."""
    return SPLITS if window >= SPLIT_FROM and slots * kv_heads <= SPLIT_PROGRAMS else 1


def tail_splits(running: int, kv_heads: int, window: int) -> int:
    """How many programs share one slot's positions when `running` samples still decode (the other
    slots read one position each): 1 (no split) where their (slot, kv head) pairs are enough programs
    to fill the GPU, or the window is short; else runs of at least ~TAIL_POSITIONS positions, as many
    as make at most ~TAIL_PROGRAMS programs in a power of two (each count is a Triton kernel and CUDA
    graphs of its own: few counts, few compilations and captures)."""
    pairs = max(1, running * kv_heads)
    if window < TAIL_FROM or pairs > TAIL_PAIRS:
        return 1
    fill = 1 << ((TAIL_PROGRAMS // pairs).bit_length() - 1)  # (pairs <= TAIL_PAIRS: at least 4)
    return min(MAX_SPLITS, window // TAIL_POSITIONS, fill)  # (window >= TAIL_FROM: at least 2)


def _kernels(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor | None,
             cos: torch.Tensor | None, sin: torch.Tensor | None, window: int, sliding: int, scale: float, tail: int,
             new: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
             shared: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The Triton kernels' launch: one program per (row, kv head), or split-K and its combine; with `shared`
    (units, row units: see decode_attention), each unit's prompt first (_prefix_kernel), the rows' programs its
    dependents."""
    s, hkv, g, d = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    rotary = 0 if cos is None else cos.shape[-1]
    cos_ptr, sin_ptr = (pos, pos) if cos is None else (cos, sin)  # (not read without rotary)
    sc_s = 0 if cos is None else cos.stride(0)
    kn, vn, at = (q, q, pos) if new is None else new  # (not read unless appending)
    appending = (*kn.stride()[:2], *vn.stride()[:2]) if new is not None else (0, 0, 0, 0)
    gp = max(16, triton.next_power_of_2(g))  # tl.dot needs 16 rows at least: the padding rows are masked
    splits = max(tail, splits_for(s, hkv, window))
    mapped = slots is not None
    slot_ptr = slots if mapped else pos  # (not read unless mapped)
    units, rows, partials, members, rp = pos, pos, (pos, pos, pos), 1, 16  # (not read unless shared)
    if shared is not None and sliding >= window:
        units, rows = shared
        members = units.shape[1] - 2
        rp = max(16, triton.next_power_of_2(members * g))
        m = torch.empty(units.shape[0], hkv, PROMPT_SPLITS, rp, dtype=torch.float32, device=q.device)
        partials = (m, torch.empty_like(m), torch.empty(*m.shape, d, dtype=torch.float32, device=q.device))
        _prefix_kernel[(units.shape[0], hkv, PROMPT_SPLITS)](
            q, k, v, units, *partials, cos_ptr, sin_ptr, scale, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            sc_s, G=g, K=members, RP=rp, D=d, BLOCK=64, PSPLITS=PROMPT_SPLITS, R=rotary, num_warps=4)
    sharing = members > 1
    pdl = {"launch_pdl": True} if sharing else {}  # (a dependent of _prefix_kernel: runs beside it)
    if splits == 1:
        _decode_kernel[(s, hkv)](q, k, v, out, pos, slot_ptr, cos_ptr, sin_ptr, kn, vn, at, window, sliding, scale,
                                 *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3], sc_s, *appending,
                                 units, rows, *partials, G=g, GP=gp, D=d, BLOCK=64, MAPPED=mapped, R=rotary,
                                 APPEND=new is not None, SHARED=sharing, K=members, RP=rp, PSPLITS=PROMPT_SPLITS,
                                 num_warps=4, **pdl)
        return out
    m = torch.empty(s, hkv, splits, g, dtype=torch.float32, device=q.device)
    total, acc = torch.empty_like(m), torch.empty(s, hkv, splits, g, d, dtype=torch.float32, device=q.device)
    _split_kernel[(s, hkv, splits)](q, k, v, m, total, acc, pos, slot_ptr, cos_ptr, sin_ptr, kn, vn, at, window,
                                    sliding, scale, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], sc_s,
                                    *appending, rows, G=g, GP=gp, D=d, BLOCK=64, SPLITS=splits, MAPPED=mapped,
                                    R=rotary, APPEND=new is not None, SHARED=sharing, num_warps=4, **pdl)
    _combine_kernel[(s, hkv)](m, total, acc, out, *out.stride()[:3], rows, *partials, G=g, GP=gp, D=d, SPLITS=splits,
                              SP=triton.next_power_of_2(splits), SHARED=sharing, RP=rp, PSPLITS=PROMPT_SPLITS,
                              num_warps=4)
    return out


def _torch_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor | None,
                cos: torch.Tensor | None, sin: torch.Tensor | None, window: int, sliding: int | None, scale: float,
                new: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
                shared: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The same with torch ops (CPU, no Triton, an odd head size); a unit's rows read its prompt from the slot the
    kernels read it from (the same values: what tests the engine's units on a CPU)."""
    if new is not None:  # the rows' new keys (rotated) and values into their slots' caches first
        key, value, at = new
        if cos is not None:
            key = rotate(key[:, :, None], cos[:, None, None], sin[:, None, None])[:, :, 0]
        written = torch.arange(q.shape[0], device=q.device) if slots is None else slots
        k[written, :, at] = key
        v[written, :, at] = value
    if cos is not None:
        q = rotate(q, cos[:, None, None], sin[:, None, None])
    own = torch.arange(q.shape[0], device=q.device) if slots is None else slots.long()  # each row's cache slot
    if shared is not None and (sliding is None or sliding >= window):
        units, rows = shared
        unit = rows[:q.shape[0], 0].long()
        length = torch.where(unit >= 0, units[unit.clamp(min=0), 0], 0)  # [R]
        source = torch.where(unit >= 0, units[unit.clamp(min=0), 1].long(), own)
        prompt = (torch.arange(window, device=q.device)[None] < length[:, None])[:, None, :, None]  # [R, 1, W, 1]
        k = torch.where(prompt, k[source, :, :window], k[own, :, :window])
        v = torch.where(prompt, v[source, :, :window], v[own, :, :window])
    elif slots is not None:
        k, v = k[own, :, :window], v[own, :, :window]
    return reference(q, k, v, pos, window, scale, sliding)


@torch.library.custom_op("execrl::decode_attention", mutates_args=())
def _decode_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor | None,
               cos: torch.Tensor | None, sin: torch.Tensor | None, window: int, sliding: int, scale: float,
               tail: int, units: torch.Tensor | None, unit_rows: torch.Tensor | None) -> torch.Tensor:
    """The kernel as an opaque operator, so torch.compile and CUDA graphs take it as it is."""
    return _kernels(q, k, v, pos, slots, cos, sin, window, sliding, scale, tail, None, _shared(units, unit_rows))


@_decode_op.register_fake
def _(q, k, v, pos, slots, cos, sin, window, sliding, scale, tail, units, unit_rows):
    return q.new_empty(q.shape)


@torch.library.custom_op("execrl::decode_attention_append", mutates_args=("k", "v"))
def _append_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor | None,
               cos: torch.Tensor | None, sin: torch.Tensor | None, key: torch.Tensor, value: torch.Tensor,
               at: torch.Tensor, window: int, sliding: int, scale: float, tail: int, units: torch.Tensor | None,
               unit_rows: torch.Tensor | None) -> torch.Tensor:
    """The same, writing the rows' new keys and values into the caches k and v first (one kernel
    where the keys' rotary and the cache writes were one of their own). Torch ops where the kernel
    does not apply."""
    shared = _shared(units, unit_rows)
    if kernel_supported(q):
        return _kernels(q, k, v, pos, slots, cos, sin, window, sliding, scale, tail, (key, value, at), shared)
    return _torch_path(q, k, v, pos, slots, cos, sin, window, sliding, scale, (key, value, at), shared)


@_append_op.register_fake
def _(q, k, v, pos, slots, cos, sin, key, value, at, window, sliding, scale, tail, units, unit_rows):
    return q.new_empty(q.shape)


def _shared(units: torch.Tensor | None, unit_rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    return None if units is None else (units, unit_rows)


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, window: int,
                     scale: float, sliding: int | None = None, tail: int = 1, slots: torch.Tensor | None = None,
                     rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                     new: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                     shared: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """q [R, Hkv, G, D], k/v [S, Hkv, L, D] (the cache; last dim contiguous), pos [R] -> [R, Hkv, G,
    D]: row r attends to cache slot slots[r] (None: R = S, row r to slot r); `sliding`: a key is
    seen while pos - its position < sliding (None: every position <= pos); `tail`: split each row's
    positions over at least this many programs (tail_splits); `rope`: each row's (cos, sin) [R, rotary
    dims], the queries not yet rotated (the kernel rotates them as it loads them: no kernel of their
    own), None: rotated already; `new`: (keys [R, Hkv, D], values [R, Hkv, D], positions [R]) written
    into row r's cache slot at its position before attention reads it, the keys rotated by `rope` as
    the queries are (the kernel does both: no kernel of their own); `shared`: (units [U, K + 2], unit rows [R, 3]),
    int32, rows that hold the same prompt, as the engine's units: unit u's prompt length (0: no unit), the cache slot
    its prompt is read from and its up to K rows (-1: none); row r's unit (-1: none), its index in it and the unit's
    prompt length (0: none). A unit's prompt is read once for all its rows (_prefix_kernel), where no sliding window
    cuts the window (elsewhere each row reads its own copy); with `slots`, a unit's rows and row r are rows of this
    step, the slot its prompt is read from a cache slot."""
    cos, sin = (None, None) if rope is None else (rope[0].contiguous(), rope[1].contiguous())
    units = (None, None) if shared is None else shared
    if kernel_supported(q):
        q = q if q.stride(-1) == 1 else q.contiguous()
        sliding = window if sliding is None else sliding
        if new is not None:
            key, value, at = new
            key = key if key.stride(-1) == 1 else key.contiguous()
            value = value if value.stride(-1) == 1 else value.contiguous()
            return _append_op(q, k, v, pos, slots, cos, sin, key, value, at, window, sliding, scale, tail, *units)
        return _decode_op(q, k, v, pos, slots, cos, sin, window, sliding, scale, tail, *units)
    return _torch_path(q, k, v, pos, slots, cos, sin, window, sliding, scale, new, shared)
