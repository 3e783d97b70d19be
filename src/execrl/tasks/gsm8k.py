"""GSM8K (grade-school math): the answer is the number after '####'. Test is evaluation only."""

from __future__ import annotations

from execrl.tasks.problem import Problem, read_rows
from execrl.tasks.registry import hub_rows, register


@register("GSM8K", data_dir="gsm8k", splits=("train", "test"), eval_only=("test",), hub_id="openai/gsm8k",
          kind="math", holds_out=False)  # NeMo RL's (whose GSM8K reads no split_validation_size)
@register("gsm8k", data_dir="gsm8k", splits=("train", "test"), eval_only=("test",), hub_id="openai/gsm8k",
          kind="math", holds_out=False)
def load(path, split, report, hub_id=None, **_):
    if path is None:
        rows = hub_rows(hub_id, split, config="main")
    else:
        rows = read_rows(path / f"{split}.jsonl" if path.is_dir() else path)
    problems = []
    for i, row in enumerate(rows):
        question, answer = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not isinstance(answer, str) or "####" not in answer:
            report.skip(i, "no question or no '#### answer'")
            continue
        final = answer.rsplit("####", 1)[1].strip().replace(",", "")
        if not final:  # ("#### " or "#### ,": nothing any answer can equal)
            report.skip(i, "an empty '#### answer'")
            continue
        problems.append(Problem(f"gsm8k/{split}/{i}", [{"role": "user", "content": question}], "math",
                                answer=final, metadata={"solution": answer}))
    return problems
