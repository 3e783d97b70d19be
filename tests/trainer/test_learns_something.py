"""A run that cannot learn says so (issue 40): settings under which every advantage is 0 are refused before any work,
naming the key, and a run whose every group is flat logs it (train/flat_group_frac) and warns."""

import subprocess
import sys

import pytest

from .test_train import metrics, run


@pytest.mark.parametrize("override, message", [
    ("grpo.num_generations_per_prompt=1", "set grpo.num_generations_per_prompt >= 2"),
    ("policy.generation.temperature=0", "set policy.generation.temperature > 0"),
    ("policy.generation.top_k=1", "set policy.generation.top_k to null or above 1"),
    ("grpo.advantage_clip_low=0 grpo.advantage_clip_high=0", "clip every advantage to 0"),
    ("loss_fn.use_importance_sampling_correction=true loss_fn.truncated_importance_sampling_type=icepop "
     "loss_fn.truncated_importance_sampling_ratio=2.0 loss_fn.truncated_importance_sampling_ratio_min=1.5",
     "every token would be masked"),
    ("policy.optimizer.kwargs.lr=-1e-3", "policy.optimizer.kwargs.lr=-0.001: the learning rate must be > 0"),
])
def test_settings_that_cannot_learn_are_refused_by_dry_run(tmp_path, override, message):
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "train", *override.split(), "--dry-run",
                           f"logger.log_dir={tmp_path}/run"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_flat_groups_are_logged_and_a_run_of_nothing_but_flat_groups_warns(tmp_path, capsys):
    # a reward every answer earns alike (the model, untrained, writes no program that passes: every reward 0; an
    # overlong_penalty no answer reaches is refused before the run): every group flat
    _, d = run(tmp_path, "flat", "grpo.max_num_steps=3", "grpo.val_period=0", "checkpointing.enabled=false",
               "warmup.sft_steps=0")
    fracs = [r["train/flat_group_frac"] for r in metrics(d) if "train/flat_group_frac" in r]
    assert fracs == [1.0, 1.0, 1.0]
    shown = (lambda c: (c.out + c.err).replace("\n", " "))(capsys.readouterr())
    assert "every group's rewards were all equal" in shown and "The samples' verdicts: " in shown
    _, d = run(tmp_path, "signal", "grpo.max_num_steps=2", "grpo.val_period=0", "checkpointing.enabled=false",
               "warmup.sft_steps=80")  # (after the warm-up, some answers pass and some do not)
    assert min(r["train/flat_group_frac"] for r in metrics(d) if "train/flat_group_frac" in r) < 1.0


def test_a_run_whose_answers_are_told_apart_by_a_length_penalty_alone_says_so(tmp_path, capsys):
    """(A hunt's find) Beside test_pass_fraction an overlong penalty made groups of answers all wrong differ by length:
    the flat warning never fired, the run trained on length alone and printed its reward rising. Three steps in a row
    in which every group's rewards were equal but for the length penalty are warned of, with the verdicts."""
    _, d = run(tmp_path, "length", "grpo.max_num_steps=3", "grpo.val_period=0", "checkpointing.enabled=false",
               "warmup.sft_steps=0",
               "reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, buffer_tokens: 32}]")
    assert min(r["train/flat_group_frac"] for r in metrics(d) if "train/flat_group_frac" in r) < 1.0
    shown = " ".join((lambda c: c.out + c.err)(capsys.readouterr()).split())
    assert ("for 3 steps every group's rewards were equal but for overlong_penalty (its test_pass_fraction the same "
            "for each of its samples): the advantages came from overlong_penalty alone") in shown
    assert "The samples' verdicts:" in shown
    assert "every group's rewards were all equal" not in shown


def test_the_flat_warning_under_role_baselines_speaks_of_advantages():
    """Under grpo.advantage=rae a flat group is one whose every advantage is 0 (returns at their role's baseline),
    not one whose rewards are equal: the warning says which."""
    from execrl.config import load_config
    from execrl.trainer.flat import flat_warning

    for advantage, said in [("grpo", "every group's rewards were all equal"), ("rae", "every advantage was 0")]:
        cfg = load_config(None, [f"grpo.advantage={advantage}"] + (
            ["env.multi_turn.kind=game", "data.train.dataset_name=selfplay:tictactoe",
             "grpo.num_generations_per_prompt=2"] if advantage == "rae" else []))
        assert said in flat_warning(cfg, [], all_cut=False)
    # every sample truncated and left out by grpo.overlong_filtering: rewards that differed said nothing
    cfg = load_config(None, ["grpo.overlong_filtering=true"])
    assert "grpo.overlong_filtering left it out of the loss" in flat_warning(cfg, [], all_cut=True)


