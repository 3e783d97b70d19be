"""Guided decoding on a tiny Qwen2 (CPU): every sample keeps to its regex, JSON schema or Lark grammar, the engine's
logprobs are those the trainer computes under the same masks, unconstrained requests beside constrained ones are
untouched, and a constraint that cannot compile is refused with its reason."""

import json
import re

import pytest
import torch

from execrl.algo.logprobs import token_logprobs_from_hidden
from execrl.guided import ConstraintError, pack, unpack
from execrl.models import build_tiny_model, build_tokenizer
from execrl.rollout import RolloutEngine, SamplingParams
from execrl.rollout.sampling import sample, token_keys, uniform
from execrl.tasks.arith import corpus
from execrl.trainer.step import token_logprobs

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "ok": {"type": "boolean"}},
          "required": ["name", "n", "ok"], "additionalProperties": False}
LARK = 'start: "<think>" thought "</think>\\n```python\\n" code "\\n```"\n' \
       'thought[max_tokens=12]: /[^<]*/\ncode[max_tokens=24]: /[^`]*/'


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=0).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger random weights than the init: varied text, far from any constraint
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    engine = RolloutEngine(model, tok, slots=6, max_len=256, sync_every=4)
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ["Answer:", "hi", "def f(x):"]]
    return model, tok, engine, prompts


def trainer_logprobs(model, prompt, c, temperature):
    """The trainer's logprobs of a completion (execrl.trainer.step.token_logprobs) under the guide's masks."""
    ids = torch.tensor([prompt + c.ids])
    select = torch.zeros(1, ids.shape[1] - 1, dtype=torch.bool)
    select[0, len(prompt) - 1:] = True
    allowed = torch.full((1, ids.shape[1] - 1, c.guide.words), -1, dtype=torch.int32)
    allowed[0, len(prompt) - 1:] = c.guide.masks(c.ids)
    with torch.no_grad():
        logp, _, _ = token_logprobs(model, ids, torch.ones_like(ids), select, temperature, allowed)
    return logp[0, len(prompt) - 1:]


@pytest.mark.parametrize("kind,value,check", [
    ("regex", r"(yes|no), [a-z]{1,6}\.", lambda t: re.fullmatch(r"(yes|no), [a-z]{1,6}\.", t)),
    ("json_schema", SCHEMA, lambda t: (d := json.loads(t)).keys() == {"name", "n", "ok"} and len(d["name"]) <= 8
     and 0 <= d["n"] <= 99 and isinstance(d["ok"], bool)),
    ("grammar", LARK, lambda t: re.fullmatch(r"<think>[^<]*</think>\n```python\n[^`]*\n```", t)),
])
def test_every_sample_keeps_to_its_constraint_with_the_trainers_logprobs(tiny, kind, value, check):
    model, tok, engine, prompts = tiny
    guide = engine.guides.get(kind, value)
    out = engine.generate(prompts, 8, 160, SamplingParams(temperature=1.0), guides=[guide] * 3, seeds=[1, 2, 3])
    texts = [c.text for group in out for c in group]
    assert len(set(texts)) > 8  # (samples, not one answer forced through)
    again = engine.generate(prompts, 8, 160, SamplingParams(temperature=1.0), guides=[guide] * 3, seeds=[1, 2, 3])
    assert [c.text for group in again for c in group] == texts  # (a second call: the same samples)
    for prompt, group in zip(prompts, out):
        for c in group:
            assert not c.truncated and c.ids[-1] in engine.eos_list, c.text
            assert check(c.text), c.text
            assert c.guide is guide
            torch.testing.assert_close(torch.tensor(c.logprobs), trainer_logprobs(model, prompt, c, 1.0),
                                       atol=2e-5, rtol=2e-5)


