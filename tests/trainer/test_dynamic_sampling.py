"""DAPO dynamic sampling (grpo.use_dynamic_sampling): a step trains only on groups whose rewards differ, generating
more rounds until it has num_prompts_per_step of them; the loss is normalized over their tokens only; rounds, the
share of informative groups and the surplus are logged; a step that cannot be filled stops with the fix."""

import json

import pytest
import torch

from execrl.config import ConfigError, load_config
from execrl.envs import Segment, Trajectory
from execrl.rewards import Reward
from execrl.tasks import Problem
from execrl.trainer.data import ProblemSampler
from execrl.trainer.pipeline import DynamicSampling, DynamicSamplingExhausted, RolloutPipeline, informative
from execrl.trainer.rollouts import Episode, Rollouts
from execrl.trainer.step import advantages, build_batch

from .test_train import run as train_run

G = 4
DS = ("grpo.use_dynamic_sampling=true", "grpo.use_leave_one_out_baseline=false")  # (NeMo RL's DAPO recipes)
# the rewards each problem's group gets: flat (all equal), informative, or with sandbox failures (None)
REWARDS = {"flat0": [0.0] * G, "flat1": [1.0] * G, "mixed": [0.0, 1.0, 0.0, 0.0], "half": [1.0, 1.0, 0.0, 0.0],
           "one_valid": [1.0, None, None, None], "infra_mixed": [0.0, None, 1.0, 1.0]}


def fake_rollouts(problems: list[Problem]) -> Rollouts:
    eps = [Episode(p, None, [], Trajectory([1], [Segment([2], True)]), None, Reward(r)) for p in problems for r in REWARDS[p.id]]
    return Rollouts(eps, G, {"generate": 1.0, "grade": 0.5})


def pipeline(order: list[str], num_prompts: int, round_prompts: int, max_rounds: int):
    problems = [Problem(i, [{"role": "user", "content": i}], "math", answer="1") for i in order]
    sampler = ProblemSampler(problems, seed=0, shuffle=False)
    drawn = []

    def generate(ps, step, first):
        drawn.append((step, first, [p.id for p in ps]))
        return fake_rollouts(ps)

    pipe = RolloutPipeline(generate, lambda r: None, sampler, num_prompts, 0, 0,
                           DynamicSampling(round_prompts, max_rounds, num_prompts))
    return pipe, drawn


def ids(episodes):
    return [e.problem.id for e in episodes[::G]]


def test_a_length_penalty_component_does_not_make_a_group_of_wrong_answers_informative():
    """(A hunt's find) The overlong penalty as a reward component (not grpo.reward_shaping) made a group of answers
    all wrong but of differing lengths informative: the run trained on length alone, its reward rising, with no word.
    Dynamic sampling decides on the components other than the length penalty, as NeMo RL's on the reward before
    its reward shaping."""
    from execrl.trainer.flat import deciding_parts

    def reward(passed: float, penalty: float) -> Reward:
        return Reward(passed - penalty, {"test_pass_fraction": passed, "overlong_penalty": -penalty})

    groups = {"wrong, lengths differ": [reward(0.0, p) for p in (0.0, 0.5, 0.0, 0.25)],
              "right and wrong": [reward(r, 0.0) for r in (1.0, 0.0, 0.0, 0.0)]}
    eps = [Episode(Problem(i, [], "code"), None, [], Trajectory([1], [Segment([2], True)]), None, r)
           for i, rs in groups.items() for r in rs]
    cfg = load_config(None, ["reward.components=[{name: test_pass_fraction}, "
                             "{name: overlong_penalty, buffer_tokens: 8}]"])
    deciding = deciding_parts(cfg.reward)
    assert deciding == {"test_pass_fraction": 1.0}
    kept, dropped = informative(Rollouts(eps, G), deciding)
    assert [g[0].problem.id for g in kept] == ["right and wrong"] and ids(dropped) == ["wrong, lengths differ"]
    assert len(informative(Rollouts(eps, G))[0]) == 2  # (the reward alone: both differ)
    assert deciding_parts(load_config(None).reward) is None  # (correctness alone: the reward decides)
    for other in ("{name: format}", "{name: reward_model}"):  # (no shaping: a format reward or a reward model that
        reward = load_config(None, [f"reward.components=[{{name: test_pass_fraction}}, {other}]"]).reward  # ranks
        assert deciding_parts(reward) is None  # answers that pass tells a group apart, as documented)


