"""Each group's prompt forwarded once (trainer/shared_prompt.py): the packed layout holds every row's tokens at
their positions; for every family whose attention allows it, packed rows give the row-by-row logprobs and
gradients (fp32, prompts and completions of different lengths); the others are never packed; micro-batches keep
groups whole; a GRPO step gives the same update either way."""

import pytest
import torch

from execrl.trainer.shared_prompt import group_parts, pack, shareable, shared_prompt_attention
from execrl.trainer.step import TrainBatch, micro_batches, packed_rows, take, token_logprobs
from tests.rollout.test_architectures import CASES, build

UNSHAREABLE = {"qwen3-sliding", "mistral-sliding", "gemma3", "mixtral-sliding", "starcoder2-sliding"}


@pytest.fixture(scope="module")
def tok():
    from execrl.models import build_tokenizer
    from execrl.tasks.arith import corpus

    return build_tokenizer(corpus(), vocab_size=384)


def grouped_rows(prompts: list[int], completions: list[list[int]], k: int, vocab: int, pad: int = 0, seed: int = 0):
    """Right-padded rows, k per group: group g's prompt of prompts[g] tokens, then each sample's completion of
    completions[g][j] tokens. Returns (ids [b, W], lengths [b], prompt lengths [b])."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for p, comp in zip(prompts, completions):
        prompt = torch.randint(3, vocab, (p,), generator=g)
        rows += [torch.cat([prompt, torch.randint(3, vocab, (c,), generator=g)]) for c in comp[:k]]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    lengths = torch.tensor([len(r) for r in rows])
    return ids, lengths, torch.tensor([p for p in prompts for _ in range(k)])


def test_the_packed_rows_hold_every_rows_tokens_at_their_positions():
    ids, lengths, prompts = grouped_rows([5, 3], [[4, 0, 6], [7, 2, 2]], 3, 100)  # (one completion empty)
    packed = pack(ids, lengths, prompts, 3)
    assert packed.ids.shape == (2, 5 + 4 + 0 + 6)  # each group's prompt, then its completions back to back
    # attention's sequences: sorted by length into 4 buckets, each padded to its longest
    assert [tuple(at.shape) for at in packed.gather] == [(2, 5), (2, 9), (1, 10), (1, 11)]  # 5 5 | 5 9 | 10 | 11
    flat_ids, flat_pos = packed.ids.reshape(-1), packed.positions.reshape(-1)
    sequences = {}  # row -> its sequence's packed positions, and where its outputs start in the buckets' outputs
    offset = 0
    order = torch.sort(lengths, stable=True).indices.tolist()
    for at in packed.gather:
        for seq in at:
            sequences[order[len(sequences)]] = (seq, offset)
            offset += len(seq)
    for r in range(6):
        n = int(lengths[r])
        seq, start = sequences[r]
        assert torch.equal(flat_ids[seq[:n]], ids[r, :n])  # each sample's [prompt, completion], in order
        assert torch.equal(flat_pos[seq[:n]], torch.arange(n))
        assert torch.equal(flat_ids[packed.source[r, :n - 1]], ids[r, :n - 1])  # hidden at t predicts t + 1
        # each completion token's attention output is its own sequence's at its position; the prompt's, the first
        # sample's of its group
        for t in range(n):
            if t >= int(prompts[r]) or r % 3 == 0:
                assert int(packed.scatter[seq[t]]) == start + t
    outputs = torch.cat([at.reshape(-1) for at in packed.gather])
    real = torch.cat([sequences[r][0][:int(lengths[r])] for r in range(6)])
    assert torch.equal(outputs[packed.scatter[real]], real)  # every real token's output holds that token


def test_like_lengths_go_to_attention_in_one_call():
    ids, lengths, prompts = grouped_rows([5, 3], [[6, 6, 5], [7, 8, 8]], 3, 100)  # 11 11 10 10 11 11: one bucket
    assert [tuple(at.shape) for at in pack(ids, lengths, prompts, 3).gather] == [(6, 11)]


def test_rows_that_share_no_prompt_are_not_packed():
    ids, lengths, prompts = grouped_rows([5, 3], [[4, 1, 6], [7, 2, 2]], 3, 100)
    other = ids.clone()
    other[1, 2] += 1  # one sample's prompt differs from its group's
    assert pack(other, lengths, prompts, 3) is None
    assert pack(ids, lengths, prompts, 4) is None  # not whole groups
    assert pack(ids[:1], lengths[:1], prompts[:1], 1) is None  # one sample: nothing to share


@pytest.mark.parametrize("case", CASES)
def test_packed_rows_give_each_rows_logprobs_and_gradients(case, tok):
    model = build(case, tok)
    if case in UNSHAREABLE:
        assert not shareable(model)
        return
    assert shareable(model)
    ids, lengths, prompts = grouped_rows([9, 6], [[5, 2, 8], [3, 7, 1]], 3, len(tok), tok.pad_token_id)
    select = torch.zeros(6, ids.shape[1] - 1, dtype=torch.bool)
    for r in range(6):
        select[r, int(prompts[r]) - 1:int(lengths[r]) - 1] = True
    packed = pack(ids, lengths, prompts, 3)
    weights = torch.randn(select.shape, generator=torch.Generator().manual_seed(2))
    results = []
    for p in (None, packed):
        model.zero_grad()
        logp, entropy, _ = token_logprobs(model, ids, None, select, packed=p)
        (logp * weights).sum().backward()
        results.append((logp.detach(), entropy, {n: q.grad.clone() for n, q in model.named_parameters()
                                                 if q.grad is not None}))
    (rows, rows_entropy, rows_grads), (shared, shared_entropy, shared_grads) = results
    torch.testing.assert_close(shared, rows, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(shared_entropy, rows_entropy, atol=2e-5, rtol=1e-5)
    assert rows_grads.keys() == shared_grads.keys()
    for name, grad in rows_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-4, rtol=1e-4, msg=name)
    assert model.config._attn_implementation == "sdpa"  # restored after the packed pass


def test_activation_checkpointing_recomputes_the_packed_attention(tok):
    """The backward recomputes each layer's forward after token_logprobs returned: it must see the packed layout
    there too (the same gradients as the rows')."""
    model = build("qwen2", tok).train()
    model.gradient_checkpointing_enable()
    ids, lengths, prompts = grouped_rows([9, 6], [[5, 2, 8], [3, 7, 1]], 3, len(tok), tok.pad_token_id)
    select = torch.zeros(6, ids.shape[1] - 1, dtype=torch.bool)
    for r in range(6):
        select[r, int(prompts[r]) - 1:int(lengths[r]) - 1] = True
    grads = []
    for packed in (None, pack(ids, lengths, prompts, 3)):
        model.zero_grad()
        token_logprobs(model, ids, None, select, packed=packed)[0].sum().backward()
        grads.append(torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-4, rtol=1e-4)


def test_families_outside_the_engines_and_dropout_are_not_packed(tok):
    """Packing needs every position-mixing op to be the attention it replaces: Falcon calls SDPA itself, hybrid
    models carry a convolution or recurrent state across positions; and dropout would give a group's samples one
    mask over their prompt. Only the engine's families (rollout/models/), without dropout, are packed."""
    from transformers import AutoModelForCausalLM, FalconConfig

    falcon = AutoModelForCausalLM.from_config(FalconConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2,
                                                           num_attention_heads=4), attn_implementation="sdpa")
    assert not shareable(falcon)
    model = build("qwen2", tok)
    model.config.attention_dropout = 0.1
    assert not shareable(model)


