"""Whether a fused decode layer would pay, measured with Triton kernels written for the decode step's shapes, each
against what the engine runs now, in the same run:

- `gemm`: each projection of a layer as one Triton GEMM over the batch's rows (gate/up with silu x up in its
  epilogue, q/k/v with its bias), the best of a few tilings, against the engine's (cuBLAS; gate/up: and the
  compiled silu x up, or at few rows (up to gated_gemm.max_rows: 16, on Hopper 64) gated_gemm's kernels);
- `chain`: a layer's six kernels but attention (norm, q/k/v, o, norm, gate/up with silu x up, down in fp32 K-split
  parts), every layer on its own weights, the engine's (its layer compiled: cuBLAS and inductor's kernels) against
  the same six in Triton, each launched with Programmatic Dependent Launch or not (a kernel waits for its predecessor
  at `gdc_wait` and lets its successor start at `gdc_launch_dependents`), and with PDL and the weights fetched before
  the wait (into L2 by prefetch instructions, or the first tile into registers);
- `tma`: each projection as a Triton GEMM whose operands are read by TMA (Hopper's tensor-memory copy engine), the
  weight on the tensor cores' M side (64 or 128 of its rows a program: swap-AB) and the rows on the N side, all of
  them (or half) in one block, so that a program reads its weight rows once (gate/up: gate's and up's, with silu x up
  in the epilogue; down: in fp32 K-split parts as the engine's); beside it the time to read the weight alone (a
  plain Triton kernel summing it), a floor for a kernel of that size;
- `mlp`: a layer's whole MLP block (RMSNorm, gate/up, silu x up, down, the residual add) as ONE persistent kernel,
  a program per SM and two grid barriers (gate/up tiles | down's K-split partial sums | their sum in a fixed
  order + the residual), against the engine's five kernels (norm, gate/up, silu x up, down with cuBLAS's split-K
  reduction, the add); and its parts alone: the barriers (no work), the first phase;
- `flow`: gate/up, silu x up and down's fp32 K-split parts from the normed rows as ONE dataflow kernel (gate/up
  tiles read by TMA, then down tasks that each wait, by a counter, only for the gate/up tiles that write their
  inputs: no grid barrier), against the engine's three kernels; and its gate/up tiles alone.

    python bench/fused_decode.py --archs qwen2.5-0.5b,qwen2.5-1.5b --rows 16,128,256
    python bench/fused_decode.py --sections chain --rows 16,128,256
    python bench/fused_decode.py --sections tma --rows 32,128,256
    python bench/fused_decode.py --sections flow --rows 128
    python bench/fused_decode.py --archs tiny --rows 16          # CPU: the engine's paths only (Triton needs a GPU)

Every timing is one call per layer, each on that layer's own weights (as a decode step reads them: more copies where
a layer's would fit in the L2 cache), all in one CUDA graph, best of 10 replays (`common.graph_us`); Triton's figure
is the best of its tilings, each timed so. The error column: the largest |difference| from fp32 math on the same
bf16 inputs after the norm (rounded as transformers rounds it). The persistent kernel needs the GPU to itself: its
grid barriers wait for every program, which must all be resident at once.
"""

import argparse
import itertools
from functools import partial

import torch
import torch.nn.functional as F
from common import ARCHS, DEVICE, device_name, graph_us, projections, table, weight_copies

from execrl.rollout import gated_gemm
from execrl.rollout.decoder import partial_down, summed
from execrl.rollout.models.layers import gated

try:
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # (a CPU-only install)
    triton = None

GPU = DEVICE == "cuda" and triton is not None

