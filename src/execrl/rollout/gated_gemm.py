"""Decode's gate/up projection and silu(gate) x up as one Triton kernel, for steps of few rows.

At 16 rows a decode step's GEMMs stream their weights and little else, and cuBLAS's gate/up GEMM and the compiled
silu x up after it are two kernels where one does: the kernel below multiplies the rows by the gate and up halves
of the joined weight in one pass and writes silu(gate) x up, each half rounded to the weight's dtype first, as the
two kernels round them: 1.08-1.14x on the pair at 8-16 rows, a 1.5B decode step at 16 rows 1.03-1.04x (bench/README.md,
"Gate/up and silu x up as one kernel at few rows"). On Hopper (TMA, the tensor-memory copy engine) a second kernel
takes 17 to TMA_ROWS rows: the weight is the tensor cores' M side (64 of gate's and up's rows a program), the rows
its N side, both read by TMA, each weight row read once: a 1.5B decode step at 32-64 rows 1.05x, 0.5B's 1.00-1.01x
("Decode GEMMs read by TMA"). At 128 rows cuBLAS and silu x up are as fast in a step, so the decoder uses the
kernels only at up to `max_rows(weight)` rows (decoder.CachedDecoder.decode's `few`).

Shapes: M rows, d model dim (K), I intermediate size (N); the weight [2 I, d], gate rows first (fuse.py).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs: the decoder's unfused path
    triton = None
try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # a Triton without host-side TMA descriptors: the few-rows kernel only
    TensorDescriptor = None

ROWS = 16  # at most this many rows per step
BM = 16  # the rows' block (one block of rows: M <= ROWS)
TILING = {"BN": 64, "BK": 128, "stages": 3}  # (output columns, input columns per step, pipeline stages)
TMA_ROWS = 64  # the TMA kernel's rows, at most: one block of them
TMA_TILING = {"BM": 64, "BK": 64, "stages": 4, "warps": 4}  # (gate's and up's rows a program, input columns per
# step, pipeline stages, warps)


def fits(weight: torch.Tensor) -> bool:
    """Whether the kernel takes this joined gate/up weight [2 I, d]: on a GPU with Triton, 16-bit, contiguous,
    its halves' columns and its input dim whole blocks of the tiling."""
    n, k = weight.shape[0] // 2, weight.shape[1]
    return triton is not None and weight.is_cuda and weight.dtype in (torch.bfloat16, torch.float16) and \
        weight.is_contiguous() and weight.shape[0] % 2 == 0 and n % TILING["BN"] == 0 and k % TILING["BK"] == 0


def max_rows(weight: torch.Tensor) -> int:
    """The most rows a decode step may give `gated_up` for this weight (fits): TMA_ROWS on Hopper (compute capability
    9; where the TMA kernel was measured) where the weight's halves and input dim are whole blocks of TMA_TILING,
    else ROWS."""
    n, k = weight.shape[0] // 2, weight.shape[1]
    if TensorDescriptor is None or not weight.is_cuda or torch.cuda.get_device_capability(weight.device)[0] != 9 or \
            n % TMA_TILING["BM"] or k % TMA_TILING["BK"] or weight.data_ptr() % 16:  # (TMA: 16-byte aligned)
        return ROWS
    return TMA_ROWS


if triton is not None:
    @triton.jit
    def tma_kernel(w_desc, x_desc, o_desc, N, K, BM: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
        """o [M, N] = silu(x [M, K] @ w[:N]^T) * (x @ w[N:2N]^T), each product rounded to o's dtype first; a program
        takes BM of N's columns (gate's rows n and up's rows N + n of w) and all M <= BT rows: the weight as the
        tensor cores' M side, each of its rows read once."""
        off_n = tl.program_id(0) * BM
        acc = tl.zeros((BM, BT), tl.float32)  # gate's [BM columns, BT rows]
        acc2 = tl.zeros((BM, BT), tl.float32)  # up's
        for k in range(0, K, BK):
            x = x_desc.load([0, k])  # [BT, BK] (rows past M read as zeros)
            acc = tl.dot(w_desc.load([off_n, k]), x.T, acc)
            acc2 = tl.dot(w_desc.load([N + off_n, k]), x.T, acc2)
        g = acc.to(o_desc.dtype).to(tl.float32)
        out = g * tl.sigmoid(g) * acc2.to(o_desc.dtype).to(tl.float32)
        o_desc.store([0, off_n], tl.trans(out).to(o_desc.dtype))  # (rows past M not written)

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
        if m > ROWS:  # (at most max_rows: TMA's kernel)
            t, bt = TMA_TILING, max(32, triton.next_power_of_2(m))
            x = x if x.data_ptr() % 16 == 0 else x.clone()  # (TMA reads 16-byte aligned rows; max_rows: the weight's)
            tma_kernel[(n // t["BM"],)](
                TensorDescriptor.from_tensor(weight, [t["BM"], t["BK"]]), TensorDescriptor.from_tensor(x, [bt, t["BK"]]),
                TensorDescriptor.from_tensor(out, [bt, t["BM"]]), n, k, BM=t["BM"], BT=bt, BK=t["BK"],
                num_warps=t["warps"], num_stages=t["stages"])
            return out
        bn, bk, stages = TILING["BN"], TILING["BK"], TILING["stages"]
        gemm_kernel[(n // bn, triton.cdiv(m, BM))](x, weight, x, out, m, n, k, x.stride(0), weight.stride(0),
                                                   out.stride(0), HAS_BIAS=False, GLU=True, BM=BM, BN=bn, BK=bk,
                                                   num_warps=4, num_stages=stages)
        return out

    @_gated_up.register_fake
    def _(x, weight):
        return x.new_empty(x.shape[0], weight.shape[0] // 2)


def gated_up(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """silu(gate) x up of x [..., d] under the joined gate/up weight [2 I, d] (fits), at most max_rows(weight) rows:
    [..., I]."""
    lead = x.shape[:-1]
    return _gated_up(x.reshape(-1, x.shape[-1]).contiguous(), weight).view(*lead, weight.shape[0] // 2)
