"""Decode's gate/up projection and silu(gate) x up as one Triton kernel, for steps of few rows.

At 16 rows a decode step's GEMMs stream their weights and little else, and cuBLAS's gate/up GEMM and the compiled
silu x up after it are two kernels where one does: the kernel below multiplies the rows by the gate and up halves
of the joined weight in one pass and writes silu(gate) x up, each half rounded to the weight's dtype first, as the
two kernels round them: 1.08-1.14x on the pair at 8-16 rows, a 1.5B decode step at 16 rows 1.03-1.04x (bench/README.md,
"Gate/up and silu x up as one kernel at few rows"). At 128-256 rows cuBLAS is as fast or faster ("A fused decode layer
in Triton"), so the decoder uses it only at up to ROWS rows (decoder.CachedDecoder.decode's `few`).

Shapes: M rows, d model dim (K), I intermediate size (N); the weight [2 I, d], gate rows first (fuse.py).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs: the decoder's unfused path
    triton = None

ROWS = 16  # at most this many rows per step
BM = 16  # the rows' block (one block of rows: M <= ROWS)
TILING = {"BN": 64, "BK": 128, "stages": 3}  # (output columns, input columns per step, pipeline stages)


def fits(weight: torch.Tensor) -> bool:
    """Whether the kernel takes this joined gate/up weight [2 I, d]: on a GPU with Triton, 16-bit, contiguous,
    its halves' columns and its input dim whole blocks of the tiling."""
    n, k = weight.shape[0] // 2, weight.shape[1]
    return triton is not None and weight.is_cuda and weight.dtype in (torch.bfloat16, torch.float16) and \
        weight.is_contiguous() and weight.shape[0] % 2 == 0 and n % TILING["BN"] == 0 and k % TILING["BK"] == 0


if triton is not None:
    @triton.jit
    def gemm_kernel(a_ptr, w_ptr, b_ptr, c_ptr, M, N, K, sam, swn, scm, HAS_BIAS: tl.constexpr, GLU: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        """c [M, N] = a [M, K] @ w[:N]^T (+ bias); GLU: silu(a @ w[:N]^T) * (a @ w[N:2N]^T), each product rounded
        to c's dtype first as the unfused ops round them. N, K: whole blocks of BN, BK."""
        pid_n, pid_m = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)  # [BM]
        rn = pid_n * BN + tl.arange(0, BN)  # [BN]
        rk = tl.arange(0, BK)  # [BK]
        acc = tl.zeros((BM, BN), tl.float32)
        acc2 = tl.zeros((BM, BN), tl.float32)
        wp = w_ptr + rn[:, None] * swn + rk[None, :]  # [BN, BK]
        ap = a_ptr + rm[:, None] * sam + rk[None, :]  # [BM, BK]
        for k in range(0, K, BK):
            a = tl.load(ap + k, mask=rm[:, None] < M, other=0.0)
            acc = tl.dot(a, tl.trans(tl.load(wp + k)), acc)
            if GLU:
                acc2 = tl.dot(a, tl.trans(tl.load(wp + N * swn + k)), acc2)
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn)[None, :].to(tl.float32)
        if GLU:
            g = acc.to(c_ptr.dtype.element_ty).to(tl.float32)
            acc = g * tl.sigmoid(g) * acc2.to(c_ptr.dtype.element_ty).to(tl.float32)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=rm[:, None] < M)

    @torch.library.custom_op("execrl::gated_up", mutates_args=())
    def _gated_up(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """An opaque operator (torch.compile and CUDA graphs take it as it is): x [M, d] -> silu(x Wg^T) x (x Wu^T)
        [M, I]."""
        m, k = x.shape
        n = weight.shape[0] // 2
        out = x.new_empty(m, n)
        bn, bk, stages = TILING["BN"], TILING["BK"], TILING["stages"]
        gemm_kernel[(n // bn, triton.cdiv(m, BM))](x, weight, x, out, m, n, k, x.stride(0), weight.stride(0),
                                                   out.stride(0), HAS_BIAS=False, GLU=True, BM=BM, BN=bn, BK=bk,
                                                   num_warps=4, num_stages=stages)
        return out

    @_gated_up.register_fake
    def _(x, weight):
        return x.new_empty(x.shape[0], weight.shape[0] // 2)


def gated_up(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """silu(gate) x up of x [..., d] under the joined gate/up weight [2 I, d] (fits), at most ROWS rows: [..., I]."""
    lead = x.shape[:-1]
    return _gated_up(x.reshape(-1, x.shape[-1]).contiguous(), weight).view(*lead, weight.shape[0] // 2)
