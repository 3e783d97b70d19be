"""Decode's gate/up and silu x up at 65-128 rows with one wave of programs: a warp-specialized kernel in Gluon
(Triton's lower-level dialect: explicit TMA copies, mbarriers, wgmma and warp specialization; Hopper), against the
engine's (at 128 rows cuBLAS's GEMM and the compiled silu x up; at up to 64 rows gated_gemm's Triton kernels), alone
and in the engine.

At 128 rows cuBLAS tiles 1.5B's gate/up in 140 tiles on 132 multiprocessors: two waves, the second nearly empty. Here
the rows are the tensor cores' M side, all of them in one block, and a program takes NA + NB of gate's columns and the
same of up's (NA and NB powers of two: 64 + 8 at 1.5B, 125 programs; 64 + 32 at 3B, 115; 128 + 16 at 7B, 132), so
that one wave covers the weight. One loader warp fills a ring of stages by TMA (the rows and the four weight tiles of
each 64 input columns); the other warps run the wgmmas and write silu(gate) x up, each product rounded to bf16 first
as the engine's two kernels round it.

- `kernel`: every tiling (NA + NB, 4 or 8 consumer warps, as many stages as ~220 KB of shared memory holds) per call,
  each call on its own weights in one CUDA graph (`common.graph_us`), each with the consumer waiting for a stage's
  MMAs before freeing it (lag 0) or for the stage before's only (lag 1): the best, and the best of programs of a
  power of two of columns; every element of the output compared with the engine's;
- `engine`: the engine's generate of 16 prompts x 8 (128 rows), 128 + 256 tokens forced, as it is and with the
  kernel's best 128-row tiling at 65-128 rows (gated_gemm's entry patched for this run), median of 5 calls,
  alternating; and whether greedy decoding gives the same tokens;
- `mlp` (at up to 128 rows): a layer's MLP from its normed rows (gate/up, silu x up, down's fp32 K-split parts) as
  ONE such kernel, a program per SM taking first a one-wave gate/up task, then down tasks that wait by a counter per
  part of down's input for the gate/up tasks writing it (down tasks of `--down-rows` rows, lag 0 and 1; and the same
  with ONE ring for both phases, `_mlp_ring`), against the engine's three kernels; and each phase alone.

    python bench/wave_gated.py --archs qwen2.5-0.5b,qwen2.5-1.5b --rows 64,96,128,256 --sections kernel
    python bench/wave_gated.py --archs qwen2.5-1.5b,qwen2.5-3b,qwen2.5-coder-7b --rows 128 --sections kernel,engine
    python bench/wave_gated.py --archs qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-coder-7b --rows 128 --sections kernel,mlp
    python bench/wave_gated.py --archs qwen2.5-1.5b,qwen2.5-coder-7b --rows 128 --sections kernel,mlp --down-rows 64,128
    python bench/wave_gated.py --archs qwen2.5-1.5b,qwen2.5-coder-7b,qwen2.5-3b --rows 128 --sections mlp --down-rows 64,128
    python bench/wave_gated.py --archs tiny --rows 4              # CPU: the engine's path only (Gluon needs a GPU)
"""

import argparse
import contextlib
import itertools
import statistics
import time
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from common import ARCHS, DEVICE, build, device_name, graph_us, table, weight_copies
from fused_decode import PARTS, compiled, engine_gated, engine_mlp, mlp_weights

from execrl.rollout import RolloutEngine, SamplingParams, gated_gemm
from execrl.rollout.decoder import partial_down
from execrl.rollout.models.layers import gated

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # (a CPU-only install, or a Triton without Gluon)
    gluon = None

GLUON = DEVICE == "cuda" and gluon is not None and torch.cuda.get_device_capability()[0] == 9
ROWS = 128  # the most rows: all of them one block of the tensor cores' M side
BK = 64  # input columns a stage (128 bytes: the widest swizzle a TMA box takes)
SMEM = 220 * 1024  # the ring's shared memory, at most (of the 227 KB a Hopper block may have)


class Tiling(NamedTuple):
    na: int  # a program's columns of gate (and of up): na + nb
    nb: int  # (0: na only)
    stages: int  # the ring's
    warps: int  # the consumer warps (the loader is one more)
    lag: int = 0  # 1: a stage's MMAs left running while the next stage's are issued (`_gu_tile`)


