"""The same key gives the same number as NeMo RL's current code (its main branch of 2026-08-22), worked by hand in the
comments; where NeMo RL is numerically wrong (its E[r^2] - E[r]^2 std) execrl's exact value, named in
docs/configs.md."""

import math

import pytest
import torch

from execrl.algo import ADVANTAGES, LossTerms, policy_loss
from execrl.config import ConfigError, load_config
from execrl.config.checks import nemo_differences, validate
from execrl.config.schema import LossConfig

T = torch.tensor


def grpo(rewards, **kw):
    r = T([rewards])
    return ADVANTAGES["grpo"](r, torch.ones_like(r, dtype=torch.bool), **kw)[0]


# --- 1. advantages: no division by a rounding-error std ---------------------------------------------------------

def test_leave_one_out_others_all_equal_is_decided_by_comparison():
    # G = 8, [0, .2 x 7]: the first sample's others are all 0.2: baseline 0.2, std 0 -> undivided: -0.2 (NeMo RL).
    # Each 0.2's others are 0 and six 0.2: mean 1.2/7, unbiased std 0.075593 -> (0.2 - 0.171429) / 0.075593 = 0.37796
    a = grpo([0.0] + [0.2] * 7)
    assert a[0].item() == pytest.approx(-0.2) and a[1:] == pytest.approx(torch.full((7,), 0.37796), abs=1e-4)
    assert grpo([0.0, 0.9, 0.9, 0.9])[0].item() == pytest.approx(-0.9)  # G = 4 (was -838,770)


@pytest.mark.parametrize("group", [4, 8, 16])
def test_no_pass_fraction_gives_a_huge_advantage(group):
    """Every reward of the form k/3, k/4, k/5, k/7, k/10 (a pass fraction), alone against G-1 equal others."""
    for denominator in (3, 4, 5, 7, 10):
        for k in range(1, denominator):
            for lone, rest in ((0.0, k / denominator), (k / denominator, 0.0), (1.0, k / denominator)):
                a = grpo([lone] + [rest] * (group - 1))
                assert a[0].item() == pytest.approx(lone - rest, abs=1e-6)  # undivided
                assert a.abs().max().item() < math.sqrt(group) + 1e-3, (lone, rest, a)


def test_the_named_difference_for_a_lone_fractional_reward_is_nemo_rls_number():
    """The start-up note's case: NeMo RL's float32 E[r^2] - E[r]^2 with leave-one-out (calculate_baseline_and_std_
    per_prompt) divides the odd 0.67 of 7 x 0.33 by a rounding residue where its sums leave one, as they do in some
    orders (a matrix product gave 2092.5 on one CPU and 0 on another, so this worked in one fixed order: the group's
    sums less the sample's own, in float32, as numpy adds them one by one); execrl leaves it undivided (0.67 - 0.33)."""
    import numpy as np

    f, r = np.float32, [np.float32(0.33)] * 7 + [np.float32(0.67)]

    def total(xs):
        acc = f(0)
        for x in xs:
            acc = f(acc + x)
        return acc
    baseline = f((total(r) - r[-1]) / f(7))
    square = f((total([f(x * x) for x in r]) - f(r[-1] * r[-1])) / f(7))
    std = np.sqrt(f(f(square - f(baseline * baseline)) * f(7 / 6)))
    assert std > 0 and (r[-1] - baseline) / (std + f(1e-6)) > 1000  # (3,608: a residue of 9.3e-5 as the std)
    assert grpo([float(x) for x in r])[-1].item() == pytest.approx(0.34, abs=1e-6)
    assert "can give that sample thousands there" in " ".join(nemo_differences(load_config(None, [])))


def test_close_rewards_get_the_exact_std():
    # [0.83615, 0.83691] without leave-one-out: mean 0.83653, differences +-0.00038, unbiased std 0.00038 sqrt(2) =
    # 0.000537: +-0.00038 / (0.000537 + 1e-6) = +-0.7058 (NeMo RL's E[r^2] - E[r]^2 in float32 gives +-0.5495 on the CPU)
    a = grpo([0.83615, 0.83691], use_leave_one_out_baseline=False)
    assert a.tolist() == pytest.approx([-0.7058, 0.7058], abs=2e-4)


