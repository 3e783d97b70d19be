"""The rollout engine against transformers on a tiny Qwen2 (CPU, fp32, the same code path as on a GPU minus the
CUDA graphs): greedy tokens equal, logprobs equal a recomputed forward pass, stop strings cut where transformers
cuts, refilling slots changes nothing, EOS and context limits end sequences."""

import pytest
import torch

from execrl.models import build_tiny_model, build_tokenizer
from execrl.rollout import RolloutEngine, SamplingParams, hf_generate
from execrl.rollout.sampling import sample
from execrl.tasks.arith import corpus

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=0).eval()  # 4 query heads over 2 kv heads
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger random weights than the init: varied text instead of one token repeated
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    return model, tok


@pytest.fixture(scope="module")
def prompts(tiny):
    _, tok = tiny
    texts = ["Read two integers and print their sum.", "hi", "def f(x):\n    return", "print the maximum of a and b, " * 3]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def recomputed_logprobs(model, prompt, ids, temperature=1.0):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


def test_greedy_equals_transformers_token_for_token(tiny, prompts):
    model, tok = tiny
    ref = hf_generate(model, tok, prompts, 1, 48, temperature=0.0)
    out = RolloutEngine(model, tok, slots=3, max_len=256, sync_every=5).generate(prompts, 2, 48, GREEDY)
    for r, o in zip(ref, out):
        assert len(r[0].ids) > 10
        assert o[0].ids == o[1].ids == r[0].ids
        assert o[0].text == r[0].text and o[0].truncated == r[0].truncated


def test_transformers_backend_samples_what_the_engine_samples_whatever_the_checkpoint_suggests(tiny, prompts):
    """A checkpoint's generation_config.json (Qwen2.5-Coder-Instruct: repetition_penalty 1.1) reshaped `generate`'s
    samples, which the engine and the trainer's logprobs do not: greedy outputs differed on every prompt. And a pad
    token the model sampled mid-answer (pad not an end token) cut the completion there, marked as ended."""
    from execrl.rollout.hf import _cut

    model, tok = tiny
    plain = hf_generate(model, tok, prompts, 1, 48, temperature=0.0)
    saved = model.generation_config.to_dict()
    model.generation_config.update(repetition_penalty=3.0, no_repeat_ngram_size=2, min_length=40)
    try:
        suggested = hf_generate(model, tok, prompts, 1, 48, temperature=0.0)
    finally:
        model.generation_config = type(model.generation_config).from_dict(saved)
    assert [g[0].ids for g in suggested] == [g[0].ids for g in plain]
    assert model.generation_config.repetition_penalty in (None, 1.0)  # (the model's own config is put back)
    pad, eos = 0, [1]
    assert _cut([5, pad, 6, 7], tok, eos, pad, 4, None).ids == [5, pad, 6, 7]  # (sampled: one of its tokens)
    assert _cut([5, 6, pad, pad], tok, eos, pad, 4, None).ids == [5, 6]  # (generate's padding)


def test_logprobs_match_a_recomputed_forward_pass(tiny, prompts):
    model, tok = tiny
    torch.manual_seed(0)
    out = RolloutEngine(model, tok, slots=4, max_len=256).generate(prompts, 2, 32, SamplingParams(temperature=0.7))
    for prompt, group in zip(prompts, out):
        for c in group:
            assert len(c.logprobs) == len(c.ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), recomputed_logprobs(model, prompt, c.ids, 0.7),
                                       atol=1e-4, rtol=1e-4)


def test_refilling_slots_gives_the_same_results_as_one_at_a_time(tiny, prompts):
    model, tok = tiny
    together = RolloutEngine(model, tok, slots=2, max_len=256, sync_every=3).generate(prompts, 3, 40, GREEDY)
    for prompt, group in zip(prompts, together):
        alone = RolloutEngine(model, tok, slots=1, max_len=256).generate([prompt], 1, 40, GREEDY)[0][0]
        assert all(c.ids == alone.ids for c in group)
        torch.testing.assert_close(torch.tensor(group[0].logprobs), torch.tensor(alone.logprobs))


def test_stop_strings_cut_where_transformers_cuts(tiny, prompts):
    model, tok = tiny
    full = RolloutEngine(model, tok, slots=4, max_len=256).generate(prompts[:1], 1, 48, GREEDY)[0][0]
    at = next(i for i in range(8, len(full.text)) if full.text[i:i + 3].isascii() and full.text[i:i + 3].isalpha())
    stop = full.text[at:at + 3]  # a string the greedy text reaches part-way
    ref = hf_generate(model, tok, prompts[:1], 1, 48, temperature=0.0, stop_strings=[stop])[0][0]
    got = RolloutEngine(model, tok, slots=4, max_len=256, sync_every=7).generate(prompts[:1], 1, 48, GREEDY,
                                                                                stop_strings=[stop])[0][0]
    assert got.ids == ref.ids == full.ids[:len(got.ids)] and len(got.ids) < len(full.ids)
    assert stop in got.text and stop not in tok.decode(got.ids[:-1], skip_special_tokens=True)
    assert not got.truncated


def shortest_prefix_with(tok, ids, stops):
    """The reference: the fewest leading tokens whose whole text holds a stop string."""
    return next((k for k in range(1, len(ids) + 1)
                 if any(s in tok.decode(ids[:k], skip_special_tokens=True) for s in stops)), None)


