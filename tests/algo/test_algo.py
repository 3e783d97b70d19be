"""Advantages and loss with values worked out by hand in the comments."""

import math

import pytest
import torch

from execrl.algo import ADVANTAGES, LossTerms, flat_groups, policy_loss
from execrl.config.schema import LossConfig

T = torch.tensor


def test_group_normalized_advantages():
    r = T([[1.0, 0.0, 0.0, 1.0]])  # mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = 0.57735
    a = ADVANTAGES["grpo"](r, torch.ones_like(r, dtype=torch.bool), use_leave_one_out_baseline=False)
    assert a == pytest.approx(T([[0.8660, -0.8660, -0.8660, 0.8660]]), abs=1e-4)  # 0.5 / 0.57735


def test_leave_one_out_baseline():
    r = T([[1.0, 0.0, 0.0, 0.0]])
    a = ADVANTAGES["grpo"](r, torch.ones_like(r, dtype=torch.bool), normalize_rewards=False)
    # sample 0: 1 - mean(0, 0, 0) = 1; others: 0 - mean(1, 0, 0) = -1/3
    assert a == pytest.approx(T([[1.0, -1 / 3, -1 / 3, -1 / 3]]))


def test_invalid_samples_are_left_out_and_get_zero():
    r = T([[1.0, 0.0, 5.0]])
    valid = T([[True, True, False]])
    a = ADVANTAGES["grpo"](r, valid, normalize_rewards=False, use_leave_one_out_baseline=False)
    assert a == pytest.approx(T([[0.5, -0.5, 0.0]]))  # mean of the two valid = 0.5; the 5.0 is ignored
    lone = ADVANTAGES["grpo"](T([[3.0, 1.0]]), T([[True, False]]))
    assert lone.tolist() == [[0.0, 0.0]]  # a group of one valid sample has no baseline


def test_dr_grpo_does_not_divide_by_std():
    r = T([[2.0, 0.0]])
    assert ADVANTAGES["dr_grpo"](r, torch.ones_like(r, dtype=torch.bool)).tolist() == [[1.0, -1.0]]


def test_equal_rewards_give_zero_advantage_and_are_not_informative():
    r = T([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    ok = torch.ones_like(r, dtype=torch.bool)
    assert ADVANTAGES["grpo"](r, ok)[0].tolist() == [0.0, 0.0, 0.0]
    assert flat_groups(r, ok).tolist() == [True, False]


def terms(logp, old, adv, mask=None, **kw):
    logp = T(logp, requires_grad=True)
    return LossTerms(logp, T(old), T(adv), T(mask) if mask is not None else torch.ones_like(logp), **kw)


def test_on_policy_loss_is_minus_mean_advantage_and_its_gradient():
    t = terms([[-1.0, -2.0], [-0.5, -0.5]], [[-1.0, -2.0], [-0.5, -0.5]], [1.0, -2.0])
    loss, m = policy_loss(t, LossConfig(), num_tokens=4, num_seqs=2)
    # ratio = 1 everywhere: per-token loss = -A: (-1 -1 +2 +2) / 4 = 0.5
    assert loss.item() == pytest.approx(0.5) and m["clip_frac"].item() == 0.0
    loss.backward()
    assert t.logprobs.grad.tolist() == [[-0.25, -0.25], [0.5, 0.5]]  # d(-ratio * A / 4)/dlogp = -A / 4


def test_clipping_is_asymmetric():
    # one token, A = +1, ratio e^0.5 = 1.6487: clipped at 1 + 0.28 = 1.28 (clip-higher), not 1.2
    t = terms([[0.5]], [[0.0]], [1.0])
    loss, m = policy_loss(t, LossConfig(ratio_clip_min=0.2, ratio_clip_max=0.28), num_tokens=1, num_seqs=1)
    assert loss.item() == pytest.approx(-1.28) and m["clip_frac"].item() == 1.0
    loss.backward()
    assert t.logprobs.grad.item() == 0.0  # clipped: no gradient
    # A = -1, ratio e^-0.5 = 0.6065 < 0.8: min(-0.6065, -0.8) = -0.8 -> loss 0.8
    loss, _ = policy_loss(terms([[-0.5]], [[0.0]], [-1.0]), LossConfig(), num_tokens=1, num_seqs=1)
    assert loss.item() == pytest.approx(0.8)


def test_dual_clip_bounds_negative_advantages():
    # A = -1, ratio e^2 = 7.389: min(-7.389, -1.2) = -7.389; dual clip c = 3 -> max(-7.389, -3) = -3 -> loss 3
    loss, _ = policy_loss(terms([[2.0]], [[0.0]], [-1.0]), LossConfig(ratio_clip_c=3.0), num_tokens=1, num_seqs=1)
    assert loss.item() == pytest.approx(3.0)


def test_token_versus_sequence_level_aggregation():
    # seq 0 has 3 tokens with loss -1 each (A = 1), seq 1 has 1 token with loss 2 (A = -2)
    t = terms([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0] * 3, [0.0] * 3], [1.0, -2.0], mask=[[1, 1, 1], [1, 0, 0]])
    token, _ = policy_loss(t, LossConfig(), num_tokens=4, num_seqs=2)
    assert token.item() == pytest.approx((-3 + 2) / 4)
    seq, _ = policy_loss(t, LossConfig(token_level_loss=False), num_tokens=4, num_seqs=2)
    assert seq.item() == pytest.approx((-1 + 2) / 2)
    dr, _ = policy_loss(t, LossConfig(constant_normalizer=10), num_tokens=4, num_seqs=2)
    assert dr.item() == pytest.approx((-3 + 2) / (10 * 2))


def test_micro_batches_sum_to_the_full_batch():
    torch.manual_seed(0)
    logp, old, adv = torch.randn(4, 5), torch.randn(4, 5), torch.randn(4)
    mask = (torch.rand(4, 5) > 0.3).float()
    n = mask.sum().item()
    full, _ = policy_loss(LossTerms(logp, old, adv, mask), LossConfig(), num_tokens=n, num_seqs=4)
    parts = sum(policy_loss(LossTerms(logp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2]), LossConfig(),
                            num_tokens=n, num_seqs=4)[0] for i in (0, 2))
    assert parts.item() == pytest.approx(full.item())