def test_slots_whose_masks_are_late_sit_steps_out_and_sample_what_they_would_have(tiny, monkeypatch):
    """A mask not written when the step's forward ends holds its slot, not the step: the slot samples nothing and runs
    the same position next step. With half the slots late at random steps (besides those whose masks are), every
    sample, its logprobs and the number of steps' worth of tokens are those of a run that waited for every mask."""
    model, tok, engine, prompts = tiny
    guide = engine.guides.get("grammar", LARK)
    params = SamplingParams(temperature=1.0)
    waited = engine.generate(prompts, 4, 120, params, guides=[guide] * 3, seeds=[4, 5, 6])
    masks, gen, wait = engine.constraints, torch.Generator().manual_seed(0), engine.constraints._wait
    monkeypatch.setattr(masks, "_wait",
                        lambda deadline: wait(deadline) | (torch.rand(masks.slots, generator=gen) < 0.5))
    before = masks.held
    late = engine.generate(prompts, 4, 120, params, guides=[guide] * 3, seeds=[4, 5, 6])
    assert masks.held > before  # (slots were held)
    for a, b in zip((c for g in waited for c in g), (c for g in late for c in g)):
        assert a.ids == b.ids and a.text == b.text
        torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=1e-5)


def test_slots_that_consumed_the_same_tokens_share_one_mask(tiny):
    """Slots whose matchers consumed the same tokens of one constraint are in one state: the mask threads compute
    its mask once and copy it to the others (maskpool.c's groups). Six greedy samples of one prompt walk together:
    one mask per step, not six, and each sample is the one a lone request makes, with the trainer's logprobs."""
    from execrl.rollout import maskpool

    model, tok, engine, prompts = tiny
    guide = engine.guides.get("grammar", LARK)
    params = SamplingParams(temperature=0.0)
    alone = engine.generate(prompts[2:], 1, 80, params, guides=[guide])[0][0]
    pool = maskpool.pool(guide.words * 4)
    jobs, computed = pool.counts()
    out = engine.generate(prompts[2:], engine.slots, 80, params, guides=[guide])[0]
    jobs, computed = (now - before for now, before in zip(pool.counts(), (jobs, computed)))
    assert jobs >= engine.slots * len(alone.ids) and computed <= jobs // engine.slots
    for c in out:
        assert c.ids == alone.ids and re.fullmatch(r"<think>[^<]*</think>\n```python\n[^`]*\n```", c.text), c.text
        torch.testing.assert_close(torch.tensor(c.logprobs), trainer_logprobs(model, prompts[2], c, 1.0),
                                   atol=2e-5, rtol=2e-5)


def test_a_discarded_engine_frees_its_c_matchers_and_tokenizer(tiny, monkeypatch):
    """The engine's C matchers (and the C tokenizer of its constraints) are freed when the engine and its guides go:
    a process that builds engines over and over (an evaluation each epoch) does not grow."""
    import gc
    import weakref

    from execrl.guided import native as guides_c

    model, tok, _, prompts = tiny
    while gc.collect():  # (other tests' engines first)
        pass
    lib, made, freed, tokenizers = guides_c.llg(), set(), set(), []
    new, free, free_tok = lib.llg_new_matcher, lib.llg_free_matcher, lib.llg_free_tokenizer
    monkeypatch.setattr(lib, "llg_new_matcher", lambda *a: made.add(m := new(*a)) or m)
    monkeypatch.setattr(lib, "llg_free_matcher", lambda m: freed.add(m) or free(m))
    monkeypatch.setattr(lib, "llg_free_tokenizer", lambda t: tokenizers.append(t) or free_tok(t))
    engine = RolloutEngine(model, tok, slots=4, max_len=128, sync_every=4)
    guide = engine.guides.get("regex", r"(yes|no), [a-z]{1,6}\.")
    for seed in (1, 2):  # (the second call reuses the first's matchers)
        out = engine.generate(prompts[:2], 3, 32, SamplingParams(temperature=1.0), guides=[guide] * 2, seeds=[seed, 3])
        assert all(re.fullmatch(r"(yes|no), [a-z]{1,6}\.", c.text) for g in out for c in g)
    assert made and not made & freed and not tokenizers
    alive, tokenizer = weakref.ref(engine), guides_c.native(guide).tokenizer
    del engine, guide, out
    while gc.collect():  # (the engine's cycles; its matchers' callback then lets its guides' cycles go)
        pass
    assert alive() is None, [type(r) for r in gc.get_referrers(alive())]
    assert made <= freed and tokenizer in tokenizers