@pytest.mark.parametrize("sync_every", [1, 2, 5, 16])
def test_stop_strings_found_across_syncs_as_in_the_whole_text(tiny, prompts, sync_every):
    """Each sync decodes only the tokens since the last one (and a lookback): a stop string that
    began before them, or spans several tokens, is still cut where the whole text first holds it."""
    model, tok = tiny
    full = RolloutEngine(model, tok, slots=4, max_len=256).generate(prompts, 1, 64, GREEDY)
    texts = [c[0].text for c in full]
    stops = [[t[20:27]] for t in texts] + [[t[40:42], "zzzz"] for t in texts]  # multi-token and short ones
    engine = RolloutEngine(model, tok, slots=3, max_len=256, sync_every=sync_every)
    for stop in stops:
        got = engine.generate(prompts, 1, 64, GREEDY, stop_strings=stop)
        for want, c in zip(full, got):
            cut = shortest_prefix_with(tok, want[0].ids, stop)
            assert c[0].ids == want[0].ids[:cut or len(want[0].ids)], (stop, sync_every)
            assert c[0].truncated == (cut is None and want[0].truncated)


def test_a_stop_search_decodes_only_the_new_tokens_and_a_lookback():
    from execrl.rollout.engine import first_stop, stop_lookback

    class Counting:  # a tokenizer of one character per token that counts the tokens it decodes
        decoded = 0

        def decode(self, ids, skip_special_tokens=True):
            Counting.decoded += len(ids)
            return "".join(chr(97 + i) for i in ids)

    ids = [i % 20 for i in range(3000)] + [25, 24, 23]  # ... "zyx" at the end
    back = stop_lookback(["zyx"])
    assert back == 2 * 3 + 16
    known = 3000 - 16
    window = ids[known - back:]
    assert first_stop(Counting(), window, ["zyx"], back) + known - back == len(ids)
    assert Counting.decoded < 20 * len(window)  # a few decodes of the window, never the 3,000 tokens before it
    assert first_stop(Counting(), ids, ["zyx"]) == len(ids) and first_stop(Counting(), ids, ["w"]) is None
    assert first_stop(Counting(), ids[:10], ["c"], known=10) is None  # nothing new to read


def test_eos_ends_a_sequence_and_the_context_limit_truncates(tiny, prompts):
    model, tok = tiny
    full = RolloutEngine(model, tok, slots=2, max_len=256).generate(prompts[:1], 1, 40, GREEDY)[0][0]
    engine = RolloutEngine(model, tok, slots=2, max_len=256)
    engine.eos_list = [full.ids[5]]  # pretend the 6th greedy token is an end-of-sequence token
    engine.eos = torch.tensor(engine.eos_list)
    ended = engine.generate(prompts[:1], 1, 40, GREEDY)[0][0]
    assert ended.ids == full.ids[:full.ids.index(full.ids[5]) + 1] and not ended.truncated
    forced = engine.generate(prompts[:1], 1, 40, SamplingParams(temperature=0.0, ignore_eos=True))[0][0]
    assert forced.ids == full.ids and forced.truncated
    short = RolloutEngine(model, tok, slots=2, max_len=len(prompts[0]) + 7).generate(prompts[:1], 1, 40, GREEDY)[0][0]
    assert short.ids == full.ids[:7] and short.truncated
    with pytest.raises(ValueError, match="max_total_sequence_length"):
        RolloutEngine(model, tok, slots=2, max_len=len(prompts[3])).generate(prompts[3:], 1, 4, GREEDY)


def test_each_prompt_may_have_its_own_token_budget(tiny, prompts):
    """max_new_tokens per prompt (bench/lengths.py draws completion lengths this way): each completion ends at its
    prompt's budget, in slots that are refilled as others end, with the tokens of one common budget up to there."""
    model, tok = tiny
    engine = RolloutEngine(model, tok, slots=2, max_len=256)
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    budgets = [3, 17, 1, 5]
    out = engine.generate(prompts, 2, budgets, params)
    assert [[len(c.ids) for c in group] for group in out] == [[b, b] for b in budgets]
    common = engine.generate(prompts, 1, 17, params)
    assert all(group[0].ids == full[0].ids[:b] for group, full, b in zip(out, common, budgets))
    with pytest.raises(ValueError, match="one budget >= 1 per prompt"):
        engine.generate(prompts, 1, [4, 4], params)


def test_each_completion_is_handed_in_as_it_ends_while_the_others_generate(tiny, prompts):
    """on_sample (the trainer grades each sample as it is handed in): called once per request, with the completion
    generate returns for it, in the order the samples end, while the other slots still generate; transformers'
    backend hands in each batch's completions as the batch is done."""
    model, tok = tiny
    engine = RolloutEngine(model, tok, slots=3, max_len=256, sync_every=1)
    seen, busy = [], []

    def on_sample(i, j, c):
        seen.append((i, j, c))
        busy.append(int(engine.active.sum()))  # slots still generating as it is handed in

    out = engine.generate(prompts, 2, [9, 2, 30, 5], SamplingParams(temperature=0.0, ignore_eos=True),
                          on_sample=on_sample)
    # three slots: (0,0), (0,1) and (1,0) start; (1,0) ends after 2 tokens, (1,1) after 4, (0,*) after 9, ...
    assert [(i, j) for i, j, _ in seen] == [(1, 0), (1, 1), (0, 0), (0, 1), (3, 0), (3, 1), (2, 0), (2, 1)]
    assert all(c is out[i][j] for i, j, c in seen)
    assert busy[0] == 2 and busy[-1] == 0
    handed = []
    hf_out = hf_generate(model, tok, prompts, 2, 4, temperature=1.0, batch_size=4,
                         on_sample=lambda i, j, c: handed.append((i, j, c)))
    assert [(i, j) for i, j, _ in handed] == [(i, j) for i in range(4) for j in range(2)]
    assert all(c is hf_out[i][j] for i, j, c in handed)