def test_a_token_budget_counts_each_samples_sequence_and_groups_without_one_prompt_go_as_rows():
    from execrl.config.batch import Split

    ids, lengths, prompts = grouped_rows([100, 100], [[10] * 4, [10] * 4], 4, 300)
    attn = torch.ones_like(ids)
    batch = TrainBatch(ids, attn, torch.zeros(8, 109), torch.zeros(8), prompt_lens=prompts, group_size=4)
    assert micro_batches(batch, range(8), Split(1, tokens=440), share=True) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert micro_batches(batch, range(8), Split(1, tokens=300), share=True) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    seats = batch.input_ids.clone()
    seats[1, 0] += 1  # a game's seats: each sample its own prompt
    mixed = TrainBatch(seats, attn, torch.zeros(8, 109), torch.zeros(8), prompt_lens=prompts, group_size=4)
    parts = micro_batches(mixed, range(8), Split(1, tokens=440), share=True)
    assert all(len(p) * 110 <= 440 for p in parts)  # as rows: within the budget
    assert packed_rows(mixed, [0, 1, 2, 3], "cpu") is None
    assert micro_batches(batch, range(8, 8), Split(4), share=True) == []  # a rank with no samples


def test_attention_runs_in_one_call_or_four():
    ids, lengths, prompts = grouped_rows([5], [[1, 30, 2]], 3, 100)  # 3 sequences: never fewer than 4 in 2 or 3 calls
    assert len(pack(ids, lengths, prompts, 3).gather) == 1


