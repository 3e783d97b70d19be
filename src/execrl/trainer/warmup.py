"""Supervised warm-up on reference completions (the built-in default's first few seconds):
cross-entropy on the model's turns only. A reference is the conversation after the prompt: the
model's turns (trained on unless marked `"train": False`) and the environment's (context), the
latter as token deltas of the chat template, exactly as in rollouts."""

from __future__ import annotations

import random

import torch

from execrl.control_tokens import MID, SEGMENT, control_pattern, plain_ids, special_ids, turn_end
from execrl.envs import TurnRenderer, called, make_env
from execrl.envs.unit_tests import feedback, public_part
from execrl.models import train_mode
from execrl.rollout.completion import end_ids
from execrl.sandbox import ProgramResult, TestResult, Verdict
from execrl.tasks import Problem
from execrl.tasks.problem import err
from execrl.trainer import distributed as dist
from execrl.trainer.optim import make_optimizer, optimizer_class
from execrl.trainer.precision import Weights, stochastic_round
from execrl.trainer.rollouts import encode


def feedback_reference(problem: Problem, rng: random.Random, cfg) -> list[dict]:
    """A warm-up reference for the unit-test feedback environment, from a problem that carries
    `wrong_attempts` (programs with their outputs on its tests) and a `reference_completion`: one
    wrong attempt, the environment's feedback on its public tests, then the right program. Only the
    right program is trained on (the wrong one is context), so the warm-up teaches using feedback,
    never making mistakes; a wrong attempt that passes the public tests gives the plain reference
    instead."""
    reference = {"role": "assistant", "content": problem.metadata["reference_completion"]}
    if "shown_tests" in problem.metadata:  # (its attempts' outputs are on the tests as written, some now left out)
        return [reference]
    wrong = rng.choice(problem.metadata["wrong_attempts"])
    public, hidden = public_part(problem.tests, cfg.env.multi_turn.public_tests)
    tests = [TestResult(Verdict.PASS) if got == out else TestResult(Verdict.FAIL, output=got)
             for got, out in zip(wrong["outputs"], public.outputs)]
    if all(t.verdict == Verdict.PASS for t in tests):
        return [reference]
    said = feedback(public, ProgramResult(Verdict.FAIL, tests), cfg.env.multi_turn.max_output_chars, hidden)
    return [{"role": "assistant", "content": wrong["content"], "train": False},
            {"role": cfg.env.multi_turn.observation_role, "content": said}, reference]


def answer_end(model, tokenizer, stop_token_ids: list[int] | None) -> int:
    """The token a reference answer ends with, as a sampled answer does: the chat template's end of turn where
    generation ends at it, else the EOS (or the first id that ends generation); ValueError naming the fix where no
    token ends generation."""
    ends = end_ids(model, tokenizer, stop_token_ids)
    for end in (turn_end(tokenizer), tokenizer.eos_token_id, *ends):
        if end is not None and end in ends:
            return end
    raise ValueError("the warm-up teaches each reference answer's end, and no token ends this model's generation "
                     "(its tokenizer and generation config name no EOS): set policy.generation.stop_token_ids=[ID] "
                     "(the chat template's end of turn), or warmup.sft_steps=0")


def reference_ids(prompt: list[int], turns: list[dict], tokenizer, end: int) -> tuple[list[int], list[int]]:
    """(token ids, labels) of a prompt and its reference turns, each of the model's ending with `end` (answer_end);
    labels are -100 where nothing is learned."""
    ids, labels = list(prompt), [-100] * len(prompt)
    control = control_pattern(tokenizer)
    specials = special_ids(tokenizer)
    for m in turns:
        if m["role"] == "assistant":  # (as text: a reference holding "<|im_end|>" would teach forged turns; a piece
            # after its header's text, or after a control token, as the whole conversation's text reads it)
            new = plain_ids(m["content"], tokenizer, control, SEGMENT if ids and ids[-1] in specials else MID) + [end]
            learn = new if m.get("train", True) else [-100] * len(new)
        else:
            new = TurnRenderer(tokenizer).env_turn([m], ids[-1])
            learn = [-100] * len(new)
        ids, labels = ids + new, labels + learn
    return ids, labels