if gluon is not None:
    _BK = gl.constexpr(BK)

    @gluon.jit
    def _gu_loads(x_desc, wa_desc, wb_desc, ready, empty, xs, gas, uas, gbs, ubs, c0, I, K, n,
                  NA: gl.constexpr, NB: gl.constexpr, S: gl.constexpr, HAS_B: gl.constexpr):
        """The loader warp's part of a gate/up task (columns c0 ...): for each BK input columns, wait for a free
        stage, then TMA the rows and gate's and up's NA (+ NB) columns into it; n: the ring's count so far."""
        nbytes: gl.constexpr = x_desc.block_type.nbytes + 2 * wa_desc.block_type.nbytes + \
            2 * wb_desc.block_type.nbytes * HAS_B
        for i in range(K // _BK):
            s = n % S
            mbarrier.wait(empty.index(s), ((n // S) & 1) ^ 1)  # (a fresh barrier lets the first round through)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(wa_desc, [c0, i * _BK], bar, gas.index(s))
            tma.async_copy_global_to_shared(wa_desc, [I + c0, i * _BK], bar, uas.index(s))
            if HAS_B:
                tma.async_copy_global_to_shared(wb_desc, [c0 + NA, i * _BK], bar, gbs.index(s))
                tma.async_copy_global_to_shared(wb_desc, [I + c0 + NA, i * _BK], bar, ubs.index(s))
            tma.async_copy_global_to_shared(x_desc, [0, i * _BK], bar, xs.index(s))  # (rows past M: zeros)
            n += 1
        return n

    @gluon.jit
    def _gu_tile(ready, empty, xs, gas, uas, gbs, ubs, K, n, BT: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr,
                 S: gl.constexpr, HAS_B: gl.constexpr, W: gl.constexpr, LAG: gl.constexpr = 0):
        """The consumer warps' part of a gate/up task: gate and up [BT rows, NA (+ NB) columns] in fp32 over the
        ring's stages n, n + 1, ...; returns them and the ring's count after. LAG 1: a stage's MMAs left running
        while the next stage's are issued (the stage before handed back once they are done), else each stage's
        waited for before the next."""
        la: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, NA, 16])
        lb: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, NB, 16])
        G: gl.constexpr = 4 if HAS_B else 2  # (MMA groups a stage)
        ga = gl.zeros([BT, NA], gl.float32, la)
        ua = gl.zeros([BT, NA], gl.float32, la)
        gb = gl.zeros([BT, NB], gl.float32, lb)
        ub = gl.zeros([BT, NB], gl.float32, lb)
        for j in range(K // _BK):
            s = n % S
            mbarrier.wait(ready.index(s), (n // S) & 1)
            x = xs.index(s)  # [BT, BK]; a weight tile [N, BK] is the MMA's [BK, N] operand, transposed
            ga = warpgroup_mma(x, gas.index(s).permute((1, 0)), ga, is_async=True)
            ua = warpgroup_mma(x, uas.index(s).permute((1, 0)), ua, is_async=True)
            if HAS_B:
                gb = warpgroup_mma(x, gbs.index(s).permute((1, 0)), gb, is_async=True)
                ub = warpgroup_mma(x, ubs.index(s).permute((1, 0)), ub, is_async=True)
                ga, ua, gb, ub = warpgroup_mma_wait(G * LAG, deps=[ga, ua, gb, ub])
            else:
                ga, ua = warpgroup_mma_wait(G * LAG, deps=[ga, ua])
            if LAG:
                if j > 0:
                    gl.thread_barrier()  # (every warpgroup's MMAs have read stage n - 1)
                    mbarrier.arrive(empty.index((n + S - 1) % S), count=1)
            else:
                gl.thread_barrier()  # (every warpgroup's MMAs have read stage s before it is handed back)
                mbarrier.arrive(empty.index(s), count=1)
            n += 1
        if LAG:
            if HAS_B:
                ga, ua, gb, ub = warpgroup_mma_wait(0, deps=[ga, ua, gb, ub])
            else:
                ga, ua = warpgroup_mma_wait(0, deps=[ga, ua])
            gl.thread_barrier()
            mbarrier.arrive(empty.index((n + S - 1) % S), count=1)
        return ga, ua, gb, ub, n

    @gluon.jit
    def _silu_up(g, u, o_ptr, rows, cols, M, I):
        """o[rows, cols] = silu(g) x u, g and u rounded to bf16 first; columns past I (where gate's tile ran into up's
        rows) and rows past M are not written."""
        g = g.to(gl.bfloat16).to(gl.float32)
        out = g * (1 / (1 + gl.exp(-g))) * u.to(gl.bfloat16).to(gl.float32)
        mask = (rows[:, None] < M) & (cols[None, :] < I)
        gl.store(o_ptr + rows[:, None] * I + cols[None, :], out.to(gl.bfloat16), mask=mask)

    @gluon.jit
    def _gu_store(ga, ua, gb, ub, o_ptr, c0, M, I, BT: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr,
                  HAS_B: gl.constexpr, W: gl.constexpr):
        """o[:, c0 : c0 + NA (+ NB)] = silu x up of a gate/up task's accumulators."""
        la: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, NA, 16])
        lb: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, NB, 16])
        _silu_up(ga, ua, o_ptr, gl.arange(0, BT, layout=gl.SliceLayout(1, la)),
                 c0 + gl.arange(0, NA, layout=gl.SliceLayout(0, la)), M, I)
        if HAS_B:
            _silu_up(gb, ub, o_ptr, gl.arange(0, BT, layout=gl.SliceLayout(1, lb)),
                     c0 + NA + gl.arange(0, NB, layout=gl.SliceLayout(0, lb)), M, I)

    @gluon.jit
    def _load(x_desc, wa_desc, wb_desc, ready, empty, xs, gas, uas, gbs, ubs, I, K,
              NA: gl.constexpr, NB: gl.constexpr, S: gl.constexpr, HAS_B: gl.constexpr):
        _gu_loads(x_desc, wa_desc, wb_desc, ready, empty, xs, gas, uas, gbs, ubs, gl.program_id(0) * (NA + NB * HAS_B),
                  I, K, gl.to_tensor(0), NA, NB, S, HAS_B)

    @gluon.jit
    def _mma(o_ptr, ready, empty, xs, gas, uas, gbs, ubs, M, I, K, BT: gl.constexpr, NA: gl.constexpr,
             NB: gl.constexpr, S: gl.constexpr, HAS_B: gl.constexpr, W: gl.constexpr, LAG: gl.constexpr):
        ga, ua, gb, ub, _ = _gu_tile(ready, empty, xs, gas, uas, gbs, ubs, K, gl.to_tensor(0), BT, NA, NB, S, HAS_B, W,
                                     LAG)
        _gu_store(ga, ua, gb, ub, o_ptr, gl.program_id(0) * (NA + NB * HAS_B), M, I, BT, NA, NB, HAS_B, W)

    @gluon.jit
    def _ring_barriers(S: gl.constexpr):
        """A ring's S stages' barriers (filled, freed), initialised."""
        ready = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(S):
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=1)
        return ready, empty

    @gluon.jit
    def _gu_ring(x_desc, wa_desc, wb_desc, NA: gl.constexpr, NB: gl.constexpr, S: gl.constexpr):
        """A gate/up ring of S stages (the rows, gate's and up's NA and NB columns) and its barriers, initialised."""
        BT: gl.constexpr = x_desc.block_type.shape[0]
        xs = gl.allocate_shared_memory(x_desc.dtype, [S, BT, _BK], x_desc.layout)
        gas = gl.allocate_shared_memory(wa_desc.dtype, [S, NA, _BK], wa_desc.layout)
        uas = gl.allocate_shared_memory(wa_desc.dtype, [S, NA, _BK], wa_desc.layout)
        gbs = gl.allocate_shared_memory(wb_desc.dtype, [S, NB, _BK], wb_desc.layout)
        ubs = gl.allocate_shared_memory(wb_desc.dtype, [S, NB, _BK], wb_desc.layout)
        ready, empty = _ring_barriers(S)
        return xs, gas, uas, gbs, ubs, ready, empty

    @gluon.jit
    def _kernel(x_desc, wa_desc, wb_desc, o_ptr, M, I, K, NA: gl.constexpr, NB: gl.constexpr, S: gl.constexpr,
                HAS_B: gl.constexpr, W: gl.constexpr, LAG: gl.constexpr):
        """o [M, I] = silu(x Wg^T) x (x Wu^T), x [M <= BT, K]; a program per NA + NB columns."""
        BT: gl.constexpr = x_desc.block_type.shape[0]
        xs, gas, uas, gbs, ubs, ready, empty = _gu_ring(x_desc, wa_desc, wb_desc, NA, NB, S)
        gl.warp_specialize([
            (_mma, (o_ptr, ready, empty, xs, gas, uas, gbs, ubs, M, I, K, BT, NA, NB, S, HAS_B, W, LAG)),
            (_load, (x_desc, wa_desc, wb_desc, ready, empty, xs, gas, uas, gbs, ubs, I, K, NA, NB, S, HAS_B)),
        ], [1], [40])

    @gluon.jit
    def _acquire_async(x):
        """This thread's later TMA reads ordered after the counter it read: an acquire at GPU scope, then a fence
        between the generic proxy (the other programs' stores) and the async proxy (TMA)."""
        return gl.inline_asm_elementwise("fence.acq_rel.gpu; fence.proxy.async.global; mov.u32 $0, $1;", "=r,r",
                                         [x], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _down_loads(act_desc, wd_desc, sync_ptr, ready, empty, xa, w0, w1, n, p, n0, NW: gl.constexpr,
                    KP: gl.constexpr, S: gl.constexpr, TWO: gl.constexpr, WAIT: gl.constexpr):
        """The loader warp's part of a down task (part p of down's input, its rows n0 ...) in a ring of S stages:
        the first stages' weight tiles (into w0; TWO: the next rows' into w1 too), then, once part p's counter is
        full (WAIT; else act is the caller's, written before the launch), act's tiles for them (into xa), then both
        for the rest; n: the ring's count so far. Returns the count after."""
        KS: gl.constexpr = KP // _BK
        PRE: gl.constexpr = S if S < KS else KS
        WR: gl.constexpr = wd_desc.block_type.shape[0]
        nbytes: gl.constexpr = act_desc.block_type.nbytes + wd_desc.block_type.nbytes * (1 + TWO)
        for k in range(PRE):  # down's weight needs no counter
            s = (n + k) % S
            mbarrier.wait(empty.index(s), (((n + k) // S) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(wd_desc, [n0, p * KP + k * _BK], ready.index(s), w0.index(s))
            if TWO:
                tma.async_copy_global_to_shared(wd_desc, [n0 + WR, p * KP + k * _BK], ready.index(s), w1.index(s))
        if WAIT:
            while gl.load(sync_ptr + p, volatile=True) < ((p + 1) * KP - 1) // NW - (p * KP) // NW + 1:
                pass
            _acquire_async(p)
        for k in range(PRE):
            s = (n + k) % S
            tma.async_copy_global_to_shared(act_desc, [0, p * KP + k * _BK], ready.index(s), xa.index(s))
        for k in range(PRE, KS):
            s = (n + k) % S
            mbarrier.wait(empty.index(s), (((n + k) // S) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(wd_desc, [n0, p * KP + k * _BK], bar, w0.index(s))
            if TWO:
                tma.async_copy_global_to_shared(wd_desc, [n0 + WR, p * KP + k * _BK], bar, w1.index(s))
            tma.async_copy_global_to_shared(act_desc, [0, p * KP + k * _BK], bar, xa.index(s))
        return n + KS

    @gluon.jit
    def _mlp_load(h_desc, wa_desc, wb_desc, act_desc, wd_desc, sync_ptr, gready, gempty, dready, dempty,
                  xs, gas, uas, gbs, ubs, acts, wds, I: gl.constexpr, D: gl.constexpr, P: gl.constexpr,
                  NA: gl.constexpr, NB: gl.constexpr, S1: gl.constexpr, S2: gl.constexpr, DR: gl.constexpr,
                  GU: gl.constexpr, DOWN: gl.constexpr):
        """The loader warp of `_mlp`: a gate/up task's loads, or a down task's: its first S2 stages of down's weight,
        then (once part p's counter is full) the act tiles for them, then both for the rest."""
        NW: gl.constexpr = NA + NB
        NGU: gl.constexpr = (I + NW - 1) // NW
        ND: gl.constexpr = D // DR
        KP: gl.constexpr = I // P
        gi = 0
        di = 0
        t = gl.program_id(0) + NGU * (1 - GU)
        while t < NGU + ND * P * DOWN:
            if t < NGU:
                gi = _gu_loads(h_desc, wa_desc, wb_desc, gready, gempty, xs, gas, uas, gbs, ubs, t * NW, I, D, gi,
                               NA, NB, S1, True)
            else:
                di = _down_loads(act_desc, wd_desc, sync_ptr, dready, dempty, acts, wds, wds, di, (t - NGU) // ND,
                                 ((t - NGU) % ND) * DR, NW, KP, S2, False, GU)
            t += gl.num_programs(0)

    @gluon.jit
    def _gu_task(ready, empty, xs, gas, uas, gbs, ubs, act_ptr, sync_ptr, t, n, M, I: gl.constexpr, D: gl.constexpr,
                 KP: gl.constexpr, BT: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr, S: gl.constexpr,
                 W: gl.constexpr, LAG: gl.constexpr):
        """The consumer warps' gate/up task t of the MLP kernels: act's columns, then a release increment of the
        counter of each part (KP of act's columns) they touch; returns the ring's count after."""
        NW: gl.constexpr = NA + NB
        ga, ua, gb, ub, n = _gu_tile(ready, empty, xs, gas, uas, gbs, ubs, D, n, BT, NA, NB, S, True, W, LAG)
        _gu_store(ga, ua, gb, ub, act_ptr, t * NW, M, I, BT, NA, NB, True, W)
        gl.thread_barrier()  # (every warp's act stores before the release)
        lo = (t * NW) // KP
        hi = gl.minimum(t * NW + NW - 1, I - 1) // KP
        gl.atomic_add(sync_ptr + lo, 1, sem="release", scope="gpu")
        if hi != lo:
            gl.atomic_add(sync_ptr + hi, 1, sem="release", scope="gpu")
        return n

    @gluon.jit
    def _mlp_compute(act_ptr, parts_ptr, sync_ptr, gready, gempty, dready, dempty, xs, gas, uas, gbs, ubs, acts, wds,
                     M, I: gl.constexpr, D: gl.constexpr, P: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr,
                     S1: gl.constexpr, S2: gl.constexpr, DR: gl.constexpr, BT: gl.constexpr, W: gl.constexpr,
                     GU: gl.constexpr, DOWN: gl.constexpr, LAG: gl.constexpr):
        """The consumer warps of `_mlp`: a gate/up task (act's columns, then a release increment of the counter of
        each part of down's input they touch), or a down task (DR of down's rows as the M side, the tokens as N)."""
        NW: gl.constexpr = NA + NB
        NGU: gl.constexpr = (I + NW - 1) // NW
        ND: gl.constexpr = D // DR
        KP: gl.constexpr = I // P
        WM: gl.constexpr = W if DR // 16 >= W else DR // 16  # (warps along down's rows; the rest split the tokens)
        ld: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WM, W // WM],
                                                     instr_shape=[16, BT // (W // WM), 16])
        gi = 0
        di = 0
        t = gl.program_id(0) + NGU * (1 - GU)
        while t < NGU + ND * P * DOWN:
            if t < NGU:
                gi = _gu_task(gready, gempty, xs, gas, uas, gbs, ubs, act_ptr, sync_ptr, t, gi, M, I, D, KP, BT, NA,
                              NB, S1, W, LAG)
            else:
                p = (t - NGU) // ND
                n0 = ((t - NGU) % ND) * DR
                acc = gl.zeros([DR, BT], gl.float32, ld)
                for j in range(KP // _BK):
                    s = di % S2
                    mbarrier.wait(dready.index(s), (di // S2) & 1)
                    acc = warpgroup_mma(wds.index(s), acts.index(s).permute((1, 0)), acc, is_async=True)
                    acc = warpgroup_mma_wait(LAG, deps=[acc])
                    if LAG:
                        if j > 0:
                            gl.thread_barrier()
                            mbarrier.arrive(dempty.index((di + S2 - 1) % S2), count=1)
                    else:
                        gl.thread_barrier()
                        mbarrier.arrive(dempty.index(s), count=1)
                    di += 1
                if LAG:
                    acc = warpgroup_mma_wait(0, deps=[acc])
                    gl.thread_barrier()
                    mbarrier.arrive(dempty.index((di + S2 - 1) % S2), count=1)
                rows = n0 + gl.arange(0, DR, layout=gl.SliceLayout(1, ld))
                toks = gl.arange(0, BT, layout=gl.SliceLayout(0, ld))
                gl.store(parts_ptr + p * M * D + toks[None, :] * D + rows[:, None], acc, mask=toks[None, :] < M)
            t += gl.num_programs(0)

    @gluon.jit
    def _mlp(h_desc, wa_desc, wb_desc, act_desc, wd_desc, act_ptr, parts_ptr, sync_ptr, M, I: gl.constexpr,
             D: gl.constexpr, P: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr, S1: gl.constexpr,
             S2: gl.constexpr, DR: gl.constexpr, W: gl.constexpr, GU: gl.constexpr, DOWN: gl.constexpr,
             LAG: gl.constexpr):
        """parts [P, M, D] fp32 = down's K-split partial products of silu(h Wg^T) x (h Wu^T) (act [M, I] written on
        the way), in ONE launch: a program per SM takes tasks pid, pid + G, ...: first the one-wave gate/up tasks,
        then down tasks (part p, DR of down's rows), each waiting only for part p's gate/up tasks (a counter per
        part). Every gate/up task is some program's first, so no down task waits on one not started. sync_ptr
        [P + 1] int32: the counters and the programs out (the last one out zeroes them). GU / DOWN False: the other
        phase alone (for its time)."""
        BT: gl.constexpr = h_desc.block_type.shape[0]
        xs, gas, uas, gbs, ubs, gready, gempty = _gu_ring(h_desc, wa_desc, wb_desc, NA, NB, S1)
        acts = gl.allocate_shared_memory(act_desc.dtype, [S2, BT, _BK], act_desc.layout)
        wds = gl.allocate_shared_memory(wd_desc.dtype, [S2, DR, _BK], wd_desc.layout)
        dready, dempty = _ring_barriers(S2)
        gl.warp_specialize([
            (_mlp_compute, (act_ptr, parts_ptr, sync_ptr, gready, gempty, dready, dempty, xs, gas, uas, gbs, ubs,
                            acts, wds, M, I, D, P, NA, NB, S1, S2, DR, BT, W, GU, DOWN, LAG)),
            (_mlp_load, (h_desc, wa_desc, wb_desc, act_desc, wd_desc, sync_ptr, gready, gempty, dready, dempty,
                         xs, gas, uas, gbs, ubs, acts, wds, I, D, P, NA, NB, S1, S2, DR, GU, DOWN)),
        ], [1], [40])
        if gl.atomic_add(sync_ptr + P, 1, sem="acq_rel", scope="gpu") == gl.num_programs(0) - 1:
            for q in range(P + 1):
                gl.atomic_xchg(sync_ptr + q, 0)


    @gluon.jit
    def _ring_load(h_desc, wa_desc, wb_desc, act_desc, wd_desc, sync_ptr, ready, empty, xs, gas, uas, gbs, ubs,
                   I: gl.constexpr, D: gl.constexpr, P: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr,
                   S: gl.constexpr, TWO: gl.constexpr):
        """The loader warp of `_mlp_ring`: a gate/up task's loads, or a down task's, into the same ring: act's tile
        into the rows' slot, down's weight rows (NA, or 2 NA with TWO) into gate's (and up's) slots; the first S
        stages' weight before part p's counter is full, their act tiles after."""
        NW: gl.constexpr = NA + NB
        NGU: gl.constexpr = (I + NW - 1) // NW
        DR: gl.constexpr = NA * (1 + TWO)
        ND: gl.constexpr = D // DR
        KP: gl.constexpr = I // P
        n = 0
        t = gl.program_id(0)
        while t < NGU + ND * P:
            if t < NGU:
                n = _gu_loads(h_desc, wa_desc, wb_desc, ready, empty, xs, gas, uas, gbs, ubs, t * NW, I, D, n,
                              NA, NB, S, True)
            else:
                n = _down_loads(act_desc, wd_desc, sync_ptr, ready, empty, xs, gas, uas, n, (t - NGU) // ND,
                                ((t - NGU) % ND) * DR, NW, KP, S, TWO, True)
            t += gl.num_programs(0)

    @gluon.jit
    def _ring_compute(act_ptr, parts_ptr, sync_ptr, ready, empty, xs, gas, uas, gbs, ubs, M, I: gl.constexpr,
                      D: gl.constexpr, P: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr, S: gl.constexpr,
                      BT: gl.constexpr, W: gl.constexpr, TWO: gl.constexpr):
        """The consumer warps of `_mlp_ring`: a gate/up task as `_mlp_compute`'s, or a down task: NA (or 2 NA) of
        down's rows as the tensor cores' M side, one wgmma per NA rows a stage, the tokens as N."""
        NW: gl.constexpr = NA + NB
        NGU: gl.constexpr = (I + NW - 1) // NW
        DR: gl.constexpr = NA * (1 + TWO)
        ND: gl.constexpr = D // DR
        KP: gl.constexpr = I // P
        WM: gl.constexpr = W if NA // 16 >= W else NA // 16  # (warps along down's rows; the rest split the tokens)
        ld: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WM, W // WM],
                                                     instr_shape=[16, BT // (W // WM), 16])
        n = 0
        t = gl.program_id(0)
        while t < NGU + ND * P:
            if t < NGU:
                n = _gu_task(ready, empty, xs, gas, uas, gbs, ubs, act_ptr, sync_ptr, t, n, M, I, D, KP, BT, NA, NB, S,
                             W, 0)
            else:
                p = (t - NGU) // ND
                n0 = ((t - NGU) % ND) * DR
                a0 = gl.zeros([NA, BT], gl.float32, ld)
                a1 = gl.zeros([NA, BT], gl.float32, ld)
                for _ in range(KP // _BK):
                    s = n % S
                    mbarrier.wait(ready.index(s), (n // S) & 1)
                    x = xs.index(s).permute((1, 0))
                    a0 = warpgroup_mma(gas.index(s), x, a0, is_async=True)
                    if TWO:
                        a1 = warpgroup_mma(uas.index(s), x, a1, is_async=True)
                        a0, a1 = warpgroup_mma_wait(0, deps=[a0, a1])
                    else:
                        a0 = warpgroup_mma_wait(0, deps=[a0])
                    gl.thread_barrier()
                    mbarrier.arrive(empty.index(s), count=1)
                    n += 1
                rows = n0 + gl.arange(0, NA, layout=gl.SliceLayout(1, ld))
                toks = gl.arange(0, BT, layout=gl.SliceLayout(0, ld))
                out = parts_ptr + p * M * D + toks[None, :] * D + rows[:, None]
                gl.store(out, a0, mask=toks[None, :] < M)
                if TWO:
                    gl.store(out + NA, a1, mask=toks[None, :] < M)
            t += gl.num_programs(0)

    @gluon.jit
    def _mlp_ring(h_desc, wa_desc, wb_desc, act_desc, wd_desc, act_ptr, parts_ptr, sync_ptr, M, I: gl.constexpr,
                  D: gl.constexpr, P: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr, S: gl.constexpr,
                  W: gl.constexpr, TWO: gl.constexpr):
        """`_mlp` with ONE ring for both phases: a down task's stage holds act's tile where a gate/up stage holds the
        rows, and NA (TWO: 2 NA) of down's rows where it holds gate's (and up's) NA columns, so that each phase has
        the whole ring's depth and one count runs through a program's tasks."""
        BT: gl.constexpr = h_desc.block_type.shape[0]
        xs, gas, uas, gbs, ubs, ready, empty = _gu_ring(h_desc, wa_desc, wb_desc, NA, NB, S)
        gl.warp_specialize([
            (_ring_compute, (act_ptr, parts_ptr, sync_ptr, ready, empty, xs, gas, uas, gbs, ubs, M, I, D, P, NA, NB,
                             S, BT, W, TWO)),
            (_ring_load, (h_desc, wa_desc, wb_desc, act_desc, wd_desc, sync_ptr, ready, empty, xs, gas, uas, gbs, ubs,
                          I, D, P, NA, NB, S, TWO)),
        ], [1], [40])
        if gl.atomic_add(sync_ptr + P, 1, sem="acq_rel", scope="gpu") == gl.num_programs(0) - 1:
            for q in range(P + 1):
                gl.atomic_xchg(sync_ptr + q, 0)


def programs(i: int, na: int, nb: int) -> int:
    """The programs (gate/up tasks) of na + nb columns that I columns take."""
    return -(-i // (na + nb))


def _layout(block):
    return gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)


def launch(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, t: Tiling) -> None:
    """out [M, I] = silu(x Wg^T) x (x Wu^T) for x [M <= 256, K] (16-byte aligned), bf16."""
    (m, k), i = x.shape, out.shape[1]
    bt, nb = max(64, 1 << (m - 1).bit_length()), t.nb or 8  # (nb 0: its buffers still exist, unused)
    _kernel[(programs(i, t.na, t.nb),)](
        TensorDescriptor.from_tensor(x, [bt, BK], _layout([bt, BK])),
        TensorDescriptor.from_tensor(weight, [t.na, BK], _layout([t.na, BK])),
        TensorDescriptor.from_tensor(weight, [nb, BK], _layout([nb, BK])), out, m, i, k,
        NA=t.na, NB=nb, S=t.stages, HAS_B=t.nb > 0, W=t.warps, LAG=t.lag, num_warps=t.warps)


def stages(na: int, nb: int, rows: int = ROWS) -> int:
    """As many stages as SMEM holds, at most 8."""
    return min(8, SMEM // ((rows + 2 * na + 2 * (nb or 8)) * BK * 2))


def tilings(m: int, i: int) -> list[Tiling]:
    """Programs of na + nb columns whose accumulators fit the consumer warps' registers (4 or 8 warps), at as many
    stages as SMEM holds."""
    bt, sms = max(64, 1 << (m - 1).bit_length()), torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for na, nb, warps, lag in itertools.product([32, 64, 128], [0, 8, 16, 32], [4, 8], [0, 1]):
        regs = bt * 2 * (na + (nb or 8)) // (32 * warps)  # fp32 accumulators per thread
        if nb < na and regs <= 176 and programs(i, na, nb) <= 3 * sms:
            out.append(Tiling(na, nb, stages(na, nb, bt), warps, lag))
    return out


def kernel_rows(name: str, arch, rows: list[int], best: dict) -> list[list]:
    glu_c = compiled(gated(F.silu))  # the engine's silu x up
    d, i = arch.hidden, arch.intermediate
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    ws = [torch.randn(2 * i, d, device=DEVICE, dtype=dtype) / d ** 0.5
          for _ in range(weight_copies(2 * i * d * 2, arch.layers))]
    out = []
    for m in rows:
        x = torch.randn(m, d, device=DEVICE, dtype=dtype)
        base = graph_us([partial(engine_gated, x, w, glu_c) for w in ws])
        row = [name, m, f"{2 * i} x {d}", f"{base:.2f} us"]
        if not GLUON:
            out.append(row + ["needs a Hopper GPU (Gluon)", "", "", ""])
            continue
        want = engine_gated(x, ws[0], glu_c)
        timed = []
        for t in tilings(m, i):
            y = torch.empty(m, i, device=DEVICE, dtype=dtype)
            launch(x, ws[0], y, t)
            equal = (y == want).float().mean().item()
            timed.append((graph_us([partial(launch, x, w, y, t) for w in ws]), t, equal))
        us, t, equal = min(timed)
        pow2 = min(r for r in timed if r[1].nb == 0)  # the best whose programs take a power of two of columns
        best[name, m] = t
        out.append(row + [f"{us:.2f} us ({base / us:.2f}x): {t.na} + {t.nb}, {programs(i, t.na, t.nb)} programs, "
                          f"{t.warps} warps, {t.stages} stages, lag {t.lag}",
                          f"{pow2[0]:.2f} us ({base / pow2[0]:.2f}x): {pow2[1].na}, "
                          f"{programs(i, pow2[1].na, 0)} programs",
                          f"{equal:.4f}", f"{min(r[2] for r in timed):.4f}"])
    return out


@torch.library.custom_op("bench_wave::gated_up", mutates_args=())
def _wave_op(x: torch.Tensor, weight: torch.Tensor, na: int, nb: int, stages: int, warps: int, lag: int
             ) -> torch.Tensor:
    out = x.new_empty(x.shape[0], weight.shape[0] // 2)
    launch(x if x.data_ptr() % 16 == 0 else x.clone(), weight, out, Tiling(na, nb, stages, warps, lag))
    return out


@_wave_op.register_fake
def _(x, weight, na, nb, stages, warps, lag):
    return x.new_empty(x.shape[0], weight.shape[0] // 2)


@contextlib.contextmanager
def wave_in_engine(tiling: Tiling | None):
    """gated_gemm's entry for decode's gate/up at up to ROWS rows: its own kernels at up to 64 rows, this one above
    (None: as it is)."""
    orig, orig_rows = gated_gemm.gated_up, gated_gemm.max_rows

    def gated_up(x, w):
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        out = orig(flat, w) if flat.shape[0] <= gated_gemm.TMA_ROWS else _wave_op(flat, w, *tiling)
        return out.view(*x.shape[:-1], w.shape[0] // 2)

    if tiling is not None:
        gated_gemm.gated_up, gated_gemm.max_rows = gated_up, lambda w: ROWS
    try:
        yield
    finally:
        gated_gemm.gated_up, gated_gemm.max_rows = orig, orig_rows


def engine_rows(name: str, best: dict, calls: int = 5) -> list[list]:
    if not GLUON or (name, ROWS) not in best:
        return [[name, "", "needs a Hopper GPU (Gluon) and the kernel section's 128-row tiling", "", ""]]
    model, tok = build(name, init="cuda")
    prompts = torch.randint(3, 259, (16, 128), generator=torch.Generator().manual_seed(0)).tolist()
    paths = {"the engine's (cuBLAS + silu x up)": None, "the one-wave kernel": best[name, ROWS]}
    engines, ids, times = {}, {}, {}
    for path, tiling in paths.items():
        torch._dynamo.reset()
        with wave_in_engine(tiling):  # (the decoder reads max_rows when built; its step is traced at the first call)
            engine = RolloutEngine(model, tok, slots=128, max_len=384, compile=True)
            greedy = engine.generate(prompts, 8, 256, SamplingParams(temperature=0.0, ignore_eos=True))
        engines[path], ids[path], times[path] = engine, [c.ids for grp in greedy for c in grp], []
    for _ in range(calls):
        for path, engine in engines.items():
            with wave_in_engine(paths[path]):
                torch.cuda.synchronize()
                t = time.perf_counter()
                engine.generate(prompts, 8, 256, SamplingParams(temperature=1.0, ignore_eos=True))
                torch.cuda.synchronize()
                times[path].append(time.perf_counter() - t)
    base, ref = statistics.median(next(iter(times.values()))), next(iter(ids.values()))
    rows = []
    for path, tiling in paths.items():
        med = statistics.median(times[path])
        rows.append([name, path + (f" ({tiling.na} + {tiling.nb} columns)" if tiling else ""),
                     f"{128 * 256 / med:,.0f} tok/s ({base / med:.3f}x)", f"{med * 1000 / 256:.3f} ms",
                     f"{sum(a == b for a, b in zip(ids[path], ref))} of {len(ref)}"])
    del engines, model
    torch.cuda.empty_cache()
    return rows


class MLPKernel:
    """`_mlp`'s launch for the normed rows h [m <= 128, d] of a (d, i) MLP: its buffers (act, down's parts, the
    counters) and each layer's weight descriptors; a program per SM, gate/up tasks of t.na + t.nb columns, down tasks
    of dr of down's rows and one of `parts` parts of its input. ring: `_mlp_ring` (one ring of t.stages for both
    phases; dr t.na or 2 t.na) in place of `_mlp`."""

    def __init__(self, h, i: int, t: Tiling, dr: int = 64, parts: int = PARTS, s2: int = 3, gu: bool = True,
                 down: bool = True, ring: bool = False):
        m, d = h.shape
        assert not ring or dr in (t.na, 2 * t.na), "a ring's down task: gate's slot, or gate's and up's"
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert t.nb and programs(i, t.na, t.nb) <= sms and i % (parts * BK) == 0 and d % dr == 0, \
            "one wave, whole tiles"
        self.act = torch.empty(m, i, device="cuda", dtype=torch.bfloat16)
        self.parts = torch.empty(parts, m, d, device="cuda", dtype=torch.float32)
        self.sync = torch.zeros(parts + 1, device="cuda", dtype=torch.int32)
        self.hd = TensorDescriptor.from_tensor(h, [ROWS, BK], _layout([ROWS, BK]))
        self.ad = TensorDescriptor.from_tensor(self.act, [ROWS, BK], _layout([ROWS, BK]))
        self.m, self.t, self.dr, self.grid = m, t, dr, (sms,)
        self.meta = dict(I=i, D=d, P=parts, NA=t.na, NB=t.nb, S1=t.stages, S2=s2, DR=dr, W=t.warps, GU=gu,
                         DOWN=down, LAG=t.lag, num_warps=t.warps)
        self.kernel = _mlp
        if ring:
            self.kernel = _mlp_ring
            self.meta = dict(I=i, D=d, P=parts, NA=t.na, NB=t.nb, S=t.stages, W=t.warps, TWO=int(dr > t.na),
                             num_warps=t.warps)

    def descs(self, wgu, wd):
        na, nb = self.t.na, self.t.nb
        dr = na if self.kernel is _mlp_ring else self.dr  # (a ring's down tile fills gate's slot)
        return (TensorDescriptor.from_tensor(wgu, [na, BK], _layout([na, BK])),
                TensorDescriptor.from_tensor(wgu, [nb, BK], _layout([nb, BK])),
                TensorDescriptor.from_tensor(wd, [dr, BK], _layout([dr, BK])))

    def __call__(self, descs):
        wa, wb, wd = descs
        self.kernel[self.grid](self.hd, wa, wb, self.ad, wd, self.act, self.parts, self.sync, self.m, **self.meta)


def mlp_tiling(i: int, dr: int = 64, s2: int = 3, lag: int = 0) -> Tiling:
    """The one-wave gate/up tasks with the most programs (nb > 0: the kernel always takes both widths), their ring
    as deep as the shared memory left by down's s2 stages allows (at most 4)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    progs, na, nb = max((programs(i, na, nb), na, nb) for na in (32, 64, 128) for nb in (8, 16, 32)
                        if nb < na and programs(i, na, nb) <= sms)
    s1 = min(4, (SMEM - s2 * (ROWS + dr) * BK * 2) // ((ROWS + 2 * na + 2 * nb) * BK * 2))
    return Tiling(na, nb, s1, 8, lag)


def checked(mlp: MLPKernel, ws: list, act: torch.Tensor, want: torch.Tensor) -> tuple[float, str]:
    """An MLP kernel's us per call, each call on one of `ws`'s weights, and how far its outputs are from the engine's
    (`act`, and `want` down's parts with as many parts): after the first launch and after the timed replays (the
    counters reset at each launch's end)."""
    descs = [mlp.descs(*w) for w in ws]
    mlp(descs[0])
    errs = [(mlp.act.float() - act.float()).abs().max().item(), (mlp.parts - want).abs().max().item()]
    us = graph_us([partial(mlp, dd) for dd in descs])
    mlp(descs[0])
    errs.append((mlp.parts - want).abs().max().item())
    return us, (f"silu x up {errs[0]:.2g}, the parts {errs[1]:.2g} / {errs[2]:.2g} (against the engine's in "
                f"{len(want)}); counters after {mlp.sync.tolist()}")


def mlp_rows(name: str, arch, rows: list[int], downs: list[int]) -> list[list]:
    """gate/up, silu x up and down's fp32 parts from the normed rows: the engine's three kernels against one
    warp-specialized kernel (down tasks of 64-256 of down's rows; the engine's 4 parts of its input, or more), and
    its phases alone."""
    glu_c = compiled(gated(F.silu))
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    d, i = arch.hidden, arch.intermediate
    ws = mlp_weights(arch, dtype)
    engine = partial(engine_mlp, glu_c=glu_c)
    out = []
    more = max([p for p in range(5, 11) if i % (p * BK) == 0], default=None)  # (more parts: down's input in runs
    # of whole BK blocks)
    part_counts = [PARTS] + ([more] if more else [])
    for m in [r for r in rows if r <= ROWS]:
        h = torch.randn(m, d, device=DEVICE, dtype=dtype)
        base = graph_us([partial(engine, h, w) for w in ws])
        out.append([name, m, "the engine's (gate/up, silu x up, down's 4 parts)", f"{base:.2f} us", "1.00x", ""])
        if not GLUON:
            out.append([name, m, "one warp-specialized kernel", "needs a Hopper GPU (Gluon)", "", ""])
            continue
        act = engine_gated(h, ws[0][0], glu_c)
        wants = {parts: engine(h, ws[0], parts=parts) for parts in part_counts}
        for parts in part_counts:
            if parts != PARTS:
                alone = [partial(partial_down, act[None], w[1], parts) for w in ws]
                out.append([name, m, f"the engine's down in {parts} parts alone", f"{graph_us(alone):.2f} us", "", ""])
            for dr, lag in itertools.product(downs, (0, 1)):
                if d % dr:
                    continue
                t = mlp_tiling(i, dr, lag=lag)
                mlp = MLPKernel(h, i, t, dr, parts)
                us, errs = checked(mlp, ws, act, wants[parts])
                alone = MLPKernel(h, i, t, dr, parts, gu=False)
                alone.act.copy_(mlp.act)
                down_us = graph_us([partial(alone, x) for x in [alone.descs(*w) for w in ws]])
                out.append([name, m, f"one warp-specialized kernel ({t.na} + {t.nb} columns a gate/up task, "
                                     f"{t.stages} stages; {d // dr * parts} down tasks of {dr} rows, {parts} parts; "
                                     f"lag {lag})",
                            f"{us:.2f} us (down alone {down_us:.2f})", f"{base / us:.2f}x", errs])
        t = mlp_tiling(i)
        t = t._replace(stages=stages(t.na, t.nb))  # (one ring: all of the shared memory)
        for parts, two in itertools.product(part_counts, (0, 1)):
            dr = t.na * (1 + two)
            if d % dr or t.na < 64:  # (a wgmma's M: 64 rows a warpgroup)
                continue
            us, errs = checked(MLPKernel(h, i, t, dr, parts, ring=True), ws, act, wants[parts])
            out.append([name, m, f"one kernel, ONE ring of {t.stages} stages for both phases ({t.na} + {t.nb} "
                                 f"columns a gate/up task; {d // dr * parts} down tasks of {dr} rows, {parts} parts)",
                        f"{us:.2f} us", f"{base / us:.2f}x", errs])
        for lag in (0, 1):
            t = mlp_tiling(i, lag=lag)
            alone = MLPKernel(h, i, t, down=False)
            out.append([name, m, f"its gate/up phase alone (64-row down tasks' rings; lag {lag})",
                        f"{graph_us([partial(alone, x) for x in [alone.descs(*w) for w in ws]]):.2f} us", "", ""])
        parts = [partial(partial_down, act[None], w[1], PARTS) for w in ws]
        out.append([name, m, "the engine's down in 4 parts alone", f"{graph_us(parts):.2f} us", "", ""])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--rows", default="64,128,256", help="decode batch rows (the engine section: 128, which the "
                    "kernel section must include)")
    ap.add_argument("--sections", default="kernel,engine,mlp")
    ap.add_argument("--down-rows", default="64,128,256", help="mlp: down's rows a down task")
    args = ap.parse_args()
    archs, rows, sections = args.archs.split(","), [int(r) for r in args.rows.split(",")], args.sections.split(",")
    print(f"device: {device_name()}, torch {torch.__version__}")
    best = {}
    table("Gate/up and silu x up: the engine's against one wave of warp-specialized programs, per call",
          ["arch", "rows", "weight", "engine", "one wave: the best tiling", "programs of a power of two of columns: "
           "the best", "elements equal to the engine's: the best tiling", "the least of any tiling"],
          [r for a in archs for r in kernel_rows(a, ARCHS[a], rows, best)])
    if "engine" in sections:
        table("The engine's generate, 16 prompts x 8 (128 rows), 128 + 256 tokens forced, median of 5",
              ["arch", "gate/up at 65-128 rows", "new tokens/s", "a decode step", "greedy samples the same"],
              [r for a in archs for r in engine_rows(a, best)])
    if "mlp" in sections:
        table("A layer's MLP from its normed rows (gate/up, silu x up, down's fp32 parts): the engine's kernels "
              "against one warp-specialized kernel, per call",
              ["arch", "rows", "kernels", "time", "engine / this", "largest difference from the engine's: act, the "
               "parts after the first launch / after the replays"],
              [r for a in archs for r in mlp_rows(a, ARCHS[a], rows, [int(x) for x in args.down_rows.split(",")])])


if __name__ == "__main__":
    main()
