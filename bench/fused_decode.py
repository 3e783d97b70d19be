"""Whether a fused decode layer would pay, measured with Triton kernels written for the decode step's shapes, each
against what the engine runs now, in the same run:

- `gemm`: each projection of a layer as one Triton GEMM over the batch's rows (gate/up with silu x up in its
  epilogue, q/k/v with its bias), the best of a few tilings, against cuBLAS (gate/up: and the compiled silu x up);
- `mlp`: a layer's whole MLP block (RMSNorm, gate/up, silu x up, down, the residual add) as ONE persistent kernel,
  a program per SM and two grid barriers (gate/up tiles | down's K-split partial sums | their sum in a fixed
  order + the residual), against the engine's five kernels (norm, gate/up, silu x up, down with cuBLAS's split-K
  reduction, the add); and its parts alone: the barriers (no work), the first phase.

    python bench/fused_decode.py --archs qwen2.5-0.5b,qwen2.5-1.5b --rows 16,128,256
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
from execrl.rollout.models.layers import gated

try:
    import triton
    import triton.language as tl
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
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    glu_c = compiled(gated(F.silu))  # the engine's silu x up
    out = []
    for m in rows:
        for what, (n, k, bias) in projections(arch).items():
            if what == "LM head":
                continue
            glu = what == "gate/up"
            ws = [torch.randn(n, k, device=DEVICE, dtype=dtype) / k ** 0.5
                  for _ in range(weight_copies(n * k * 2, arch.layers))]
            b = torch.randn(n, device=DEVICE, dtype=dtype) if bias else None
            x = torch.randn(m, k, device=DEVICE, dtype=dtype)

            def engine(w, x=x, b=b, glu=glu):  # (this iteration's)
                y = F.linear(x, w, b)
                return glu_c(y) if glu else y

            base = graph_us([partial(engine, w) for w in ws])
            cells = [f"{base:.2f} us"]
            if GPU:
                want = engine(ws[0]).float()
                y = torch.empty(m, n // 2 if glu else n, device=DEVICE, dtype=dtype)
                best = (float("inf"), None)
                for tiling in itertools.product([16] if m <= 16 else [64], [32, 64, 128], [64, 128], [3, 5]):
                    if y.shape[1] % tiling[1] or k % tiling[2]:
                        continue
                    try:
                        triton_gemm(x, ws[0], b, y, glu, tiling)
                    except Exception as e:  # a tiling that does not fit the SM's shared memory
                        if type(e).__name__ != "OutOfResources":
                            raise
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
        table("A layer's projections: cuBLAS (the engine) against one Triton GEMM, per call",
              ["arch", "rows", "projection", "weight", "engine", "Triton, best tiling", "tiling BMxBNxBKxstages"],
              [r for a in archs for r in gemm_rows(a, ARCHS[a], rows)])
    if "mlp" in sections:
        table("A layer's MLP block: the engine's five kernels against one persistent kernel, per call",
              ["arch", "rows", "kernels", "time", "engine / this", "max error vs fp32"],
              [r for a in archs for r in mlp_rows(a, ARCHS[a], rows)])


if __name__ == "__main__":
    main()
