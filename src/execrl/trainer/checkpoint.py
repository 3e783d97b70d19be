"""Checkpoints: the policy in HF format (config.json, safetensors, tokenizer: loadable by
from_pretrained and vLLM), plus optimizer, scheduler, RNG states and data position, written
atomically; the last K are kept.

States are full and keyed by parameter name whatever the number of ranks that wrote them
(trainer/distributed.py gathers a sharded model's), so a run resumes on any number of GPUs.

With LoRA (policy.lora) `policy/` holds the adapter in peft's format (adapter_config.json,
adapter_model.safetensors: PeftModel.from_pretrained loads it) and, with policy.lora.save_merged,
`merged/` the merged model in HF format. The adapter's base_model_name_or_path is the model the run
started from, or, where the run made its own base (the built-in model, a supervised warm-up),
`base/` beside the checkpoints, written once (save_base)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from execrl import lora as lora_state
from execrl.config.tree import dotted_leaves
from execrl.trainer import distributed as dist

PREFIX = "step_"
BASE = "base"  # a LoRA run's own base model, beside the checkpoints
REFERENCE = "reference"  # the KL penalty's reference where a warm-up made it (the policy as GRPO began)


def save(directory: str | Path, step: int, model, tokenizer, optimizer, scheduler, extra: dict, keep: int,
         serve_dtype: torch.dtype | None = None, lora=None) -> Path:
    """Every rank calls it (gathering the full state is collective); rank 0 writes. `policy/` holds
    the master weights as they are (fp32 with mixed precision); its config.json names `serve_dtype`,
    the dtype to serve in. `lora`: a LoRA run's Adapter (what its policy/ holds instead)."""
    root = Path(directory)
    final = root / f"{PREFIX}{step:06d}"
    merged = lora is not None and lora.save_merged
    weights, optim_state = dist.full_state(model, optimizer, trained_only=lora is not None and not merged)
    if dist.is_main():
        root.mkdir(parents=True, exist_ok=True)
        for left in [*root.glob(f".tmp-{PREFIX}*"), *root.glob(f".old-{PREFIX}*")]:  # (a save or a deletion cut
            shutil.rmtree(left, ignore_errors=True)  # short: the run holds the directory, so none is another's)
    _publish(final, lambda tmp: _write(tmp, model, tokenizer, weights, optim_state, scheduler, step, extra,
                                       serve_dtype, lora, merged), after=lambda: _keep(root, final, keep))
    return final


def _keep(root: Path, final: Path, keep: int) -> None:
    """The `keep` newest complete checkpoints stay, `final` among them (an incomplete one a resume passed over, newer
    than it, counted among K deleted every complete one); each other one is renamed before it is deleted (cut short,
    rmtree left a step's weights with no trainer_state.pt, an incomplete checkpoint nothing deleted)."""
    complete = [p for p in sorted(root.glob(f"{PREFIX}*")) if (p / "trainer_state.pt").is_file()]
    for old in [p for p in complete if p != final][:-(keep - 1) or None] if keep > 0 else []:
        gone = old.with_name(f".old-{old.name}")
        old.rename(gone)
        shutil.rmtree(gone, ignore_errors=True)


class WriteFailed(RuntimeError):
    """A checkpoint that could not be written (a full disk, a quota); the ones before it are intact."""


def _free(root: Path) -> str:
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return "unknown"
    return f"{free / 2**30:.1f} GiB" if free >= 2**30 else f"{free / 2**20:.1f} MiB"


