"""Training and validation problems, and the seeded, resumable order in which they are drawn."""

from __future__ import annotations

import random

from execrl.builtin import BUILTIN_TASKS, arith_problems, feedback_episode
from execrl.config import MasterConfig
from execrl.tasks import DATASETS, DatasetError, Problem, check_trainable, load_problems


def dataset_key(name: str) -> str:
    """A registered loader for a dataset name or hub id (e.g. nvidia/Nemotron-RL-coding-competitive_coding)."""
    if name in DATASETS:
        return name
    for key, info in DATASETS.items():
        if info.hub_id and info.hub_id.lower() == name.lower():
            return key
    raise DatasetError(f"data.train.dataset_name {name!r}: not a known dataset ({sorted(DATASETS)}, "
                       f"{list(BUILTIN_TASKS)}) or hub id")


def load_data(cfg: MasterConfig) -> tuple[list[Problem], list[Problem], dict[str, list[dict]]]:
    """(train problems, validation problems, reference turns for warm-up by problem id)."""
    d, g = cfg.data, cfg.grpo
    if d.train.dataset_name == "builtin:arith-code":
        train = arith_problems("train", 4096, g.seed)
        val = arith_problems("validation", g.max_val_samples, g.seed)
        refs = {p.id: [{"role": "assistant", "content": ref}] for p, ref in train}
        if cfg.env.multi_turn.kind == "unit_tests":  # half of them: a wrong first attempt, its feedback, the fix
            rng = random.Random(g.seed)
            refs.update({p.id: feedback_episode(p, ref, rng, cfg) for p, ref in train[1::2]})
        return [p for p, _ in train], [p for p, _ in val], refs
    key = dataset_key(d.train.dataset_name)
    check_trainable(key, d.train.split)
    train, _ = load_problems(key, d.train.split, d.train.path, d.train.max_tests, **d.train.options)
    if d.validation is not None:
        val, _ = load_problems(dataset_key(d.validation.dataset_name), d.validation.split, d.validation.path,
                               d.validation.max_tests, **d.validation.options)
    elif d.train.split_validation_size > 0:
        order = list(range(len(train)))
        random.Random(g.seed).shuffle(order)
        cut = max(1, int(len(train) * d.train.split_validation_size))
        held = set(order[:cut])
        val = [p for i, p in enumerate(train) if i in held]
        train = [p for i, p in enumerate(train) if i not in held]
    else:
        val = []
    return train, val[: g.max_val_samples], {}


class ProblemSampler:
    """Epochs of shuffled problems; its state (epoch, position) goes into checkpoints for exact resume."""

    def __init__(self, problems: list[Problem], seed: int, shuffle: bool = True):
        if not problems:
            raise DatasetError("no training problems")
        self.problems, self.seed, self.shuffle = problems, seed, shuffle
        self.kinds = {p.kind for p in problems}  # code, math: the verdicts every step's metrics report
        self.epoch, self.pos = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(len(self.problems)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def next(self, n: int) -> list[Problem]:
        out = []
        while len(out) < n:
            if self.pos == len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._make_order()
            out.append(self.problems[self._order[self.pos]])
            self.pos += 1
        return out

    @property
    def passes(self) -> float:
        """Passes over the problems drawn so far (1.5: one epoch and half of the next)."""
        return self.epoch + self.pos / len(self.problems)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._make_order()