def test_kl_penalties():
    # logp = -1, ref = -2: delta = ref - logp = -1. k3 = e^-1 + 1 - 1 = 0.3679; k1 = -delta = 1
    t = terms([[-1.0]], [[-1.0]], [0.0], ref_logprobs=T([[-2.0]]))
    k3, m = policy_loss(t, LossConfig(reference_policy_kl_penalty=0.5, reference_policy_kl_type="k3"), num_tokens=1,
                        num_seqs=1)
    assert k3.item() == pytest.approx(0.5 * math.exp(-1)) and m["kl"].item() == pytest.approx(math.exp(-1))
    k1, _ = policy_loss(t, LossConfig(reference_policy_kl_penalty=0.5, reference_policy_kl_type="k1"), num_tokens=1,
                        num_seqs=1)
    assert k1.item() == pytest.approx(0.5)


def test_on_policy_kl_approximation_weights_the_kl_by_current_over_sampler():
    # logp = -1, ref = -2, sampler = -1.5: w = e^(logp - sampler) = e^0.5, k3 = e^-1; d k3 / d logp = 1 - e^-1 and
    # d w / d logp = w (NeMo RL: not detached): d (w k3) / d logp = w (k3 + 1 - e^-1) = w
    t = terms([[-1.0]], [[-1.0]], [0.0], ref_logprobs=T([[-2.0]]), sampler_logprobs=T([[-1.5]]))
    kl = LossConfig(reference_policy_kl_penalty=0.5, reference_policy_kl_type="k3")
    loss, _ = policy_loss(t, kl.model_copy(update={"use_on_policy_kl_approximation": True}), num_tokens=1, num_seqs=1)
    assert loss.item() == pytest.approx(0.5 * math.exp(0.5) * math.exp(-1))
    loss.backward()
    assert t.logprobs.grad.item() == pytest.approx(0.5 * math.exp(0.5))
    plain, _ = policy_loss(terms([[-1.0]], [[-1.0]], [0.0], ref_logprobs=T([[-2.0]]), sampler_logprobs=T([[-1.5]])),
                           kl, num_tokens=1, num_seqs=1)
    assert plain.item() == pytest.approx(0.5 * math.exp(-1))