def test_guided_format_config_trains_with_bounded_advantages():
    """configs/guided_format_cpu.yaml's reward (0.1 weights) trained with loss -45,621 at step 1: its groups of
    fractional rewards, each with one sample off, now give advantages of order 1."""
    for lone, rest in ((0.9, 1.0), (1.0, 0.9), (0.3, 0.4), (0.0, 0.1)):
        a = grpo([lone] + [rest] * 7)
        assert a.abs().max().item() < 3.0


# --- 2. the loss: KL gradients, the on-policy approximation, truncation ----------------------------------------

def one_token(logp=-1.0, old=None, adv=0.0, **kw):
    lp = T([[logp]], requires_grad=True)
    return lp, LossTerms(lp, T([[logp if old is None else old]]), T([adv]), T([[1.0]]), **kw)


@pytest.mark.parametrize("kind, loss, grad", [("k3", math.exp(-0.5) - 0.5, 0.5), ("k1", 0.5, 1.5),
                                              ("k2", 0.125, 0.625)])
def test_kl_gradient_is_that_of_kl_pi_ref(kind, loss, grad):
    # beta 1, A 0, log pi -1, log ref -1.5: r = -0.5. The estimate is multiplied by exp(lp - sg(lp)) (1 in value), whose
    # gradient adds the estimate itself: k3 = e^r - 1 - r = 0.1065, d/dlp = 1 - e^r = 0.3935 -> 0.5; k1 = 0.5, d/dlp 1
    # -> 1.5; k2 = r^2/2 = 0.125, d/dlp = -r = 0.5 -> 0.625 (NeMo RL; the loss values are unchanged)
    lp, t = one_token(ref_logprobs=T([[-1.5]]))
    out, _ = policy_loss(t, LossConfig(reference_policy_kl_penalty=1.0, reference_policy_kl_type=kind),
                         num_tokens=1, num_seqs=1)
    out.backward()
    assert out.item() == pytest.approx(loss) and lp.grad.item() == pytest.approx(grad)


def test_on_policy_kl_weight_is_applied_before_the_output_clamp_and_carries_gradient():
    # log pi -1, ref 2 (r = 3, k3 = e^3 - 4 = 16.09), sampler -1.5: w = e^0.5 = 1.6487, w k3 = 26.5 -> clamped to 10:
    # loss 10, gradient 0 (the clamp stops both); execrl's old order (clamp, then a detached weight) gave 16.389
    lp, t = one_token(ref_logprobs=T([[2.0]]), sampler_logprobs=T([[-1.5]]))
    cfg = LossConfig(reference_policy_kl_penalty=1.0, use_on_policy_kl_approximation=True)
    out, _ = policy_loss(t, cfg, num_tokens=1, num_seqs=1)
    out.backward()
    assert out.item() == pytest.approx(10.0) and lp.grad.item() == 0.0
    # the input clamp: r = 25 is cut to 20; the weight is then detached too (gradient of the clamped estimate only: 0)
    lp, t = one_token(ref_logprobs=T([[24.0]]), sampler_logprobs=T([[-1.0]]))
    out, _ = policy_loss(t, cfg.model_copy(update={"kl_output_clamp_value": None}), num_tokens=1, num_seqs=1)
    out.backward()
    assert out.item() == pytest.approx(math.exp(20) - 21, rel=1e-5) and lp.grad.item() == 0.0