def _write(tmp: Path, model, tokenizer, weights, optim_state, scheduler, step, extra, serve_dtype, lora, merged):
    """A checkpoint's files, into `tmp`."""
    if lora is None:
        model.save_pretrained(tmp / "policy", state_dict=weights)
        if serve_dtype is not None:
            _name_dtype(tmp / "policy" / "config.json", serve_dtype)
    else:
        lora.write(tmp / "policy", weights)
        if getattr(model, "generation_config", None) is not None:  # (its ends: the run's stop_token_ids; an
            model.generation_config.save_pretrained(tmp / "policy")  # adapter's eval stopped at the base's)
        if merged:
            model.save_pretrained(tmp / "merged", state_dict=lora_state.merged_state(weights, lora.scaling,
                                                                                      serve_dtype))
            tokenizer.save_pretrained(tmp / "merged")
    tokenizer.save_pretrained(tmp / "policy")
    torch.save(optim_state, tmp / "optimizer.pt")
    torch.save({"scheduler": scheduler.state_dict(), "step": step, "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
                "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None, **extra},
               tmp / "trainer_state.pt")


def _name_dtype(config_path: Path, dtype: torch.dtype) -> None:
    config = json.loads(config_path.read_text())
    for key in ("dtype", "torch_dtype"):  # transformers 5 writes dtype; 4.x torch_dtype
        if key in config:
            config[key] = str(dtype).split(".")[1]
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def latest(directory: str | Path) -> Path | None:
    """The newest complete checkpoint, as rank 0 sees it (multi-node runs need a shared checkpoint
    directory). Every rank calls it."""
    return dist.from_main(latest_here(directory))


def latest_here(directory: str | Path) -> Path | None:
    """The newest complete checkpoint as this process sees it: no collective (a message one rank writes after its own
    failure, while the others wait in another collective)."""
    found = sorted(p for p in Path(directory).glob(f"{PREFIX}*") if (p / "trainer_state.pt").is_file())
    return found[-1] if found else None


def passed_over(directory: str | Path, found: Path | None) -> list[Path]:
    """The checkpoints newer than `found` (the one resumed from, or None) that latest() passed over: incomplete, with
    no trainer_state.pt (a copy cut short, a file deleted by hand)."""
    return sorted(p for p in Path(directory).glob(f"{PREFIX}*") if p.is_dir() and not (p / "trainer_state.pt").is_file()
                  and (found is None or p.name > found.name))


def load_weights(path: Path, sub: str = "policy") -> dict:
    """The policy's tensors from a checkpoint (or the adapter's, in a LoRA run), on rank 0 ({}
    elsewhere: they are broadcast from rank 0)."""
    from safetensors.torch import load_file

    files = sorted((path / sub).glob("*.safetensors")) if dist.is_main() else []
    if not dist.from_main(bool(files)):  # (every rank stops: torch loads an empty state dict as nothing missing)
        raise ValueError(f"{path / sub} holds no weights (no .safetensors file): the checkpoint is incomplete. Move "
                         f"{path} aside to resume from the one before it")
    weights = {}
    for part in _read_on_main(path, [(f.relative_to(path).as_posix(), lambda f=f: load_file(f)) for f in files]):
        weights.update(part)
    return weights


def _read_on_main(path: Path, reads: list[tuple[str, Callable]]) -> list:
    """Each (file, read) of checkpoint `path` read on rank 0 ([] elsewhere); where a file cannot be read, every rank
    raises ValueError naming it (safetensors' own error class, OSError, a wild header's MemoryError, pickle's...)."""
    out, damaged = [], None
    for file, read in reads if dist.is_main() else ():
        try:
            out.append(read())
        except Exception as e:  # noqa: BLE001
            damaged = _unreadable(path, file, e)
            break
    if damaged := dist.from_main(damaged):  # (every rank stops)
        raise ValueError(damaged)
    return out


def _unreadable(path: Path, file: str, e: Exception) -> str:
    """What to do about a file of checkpoint `path` that cannot be read (a disk's damage, a copy cut short)."""
    return (f"{path / file} cannot be read ({type(e).__name__}: {str(e)[:120]}): the checkpoint is damaged. Move "
            f"{path} aside to resume from the one before it, or start a new run")


def save_base(directory: str | Path, model, tokenizer) -> Path:
    """A LoRA run's own base model (HF format), for its adapters' base_model_name_or_path; every
    rank calls it."""
    path = Path(directory) / BASE
    weights, _ = dist.full_state(model, None)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, state_dict=lora_state.base_state(weights))
        tokenizer.save_pretrained(tmp)
    _publish(path, write)
    return path.resolve()


def _publish(path: Path, write, after=None) -> None:
    """`write(folder)` into a temporary folder beside `path`, then renamed to it, then `after()` (by rank 0; every
    rank waits): the folder is complete or absent. A write that fails (a full disk, a quota) removes its partial copy
    and raises WriteFailed on every rank (rank 0 alone raising left the others waiting in the barrier until torchrun
    killed them)."""
    failed = None
    if dist.is_main():
        tmp = path.with_name(f".tmp-{path.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            write(tmp)
        except Exception as e:
            shutil.rmtree(tmp, ignore_errors=True)
            failed = (f"checkpoint {path.name} could not be written to {path.parent} ({type(e).__name__}: "
                      f"{str(e)[:200]}; {_free(path.parent)} free there): its partial copy is removed")
    dist.meet(f"rank 0 wrote {path.name}")  # (a large model's state to a slow disk: minutes)
    failed = dist.from_main(failed)
    if failed:
        raise WriteFailed(failed)
    if dist.is_main():
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)  # atomic: the folder is complete or absent
        if after is not None:
            after()
    dist.meet(f"rank 0 put {path.name} in place")  # no rank goes on (or exits) before the folder is in place (the
    # old checkpoints deleted, on a slow disk: minutes, a review's find)


def save_reference(directory: str | Path, model, reference) -> None:
    """The KL penalty's reference weights (HF format, `model`'s config), once, beside the checkpoints: a resumed run
    reads them back (load_reference) where the reference is not the model it loads; every rank calls it."""
    weights, _ = dist.full_state(reference, None)
    _publish(Path(directory) / REFERENCE, lambda tmp: model.save_pretrained(tmp, state_dict=weights))


def load_reference(directory: str | Path, reference) -> bool:
    """The saved reference into `reference` (every rank calls it); False where none was saved."""
    path = Path(directory) / REFERENCE
    if not dist.from_main((path / "config.json").is_file()):
        return False
    dist.load_full_state(reference, None, load_weights(path, ""), None)
    return True


