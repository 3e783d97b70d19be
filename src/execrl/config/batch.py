"""The batch arithmetic of a GRPO step, checked once and spelled out by `execrl train --dry-run`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from execrl.config.load import ConfigError
from execrl.config.schema import MasterConfig


@dataclass(frozen=True)
class Split:
    """How a pass's rows become micro-batches: `sequences` at a time, or with a token budget as many
    as fit in `tokens` padded tokens (each micro-batch's longest sequence, rounded up to `round_to`,
    times its rows), sorted by length so that like lengths go together. A sequence longer than the
    budget goes alone."""
    sequences: int
    tokens: int | None = None
    round_to: int = 1

    def width(self, length: int) -> int:
        """A sequence's padded tokens in a micro-batch: its length rounded up to round_to."""
        return -(-length // self.round_to) * self.round_to

    def parts(self, lengths: list[int], rows) -> list[list[int]]:
        """The rows (indices into `lengths`, the sequences' lengths) in micro-batches."""
        order = sorted(rows, key=lambda i: lengths[i])
        if self.tokens is None:
            return [order[i:i + self.sequences] for i in range(0, len(order), self.sequences)]
        parts: list[list[int]] = []
        for i in order:  # ascending: each row is the longest of its micro-batch so far
            width = self.width(lengths[i])
            if parts and parts[-1] and (len(parts[-1]) + 1) * width <= self.tokens:
                parts[-1].append(i)
            else:
                parts.append([i])
        return parts

    def describe(self, what: str) -> str:
        if self.tokens is None:
            return f"{what}: {self.sequences} sequences each"
        return (f"{what}: by tokens, at most {self.tokens} padded tokens each (lengths rounded up to "
                f"{self.round_to}; the number of micro-batches varies with the samples' lengths)")


@dataclass(frozen=True)
class BatchPlan:
    num_gpus: int
    group_size: int  # grpo.num_generations_per_prompt: the G samples of one prompt
    samples_per_step: int  # prompts x generations
    global_batch: int  # samples per optimizer step (all GPUs)
    prompts_per_optimizer_step: int  # global_batch / group_size: whole groups
    prompts_per_round: int  # prompts drawn per generation round: num_prompts_per_step, or with dynamic sampling
                            # that x batch_multiplier (at least 1)
    optimizer_steps_per_rollout: int
    per_gpu_batch: int  # samples per optimizer step on one GPU (the most: groups may not split evenly over GPUs)
    micro_batch: int
    micro_batches_per_optimizer_step: int  # gradient accumulation on one GPU (by count)
    train_split: Split  # training's micro-batches
    score_split: Split  # scoring passes' (logprobs without gradient)
    notes: tuple[str, ...] = ()

    def describe(self, cfg: MasterConfig) -> str:
        grpo = cfg.grpo
        lines = [
            f"prompts per step x generations = samples per step: {grpo.num_prompts_per_step} x "
            f"{self.group_size} = {self.samples_per_step}",
            f"samples per optimizer step (global batch): {self.global_batch} "
            f"= {self.prompts_per_optimizer_step} whole groups",
            f"optimizer steps per rollout: {self.samples_per_step} / {self.global_batch} = "
            f"{self.optimizer_steps_per_rollout}",
            f"GPUs: {cfg.cluster.num_nodes} node(s) x {cfg.cluster.gpus_per_node} = {self.num_gpus}; per GPU per "
            f"optimizer step: {self.per_gpu_batch} samples",
        ]
        if self.train_split.tokens is None:
            lines.append(f"micro-batches per optimizer step per GPU: ceil({self.per_gpu_batch} / {self.micro_batch}) = "
                         f"{self.micro_batches_per_optimizer_step} (gradient accumulation)")
        else:
            lines += [self.train_split.describe("training micro-batches (policy.dynamic_batching)"),
                      self.score_split.describe("scoring passes")]
        if grpo.use_dynamic_sampling:
            lines.append(f"training steps: {grpo.max_num_steps}; dynamic sampling: each step generates rounds of "
                         f"{self.prompts_per_round} prompts x {self.group_size} until {grpo.num_prompts_per_step} "
                         f"groups with differing rewards are found, {grpo.dynamic_sampling_max_gen_batches + 1} rounds "
                         "at most (dynamic_sampling_max_gen_batches + 1, as NeMo RL counts)")
        else:
            lines.append(f"training steps: {grpo.max_num_steps}; samples generated in all: "
                         f"{grpo.max_num_steps * self.samples_per_step}")
        # an epoch is floor(problems / num_prompts_per_step) steps (setup.steps_per_epoch): fewer problems than this
        # end the run first
        need = grpo.num_prompts_per_step * -(-grpo.max_num_steps // grpo.max_num_epochs)
        if need > grpo.num_prompts_per_step:
            lines.append(f"  (at most: grpo.max_num_epochs={grpo.max_num_epochs} passes over the training problems "
                         f"end the run first where they are fewer than {need}; the run says so as it starts)")
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


def gpus(cfg: MasterConfig) -> int:
    """The GPUs (processes) the config asks for: cluster.gpus_per_node x cluster.num_nodes."""
    return cfg.cluster.gpus_per_node * cfg.cluster.num_nodes


def plan(cfg: MasterConfig) -> BatchPlan:
    grpo, p = cfg.grpo, cfg.policy
    n_gpus = gpus(cfg)
    group_size, samples = grpo.num_generations_per_prompt, grpo.num_prompts_per_step * grpo.num_generations_per_prompt
    if min(grpo.num_prompts_per_step, group_size, p.train_global_batch_size, p.train_micro_batch_size, n_gpus) < 1:
        raise ConfigError("batch sizes, generations and GPU counts must all be at least 1")
    notes = []
    global_batch = p.train_global_batch_size
    if global_batch > samples:
        notes.append(f"policy.train_global_batch_size {global_batch} > {samples} samples per step: one optimizer "
                     f"step per rollout, over all {samples} samples (NeMo RL's code stops here: it asserts that the "
                     "samples are a multiple of the global batch)")
        global_batch = samples
    if global_batch % group_size:
        raise ConfigError(f"policy.train_global_batch_size {global_batch} must be a multiple of "
                          f"grpo.num_generations_per_prompt {group_size}: groups are never split across optimizer "
                          "steps")
    if samples % global_batch:  # (the sizes that fit: whole groups that divide the step; "e.g. 60" was refused next)
        fits = [d * group_size for d in range(1, grpo.num_prompts_per_step + 1) if grpo.num_prompts_per_step % d == 0]
        near = sorted({max([f for f in fits if f < global_batch], default=fits[0]), min(f for f in fits
                                                                                         if f > global_batch)})
        raise ConfigError(f"samples per step ({samples}) must be a multiple of policy.train_global_batch_size "
                          f"({global_batch}), e.g. {' or '.join(map(str, near))}")
    groups = global_batch // group_size  # per optimizer step
    if groups % n_gpus:  # each GPU trains on whole groups, so some on one more than others (or on none)
        few, many = groups // n_gpus, groups // n_gpus + 1
        notes.append(f"the {groups} groups of an optimizer step do not split evenly over {n_gpus} GPUs: "
                     f"{n_gpus - groups % n_gpus} GPU(s) train on {few} group(s) and {groups % n_gpus} on {many} "
                     "(a group stays on one GPU; the gradient is the same, the work is uneven: for even work make "
                     f"policy.train_global_batch_size / {group_size} a multiple of {n_gpus})")
    per_gpu = -(-groups // n_gpus) * group_size  # the most samples a GPU trains on per optimizer step
    micro = min(p.train_micro_batch_size, per_gpu)
    # prompts per round: NeMo RL's int(num_prompts_per_step x batch_multiplier), truncated (16 x
    # 1.3: 20)
    per_round = max(1, int(grpo.num_prompts_per_step * grpo.batch_multiplier)) if grpo.use_dynamic_sampling \
        else grpo.num_prompts_per_step

    def part(total: int, r: int) -> int:  # rank r's share of `total` items split contiguously (distributed.part)
        return (r + 1) * total // n_gpus - r * total // n_gpus

    if grpo.use_dynamic_sampling and any(part(groups, r) and not part(per_round, r) for r in range(n_gpus)):
        # (each GPU fills its groups from its part of each round: one that needs some and has no part never did)
        fits = math.ceil(100 * n_gpus / grpo.num_prompts_per_step) / 100
        raise ConfigError(f"dynamic sampling's rounds of {per_round} prompt(s) (int(grpo.num_prompts_per_step "
                          f"{grpo.num_prompts_per_step} x grpo.batch_multiplier {grpo.batch_multiplier})) are fewer "
                          f"than the {n_gpus} GPUs, each of which generates from its part of a round (some GPU needs "
                          f"groups and has none): raise grpo.batch_multiplier to at least {fits:g}")
    dyn = p.dynamic_batching
    train_split, score_split = Split(micro), Split(p.logprob_batch_size)
    if dyn.enabled:  # NeMo RL's defaults: the budget of a full micro-batch of the longest sequences
        train_split = Split(micro, dyn.train_mb_tokens or p.max_total_sequence_length * p.train_micro_batch_size,
                            dyn.sequence_length_round)
        score_split = Split(p.logprob_batch_size, dyn.logprob_mb_tokens
                            or p.max_total_sequence_length * p.logprob_batch_size, dyn.sequence_length_round)
        for key, split, planned in (("train_mb_tokens", train_split, ", and the memory plan counts those"),
                                    ("logprob_mb_tokens", score_split, "")):
            if split.tokens < p.max_total_sequence_length:  # (a long-context hunt's find: the plan counted the budget)
                notes.append(f"policy.dynamic_batching.{key} {split.tokens} is less than one sequence of "
                             f"policy.max_total_sequence_length {p.max_total_sequence_length}: a longer sequence goes "
                             f"alone, so a pass can hold {split.width(p.max_total_sequence_length)} tokens{planned}")
    return BatchPlan(n_gpus, group_size, samples, global_batch, global_batch // group_size, per_round,
                     samples // global_batch, per_gpu, micro, -(-per_gpu // micro), train_split, score_split,
                     tuple(notes))
