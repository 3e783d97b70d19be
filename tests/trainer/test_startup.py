"""The start-up line: what a run compiled and captured before its steps ran at speed, from torch's own counters."""

import re

import torch

from execrl.trainer import startup

ZERO = {"seconds": 0.0, "graphs": 0, "hits": 0, "misses": 0}


def test_nothing_compiled_nothing_said():
    assert startup.first_step_line(2.0, 1.5, ZERO, {"graphs": 0, "seconds": 0.0}) is None


def test_the_line_names_what_compiled_how_long_and_the_cache_a_second_start_reuses():
    line = startup.first_step_line(8.4, 15.2, {"seconds": 11.8, "graphs": 12, "hits": 17, "misses": 0},
                                   {"graphs": 2, "seconds": 0.4})
    assert line.startswith("start-up: loading 8.4 s, the first step 15.2 s; this run compiled 12 graphs in 11.8 s")
    assert "17 from the compile cache, 0 new, in " + startup.cache_dir() in line
    assert "2 CUDA graphs captured in 0.40 s" in line


def test_a_compilation_counts_in_what_a_run_did_since_it_began():
    """torch's counters (internal names that a torch release may move): a real compilation on this machine shows
    as a graph and seconds in the difference from before it."""
    before = startup.so_far()

    @torch.compile
    def f(x):
        return torch.sin(x) * 2 + 1

    f(torch.randn(8))
    after = startup.so_far()
    assert after["compiled"]["graphs"] - before["compiled"]["graphs"] >= 1
    assert after["compiled"]["seconds"] > before["compiled"]["seconds"]
    assert after["compiled"]["hits"] + after["compiled"]["misses"] > before["compiled"]["hits"] + \
        before["compiled"]["misses"]
    assert after["captured"] == before["captured"]  # (no CUDA graph on a CPU)


def graphs() -> int:
    return startup.compiled_so_far()["graphs"]


def test_the_decode_step_compiles_once_for_every_attention_window():
    """engine.compiled: the window is a symbol from the first compilation (it was specialized to the first window
    and compiled again at the second: one more graph on every start)."""
    from execrl.rollout.engine import compiled

    x = torch.randn(4, 1024, generator=torch.Generator().manual_seed(0))

    def step(window: int, scale: float) -> torch.Tensor:
        return (x[:, :window] * scale).sum(-1)

    fn = compiled(step)
    before = graphs()
    for w in (64, 128, 256, 512):
        assert torch.allclose(fn(w, 2.0), step(w, 2.0), rtol=1e-4, atol=1e-4)  # (sums in another order)
    assert graphs() - before == 1


def test_the_trainers_layers_compile_once_per_mask_kind_over_micro_batch_shapes():
    """policy.compile_layers: generic in batch and length from the first compilation; one graph with a padding mask
    and one without (transformers passes none where nothing is padded), for micro-batches of other sizes and
    lengths, forward and backward, with the eager layers' numbers."""
    from torch._dynamo.utils import counters

    from execrl.models import build_tiny_model, tiny_tokenizer
    from execrl.trainer.policy import compile_layers

    tok = tiny_tokenizer("builtin:tiny-coder")
    eager, model = build_tiny_model(tok, hidden=32, layers=1), build_tiny_model(tok, hidden=32, layers=1)
    compile_layers(model, None)
    before, aot_before = graphs(), dict(counters["aot_autograd"])
    for b, t, padded in ((4, 37, True), (3, 52, True), (4, 41, False), (2, 60, False), (4, 70, True)):
        ids = torch.randint(3, 200, (b, t))
        mask = torch.ones(b, t, dtype=torch.long)
        if padded:
            mask[0, t - 5:] = 0
        for m in (eager, model):
            m.zero_grad()
            m(input_ids=ids, attention_mask=mask).logits.float().logsumexp(-1).mul(mask).sum().backward()
        got, want = model.model.layers[0].mlp.up_proj.weight.grad, eager.model.layers[0].mlp.up_proj.weight.grad
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-3)
    assert graphs() - before == 2
    # each graph traced once: a float compiled as a symbol (the layer's scale, its norms' eps) made dynamo hand a
    # graph to AOTAutograd, drop it and trace again with the float specialized (compiling.compile_settings)
    aot = counters["aot_autograd"]
    assert aot["total"] - aot_before.get("total", 0) == aot["ok"] - aot_before.get("ok", 0) == 2


def test_prefills_layer_compiles_once_for_every_batch_and_width_and_writes_the_caches_in_place():
    """decoder.compile_prefill: one layer's code, generic in the prompts' count and width and the samples' count from
    the first compilation (one graph over three prefills of other shapes, a prompt's samples in several slots), the
    same logits and caches as eager; the caches written where they are (the write is an opaque op that declares them
    mutated: no copy of a cache in the generated code), and the model's dimensions constants in it (symbolic ones
    made prefill's kernels 2-6x slower on a GPU: bench/README.md)."""
    from torch._inductor.utils import run_and_get_code

    from execrl.models import build_tiny_model, tiny_tokenizer
    from execrl.rollout.engine import compiled, make_decoder

    tok = tiny_tokenizer("builtin:tiny-coder")
    model = build_tiny_model(tok, hidden=32, layers=2).eval()
    eager, fused = make_decoder(model, 8, 64, False), make_decoder(model, 8, 64, False)
    fused.compile_prefill(compiled)
    before = graphs()
    code = None
    for p, t in ((2, 9), (3, 17), (4, 5)):
        tokens = torch.randint(3, 200, (p, t))
        args = (torch.full((p,), t), torch.arange(2 * p) % 8, torch.arange(2 * p) // 2)  # two slots per prompt
        with torch.no_grad():
            if code is None:  # (the first call: the compilation's code)
                got, code = run_and_get_code(fused.prefill, tokens, *args)
                code = "\n".join(code)
            else:
                got = fused.prefill(tokens, *args)
            torch.testing.assert_close(got, eager.prefill(tokens, *args))
        for mine, theirs in zip(fused.k + fused.v, eager.k + eager.v):
            torch.testing.assert_close(mine, theirs)
    assert graphs() - before == 1
    assert "torch.ops.execrl.write_prompts.default(" in code and "copy_" not in code and "clone" not in code
    assert re.search(r"\(s\d+\*s\d+, 32\)", code)  # the GEMMs' rows prompts x width, symbols; hidden size 32, a constant
