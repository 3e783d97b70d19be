"""Training and validation problems, and the seeded, resumable order in which they are drawn."""

from __future__ import annotations

import random

from execrl.config import MasterConfig
from execrl.config.schema import DatasetConfig
from execrl.tasks import DATASETS, DatasetError, Problem, check_trainable, load_problems
from execrl.trainer.warmup import feedback_reference


def dataset_key(name: str) -> str:
    """A registered loader for a dataset name or hub id (e.g. nvidia/Nemotron-RL-coding-competitive_coding)."""
    if name in DATASETS:
        return name
    for key, info in DATASETS.items():
        if info.hub_id and info.hub_id.lower() == name.lower():
            return key
    raise DatasetError(f"data.train.dataset_name {name!r}: not a known dataset ({sorted(DATASETS)}) or hub id")


def load_split(d: DatasetConfig, seed: int) -> list[Problem]:
    """One configured split's problems; a generated dataset is seeded by grpo.seed unless its options say otherwise."""
    key = dataset_key(d.dataset_name)
    options = ({"seed": seed} if DATASETS[key].generated else {}) | d.options
    return load_problems(key, d.split, d.path, d.max_tests, **options)[0]


def load_data(cfg: MasterConfig) -> tuple[list[Problem], list[Problem], dict[str, list[dict]]]:
    """(train problems, validation problems, reference turns for warm-up by problem id: those of the problems that
    carry a reference completion, and with the unit-test environment every other one of them a wrong first attempt,
    the feedback on it and the fix)."""
    data, seed = cfg.data, cfg.grpo.seed
    check_trainable(dataset_key(data.train.dataset_name), data.train.split)
    train = load_split(data.train, seed)
    if data.validation is not None:
        val = load_split(data.validation, seed)
    elif DATASETS[dataset_key(data.train.dataset_name)].generated:  # a stream of its own is held out
        val = load_split(data.train.model_copy(update={"split": "validation"}), seed)
    elif data.train.split_validation_size > 0:
        order = list(range(len(train)))
        random.Random(seed).shuffle(order)
        cut = max(1, int(len(train) * data.train.split_validation_size))
        held = set(order[:cut])
        val = [p for i, p in enumerate(train) if i in held]
        train = [p for i, p in enumerate(train) if i not in held]
    else:
        val = []
    refs = {p.id: [{"role": "assistant", "content": p.metadata["reference_completion"]}]
            for p in train if "reference_completion" in p.metadata}
    if cfg.env.multi_turn.kind == "unit_tests":
        rng = random.Random(seed)
        refs.update({p.id: feedback_reference(p, rng, cfg) for p in train[1::2] if "wrong_attempts" in p.metadata})
    return train, val[: cfg.grpo.max_val_samples], refs


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