def test_tis_clamps_to_ratio_min():
    # one token, A 1, on the proximal policy, weight pi_old / pi_sampler = e^-1.5 = 0.2231: tis with ratio_min 0.5
    # raises it to 0.5 (NeMo RL): loss -0.5, where ignoring the minimum gave -0.2231
    _, t = one_token(logp=-1.5, adv=1.0, sampler_logprobs=T([[0.0]]))
    cfg = LossConfig(truncated_importance_sampling_type="tis", truncated_importance_sampling_ratio=2.0,
                     truncated_importance_sampling_ratio_min=0.5)
    out, m = policy_loss(t, cfg, num_tokens=1, num_seqs=1, is_correction=True)
    assert out.item() == pytest.approx(-0.5) and m["is_truncated_frac"].item() == 1.0


def test_a_ratio_min_of_zero_is_accepted_and_equals_null():
    # NeMo RL accepts ratio_min 0 (its tis reads null as 0): a NeMo-written config with 0.0 loads, and its loss is
    # the one of null
    base = ["loss_fn.use_importance_sampling_correction=true", "loss_fn.truncated_importance_sampling_type=tis",
            "loss_fn.truncated_importance_sampling_ratio=2"]
    cfg = load_config(None, base + ["loss_fn.truncated_importance_sampling_ratio_min=0.0"])
    validate(cfg)
    assert cfg.loss_fn.truncated_importance_sampling_ratio_min == 0.0
    _, t = one_token(logp=-1.5, adv=1.0, sampler_logprobs=T([[0.0]]))
    zero, null = (policy_loss(t, LossConfig(truncated_importance_sampling_type="tis", truncated_importance_sampling_ratio=2.0,
                                            truncated_importance_sampling_ratio_min=low), num_tokens=1, num_seqs=1,
                              is_correction=True)[0].item() for low in (0.0, None))
    assert zero == null == pytest.approx(-math.exp(-1.5))


def test_gspo_overflowed_weight_is_zero_and_diagnostics_are_per_token():
    cfg = LossConfig(sequence_level_importance_ratios=True, token_level_loss=False,
                     truncated_importance_sampling_type="tis", truncated_importance_sampling_ratio=2.0)
    # a sequence whose summed log-weight overflows float32 (100 tokens x 1.0 -> e^100): NeMo RL's weight 0, so the
    # sequence's loss and gradient are 0 (a cap would have given it weight 2)
    lp = torch.zeros(1, 100, requires_grad=True)
    t = LossTerms(lp, torch.zeros(1, 100), T([1.0]), torch.ones(1, 100), sampler_logprobs=torch.full((1, 100), -1.0))
    out, _ = policy_loss(t, cfg, num_tokens=100, num_seqs=1, is_correction=True)
    out.backward()
    assert out.item() == 0.0 and lp.grad.abs().max().item() == 0.0
    # ten tokens each off by 0.1: the mismatch is 0.1 a token and the sampler's KL (k3) e^0.1 - 1.1 = 0.00517 a token;
    # the weight of the sequence is e^(10 x 0.1) = e, cut to 2, a mean over sequences
    t = LossTerms(torch.zeros(1, 10), torch.zeros(1, 10), T([1.0]), torch.ones(1, 10),
                  sampler_logprobs=torch.full((1, 10), -0.1))
    _, m = policy_loss(t, cfg, num_tokens=10, num_seqs=1, is_correction=True)
    assert m["logprob_mismatch"].item() == pytest.approx(0.1)
    assert m["sampler_kl"].item() == pytest.approx(math.exp(0.1) - 1.1, rel=1e-4)
    assert m["is_weight"].item() == pytest.approx(2.0)


