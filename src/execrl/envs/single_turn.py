"""Single-turn code and math: one answer, graded in the sandbox (code) or checked (math), then
scored. An episode of one step, so the trainer has one path for every task."""

from __future__ import annotations

from execrl.envs.base import Environment, Step, final_step
from execrl.extract import extract
from execrl.prompts import build_messages
from execrl.rewards import Sample
from execrl.sandbox.spec import entry_names
from execrl.tasks import Problem


class SingleTurnEnv(Environment):
    def __init__(self, cfg, grader):
        self.cfg, self.grader = cfg, grader
        self.stop_strings: list[str] = []
        self.problem: Problem | None = None

    def reset(self, problem: Problem) -> list[dict]:
        self.problem = problem
        return build_messages(problem, self.cfg.prompt)

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        p, prompt = self.problem, self.cfg.prompt
        extracted = extract(assistant_text, prompt.answer_format, prompt.code_style, p.language,
                            want_code=p.kind == "code", entries=entry_names(p.tests), thinking=self.thinking)
        sample = Sample(p, assistant_text, extracted, num_tokens=num_tokens,
                        max_tokens=self.turn_limit)
        return final_step(sample, self.grader, self.cfg.reward)

    @property
    def runs_code(self) -> bool:
        return self.problem is not None and self.problem.kind == "code"

    def finish(self) -> Step:
        raise AssertionError("a single-turn episode always ends at its first step")