def test_flat_groups_and_groups_with_fewer_than_two_valid_answers_are_not_informative():
    kept, dropped = informative(fake_rollouts([Problem(i, [], "math", answer="1") for i in REWARDS]))
    assert [g[0].problem.id for g in kept] == ["mixed", "half", "infra_mixed"]
    assert ids(dropped) == ["flat0", "flat1", "one_valid"]


def test_rounds_are_generated_until_the_batch_holds_only_informative_groups():
    pipe, drawn = pipeline(["flat0", "mixed", "flat1", "half", "one_valid", "flat0", "infra_mixed", "mixed"], 3, 2, 10)
    times = {}
    rollouts, info = pipe.next(0, times)
    # rounds of 2 prompts: [flat0 mixed] [flat1 half] [one_valid flat0] [infra_mixed mixed] -> 3 informative needed
    assert drawn == [(0, 0, ["flat0", "mixed"]), (0, 2, ["flat1", "half"]), (0, 4, ["one_valid", "flat0"]),
                     (0, 6, ["infra_mixed", "mixed"])]  # each round's prompts keyed by their place in the step
    assert ids(rollouts.episodes) == ["mixed", "half", "infra_mixed"]
    assert ids(rollouts.dropped) == ["flat0", "flat1", "one_valid", "flat0", "mixed"]  # the surplus last
    assert info["dynamic_sampling_rounds"] == 4 and info["dynamic_sampling_surplus_groups"] == 1
    assert info["dynamic_sampling_informative_frac"] == 4 / 8
    assert times["generate"] == 4.0 and times["grade"] == 2.0  # every round's time counts
    assert pipe.data_position(0) == {"epoch": 0, "pos": 0}  # Ctrl-C during the step: all its rounds are redone
    assert pipe.data_position(1) == {"epoch": 0, "pos": 8} and pipe.sampler.passes == 1.0  # after it: all drawn


def test_a_step_that_cannot_be_filled_stops_with_the_fix():
    pipe, drawn = pipeline(["flat0", "flat1", "flat0", "mixed", "flat1", "flat0"], 2, 2, 3)
    with pytest.raises(DynamicSamplingExhausted, match="3 rounds of 2 prompts gave 1 of the 2 groups.*"
                                                       "dynamic_sampling_max_gen_batches"):
        pipe.next(0, {})
    assert len(drawn) == 3


def test_the_loss_is_normalized_over_the_kept_groups_tokens_only():
    """Training on the filled batch is training on the informative groups alone: flat groups' tokens enter no
    denominator (with dynamic sampling off they would, with advantage 0)."""
    cfg = load_config(None, ["grpo.num_generations_per_prompt=4"])
    pipe, _ = pipeline(["flat0", "mixed", "half", "flat1"], 2, 4, 1)
    rollouts, _ = pipe.next(0, {})
    adv, _, _ = advantages(rollouts, cfg)
    batch = build_batch(rollouts, adv, 0, False)
    assert batch.loss_mask.sum() == 2 * G  # one sampled token per sample of the 2 kept groups
    everything = Rollouts(rollouts.generated, G)
    assert build_batch(everything, advantages(everything, cfg)[0], 0, False).loss_mask.sum() == 4 * G


def test_config_dynamic_sampling_keys():
    from execrl.config.checks import check_supported, no_effect_note

    with pytest.raises(ConfigError, match="async GRPO"):
        check_supported(load_config(None, [*DS, "grpo.async_grpo.enabled=true"]))
    check_supported(load_config(None, [*DS]))
    for multiplier in ("2", "0.5"):  # (NeMo RL asserts batch_multiplier == 1 without dynamic sampling)
        with pytest.raises(ConfigError, match="batch_multiplier is .* without grpo.use_dynamic_sampling.*NeMo RL"):
            check_supported(load_config(None, [f"grpo.batch_multiplier={multiplier}"]))
    check_supported(load_config(None, ["grpo.batch_multiplier=1"]))
    assert no_effect_note(load_config(None, [*DS, "grpo.batch_multiplier=2"])) is None
    with pytest.raises(ConfigError):
        load_config(None, ["grpo.dynamic_sampling_max_gen_batches=0"])


