"""The library kernels a GRPO step leans on, against their alternatives and their floors: the decode step's GEMMs
(one Qwen2.5 layer's projections and the LM head at a decode batch's rows) under cuBLAS and cuBLASLt; the down
projection with the residual add after it, as cuBLAS's one GEMM against the engine's fp32 partial products over
parts of its input (decoder.partial_down, summed in the add's kernel); and the training pass's causal attention
(forward + backward, grouped key/value heads) under each SDPA backend.

    python bench/kernel_choices.py --archs qwen2.5-0.5b,qwen2.5-1.5b
    python bench/kernel_choices.py --sections down                       # the down projection's table alone
    python bench/kernel_choices.py --archs tiny --rows 4 --lengths 4x32   # CPU: the default choices only

Each GEMM is timed in one CUDA graph (the decode step's setting: no launch cost between kernels) as one call per
layer, each on that layer's own weights as a decode step reads them (more copies where a layer's weights would fit
in the L2 cache; the LM head: 20 calls on its one weight), best of 10 replays, as microseconds per call and the TB/s
at which it reads its weights. Attention is timed over 10 eager calls of forward + backward, as ms and TFLOP/s
(causal: half the score matrix, backward 2.5x the forward).
"""

import argparse
from contextlib import nullcontext
from functools import partial

import torch
import torch.nn.functional as F
from common import ARCHS, DEVICE, device_name, graph_us, projections, table, timed, weight_copies
from torch.nn.attention import SDPBackend, sdpa_kernel

GPU = DEVICE == "cuda"


def gemm_rows(name: str, arch, rows: list[int], libraries: list[str]) -> list[list]:
    dtype = torch.bfloat16 if GPU else torch.float32
    before = torch.backends.cuda.preferred_blas_library() if GPU else None
    out = []
    for m in rows:
        for what, (n, k, bias) in projections(arch).items():
            # each layer's own weights, as a decode step reads them (the LM head, one weight, is larger than the L2)
            copies = weight_copies(n * k * 2, 1 if what == "LM head" else arch.layers)
            ws = [torch.randn(n, k, device=DEVICE, dtype=dtype) for _ in range(copies)]
            b = torch.randn(n, device=DEVICE, dtype=dtype) if bias else None
            x = torch.randn(m, k, device=DEVICE, dtype=dtype)
            cells = []
            for lib in libraries:
                if GPU:
                    torch.backends.cuda.preferred_blas_library(lib)
                us = graph_us([partial(F.linear, x, w, b) for w in ws] * (20 if copies == 1 else 1))
                cells.append(f"{us:.1f} us ({n * k * ws[0].element_size() / us / 1e6:.2f} TB/s)")
            out.append([name, m, what, f"{n} x {k}", *cells])
    if GPU:
        torch.backends.cuda.preferred_blas_library(before)  # the library this process had (TORCH_BLAS_PREFER_CUBLASLT)
    return out


def down_rows(name: str, arch, rows: list[int], parts: list[int]) -> list[list]:
    """Decode's down projection and the residual add after it: cuBLAS's GEMM (with its own split-K and sum) then
    the add, against decoder.partial_down's fp32 partial products (one batched GEMM) whose sum, rounding and add are
    one kernel (summed, as the next layer's first kernel does it), for each count of parts; us per layer."""
    from execrl.rollout.decoder import partial_down, summed

    dtype = torch.bfloat16 if GPU else torch.float32
    fuse = torch.compile if GPU else (lambda f: f)  # (on a CPU: eager, a smoke run)
    add, add_parts = fuse(lambda y, r: y + r), fuse(lambda p, r: r + summed(p, r))
    n, k = arch.hidden, arch.intermediate
    ws = [torch.randn(n, k, device=DEVICE, dtype=dtype) * 0.02 for _ in range(weight_copies(n * k * 2, arch.layers))]
    out = []
    for m in rows:
        x, r = torch.randn(1, m, k, device=DEVICE, dtype=dtype), torch.randn(1, m, n, device=DEVICE, dtype=dtype)
        one = graph_us([partial(lambda w, x=x, r=r: add(F.linear(x, w), r), w) for w in ws])
        cells = []
        for p in parts:
            if k % p:
                cells.append(f"({k} % {p})")
                continue
            us = graph_us([partial(lambda w, p=p, x=x, r=r: add_parts(partial_down(x, w, p), r), w) for w in ws])
            cells.append(f"{us:.2f} ({one / us:.2f}x)")
        out.append([name, m, f"{n} x {k}", f"{one:.2f}", *cells])
    return out


