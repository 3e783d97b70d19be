"""Nemotron-RL competitive coding (NeMo-Gym format): `responses_create_params.input` is the prompt
(it already asks for a ```python block), `verifier_metadata.unit_tests.{inputs, outputs, fn_name?}`
the tests; printed outputs compared as NeMo-Gym's code_gen grader compares them (compare mode "lcb").
A folder is read by its files' names, as NeMo-Gym keeps them in one data/ folder: the split's file
(opencodereasoning_..._train.jsonl, livecodebench_..._validation.jsonl); a folder whose files name no
split, its one file (the examples)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from execrl.sandbox import TestSpecError, parse_tests
from execrl.tasks.problem import DatasetError, Problem, chat_messages, err, id_text, read_rows
from execrl.tasks.registry import hub_rows, name_words, register

HUB = "nvidia/Nemotron-RL-coding-competitive_coding"
SPLITS = ("train", "validation", "test")  # the words NeMo-Gym's (and the hub's) file names carry


@register("nemotron_code", data_dir="nemotron_code_examples", splits=(), eval_only=("validation", "test"), hub_id=HUB,
          kind="code")  # (validation: NeMo-Gym's LiveCodeBench file, never trained on; a file so named neither)
def load(path, split, report, hub_id=None, **_):
    if path is None:
        rows = hub_rows(hub_id, split)
    elif path.is_dir():
        files, by_split = split_files(path, split)
        rows = [r for f in files for r in read_rows(f)]
        if split != "train" and not by_split:  # (a hunt's find: eval of a run trained on the folder scored its
            # training problems without a word)
            err.print(f"warning: nemotron_code/{split}: {', '.join(f.name for f in files)} in {path} names no split, "
                      "so every split reads it, training's too: its score is no held-out score; name a file of "
                      "problems the run never saw (execrl eval: --data-path FILE)", style="yellow", markup=False,
                      highlight=False)
    else:
        rows = read_rows(path)
    problems = []
    for i, row in enumerate(rows):
        rid = row.get("hash_id") or i
        try:
            params = _decoded(row.get("responses_create_params"), "responses_create_params")  # (as the metadata: a
        except TestSpecError as e:  # JSON string of a nested column's export)
            report.skip(rid, f"no prompt ({e.reason})")
            continue
        messages = chat_messages(params.get("input")) if isinstance(params, dict) else None  # (the Responses API's
        if messages is None:                                                                 # input: a string or items)
            report.skip(rid, "no prompt (responses_create_params.input: a string, or messages with a user message)")
            continue
        if messages[-1]["role"] == "assistant":  # (a hunt's find: posed with its answer in the prompt, as jsonl's are not)
            report.skip(rid, "responses_create_params.input ends with the assistant's message (the reference answer, "
                        "in the prompt?)")
            continue
        try:
            meta = _decoded(row.get("verifier_metadata"), "verifier_metadata")
            unit = _decoded(meta.get("unit_tests"), "verifier_metadata.unit_tests") if isinstance(meta, dict) else None
            if not isinstance(unit, dict):
                report.skip(rid, "no unit_tests (verifier_metadata.unit_tests: an object of inputs, outputs, fn_name?)")
                continue
            tests = {k: unit[k] for k in ("inputs", "outputs", "fn_name") if unit.get(k)}
            if not tests.get("inputs") or not tests.get("outputs"):  # (reported as "unknown test form with keys
                report.skip(rid, "no tests (verifier_metadata.unit_tests.inputs and outputs are empty or missing)")
                continue  # ['compare']", a key the row never wrote)
            if "fn_name" not in tests:  # printed outputs as NeMo-Gym's code_gen grader reads them (LiveCodeBench's)
                tests["compare"] = {"mode": "lcb"}
            spec = parse_tests(tests)
        except TestSpecError as e:
            report.skip(rid, f"unusable tests ({e.reason})")
            continue
        problems.append(Problem(f"nemotron/{id_text(rid)}", messages, "code", tests=spec,
                                metadata={"own_instructions": True, "source": row.get("source")}))
    return problems


def _decoded(value, field: str):
    """An object written as a JSON string (a parquet or datasets export of a nested column) as the object."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as e:  # (not JSON, or an integer of more digits than Python converts)
            raise TestSpecError(f"{field} is a string but not JSON: {e}"[:300]) from None
        except RecursionError:
            raise TestSpecError(f"{field} is JSON nested too deeply to read") from None
    return value


def split_files(folder: Path, split: str) -> tuple[list[Path], bool]:
    """The files of a folder that hold `split`, and whether any file names a split: those whose name carries it,
    where any file names one (every file was read, and training read NeMo-Gym's validation file beside its train
    file); else the folder's one file, which every split reads. Refuses a choice between files (the shards of one
    file, train-00000-of-00002..., are one)."""
    files = sorted(f for f in folder.iterdir() if f.suffix in (".jsonl", ".parquet") and "rollout" not in f.name)
    named = {f: [w for w in name_words(f) if w in SPLITS] for f in files}
    by_split = any(named.values())
    chosen = [f for f in files if split in named[f]] if by_split else files
    names = ", ".join(f.name for f in files) or "none"
    if not chosen:
        raise DatasetError(f"nemotron_code/{split}: no .jsonl or .parquet file in {folder} is named as the {split} "
                           f"split's (files: {names}); name the file: data.*.path=FILE (execrl eval: --data-path FILE)")
    if len({re.sub(r"\d+-of-(\d+)", r"*-of-\1", f.name) for f in chosen}) > 1:
        which = "are named as its" if by_split else "name no split, and each could be it"
        raise DatasetError(f"nemotron_code/{split}: {len(chosen)} files in {folder} {which} "
                           f"({', '.join(f.name for f in chosen)}); name the one to read: data.*.path=FILE "
                           "(execrl eval: --data-path FILE)")
    return chosen, by_split