def test_freeing_a_discarded_engines_matchers_inside_a_compile_trace_does_no_torch_op():
    """The garbage collector may free an engine while torch.compile traces another engine's step: the matchers'
    callback then runs under the trace's fake tensors, which took its torch ops and failed it (the trace failed in
    turn, and that step ran uncompiled)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from execrl.rollout.masks import SlotMasks, _free_matchers

    masks = SlotMasks(4, 100, torch.device("cpu"))
    with FakeTensorMode():
        _free_matchers(masks.__dict__)
    assert masks.matchers == [None] * 4


def test_an_unguided_batch_end_releases_its_slots_without_a_tensor_op():
    """The engine releases every slot whose sample ended; at an unguided batch's end (all of a GRPO step's samples
    at once, the GPU idle) that ran two tensor writes per slot, ~11 ms of a 0.5B step. A slot without a matcher
    now needs none; a guided slot's matcher is retired and its handle and hold flag cleared."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from execrl.rollout.masks import SlotMasks

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func)
            return func(*args, **(kwargs or {}))

    masks = SlotMasks(4, 100, torch.device("cpu"))
    entry = ("a guide", 7)  # (a stand-in: released, never given to the C library)
    masks.matchers[1], masks.handle[1], masks.hold_host[1] = entry, 7, True
    with Ops() as ops:
        masks.release([0, 2, 3])
    assert ops.seen == [] and masks.matchers[1] is entry
    masks.release([0, 1])
    assert masks.matchers == [None] * 4 and masks.retired == {1: entry}
    assert masks.handle.tolist() == [0] * 4 and not masks.hold_host.any()
    masks.retired.clear()  # (the finalizer would free the stand-in)


def test_greedy_and_unconstrained_neighbours(tiny):
    """Greedy keeps to the constraint too; a free request in the same call samples exactly what it samples alone."""
    model, tok, engine, prompts = tiny
    guide = engine.guides.get("regex", r"Move: [1-9]")
    greedy = engine.generate(prompts, 1, 32, SamplingParams(temperature=0.0), guides=[guide] * 3)
    assert all(re.fullmatch(r"Move: [1-9]", g[0].text) for g in greedy)
    params = SamplingParams(temperature=1.0)
    mixed = engine.generate(prompts, 3, 24, params, guides=[guide, None, None], seeds=[5, 6, 7])
    alone = engine.generate(prompts[1:], 3, 24, params, seeds=[6, 7])
    assert all(re.fullmatch(r"Move: [1-9]", c.text) for c in mixed[0])
    again = engine.generate(prompts, 3, 24, params, guides=[guide, None, None], seeds=[5, 6, 7])
    assert [[c.ids for c in g] for g in again] == [[c.ids for c in g] for g in mixed]
    assert [[c.ids for c in g] for g in mixed[1:]] == [[c.ids for c in g] for g in alone]
    assert all(c.guide is None for g in mixed[1:] for c in g)