def test_few_live_slots_split_their_positions_over_about_256_programs():
    """The split rule: none while the live (slot, kv head) pairs fill the GPU or the window is short; else runs of
    at least ~512 positions, at most ~256 programs, a power of two of them (16 slots at 2,176 positions read their
    caches at 0.85 TB/s unsplit on an H200: bench/README.md)."""
    from execrl.rollout.attention import tail_splits

    assert tail_splits(8, 2, 4096) == 8  # the tail of a batch: 16 pairs, runs of 512 positions
    assert tail_splits(16, 2, 4096) == 8 and tail_splits(16, 2, 2048) == 4  # a small engine's full batch
    assert tail_splits(32, 2, 4096) == 4 and tail_splits(24, 2, 8192) == 4  # <= 256 programs, a power of 2
    assert tail_splits(1, 2, 65536) == 16 and tail_splits(20, 1, 65536) == 8  # at most MAX_SPLITS
    assert tail_splits(33, 2, 4096) == 1 and tail_splits(128, 2, 4096) == 1  # enough pairs unsplit
    assert tail_splits(8, 2, 512) == 1 and tail_splits(8, 2, 1023) == 1  # short windows


def test_the_batchs_tail_splits_attention_by_position(tiny, prompts):
    """Once few samples still run (at most 64 (slot, kv head) pairs) at a window of 1,024 positions or more, the
    engine asks attention to split each slot's positions over programs (on a GPU: the long samples' caches read by many
    programs instead of one each); before, and on the short windows, not. The tokens are the same as alone."""
    from execrl.rollout.attention import tail_splits

    model, tok = tiny
    engine = RolloutEngine(model, tok, slots=8, max_len=1200, sync_every=16)
    seen, decode = [], engine.dec.decode

    def spy(tokens, pos, window, reads, tail, rows=None, shared=None):
        seen.append((int(engine.active.sum()), window, tail))
        return decode(tokens, pos, window, reads, tail, rows, shared)

    engine.dec.decode = spy
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    long = 1200 - len(prompts[1]) - 1
    out = engine.generate([prompts[1]] + [prompts[0]] * 7, 1, [long] + [3] * 7, params)
    kv = engine.dec.kv_heads
    assert all(tail == tail_splits(running, kv, window) for running, window, tail in seen)  # (running <= busy)
    assert any(tail > 1 for _, _, tail in seen) and seen[0][2] == 1
    alone = RolloutEngine(model, tok, slots=1, max_len=1200).generate([prompts[1]], 1, long, params)
    assert out[0][0].ids == alone[0][0].ids


def test_an_ended_sample_stops_reading_its_cache_while_the_batch_goes_on(tiny, prompts):
    """A slot whose sample ended attends to position 0 only until the batch's longest sample ends (it read its whole
    cache on every step: with log-normal lengths most of a long step's attention reads); the samples still running
    get the same tokens."""
    model, tok = tiny
    engine = RolloutEngine(model, tok, slots=4, max_len=256, sync_every=4)
    seen, decode = [], engine.dec.decode

    def spy(tokens, pos, window, reads, tail, rows=None, shared=None):
        seen.append((pos.clone(), reads.clone(), engine.active.clone()))
        return decode(tokens, pos, window, reads, tail, rows, shared)

    engine.dec.decode = spy
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    out = engine.generate(prompts, 1, [2, 30, 2, 2], params)
    ended = [(pos, reads) for pos, reads, active in seen if not active.all()]
    assert ended and all(torch.equal(reads, torch.where(active, pos, 0)) for pos, reads, active in seen)
    assert all(int(reads[s]) == 0 < int(pos[s]) for pos, reads in ended[-1:] for s in (0, 2, 3))
    alone = RolloutEngine(model, tok, slots=1, max_len=256).generate(prompts[1:2], 1, 30, params)
    assert out[1][0].ids == alone[0][0].ids and len(alone[0][0].ids) == 30


def test_sampling_follows_the_distribution_and_its_filters():
    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]]).repeat(20000, 1)
    tokens, logp = sample(logits, SamplingParams(temperature=0.8))
    freq = torch.bincount(tokens, minlength=5).float() / len(tokens)
    torch.testing.assert_close(freq, torch.softmax(logits[0] / 0.8, -1), atol=0.01, rtol=0)
    torch.testing.assert_close(logp, torch.log_softmax(logits / 0.8, -1).gather(-1, tokens[:, None])[:, 0])
    top2, _ = sample(logits, SamplingParams(temperature=1.0, top_k=2))
    assert set(top2.tolist()) == {0, 1}
    nucleus, _ = sample(logits, SamplingParams(temperature=1.0, top_p=0.6))  # p = .53, .20, ...: two tokens
    assert set(nucleus.tolist()) == {0, 1}
    assert set(sample(logits, SamplingParams(temperature=1.0, top_p=0.01))[0].tolist()) == {0}
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)


