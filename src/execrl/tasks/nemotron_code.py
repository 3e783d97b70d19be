"""Nemotron-RL competitive coding (NeMo-Gym format): `responses_create_params.input` is the prompt
(it already asks for a ```python block), `verifier_metadata.unit_tests.{inputs, outputs, fn_name?}`
the tests; printed outputs compared as NeMo-Gym's code_gen grader compares them (compare mode "lcb")."""

from __future__ import annotations

from execrl.sandbox import TestSpecError, parse_tests
from execrl.tasks.problem import Problem, chat_messages, read_rows
from execrl.tasks.registry import hub_rows, register

HUB = "nvidia/Nemotron-RL-coding-competitive_coding"


@register("nemotron_code", data_dir="nemotron_code_examples", splits=(), hub_id=HUB, kind="code")
def load(path, split, report, hub_id=None, **_):
    if path is None:
        rows = hub_rows(hub_id, split)
    elif path.is_dir():
        files = sorted(f for f in path.iterdir() if f.suffix in (".jsonl", ".parquet") and "rollout" not in f.name)
        rows = [r for f in files for r in read_rows(f)]
    else:
        rows = read_rows(path)
    problems = []
    for i, row in enumerate(rows):
        rid = row.get("hash_id") or i
        params, meta = row.get("responses_create_params"), row.get("verifier_metadata")
        messages = chat_messages(params.get("input")) if isinstance(params, dict) else None  # (the Responses API's
        unit = meta.get("unit_tests") if isinstance(meta, dict) else None                  # input: a string or items)
        if messages is None or not isinstance(unit, dict):
            report.skip(rid, "no prompt (a string, or messages with a user message) or no unit_tests")
            continue
        tests = {k: unit[k] for k in ("inputs", "outputs", "fn_name") if unit.get(k)}
        if "fn_name" not in tests:  # printed outputs as NeMo-Gym's code_gen grader reads them (LiveCodeBench's rule)
            tests["compare"] = {"mode": "lcb"}
        try:
            spec = parse_tests(tests)
        except TestSpecError as e:
            report.skip(rid, f"unusable tests ({str(e).split(':')[0]})")
            continue
        problems.append(Problem(f"nemotron/{rid}", messages, "code", tests=spec,
                                metadata={"own_instructions": True, "source": row.get("source")}))
    return problems