def trainer_state(path: Path, map_location=None, mmap: bool = False) -> dict:
    """A checkpoint's step, config, schedule, sampler and random states (trainer_state.pt); `mmap`: its tensors mapped,
    read only where used."""
    try:
        return torch.load(path / "trainer_state.pt", weights_only=False, map_location=map_location, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - pickle's, torch's or the zip reader's errors alike
        raise ValueError(_unreadable(path, "trainer_state.pt", e)) from None


def load(path: Path, model, optimizer, scheduler, state: dict, lora: bool = False, own_base: bool = False) -> None:
    """The checkpoint's weights and optimizer state into the run's, and its `state` (trainer_state) applied.
    `own_base`: a LoRA run that made its base (saved beside its checkpoints): read back under the adapters (only
    then: a base another run left there replaced the frozen weights of one whose base is policy.model_name)."""
    read = _read_on_main(path, [("optimizer.pt", lambda: torch.load(path / "optimizer.pt", weights_only=False))])
    optim_state = read[0] if read else {}  # (rank 0's; the others load theirs from it)
    if not lora:
        dist.load_full_state(model, optimizer, load_weights(path), optim_state)
    else:  # the run's own base (if it made one), then the adapters
        base = path.parent / BASE
        if own_base:
            if not dist.from_main((base / "config.json").is_file()):
                raise ValueError(f"{base} is missing: the LoRA run's own base (the model its adapters were trained "
                                 f"on), saved beside its checkpoints. Restore it, or start a new run")
            dist.load_full_state(model, None, lora_state.to_model_names(load_weights(base, ""), model), None,
                                 part="frozen")
        dist.load_full_state(model, optimizer, lora_state.from_adapter_state(load_weights(path)), optim_state,
                             part="trainable")
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_rng"])


# keys a resumed run may change: how long it runs, when it validates, logs and saves, and how its
# work is batched and run, on how many GPUs included (none of them changes what a step computes)
RESUMABLE = ("grpo.max_num_steps", "grpo.max_num_epochs", "grpo.val_", "grpo.max_val_samples", "logger.",
             "checkpointing.", "env.code.num_workers", "policy.generation_batch_size", "policy.logprob_batch_size",
             "policy.train_micro_batch_size", "policy.torch_compile", "policy.activation_checkpointing",
             "policy.generation.cuda_graphs", "policy.generation.compile", "policy.generation.sync_every",
             "policy.generation.val_", "policy.device", "data.validation", "offline", "cluster.",
             "policy.lora.save_merged",  # (what later checkpoints hold, not what trains)
             "policy.shared_prompts", "policy.dynamic_batching.", "env.code.grading_share",
             "env.reward_model.batch_size")
# (the same math, rounding aside: how passes are batched, when grading runs; the out-of-memory advice names them, and
# a resume took none)


def config_changes(saved: dict, now: dict) -> tuple[list[str], list[str]]:
    """The differences between the config a checkpoint was trained with and the resuming run's, each
    as 'key: old -> new': (those that apply from the resumed step, those that cannot: the
    checkpoint's optimizer, schedule, data position and weights were made under the old values)."""
    old, new = dict(dotted_leaves(saved)), dict(dotted_leaves(now))
    for leaves in (old, new):  # (split_validation_size's default was 0.0, now null: the same for all but
        for k, v in leaves.items():  # OpenMathInstruct-2, whose class holds 0.05 out where it is unset)
            if k.endswith("split_validation_size") and v == 0:
                leaves[k] = None
    changed = [k for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]
    fields, sections = schema_paths()
    parent = {k: k.rpartition(".")[0] for k in changed}
    # a settings section's key that one side lacks is a setting added or dropped since the checkpoint was written: no
    # value of it is the checkpoint's to set back to (an earlier version's checkpoint was refused with advice no
    # config could follow). A key of a free-form dict (hf_config_overrides, optimizer.kwargs), or of a section null
    # on one side, is a change as any other
    added = {k for k in changed if k not in old and k in fields and parent[k] in sections and parent[k] not in old}
    dropped = {k for k in changed
               if k not in new and k not in fields and parent[k] in sections and parent[k] not in new}
    said = [f"{k}: {new[k]!r} (a setting new since the checkpoint was written)" if k in added else
            f"{k}: {old[k]!r} (a setting execrl no longer has)" if k in dropped else
            f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed]
    applies = [k.startswith(RESUMABLE) or k in added or k in dropped for k in changed]
    return [s for s, a in zip(said, applies) if a], [s for s, a in zip(said, applies) if not a]


def schema_paths() -> tuple[set[str], set[str]]:
    """The config schema's dotted keys: (every field's, those of the fields that are sections of settings; "" the
    root's)."""
    from typing import get_args

    from pydantic import BaseModel

    from execrl.config import MasterConfig

    fields, sections = set(), {""}

    def models(annotation):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield annotation
        for arg in get_args(annotation):
            yield from models(arg)

    def walk(model, prefix: str) -> None:
        for name, field in model.model_fields.items():
            fields.add(prefix + name)
            for sub in models(field.annotation):
                sections.add(prefix + name)
                walk(sub, prefix + name + ".")

    walk(MasterConfig, "")
    return fields, sections