def test_a_masked_sample_keeps_to_the_mask_and_its_distribution():
    torch.manual_seed(0)
    rows = 20000
    logits = (torch.randn(1, 50) * 2).repeat(rows, 1)
    keys = token_keys(torch.full((rows,), 3, dtype=torch.int32), torch.arange(rows))  # one request, 20000 tokens
    allowed = (torch.rand(1, 50) < 0.3).repeat(rows, 1)
    masked, lp = sample(logits, SamplingParams(temperature=1.0), keys, pack(allowed))
    assert allowed[torch.arange(rows), masked].all()
    ref = logits.masked_fill(~allowed, float("-inf")).log_softmax(-1)
    torch.testing.assert_close(lp, ref.gather(-1, masked[:, None])[:, 0])
    freq = torch.bincount(masked, minlength=50).float() / rows
    torch.testing.assert_close(freq, ref[0].exp(), atol=0.01, rtol=0)


def test_the_draw_stays_inside_the_allowed_tokens_at_its_extremes():
    """Found by a guided training run (when execrl drew by Gumbel-max): 24 bits of all ones made u round to 1.0. By
    inverse CDF, u at 1.0 would pass the row's whole sum: every draw, the extremes included, lands on an allowed
    token, a lone one always."""
    from execrl.rollout.sampling import inverse_cdf

    u = uniform(torch.tensor([0, 1, 2**23, 2**24 - 1]))
    assert (u > 0).all() and (u < 1).all()
    lone = torch.full((4, 70), float("-inf"))
    lone[:, 33] = 0.0
    assert (inverse_cdf(lone, u) == 33).all()
    some = torch.randn(4, 70, generator=torch.Generator().manual_seed(0)).masked_fill(torch.arange(70) > 40, float("-inf"))
    picked = inverse_cdf(some, u)
    assert (picked <= 40).all() and picked[0] == 0 and picked[3] == 40


def test_masked_logprobs_and_their_gradient_equal_a_dense_masked_log_softmax():
    torch.manual_seed(0)
    n, d, v = 12, 16, 70
    hidden, weight = torch.randn(n, d, requires_grad=True), torch.randn(v, d, requires_grad=True)
    allowed = torch.rand(n, v) < 0.3
    targets = torch.multinomial(allowed.float(), 1)[:, 0]
    packed = torch.zeros(n, 3, dtype=torch.int32)
    for i, j in allowed.nonzero().tolist():
        packed[i, j >> 5] |= (1 << (j & 31)) - (2**32 if (j & 31) == 31 else 0)
    assert torch.equal(unpack(packed, v), allowed) and torch.equal(pack(allowed), packed)
    logp, entropy = token_logprobs_from_hidden(hidden, weight, targets, 0.7, rows=5, allowed=packed)
    z = (hidden @ weight.T / 0.7).masked_fill(~allowed, float("-inf")).log_softmax(-1)
    ref = z.gather(-1, targets[:, None])[:, 0]
    torch.testing.assert_close(logp, ref)
    torch.testing.assert_close(entropy, -(z.exp() * z.nan_to_num(neginf=0.0)).sum(-1))
    g1 = torch.autograd.grad(logp.sum(), (hidden, weight))
    g2 = torch.autograd.grad(ref.sum(), (hidden, weight))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


def walk(guide, seed: int, most: int = 40) -> list[int]:
    """A random walk's tokens under the guide, by its C matcher (execrl.guided.native), to its end or `most` tokens."""
    import random

    from execrl.guided import native

    c, own, rng = native.llg(), native.native(guide), random.Random(seed)
    (m,), mask, ids = own.matchers(guide.text, 1), torch.empty(1, guide.words, dtype=torch.int32), []
    while not c.llg_matcher_is_stopped(m) and len(ids) < most:
        assert c.llg_matcher_compute_mask_into(m, mask.data_ptr(), guide.words * 4) == 0
        ids.append(rng.choice(unpack(mask, guide.guides.vocab)[0].nonzero()[:, 0].tolist()))
        assert c.llg_matcher_consume_token(m, ids[-1]) == 0
    own.recycle(guide.text, m)
    return ids