def test_importance_sampling_correction_is_truncated():
    # old = 0, sampler = -1: weight e^1 = 2.718, capped at 2. On-policy ratio 1, A = 1: loss = -1 * 2
    t = terms([[0.0]], [[0.0]], [1.0], sampler_logprobs=T([[-1.0]]))
    loss, _ = policy_loss(t, LossConfig(truncated_importance_sampling_ratio=2.0), num_tokens=1, num_seqs=1,
                          is_correction=True)
    assert loss.item() == pytest.approx(-2.0)


def test_importance_weight_is_proximal_over_behaviour_and_its_diagnostics():
    # two tokens, A = 1, on the proximal policy (logp = old). old - sampler = [0.5, 0]:
    # weights e^0.5 = 1.6487 -> capped at 1.5, and e^0 = 1; loss = -(1.5 + 1) / 2 = -1.25
    t = terms([[0.0, -1.0]], [[0.0, -1.0]], [1.0], sampler_logprobs=T([[-0.5, -1.0]]))
    loss, m = policy_loss(t, LossConfig(truncated_importance_sampling_ratio=1.5), num_tokens=2, num_seqs=1,
                          is_correction=True)
    assert loss.item() == pytest.approx(-1.25)
    loss.backward()
    assert t.logprobs.grad[0].tolist() == pytest.approx([-0.75, -0.5])  # -A * w / 2: the weight is a constant
    assert m["logprob_mismatch"].item() == pytest.approx(0.25)  # (|0.5| + 0) / 2
    assert m["sampler_kl"].item() == pytest.approx((math.exp(0.5) - 1.5) / 2)  # k3: (e^0.5 - 1 - 0.5 + 0) / 2
    assert m["is_weight"].item() == pytest.approx(1.25) and m["is_truncated_frac"].item() == 0.5
    # the same batch without the correction: plain GRPO, -(1 + 1) / 2, the diagnostics unchanged
    off, m_off = policy_loss(terms([[0.0, -1.0]], [[0.0, -1.0]], [1.0], sampler_logprobs=T([[-0.5, -1.0]])),
                             LossConfig(truncated_importance_sampling_ratio=1.5), num_tokens=2, num_seqs=1,
                             is_correction=False)
    assert off.item() == pytest.approx(-1.0) and m_off["logprob_mismatch"].item() == pytest.approx(0.25)


def test_importance_weight_below_one_is_kept_and_masked_tokens_cannot_overflow():
    # token 0: the sampler liked it more than the proximal policy: weight e^-1 = 0.3679 (never raised to 1).
    # token 1 is masked out, its sampler logprob absurd (e^200 overflows float32): it must not turn the loss to NaN
    t = terms([[-1.0, 0.0]], [[-1.0, 0.0]], [2.0], mask=[[1.0, 0.0]], sampler_logprobs=T([[0.0, -200.0]]))
    loss, m = policy_loss(t, LossConfig(truncated_importance_sampling_ratio=None), num_tokens=1, num_seqs=1, is_correction=True)
    assert loss.item() == pytest.approx(-2.0 * math.exp(-1.0))
    assert m["is_weight"].item() == pytest.approx(math.exp(-1.0)) and m["is_truncated_frac"].item() == 0.0


# --- the same keys give NeMo RL's numbers (issue 18) ------------------------------------------------------------

def test_leave_one_out_with_normalization_divides_by_the_others_std():
    # one success in 16. NeMo RL: the success's baseline and std are those of the 15 others (all 0): baseline 0, std
    # 0, so it is not divided: A = 1. A failure's others are 14 zeros and one 1: mean 1/15, unbiased variance
    # (14 (1/15)^2 + (14/15)^2) / 14 = 1/15: A = (0 - 1/15) / sqrt(1/15) = -1/sqrt(15) = -0.2582
    r = T([[1.0] + [0.0] * 15])
    a = ADVANTAGES["grpo"](r, torch.ones_like(r, dtype=torch.bool))
    assert a[0, 0].item() == pytest.approx(1.0)
    assert a[0, 1:] == pytest.approx(torch.full((15,), -1 / math.sqrt(15)), abs=1e-5)
    # without leave-one-out: mean 1/16, unbiased std sqrt((15/256 + 225/256) / 15) = 1/4: 3.75 and -0.25
    b = ADVANTAGES["grpo"](r, torch.ones_like(r, dtype=torch.bool), use_leave_one_out_baseline=False)
    assert b[0, 0].item() == pytest.approx(3.75, abs=1e-4) and b[0, 1].item() == pytest.approx(-0.25, abs=1e-5)