def test_sequence_level_loss_counts_kept_samples_without_loss_tokens():
    """token_level_loss false: NeMo RL divides by its valid sequences (sample_mask), loss tokens or not."""
    from execrl.envs import Segment, Trajectory
    from execrl.rewards import Reward
    from execrl.tasks import Problem
    from execrl.trainer.rollouts import Episode, Rollouts
    from execrl.trainer.step import build_batch

    p = Problem("p", [], "math", answer="1")
    trajs = [Trajectory([1], [Segment([2], True)]), Trajectory([1], [Segment([3], False)])]  # the second: no tokens
    from types import SimpleNamespace

    played = SimpleNamespace(frozen=False)  # (the policy's seat: no self-play opponent)
    eps = [Episode(p, played, [], tr, None, Reward(r)) for tr, r in zip(trajs, (1.0, 0.0))]
    batch = build_batch(Rollouts(eps, 2), T([1.0, -1.0]), 0, False)
    assert batch.kept.tolist() == [True, True] and batch.loss_mask.sum(1).tolist() == [1.0, 0.0]
    # the first sample's per-token loss -1 (A 1, ratio 1), over the 2 kept sequences: -0.5 (not -1)
    _, t = one_token(logp=0.0, adv=1.0)
    t = LossTerms(T([[0.0], [0.0]]), T([[0.0], [0.0]]), T([1.0, -1.0]), batch.loss_mask)
    out, _ = policy_loss(t, LossConfig(token_level_loss=False), num_tokens=1, num_seqs=float(batch.kept.sum()))
    assert out.item() == pytest.approx(-0.5)


# --- 2. configs NeMo RL refuses ---------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, fix", [
    (["loss_fn.use_cispo=true", "loss_fn.ratio_clip_c=3"], "ratio_clip_c=null"),
    (["loss_fn.use_cispo=true", "loss_fn.token_level_loss=false"], "token_level_loss=true"),
    (["loss_fn.truncated_importance_sampling_type=tis", "loss_fn.truncated_importance_sampling_ratio=2"],
     "use_importance_sampling_correction=true"),
    (["loss_fn.use_importance_sampling_correction=true", "loss_fn.truncated_importance_sampling_type=null",
      "loss_fn.truncated_importance_sampling_ratio=2"], "truncated_importance_sampling_type=tis"),
    (["loss_fn.use_importance_sampling_correction=true", "loss_fn.truncated_importance_sampling_type=tis",
      "loss_fn.truncated_importance_sampling_ratio=2", "loss_fn.truncated_importance_sampling_ratio_min=3"],
     "at most the ratio"),
    (["loss_fn.use_importance_sampling_correction=true", "loss_fn.truncated_importance_sampling_type=tis"],
     "truncated_importance_sampling_ratio"),
])
def test_configs_nemo_rl_refuses_are_refused(overrides, fix):
    with pytest.raises(ConfigError, match=fix):
        validate(load_config(None, overrides))


def test_a_ratio_without_a_type_from_an_older_nemo_config_is_tis_and_named():
    """NeMo RL configs from before the type key (eraC's DAPO recipes) set only the ratio: read as tis, as that NeMo
    did, and named in the start-up note."""
    cfg = load_config(None, ["loss_fn.use_importance_sampling_correction=true",
                             "loss_fn.truncated_importance_sampling_ratio=2"])
    validate(cfg)
    assert any("read as tis" in d for d in nemo_differences(cfg))
    assert any("exact std" in d for d in nemo_differences(cfg))
    assert not any("tis" in d for d in nemo_differences(load_config(None, [])))


# --- 2. top-k / top-p: scored under the filtered, renormalized distribution ---------------------------------------

def test_top_k_scores_the_filtered_distribution_in_the_trainer_and_the_sampler():
    from execrl.algo.logprobs import token_logprobs_from_hidden
    from execrl.rollout.sampling import SamplingParams, sample

    # logits [2, 1.5, .3, -.5, -1, -2], token 1, top_k 2: log softmax over {2, 1.5} = 1.5 - log(e^2 + e^1.5) = -0.9741
    # (the unfiltered softmax gave -1.1624)
    logits = T([[2.0, 1.5, 0.3, -0.5, -1.0, -2.0]])
    eye = torch.eye(6)
    logp, _ = token_logprobs_from_hidden(logits, eye, T([1]), top=(2, 1.0))
    assert logp.item() == pytest.approx(-0.9741, abs=1e-4)
    assert token_logprobs_from_hidden(logits, eye, T([1]))[0].item() == pytest.approx(-1.1624, abs=1e-4)
    # top_p 0.7: the likeliest holds e^2 / sum = 0.4967 < 0.7, so 1.5 stays; after them 0.798 >= 0.7: the rest go
    nucleus = token_logprobs_from_hidden(logits, eye, T([1]), top=(None, 0.7))[0]
    assert nucleus.item() == pytest.approx(-0.9741, abs=1e-4)
    # the sampler reports the same number for the token it drew from the same filter
    keys = torch.arange(64, dtype=torch.int32)
    tokens, reported = sample(logits.expand(64, -1), SamplingParams(1.0, top_k=2), keys)
    assert set(tokens.tolist()) == {0, 1}
    assert reported[tokens == 1] == pytest.approx(torch.full(((tokens == 1).sum(),), -0.9741), abs=1e-4)