def test_an_added_token_that_is_no_special_token_is_its_text_to_the_engine_and_to_the_trainer():
    """(A hunt's find) Qwen's <think> and <tool_call> are added tokens not marked special. llguidance's Python binding
    read them as special, its C tokenizer (the engine's) as their text: the engine wrote <think> as its one token,
    and the trainer's masks refused it (a ConstraintError in build_batch, the step lost). Both sides now run the C
    matchers: the token is allowed where its text is, and the trainer's masks take what the engine sampled."""
    from tokenizers import AddedToken

    tok = build_tokenizer(corpus(), vocab_size=384)
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False)])
    think = tok.convert_tokens_to_ids("<think>")
    model = build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=0).eval()
    engine = RolloutEngine(model, tok, slots=4, max_len=64, sync_every=4)
    prompt = tok("Answer:", add_special_tokens=False)["input_ids"]
    for kind, value in (("grammar", 'start: "<think>" /[a-z]+/'), ("regex", "[^`]{1,12}")):
        guide = engine.guides.get(kind, value)
        assert unpack(guide.masks([think])[:1], engine.guides.vocab)[0, think]  # (its text is allowed first)
        outs = engine.generate([prompt], 4, 12, SamplingParams(temperature=1.0), guides=[guide], seeds=[1])[0]
        for out in outs:
            assert guide.masks(out.ids).shape == (len(out.ids), guide.words)
        assert kind == "regex" or all(out.ids[0] == think and out.text.startswith("<think>") for out in outs)


@pytest.mark.parametrize("kind,value", [("regex", r"```python\n([^`]|`[^`]|``[^`])*\n```"), ("json_schema", SCHEMA),
                                        ("grammar", LARK)])
def test_each_kind_gets_its_slices_and_slices_do_not_change_a_mask(tiny, kind, value):
    """Slices only spare llguidance walking tokens it allows whole: a JSON schema's guide takes llguidance's string
    slices and the code ones, a regex's or a grammar's the code ones only, and along random walks its masks are those
    of a guide built with the other kind's slices (and with none)."""
    import llguidance

    from execrl.guided import CODE_SLICES, Guides

    _, tok, engine, _ = tiny
    guide = engine.guides.get(kind, value)
    strings = llguidance.LLTokenizer.general_slices()
    assert list(guide.slices) == (strings + CODE_SLICES if kind == "json_schema" else CODE_SLICES)
    others = [Guides(tok, engine.guides.vocab, engine.guides.eos_ids, slices=s).get(kind, value)
              for s in ([], CODE_SLICES if kind == "json_schema" else strings + CODE_SLICES)]
    assert all(o.slices != guide.slices for o in others)
    for seed in range(6):
        ids = walk(guide, seed)
        for other in others:
            assert torch.equal(other.masks(ids), guide.masks(ids))


def test_a_constraint_that_does_not_compile_is_refused_with_its_reason(tiny):
    _, _, engine, _ = tiny
    with pytest.raises(ConstraintError, match="regex"):
        engine.guides.get("regex", "(unclosed")
    with pytest.raises(ConstraintError, match="grammar"):
        engine.guides.get("grammar", "start: undefined_rule")