@pytest.mark.parametrize("value", [0.7, 0.9, 0.1, 1 / 3])
def test_a_group_of_equal_rewards_gets_exactly_zero_and_counts_as_flat(value):
    r = torch.full((1, 16), value)
    ok = torch.ones_like(r, dtype=torch.bool)
    for name in ("grpo", "dr_grpo"):
        for loo in (True, False):
            assert ADVANTAGES[name](r, ok, use_leave_one_out_baseline=loo).abs().max().item() == 0.0
    assert flat_groups(r, ok).tolist() == [True]


def test_kl_estimators_and_clamps_as_nemo():
    from execrl.algo.loss import kl_penalty

    # r = ref - logp = -1: k1 = 1, k2 = 1/2, k3 = e^-1 - 1 + 1 = 0.3679
    logp, ref = T([[-1.0]]), T([[-2.0]])
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-1))
    # r = 30: clamped to 20 first (k3 = e^20 - 21), then the estimate to 10
    far = kl_penalty(T([[-31.0]]), T([[-1.0]]), "k3", input_clamp=20.0, output_clamp=10.0)
    assert far.item() == 10.0
    assert kl_penalty(T([[-31.0]]), T([[-1.0]]), "k3", input_clamp=20.0).item() == pytest.approx(math.exp(20) - 21)
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        kl_penalty(logp, ref, "k4")


def test_clip_fraction_counts_only_where_the_clip_is_active():
    # ratios e^0.5 = 1.65 and e^-0.5 = 0.61, each with a positive and a negative advantage; band [0.8, 1.2]:
    # active only for 1.65 with A > 0 (high) and 0.61 with A < 0 (low): 2 of 4 tokens, one each side
    t = terms([[0.5], [0.5], [-0.5], [-0.5]], [[0.0]] * 4, [1.0, -1.0, 1.0, -1.0])
    _, m = policy_loss(t, LossConfig(), num_tokens=4, num_seqs=4)
    assert m["clip_frac"].item() == 0.5 and m["clip_frac_high"].item() == 0.25 and m["clip_frac_low"].item() == 0.25


def test_config_refuses_what_nemo_refuses():
    from execrl.config import ConfigError, load_config

    for bad in ("loss_fn.reference_policy_kl_type=k4", "loss_fn.ratio_clip_c=1.0", "loss_fn.ratio_clip_c=0.5"):
        with pytest.raises(ConfigError):
            load_config(None, [bad])
    assert load_config(None, ["loss_fn.reference_policy_kl_type=k2"]).loss_fn.reference_policy_kl_type == "k2"


def test_icepop_drops_tokens_outside_the_band_and_tis_cuts():
    from execrl.algo.loss import importance_weight

    # weights e^-1 = 0.37, 1, e^1 = 2.72 against the band [0.5, 2]
    w = torch.exp(T([[-1.0, 0.0, 1.0]]))
    ice, out = importance_weight(w, "icepop", 2.0, 0.5)
    assert ice.tolist() == [[0.0, 1.0, 0.0]] and out.tolist() == [[True, False, True]]
    tis, _ = importance_weight(w, "tis", 2.0, None)
    assert tis[0].tolist() == pytest.approx([math.exp(-1), 1.0, 2.0])
    tis_min, out = importance_weight(w, "tis", 2.0, 0.5)  # NeMo RL: tis clamps to [ratio_min, ratio]
    assert tis_min[0].tolist() == pytest.approx([0.5, 1.0, 2.0]) and out.tolist() == [[True, False, True]]
    none, _ = importance_weight(w, "tis", None, None)  # NeMo RL's default: no bound
    assert none[0, 2].item() == pytest.approx(math.e)