def test_the_kl_reads_the_unfiltered_current_logprobs():
    # filtered log pi -0.9741 (the PPO ratio's), unfiltered -1.1624 (the KL's, against the unfiltered reference -1.5):
    # k1 = log pi - log ref = 0.3376, not 0.5259
    t = LossTerms(T([[-0.9741]], requires_grad=True), T([[-0.9741]]), T([0.0]), T([[1.0]]), ref_logprobs=T([[-1.5]]),
                  unfiltered_logprobs=T([[-1.1624]], requires_grad=True))
    out, _ = policy_loss(t, LossConfig(reference_policy_kl_penalty=1.0, reference_policy_kl_type="k1"),
                         num_tokens=1, num_seqs=1)
    assert out.item() == pytest.approx(0.3376, abs=1e-4)


def test_a_trajectory_age_above_one_is_named_as_a_bound_only():
    """execrl's async generates one step ahead whatever the age; NeMo RL's generation runs that many steps ahead."""
    note = " ".join(nemo_differences(load_config(None, ["grpo.async_grpo.enabled=true",
                                                        "grpo.async_grpo.max_trajectory_age_steps=2"])))
    assert "max_trajectory_age_steps=2 bounds the rollouts' age only" in note
    assert "max_trajectory_age_steps" not in " ".join(nemo_differences(load_config(None, ["grpo.async_grpo.enabled=true"])))
    # (a hunt's find) the importance-sampling key left out is on here; NeMo RL's default (false) fails its own check
    left_out = " ".join(nemo_differences(load_config(None, ["grpo.async_grpo.enabled=true"])))
    assert "loss_fn.use_importance_sampling_correction left out is on with async GRPO" in left_out
    assert "use_importance_sampling_correction" not in " ".join(nemo_differences(load_config(None, [
        "grpo.async_grpo.enabled=true", "loss_fn.use_importance_sampling_correction=true"])))


def test_the_loss_and_grad_norm_over_several_optimizer_steps_are_a_named_difference():
    """NeMo RL's train/loss is the sum of a GRPO step's optimizer steps' losses and its grad_norm the last one's;
    execrl logs their mean: named at start-up where a step takes several."""
    assert "mean over the step's 2 optimizer steps" in " ".join(nemo_differences(load_config(None, [
        "policy.train_global_batch_size=64"])))
    assert "optimizer steps (NeMo" not in " ".join(nemo_differences(load_config(None, [])))


def test_a_prompt_limit_names_what_nemo_rl_does_with_a_long_prompt():
    """NeMo RL's processors cut a prompt of max_input_seq_length tokens or more and train on none of its samples;
    execrl leaves it out: a difference named when the key is set."""
    said = " ".join(nemo_differences(load_config(None, ["data.max_input_seq_length=100"])))
    assert "data.max_input_seq_length (100) tokens or more is left out" in said and "NeMo RL cuts it" in said
    assert not any("max_input_seq_length" in d for d in nemo_differences(load_config(None, [])))


