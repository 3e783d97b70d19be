"""Evaluation sets found by their text, whatever file or format holds them: a parquet export, a copy with a BOM or
re-serialized JSON, GSM8K's test questions read as `dataset_name: jsonl`, all pass the byte check of
registry.evaluation_file. Each evaluation problem is kept as one fingerprint, the CRC32 of the first WINDOW words of
its text (lowercase, punctuation dropped); training problems are looked through for them, in windows of WINDOW
words over their prompts' first SCANNED words. A training set holding over a twentieth of an evaluation set's
fingerprints is refused (a copy holds all of them, a subset of 100 of MBPP's test tasks a fifth; MBPP's own training
and validation tasks share 16 of its 465, 3.4%, with its test tasks by their first words, GSM8K's training questions
none of its test ones)."""

from __future__ import annotations

import json
import re
import zlib
from functools import cache
from pathlib import Path

WINDOW = 12
SCANNED = 200
SHARE = 0.05
SAMPLED = 20_000  # problems read at most
FILE = Path(__file__).with_name("held_out.json")  # written by scripts/held_out_fingerprints.py


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def fingerprint(text: str) -> int | None:
    """An evaluation problem's fingerprint: its first WINDOW words'; None for a text of fewer."""
    w = words(text)
    return zlib.crc32(" ".join(w[:WINDOW]).encode()) if len(w) >= WINDOW else None


def windows(text: str) -> set[int]:
    w = words(text)[:SCANNED]
    return {zlib.crc32(" ".join(w[i:i + WINDOW]).encode()) for i in range(len(w) - WINDOW + 1)}


@cache
def evaluation_sets() -> dict[str, frozenset[int]]:
    """{what the set is: its fingerprints}"""
    return {name: frozenset(prints) for name, prints in json.loads(FILE.read_text()).items()}


def held_evaluation_sets(problems) -> list[tuple[str, int, int]]:
    """(evaluation set, its fingerprints found in the problems' prompts, its fingerprints) for each set of which
    over SHARE is found. Over SAMPLED problems, every k-th is read and the share scaled to them (a copy of a set mixed
    into a large one is found in the same proportion): seconds and a set of the fingerprints, not of every window,
    on a 100K-row dataset."""
    step = max(1, -(-len(problems) // SAMPLED))
    read = problems[::step]
    prints = evaluation_sets()
    every = frozenset().union(*prints.values())
    seen: set[int] = set()
    for p in read:
        for m in p.messages:
            if isinstance(m.get("content"), str):
                seen |= windows(m["content"]) & every
    scale = len(read) / len(problems) if problems else 1.0
    found = [(name, len(fp & seen), len(fp)) for name, fp in prints.items()]
    return [f for f in found if f[1] > SHARE * scale * f[2]]
