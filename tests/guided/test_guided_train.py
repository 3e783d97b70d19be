"""Guided decoding in training (CPU, real engine and sandbox): the shipped format-grammar config's format reward is
1.0 from its first step, multi-turn episodes keep each turn to its own constraint and the trainer scores every
constrained turn under the masks its sampler used (logprob mismatch ~0), and bad settings are refused with the fix."""

import re
from pathlib import Path

import pytest

from execrl.config import ConfigError, load_config
from execrl.config.checks import validate
from execrl.trainer.loop import train

from ..trainer.test_train import SMALL, metrics

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TURN0, TURN1 = r'```python\nprint\("[a-z]{1,3}"\)\n```', r"```python\nprint\([1-9]{1,2}\)\n```"


def watch_batches(monkeypatch):
    import execrl.trainer.loop as loop

    seen, real = [], loop.build_batch

    def build_batch(rollouts, *args):
        batch = real(rollouts, *args)
        seen.append((rollouts, batch))
        return batch

    monkeypatch.setattr(loop, "build_batch", build_batch)
    return seen


def test_the_format_grammar_config_has_format_reward_one_from_the_first_step(tmp_path, monkeypatch):
    seen = watch_batches(monkeypatch)
    cfg = load_config(str(CONFIGS / "guided_format_cpu.yaml"),
                      [*SMALL, f"logger.log_dir={tmp_path}", f"checkpointing.checkpoint_dir={tmp_path}/ckpt",
                       "grpo.max_num_steps=2", "checkpointing.enabled=false", "grpo.val_period=0"])
    train(cfg)
    rows = [m for m in metrics(tmp_path) if "train/loss" in m]
    assert [m["train/reward/format"] for m in rows] == [1.0, 1.0]
    assert all(m["train/logprob_mismatch"] < 1e-5 for m in rows)
    for rollouts, _ in seen:
        for e in rollouts.episodes:
            answer = e.messages[-1]["content"]
            assert re.fullmatch(r"```python\n([\x20-\x5f\x61-\x7e]{0,39}[\x21-\x5f\x61-\x7e]\n){1,2}```", answer), answer


def test_each_turn_keeps_to_its_own_constraint_and_is_scored_under_its_masks(tmp_path, monkeypatch):
    seen = watch_batches(monkeypatch)
    cfg = load_config(None, [*SMALL, f"logger.log_dir={tmp_path}", f"checkpointing.checkpoint_dir={tmp_path}/ckpt",
                             "grpo.max_num_steps=2", "grpo.max_rollout_turns=2", "env.multi_turn.kind=unit_tests",
                             "env.multi_turn.observation_role=user", "policy.max_total_sequence_length=384",
                             "checkpointing.enabled=false", "grpo.val_period=0", "policy.generation.temperature=1.0",
                             f"policy.generation.guided_decoding_per_turn=[{{regex: '{TURN0}'}}, "
                             f"{{regex: '{TURN1}'}}]"])
    run = train(cfg)
    rows = [m for m in metrics(tmp_path) if "train/loss" in m]
    assert all(m["train/turns_mean"] == 2.0 for m in rows)  # a printed string never passes: every episode retries
    assert all(m["train/logprob_mismatch"] < 1e-5 for m in rows)
    for rollouts, batch in seen:
        for i, t in enumerate(rollouts.trajectories):
            first, feedback, second = t.segments
            assert re.fullmatch(TURN0, run.tokenizer.decode(first.ids, skip_special_tokens=True))
            assert re.fullmatch(TURN1, run.tokenizer.decode(second.ids, skip_special_tokens=True))
            assert first.guide is not second.guide and feedback.guide is None
            starts = [at for at, _ in batch.guided[i]]  # the masks sit where each turn's tokens are predicted
            assert starts == [len(t.prompt_ids) - 1, len(t.prompt_ids) - 1 + len(first.ids) + len(feedback.ids)]


@pytest.mark.parametrize("overrides,message", [
    (["policy.generation.guided_decoding={regex: 'a+', grammar: 'start: \"a\"'}"], "exactly one of"),
    (["policy.generation.guided_decoding={regex: '(a'}"], "guided_decoding: the regex does not compile"),
    (["policy.generation.guided_decoding={regex: 'a+'}", "policy.generation.backend=transformers"],
     "backend=execrl"),
    (["policy.generation.guided_decoding={regex: 'a+'}", "policy.generation.guided_decoding_per_turn=[{regex: 'b'}]"],
     "set one of them"),
    (["policy.generation.guided_decoding_per_turn=[null, {grammar: 'start: nothing_here'}]"],
     r"guided_decoding_per_turn\[1\]: the grammar does not compile"),
])
def test_bad_guided_decoding_settings_are_refused_with_the_fix(overrides, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        validate(load_config(None, overrides))


def test_a_constrained_turn_that_opens_a_bare_fence_keeps_to_its_constraint():
    """(A hunt's find) the unit-test environment's cell end "\\n```\\n" stopped a constrained turn at the bare fence
    opening its block, and the turn's rest, a new generation, started the constraint again: 'ok\\n```\\nok\\n```'
    where the regex asks for the program. Where every request is constrained and a turn is a whole answer, the
    constraint alone ends the turn."""
    from execrl.models import load_model_and_tokenizer
    from execrl.rollout import SamplingParams, build_generator
    from execrl.sandbox import Grader, Limits
    from execrl.tasks import load_problems
    from execrl.trainer.rollouts import EpisodeRunner

    regex = r"ok\n```\nprint\(1\)\n```"
    cfg = load_config(None, ["policy.device=cpu", "env.multi_turn.kind=unit_tests", "grpo.max_rollout_turns=2",
                             "env.multi_turn.observation_role=user", "policy.max_total_sequence_length=512",
                             "prompt.code_style=fence", "policy.generation.max_new_tokens=40",
                             f"policy.generation.guided_decoding={{regex: '{regex}'}}"])
    model, tok = load_model_and_tokenizer("builtin:tiny-coder", device="cpu")
    problems, _ = load_problems("builtin:arith-code", "train", count=1)
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(cfg, build_generator(model, tok, "execrl", 4, 512), tok, grader).run(
            problems, 2, SamplingParams(1.0))
    for e in rollouts.episodes:
        turns = [m["content"] for m in e.messages if m["role"] == "assistant"]
        assert turns and all(re.fullmatch(regex, t) for t in turns), turns
    # (a later hunt's find) a batch of a row's constrained requests beside free ones: the environment's stop strings
    # applied to all, and the constrained turn was cut at its fence again; they now hold for the free requests only
    free = load_config(None, ["policy.device=cpu", "env.multi_turn.kind=unit_tests", "grpo.max_rollout_turns=2",
                              "env.multi_turn.observation_role=user", "policy.max_total_sequence_length=512",
                              "prompt.code_style=fence", "policy.generation.max_new_tokens=40"])
    problems, _ = load_problems("builtin:arith-code", "train", count=2)
    problems[0].metadata["guided_decoding"] = ("regex", regex)  # (as tasks/generic.py keeps a row's own)
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(free, build_generator(model, tok, "execrl", 4, 512), tok, grader).run(
            problems, 2, SamplingParams(1.0))
    held = [e for e in rollouts.episodes if e.problem is problems[0]]
    assert len(held) == 2 and len(rollouts.episodes) == 4
    for e in held:
        turns = [m["content"] for m in e.messages if m["role"] == "assistant"]
        assert turns and all(re.fullmatch(regex, t) for t in turns), turns
