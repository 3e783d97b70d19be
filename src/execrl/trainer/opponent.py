"""Self-play's frozen opponent (env.game.opponent): the player of the seats the policy does not
take, with an engine of its own. `snapshot`: a copy of the policy, refreshed every
env.game.opponent_refresh_steps steps and at the run's first step (after the warm-up; a resumed
run reads back the snapshot its checkpoint holds); `model`: a fixed model loaded once (env.game.opponent_model: a directory in HF
format, or an execrl checkpoint, whose policy/ is one). Its turns reach the trajectories as context
only (execrl.trainer.rollouts.players) and its seats are in no baseline. One process only: a sharded
policy would need the snapshot gathered on every rank."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from execrl.config import ConfigError
from execrl.models import load_model_and_tokenizer
from execrl.rollout import build_generator
from execrl.rollout.fuse import fuse_projections
from execrl.trainer import distributed as dist
from execrl.trainer import memory


class Opponent:
    def __init__(self, model: torch.nn.Module, generator, refresh_steps: int | None):
        self.model, self.generator, self.refresh_steps = model, generator, refresh_steps
        self.refreshed_at: int | None = None

    @torch.no_grad()
    def refresh(self, step: int, policy: torch.nn.Module) -> bool:
        """A snapshot opponent takes the policy's weights (in place: the engine keeps its buffers)
        at the run's first step and every refresh_steps after; True when it did."""
        if self.refresh_steps is None or (self.refreshed_at is not None and step % self.refresh_steps):
            return False
        for mine, theirs in zip(self.model.parameters(), policy.parameters(), strict=True):
            if mine is not theirs:  # (LoRA: the frozen base is shared)
                mine.copy_(theirs)
        self.refreshed_at = step
        return True

    def state_dict(self, policy: torch.nn.Module) -> dict | None:
        """A snapshot's weights (those it does not share with the policy: LoRA's adapters) and the step it took them
        at, for a checkpoint: a resumed run plays the same opponent (it took the policy at the resume, another)."""
        if self.refresh_steps is None or self.refreshed_at is None:
            return None
        theirs = {id(p) for p in policy.parameters()}
        return {"refreshed_at": self.refreshed_at, "weights": {
            name: p.detach().cpu().clone() for name, p in self.model.named_parameters() if id(p) not in theirs}}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        params = dict(self.model.named_parameters())
        for name, value in state["weights"].items():
            params[name].copy_(value)
        self.refreshed_at = state["refreshed_at"]


def other_ids(own, policy_tokenizer) -> str | None:
    """How the opponent's own tokenizer differs from the policy's, whose ids it is fed (a hunt's find: a Phi-3
    opponent of a Gemma policy read Gemma's ids as its own, its end ids as Gemma's tokens), else None."""
    mine, theirs = own.get_vocab(), policy_tokenizer.get_vocab()
    moved = sorted((t for t in theirs if mine.get(t) != theirs[t]), key=theirs.get)  # (tokens of its own besides
    if not moved:  # the policy's, a fine-tune's added ones, change no id of the policy's)
        return None
    return (f"{len(moved):,} of the policy's {len(theirs):,} tokens differ, e.g. {moved[0]!r}: id {theirs[moved[0]]} "
            f"in the policy's, {mine.get(moved[0])} in its own")


def build_opponent(cfg, policy: torch.nn.Module, tokenizer, slots: int) -> Opponent | None:
    g, gen = cfg.env.game, cfg.policy.generation
    if g.opponent == "self":
        return None
    if dist.world_size() > 1:
        raise ConfigError(f"env.game.opponent={g.opponent} runs in one process: launch without torchrun, or set "
                          "env.game.opponent=self")
    if g.opponent == "snapshot":  # (LoRA: a copy of the adapters over the policy's own frozen base, not a second base)
        model = copy.deepcopy(policy, memo={id(p): p for p in policy.parameters() if not p.requires_grad})
    else:
        path = Path(g.opponent_model).expanduser()
        checkpoint = any((path / "policy" / f).is_file() for f in ("config.json", "adapter_config.json"))
        path = path / "policy" if checkpoint else path  # (a checkpoint of ours: its policy, a LoRA adapter included)
        param = next(policy.parameters())
        model, own = load_model_and_tokenizer(str(path), device=str(param.device), dtype=str(param.dtype)[6:])
        if differs := other_ids(own, tokenizer):
            raise ConfigError(f"env.game.opponent_model {path}: its tokenizer is not the policy's ({differs}), and "
                              "the opponent reads and writes the policy's token ids: give a model of the policy's "
                              "tokenizer (a checkpoint of the same base model)")
        if model.config.vocab_size < len(tokenizer):
            raise ConfigError(f"env.game.opponent_model {path}: its vocabulary ({model.config.vocab_size}) is smaller "
                              f"than the policy's tokenizer's ({len(tokenizer)}): the opponent must share the "
                              "policy's tokenizer")
        if gen.backend == "execrl":
            fuse_projections(model)
    model.eval().requires_grad_(False)
    with memory.phase("generation", cfg):  # (its KV cache: generation's advice)
        generator = build_generator(model, tokenizer, gen.backend, slots, cfg.policy.max_total_sequence_length,
                                    gen.cuda_graphs, gen.sync_every, gen.compile, gen.stop_token_ids)
    return Opponent(model, generator, (g.opponent_refresh_steps or 10) if g.opponent == "snapshot" else None)
