"""Constraints per task: a dataset row's own `guided_decoding` field, read and checked at load time (a malformed or
non-compiling one skips the row with its reason), held to in training (guide_for: the row's before the config's) and
in `execrl eval` (per prompt, beside unconstrained prompts)."""

import json
import re
from types import SimpleNamespace

import torch

from execrl.config import load_config
from execrl.envs import Environment
from execrl.eval.generate import generate
from execrl.models import build_tiny_model, build_tokenizer
from execrl.rollout import RolloutEngine
from execrl.tasks.arith import corpus
from execrl.tasks.generic import load
from execrl.tasks.problem import Problem, RowReport
from execrl.trainer.rollouts import guide_for


def test_rows_carry_their_constraints_and_bad_ones_are_skipped_with_the_reason(tmp_path):
    rows = [{"id": "a", "prompt": "2+2?", "answer": "4", "guided_decoding": {"regex": "[0-9]+"}},
            {"id": "b", "prompt": "name?", "tests": {"inputs": [""], "outputs": ["x"]},
             "guided_decoding": {"json_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}},
            {"id": "c", "prompt": "x", "answer": "1", "guided_decoding": {"regex": "a", "grammar": "start: \"a\""}},
            {"id": "d", "prompt": "x", "answer": "1", "guided_decoding": {"regex": "(unclosed"}},
            {"id": "e", "prompt": "x", "answer": "1", "guided_decoding": "[0-9]"},
            {"id": "f", "prompt": "free", "answer": "1"}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    report = RowReport(str(path))
    problems = {p.id: p for p in load(path, None, report)}
    assert set(problems) == {"a", "b", "f"}
    assert problems["a"].metadata["guided_decoding"] == ("regex", "[0-9]+")
    assert problems["b"].metadata["guided_decoding"][0] == "json_schema" and problems["b"].kind == "code"
    assert "guided_decoding" not in problems["f"].metadata
    assert sum(n for r, n in report.reasons.items() if r.startswith("unusable guided_decoding")) == 3
    reasons = " | ".join(report.reasons)
    assert "exactly one of regex" in reasons and "does not compile" in reasons and "\n" not in reasons


def test_training_and_eval_keep_each_prompt_to_its_rows_constraint():
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=0).eval()
    engine = RolloutEngine(model, tok, slots=4, max_len=128)
    cfg = load_config(None, ["policy.generation.guided_decoding={regex: 'cfg'}"])
    own = Problem("a", [{"role": "user", "content": "x"}], "math", answer="1",
                  metadata={"guided_decoding": ("regex", "(yes|no)")})
    plain = Problem("b", [{"role": "user", "content": "x"}], "math", answer="1")
    episode = SimpleNamespace(env=Environment(None), problem=own, turns=0)
    assert guide_for(episode, engine, cfg.policy.generation).text == engine.guides.get("regex", "(yes|no)").text
    episode.problem = plain  # no constraint of its own: the config's
    assert guide_for(episode, engine, cfg.policy.generation).text == engine.guides.get("regex", "cfg").text

    torch.manual_seed(0)
    with torch.no_grad():  # larger random weights: varied text, far from any constraint
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8)
    outs = generate(model, tok, ["Answer:", "hi", "def f(x):"], 3, 24, batch_size=4,
                    guided=[("regex", "(yes|no)"), None, ("regex", "[0-9]{2,4}")])
    assert all(re.fullmatch("(yes|no)", t) for t, *_ in outs[0])
    assert all(re.fullmatch("[0-9]{2,4}", t) for t, *_ in outs[2])
    assert not all(re.fullmatch("(yes|no)|[0-9]{2,4}", t) for t, *_ in outs[1])  # the free one is free