def test_dynamic_sampling_counts_rounds_and_prompts_as_nemo_rl():
    """NeMo RL draws int(num_prompts_per_step x batch_multiplier) prompts a round (16 x 1.3: 20, not 21) and allows
    dynamic_sampling_max_gen_batches + 1 rounds; with leave-one-out it filters single samples (execrl: refused)."""
    from execrl.config import plan
    from execrl.config.checks import check_supported

    cfg = load_config(None, [*DS, "grpo.num_prompts_per_step=16", "grpo.batch_multiplier=1.3",
                             "policy.train_global_batch_size=128"])
    assert plan(cfg).prompts_per_round == 20
    assert "11 rounds at most" in plan(load_config(None, [*DS])).describe(load_config(None, [*DS]))
    with pytest.raises(ConfigError, match="use_leave_one_out_baseline=false"):
        check_supported(load_config(None, ["grpo.use_dynamic_sampling=true"]))
    pipe, drawn = pipeline(["flat0", "flat1", "flat0", "mixed"], 1, 1, 3 + 1)  # max_gen_batches 3: a 4th round
    rollouts, info = pipe.next(0, {})
    assert ids(rollouts.episodes) == ["mixed"] and info["dynamic_sampling_rounds"] == 4


def test_dynamic_sampling_decides_on_the_reward_before_shaping_and_normalizes_by_the_shaped_std():
    """NeMo RL's current code: a group whose task rewards are equal is flat even where the overlong penalty makes the
    totals differ; a kept group's advantages are its shaped rewards less their mean, divided by their own std (the
    unshaped rewards only decide which groups are kept: divided by theirs, close task rewards with one penalized
    sample made advantages of ~30-90)."""
    shaped = [Reward(1.0 - p, shaping=-p) for p in (0.0, 0.5, 0.0, 0.25)]  # all pass, two of them overlong
    mixed = [Reward(r - p, shaping=-p) for r, p in ((1.0, 0.0), (0.0, 0.0), (1.0, 0.5), (0.0, 0.0))]
    groups = [Problem(i, [], "math", answer="1") for i in ("penalized", "mixed")]
    eps = [Episode(p, None, [], Trajectory([1], [Segment([2], True)]), None, r)
           for p, rs in zip(groups, (shaped, mixed)) for r in rs]
    kept, dropped = informative(Rollouts(eps, G))
    assert [g[0].problem.id for g in kept] == ["mixed"] and ids(dropped) == ["penalized"]
    cfg = load_config(None, [*DS, "grpo.num_generations_per_prompt=4"])
    adv, _, _ = advantages(Rollouts(eps[G:], G), cfg)
    # shaped [1, 0, 0.5, 0]: mean 0.375, unbiased std sqrt(0.6875 / 3) = 0.478714
    assert adv.tolist() == pytest.approx([(r - 0.375) / (0.47871355 + 1e-6) for r in (1.0, 0.0, 0.5, 0.0)], abs=1e-5)
    close = [Reward(r - p, shaping=-p) for r, p in ((0.5, 0.0), (0.51, 0.0), (0.5, 0.6), (0.5, 0.0))]
    eps = [Episode(groups[1], None, [], Trajectory([1], [Segment([2], True)]), None, r) for r in close]
    adv, _, _ = advantages(Rollouts(eps, G), cfg)  # partial credit, one sample penalized: of order 1
    # shaped [0.5, 0.51, -0.1, 0.5]: mean 0.3525, unbiased std sqrt(0.273075 / 3) = 0.301704
    assert adv.tolist() == pytest.approx([d / (0.30170349 + 1e-6) for d in (0.1475, 0.1575, -0.4525, 0.1475)], abs=1e-5)