def test_importance_correction_with_top_k_or_top_p_runs_and_nemo_defaults_hold():
    """The sampler reports and the trainer scores the filtered distribution (NeMo RL's processed logprobs), so the
    correction is consistent with top-k/top-p; seq-mask-tis is refused, icepop needs both bounds."""
    from execrl.config import ConfigError, load_config
    from execrl.config.checks import check_async

    assert load_config(None, []).loss_fn.truncated_importance_sampling_ratio is None
    for fine in (["grpo.async_grpo.enabled=true", "policy.generation.top_k=20"],
                 ["loss_fn.use_importance_sampling_correction=true", "policy.generation.top_p=0.9"]):
        check_async(load_config(None, fine))
    with pytest.raises(ConfigError):
        check_async(load_config(None, ["loss_fn.use_importance_sampling_correction=true",
                                       "loss_fn.truncated_importance_sampling_type=icepop",
                                       "loss_fn.truncated_importance_sampling_ratio=2"]))
    with pytest.raises(ConfigError):
        load_config(None, ["loss_fn.truncated_importance_sampling_type=seq-mask-tis"])
    check_async(load_config(None, ["policy.generation.top_k=20"]))


def test_gspo_clips_one_ratio_per_sequence():
    # one sequence, A = 1, token log-ratios 0.5 and -0.1 (mean 0.2): ratio e^0.2 = 1.2214 for both tokens, clipped to
    # 1.2 -> per token min(1.2214, 1.2) = 1.2 -> loss -1.2 (sequence mean); token-level ratios would give
    # min(e^0.5, 1.2) = 1.2 and e^-0.1 = 0.905 -> -(1.2 + 0.905) / 2
    cfg = LossConfig(sequence_level_importance_ratios=True, token_level_loss=False)
    t = terms([[0.5, -0.1]], [[0.0, 0.0]], [1.0])
    loss, m = policy_loss(t, cfg, num_tokens=2, num_seqs=1)
    assert loss.item() == pytest.approx(-1.2) and m["clip_frac"].item() == 1.0
    token, _ = policy_loss(t, LossConfig(token_level_loss=False), num_tokens=2, num_seqs=1)
    assert token.item() == pytest.approx(-(1.2 + math.exp(-0.1)) / 2)
    # below the clip (mean log-ratio 0.1): loss = -e^mean, and d mean / d logp_i = 1/2 -> each token's gradient is
    # -e^0.1 / 2: the ratio depends on both tokens
    logp = T([[0.3, -0.1]], requires_grad=True)
    loss, _ = policy_loss(LossTerms(logp, T([[0.0, 0.0]]), T([1.0]), T([[1.0, 1.0]])), cfg, num_tokens=2, num_seqs=1)
    loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([-math.exp(0.1) / 2] * 2)
    # the importance weight of a sequence: pi_old / pi_sampler of the whole sequence (sum of the log differences)
    w = terms([[0.0, 0.0]], [[0.0, 0.0]], [1.0], sampler_logprobs=T([[-0.2, 0.1]]))
    loss, m = policy_loss(w, cfg, num_tokens=2, num_seqs=1, is_correction=True)
    assert m["is_weight"].item() == pytest.approx(math.exp(0.1)) and loss.item() == pytest.approx(-math.exp(0.1))


def test_force_on_policy_ratio_disable_ppo_ratio_and_cispo():
    # old log-probs far away (ratio e^2): forced to 1, unclipped -> loss -A, gradient -A per token / tokens
    logp = T([[2.0, 0.0]], requires_grad=True)
    t = LossTerms(logp, T([[0.0, 0.0]]), T([1.0]), T([[1.0, 1.0]]))
    loss, m = policy_loss(t, LossConfig(force_on_policy_ratio=True), num_tokens=2, num_seqs=1)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0) and logp.grad.tolist()[0] == pytest.approx([-0.5, -0.5])
    assert m["clip_frac"].item() == 0.0
    # REINFORCE: -A log pi; A = 2, log pi = -1 and -3 -> -(2 * -1 + 2 * -3) / 2 = 4
    loss, _ = policy_loss(terms([[-1.0, -3.0]], [[0.0, 0.0]], [2.0]), LossConfig(disable_ppo_ratio=True),
                          num_tokens=2, num_seqs=1)
    assert loss.item() == pytest.approx(4.0)
    # CISPO: -A * clip(ratio).detach() * log pi; log pi = -1, old -1.5 (ratio e^0.5 = 1.65, clipped to 1.2):
    # loss -(1.2 * -1) = 1.2, gradient -1.2 (the ratio carries none)
    logp = T([[-1.0]], requires_grad=True)
    loss, _ = policy_loss(LossTerms(logp, T([[-1.5]]), T([1.0]), T([[1.0]])), LossConfig(use_cispo=True),
                          num_tokens=1, num_seqs=1)
    loss.backward()
    assert loss.item() == pytest.approx(1.2) and logp.grad.item() == pytest.approx(-1.2)