@pytest.mark.parametrize("verdicts, said", [
    ({"timeout": 1.0}, "The samples' verdicts: timeout 100%; the programs ran past env.code.timeout_s=2 s"),
    ({"no_code": 0.75, "fail": 0.25}, "no_code 75%, fail 25%; no answer held a program where prompt.code_style=fence looks (a fenced code block)"),
    ({"fail": 0.5, "runtime_error": 0.3, "pass": 0.2}, "fail 50%, runtime_error 30%, pass 20%; the programs ran and "
                                                       "gave wrong answers"),
    ({"fail": 0.4, "runtime_error": 0.3, "pass": 0.3}, "pass 30%, runtime_error 30%; the problems may be too hard or too easy"),
    ({}, "nothing is learned. The problems may be too hard or too easy"),
])
def test_the_flat_warning_names_the_samples_verdicts(verdicts, said):
    """A run whose every group is flat because every program timed out (or no answer held code) was told only "too
    hard or too easy": the warning names the verdicts of the flat steps and what the one most samples got means."""
    from execrl.config import load_config
    from execrl.trainer.flat import flat_warning

    rows = [{"train/flat_group_frac": 1.0, **{f"train/verdict/{v}": s for v, s in verdicts.items()}},
            {"eval/pass@1": 0.0}] * 3  # (an eval's row has no verdicts: not averaged in)
    text = flat_warning(load_config(None, []), rows, all_cut=False)
    assert said in text, text


def test_a_run_too_short_for_the_streak_warning_is_warned_at_its_end(tmp_path, capsys):
    """The all-flat warning needs 3 steps in a row: a 1- or 2-step run of flat groups (grad_norm 0) said nothing."""
    import json
    from types import SimpleNamespace

    from execrl.config import load_config
    from execrl.trainer import loop

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "train/reward_mean": 0.0,
                                                                "train/flat_group_frac": 1.0}) + "\n" for s in (1, 2)))
    run = SimpleNamespace(cfg=load_config(None, []), logger=SimpleNamespace(dir=tmp_path, jsonl=None),
                          sampler=SimpleNamespace(kinds={"code"}))
    loop.summarize(run)
    shown = capsys.readouterr()
    assert "at every step every group's rewards were all equal" in (shown.out + shown.err).replace("\n", " ")