BF16_ADAMW = "torchao.optim._AdamW"  # with bf16_stochastic_round: an update below half a bf16 step moves a weight on
# average


def _usable(name: str) -> bool:
    """Whether the optimizer `name` can be had here (optim.optimizer_class finds it)."""
    try:
        optimizer_class(name)
    except Exception:  # noqa: BLE001 - (an install that fails to import, whatever the reason: the plain optimizer)
        return False
    return True


def bf16_base(weights: Weights) -> bool:
    """Whether the warm-up trains bf16 weights that have no fp32 master though the run has one (a LoRA run's base,
    shared by the master and the compute copy; a bf16 model that is its own master rounds as its optimizer says)."""
    return weights.master is not weights.compute and any(p.requires_grad and p.dtype == torch.bfloat16
                                                         for p in weights.master.parameters())


def sft_warmup(weights: Weights, tokenizer, problems: list[Problem], references: dict[str, list[dict]], cfg,
               on_step=None) -> float:
    w = cfg.warmup
    rng = random.Random(cfg.grpo.seed)
    usable = [p for p in problems if p.id in references]
    model = weights.compute  # forward and backward; the master's optimizer applies the fp32 gradients
    device = next(model.parameters()).device
    # AdamW at the warm-up's rate; where the bf16 weights are their own master, the run's optimizer that
    # rounds them stochastically (plain AdamW would round small updates away)
    rounds = stochastic_round(cfg)
    name = cfg.policy.optimizer.name if rounds else "torch.optim.AdamW"
    if not rounds and bf16_base(weights):  # a LoRA run's base, trained here in bf16 with no fp32 master: plain AdamW
        rounds = dist.world_size() == 1 and _usable(BF16_ADAMW)  # rounded 84% of its updates away (a hunt's
        name = BF16_ADAMW if rounds else name  # find); (sharded: not checked yet, as config.checks says)
        if not rounds and dist.is_main():
            err.print("note: the warm-up trains this LoRA run's bf16 base without an fp32 master, and plain AdamW "
                      "rounds most of its updates away; with one process, pip install torchao (execrl[memory]) to "
                      "round them stochastically; or set policy.precision=float32", markup=False)
    opt = make_optimizer(weights, name, {"bf16_stochastic_round": True} if rounds else {}, lr=w.lr)
    loss_value = float("nan")
    if w.sft_steps and min(w.batch_size, len(usable)) < dist.world_size():
        raise ValueError(f"the warm-up needs an example per process in each batch: warmup.batch_size is {w.batch_size}, "
                         f"{len(usable)} training problems have reference solutions, {dist.world_size()} processes. "
                         f"Raise warmup.batch_size, or set warmup.sft_steps=0")
    end = answer_end(model, tokenizer, cfg.policy.generation.stop_token_ids)
    train_mode(model)
    for step in range(w.sft_steps):
        batch = dist.this_rank(rng.sample(usable, min(w.batch_size, len(usable))))  # every rank draws the same batch
        rows = [reference_ids(encode(called(make_env(cfg, None, p), "reset", p, p), tokenizer), references[p.id],
                              tokenizer, end)
                for p in batch]  # (the prompt as the episode's environment poses it)
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        attn = torch.zeros_like(ids)
        for i, (row, learn) in enumerate(rows):
            ids[i, :len(row)], labels[i, :len(row)], attn[i, :len(row)] = torch.tensor(row), torch.tensor(learn), 1
        # the mean over this rank's target tokens
        loss = model(input_ids=ids.to(device), attention_mask=attn.to(device), labels=labels.to(device)).loss
        num_targets = float((labels[:, 1:] != -100).sum())
        (all_targets,) = dist.sum_floats(num_targets)
        loss = loss * (num_targets / all_targets)  # its share of the mean over all ranks (gradients are summed)
        weights.zero_grad(opt)
        loss.backward()
        weights.accumulate_grads()
        weights.step(opt)
        (loss_value,) = dist.sum_floats(loss.item())
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    return loss_value