def test_top_k_one_is_greedy(tiny, prompts):
    model, tok = tiny
    engine = RolloutEngine(model, tok, slots=4, max_len=256)
    assert ([c.ids for g in engine.generate(prompts, 1, 24, SamplingParams(temperature=1.0, top_k=1)) for c in g]
            == [c.ids for g in engine.generate(prompts, 1, 24, GREEDY) for c in g])


def test_fused_projections_are_views_the_optimizer_updates_in_place(tiny, prompts):
    import copy

    from execrl.rollout.fuse import fuse_projections, joined

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    greedy = RolloutEngine(model, tok, slots=2, max_len=128).generate(prompts[:2], 1, 16, GREEDY)
    fuse_projections(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    engine = RolloutEngine(model, tok, slots=2, max_len=128)
    a = model.model.layers[0].self_attn
    qkv = engine.dec.fused[0]["qkv"][0]
    assert qkv is not None and "gate_up" in engine.dec.fused[0]
    assert [c.ids for g in engine.generate(prompts[:2], 1, 16, GREEDY) for c in g] == [c.ids for g in greedy for c in g]
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.tensor([prompts[0]])).logits.sum().backward()
    opt.step()
    assert not torch.equal(a.k_proj.weight, before["model.layers.0.self_attn.k_proj.weight"])
    assert torch.equal(qkv, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))  # the engine sees it
    assert joined([a.q_proj, a.k_proj, a.v_proj]).data_ptr() == qkv.data_ptr()


def test_samples_depend_on_their_seed_not_on_slots_or_batch(tiny, prompts):
    """Keyed noise: a prompt's samples are the same alone or in a batch, in 2 slots or 5 (what makes a run on N
    processes draw the samples of a run on one)."""
    model, tok = tiny
    params = SamplingParams(temperature=1.0)
    seeds = [11, 22, 33, 44]
    batch = RolloutEngine(model, tok, slots=5, max_len=256, sync_every=4).generate(prompts, 3, 24, params, seeds=seeds)
    alone = RolloutEngine(model, tok, slots=2, max_len=256).generate(prompts[2:3], 3, 24, params, seeds=seeds[2:3])[0]
    assert [c.ids for c in alone] == [c.ids for c in batch[2]]
    assert len({tuple(c.ids) for g in batch for c in g}) == 12  # different prompts and samples: different draws
    other = RolloutEngine(model, tok, slots=5, max_len=256).generate(prompts, 3, 24, params, seeds=[1, 2, 3, 4])
    assert [c.ids for c in other[0]] != [c.ids for c in batch[0]]


def test_an_admission_padded_to_a_graphs_shape_samples_what_an_exact_one_does(tiny, prompts):
    """A CUDA graph's admission pads the prompts' count and width and the samples' count (extra prompts one token
    long, extra samples repeating the last): on the CPU, where no graph is captured, the same padded admission gives
    the samples an exact one gives, slots refilled a few prompts at a time included."""
    model, tok = tiny
    params = SamplingParams(temperature=0.9)
    exact = RolloutEngine(model, tok, slots=5, max_len=256, sync_every=3)
    padded = RolloutEngine(model, tok, slots=5, max_len=256, sync_every=3)
    shapes = []

    def pad(p, t, n):
        shapes.append(shape := (1 << (p - 1).bit_length() << 1, -(-t // 64) * 64, 1 << (n - 1).bit_length() << 1))
        return shape
    padded._admission_shape = pad
    want = exact.generate(prompts, 3, [5, 40, 9, 26], params, seeds=[5, 6, 7, 8])
    got = padded.generate(prompts, 3, [5, 40, 9, 26], params, seeds=[5, 6, 7, 8])
    assert len(shapes) > 2  # (refills)
    for g, w in zip(got, want):
        assert [c.ids for c in g] == [c.ids for c in w]
        for a, b in zip(g, w):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5)


def test_keyed_noise_is_uniform_enough_to_sample_from():
    from execrl.rollout.sampling import request_key, token_keys

    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]]).repeat(20000, 1)
    keys = token_keys(torch.full((20000,), request_key(7, 0)), torch.arange(20000))  # one request, 20000 positions
    tokens, _ = sample(logits, SamplingParams(temperature=1.0), keys)
    freq = torch.bincount(tokens, minlength=5).float() / len(tokens)
    torch.testing.assert_close(freq, torch.softmax(logits[0], -1), atol=0.01, rtol=0)


def test_stop_token_ids_end_a_sequence_in_both_backends(tiny, prompts):
    """policy.generation.stop_token_ids: the sequence ends after the first of them, as at an EOS token."""
    from execrl.rollout import build_generator

    model, tok = tiny
    full = RolloutEngine(model, tok, slots=2, max_len=256).generate(prompts[:1], 1, 40, GREEDY)[0][0]
    stop = full.ids[5]
    for backend in ("execrl", "transformers"):
        gen = build_generator(model, tok, backend, 2, 256, cuda_graphs=False, stop_token_ids=[stop])
        ended = gen.generate(prompts[:1], 1, 40, GREEDY)[0][0]
        assert ended.ids == full.ids[:full.ids.index(stop) + 1] and not ended.truncated, backend


