"""Right-padded rows are scored with the causal mask alone (trainer/step.py take): the same logprobs as
each row scored by itself, unpadded, for every family the engine runs (sliding windows smaller than the
rows included); a mask with padding anywhere else is still passed to the model."""

import pytest
import torch

from execrl.trainer.step import TrainBatch, right_padded, take, token_logprobs
from tests.rollout.test_architectures import CASES, build


@pytest.fixture(scope="module")
def tok():
    from execrl.models import build_tokenizer
    from execrl.tasks.arith import corpus

    return build_tokenizer(corpus(), vocab_size=384)


def test_only_ones_then_zeros_is_right_padding():
    assert right_padded(torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]]))
    assert not right_padded(torch.tensor([[1, 1, 0], [0, 1, 1]]))  # left padding
    assert not right_padded(torch.tensor([[1, 0, 1]]))  # a hole


@pytest.mark.parametrize("case", CASES)
def test_right_padded_rows_score_as_each_row_alone(case, tok):
    model = build(case, tok)
    g = torch.Generator().manual_seed(0)
    lengths = [13, 9, 5]
    ids = torch.full((3, 13), tok.pad_token_id)
    attn = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, len(tok), (n,), generator=g)
        attn[i, :n] = 1
    loss = torch.zeros(3, 12)
    for i, n in enumerate(lengths):
        loss[i, 2:n - 1] = 1
    batch = TrainBatch(ids, attn, loss, torch.zeros(3))
    got_ids, got_attn, mask, _, _ = take(batch, [0, 1, 2], "cpu")
    assert got_attn is None  # the causal mask alone
    with torch.no_grad():
        logp = token_logprobs(model, got_ids, got_attn, mask > 0)[0]
        for i, n in enumerate(lengths):
            alone = token_logprobs(model, ids[i:i + 1, :n], None, mask[i:i + 1, :n - 1] > 0)[0]
            torch.testing.assert_close(logp[i, :n - 1], alone[0], atol=2e-5, rtol=1e-5)


def test_a_mask_that_is_not_right_padding_is_passed_on(tok):
    ids = torch.randint(3, 300, (2, 6))
    attn = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    batch = TrainBatch(ids, attn, torch.ones(2, 5), torch.zeros(2))
    assert torch.equal(take(batch, [0, 1], "cpu")[1], attn)


def test_a_selection_of_another_width_than_the_rows_is_refused(tok):
    """token_logprobs reads flat positions (trainer/step.py selected): a selection that is not [B, L-1] for rows
    [B, L] would read other positions, so it is refused (a boolean index refused it before)."""
    model = build(CASES[0], tok)
    ids = torch.randint(3, 300, (2, 6))
    for select in (torch.ones(2, 6), torch.ones(2, 4), torch.ones(1, 5)):
        with pytest.raises(ValueError, match=r"it takes \[B, L-1\]"):
            token_logprobs(model, ids, None, select > 0)
    assert token_logprobs(model, ids, None, torch.ones(2, 5) > 0)[0].shape == (2, 5)
