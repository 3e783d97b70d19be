"""Chunked token logprobs equal the plain full-vocabulary computation, values and gradients, at any chunk size."""

import pytest
import torch

from execrl.algo.logprobs import token_logprobs_from_hidden


def plain(hidden, weight, targets, temperature):
    logp = torch.log_softmax((hidden @ weight.T) / temperature, -1)  # float64 here
    return logp.gather(-1, targets[:, None])[:, 0], -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("rows", [1, 3, 7, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_values_and_gradients_match_the_full_computation(rows, temperature):
    torch.manual_seed(0)
    h = torch.randn(10, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 50, (10,))
    upstream = torch.randn(10, dtype=torch.float64)
    logp, entropy = token_logprobs_from_hidden(h, w, t, temperature, rows=rows)
    (logp.double() * upstream).sum().backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    ref_logp, ref_entropy = plain(h, w, t, temperature)
    (ref_logp * upstream).sum().backward()
    torch.testing.assert_close(logp.double(), ref_logp, atol=1e-5, rtol=1e-5)  # fp32 logits inside
    torch.testing.assert_close(entropy.double(), ref_entropy, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gh, h.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gw, w.grad, atol=1e-5, rtol=1e-5)


def test_gradcheck():
    torch.manual_seed(1)
    h = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(9, 4, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 9, (5,))

    def f(h, w):
        return token_logprobs_from_hidden(h, w, t, 0.8, rows=2)[0]

    # the forward keeps fp32 logits (as in training), so the check runs at fp32 precision
    assert torch.autograd.gradcheck(f, (h, w), eps=1e-3, atol=1e-3, rtol=1e-3)


def test_trainer_logprobs_equal_the_models_own_logits():
    from execrl.models import build_tiny_model, build_tokenizer
    from execrl.tasks.arith import corpus
    from execrl.trainer.step import token_logprobs

    tok = build_tokenizer(corpus(), vocab_size=300)
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, seed=0)
    ids = torch.randint(3, 300, (3, 12))
    attn = torch.ones_like(ids)
    attn[2, 9:] = 0  # right padding
    select = torch.zeros(3, 11, dtype=torch.bool)
    select[:, 4:8] = True
    logp, entropy, _ = token_logprobs(model, ids, attn, select, temperature=0.7)
    full = torch.log_softmax(model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / 0.7, -1)
    want = full.gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(logp[select], want[select])
    assert (logp[~select] == 0).all() and (entropy[~select] == 0).all()
    torch.testing.assert_close(entropy[select], -(full.exp() * full).sum(-1)[select])


@pytest.mark.parametrize("family", ["cohere", "cohere2", "granite", "falcon_h1"])
def test_trainer_logprobs_of_heads_that_scale_their_logits(family):
    """Granite divides its logits by logits_scaling, Cohere's families multiply them by logit_scale: the trainer's
    head (hidden @ W.T in its own kernels) takes either. Cohere's scale was left out: logprobs off by up to 3 nats,
    a mismatch of 0.44 between the sampler and the trainer."""
    import transformers

    from execrl.trainer.step import token_logprobs

    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    config = {"cohere": lambda: transformers.CohereConfig(logit_scale=0.25, **small),
              "cohere2": lambda: transformers.Cohere2Config(logit_scale=0.25, sliding_window=4,
                                                            layer_types=["sliding_attention", "full_attention"],
                                                            **small),
              "granite": lambda: transformers.GraniteConfig(logits_scaling=4.0, **small),
              # (Falcon-H1 multiplies by lm_head_multiplier: left out, the trainer's logprobs were 2 nats off)
              "falcon_h1": lambda: transformers.FalconH1Config(lm_head_multiplier=0.078125, **small)}[family]()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    ids = torch.randint(3, 64, (2, 10))
    select = torch.ones(2, 9, dtype=torch.bool)
    with torch.no_grad():
        logp, _, _ = token_logprobs(model, ids, torch.ones_like(ids), select, temperature=0.7)
        full = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float() / 0.7, -1)
    torch.testing.assert_close(logp, full.gather(-1, ids[:, 1:, None])[..., 0])


def test_a_sampled_token_outside_the_trainers_top_k_gives_no_nan():
    """The sampler drew a token inside its top-k that the trainer's logits (rounded otherwise, e.g. in bf16) put just
    outside: its logprob was -inf, the ratio NaN, and the whole optimizer step was skipped. As NeMo RL's
    mask_out_neg_inf_logprobs: logprob 0 and no gradient there; the other tokens' gradients stand."""
    from execrl.models import build_tiny_model, build_tokenizer
    from execrl.tasks.arith import corpus
    from execrl.trainer.step import token_logprobs

    tok = build_tokenizer(corpus(), vocab_size=300)
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, seed=0)
    ids = torch.randint(3, 300, (2, 12))
    select = torch.ones(2, 11, dtype=torch.bool)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1].float()
    outside = logits.argsort(-1)[..., 0]  # each position's least likely token: outside any top-2
    ids[0, 6] = outside[0, 5]
    logp, _, _ = token_logprobs(model, ids, torch.ones_like(ids), select, temperature=1.0, top=(2, 1.0))
    assert torch.isfinite(logp).all() and logp[0, 5] == 0
    logp.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
