"""build_batch: the trajectories as right-padded tensors, checked against a row-by-row construction, with the
environment's tokens (no loss), a sample out of the loss and one whose sampler gave no logprobs."""

from types import SimpleNamespace

import torch

from execrl.envs.trajectory import Segment, Trajectory
from execrl.trainer.step import build_batch

PLAYED = SimpleNamespace(frozen=False)  # an episode the policy played (no frozen seat)


def by_row(trajs, kept, pad):
    width = max(map(len, trajs))
    ids, attn = torch.full((len(trajs), width), pad), torch.zeros(len(trajs), width, dtype=torch.long)
    mask, sampler = torch.zeros(len(trajs), width - 1), torch.zeros(len(trajs), width - 1)
    for i, t in enumerate(trajs):
        p, n = len(t.prompt_ids), len(t) - len(t.prompt_ids)
        ids[i, :p + n], attn[i, :p + n] = torch.tensor(t.ids), 1
        if kept[i]:
            mask[i, p - 1:p - 1 + n] = torch.tensor(t.loss_mask, dtype=torch.float)
        if t.sampler_logprobs is not None:
            sampler[i, p - 1:p - 1 + n] = torch.tensor(t.sampler_logprobs)
    return ids, attn, mask, sampler


def test_the_batch_is_the_trajectories_row_by_row():
    trajs = [Trajectory([5, 6, 7], [Segment([8, 9], True, [-0.25, -1.5]), Segment([10, 11, 12], False),
                                    Segment([13], True, [-0.1])]),
             Trajectory([5], [Segment([20, 21, 22, 23], True, [-0.3, -0.2, -0.7, -2.0])]),
             Trajectory([1, 2], [Segment([30], True, [-0.9])], truncated=True)]
    valid = [True, False, True]  # the sandbox failed on the second: out of the loss
    rollouts = SimpleNamespace(trajectories=trajs, rewards=[SimpleNamespace(valid=v) for v in valid],
                               group_size=1, episodes=[PLAYED] * len(trajs))
    batch = build_batch(rollouts, torch.zeros(3), 0, overlong_filtering=True)  # the third is truncated: out too
    kept = [True, False, False]
    ids, attn, mask, sampler = by_row(trajs, kept, 0)
    assert torch.equal(batch.input_ids, ids) and torch.equal(batch.attention_mask, attn)
    assert torch.equal(batch.loss_mask, mask) and torch.equal(batch.sampler_logprobs, sampler)
    assert batch.kept.tolist() == kept
    assert batch.loss_mask[0].tolist() == [0, 0, 1, 1, 0, 0, 0, 1]  # the environment's tokens: no loss

    trajs[1].segments[0].logprobs = None  # a backend that gives no logprobs for one sample: none for the batch
    assert build_batch(rollouts, torch.zeros(3), 0, overlong_filtering=False).sampler_logprobs is None


def test_random_batches_match_the_row_by_row_construction():
    """Built from each model turn's span and joined buffers: the row-by-row batch for random trajectories, with
    empty turns, several model and environment turns per row, and rows out of the loss."""
    import random

    rng = random.Random(0)
    for _ in range(50):
        trajs = []
        for _ in range(rng.randint(1, 6)):
            segments = []
            for _ in range(rng.randint(0, 4)):
                n, sampled = rng.randint(0, 5), rng.random() < 0.6
                segments.append(Segment([rng.randrange(99) for _ in range(n)], sampled,
                                        [-rng.random() for _ in range(n)] if sampled else None))
            trajs.append(Trajectory([rng.randrange(99) for _ in range(rng.randint(1, 4))], segments))
        kept = [rng.random() < 0.8 for _ in trajs]
        rollouts = SimpleNamespace(trajectories=trajs, rewards=[SimpleNamespace(valid=k) for k in kept], group_size=1,
                                   episodes=[PLAYED] * len(trajs))
        batch = build_batch(rollouts, torch.zeros(len(trajs)), 3, overlong_filtering=False)
        ids, attn, mask, sampler = by_row(trajs, kept, 3)
        assert torch.equal(batch.input_ids, ids) and torch.equal(batch.attention_mask, attn)
        assert torch.equal(batch.loss_mask, mask) and torch.equal(batch.sampler_logprobs, sampler)
