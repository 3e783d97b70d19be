"""One step's rollouts: G completions per prompt, graded in the sandbox, scored by the reward."""

from __future__ import annotations

from dataclasses import dataclass

from execrl.eval.run import grade_samples
from execrl.extract import extract
from execrl.prompts import build_messages, render
from execrl.rewards import Reward, Sample, score
from execrl.rollout import Completion, SamplingParams
from execrl.rollout.sampling import mix32
from execrl.sandbox import Grader
from execrl.tasks import Problem


@dataclass
class Rollouts:
    prompt_ids: list[list[int]]  # [num_samples] (each prompt repeated G times, groups contiguous)
    completions: list[Completion]  # [num_samples]
    samples: list[Sample]
    rewards: list[Reward]
    group_size: int


def prompt_ids(problems: list[Problem], tokenizer, cfg) -> list[list[int]]:
    texts = [render(build_messages(p, cfg.prompt), tokenizer) for p in problems]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def prompt_seeds(seed: int, step: int, num_prompts: int, first: int = 0) -> list[int]:
    """Sampling seeds of a step's prompts by their index in the step's global batch: the same samples whichever
    process generates them."""
    base = mix32(mix32(seed) ^ mix32(step + 0x51ED27))
    return [mix32(base ^ mix32(first + i)) for i in range(num_prompts)]


def sample_rollouts(generator, tokenizer, problems: list[Problem], cfg, group_size: int, temperature: float,
                    seeds: list[int] | None = None) -> Rollouts:
    gen = cfg.policy.generation
    prompts = prompt_ids(problems, tokenizer, cfg)
    params = SamplingParams(temperature, gen.top_p, gen.top_k, gen.ignore_eos)  # greedy ignores top-p/top-k
    outs = generator.generate(prompts, group_size, gen.max_new_tokens, params, gen.stop_strings, seeds=seeds)
    samples, flat_prompts, flat = [], [], []
    for problem, prompt, group in zip(problems, prompts, outs):
        for c in group:
            extracted = extract(c.text, cfg.prompt.answer_format, cfg.prompt.code_style, problem.language,
                                want_code=problem.kind == "code")
            samples.append(Sample(problem, c.text, extracted, num_tokens=len(c.ids), max_tokens=gen.max_new_tokens))
            flat_prompts.append(prompt)
            flat.append(c)
    return Rollouts(flat_prompts, flat, samples, [], group_size)


def grade_and_score(rollouts: Rollouts, grader: Grader, cfg) -> None:
    grade_samples(rollouts.samples, grader)
    rollouts.rewards = [score(s, cfg.reward) for s in rollouts.samples]
