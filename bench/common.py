"""What the benchmarks share: the architectures, a random-init model of one, timing, peak memory, the run's metrics
and the markdown table. A script imports it as `from common import ...`: Python puts the script's own directory
(bench/) first on sys.path."""

from __future__ import annotations

import gc
import json
import random
import statistics
import time
from pathlib import Path
from typing import NamedTuple

import torch


class Arch(NamedTuple):
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool  # LM head tied to the input embedding


ARCHS = {  # the Qwen2.5 and Qwen2.5-Coder configs (at 0.5B and 1.5B the Coder models have the same shapes)
    "qwen2.5-0.5b": Arch(896, 24, 14, 2, 4864, 151936, True),
    "qwen2.5-1.5b": Arch(1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-coder-0.5b": Arch(896, 24, 14, 2, 4864, 151936, True),
    "qwen2.5-coder-1.5b": Arch(1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-3b": Arch(2048, 36, 16, 2, 11008, 151936, True),
    "qwen2.5-coder-7b": Arch(3584, 28, 28, 4, 18944, 152064, False),  # the 8-GPU production config's
    "tiny": Arch(64, 2, 4, 2, 128, 512, True),  # a smoke test of the scripts on a CPU
}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# `execrl train` overrides: no evaluation, checkpoints or TensorBoard; nothing compiled
QUIET = ["grpo.val_period=0", "grpo.val_at_start=false", "checkpointing.enabled=false",
         "logger.tensorboard_enabled=false"]
NO_COMPILE = ["policy.torch_compile=false", "policy.generation.compile=false"]


def device_name() -> str:
    return torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeat: int = 1):
    """fn's (last) output and its wall time per call, the device synchronized before and after."""
    sync()
    t = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    sync()
    return out, (time.perf_counter() - t) / repeat


def projections(arch) -> dict[str, tuple[int, int, bool]]:
    """name -> (out features, in features, bias) of the decode step's GEMMs (q/k/v and gate/up joined)."""
    head = arch.hidden // arch.heads
    d = arch.hidden
    return {"q/k/v": (d + 2 * arch.kv_heads * head, d, True), "o": (d, d, False),
            "gate/up": (2 * arch.intermediate, d, False), "down": (d, arch.intermediate, False),
            "LM head": (arch.vocab, d, False)}


def weight_copies(nbytes: int, at_least: int) -> int:
    """How many copies of an nbytes weight a timing loop cycles through, so that none is still in the L2 cache when it
    comes round again (as in a decode step, where every other weight passes through between two reads of one): at
    least `at_least` (a model's layers) and twice the GPU's L2 cache in all."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size if DEVICE == "cuda" else 0
    return max(at_least, -(-2 * l2 // nbytes))


def graph_us(calls: list, replays: int = 10) -> float:
    """Microseconds per call of `calls`, captured in that order in one CUDA graph (a decode step's setting: no launch
    cost between kernels), best of `replays` replays; on a CPU, timed eagerly. Give each call its own weights
    (`weight_copies`) where the real loop reads a layer's own, so that the L2 cache does not hold what a step reads from
    memory."""
    if DEVICE != "cuda":
        calls[0]()
        return timed(lambda: [c() for c in calls])[1] * 1e6 / len(calls)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls[:3]:
            c()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    graph.replay()
    best = float("inf")
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1000 / len(calls))
    return best


def median_of(n: int, fn):
    """fn's (first) output and its median time over n calls."""
    runs = [timed(fn) for _ in range(n)]
    return runs[0][0], statistics.median(t for _, t in runs)


def free_memory() -> None:
    gc.collect()  # the previous run's model and caches
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def fresh_peak() -> None:
    free_memory()
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else 0.0


def byte_tokenizer():
    """The built-in task's byte-level tokenizer (259 ids: a subset of every architecture's vocabulary)."""
    from execrl.models import BYTE_VOCAB, build_tokenizer

    return build_tokenizer([], vocab_size=BYTE_VOCAB)


def qwen2_config(arch: str, tok, vocab: int | None = None):
    """The architecture's Qwen2Config (vocab: another vocabulary size than the architecture's)."""
    from transformers import Qwen2Config

    a = ARCHS[arch]
    return Qwen2Config(vocab_size=vocab or a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                       num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                       tie_word_embeddings=a.tied, rms_norm_eps=1e-6, max_position_embeddings=32768,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def build(arch: str, device=DEVICE, init: str = "cpu"):
    """Random-init weights (seed 0, drawn on `init`) of the architecture in bf16 with fused projections, and the
    byte tokenizer."""
    from transformers import Qwen2ForCausalLM

    from execrl.rollout.fuse import fuse_projections

    tok = byte_tokenizer()
    torch.manual_seed(0)
    with torch.device(init):  # (a 7B model initialises in seconds on a GPU, minutes on a CPU)
        model = Qwen2ForCausalLM(qwen2_config(arch, tok))
    model = model.to(device, torch.bfloat16).eval()
    fuse_projections(model)  # as the trainer does with the execrl backend (same values, shared storage)
    return model, tok


def padding_prompt(tok, prompt_tokens: int = 128) -> str:
    """A system prompt that brings the built-in task's prompts to about `prompt_tokens` tokens."""
    from execrl.prompts import PromptConfig, build_messages, render
    from execrl.tasks import arith

    problem = arith.problem(random.Random(0), 0, "train")
    base = len(tok(render(build_messages(problem, PromptConfig()), tok), add_special_tokens=False)["input_ids"])
    return ("You are a careful programmer. " * 64)[:max(1, prompt_tokens - base - 12)]


def save_arch(arch: str, work: Path, init: str = "cpu") -> str:
    """Random-init weights of the architecture (drawn on `init`) and its tokenizer saved as an HF directory,
    work/model; returns a system prompt that pads the built-in task's prompts to about 128 tokens."""
    model, tok = build(arch, device=init, init=init)
    model.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    del model
    return padding_prompt(tok)


def step_overrides(model_dir: Path, steps: int, micro: int, system: str, log_dir: Path,
                   new_tokens: int = 256) -> list[str]:
    """`execrl train` overrides of the benchmarks' GRPO step: 16 prompts x 8 samples, ~128-token prompts (`system`
    pads them), `new_tokens` (256) new tokens forced, bf16 mixed precision, one optimizer step per GRPO step, no
    warm-up."""
    return [f"policy.model_name={model_dir}", f"grpo.max_num_steps={steps}", "warmup.sft_steps=0",
            "grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8", "policy.train_global_batch_size=128",
            f"policy.train_micro_batch_size={micro}", f"policy.logprob_batch_size={micro}",
            "policy.generation_batch_size=128", f"policy.max_total_sequence_length={max(400, 144 + new_tokens)}",
            f"policy.generation.max_new_tokens={new_tokens}", "policy.generation.ignore_eos=true",
            "policy.precision=bfloat16", f"prompt.system_prompt={system}", *QUIET, f"logger.log_dir={log_dir}",
            "policy.optimizer.kwargs.lr=1e-6"]


def read_metrics(log_dir) -> list[dict]:
    """A run's logger.log_dir/metrics.jsonl, one dict per line."""
    return [json.loads(x) for x in (Path(log_dir) / "metrics.jsonl").read_text().splitlines()]


def step_medians(log_dir) -> tuple[dict, int]:
    """The medians of a run's step times and logprob mismatch over its steps after the first (the first alone if
    there is one), and how many steps they are over."""
    ms = read_metrics(log_dir)
    warm = ms[1:] or ms
    return {k: statistics.median(m[k] for m in warm) for k in ("time/generate", "time/train", "time/step",
                                                               "train/logprob_mismatch")}, len(warm)


def table(title: str, header: list[str], rows: list) -> None:
    """A markdown table under a title line."""
    print(f"\n{title}\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print(end="", flush=True)