def test_an_eval_summary_over_two_validation_sets_says_so(tmp_path, capsys):
    """A resume that changed grpo.max_val_samples: the closing line compared pass@1 on 16 and on 32 problems as one
    curve."""
    import json
    from types import SimpleNamespace

    from execrl.config import load_config
    from execrl.trainer import loop

    rows = [{"step": 0, "eval/pass@1": 0.25, "eval/num_problems": 16}, {"step": 1, "train/reward_mean": 0.5},
            {"step": 2, "eval/pass@1": 0.188, "eval/num_problems": 32}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = SimpleNamespace(cfg=load_config(None, []), logger=SimpleNamespace(dir=tmp_path, jsonl=None),
                          sampler=SimpleNamespace(kinds={"code"}))
    loop.summarize(run)
    shown = capsys.readouterr()
    assert "on 16 and 32 problems: not one validation set" in (shown.out + shown.err).replace("\n", " ")


def test_a_run_that_skipped_updates_says_so_at_its_end(tmp_path, capsys):
    """(A hunt's find) a run that skipped updates on a NaN loss (its model wrecked by the others) ended with two reward
    figures and nothing else. (Mostly flat groups are not warned: a run that solved its problems has them too; the
    report's chart shows them.)"""
    import json
    from types import SimpleNamespace

    from execrl.config import load_config
    from execrl.trainer import loop

    rows = [{"step": s, "train/reward_mean": 0.1, "train/flat_group_frac": 0.9, "train/skipped_steps": s % 2}
            for s in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = SimpleNamespace(cfg=load_config(None, []), logger=SimpleNamespace(dir=tmp_path, jsonl=None),
                          sampler=SimpleNamespace(kinds={"code"}))
    loop.summarize(run)
    shown = capsys.readouterr()
    said = (shown.out + shown.err).replace("\n", " ")
    assert "3 optimizer step(s) had a NaN" in said, said


def test_a_reward_that_rose_while_right_answers_fell_is_warned_of():
    """(A hunt's find) a penalty's sign flipped, an inverted scaling, a component of one's own: the summary's "train
    reward 0.600 -> 0.998" read as progress while pass@1 fell to 0."""
    from execrl.trainer.flat import reward_against_correctness

    falling = [{"train/reward_mean": r, "train/verdict/pass": p} for r, p in
               [(0.6, 0.16), (0.7, 0.1), (0.9, 0.01), (0.99, 0.0)]]
    assert "train reward rose (0.650 -> 0.945) while the share of right samples (train/verdict/pass) fell" in \
        reward_against_correctness(falling)
    evals = [{"train/reward_mean": r} for r in (0.5, 0.5, 0.8, 0.8)] + [{"eval/pass@1": 0.4}, {"eval/pass@1": 0.1}]
    assert "while eval pass@1 fell (0.400 -> 0.100)" in reward_against_correctness(evals)
    rising = [{"train/reward_mean": r, "train/verdict/correct": p} for r, p in [(0.3, 0.2), (0.9, 0.8)]]
    noisy = [{"train/reward_mean": r, "train/verdict/pass": p} for r, p in [(0.30, 0.5), (0.31, 0.38)]]
    assert reward_against_correctness(noisy) is None  # (a step each: noise, a review's find)
    assert reward_against_correctness(rising) is None and reward_against_correctness([]) is None


def test_a_reward_of_right_answers_that_rose_a_little_is_not_blamed():
    """(A hunt's find) an async run's reward rose 0.207 -> 0.217 while pass@1 on 16 problems fell 0.375 -> 0.188:
    the warning said the reward scores something other than right answers, of test_pass_fraction alone."""
    from execrl.config import load_config
    from execrl.trainer.flat import reward_against_correctness

    evals = [{"eval/pass@1": 0.375, "eval/num_problems": 16}, {"eval/pass@1": 0.188, "eval/num_problems": 16}]
    little = [{"train/reward_mean": r} for r in (0.20, 0.21, 0.21, 0.22)]
    assert reward_against_correctness(little + evals) is None  # (a rise of 0.01: noise)
    more = [{"train/reward_mean": r} for r in (0.2, 0.2, 0.5, 0.5)]
    assert reward_against_correctness(more + evals) is None  # (3 problems of 16: within two standard errors)
    many = [{**e, "eval/num_problems": 500} for e in evals]
    assert "the reward scores something other" in reward_against_correctness(more + many)
    tests_only = load_config(None, []).reward  # (test_pass_fraction: not blamed, the likelier causes said)
    assert "learns the training problems and not the evaluation's" in reward_against_correctness(more + many,
                                                                                                tests_only)
    partial = [{"train/reward_mean": r, "train/verdict/pass": p} for r, p in [(0.2, 0.3), (0.2, 0.3), (0.5, 0.1),
                                                                                (0.5, 0.1)]]
    assert "all_tests_pass" in reward_against_correctness(partial, tests_only)
    flipped = load_config(None, ["reward.components=[{name: test_pass_fraction}, {name: format, weight: 0.5}]"])
    assert "Check reward.components' weights" in reward_against_correctness(partial, flipped.reward)


def test_flat_groups_of_right_and_wrong_answers_under_a_reward_of_no_correctness_are_the_rewards():
    """(A hunt's find) a format-only reward's flat groups held right and wrong answers: the warning blamed hard
    problems. Said where no component scores correctness (with one, flat groups are all right or all wrong)."""
    from execrl.config import load_config
    from execrl.trainer.flat import flat_warning

    rows = [{"train/flat_group_frac": 1.0, "train/verdict/fail": 0.72, "train/verdict/pass": 0.18,
             "train/verdict/runtime_error": 0.1}] * 3
    said = flat_warning(load_config(None, ["reward.components=[{name: format}]"]), rows, all_cut=False)
    assert "but 18% of the samples were right: where a group held right and wrong answers" in said
    assert "samples were right" not in flat_warning(load_config(None, []), rows, all_cut=False)