def test_attention_the_packed_rows_cannot_express_is_refused():
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(ValueError, match="policy.shared_prompts=false"):
        shared_prompt_attention(torch.nn.Module(), q, q, q, None, execrl_gather=torch.zeros(2, 3, dtype=torch.long),
                                execrl_scatter=torch.zeros(4, dtype=torch.long), sliding_window=2)


def test_micro_batches_keep_groups_whole():
    lengths = [10, 12, 11, 30, 31, 29, 5, 6, 5, 20, 20, 21]
    rows = range(12)
    assert group_parts(lengths, rows, 3, 6, None, None) == [[6, 7, 8, 0, 1, 2], [9, 10, 11, 3, 4, 5]]
    assert group_parts(lengths, rows, 3, 3, None, None) == [[6, 7, 8], [0, 1, 2], [9, 10, 11], [3, 4, 5]]
    assert group_parts(lengths, range(0, 6), 6, 2, None, None) == [[0, 1], [2, 3], [4, 5]]  # one group's samples
    assert group_parts(lengths, rows, 3, 4, None, None) is None  # a micro-batch would split a group unevenly
    assert group_parts(lengths, range(1, 7), 3, 3, None, None) is None  # not whole groups
    widths = {0: 20, 3: 50, 6: 10, 9: 30}
    parts = group_parts(lengths, rows, 3, 1, 60, lambda grp: widths[grp[0]])
    assert parts == [[6, 7, 8, 0, 1, 2], [9, 10, 11], [3, 4, 5]]  # 2 x 20 fit in 60; 2 x 30 + ... and 2 x 50 not
    assert group_parts(lengths, rows, 3, 1, 40, lambda grp: widths[grp[0]]) is None  # a group over the budget


def test_the_start_up_says_whether_prompts_are_shared_and_why_not(tok):
    from execrl.config import load_config
    from execrl.config.batch import Split
    from execrl.trainer.step import sharing_note

    cfg = load_config(None, ["grpo.num_generations_per_prompt=8"])
    qwen, sliding = build("qwen2", tok), build("mistral-sliding", tok)
    assert "each group's prompt forwarded once" in sharing_note(cfg, qwen, Split(16))
    assert "each group's prompt forwarded once" in sharing_note(cfg, qwen, Split(4))  # half a group
    assert "split groups of 8 unevenly" in sharing_note(cfg, qwen, Split(12))
    assert "and a group fits the token budget" in sharing_note(cfg, qwen, Split(1, tokens=4096))
    assert "a row per sample (mistral: packed rows need" in sharing_note(cfg, sliding, Split(16))
    off = load_config(None, ["grpo.num_generations_per_prompt=8", "policy.shared_prompts=false"])
    assert sharing_note(off, qwen, Split(16)) is None


