"""Training and validation problems, and the seeded, resumable order in which they are drawn."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import random
from collections.abc import Callable
from itertools import zip_longest

from execrl.config import MasterConfig
from execrl.config.schema import DatasetConfig
from execrl.rewards.math_answers import VERIFIER, boxed_under_dapo
from execrl.sandbox.inside.protocol import encode
from execrl.tasks import DATASETS, DatasetError, Problem, check_trainable, dataset_key, load_problems
from execrl.tasks.held_out import held_evaluation_sets
from execrl.tasks.problem import err
from execrl.trainer import distributed as dist
from execrl.trainer.warmup import feedback_reference

GRADING_RULES = 2  # how training grades its problems; 2: the tests a prompt shows left out, repeats once (2026-12-04)


def load_split(d: DatasetConfig, seed: int, repeat: bool = True, train: bool = False) -> list[Problem]:
    """One configured split's problems, each `repeat` times (repeat=False: once); a generated dataset is seeded by
    grpo.seed unless its options say otherwise; `train`: graded on the tests their prompts do not show."""
    key = dataset_key(d.dataset_name)
    options = ({"seed": seed} if DATASETS[key].generated or DATASETS[key].own else {}) | {
        k: v for k, v in (("input_key", d.input_key), ("output_key", d.output_key)) if v is not None} | d.options
    problems = load_problems(key, d.split_name, d.path, d.max_tests, train=train, **options)[0]
    return [p for _ in range(d.repeat if repeat else 1) for p in problems]  # (the set again and again, as NeMo RL's
    # concatenated copies: each problem N times in a row made an unshuffled step one problem's, a hunt's find)


def prompts_digest(problems: list[Problem], graded: bool = False) -> str:
    """The problems' ids and prompts, in order, hashed (hex); `graded`: their answers too (not their tests: a call
    test's set argument prints in the order of each process's string hashes)."""
    digest = hashlib.sha256()
    for p in problems:
        what = [p.id, p.messages, *([p.answer] if graded else [])]
        digest.update(json.dumps(what, sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()


def problem_set(problems: list[Problem]) -> int:
    """The validation problems (ids and prompts, in order) as a number below 2**24 (exact in TensorBoard's float32): a
    resume onto another validation set of the same size joined its eval curve silently (a hunt's find)."""
    return int(prompts_digest(problems)[:6], 16)


def hold_out(problems: list[Problem], size: float, seed: int) -> tuple[list[Problem], list[Problem]]:
    """(kept, held out): a seeded share of the problems (`size` below 1: ceil(size x problems), as NeMo RL's split,
    Hugging Face's train_test_split, counts it: 18.7 is 19), or that number of them (1 or more)."""
    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    count = int(size) if size >= 1 else math.ceil(len(problems) * size)
    if count >= len(problems):
        raise DatasetError(f"split_validation_size={size:g} holds out {count} problems of {len(problems)}: none "
                           "would train; hold out fewer")
    held = set(order[:count])
    return [p for i, p in enumerate(problems) if i not in held], [p for i, p in enumerate(problems) if i in held]


def load_data(cfg: MasterConfig) -> tuple[list[Problem], list[Problem], dict[str, list[dict]]]:
    """(train problems, validation problems (all of them, each source's in turn), reference turns for warm-up by
    problem id: those of the problems that carry a reference completion (self-play: a whole match from one seat),
    and with the unit-test environment every other one of them a wrong first attempt, the feedback on it and the
    fix). As NeMo RL: the training sets' problems together; validation = what each one holds out
    (split_validation_size) and the data.validation sets."""
    data, seed = cfg.data, cfg.grpo.seed
    trains, vals = data.train_sets, data.validation_sets
    train, val = [], []  # val: one list of problems per source
    for d in trains:
        info = DATASETS[dataset_key(d.dataset_name)]
        check_trainable(info.name, d.split_name, d.path)
        problems = load_split(d, seed, repeat=False, train=True)  # (repeated below: no copy of a held-out problem is
        # trained on)
        if held := held_evaluation_sets(problems):
            (name, found, total), where = held[0], d.dataset_name + (f" from {d.path}" if d.path else "")
            raise DatasetError(f"the training set {where} holds {name}: {found} of its {total} problems, found by "
                               "their text; never train on an evaluation set (train on the dataset's training split)")
        size = d.split_validation_size if d.split_validation_size is not None else info.default_held_out
        if d.split_validation_size is None and size and info.holds_out and dist.is_main():
            err.print(f"{info.name}: {size:g} of its problems held out for validation, as NeMo RL's class holds "
                      "them out where split_validation_size is unset (set it to 0 to train on all)", markup=False)
        if size > 0 and info.holds_out:
            problems, held = hold_out(problems, size, seed)
            val.append(held)
        elif info.generated and "validation" in info.splits and not vals:  # a stream of its own is held out
            val.append(load_split(d.model_copy(update={"split": "validation"}), seed))
        train += [p for _ in range(d.repeat) for p in problems]
    for d in vals:
        val.append(load_split(d, seed))
    val = [p for turn in zip_longest(*val) for p in turn if p is not None]  # the sources interleaved: where
    # grpo.max_val_samples cuts (setup.training_data), each keeps its share
    if (trained := trained_prompts(train, val)) and dist.is_main():
        err.print(f"warning: {trained:,} of {len(val):,} validation problems pose a training problem's prompt: eval/ "
                  "metrics measure problems the run trains on (validate on other problems: another file, or "
                  "data.validation: null with data.train.split_validation_size)", markup=False)
    own_ids(train + val)
    impl = cfg.env.math.math_verify_impl
    asked = {p.id.split("/")[0]: p.metadata[VERIFIER] for p in train + val if p.metadata.get(VERIFIER, impl) != impl}
    # (DAPO's prompts ask for an "Answer:" line, which hf_math_verify does not look for)
    for name, wants in asked.items() if dist.is_main() else ():
        err.print(f"[yellow]{name}'s prompts ask for the answer line that {wants} reads, and "
                  f"env.math.math_verify_impl is {impl} (NeMo RL's default, which its DAPO recipes change): "
                  f"set env.math.math_verify_impl={wants}[/]")
    if (note := boxed_under_dapo(train + val, impl, cfg.prompt, "env.math.math_verify_impl")) and dist.is_main():
        err.print(note, style="yellow", markup=False, highlight=False)
    for p in train + val:
        if p.kind == "math":
            p.metadata[VERIFIER] = impl
    same_on_every_rank(train, val)
    refs = {p.id: p.metadata["reference_turns"] for p in train if "reference_turns" in p.metadata}  # (self-play)
    refs.update({p.id: [{"role": "assistant", "content": p.metadata.get("warmup_completion",
                                                                         p.metadata["reference_completion"])}]
                 for p in train if "reference_completion" in p.metadata})
    if cfg.env.multi_turn.kind == "unit_tests":
        rng = random.Random(seed)
        refs.update({p.id: feedback_reference(p, rng, cfg) for p in train[1::2] if "wrong_attempts" in p.metadata})
    return train, val, refs


def same_on_every_rank(train: list[Problem], val: list[Problem]) -> None:
    """Every process loads the problems itself: DatasetError on every one where any loaded others than rank 0 (ids,
    prompts and answers, in order). A loader of one's own that draws without the seed it is given, or lists a directory or a
    set in no fixed order, gave each process other problems, and each trained its share of a batch no other saw,
    without a word (a hunt's find)."""
    if dist.world_size() == 1:
        return
    mine = (prompts_digest(train, graded=True), prompts_digest(val, graded=True))
    others = dist.sum_floats(float(mine != dist.from_main(mine)))[0]
    if others:
        raise DatasetError(f"{others:.0f} of the run's {dist.world_size()} processes loaded other training or "
                           "validation problems than rank 0 (other rows or answers, or another order): a loader of "
                           "your own must give every process the same list; draw with the seed it is passed (its "
                           "`seed` argument, grpo.seed) and sort what it reads from a directory or a set")


def trained_prompts(train: list[Problem], val: list[Problem]) -> int:
    """How many validation problems pose a training problem's prompt (a validation file that copies the training
    one, a hub split that repeats its problems), over problems read from files: a generated task poses one prompt
    with many tests or seeds."""
    def prompts(problems: list[Problem]):
        return (json.dumps(p.messages, sort_keys=True) for p in problems
                if not DATASETS[p.metadata["dataset"]].generated)
    seen = set(prompts(train))
    return sum(prompt in seen for prompt in prompts(val))


def own_ids(problems: list[Problem]) -> None:
    """Each problem its own id: a row that shares one with another row (two files' row numbers, a file's repeated
    ids) is renamed `id#2`, `id#3`..., with a line saying so. The warm-up's reference solutions are found by id: a
    problem took another's, and the rollouts' records named two problems alike. (A problem repeated by
    data.train.repeat is the same problem: it keeps its id.)"""
    owner: dict[str, Problem] = {}
    renamed, tried = [], {}  # (tried: each shared id's last suffix, so that 30,000 rows of one id are not quadratic)
    for p in problems:
        if owner.setdefault(p.id, p) is p:
            continue
        first = p.id
        n = tried.get(first, 1) + 1
        while f"{first}#{n}" in owner:
            n += 1
        tried[first] = n
        p.id = f"{first}#{n}"
        owner[p.id] = p
        renamed.append((first, p.id))
    if renamed and dist.is_main():
        err.print(f"{len(renamed)} problem(s) share an id with another row (e.g. {renamed[0][0]!r}, now "
                  f"{renamed[0][1]!r}; two files' rows numbered alike, or a file's repeated ids): each stays its "
                  "own problem in the rollouts' records (and, with a warm-up, keeps its own reference solution)",
                  markup=False)


class ProblemSampler:
    """Epochs of shuffled problems; its state (epoch, position) goes into checkpoints for exact
    resume."""

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
        """The next n problems. As NeMo RL's loader (drop_last): an epoch's last problems, fewer than n, are left
        out and the draw starts the next epoch (where n is at most the epoch: else draws run across epochs)."""
        if 0 < len(self._order) - self.pos < n <= len(self._order):
            self.epoch, self.pos = self.epoch + 1, 0
            self._order = self._make_order()
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

    def identity(self) -> dict:
        """What a checkpoint keeps of the problems its position is in (check compares it)."""
        return {"problems": len(self.problems), "fingerprint": self.fingerprint, "graded": self.graded,
                "rules": GRADING_RULES}

    @functools.cached_property
    def graded(self) -> str:
        """What the problems are graded against (references, tests), in order, hashed: a resume over the same prompts
        with other answers trains on another reward."""
        digest = hashlib.sha256()
        for p in self.problems:
            tests = None if p.tests is None else [type(p.tests).__name__, encode(dataclasses.asdict(p.tests))]
            digest.update(json.dumps([p.id, p.answer, p.language, tests]).encode() + b"\n")
        return digest.hexdigest()[:16]

    @functools.cached_property
    def fingerprint(self) -> str:
        """The problems' ids and prompts, in order, hashed: a checkpoint's position means something only over them."""
        return prompts_digest(self.problems)[:16]

    def check(self, state: dict, where: str, new_run: Callable[[], str]) -> None:
        """DatasetError where a checkpoint's position (saved at `where`, with `state`: identity()) was over other
        problems: the file shrank (its position past the end: an IndexError), or grew or changed (another stream,
        silently). `new_run()`: a run of its own's settings, for the message (read only where it is refused)."""
        if state.get("rules", 1) != GRADING_RULES and (state.get("fingerprint", self.fingerprint) != self.fingerprint
                                                       or state.get("graded", self.graded) != self.graded):
            raise DatasetError(f"{where} was trained under an earlier execrl's grading, and its problems are graded "
                               "otherwise now (training leaves out the tests a prompt shows, and a row that shows them "
                               "all; a repeated test counts once): the run would go on under another reward. Finish "
                               f"it with the execrl that started it, or start a new run: {new_run()}")
        if state.get("fingerprint", self.fingerprint) == self.fingerprint:  # (checkpoints before it: not checked)
            if state.get("graded", self.graded) != self.graded:
                raise DatasetError(f"the training problems are those {where} was trained on, but their reference "
                                   "answers or tests are not the same (an edited file, or another copy of it): the "
                                   "run would go on under another reward. Resume with the data it ran on, or start a "
                                   f"new run: {new_run()}")
            return
        then = state.get("problems")
        how = (f"{then:,} problems then, {len(self.problems):,} now" if then != len(self.problems) else
               f"{then:,} problems then and now, not the same ones or not in the same order")
        raise DatasetError(f"the training problems are not those {where} was trained on ({how}): its place in them "
                           "would draw another stream. Resume with the data it ran on, or start a new run: "
                           f"{new_run()}")

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._make_order()
