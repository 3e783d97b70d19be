"""NeMo RL's math datasets under NeMo RL's names (data.train.dataset_name: OpenMathInstruct-2,
DAPOMath17K, ...), read as NeMo RL's classes read them: the same hub id and split, the problem and
the reference answer from the same fields, nothing added or stripped (the prompt file is applied
later, as prompt.template).

A local copy is used where there is one (data.train.path, $EXECRL_DATA_DIR/<name>,
../shared/data/<name>: a file, or a folder with <split>.jsonl / .json / .parquet); otherwise the
hub, through the `datasets` library. The AIME sets are for evaluation only, as they are in NeMo RL's
configs (data.validation)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from execrl.tasks.problem import VERIFIER, DatasetError, Problem, read_rows
from execrl.tasks.registry import hub_rows, register


def _field(*path: str | int) -> Callable[[dict], object]:
    """A reader of a nested field (e.g. prompt[0].content); None where the row lacks it."""
    def read(row):
        value = row
        for part in path:
            try:
                value = value[part]
            except (KeyError, IndexError, TypeError):
                return None
        return value
    return read


def _rows(path: Path | None, split: str, hub_id: str, configs: tuple[str | None, ...]) -> list[dict]:
    if path is None:
        return [row for config in configs for row in hub_rows(hub_id, split, config=config)]
    if path.is_file():
        return read_rows(path)
    for suffix in (".jsonl", ".json", ".parquet"):
        if (path / f"{split}{suffix}").is_file():
            return read_rows(path / f"{split}{suffix}")
    raise DatasetError(f"{path}: no {split}.jsonl, {split}.json or {split}.parquet in it")


def _math(name: str, hub_id: str, splits: tuple[str, ...], problem: Callable, answer: Callable, *,
          configs: tuple[str | None, ...] = (None,), eval_only: tuple[str, ...] = (), deduplicate: bool = False,
          own_instructions: bool = False, verifier: str | None = None, holds_out: bool = False,
          default_held_out: float = 0.0):
    """Register a NeMo RL math dataset: rows -> (problem text, reference answer). The first of
    `splits` is the one read when none is named, as NeMo RL's class reads it; with `deduplicate` a
    problem text seen before is left out, and one seen with another answer is an error; with `own_instructions` the
    rows' prompts carry their answer format, and no instruction is added to them; `verifier`: the answer check those
    prompts ask for (execrl eval's default for them; a training run's is env.math.math_verify_impl, as NeMo RL's);
    `holds_out`, `default_held_out`: whether NeMo RL's class reads split_validation_size, and its default."""
    metadata = {**({"own_instructions": True} if own_instructions else {}), **({VERIFIER: verifier} if verifier else {})}

    def load(path, split, report, hub_id=hub_id, **_):
        problems, seen = [], {}
        for i, row in enumerate(_rows(path, split, hub_id, configs)):
            text, gold = problem(row), answer(row)
            if not isinstance(text, str) or not text.strip() or gold is None or str(gold).strip() == "":
                report.skip(i, "no problem text or no answer")
                continue
            if deduplicate and text in seen:
                if seen[text] != str(gold):
                    raise DatasetError(f"{name}: row {i} repeats an earlier problem with another answer "
                                       f"({seen[text]!r} then {str(gold)!r})")
                continue
            seen[text] = str(gold)
            problems.append(Problem(f"{name}/{split}/{i}", [{"role": "user", "content": text}], "math",
                                    answer=str(gold), metadata=dict(metadata)))
        return problems
    register(name, data_dir=name, splits=splits, eval_only=eval_only, hub_id=hub_id, default_split=splits[0],
             kind="math", holds_out=holds_out, default_held_out=default_held_out)(load)


_math("OpenMathInstruct-2", "nvidia/OpenMathInstruct-2", ("train_1M", "train", "train_2M", "train_5M"),
      _field("problem"), _field("expected_answer"), holds_out=True, default_held_out=0.05)
_math("DeepScaler", "agentica-org/DeepScaleR-Preview-Dataset", ("train",), _field("problem"), _field("answer"))
_math("OpenR1-Math-220k", "open-r1/OpenR1-Math-220k", ("train",), _field("problem"), _field("answer"),
      configs=("default",), holds_out=True)
# DAPO's rows carry their own instruction in the prompt (an "Answer:" line), passed through verbatim as NeMo RL
# does: no \\boxed{} instruction added (which dapo_math_verify would then score 0); their answer line is read by
# dapo_math_verify
_math("DAPOMath17K", "BytedTsinghua-SIA/DAPO-Math-17k", ("train",), _field("prompt", 0, "content"),
      _field("reward_model", "ground_truth"), own_instructions=True, verifier="dapo_math_verify")
_math("DAPOMathAIME2024", "BytedTsinghua-SIA/AIME-2024", ("train",), _field("prompt", 0, "content"),
      _field("reward_model", "ground_truth"), eval_only=("*",), own_instructions=True, verifier="dapo_math_verify")
_math("DAPOMathAIME2024Deduplicated", "BytedTsinghua-SIA/AIME-2024", ("train",), _field("prompt", 0, "content"),
      _field("reward_model", "ground_truth"), eval_only=("*",), deduplicate=True,  # (its rows repeat each problem)
      own_instructions=True, verifier="dapo_math_verify")
_math("AIME2024", "HuggingFaceH4/aime_2024", ("train",), _field("problem"), _field("answer"), eval_only=("*",))
_math("AIME2025", "opencompass/AIME2025", ("test",), _field("question"), _field("answer"),
      configs=("AIME2025-I", "AIME2025-II"), eval_only=("*",))
_math("AIME2026", "MathArena/aime_2026", ("train",), _field("problem"), _field("answer"), eval_only=("*",))
