"""An environment of your own: a second chance at a code problem.

The model answers; if its program does not pass every test, it is told its verdict and answers once more, and that
answer is scored (the reward components of `reward.components`, e.g. the pass fraction). Train with it by naming it:

    execrl train env.multi_turn.kind=examples/second_chance_env.py:SecondChance grpo.max_rollout_turns=2 \
        policy.max_total_sequence_length=384

A new environment subclasses `Environment`, writes `reset` and `step` (and `finish`, for an episode cut short when
the context or the turns run out) and overrides only the hooks it needs (see execrl/envs/base.py).
"""

from execrl.envs import Environment, Step
from execrl.envs.base import final_step
from execrl.extract import extract
from execrl.prompts import build_messages
from execrl.rewards import Sample


class SecondChance(Environment):
    runs_code = True  # step grades in the sandbox: hand it each answer as soon as it is generated

    def reset(self, problem):
        self.problem, self.tries, self.last = problem, 0, ""
        return build_messages(problem, self.cfg.prompt)

    def step(self, assistant_text, num_tokens=0):
        self.tries, self.last = self.tries + 1, assistant_text
        done = final_step(self._sample(assistant_text, num_tokens), self.grader, self.cfg.reward)
        result = done.sample.result
        if self.tries >= 2 or result is None or result.passed == result.total:
            return done
        role = self.cfg.env.multi_turn.observation_role
        said = f"Your program passed {result.passed} of {result.total} tests ({result.verdict.value}). Try again."
        return Step([{"role": role, "content": said}], tool_call=True, tool_error=True)

    def finish(self):
        return final_step(self._sample(self.last, 0), self.grader, self.cfg.reward)

    def _sample(self, text, num_tokens):
        p, prompt = self.problem, self.cfg.prompt
        found = extract(text, prompt.answer_format, prompt.code_style, p.language, want_code=True)
        return Sample(p, text, found, num_tokens=num_tokens, max_tokens=self.cfg.policy.generation.max_new_tokens)