def test_a_constraint_that_spells_a_special_token_or_admits_no_text_is_refused_and_schemas_keep_their_order(
        tiny, tmp_path):
    """A hunt's finds: a regex spelling out <|im_end|> crashed mid-generation (the mask offered the token, the matcher
    refused it) or ended the answer there; an empty character class and a schema of no number compiled, then stopped
    the run at the row's first sampling (a row's now skipped as it loads); and a JSON schema's guide was cached by
    its sorted keys, so {reasoning, answer} was served {answer, reasoning}'s grammar."""
    from execrl.tasks.generic import load
    from execrl.tasks.problem import RowReport

    _, tok, engine, prompts = tiny
    for kind, value in (("regex", r"say <\|im_end\|>"), ("grammar", 'start: "<|im_start|>x"'),
                        ("json_schema", {"const": "<|endoftext|>"})):
        with pytest.raises(ConstraintError, match="spells out '<\\|im_(end|start)\\|>'|spells out '<\\|endoftext"):
            engine.guides.get(kind, value)
    assert engine.guides.get("grammar", 'start: "x" <|im_end|>')  # (the token named itself: fine)
    assert engine.guides.get("json_schema", {"type": "string", "maxLength": 3, "description": "no <|im_end|>"})
    with pytest.raises(ConstraintError, match="spells out '<\\|im_end"):  # (a pattern's regex, escaped twice)
        engine.guides.get("json_schema", {"type": "string", "pattern": "^say <\\|im_end\\|>$"})
    for kind, value in (("regex", "[^\\x00-\\U0010FFFF]"), ("json_schema", {"type": "integer", "minimum": 5,
                                                                           "maximum": 1})):
        with pytest.raises(ConstraintError, match="admits no text|does not compile"):
            engine.guides.get(kind, value)
    rows = [{"id": "ok", "prompt": "2+2?", "answer": "4", "guided_decoding": {"regex": "[0-9]+"}},
            {"id": "named", "prompt": "2+2?", "answer": "4", "guided_decoding": {"grammar": "start: /[0-9]+/ <|im_end|>"}},
            {"id": "empty", "prompt": "2+2?", "answer": "4", "guided_decoding": {"regex": "[^\\x00-\\U0010FFFF]"}}]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    report = RowReport(str(tmp_path / "rows.jsonl"))
    assert [p.id for p in load(tmp_path / "rows.jsonl", None, report)] == ["ok", "named"]
    assert "admits no text" in next(iter(report.reasons))
    props = {"answer": {"type": "integer"}, "reasoning": {"type": "string", "maxLength": 4}}
    first = {"type": "object", "properties": props, "required": ["answer", "reasoning"]}
    second = {**first, "properties": dict(reversed(props.items()))}
    out = engine.generate(prompts[:1], 2, 40, SamplingParams(temperature=1.0), seeds=[1],
                          guides=[engine.guides.get("json_schema", first)])
    out += engine.generate(prompts[:1], 2, 40, SamplingParams(temperature=1.0), seeds=[1],
                           guides=[engine.guides.get("json_schema", second)])
    assert [c.text.startswith('{"answer"') for g in out for c in g] == [True, True, False, False]


def test_a_token_outside_the_constraint_is_an_error_when_masks_are_recomputed(tiny):
    _, tok, engine, _ = tiny
    guide = engine.guides.get("regex", r"Move: [1-9]")
    with pytest.raises(ConstraintError, match="outside"):
        guide.masks(tok("Move: x", add_special_tokens=False)["input_ids"])


@pytest.mark.gpu
def test_on_a_gpu_with_graphs_every_sample_keeps_to_its_constraint(tiny):
    """The GPU path: CUDA graphs, the masks copied on their own stream beside the forward, the fused kernel reading
    them; each sample keeps to its constraint (the engine raises on a token its matcher refuses) and its logprobs are
    the trainer's, computed on the CPU under the recomputed masks."""
    import copy

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model, tok, _, prompts = tiny
    gpu = RolloutEngine(copy.deepcopy(model).to("cuda"), tok, slots=6, max_len=256, sync_every=4, cuda_graphs=True)
    for kind, value, check in [("grammar", LARK, lambda t: re.fullmatch(
            r"<think>[^<]*</think>\n```python\n[^`]*\n```", t)), ("json_schema", SCHEMA, json.loads)]:
        guide = gpu.guides.get(kind, value)
        out = gpu.generate(prompts, 8, 160, SamplingParams(temperature=1.0), guides=[guide] * 3, seeds=[1, 2, 3])
        for prompt, group in zip(prompts, out):
            for c in group:
                assert check(c.text), c.text
                torch.testing.assert_close(torch.tensor(c.logprobs), trainer_logprobs(model, prompt, c, 1.0),
                                           atol=2e-3, rtol=2e-3)
