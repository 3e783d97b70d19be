"""Bradley-Terry reward models: the pairwise loss, a short training loop on (chosen, rejected) conversations, and
the built-in task's judge (builtin:arith-judge), trained at start-up on its preferences: the program of the operation
the prompt asks for over another operation's, or over a broken program. Its score then
means something a policy can raise: how right and well formed the program looks, read without running it."""

from __future__ import annotations

import os
import random
import time

import torch
import torch.nn.functional as F

from execrl.rewards.reward_model import RewardModel

Pair = tuple[list[dict], list[dict]]  # (chosen conversation, rejected conversation)


def bt_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """-log sigmoid(r_chosen - r_rejected), the mean over pairs. chosen, rejected: [P] scores."""
    return -F.logsigmoid(chosen - rejected).mean()


def train_pairs(rm: RewardModel, pairs: list[Pair], steps: int, lr: float = 1e-3, batch_size: int = 32,
                seed: int = 0) -> float:
    """AdamW steps on batches of pairs drawn from `pairs`, the learning rate decaying linearly to a tenth; returns the
    last batch's loss."""
    encoded = [(rm.encode(c), rm.encode(r)) for c, r in pairs]
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(rm.model.parameters(), lr=lr, weight_decay=0.0)
    decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0 - 0.9 * i / max(steps, 1))
    rm.model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        batch = rng.sample(encoded, min(batch_size, len(encoded)))
        scores = rm.forward([c for c, _ in batch] + [r for _, r in batch])  # [2P]: the chosen, then the rejected
        loss = bt_loss(scores[:len(batch)], scores[len(batch):])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        decay.step()
    rm.model.eval()
    return float(loss.detach())


def accuracy(rm: RewardModel, pairs: list[Pair]) -> float:
    """The share of pairs whose chosen conversation scores above its rejected one."""
    chosen, rejected = rm([c for c, _ in pairs]), rm([r for _, r in pairs])
    return sum(c > r for c, r in zip(chosen, rejected)) / max(len(pairs), 1)


def arith_pairs(prompt, n: int, seed: int) -> list[Pair]:
    """n preference pairs of builtin:arith-code problems (a stream of their own, apart from training's and
    validation's), posed as `prompt` poses them: the reference program chosen, a wrong or broken one rejected."""
    from execrl.prompts import PromptConfig, build_messages
    from execrl.tasks.arith import problem

    rng = random.Random(f"judge-{seed}")
    pairs = []
    for i in range(n):
        p = problem(rng, i, "judge")
        messages = build_messages(p, prompt or PromptConfig())
        right = p.metadata["reference_completion"]
        pairs.append(([*messages, {"role": "assistant", "content": right}],
                      [*messages, {"role": "assistant", "content": _worse(right, p, rng)}]))
    return pairs


def _worse(right: str, p, rng: random.Random) -> str:
    """A worse answer than `right`: another operation's program, or a broken program (the right one or a wrong one
    cut short, or with one to four characters changed, inserted or deleted: a policy that wanders off the programs
    it was shown finds no region the judge never saw)."""
    wrong = rng.choice(p.metadata["wrong_attempts"])["content"]
    if rng.random() < 0.5:
        return wrong
    text = rng.choice([right, wrong])
    if rng.random() < 0.2:  # cut short
        return text[:rng.randrange(1, len(text) - 1)]
    for _ in range(rng.randint(1, 4)):
        at, char = rng.randrange(len(text)), rng.choice("abimnprstxyz+-*/(),:=._ \n0123456789`")
        text = rng.choice([text[:at] + char + text[at + 1:], text[:at] + char + text[at:], text[:at] + text[at + 1:]])
    return text if text != right else wrong


def arith_judge(prompt, seed: int, device: torch.device, steps: int = 450):
    """(model, tokenizer) of builtin:arith-judge: a tiny Qwen2 reward model (the built-in policy's byte tokenizer, half
    its width) trained `steps` steps on arith_pairs on the device (75 s on 2 CPU cores), its held-out accuracy
    printed."""
    from rich.console import Console

    from execrl.models import BYTE_VOCAB, build_tiny_model, build_tokenizer

    start = time.perf_counter()
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    rm = RewardModel(build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=seed, reward_head=True).to(device), tok)
    pairs = arith_pairs(prompt, 4096, seed)
    train, held_out = pairs[:-256], pairs[-256:]
    loss = train_pairs(rm, train, steps, lr=3e-3, batch_size=32, seed=seed)
    Console(stderr=True, quiet=os.environ.get("RANK", "0") != "0").print(f"built-in reward model builtin:arith-judge: {steps} Bradley-Terry steps on the built-in "
                               f"task's preferences in {time.perf_counter() - start:.0f} s, loss {loss:.3f}, held-out "
                               f"preference accuracy {accuracy(rm, held_out):.3f}")
    return rm.model, tok