def test_a_budget_per_prompt_in_both_backends(tiny, prompts):
    """max_new_tokens as one budget per prompt (the rest of a multi-turn turn): each prompt's completion keeps to
    its own, in both backends, each in its prompt's place."""
    from execrl.rollout import build_generator

    model, tok = tiny
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    for backend in ("execrl", "transformers"):
        gen = build_generator(model, tok, backend, 2, 256, cuda_graphs=False)
        out = gen.generate(prompts[:3], 1, [7, 3, 7], params)
        assert [len(group[0].ids) for group in out] == [7, 3, 7], backend
        assert out[1][0].ids == gen.generate(prompts[1:2], 1, 3, params)[0][0].ids, backend


def test_both_backends_stop_where_the_context_ends(tiny, prompts):
    """policy.max_total_sequence_length bounds prompt + completion in both backends: transformers' generate ran each
    prompt's whole max_new_tokens past it (a learned position table's IndexError; on a rotary model the tokens past
    the context generated, then cut before training), the engine stopped at its cache's end."""
    from execrl.rollout import build_generator

    model, tok = tiny
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    max_len = len(prompts[0]) + 7
    outs = {}
    for backend in ("execrl", "transformers"):
        gen = build_generator(model, tok, backend, 2, max_len, cuda_graphs=False)
        out = gen.generate(prompts[:2], 1, 40, params)
        assert [len(g[0].ids) for g in out] == [7, max_len - len(prompts[1])], backend
        assert all(g[0].truncated for g in out), backend
        budgets = [len(g[0].ids) for g in gen.generate(prompts[:2], 1, [3, 40], params)]
        assert budgets == [3, max_len - len(prompts[1])], backend
        full = build_generator(model, tok, backend, 2, len(prompts[3]), cuda_graphs=False)
        with pytest.raises(ValueError, match="max_total_sequence_length"):
            full.generate(prompts[3:], 1, 4, params)
        outs[backend] = [g[0].ids for g in out]
    assert outs["execrl"] == outs["transformers"]


def test_a_batchs_tail_runs_on_the_busy_slots_rows_only(tiny, prompts):
    """Once at most half the slots are busy, a step runs on the busy slots' rows (a power of two of them, >= MIN_ROWS,
    free slots filling the rest) instead of every slot's: the tail of a batch, a few long samples, no longer pays
    for every slot's GEMMs and sampling. The busy slots here are not the first ones (the long samples are a later
    prompt's, and refills land where short samples ended), and the tokens and logprobs are those of steps over
    every slot."""
    from execrl.rollout.engine import MIN_ROWS

    model, tok = tiny
    params = SamplingParams(temperature=0.8, ignore_eos=True)

    def run(fewer: bool):
        engine = RolloutEngine(model, tok, slots=64, max_len=128, sync_every=4)
        seen, decode = [], engine.dec.decode

        def spy(tokens, pos, window, reads, tail, rows=None, shared=None):
            active = engine.active.nonzero()[:, 0].tolist()
            seen.append((None if rows is None else rows.tolist(), active))
            return decode(tokens, pos, window, reads, tail, rows, shared)

        engine.dec.decode = spy
        if not fewer:
            engine._rows = lambda busy: None
        return engine.generate(prompts, 24, [3, 40, 2, 25], params, seeds=[7, 8, 9, 10]), seen

    (out, seen), (every, _) = run(True), run(False)
    few = [(rows, active) for rows, active in seen if rows is not None]
    assert few and {len(rows) for rows, _ in few} == {MIN_ROWS * 2} and seen[0][0] is None
    assert all(set(active) <= set(rows) and len(set(rows)) == len(rows) for rows, active in few)
    assert any(rows[0] > 0 for rows, _ in few)  # the busy slots are not simply the first rows
    for group, ref in zip(out, every):
        assert [c.ids for c in group] == [c.ids for c in ref]
        for c, r in zip(group, ref):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-5, rtol=1e-5)


def test_the_down_projection_in_parts_decodes_what_one_gemm_does(tiny, prompts):
    """decoder.down_parts: decode's down projection as partial products over parts of its input, summed in the next
    layer's first kernel (and the final norm's), the path a GPU takes in 16-bit. Forced here on the CPU (fp32
    partials there too): the same tokens and logprobs as the one-GEMM path, refills and the batch's tail on fewer rows
    included."""
    model, tok = tiny
    params = SamplingParams(temperature=0.8, ignore_eos=True)

    def run(parts: int):
        engine = RolloutEngine(model, tok, slots=64, max_len=128, sync_every=4)
        assert engine.dec.down_parts == 1  # (on a CPU, unless forced)
        engine.dec.down_parts = parts
        return engine.generate(prompts, 24, [3, 40, 2, 25], params, seeds=[7, 8, 9, 10])

    for group, ref in zip(run(2), run(1)):
        assert [c.ids for c in group] == [c.ids for c in ref]
        for c, r in zip(group, ref):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-5, rtol=1e-5)


