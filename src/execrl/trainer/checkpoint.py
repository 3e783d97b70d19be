"""Checkpoints: the policy in HF format (config.json, safetensors, tokenizer: loadable by from_pretrained and vLLM),
plus optimizer, scheduler, RNG states and data position, written atomically; the last K are kept.

States are full and keyed by parameter name whatever the number of ranks that wrote them (trainer/distributed.py
gathers a sharded model's), so a run resumes on any number of GPUs."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import torch

from execrl.trainer import distributed as dist

PREFIX = "step_"


def save(directory: str | Path, step: int, model, tokenizer, optimizer, scheduler, extra: dict, keep: int,
         serve_dtype: torch.dtype | None = None) -> Path:
    """Every rank calls it (gathering the full state is collective); rank 0 writes. `policy/` holds the master
    weights as they are (fp32 with mixed precision); its config.json names `serve_dtype`, the dtype to serve in."""
    root = Path(directory)
    final = root / f"{PREFIX}{step:06d}"
    weights, optim_state = dist.full_state(model, optimizer)
    if dist.is_main():
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-{PREFIX}{step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp / "policy", state_dict=weights)
        if serve_dtype is not None:
            _name_dtype(tmp / "policy" / "config.json", serve_dtype)
        tokenizer.save_pretrained(tmp / "policy")
        torch.save(optim_state, tmp / "optimizer.pt")
        torch.save({"scheduler": scheduler.state_dict(), "step": step, "torch_rng": torch.get_rng_state(),
                    "python_rng": random.getstate(),
                    "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None, **extra},
                   tmp / "trainer_state.pt")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)  # atomic: a checkpoint directory is either complete or absent
        for old in sorted(root.glob(f"{PREFIX}*"))[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()  # no rank goes on (or exits) before the checkpoint is complete
    return final


def _name_dtype(config_path: Path, dtype: torch.dtype) -> None:
    config = json.loads(config_path.read_text())
    for key in ("dtype", "torch_dtype"):  # transformers 5 writes dtype; 4.x torch_dtype
        if key in config:
            config[key] = str(dtype).split(".")[1]
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def latest(directory: str | Path) -> Path | None:
    """The newest complete checkpoint, as rank 0 sees it (multi-node runs need a shared checkpoint directory)."""
    found = sorted(p for p in Path(directory).glob(f"{PREFIX}*") if (p / "trainer_state.pt").is_file())
    return dist.from_main(found[-1] if found else None)


def load_weights(path: Path) -> dict:
    """The policy's tensors from a checkpoint, on rank 0 ({} elsewhere: they are broadcast from rank 0)."""
    from safetensors.torch import load_file

    weights = {}
    for f in sorted((path / "policy").glob("*.safetensors")) if dist.is_main() else []:
        weights.update(load_file(f))
    return weights


def load(path: Path, model, optimizer, scheduler) -> dict:
    optim_state = torch.load(path / "optimizer.pt", weights_only=False) if dist.is_main() else {}
    dist.load_full_state(model, optimizer, load_weights(path), optim_state)
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_rng"])
    return state