@pytest.mark.parametrize("overrides, message", [
    (["loss_fn.sequence_level_importance_ratios=true"], "token_level_loss=false"),
    (["loss_fn.use_cispo=true", "loss_fn.disable_ppo_ratio=true"], "disable_ppo_ratio=false"),
    (["loss_fn.force_on_policy_ratio=true", "policy.train_global_batch_size=8", "grpo.num_prompts_per_step=4",
      "grpo.num_generations_per_prompt=4"], "train_global_batch_size=16"),
    (["++loss_fn.use_kl_in_reward=true"], "REINFORCE"),
    (["++loss_fn.positive_example_nll_weight=0.1"], "VAPO"),
])
def test_loss_variants_refuse_what_they_cannot_do(overrides, message):
    from execrl.config import ConfigError, load_config
    from execrl.config.checks import validate

    with pytest.raises(ConfigError, match=message):
        validate(load_config(None, overrides))
    assert load_config(None, ["++loss_fn.use_kl_in_reward=false", "++loss_fn.positive_example_nll_weight=0.0"])


def test_rewards_one_float32_step_apart_get_advantages_that_sum_to_zero():
    """(A hunt's find) r - baseline was taken in the rewards' float32, where the group's mean of [1, 1, 1, 1.0000001]
    rounds to 1: one sample pushed up by 0.11 and none down. In float64 the group's advantages sum to 0."""
    rewards, valid = torch.tensor([[1.0, 1.0, 1.0, 1.0000001]]), torch.ones(1, 4, dtype=torch.bool)
    for loo in (False, True):
        adv = ADVANTAGES["grpo"](rewards, valid, use_leave_one_out_baseline=loo)
        assert adv.dtype == torch.float32 and (adv[0, :3] < 0).all() and adv[0, 3] > 0
        assert abs(adv.double().sum()) < 1e-6 if not loo else adv[0, :3].allclose(adv[0, 0].expand(3))
    dr = ADVANTAGES["dr_grpo"](rewards, valid)
    assert (dr[0, :3] < 0).all() and abs(dr.double().sum()) < 1e-12


def _grad(cfg: LossConfig, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, **terms):
    leaf = logp.clone().requires_grad_(True)
    loss, metrics = policy_loss(LossTerms(leaf, old, adv, torch.ones_like(logp), **terms), cfg,
                                num_tokens=logp.numel(), num_seqs=logp.shape[0], is_correction=True)
    loss.backward()
    return loss, leaf.grad, metrics


def test_a_token_the_trainers_filter_left_out_weighs_one_in_gspo():
    """(A hunt's find) with top-k/top-p, a sampled token outside the trainer's own filter has old logprob 0
    (step.py): its weight e^-(sampler logprob) = e^7 multiplied the whole sequence's GSPO weight (x1097)."""
    logp = T([[-0.5, -0.2, -0.4, 0.0, -0.5, -0.2]])
    sampler = logp.clone()
    sampler[0, 3] = -7.0  # (inside the engine's filter, outside the trainer's)
    gspo = LossConfig(sequence_level_importance_ratios=True, token_level_loss=False)
    loss, grad, m = _grad(gspo, logp, logp.clone(), T([1.0]), sampler_logprobs=sampler, zero_is_filtered=True)
    plain, plain_grad, _ = _grad(gspo, logp, logp.clone(), T([1.0]))
    assert loss.item() == pytest.approx(plain.item()) and m["is_weight"].item() == pytest.approx(1.0)
    assert torch.allclose(grad, plain_grad) and m["logprob_mismatch"].item() == pytest.approx(7 / 6)  # (still said)