def test_a_family_whose_block_returns_one_tensor_is_told_what_block_returns(tiny, prompts, monkeypatch):
    """Architecture.block returns (stream, MLP output): a family file that returns their sum gets a TypeError naming
    the contract, not a batch of 2 unpacked into two wrong halves."""
    from execrl.rollout.models.base import Architecture

    model, tok = tiny
    monkeypatch.setattr(Architecture, "block", lambda self, layer, x, attention, mlp: x + attention(x))
    engine = RolloutEngine(model, tok, slots=2, max_len=64, cuda_graphs=False)
    with pytest.raises(TypeError, match="returned one tensor"):
        engine.generate(prompts[:2], 1, 4, GREEDY)


def test_the_attention_op_that_writes_the_cache_compiles_without_copying_it():
    """The decode step's attention op writes the new keys and values into the caches (declared mutated): compiled,
    inductor calls it on the caches themselves, with no copy of them before or after (a copy of every layer's cache
    in each decode step would cost more than the attention). Inductor on the CPU, where the op runs torch ops."""
    from torch._inductor.utils import run_and_get_code

    slots, heads, group, length, dim = 4, 2, 3, 64, 32
    k, v = torch.randn(slots, heads, length, dim), torch.randn(slots, heads, length, dim)
    before_k, before_v = k.clone(), v.clone()

    def layer(x, w, pos, cos, sin):
        qkv = x @ w  # the joined projection: queries, keys, values
        q = qkv[:, :heads * group * dim].view(slots, heads, group, dim)
        key = qkv[:, heads * group * dim:heads * (group + 1) * dim].view(slots, heads, dim)
        value = qkv[:, heads * (group + 1) * dim:].view(slots, heads, dim)
        out = torch.ops.execrl.decode_attention_append(q, k, v, pos, None, cos, sin, key, value, pos, length, length,
                                                       dim**-0.5, 1, None, None)
        return out.sum(-1)

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(slots, 16, generator=g), torch.randn(16, heads * (group + 2) * dim, generator=g)
    pos, cos, sin = torch.tensor([3, 10, 20, 63]), torch.randn(slots, dim, generator=g), torch.randn(slots, dim, generator=g)
    out, codes = run_and_get_code(torch.compile(layer), x, w, pos, cos, sin)
    code = "\n".join(codes)
    assert "decode_attention_append" in code and "clone" not in code and "copy_" not in code
    compiled_k, compiled_v = k.clone(), v.clone()
    k.copy_(before_k), v.copy_(before_v)
    torch.testing.assert_close(out, layer(x, w, pos, cos, sin))  # the same as run eagerly, caches included
    torch.testing.assert_close(compiled_k, k)
    torch.testing.assert_close(compiled_v, v)
    assert not torch.equal(k, before_k)


def test_a_completions_text_is_the_tokenizers_decode():
    """text_of skips transformers' element-by-element input check, not the tokenizer's own decoding: the same text
    for byte and BPE tokenizers, special tokens dropped; a tokenizer class with a decode of its own is asked."""
    from execrl.rollout.completion import text_of

    for tok in (build_tokenizer([], vocab_size=259), build_tokenizer(corpus(), vocab_size=512)):
        rows = [tok("print(max(3, 4))  # done\n")["input_ids"] + [tok.eos_token_id], [], [tok.eos_token_id],
                list(range(len(tok)))]
        for ids in rows:
            assert text_of(tok, ids) == tok.decode(ids, skip_special_tokens=True)

    class Own(type(tok)):
        def decode(self, token_ids, skip_special_tokens=False, **kwargs):
            return "own"

    tok.__class__ = Own
    assert text_of(tok, [1, 2]) == "own"


def test_a_special_tag_that_completions_are_read_by_stays_in_their_text():
    """A tokenizer that makes <think> and </think> special tokens (some reasoning models'): decoding with special
    tokens skipped dropped them, so every think-format answer had no </think> (reward 0) and a stop string
    </think> never fired; the tokenizer's other special tokens (its EOS) are still left out."""
    from execrl.control_tokens import MID, ids_of
    from execrl.extract import extract
    from execrl.rollout.completion import text_of
    from execrl.rollout.engine import first_stop

    tok = build_tokenizer(["def add(a, b):\n    return a + b\n", "think about it"] * 5, vocab_size=300)
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    said = "<think>\nadd them\n</think>\n```python\ndef add(a, b):\n    return a + b\n```"
    ids = ids_of(said, tok, MID) + [tok.eos_token_id]
    assert "</think>" not in tok.decode(ids, skip_special_tokens=True)  # (what decoding alone gives)
    assert text_of(tok, ids) == said
    assert extract(text_of(tok, ids), "think", "fence").format_ok
    assert text_of(tok, ids[:first_stop(tok, ids, ["</think>"])]).endswith("</think>")