def test_cispo_with_no_lower_clip_loads_and_weights_by_the_upper_clamp_only():
    """(A hunt's find) NeMo RL's CISPO guide sets ratio_clip_min: 1.0, ratio_clip_max: 5.0 (the ratio clamped to
    [0, 6]: an upper clamp only); execrl refused any ratio_clip_min of 1 or more. Ratio 0.1 (log pi -2.3026 against
    old 0, A 1): not clamped below, so the weight is 0.1 and the loss -0.1 x -2.3026 = 0.23026; ratio 10: weight 6."""
    cfg = load_config(None, ["loss_fn.use_cispo=true", "loss_fn.ratio_clip_min=1.0", "loss_fn.ratio_clip_max=5.0"])
    assert cfg.loss_fn.ratio_clip_min == 1.0
    for logp, weight in ((math.log(0.1), 0.1), (math.log(10.0), 6.0)):
        lp, t = one_token(logp, old=0.0, adv=1.0)
        out, _ = policy_loss(t, cfg.loss_fn, num_tokens=1, num_seqs=1)
        out.backward()
        assert out.item() == pytest.approx(-weight * logp, rel=1e-5) and lp.grad.item() == pytest.approx(-weight)


def test_reward_scaling_and_shaping_with_async_are_a_named_difference():
    """(A hunt's find) NeMo RL's run_grpo.py raises NotImplementedError for reward_scaling or reward_shaping with
    async GRPO; execrl applies them as in sync GRPO, and says so."""
    said = " ".join(nemo_differences(load_config(None, ["grpo.async_grpo.enabled=true",
                                                        "reward.scaling.enabled=true"])))
    assert "reward scaling (grpo.reward_scaling, reward.scaling) with async GRPO: execrl applies it" in said
    assert "async GRPO: execrl applies" not in " ".join(nemo_differences(load_config(None, [
        "reward.scaling.enabled=true"])))


def test_a_global_batch_above_the_steps_samples_says_nemo_rl_stops_there():
    """(A hunt's find) NeMo RL asserts that a step's samples are a multiple of train_global_batch_size; execrl trains
    one optimizer step over them, and its plan's note says where NeMo RL stops."""
    from execrl.config.batch import plan

    notes = " ".join(plan(load_config(None, ["policy.train_global_batch_size=4096"])).notes)
    assert "one optimizer step per rollout" in notes and "NeMo RL's code stops here" in notes


def test_a_nemo_configs_math_verify_and_multi_turn_shaping_differences_are_named():
    """(A hunt's find) Two differences docs/configs.md gave and start-up did not: hf_math_verify's own extraction of
    the final answer, and grpo.reward_shaping's length read from a multi-turn episode's last turn. NeMo RL's top_k -1
    (no filtering) is read as null; 0 stays refused, as NeMo RL refuses it."""
    from pathlib import Path

    nemo = Path(__file__).resolve().parents[1] / "assets/nemo_rl/eraF_ad3472a/examples/configs/grpo_math_1B.yaml"
    shaping = ["grpo.reward_shaping.enabled=true", "grpo.reward_shaping.overlong_buffer_length=128",
               "grpo.reward_shaping.overlong_buffer_penalty=1", "grpo.reward_shaping.max_response_length=512"]
    said = " ".join(nemo_differences(load_config(str(nemo), shaping)))
    assert "hands math-verify the whole response" in said and "last model turn" not in said
    said = " ".join(nemo_differences(load_config(str(nemo), [*shaping, "grpo.max_rollout_turns=3"])))
    assert "first assistant message" in said
    assert "math-verify" not in " ".join(nemo_differences(load_config(None, [])))  # (execrl's own config)
    gen = load_config(str(nemo), ["policy.generation.top_k=-1", "policy.generation.val_top_k=-1"]).policy.generation
    assert gen.top_k is None and gen.val_top_k is None
    with pytest.raises(ConfigError, match="top_k: .*null or -1"):
        load_config(None, ["policy.generation.top_k=0"])
    with pytest.raises(ConfigError) as e:  # (a hunt's find: NeMo RL's val_top_k copies top_k, and the error came twice)
        load_config(str(nemo), ["policy.generation.top_k=0"])
    assert str(e.value).count("keeps no token") == 1 and "(and policy.generation.val_top_k: the same)" in str(e.value)