def test_bounded_weights_past_float32_are_cut_to_the_bound_and_exponents_cannot_make_nan_gradients():
    """(A hunt's find) a weight of e^100 overflows to 0 (NeMo RL's) before tis cuts it (e^80: cut to 2), and was not
    counted as truncated; the KL's or the ratio's exp past float32's range gave NaN gradients (the step skipped)
    where the value was clamped."""
    logp = T([[-1.0, -1.0, -1.0]])
    for gap, weight in ((80.0, 4 / 3), (100.0, 2 / 3)):
        sampler = T([[-1.0, -1.0, -1.0 - gap]])
        tis = LossConfig(truncated_importance_sampling_ratio=2.0, truncated_importance_sampling_type="tis")
        loss, grad, m = _grad(tis, logp, logp.clone(), T([1.0]), sampler_logprobs=sampler)
        assert m["is_weight"].item() == pytest.approx(weight) and m["is_truncated_frac"].item() == pytest.approx(1 / 3)
        assert torch.isfinite(grad).all() and math.isfinite(m["sampler_kl"].item())
    ref = logp + 100.0  # log r = 100: k3's exp overflows
    _, grad, _ = _grad(LossConfig(reference_policy_kl_penalty=0.1, kl_input_clamp_value=None,
                                  reference_policy_kl_type="k3"), logp, logp.clone(), T([1.0]), ref_logprobs=ref)
    assert torch.isfinite(grad).all()
    _, grad, _ = _grad(LossConfig(reference_policy_kl_penalty=0.1, use_on_policy_kl_approximation=True), logp,
                       logp.clone(), T([1.0]), ref_logprobs=logp.clone(), sampler_logprobs=logp - 100.0)
    assert torch.isfinite(grad).all()
    old = logp - 100.0  # ratio e^100: at advantage 0 (a flat group's) inf x 0, and under dual clip
    for cfg, adv in ((LossConfig(), T([0.0])), (LossConfig(ratio_clip_c=3.0), T([-1.0]))):
        loss, grad, _ = _grad(cfg, logp, old, adv)
        assert math.isfinite(loss.item()) and torch.isfinite(grad).all()


def test_dr_grpo_with_no_sequence_kept_is_zero_not_nan():
    """(A hunt's find) every sample cut and left out (overlong filtering): 0 / 0 under constant_normalizer, three
    skipped steps, and the run stopped telling the user to lower the learning rate."""
    leaf = T([[-1.0, -1.0]]).requires_grad_(True)
    loss, _ = policy_loss(LossTerms(leaf, leaf.detach(), T([1.0]), torch.zeros_like(leaf)),
                          LossConfig(constant_normalizer=64), num_tokens=0, num_seqs=0)
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(leaf.grad).all()


def test_a_top_p_under_float32s_smallest_keeps_the_likeliest_token():
    """(A hunt's find) top_p 1e-300 is 0 in float32, where the nucleus is compared: every token was dropped and
    sampling drew garbage; the likeliest always stays, as at 1e-10."""
    from execrl.algo.logprobs import top_k_top_p

    logits = torch.tensor([[0.5, 2.0, -1.0, 1.0]])
    for top_p in (1e-300, 1e-46, 1e-10):
        kept = top_k_top_p(logits, None, top_p)
        assert torch.isfinite(kept).tolist() == [[False, True, False, False]], (top_p, kept)
    assert torch.isfinite(top_k_top_p(logits, None, 0.9)).sum() == 3  # (the nucleus as before)


def test_the_nucleus_of_a_large_vocabulary_is_the_exact_one_as_nemo_rl_sums_it():
    """(A hunt's find) the nucleus summed from the likeliest token down in float32 lost a long tail's small masses:
    over Qwen's 151,936 tokens most rows kept a few tokens more or fewer than the exact nucleus (NeMo RL's, summed from
    the least likely up, is exact in nearly every row). Checked against the float64 definition: a token stays where
    the tokens strictly likelier than it hold less than top_p."""
    from execrl.algo.logprobs import top_k_top_p

    logits = torch.randn(64, 151936, generator=torch.Generator().manual_seed(0)) * 3
    for top_p in (0.9, 0.95):
        ordered, order = torch.sort(logits.double(), dim=-1, descending=True)
        probs = torch.softmax(ordered, -1)
        exact = torch.zeros(logits.shape, dtype=torch.bool).scatter(-1, order, torch.cumsum(probs, -1) - probs < top_p)
        assert (torch.isfinite(top_k_top_p(logits, None, top_p)) == exact).all(-1).sum() >= 62, top_p
