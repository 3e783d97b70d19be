"""Evaluation sets found by their text: copies the byte check (registry.evaluation_file) cannot tell."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from execrl.config import load_config
from execrl.tasks import DatasetError
from execrl.tasks.held_out import FILE
from execrl.trainer.data import load_data

from ..conftest import shared_data


def train_on(path, *more):
    return load_data(load_config(None, [f"data.train={{dataset_name: jsonl, path: {path}}}", *more]))


def test_copies_of_gsm8k_test_are_refused_by_their_text(tmp_path):
    """A BOM, re-serialized JSON, a prompt template around each question, or the test questions mixed into the
    training ones: each passed the byte check, and the run trained on GSM8K's test split."""
    test = [json.loads(line) for line in shared_data("gsm8k", "test.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in shared_data("gsm8k", "train.jsonl").read_text().splitlines()]
    copies = {
        "bom.jsonl": "\ufeff" + "\n".join(json.dumps({"prompt": r["question"], "answer": r["answer"].split("#### ")[1]})
                                          for r in test),
        "templated.jsonl": "\n".join(json.dumps({"prompt": f"Question: {r['question'].upper()}\nThink step by step.",
                                                 "answer": "1"}, indent=None, separators=(",", ":")) for r in test),
        "mixed.jsonl": "\n".join(json.dumps({"prompt": r["question"], "answer": "1"}) for r in train[:3000] + test),
    }
    for name, text in copies.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        with pytest.raises(DatasetError, match=r"the training set jsonl from .*" + name + r" holds GSM8K's test split "
                           r"\(gsm8k/test\): 1319 of its 1319 problems, found by their text; never train on an "
                           r"evaluation set"):
            train_on(tmp_path / name)
    # the training questions, and a few test questions among them (a shared source), train; a subset of the test
    # questions (100 of 1319, alone or among training rows) trained, under the old bar of a quarter of the set
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps({"prompt": r["question"], "answer": "1"})
                                                    for r in train + test[:30]))
    assert len(train_on(tmp_path / "train.jsonl")[0]) == len(train) + 30
    for rows, name in ((test[:100], "subset.jsonl"), (train + test[:100], "some.jsonl")):
        (tmp_path / name).write_text("\n".join(json.dumps({"prompt": r["question"], "answer": "1"}) for r in rows))
        with pytest.raises(DatasetError, match=r"holds GSM8K's test split \(gsm8k/test\): 100 of its 1319"):
            train_on(tmp_path / name)


def test_the_builtin_training_splits_hold_no_evaluation_set(tmp_path):
    """MBPP's training and validation tasks share a few first words with its test tasks: they train; its test tasks
    as a file of one's own do not."""
    mbpp = [json.loads(line) for line in shared_data("mbpp", "mbpp.jsonl").read_text().splitlines()]
    for sets in ("{dataset_name: gsm8k}", "[{dataset_name: mbpp}, {dataset_name: mbpp, split: validation}]"):
        assert load_data(load_config(None, [f"data.train={sets}"]))[0]
    (tmp_path / "tasks.jsonl").write_text("\n".join(json.dumps({"prompt": r["text"], "tests": {"asserts": r["test_list"]}})
                                                    for r in mbpp if 11 <= r["task_id"] <= 510))
    with pytest.raises(DatasetError, match=r"holds MBPP's test split \(task_ids 11-510\): 3\d\d of its 465"):
        train_on(tmp_path / "tasks.jsonl")


def test_the_fingerprint_file_is_what_its_script_writes(tmp_path):
    """held_out.json comes from ../shared/data by scripts/held_out_fingerprints.py, unedited."""
    shared_data("mbpp")
    kept = FILE.read_bytes()
    try:
        subprocess.run([sys.executable, str(Path(__file__).parents[2] / "scripts" / "held_out_fingerprints.py")],
                       check=True, capture_output=True)
        assert FILE.read_bytes() == kept
    finally:
        FILE.write_bytes(kept)
