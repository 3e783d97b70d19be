"""Checkpoints: the policy in HF format (config.json, safetensors, tokenizer: loadable by from_pretrained and vLLM),
plus optimizer, scheduler, RNG states and data position, written atomically; the last K are kept."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import torch

PREFIX = "step_"


def save(directory: str | Path, step: int, model, tokenizer, optimizer, scheduler, extra: dict, keep: int) -> Path:
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "policy")
    tokenizer.save_pretrained(tmp / "policy")
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "step": step,
                "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None, **extra},
               tmp / "trainer_state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)  # atomic: a checkpoint directory is either complete or absent
    for old in sorted(root.glob(f"{PREFIX}*"))[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest(directory: str | Path) -> Path | None:
    found = sorted(p for p in Path(directory).glob(f"{PREFIX}*") if (p / "trainer_state.pt").is_file())
    return found[-1] if found else None


def load(path: Path, model, optimizer, scheduler) -> dict:
    from safetensors.torch import load_file

    weights = {}
    for f in sorted((path / "policy").glob("*.safetensors")):
        weights.update(load_file(f))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any(not k.endswith("lm_head.weight") for k in missing):  # tied lm_head is not saved
        raise RuntimeError(f"checkpoint {path} does not match the model: missing {missing}, unexpected {unexpected}")
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state