def test_training_with_dynamic_sampling_logs_its_rounds_and_changes_the_update(tmp_path):
    on, d_on = train_run(tmp_path, "on", "grpo.max_num_steps=2", "grpo.val_period=0", "checkpointing.enabled=false",
                         *DS, "grpo.batch_multiplier=1.5", "warmup.sft_steps=80", "logger.rollouts_period=1")
    off, _ = train_run(tmp_path, "off", "grpo.max_num_steps=2", "grpo.val_period=0", "checkpointing.enabled=false",
                       "warmup.sft_steps=80")
    rows = [json.loads(line) for line in (d_on / "metrics.jsonl").read_text().splitlines()]
    assert all(r["train/dynamic_sampling_rounds"] >= 1 and r["train/dynamic_sampling_surplus_groups"] >= 0
               for r in rows)
    assert all(0 < r["train/dynamic_sampling_informative_frac"] <= 1 for r in rows)
    # (a record's find) the rollouts file held the trained groups only, the step's metrics every group generated:
    # now all of them, the ones left out of the loss marked
    for r in rows:
        episodes = [json.loads(line) for line in (d_on / "rollouts" / f"step_{r['step']:06d}.jsonl").open()]
        assert sum(e.get("trained", True) for e in episodes) == 4 * G
        assert sum(e["reward"] for e in episodes) / len(episodes) == pytest.approx(r["train/reward_mean"])
    trained = on.pipeline.training.rollouts  # the first round of the last step
    assert len(trained.episodes) == 6 * G  # 1.5 x 4 prompts a round
    a, b = on.model.state_dict(), off.model.state_dict()
    assert not all(torch.equal(a[k], b[k]) for k in a)  # the key does something


def test_max_num_epochs_counts_every_prompt_drawn(tmp_path, capsys):
    """8 problems, rounds of 2 x 4 prompts: the first step draws a whole epoch, which ends a 1-epoch run there (and
    says so once)."""
    rows = [{"id": str(i), "prompt": f"Print {i}.", "tests": {"inputs": [""], "outputs": [f"{i}\n"]}} for i in range(8)]
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    own = tmp_path / "distinct.py"  # rewards that differ in a group whatever the samples drawn: their text's hash
    own.write_text("import zlib\n\ndef distinct(sample) -> float:\n    return zlib.crc32(sample.completion.encode()) / 2**32\n")
    r, _ = train_run(tmp_path, "epochs", "grpo.max_num_steps=50", "grpo.max_num_epochs=1", "data.train.dataset_name=jsonl",
                     f"data.train.path={data}", "warmup.sft_steps=0", "grpo.val_period=0", "checkpointing.enabled=false",
                     *DS, "grpo.batch_multiplier=2", f"reward.components=[{{name: '{own}:distinct', weight: 1.0}}]")
    assert r.step == 1 and r.sampler.passes == 1.0
    said = capsys.readouterr()
    assert (said.out + said.err).count("passes over the training problems end the run") == 1


def test_rounds_of_fewer_prompts_than_gpus_are_refused():
    """(A hunt's find) rounds of 1 prompt (3 x batch_multiplier 0.34) on 2 processes: each fills its share from its
    part of a round, and rank 0's part was always empty: the run stopped as if every problem were too easy or too
    hard, where one process trained."""
    from execrl.config.batch import plan

    cfg = ["grpo.num_prompts_per_step=3", "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=12",
           *DS, "grpo.batch_multiplier=0.34"]
    assert plan(load_config(None, cfg)).prompts_per_round == 1
    with pytest.raises(ConfigError, match=r"rounds of 1 prompt.* fewer than the 2 GPUs.*batch_multiplier to at least "
                                          r"0\.67"):
        plan(load_config(None, [*cfg, "cluster.gpus_per_node=2"]))
    assert plan(load_config(None, [*cfg, "cluster.gpus_per_node=2",
                                   "grpo.batch_multiplier=0.67"])).prompts_per_round == 2
    with pytest.raises(ConfigError, match=r"batch_multiplier to at least 1\.34"):  # (a review's find: the hint that
        plan(load_config(None, [*cfg, "cluster.gpus_per_node=4"]))  # 4/3 printed, 1.33333, was refused again)
    assert plan(load_config(None, [*cfg, "cluster.gpus_per_node=4",
                                   "grpo.batch_multiplier=1.34"])).prompts_per_round == 4
    plain = ["grpo.num_prompts_per_step=1", "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=4"]
    plan(load_config(None, [*plain, "cluster.gpus_per_node=2"]))  # (a review's find: refused without dynamic sampling)