def test_a_stop_string_that_holds_a_special_tokens_text_is_found():
    """(A hunt's find) a stop string "<end_of_turn>" (Gemma's turn end, a special token) never fired in the engine,
    whose text leaves special tokens out, and fired in transformers' generate: unseen_stop names it with its id, for
    training's and eval's refusals; a special tag completions are read by (</think>) and plain text are not named."""
    from execrl.rollout.completion import unseen_stop

    tok = build_tokenizer(["def add(a, b):\n    return a + b\n", "think about it"] * 5, vocab_size=300)
    tok.add_special_tokens({"additional_special_tokens": ["<end_of_turn>", "</think>"]})
    turn = tok.convert_tokens_to_ids("<end_of_turn>")
    assert unseen_stop(tok, ["\n\n", "<end_of_turn>"]) == ("<end_of_turn>", "<end_of_turn>", turn)
    assert unseen_stop(tok, ["<end_of_turn>\n"])[2] == turn  # (a text around it does not show either)
    assert unseen_stop(tok, ["</think>", "```\n"]) is None and unseen_stop(tok, []) is None
    assert unseen_stop(tok, None) is None


def test_a_completion_keeps_its_first_space_under_a_decoder_that_strips_a_sequences_first():
    """Llama 2's, Mistral's and CodeLlama's sentencepiece decoders strip the first space of what they decode: a
    HumanEval body sampled as '▁▁▁' '▁return' ... came out indented by 3 and did not compile (a hunt's find). A
    completion is decoded as it reads after its prompt; a byte-level tokenizer's text is its decode's."""
    from transformers import LlamaTokenizer

    from execrl.rollout.completion import text_of

    pieces = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "▁", "▁▁", "▁▁▁", "▁return", "▁a",
              "▁+", "▁b"]
    vocab = {p: i for i, p in enumerate(pieces)}
    tok = LlamaTokenizer(vocab=vocab, merges=[])
    body = [vocab[p] for p in ("▁▁▁", "▁return", "▁a", "▁+", "▁b", "<0x0A>")]
    assert tok.decode(body) == "   return a + b\n"  # (decoded alone: one space short)
    assert text_of(tok, body) == "    return a + b\n"
    assert text_of(tok, [vocab["<0x72>"], vocab["▁a"]]) == "r a" and text_of(tok, []) == ""
    bpe = build_tokenizer(corpus(), vocab_size=512)
    ids = bpe(" return a + b")["input_ids"]
    assert text_of(bpe, ids) == bpe.decode(ids) == " return a + b"


def test_steps_of_few_rows_take_gate_up_and_silu_as_one_kernel(tiny, prompts, monkeypatch):
    """At most gated_gemm.max_rows rows a step (a small engine; a batch's tail on its busy rows; 64 on Hopper) decode
    computes gate/up and silu x up as one kernel (gated_gemm, on a GPU: here its torch equivalent stands in for the
    Triton kernels); steps over more rows keep the GEMM and the compiled silu x up. The tokens are the same either
    way."""
    import copy

    import torch.nn.functional as F

    from execrl.rollout import gated_gemm
    from execrl.rollout.fuse import fuse_projections

    model, tok = tiny
    model = copy.deepcopy(model)
    fuse_projections(model)
    rows = []

    def equivalent(x, weight):
        rows.append(x.reshape(-1, x.shape[-1]).shape[0])
        gate, up = F.linear(x, weight).chunk(2, -1)
        return F.silu(gate) * up

    monkeypatch.setattr(gated_gemm, "fits", lambda weight: True)
    monkeypatch.setattr(gated_gemm, "gated_up", equivalent)
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    small = RolloutEngine(model, tok, slots=8, max_len=256)
    assert small.dec.gated_rows == gated_gemm.ROWS  # (a CPU's max_rows)
    out = small.generate(prompts, 2, 24, params)
    assert rows and set(rows) == {8}
    rows.clear()
    small.dec.gated_rows = 0
    assert [c.ids for g in small.generate(prompts, 2, 24, params) for c in g] == [c.ids for g in out for c in g]
    assert not rows
    # 64 slots: 64 rows a step until only prompt 1's 16 samples run, then their 16 rows (the tail)
    big = RolloutEngine(model, tok, slots=64, max_len=256, sync_every=4)
    big.generate(prompts, 16, [2, 24, 2, 2], params)
    assert set(rows) == {16}
    rows.clear()
    monkeypatch.setattr(gated_gemm, "max_rows", lambda weight: 64)  # (as on Hopper)
    big = RolloutEngine(model, tok, slots=64, max_len=256, sync_every=4)
    assert big.dec.gated_rows == 64
    big.generate(prompts, 16, [2, 24, 2, 2], params)
    assert set(rows) == {64, 16}
    monkeypatch.undo()  # on a CPU: no kernel, the unfused path
    assert not RolloutEngine(model, tok, slots=8, max_len=256).dec.gated_rows


@pytest.mark.parametrize("budgets, samples", [([20] * 4, 1), ([20, 5, 9, 5], 1), ([12, 30], 3)])
def test_the_engine_counts_how_full_its_decode_steps_were(tiny, prompts, budgets, samples):
    """decoded: the tokens decode steps sampled (each completion's but the first, which prefill samples) and the
    steps x slots: 1.0 where every slot decodes to the end together, less where samples end early or refill."""
    model, tok = tiny
    engine = RolloutEngine(model, tok, slots=4, max_len=256, sync_every=5)
    steps, step = [0], engine._step

    def counted(*args):
        steps[0] += 1
        return step(*args)

    engine._step = counted
    out = engine.generate(prompts[:len(budgets)], samples, budgets, SamplingParams(1.0, ignore_eos=True))
    tokens = sum(len(c.ids) - 1 for group in out for c in group)
    assert [len(c.ids) for c in out[0]] == [budgets[0]] * samples
    assert engine.decoded == {"tokens": tokens, "slot_steps": steps[0] * 4}
    if budgets == [20] * 4:
        assert tokens == steps[0] * 4  # every slot live on every step
    else:
        assert tokens < steps[0] * 4


