"""The loss's logged means are the whole batch's, whatever its split into micro-batches: a token mean over tokens,
GSPO's importance weight over sequences (as NeMo RL's sampling_importance_ratio)."""

import pytest
import torch

from execrl.config import load_config
from execrl.config.batch import plan as make_plan
from execrl.models import build_tiny_model, build_tokenizer
from execrl.trainer.precision import Weights
from execrl.trainer.step import TrainBatch, optimize


def test_gspo_importance_weight_is_a_mean_over_sequences_for_every_micro_batch_size():
    """It was weighed by each micro-batch's token share: 0.9408 in one micro-batch, 0.9524 in micro-batches of one
    sequence and 0.8669 in micro-batches of five, for one batch."""
    torch.manual_seed(0)
    tok = build_tokenizer(["def add(a, b):\n    return a + b\n", "hello world"] * 5, 300)
    model = build_tiny_model(tok, seed=0).float()
    lengths = [(5, c) for c in (1, 7, 3, 12)] + [(9, c) for c in (2, 2, 9, 4)] + [(3, c) for c in (11, 1, 5, 6)]
    width = max(p + c for p, c in lengths)
    ids = torch.randint(1, model.config.vocab_size - 1, (12, width))
    attn, mask = torch.zeros(12, width, dtype=torch.long), torch.zeros(12, width - 1)
    for i, (p, c) in enumerate(lengths):
        attn[i, :p + c], mask[i, p - 1:p + c - 1] = 1, 1
        ids[i] = ids[i - i % 4] if i % 4 else ids[i]  # a group's prompt shared
    kept = torch.ones(12, dtype=torch.bool)
    kept[5], mask[5] = False, 0  # an overlong-filtered sample
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / 0.6
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0] * mask
    s = torch.linspace(-1.0, 0.6, 12)  # each sequence's log(pi_old / pi_sampler)
    sampler = logp - (s / mask.sum(1).clamp(min=1))[:, None] * mask
    want = torch.exp(s)[mask.sum(1) > 0].mean().item()
    logged = []
    for micro in (12, 1, 5):
        cfg = load_config(None, ["policy.device=cpu", "grpo.num_prompts_per_step=3", "grpo.num_generations_per_prompt=4",
                                 "policy.train_global_batch_size=12", f"policy.train_micro_batch_size={micro}",
                                 "loss_fn.token_level_loss=false", "loss_fn.sequence_level_importance_ratios=true",
                                 "policy.shared_prompts=false"])
        m = build_tiny_model(tok, seed=0).float()
        m.load_state_dict(model.state_dict())
        batch = TrainBatch(ids.clone(), attn.clone(), mask.clone(), torch.randn(12), kept=kept.clone(),
                           sampler_logprobs=sampler.clone(), prompt_lens=torch.tensor([p for p, _ in lengths]),
                           group_size=4)
        logged.append(optimize(Weights(m, m, torch.float32), torch.optim.SGD(m.parameters(), lr=0.0), None, batch, cfg,
                               make_plan(cfg))()["is_weight"])
    assert logged == pytest.approx([want] * 3, rel=1e-5)