if triton is not None:
    @triton.jit
    def _grid_barrier(bar_ptr, target):
        """Every program waits here until `target` arrivals are counted (the CUTLASS pattern: the block's writes,
        a block barrier, one release add, a spin on plain loads, one acquire)."""
        tl.debug_barrier()
        tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
        while tl.load(bar_ptr, volatile=True) < target:
            pass
        tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()

    @triton.jit
    def _mlp_block(x_ptr, wn_ptr, wgu_ptr, wd_ptr, act_ptr, part_ptr, out_ptr, bar_ptr, M, eps,
                   D: tl.constexpr, I: tl.constexpr, BM: tl.constexpr, MT: tl.constexpr, BN1: tl.constexpr,
                   BK1: tl.constexpr, BN2: tl.constexpr, BK2: tl.constexpr, S2: tl.constexpr, BLK: tl.constexpr,
                   PHASES: tl.constexpr):
        """out [M, D] = x + down(silu(gate(n)) * up(n)), n = RMSNorm(x) * wn, in one launch of programs that are all
        resident at once. PHASES (bits): 1 gate/up, 2 down, 4 the sum (0: only the barriers, for their cost)."""
        pid, progs = tl.program_id(0), tl.num_programs(0)
        # phase 1: act [M, I] in (row tile, BN1 columns) tiles; the norm's row scale applied after the K loop
        for t in range(pid, (I // BN1) * MT * (PHASES % 2), progs):
            rm = (t % MT) * BM + tl.arange(0, BM)
            cols = (t // MT) * BN1 + tl.arange(0, BN1)
            acc_g = tl.zeros((BM, BN1), tl.float32)
            acc_u = tl.zeros((BM, BN1), tl.float32)
            squares = tl.zeros((BM,), tl.float32)
            for k in range(0, D, BK1):
                rk = k + tl.arange(0, BK1)
                xf = tl.load(x_ptr + rm[:, None] * D + rk[None, :], mask=rm[:, None] < M, other=0.0).to(tl.float32)
                squares += tl.sum(xf * xf, 1)
                a = (xf * tl.load(wn_ptr + rk).to(tl.float32)[None, :]).to(tl.bfloat16)
                acc_g = tl.dot(a, tl.trans(tl.load(wgu_ptr + cols[:, None] * D + rk[None, :])), acc_g)
                acc_u = tl.dot(a, tl.trans(tl.load(wgu_ptr + (cols + I)[:, None] * D + rk[None, :])), acc_u)
            scale = tl.rsqrt(squares / D + eps)[:, None]
            g = (acc_g * scale).to(tl.bfloat16).to(tl.float32)
            u = (acc_u * scale).to(tl.bfloat16).to(tl.float32)
            tl.store(act_ptr + rm[:, None] * I + cols[None, :], (g * tl.sigmoid(g) * u).to(tl.bfloat16),
                     mask=rm[:, None] < M)
        _grid_barrier(bar_ptr, progs)
        # phase 2: down's partial sums [S2, M, D] in (row tile, BN2 columns, K split) units
        NT: tl.constexpr = D // BN2
        for w in range(pid, NT * S2 * MT * ((PHASES // 2) % 2), progs):
            rm = (w % MT) * BM + tl.arange(0, BM)
            cols = ((w // MT) % NT) * BN2 + tl.arange(0, BN2)
            s = w // (MT * NT)
            acc = tl.zeros((BM, BN2), tl.float32)
            for k in range(s * (I // S2), (s + 1) * (I // S2), BK2):
                rk = k + tl.arange(0, BK2)
                a = tl.load(act_ptr + rm[:, None] * I + rk[None, :], mask=rm[:, None] < M, other=0.0,
                            cache_modifier=".cg")  # (written by other SMs: not from this SM's L1)
                acc = tl.dot(a, tl.trans(tl.load(wd_ptr + cols[:, None] * I + rk[None, :])), acc)
            tl.store(part_ptr + s * M * D + rm[:, None] * D + cols[None, :], acc, mask=rm[:, None] < M)
        _grid_barrier(bar_ptr, 2 * progs)
        # phase 3: the partials summed in split order (deterministic), then the residual
        idx = pid * BLK + tl.arange(0, BLK)
        live = (idx < M * D) & (PHASES >= 4)
        total = tl.zeros((BLK,), tl.float32)
        for s in range(S2):
            total += tl.load(part_ptr + s * M * D + idx, mask=live, other=0.0, cache_modifier=".cg")
        y = total.to(tl.bfloat16).to(tl.float32) + tl.load(x_ptr + idx, mask=live, other=0.0).to(tl.float32)
        tl.store(out_ptr + idx, y.to(tl.bfloat16), mask=live)
        # the last program out resets the barrier for the next launch (every program has passed both)
        tl.debug_barrier()
        if tl.atomic_add(bar_ptr + 1, 1, sem="acq_rel", scope="gpu") == progs - 1:
            tl.atomic_xchg(bar_ptr, 0)
            tl.atomic_xchg(bar_ptr + 1, 0)

    @triton.jit
    def _prefetch_l2(ptrs):  # one `prefetch.global.L2` per address (its result unused)
        return tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                                         dtype=tl.int32, is_pure=False, pack=1)

    @triton.jit
    def _chain_gemm(a_ptr, w_ptr, b_ptr, c_ptr, M, N, K, sam, swn, scm, scs, HAS_BIAS: tl.constexpr,
                    GLU: tl.constexpr, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    PDL: tl.constexpr, PRE: tl.constexpr):
        """gated_gemm.gemm_kernel with K split in SPLIT parts (fp32 partial products [SPLIT, M, N]) and PDL: the
        weights fetched before the wait (PRE 1: the program's weights into L2; 2: its first tile into registers),
        the rows after it; the successor let in after the K loop."""
        pid_n, pid_m, pid_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        part = K // SPLIT
        wp = w_ptr + rn[:, None] * swn + rk[None, :] + pid_s * part
        ap = a_ptr + rm[:, None] * sam + rk[None, :] + pid_s * part
        acc = tl.zeros((BM, BN), tl.float32)
        acc2 = tl.zeros((BM, BN), tl.float32)
        start = 0
        if PRE == 1:  # one prefetch per 128-byte line of the program's weights
            lines = w_ptr + rn[:, None] * swn + pid_s * part + (tl.arange(0, BK // 64) * 64)[None, :]
            for k in range(0, part, BK):
                _prefetch_l2(lines + k)
                if GLU:
                    _prefetch_l2(lines + N * swn + k)
        if PRE == 2:
            w0 = tl.load(wp)
            w1 = tl.load(wp + N * swn) if GLU else w0
        if PDL:
            tl.extra.cuda.gdc_wait()
        if PRE == 2:  # the first step on the tile loaded before the wait
            a = tl.load(ap, mask=rm[:, None] < M, other=0.0)
            acc = tl.dot(a, tl.trans(w0), acc)
            if GLU:
                acc2 = tl.dot(a, tl.trans(w1), acc2)
            start = BK
        for k in range(start, part, BK):
            a = tl.load(ap + k, mask=rm[:, None] < M, other=0.0)
            acc = tl.dot(a, tl.trans(tl.load(wp + k)), acc)
            if GLU:
                acc2 = tl.dot(a, tl.trans(tl.load(wp + N * swn + k)), acc2)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn)[None, :].to(tl.float32)
        if GLU:
            g = acc.to(c_ptr.dtype.element_ty).to(tl.float32)
            acc = g * tl.sigmoid(g) * acc2.to(c_ptr.dtype.element_ty).to(tl.float32)
        tl.store(c_ptr + pid_s * scs + rm[:, None] * scm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=rm[:, None] < M)

    @triton.jit
    def _chain_norm(x_ptr, parts_ptr, add_ptr, w_ptr, xo_ptr, h_ptr, M, D: tl.constexpr, BD: tl.constexpr,
                    P: tl.constexpr, PDL: tl.constexpr):
        """A row's x_out = x + (its P fp32 parts summed and rounded, or add) and h = RMSNorm(x_out) * w, rounded as
        the engine's compiled norm rounds them."""
        row = tl.program_id(0)
        cols = tl.arange(0, BD)
        live = cols < D
        w = tl.load(w_ptr + cols, mask=live, other=0.0)
        if PDL:
            tl.extra.cuda.gdc_wait()
        x = tl.load(x_ptr + row * D + cols, mask=live, other=0.0).to(tl.float32)
        if P > 0:
            t = tl.zeros((BD,), tl.float32)
            for p in range(P):
                t += tl.load(parts_ptr + p * M * D + row * D + cols, mask=live, other=0.0)
            t = t.to(tl.bfloat16).to(tl.float32)
        else:
            t = tl.load(add_ptr + row * D + cols, mask=live, other=0.0).to(tl.float32)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        xo = (x + t).to(tl.bfloat16)
        tl.store(xo_ptr + row * D + cols, xo, mask=live)
        xf = xo.to(tl.float32)
        r = tl.rsqrt(tl.sum(xf * xf, 0) / D + 1e-6)
        tl.store(h_ptr + row * D + cols, ((xf * r).to(tl.bfloat16) * w).to(tl.bfloat16), mask=live)


if triton is not None:
    @triton.jit
    def _tma_gemm(w_desc, x_desc, o_desc, b_ptr, K, MROWS, NH, HAS_BIAS: tl.constexpr, GLU: tl.constexpr,
                  SPLIT: tl.constexpr, BM: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
        """o [M, N] = x [M, K] @ w[:N]^T (+ bias); GLU: silu(x @ w[:N]^T) * (x @ w[NH:NH + N]^T), each product
        rounded first; SPLIT > 1: o [SPLIT M, N] fp32, part s over K's s-th part. Program (n, s, t): BM of N's columns
        (the weight's rows: the dot's M side), BT of the rows (its N side), both read by TMA."""
        pid_n, pid_s, pid_t = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        off_n, off_t = pid_n * BM, pid_t * BT
        ks = K // SPLIT
        acc = tl.zeros((BM, BT), tl.float32)
        acc2 = tl.zeros((BM, BT), tl.float32)
        for k in range(pid_s * ks, pid_s * ks + ks, BK):
            x = x_desc.load([off_t, k])  # [BT, BK]
            acc = tl.dot(w_desc.load([off_n, k]), x.T, acc)  # [BM, BT]
            if GLU:
                acc2 = tl.dot(w_desc.load([off_n + NH, k]), x.T, acc2)
        if HAS_BIAS:
            acc += tl.load(b_ptr + off_n + tl.arange(0, BM))[:, None].to(tl.float32)
        if GLU:
            g = acc.to(tl.bfloat16).to(tl.float32)
            acc = g * tl.sigmoid(g) * acc2.to(tl.bfloat16).to(tl.float32)
        o_desc.store([pid_s * MROWS + off_t, off_n], tl.trans(acc).to(o_desc.dtype))

    @triton.jit
    def _read(w_ptr, out_ptr, N, BLOCK: tl.constexpr):  # the weight's elements summed: reading it, and nothing else
        pid = tl.program_id(0)
        acc = tl.zeros((BLOCK,), tl.float32)
        for i in range(pid * BLOCK, N, tl.num_programs(0) * BLOCK):
            acc += tl.load(w_ptr + i + tl.arange(0, BLOCK), mask=i + tl.arange(0, BLOCK) < N, other=0.0).to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(acc))

    @triton.jit
    def _fence_acquire(x):  # every thread: its later reads ordered after the flag it saw (fence.acq_rel at GPU scope)
        return tl.inline_asm_elementwise("fence.acq_rel.gpu; mov.u32 $0, $1;", "=r,r", [x], dtype=tl.int32,
                                         is_pure=False, pack=1)

    @triton.jit
    def _flow_task(t, wgu_desc, h_desc, wd_desc, act_ptr, parts_ptr, sync_ptr, M, I: tl.constexpr, D: tl.constexpr,
                   NA: tl.constexpr, P: tl.constexpr, MT: tl.constexpr, BM: tl.constexpr, BMD: tl.constexpr,
                   BT: tl.constexpr, BK: tl.constexpr):
        """Task t of `_flow_mlp`'s schedule."""
        TPP: tl.constexpr = NA // P  # gate/up tiles per part
        NN: tl.constexpr = D // BMD  # down's row tiles
        KP: tl.constexpr = I // P
        r = t % MT
        rt = r * BT + tl.arange(0, BT)
        if t < NA * MT:  # a gate/up tile: act[block r, c BM : (c + 1) BM]
            c = t // MT
            acc = tl.zeros((BM, BT), tl.float32)
            acc2 = tl.zeros((BM, BT), tl.float32)
            for k in range(0, D, BK):
                x = h_desc.load([r * BT, k])  # [BT, BK]
                acc = tl.dot(wgu_desc.load([c * BM, k]), x.T, acc)
                acc2 = tl.dot(wgu_desc.load([I + c * BM, k]), x.T, acc2)
            g = acc.to(tl.bfloat16).to(tl.float32)
            a = (g * tl.sigmoid(g) * acc2.to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16)  # [BM, BT]
            cols = c * BM + tl.arange(0, BM)
            tl.store(act_ptr + rt[None, :] * I + cols[:, None], a, mask=rt[None, :] < M)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr + (c // TPP) * MT + r, 1, sem="release", scope="gpu")
        else:  # a down task: parts[p, block r, n BMD : (n + 1) BMD] over act's p-th part of columns
            j = t // MT - NA
            p = j // NN
            n = j % NN
            while tl.load(sync_ptr + p * MT + r, volatile=True) < TPP:
                pass
            _fence_acquire(p)
            accd = tl.zeros((BMD, BT), tl.float32)
            for k0 in range(0, KP, BK):
                k = tl.multiple_of(p * KP + k0, BK)
                ad = tl.load(act_ptr + rt[:, None] * I + k + tl.arange(0, BK)[None, :], mask=rt[:, None] < M,
                             other=0.0)  # [BT, BK] (no L1 line of it read before its part was written)
                accd = tl.dot(wd_desc.load([n * BMD, k]), ad.T, accd)
            rows = n * BMD + tl.arange(0, BMD)
            tl.store(parts_ptr + p * M * D + rt[None, :] * D + rows[:, None], accd, mask=rt[None, :] < M)

    @triton.jit
    def _flow_mlp(wgu_desc, h_desc, wd_desc, act_ptr, parts_ptr, sync_ptr, M, I: tl.constexpr, D: tl.constexpr,
                  NA: tl.constexpr, P: tl.constexpr, MT: tl.constexpr, BM: tl.constexpr, BMD: tl.constexpr,
                  BT: tl.constexpr, BK: tl.constexpr, SCHEDULE: tl.constexpr, DOWN: tl.constexpr):
        """parts [P, M, D] fp32 = down's K-split partial products of silu(h Wg^T) * (h Wu^T), in ONE launch of a
        dataflow schedule over MT blocks of BT rows: tasks 0..NA MT - 1 are gate/up tiles (BM of gate's and up's
        rows, one block of rows; a tile's blocks next to each other, so that the second reads the weight from L2),
        then down tasks (BMD of down's rows, one of P parts of its input dim, one block of rows). A down task waits
        only for the NA / P gate/up tiles that write its inputs (a counter per part and block of rows), so the down
        weights stream while the last gate/up tiles run. Tasks go to programs in index order (SCHEDULE 0: program
        pid takes task pid alone, relying on the GPU starting programs in index order, as it does, where they are
        not all resident at once; 1: pid, pid + G, ..., all G resident; 2: from a queue), so a task waits only on
        tasks already taken: no deadlock. sync_ptr [P MT + 2] int32: the counters, the queue,
        the programs out (the last one out zeroes them for the next launch). DOWN False: the gate/up tiles alone
        (for their time)."""
        pid, progs = tl.program_id(0), tl.num_programs(0)
        Q: tl.constexpr = P * MT  # the queue's index in sync_ptr
        TASKS: tl.constexpr = (NA + (D // BMD) * P * DOWN) * MT
        if SCHEDULE == 0:
            if pid < TASKS:
                _flow_task(pid, wgu_desc, h_desc, wd_desc, act_ptr, parts_ptr, sync_ptr, M, I, D, NA, P, MT, BM, BMD,
                           BT, BK)
        else:
            if SCHEDULE == 2:
                t = tl.atomic_add(sync_ptr + Q, 1)
            else:
                t = pid
            while t < TASKS:
                _flow_task(t, wgu_desc, h_desc, wd_desc, act_ptr, parts_ptr, sync_ptr, M, I, D, NA, P, MT, BM, BMD,
                           BT, BK)
                if SCHEDULE == 2:
                    t = tl.atomic_add(sync_ptr + Q, 1)
                else:
                    t += progs
        tl.debug_barrier()
        if tl.atomic_add(sync_ptr + Q + 1, 1, sem="acq_rel", scope="gpu") == progs - 1:
            for q in range(Q + 2):
                tl.atomic_xchg(sync_ptr + q, 0)


def runs(call) -> bool:
    """Whether call() runs (and ran): False where its tiling does not fit the SM's shared memory."""
    try:
        call()
        torch.cuda.synchronize()
    except Exception as e:
        if type(e).__name__ != "OutOfResources":
            raise
        return False
    return True


class TMAGemm:
    """`_tma_gemm`'s launch for x [M, K] into out ([M, N], or [SPLIT M, N] fp32 parts), one descriptor per weight."""

    def __init__(self, x, b, out, glu, split, bm, bt, bk, stages, warps):
        m, k = x.shape
        self.xd, self.od = TensorDescriptor.from_tensor(x, [bt, bk]), TensorDescriptor.from_tensor(out, [bt, bm])
        n = out.shape[1]
        self.args = (b, k, m, n if glu else 0)
        self.grid = (n // bm, split, triton.cdiv(m, bt))
        self.meta = dict(HAS_BIAS=b is not None, GLU=glu, SPLIT=split, BM=bm, BT=bt, BK=bk, num_warps=warps,
                         num_stages=stages)
        self.block = [bm, bk]

    def desc(self, w):
        return TensorDescriptor.from_tensor(w, self.block)

    def __call__(self, wd):
        b, k, m, nh = self.args
        _tma_gemm[self.grid](wd, self.xd, self.od, wd.base if b is None else b, k, m, nh, **self.meta)


def engine_gated(x, w, glu_c):
    """The engine's gate/up and silu x up of the rows x [m, d] under the joined weight w: gated_gemm's kernels at up to
    max_rows rows (where they take w), else the GEMM and glu_c, the compiled silu x up."""
    if gated_gemm.fits(w) and x.shape[0] <= gated_gemm.max_rows(w):
        return gated_gemm.gated_up(x, w)
    return glu_c(F.linear(x, w))


def layer_projections(arch, rows: list[int]):
    """For each row count m and each projection of a layer (not the LM head): (m, name, n, k, its weights [n, k],
    one per layer or more (weight_copies), its bias or None, the rows [m, k])."""
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    for m in rows:
        for what, (n, k, bias) in projections(arch).items():
            if what == "LM head":
                continue
            ws = [torch.randn(n, k, device=DEVICE, dtype=dtype) / k ** 0.5
                  for _ in range(weight_copies(n * k * 2, arch.layers))]
            b = torch.randn(n, device=DEVICE, dtype=dtype) if bias else None
            yield m, what, n, k, ws, b, torch.randn(m, k, device=DEVICE, dtype=dtype)


def tma_rows(name: str, arch, rows: list[int]) -> list[list]:
    glu_c = compiled(gated(F.silu))  # the engine's silu x up
    out = []
    for m, what, n, k, ws, b, x in layer_projections(arch, rows):
        glu, down = what == "gate/up", what == "down"
        dtype = x.dtype

        def engine(w, x=x, b=b, glu=glu, down=down):  # (this iteration's) the engine's path
            if glu:
                return engine_gated(x, w, glu_c)
            if down and DEVICE == "cuda":
                return partial_down(x[None], w, PARTS)
            return F.linear(x, w, b)

        base = graph_us([partial(engine, w) for w in ws])
        mb = n * k * 2 / 1e6
        label = "gate/up, silu x up" if glu else f"down in {PARTS} fp32 parts" if down and GPU else what
        row = [name, m, label, f"{n} x {k} ({mb:.1f} MB)", f"{base:.2f} us ({mb / base:.2f} TB/s)"]
        if not GPU:
            out.append(row + ["needs a GPU (Triton)", "", ""])
            continue
        sums = torch.empty(4096, device=DEVICE)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        read = min(graph_us([partial(_read[(sms * g,)], w, sums, w.numel(), BLOCK=4096) for w in ws])
                   for g in (4, 8, 16))
        want = engine(ws[0]).float()
        want = want.sum(0)[0] if down else want
        nout = n // 2 if glu else n
        best = (float("inf"), "")
        for bm, bt, bk, stages, split in itertools.product(
                [64, 128], sorted({min(256, max(16, triton.next_power_of_2(m))), max(16, m // 2)}), [64, 128],
                [3, 4, 6], [2, 4, 8] if down else [1]):
            warps = 4 if bm * bt * (2 if glu else 1) <= 128 * 128 else 8
            smem = stages * (bm * bk * (2 if glu else 1) + bt * bk) * 2 + bt * bm * (4 if split > 1 else 2)
            if nout % bm or (k // split) % bk or bm * bt * (2 if glu else 1) > 256 * 128 or smem > 225 * 1024:
                continue
            y = torch.empty(split * m, nout, device=DEVICE, dtype=torch.float32 if split > 1 else dtype)
            gemm = TMAGemm(x, b, y, glu, split, bm, bt, bk, stages, warps)
            descs = [gemm.desc(w) for w in ws]
            if not runs(partial(gemm, descs[0])):
                continue
            got = y.float().view(split, m, nout).sum(0)
            assert (got - want).abs().max() <= 0.02 * want.abs().max() + 0.02, (what, m, bm, bt, bk, split)
            us = graph_us([partial(gemm, d) for d in descs])
            best = min(best, (us, f"{bm}x{bt}x{bk}x{stages}" + (f", {split} parts" if split > 1 else "")))
        out.append(row + [f"{read:.2f} us ({mb / read:.2f} TB/s)", f"{best[0]:.2f} us ({base / best[0]:.2f}x)",
                          best[1]])
    return out


def triton_gemm(x, w, b, out, glu: bool, tiling) -> None:
    bm, bn, bk, stages = tiling
    gated_gemm.gemm_kernel[(out.shape[1] // bn, triton.cdiv(x.shape[0], bm))](
        x, w, b if b is not None else x, out, x.shape[0], out.shape[1], x.shape[1], x.stride(0), w.stride(0),
        out.stride(0), HAS_BIAS=b is not None, GLU=glu, BM=bm, BN=bn, BK=bk, num_warps=4, num_stages=stages)


class MLPBlock:
    """The persistent MLP kernel for m rows of a (d, i) MLP: its buffers and launch."""

    def __init__(self, m: int, d: int, i: int, bn1=64, bk1=64, bn2=64, bk2=64, warps=4, stages=3, phases=7):
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.bm = min(128, max(16, triton.next_power_of_2(m)))
        self.mt = triton.cdiv(m, self.bm)
        units, tiles = i // bk2, (d // bn2) * self.mt
        assert i % bn1 == 0 and d % bk1 == 0 and d % bn2 == 0 and i % bk2 == 0, "tiles that divide the MLP's shapes"
        s2 = max(1, min(units, sms // tiles))  # down's K splits: at most one unit per SM, each a divisor of its blocks
        while units % s2:
            s2 -= 1
        self.m, self.d, self.i, self.progs, self.s2 = m, d, i, sms, s2
        self.meta = dict(BM=self.bm, MT=self.mt, BN1=bn1, BK1=bk1, BN2=bn2, BK2=bk2, S2=s2,
                         BLK=triton.next_power_of_2(triton.cdiv(m * d, sms)), PHASES=phases, num_warps=warps,
                         num_stages=stages)
        self.act = torch.empty(m, i, device="cuda", dtype=torch.bfloat16)
        self.part = torch.empty(s2, m, d, device="cuda", dtype=torch.float32)
        self.bar = torch.zeros(2, device="cuda", dtype=torch.int32)
        self.label = f"BN {bn1}/{bn2}, BK {bk1}/{bk2}, down K split {s2}, {warps} warps, {stages} stages"

    def __call__(self, x, wn, wgu, wd, out):
        _mlp_block[(self.progs,)](x, wn, wgu, wd, self.act, self.part, out, self.bar, self.m, 1e-6, D=self.d,
                                  I=self.i, **self.meta)


def rms_norm(x, w):  # transformers' Qwen2RMSNorm, as the engine's compiled step runs it
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def compiled(fn):
    return torch.compile(fn) if DEVICE == "cuda" else fn


def gemm_rows(name: str, arch, rows: list[int]) -> list[list]:
    glu_c = compiled(gated(F.silu))  # the engine's silu x up
    out = []
    for m, what, n, k, ws, b, x in layer_projections(arch, rows):
        glu = what == "gate/up"
        dtype = x.dtype

        def engine(w, x=x, b=b, glu=glu):  # (this iteration's)
            return engine_gated(x, w, glu_c) if glu else F.linear(x, w, b)

        base = graph_us([partial(engine, w) for w in ws])
        cells = [f"{base:.2f} us"]
        if GPU:
            want = engine(ws[0]).float()
            y = torch.empty(m, n // 2 if glu else n, device=DEVICE, dtype=dtype)
            best = (float("inf"), None)
            for tiling in itertools.product([16] if m <= 16 else [64], [32, 64, 128], [64, 128], [3, 4, 5]):
                if y.shape[1] % tiling[1] or k % tiling[2]:
                    continue
                if not runs(partial(triton_gemm, x, ws[0], b, y, glu, tiling)):
                    continue
                assert (y.float() - want).abs().max() <= 0.02 * want.abs().max() + 0.02, (what, m, tiling)
                us = graph_us([partial(triton_gemm, x, w, b, y, glu, tiling) for w in ws])
                best = min(best, (us, tiling))
            cells += [f"{best[0]:.2f} us ({base / best[0]:.2f}x)", "x".join(map(str, best[1]))]
        else:
            cells += ["needs a GPU (Triton)", ""]
        out.append([name, m, "gate/up, silu x up" if glu else what, f"{n} x {k}", *cells])
    return out


def mlp_rows(name: str, arch, rows: list[int]) -> list[list]:
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    d, i = arch.hidden, arch.intermediate
    norm_c, glu_c, add_c = compiled(rms_norm), compiled(gated(F.silu)), compiled(lambda a, b: a + b)
    ws = [(1 + 0.1 * torch.randn(d, device=DEVICE, dtype=dtype), torch.randn(2 * i, d, device=DEVICE, dtype=dtype) / d ** 0.5,
           torch.randn(d, i, device=DEVICE, dtype=dtype) / i ** 0.5) for _ in range(arch.layers)]

    def engine(x, w):  # the engine's five kernels (its add is the next layer's norm kernel's: the same count)
        wn, wgu, wd = w
        return add_c(x, F.linear(glu_c(F.linear(norm_c(x, wn), wgu)), wd))

    def exact(x, w):  # fp32 math on the same bf16 inputs, after the norm (rounded as transformers rounds it)
        _, wgu, wd = (t.float() for t in w)
        h = rms_norm(x, w[0]).float() @ wgu.T
        return x.float() + gated(F.silu)(h) @ wd.T

    out = []
    for m in rows:
        x = torch.randn(m, d, device=DEVICE, dtype=dtype)
        want = exact(x, ws[0])
        base = graph_us([partial(engine, x, w) for w in ws])
        err = (engine(x, ws[0]).float() - want).abs().max().item()
        out.append([name, m, "the engine's five kernels", f"{base:.2f} us", "1.00x", f"{err:.4f}"])
        if not GPU:
            out.append([name, m, "one persistent kernel", "needs a GPU (Triton)", "", ""])
            continue
        y = torch.empty_like(x)
        for label, kw in (("one persistent kernel", {}), ("the same, 8 warps", {"warps": 8}),
                          ("the same, 32-column gate/up tiles", {"bn1": 32}), ("its two barriers alone", {"phases": 0}),
                          ("its gate/up phase alone (+ barriers)", {"phases": 1})):
            block = MLPBlock(m, d, i, **kw)
            block(x, *ws[0], y)
            e = None if "phases" in kw else (y.float() - want).abs().max().item()  # (a part alone: no output)
            us = graph_us([partial(block, x, *w, y) for w in ws])
            out.append([name, m, f"{label} ({block.label})", f"{us:.2f} us", f"{base / us:.2f}x",
                        "" if e is None else f"{e:.4f}"])
    return out


class FlowMLP:
    """`_flow_mlp`'s launch for m rows of a (d, i) MLP into parts [PARTS, m, d]: its buffers and descriptors."""

    def __init__(self, h, parts, i: int, progs: int, schedule: int, bt=128, bm=64, bmd=64, bk=64, stages=3,
                 warps=4, down=True):
        m, d = h.shape
        bt = min(bt, max(32, triton.next_power_of_2(m)))
        mt = triton.cdiv(m, bt)
        assert i % (PARTS * bm) == 0 and d % bmd == 0 and d % bk == 0 and (i // PARTS) % bk == 0, "whole tiles"
        self.act = torch.empty(m, i, device="cuda", dtype=torch.bfloat16)
        self.sync = torch.zeros(PARTS * mt + 2, device="cuda", dtype=torch.int32)
        self.hd = TensorDescriptor.from_tensor(h, [bt, bk])
        self.parts, self.m = parts, m
        self.progs = progs or (i // bm + d // bmd * PARTS * down) * mt  # (0: a program per task)
        self.meta = dict(I=i, D=d, NA=i // bm, P=PARTS, MT=mt, BM=bm, BMD=bmd, BT=bt, BK=bk, SCHEDULE=schedule,
                         DOWN=down, num_warps=warps, num_stages=stages)
        self.blocks = ([bm, bk], [bmd, bk])
        how = ("a program per task", "in turn", "from a queue")[schedule]
        self.label = (f"{self.progs} programs, {how}, tiles {bm}/{bmd}x{bt}x{bk}, "
                      f"{stages} stages, {warps} warps" + ("" if down else "; its gate/up tiles alone"))

    def descs(self, wgu, wd):
        return TensorDescriptor.from_tensor(wgu, self.blocks[0]), TensorDescriptor.from_tensor(wd, self.blocks[1])

    def __call__(self, descs):
        _flow_mlp[(self.progs,)](descs[0], self.hd, descs[1], self.act, self.parts, self.sync, self.m, **self.meta)


def mlp_weights(arch, dtype) -> list[tuple]:
    """(gate/up joined [2 I, d], down [d, I]) random weights of an MLP, one pair per layer or more (weight_copies)."""
    d, i = arch.hidden, arch.intermediate
    return [(torch.randn(2 * i, d, device=DEVICE, dtype=dtype) / d ** 0.5,
             torch.randn(d, i, device=DEVICE, dtype=dtype) / i ** 0.5)
            for _ in range(weight_copies(3 * d * i * 2, arch.layers))]


def engine_mlp(h, w, glu_c, parts: int | None = None):
    """The engine's MLP from the normed rows h under w = (gate/up, down): engine_gated, then down's fp32 K-split
    parts [P, m, d] (`parts`, default PARTS, as the engine's decode) on a GPU; on a CPU down as one GEMM."""
    a = engine_gated(h, w[0], glu_c)
    return partial_down(a[None], w[1], parts or PARTS)[:, 0] if DEVICE == "cuda" else F.linear(a, w[1])


def flow_rows(name: str, arch, rows: list[int]) -> list[list]:
    """gate/up, silu x up and down's fp32 parts from the normed rows: the engine's three kernels (cuBLAS, inductor's
    silu x up, the batched parts GEMM; gated_gemm's kernel where the engine takes it) against one dataflow kernel."""
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    d, i = arch.hidden, arch.intermediate
    glu_c = compiled(gated(F.silu))
    ws = mlp_weights(arch, dtype)
    engine = partial(engine_mlp, glu_c=glu_c)
    out = []
    for m in rows:
        h = torch.randn(m, d, device=DEVICE, dtype=dtype)
        want = engine(h, ws[0]).float()
        want = want.sum(0) if want.dim() == 3 else want
        base = graph_us([partial(engine, h, w) for w in ws])
        out.append([name, m, "the engine's (gate/up, silu x up, down's parts)", f"{base:.2f} us", "1.00x", ""])
        if not GPU:
            out.append([name, m, "one dataflow kernel", "needs a GPU (Triton)", "", ""])
            continue
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        parts = torch.empty(PARTS, m, d, device="cuda", dtype=torch.float32)
        act = glu_c(F.linear(h, ws[0][0]))
        many = max(sms, i // 64)
        for progs, schedule, bt, stages, down in ((many, 2, 128, 4, True), (0, 0, 128, 4, True),
                                                  (0, 0, 128, 3, True), (0, 0, 128, 4, False),
                                                  (0, 0, 64, 3, True), (0, 0, 64, 3, False)):
            flow = FlowMLP(h, parts, i, progs, schedule, bt=bt, stages=stages, down=down)
            descs = [flow.descs(*w) for w in ws]
            if not runs(partial(flow, descs[0])):
                continue
            errs = [(flow.act.float() - act.float()).abs().max().item(), (parts.sum(0) - want).abs().max().item()]
            us = graph_us([partial(flow, dd) for dd in descs])
            flow(descs[0])  # (after the replays: the counters reset each launch)
            torch.cuda.synchronize()
            errs.append((parts.sum(0) - want).abs().max().item())
            out.append([name, m, f"one dataflow kernel ({flow.label})", f"{us:.2f} us", f"{base / us:.2f}x",
                        f"silu x up {errs[0]:.2e}" + (f", sum {errs[1]:.2e} / {errs[2]:.2e} of "
                                                      f"{want.abs().max().item():.2f}" if down else "")])
    return out


PARTS = 4  # down's K-split parts, as the engine's decode (decoder.down_parts)


def chain_weights(arch, dtype):
    """Each layer's (norm, q/k/v, its bias, o, norm, gate/up joined, down) weights."""
    d, i, (qkv, _, _) = arch.hidden, arch.intermediate, projections(arch)["q/k/v"]

    def r(*shape, scale=1.0):
        return torch.randn(*shape, device=DEVICE, dtype=dtype) * scale
    return [(1 + 0.1 * r(d), r(qkv, d, scale=d ** -0.5), r(qkv, scale=0.1), r(d, d, scale=d ** -0.5), 1 + 0.1 * r(d),
             r(2 * i, d, scale=d ** -0.5), r(d, i, scale=i ** -0.5)) for _ in range(arch.layers)]


def engine_layer(x, out, w):
    """The engine's decode layer but attention (o reads q/k/v's first d columns): the residual x [M, d], the last
    layer's down parts out [P, M, d] -> this layer's."""
    n1, wqkv, bqkv, wo, n2, wgu, wd = w
    x = x + summed(out, x)
    y = F.linear(F.linear(rms_norm(x, n1), wqkv, bqkv)[:, :x.shape[1]], wo)
    x = x + y
    a = gated(F.silu)(F.linear(rms_norm(x, n2), wgu))
    return x, partial_down(a[:, None], wd, PARTS)[:, :, 0]


class TritonChain:
    """The same layer as six Triton kernels (_chain_norm, _chain_gemm), PDL or not, `pre` as _chain_gemm's PRE."""

    def __init__(self, arch, m, tilings, pdl, pre):
        self.d, self.i, (self.qkv, _, _) = arch.hidden, arch.intermediate, projections(arch)["q/k/v"]
        self.m, self.tilings, self.pdl, self.pre = m, tilings, pdl, pre
        buf = partial(torch.empty, device=DEVICE, dtype=torch.bfloat16)
        self.h, self.y1, self.y2, self.a = buf(m, self.d), buf(m, self.qkv), buf(m, self.d), buf(m, self.i)

    def gemm(self, name, a, w, b, c, n, k, glu=False, split=1):
        bm, bn, bk, stages = self.tilings[name]
        _chain_gemm[(n // bn, triton.cdiv(self.m, bm), split)](
            a, w, a if b is None else b, c, self.m, n, k, a.stride(0), w.stride(0), c.stride(-2), self.m * n,
            HAS_BIAS=b is not None, GLU=glu, SPLIT=split, BM=bm, BN=bn, BK=bk, PDL=self.pdl, PRE=self.pre,
            num_warps=4, num_stages=stages, launch_pdl=self.pdl)

    def norm(self, x, parts, add, w, xo):
        _chain_norm[(self.m,)](x, x if parts is None else parts, add, w, xo, self.h, self.m, D=self.d, BD=triton.next_power_of_2(self.d),
                               P=0 if parts is None else parts.shape[0], PDL=self.pdl, num_warps=4,
                               launch_pdl=self.pdl)

    def __call__(self, x, parts, w, x_out, parts_out):
        n1, wqkv, bqkv, wo, n2, wgu, wd = w
        self.norm(x, parts, x, n1, x_out)
        self.gemm("q/k/v", self.h, wqkv, bqkv, self.y1, self.qkv, self.d)
        self.gemm("o", self.y1, wo, None, self.y2, self.d, self.d)
        self.norm(x_out, None, self.y2, n2, x_out)
        self.gemm("gate/up", self.h, wgu, None, self.a, self.i, self.d, glu=True)
        self.gemm("down", self.a, wd, None, parts_out, self.d, self.i, split=PARTS)


def chain_tilings(arch, m, ws) -> dict:
    """Each GEMM's best tiling alone (no PDL), every layer on its own weights."""
    d, i, (qkv, _, _) = arch.hidden, arch.intermediate, projections(arch)["q/k/v"]
    best = {}
    for name, (n, k, wi, split) in {"q/k/v": (qkv, d, 1, 1), "o": (d, d, 3, 1), "gate/up": (i, d, 5, 1),
                                    "down": (d, i, 6, PARTS)}.items():
        a = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
        c = torch.empty(split, m, n, device=DEVICE, dtype=torch.float32 if split > 1 else torch.bfloat16)
        found = (float("inf"), None)
        for t in itertools.product([16] if m <= 16 else [32, 64], [32, 64, 128], [64, 128], [3, 4]):
            if n % t[1] or (k // split) % t[2]:
                continue
            chain = TritonChain(arch, m, {name: t}, False, 0)
            calls = [partial(chain.gemm, name, a, w[wi], w[2] if name == "q/k/v" else None, c, n, k,
                             glu=name == "gate/up", split=split) for w in ws]
            if not runs(calls[0]):
                continue
            found = min(found, (graph_us(calls), t))
        best[name] = found[1]
    return best


def chain_rows(name: str, arch, rows: list[int]) -> list[list]:
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    ws = chain_weights(arch, dtype)
    layer = compiled(engine_layer)
    out = []
    for m in rows:
        x0 = torch.randn(m, arch.hidden, device=DEVICE, dtype=dtype)
        p0 = 0.1 * torch.randn(PARTS, m, arch.hidden, device=DEVICE, dtype=torch.float32)

        def engine(x0=x0, p0=p0):  # the whole chain, each layer's output the next one's input
            x, p = x0, p0
            for w in ws:
                x, p = layer(x, p, w)
            return x + summed(p, x)
        want = engine()
        base = graph_us([engine]) / len(ws)
        out.append([name, m, "the engine's (compiled: cuBLAS, inductor's kernels)", f"{base:.2f} us", "1.00x", ""])
        if not GPU:
            out.append([name, m, "six Triton kernels", "needs a GPU (Triton)", "", ""])
            continue
        tilings = chain_tilings(arch, m, ws)
        xs = [x0] + [torch.empty_like(x0) for _ in ws]
        ps = [p0] + [torch.empty_like(p0) for _ in ws]
        for label, pdl, pre in (("six Triton kernels", False, 0), ("the same, PDL", True, 0),
                                ("PDL, weights prefetched into L2 before the wait", True, 1),
                                ("PDL, first weight tile loaded before the wait", True, 2)):
            chain = TritonChain(arch, m, tilings, pdl, pre)
            calls = [partial(chain, xs[j], ps[j], w, xs[j + 1], ps[j + 1]) for j, w in enumerate(ws)]
            for c in calls:
                c()
            err = (xs[-1] + summed(ps[-1], xs[-1]) - want).float().abs().max().item()
            us = graph_us(calls)
            out.append([name, m, label, f"{us:.2f} us", f"{base / us:.2f}x", f"{err:.3f} of {want.abs().max():.1f}"])
        out[-4][2] += " (tilings " + ", ".join(f"{k} {'x'.join(map(str, t))}" for k, t in tilings.items()) + ")"
    return out


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--rows", default="16,128,256", help="decode batch rows")
    ap.add_argument("--sections", default="gemm,mlp")
    args = ap.parse_args()
    archs, rows, sections = args.archs.split(","), [int(r) for r in args.rows.split(",")], args.sections.split(",")
    print(f"device: {device_name()}, torch {torch.__version__}" + (f", Triton {triton.__version__}" if triton else ""))
    if "gemm" in sections:
        table("A layer's projections: the engine's (cuBLAS; gate/up at few rows gated_gemm's kernels) against one "
              "Triton GEMM, per call",
              ["arch", "rows", "projection", "weight", "engine", "Triton, best tiling", "tiling BMxBNxBKxstages"],
              [r for a in archs for r in gemm_rows(a, ARCHS[a], rows)])
    if "chain" in sections:
        table("A decode layer but attention, six kernels: the engine's against Triton's with and without PDL, per "
              "layer",
              ["arch", "rows", "kernels", "time", "engine / this", "last layer's output: largest difference from the "
               "engine's"], [r for a in archs for r in chain_rows(a, ARCHS[a], rows)])
    if "tma" in sections:
        table("A layer's projections: the engine's against a Triton GEMM read by TMA, the weight as the tensor cores' "
              "M side, per call; and reading the weight alone",
              ["arch", "rows", "projection", "weight", "engine", "read alone", "TMA, best tiling",
               "tiling BMxBTxBKxstages"], [r for a in archs for r in tma_rows(a, ARCHS[a], rows)])
    if "mlp" in sections:
        table("A layer's MLP block: the engine's five kernels against one persistent kernel, per call",
              ["arch", "rows", "kernels", "time", "engine / this", "max error vs fp32"],
              [r for a in archs for r in mlp_rows(a, ARCHS[a], rows)])
    if "flow" in sections:
        table("A layer's MLP from its normed rows: the engine's kernels against one dataflow kernel, per call",
              ["arch", "rows", "kernels", "time", "engine / this", "largest difference from the engine's: silu x up; "
               "the parts summed, after the first launch / after the replays"],
              [r for a in archs for r in flow_rows(a, ARCHS[a], rows)])


if __name__ == "__main__":
    main()
