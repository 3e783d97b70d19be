"""Writes src/execrl/tasks/held_out.json: the fingerprints (execrl.tasks.held_out) of the evaluation sets under
../shared/data (SOURCES.md names them): GSM8K's test questions, MBPP's test tasks (11-510; the texts of mbpp.jsonl
and the prompts of sanitized-mbpp.json). Not the LeetCode contests: their statements open as LeetCode's all do ("You
are given a 0-indexed integer array nums..."), and a LeetCode training set shared 11 of their 77 fingerprints; their
file is known by its bytes. Run from the repository: python scripts/held_out_fingerprints.py"""

import json
from pathlib import Path

from execrl.tasks.held_out import FILE, fingerprint

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


mbpp = rows(DATA / "mbpp/mbpp.jsonl")
sanitized = json.loads((DATA / "mbpp/sanitized-mbpp.json").read_text())
sets = {
    "GSM8K's test split (gsm8k/test)": [r["question"] for r in rows(DATA / "gsm8k/test.jsonl")],
    "MBPP's test split (task_ids 11-510)": [r["text"] for r in mbpp if 11 <= r["task_id"] <= 510]
    + [r["prompt"] for r in sanitized if 11 <= r["task_id"] <= 510],
}
prints = {name: sorted({p for p in map(fingerprint, texts) if p is not None}) for name, texts in sets.items()}
FILE.write_text(json.dumps(prints, separators=(",", ":")) + "\n")
print({name: len(p) for name, p in prints.items()})