def test_a_micro_batch_of_one_groups_samples_is_packed(tok):
    ids, lengths, prompts = grouped_rows([7], [[3, 5, 2, 4]], 4, len(tok), tok.pad_token_id)
    attn = (torch.arange(ids.shape[1])[None] < lengths[:, None]).long()
    loss = torch.zeros(4, ids.shape[1] - 1)
    batch = TrainBatch(ids, attn, loss, torch.zeros(4), prompt_lens=prompts, group_size=4)
    from execrl.config.batch import Split

    parts = micro_batches(batch, range(4), Split(2), share=True)
    assert parts == [[0, 1], [2, 3]]
    packed = packed_rows(batch, parts[1], "cpu")
    assert packed is not None and packed.ids.shape == (1, 7 + 2 + 4)  # completions of 2 and 4 tokens
    assert take(batch, parts[1], "cpu")[0].shape == (2, 11)


@pytest.mark.parametrize("budget", [None, 2048])
def test_a_grpo_step_is_the_same_with_each_groups_prompt_forwarded_once(tmp_path, monkeypatch, budget):
    from execrl.trainer import step
    from tests.trainer.test_train import metrics, run

    packed = []
    real = step.pack
    monkeypatch.setattr(step, "pack", lambda *args: packed.append(p := real(*args)) or p)
    steps = ("grpo.max_num_steps=2", "checkpointing.enabled=false")
    rows_model, rows = run(tmp_path, "rows", *steps, "policy.shared_prompts=false")
    assert not packed
    by_tokens = () if budget is None else ("policy.dynamic_batching.enabled=true",
                                           f"policy.dynamic_batching.train_mb_tokens={budget}")
    shared_model, shared = run(tmp_path, "shared", *steps, *by_tokens)
    # every micro-batch: one group's 4 samples, or as many whole groups as fit the token budget
    assert packed and all(p is not None for p in packed)
    assert budget is None or any(p.ids.shape[0] > 1 for p in packed)
    a, b = [m for m in metrics(rows) if "train/loss" in m], [m for m in metrics(shared) if "train/loss" in m]
    assert len(a) == len(b) == 2
    for x, y in zip(a, b):  # the same samples, the same step, up to the sums' rounding
        for key in ("train/loss", "train/grad_norm", "train/reward_mean", "train/entropy"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), key
    first, second = rows_model.model.state_dict(), shared_model.model.state_dict()
    for name, value in first.items():
        torch.testing.assert_close(second[name], value, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compiled", [False, True])
def test_packed_rows_round_as_rows_do_in_bf16_on_a_gpu(compiled):
    """In bf16 on a GPU, with the trainer's fused projections and compiled layers: the packed rows' logprobs are as
    close to an fp32 forward of the same weights as the rows' own, and their gradients point the same way."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from execrl.rollout.fuse import fuse_projections
    from execrl.trainer.policy import compile_layers

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True)
    exact = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").cuda().float().eval()
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").cuda().to(torch.bfloat16)
    model.load_state_dict(exact.state_dict())
    fuse_projections(model)
    if compiled:
        compile_layers(model, None)
    ids, lengths, prompts = grouped_rows([120, 97, 128, 64], [[200, 31, 256, 140]] * 4, 4, 4096)
    select = torch.zeros(16, ids.shape[1] - 1, dtype=torch.bool)
    for r in range(16):
        select[r, int(prompts[r]) - 1:int(lengths[r]) - 1] = True
    packed = pack(ids, lengths, prompts, 4).to("cuda")
    ids, select = ids.cuda(), select.cuda()
    with torch.no_grad():
        reference = token_logprobs(exact, ids, None, select)[0][select]
    out = {}
    for name, p in (("rows", None), ("packed", packed)):
        model.zero_grad()
        logp = token_logprobs(model, ids, None, select, packed=p)[0]
        logp[select].sum().backward()
        out[name] = (logp.detach()[select], torch.cat([q.grad.float().flatten() for q in model.parameters()
                                                       if q.grad is not None]))
    rows_err = (out["rows"][0] - reference).abs().mean().item()
    packed_err = (out["packed"][0] - reference).abs().mean().item()
    assert packed_err <= 1.25 * rows_err + 1e-4, (packed_err, rows_err)
    cosine = torch.nn.functional.cosine_similarity(out["rows"][1], out["packed"][1], dim=0).item()
    assert cosine > 0.999, cosine
