"""The reward model env.reward_model names: a hub id or HF directory, or builtin:arith-judge, the
built-in task's judge, trained at start-up on its preferences (the program of the operation the
prompt asks for over another operation's, or over a broken program): its score then means something
a policy can raise, how right and well formed the program looks, read without running it."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import torch

from execrl.config.reward_model import ARITH_JUDGE
from execrl.models import ModelNotFound, load_pretrained, pick_device, read_tokenizer
from execrl.rewards.bradley_terry import Pair, accuracy, train_pairs
from execrl.rewards.reward_model import RewardModel, check_head, probe


def load_reward_model(cfg, device: str = "auto", offline: bool | None = None, prompt=None,
                      observation_role: str | None = None) -> RewardModel:
    """env.reward_model's model on the device. `prompt`: the built-in judge's (it is trained on the
    conversations the run's prompts make; always from seed 0, so that training and `execrl eval`
    read the same judge); `observation_role`: a multi-turn run's environment turns' (checked)."""
    dev = pick_device(device)
    if cfg.model_name == ARITH_JUDGE:
        model, tok = arith_judge(prompt, 0, dev)
    else:
        from transformers import AutoModelForSequenceClassification

        model, tok = load_pretrained(AutoModelForSequenceClassification, cfg.model_name, str(dev), cfg.precision,
                                     offline, cfg.tokenizer.name if cfg.tokenizer.name != cfg.model_name else None,
                                     key="env.reward_model.tokenizer.name")
    checked(cfg, tok, model.config, prompt, observation_role)
    # the pad its own forward passes over (RewardModel.last_tokens); the built-in judge was trained on last tokens
    saved_pad = model.config.pad_token_id if cfg.model_name != ARITH_JUDGE else None
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id
    return RewardModel(model, tok, cfg.batch_size, cfg.max_model_len, cfg.tokenizer.chat_template_kwargs, saved_pad)


def checked(cfg, tok, config, prompt, observation_role: str | None = None) -> None:
    """The reward model's tokenizer with env.reward_model's chat template, and what both loads refuse: no sequence
    classifier of one output, a template that refuses the run's conversation."""
    if cfg.tokenizer.chat_template:
        tok.chat_template = cfg.tokenizer.chat_template
    check_head(config)
    probe(tok, cfg.tokenizer.chat_template_kwargs, getattr(prompt, "system_prompt", None), observation_role)


def check_reward_model(cfg, offline: bool | None = None, prompt=None) -> None:
    """What load_reward_model refuses that its config.json and tokenizer show, without its weights: execrl eval checks
    it before sampling and loads the weights after (beside the policy, they would take its KV cache's memory)."""
    if cfg.model_name == ARITH_JUDGE:
        return
    from transformers import AutoConfig

    offline = offline if offline is not None else os.environ.get("HF_HUB_OFFLINE") == "1"
    local = Path(cfg.model_name).expanduser()
    source = str(local) if local.exists() else cfg.model_name
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=offline, trust_remote_code=False)
        tok = read_tokenizer(cfg.tokenizer.name if cfg.tokenizer.name not in (None, cfg.model_name) else source,
                             offline)
    except (OSError, ValueError) as e:
        raise ModelNotFound(f"cannot load the reward model {cfg.model_name!r} ({str(e).splitlines()[0][:200]}): a "
                            "reward model's directory holds config.json, its weights and its tokenizer's files, as "
                            "save_pretrained writes them") from None
    checked(cfg, tok, config, prompt)


def arith_pairs(prompt, n: int, seed: int) -> list[Pair]:
    """n preference pairs of builtin:arith-code problems (a stream of their own, apart from
    training's and validation's), posed as `prompt` poses them: the reference program chosen, a
    wrong or broken one rejected."""
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
    """A worse answer than `right`: another operation's program, or a broken program (the right one
    or a wrong one cut short, or with one to four characters changed, inserted or deleted: a policy
    that wanders off the programs it was shown finds no region the judge never saw)."""
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
    """(model, tokenizer) of builtin:arith-judge: a tiny Qwen2 reward model (the built-in policy's
    byte tokenizer, half its width) trained `steps` steps on arith_pairs on the device (75 s on 2
    CPU cores), its held-out accuracy printed."""
    from execrl.console import stderr_console
    from execrl.models import BYTE_VOCAB, build_tiny_model, build_tokenizer

    start = time.perf_counter()
    say = stderr_console(quiet=os.environ.get("RANK", "0") != "0").print
    say(f"training the built-in reward model builtin:arith-judge ({steps} steps; 1-3 minutes on 2 CPU cores)")
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    rm = RewardModel(build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=seed, reward_head=True).to(device), tok)
    pairs = arith_pairs(prompt, 4096, seed)
    train, held_out = pairs[:-256], pairs[-256:]
    loss = train_pairs(rm, train, steps, lr=3e-3, batch_size=32, seed=seed)
    say(f"built-in reward model builtin:arith-judge: {steps} Bradley-Terry steps on the built-in "
        f"task's preferences in {time.perf_counter() - start:.0f} s, loss {loss:.3f}, held-out "
        f"preference accuracy {accuracy(rm, held_out):.3f}")
    return rm.model, tok