@pytest.mark.parametrize("slots,samples", [(6, 4), (40, 12)])
def test_a_groups_slots_read_their_prompt_from_one_of_them_as_samples_end_and_slots_refill(tiny, prompts, slots,
                                                                                           samples):
    """A prompt's samples admitted together form a unit whose prompt attention reads from one of its slots
    (rollout/units.py): with samples ending at different lengths and their slots refilled with other prompts, the
    tokens and logprobs are those of every slot reading its own copy, and the slot a unit reads from moved (its first
    sample ended while the others went on) before the slot took another prompt. With 40 slots, a batch's tail runs on
    the busy slots' rows (engine._rows), its units in those rows' terms."""
    model, tok = tiny
    moved, shared_steps = [], []

    def run(share: bool):
        engine = RolloutEngine(model, tok, slots=slots, max_len=256, sync_every=3, stop_token_ids=list(range(40, 70)))
        engine.share_prompts, engine.units.shortest = share, 1  # (short prompts: in units too)
        units, release, step = engine.units, engine.units.release, engine._step

        def watched(done):
            before = [list(u) for u in units.held]
            release(done)
            moved.extend(u for u, (b, a) in enumerate(zip(before, units.held)) if a[0] and b[1] != a[1])

        def counted(window, params, tail=1, rows=None):
            shared_steps.append((units.live and share, rows is not None))
            return step(window, params, tail, rows)

        units.release, engine._step = watched, counted
        return engine.generate(prompts, samples, 40, SamplingParams(1.0), seeds=[11, 12, 13, 14])

    plain = run(False)
    moved.clear()
    shared = run(True)
    assert moved and any(live for live, _ in shared_steps)
    if slots == 40:
        assert any(live and mapped for live, mapped in shared_steps)  # (units on the busy slots' rows)
    lengths = [len(c.ids) for group in shared for c in group]
    assert len(set(lengths)) > 3  # (samples end at different lengths: slots are refilled)
    for a, b in zip(plain, shared):
        for x, y in zip(a, b):
            assert x.ids == y.ids and x.logprobs == y.logprobs


@pytest.mark.gpu
def test_after_a_failed_capture_the_gpu_still_draws_random_numbers():
    """A capture that fails (a forward that syncs with the host: the engine then decodes without graphs) left the
    device's generator marked as capturing, and every later torch.randn on the GPU failed ("Offset increment outside
    graph capture"); after the engine's capture fails, it draws as before."""
    from execrl.rollout.engine import rng_out_of_capture

    x = torch.ones(4, device="cuda")
    torch.rand(1, device="cuda")  # (the generator in use: a capture registers it)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError):
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                torch.rand(1, device="cuda")
                x.sum().item()  # a host sync: the capture fails
        except RuntimeError:
            rng_out_of_capture()
            raise
    torch.cuda.synchronize()
    assert torch.rand(8, device="cuda").shape == (8,)


def test_a_model_that_names_no_end_token_is_said_once_with_the_token_to_set(capsys):
    """A model whose tokenizer and generation config name no EOS ran every answer to max_new_tokens without a word
    (eval's completions decoded empty: the template's end-of-turn token, repeated, is special)."""
    from types import SimpleNamespace

    from execrl.rollout.completion import end_ids

    model = SimpleNamespace(config=SimpleNamespace(_name_or_path="/models/noeos"), generation_config=None)
    tok = SimpleNamespace(eos_token_id=None, get_vocab=lambda: {"<|im_end|>": 7, "a": 8})
    assert end_ids(model, tok) == [] and end_ids(model, tok) == [] and end_ids(model, tok, [7]) == [7]
    said = capsys.readouterr().err.replace("\n", " ")
    assert said.count("name no end token") == 1 and "policy.generation.stop_token_ids=[7] (<|im_end|>)" in said, said


def test_transformers_generate_cut_at_a_stop_string_where_the_pad_is_an_end_id():
    """(A hunt's find) generate pads a row that a stop string ended; with the pad an end id (set_pad's choice for
    Llama 3 and Mistral), the first pad was read as a sampled end: trained on, and recorded, though never sampled."""
    import string

    from execrl.models import build_tiny_model, build_tokenizer
    from execrl.rollout.hf import hf_generate

    tok = build_tokenizer(["abc def"], vocab_size=259)
    tok.pad_token = tok.eos_token
    model = build_tiny_model(tok).eval()
    torch.manual_seed(0)
    stops = list(string.ascii_letters)
    out = hf_generate(model, tok, [tok("hello", add_special_tokens=False)["input_ids"]], 8, 40, temperature=1.0,
                      stop_strings=stops)[0]
    stopped = [c for c in out if any(s in c.text for s in stops)]
    assert stopped and all(c.ids[-1] != tok.eos_token_id and not c.truncated for c in stopped)
    assert all(not any(s in tok.decode(c.ids[:-1]) for s in stops) for c in stopped)  # (cut at the first one)
