"""LoRA under FSDP2 (two gloo processes on CPU, started by `execrl train cluster.gpus_per_node=2`): the same run as
one process: the same samples and rewards, the same losses up to summation order, the same adapters; the frozen
base sharded with them, the reference (adapters off) scored on the shards."""

import torch
from safetensors.torch import load_file

from tests.trainer.test_distributed import FAST, assert_same_metrics, one_process, two_processes

LORA = [*FAST, "policy.lora.enabled=true", "policy.lora.dim=4", "policy.optimizer.kwargs.lr=1e-3"]


def test_lora_on_two_gloo_processes_equals_one(tmp_path):
    one = one_process(tmp_path / "one", LORA)
    two = two_processes(tmp_path / "two", LORA)
    assert_same_metrics(one, two)
    a, b = (load_file(d / "ckpt" / "step_000002" / "policy" / "adapter_model.safetensors") for d in (one, two))
    assert a.keys() == b.keys() and all(".lora_" in k for k in a)
    moved = sum((v ** 2).sum() for k, v in a.items() if "lora_B" in k) ** 0.5  # (B starts at zero)
    apart = sum(((a[k] - b[k]) ** 2).sum() for k in a) ** 0.5
    assert moved > 1e-3 and apart / moved < 1e-3, (float(apart), float(moved))
    base_one, base_two = (load_file(d / "ckpt" / "base" / "model.safetensors") for d in (one, two))
    assert all(torch.equal(base_one[k], base_two[k]) for k in base_one)