BACKENDS = {  # label -> (SDPA backends allowed, key/value heads passed grouped (enable_gqa) or repeated)
    "default, grouped": (None, True), "cuDNN, grouped": ([SDPBackend.CUDNN_ATTENTION], True),
    "flash, grouped": ([SDPBackend.FLASH_ATTENTION], True), "flash, repeated": ([SDPBackend.FLASH_ATTENTION], False),
    "cuDNN, repeated": ([SDPBackend.CUDNN_ATTENTION], False),
    "efficient, repeated": ([SDPBackend.EFFICIENT_ATTENTION], False)}


def attention_row(name: str, arch, rows: int, length: int, backends: list[str]) -> list:
    """Forward + backward of causal SDPA at a training micro-batch's shape, per backend."""
    dtype = torch.bfloat16 if GPU else torch.float32
    d, groups = arch.hidden // arch.heads, arch.heads // arch.kv_heads
    q = torch.randn(rows, arch.heads, length, d, device=DEVICE, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(rows, arch.kv_heads, length, d, device=DEVICE, dtype=dtype, requires_grad=True)
            for _ in range(2))
    grad = torch.randn_like(q)
    flops = 4 * rows * arch.heads * length * length * d / 2 * 3.5  # causal; backward 2.5x the forward
    cells = []
    for label in backends:
        allowed, grouped = BACKENDS[label]

        def step(grouped=grouped):
            kk, vv = (k, v) if grouped else (k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))
            F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=grouped).backward(grad)

        try:
            with sdpa_kernel(allowed) if allowed else nullcontext():
                timed(step, 3)
                s = timed(step, 10)[1]
            cells.append(f"{s * 1e3:.3f} ms ({flops / s / 1e12:.3g} TF/s)")
        except RuntimeError as e:  # a backend that does not take this shape or device
            cells.append(f"not run ({str(e).splitlines()[0][:40]})")
    return [name, f"{rows} x {length}", f"{arch.heads}/{arch.kv_heads} x {d}", *cells]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--rows", default="16,128,256", help="decode batch rows for the GEMMs")
    ap.add_argument("--lengths", default="auto", help="training micro-batches as ROWSxLENGTH,... (auto: the "
                    "benchmarks' step, 0.5B 128x384, 1.5B 32x384 and 4x4224)")
    ap.add_argument("--parts", default="2,4,8", help="the down projection's table: counts of parts")
    ap.add_argument("--sections", default="gemm,down,attention")
    args = ap.parse_args()
    archs, sections = args.archs.split(","), args.sections.split(",")
    rows = [int(r) for r in args.rows.split(",")]
    libraries = ["cublas", "cublaslt"] if GPU else ["default"]
    backends = list(BACKENDS) if GPU else ["default, grouped"]
    print(f"device: {device_name()}, torch {torch.__version__}")
    if "gemm" in sections:
        gemms = [r for a in archs for r in gemm_rows(a, ARCHS[a], rows, libraries)]
        table("Decode GEMMs, per call in a CUDA graph", ["arch", "rows", "GEMM", "weight", *libraries], gemms)
    if "down" in sections:
        parts = [int(p) for p in args.parts.split(",")]
        downs = [r for a in archs for r in down_rows(a, ARCHS[a], rows, parts)]
        table("The down projection and the residual add, us per layer in a CUDA graph (ratio: one GEMM's time over "
              "the parts')", ["arch", "rows", "weight", "one GEMM + add", *(f"{p} parts" for p in parts)], downs)
    if "attention" not in sections:
        return
    shapes = {"qwen2.5-0.5b": ["128x384"], "qwen2.5-1.5b": ["32x384", "4x4224"]}
    attn = []
    for a in archs:
        for shape in (args.lengths.split(",") if args.lengths != "auto" else shapes.get(a, ["4x384"])):
            r, t = (int(x) for x in shape.split("x"))
            attn.append(attention_row(a, ARCHS[a], r, t, backends))
    table("Training attention, causal forward + backward", ["arch", "micro-batch", "heads q/kv x dim", *backends],
          attn)


if __name__ == "__main__":
    main()
