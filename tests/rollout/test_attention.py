"""The Triton decode-attention kernel against scaled_dot_product_attention (GPU only: `pytest -m gpu`)."""

import pytest
import torch

from execrl.rollout.attention import decode_attention, kernel_supported, reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("slots,kv_heads,group,dim,window", [(256, 2, 7, 64, 384), (64, 2, 6, 128, 200),
                                                              (5, 4, 1, 64, 64), (3, 1, 16, 128, 1000)])
def test_kernel_matches_masked_sdpa(slots, kv_heads, group, dim, window):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(slots, kv_heads, group, dim, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(slots, kv_heads, window + 16, dim, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(2))
    pos = torch.randint(0, window, (slots,), device="cuda", generator=g)
    pos[0], pos[-1] = 0, window - 1  # one key, and the whole window
    assert kernel_supported(q)
    for sliding in (None, 1, 37, 70):  # (a sliding window: keys of positions in (pos - sliding, pos])
        got = decode_attention(q, k, v, pos, window, dim**-0.5, sliding)
        want = reference(q.float(), k.float(), v.float(), pos, window, dim**-0.5, sliding)
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("slots,kv_heads,group,dim,window", [(128, 2, 6, 128, 4096), (3, 1, 16, 128, 2000),
                                                              (8, 4, 1, 256, 2048), (16, 2, 7, 64, 16384)])
@pytest.mark.parametrize("splits", [None, 2, 5, 16])
def test_split_positions_combine_to_masked_sdpa(slots, kv_heads, group, dim, window, splits, monkeypatch):
    """Each slot's positions split over several programs (None: as the engine picks, which splits only the last
    shape), some of them empty for a slot with few positions; the combined result is still the attention over all."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from execrl.rollout import attention

    if splits is not None:
        monkeypatch.setattr(attention, "splits_for", lambda *_: splits)
    elif window < attention.SPLIT_FROM:
        pytest.skip("the engine does not split this shape")
    assert attention.splits_for(slots, kv_heads, window) > 1
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(slots, kv_heads, group, dim, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(slots, kv_heads, window + 16, dim, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(2))
    pos = torch.randint(0, window, (slots,), device="cuda", generator=g)
    pos[0], pos[-1] = 0, window - 1
    for sliding in (None, 1, 300):
        got = decode_attention(q, k, v, pos, window, dim**-0.5, sliding)
        want = reference(q.float(), k.float(), v.float(), pos, window, dim**-0.5, sliding)
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


def test_a_batchs_tail_split_over_programs_matches_masked_sdpa():
    """The tail of a batch: most slots ended (they read position 0), a few hold long samples; attention split by
    position (tail) gives the same result as one program per slot."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from execrl.rollout.attention import tail_splits

    slots, window = 128, 4096
    tail = tail_splits(8, 2, window)
    assert tail > 1
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(slots, 2, 6, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(slots, 2, window, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    pos = torch.zeros(slots, dtype=torch.long, device="cuda")
    pos[::16] = torch.randint(1000, window, (8,), device="cuda", generator=g)
    got = decode_attention(q, k, v, pos, window, 128**-0.5, None, tail)
    torch.testing.assert_close(got, decode_attention(q, k, v, pos, window, 128**-0.5), atol=2e-2, rtol=2e-2)
    want = reference(q.float(), k.float(), v.float(), pos, window, 128**-0.5)
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("tail", [1, 8])
def test_rows_over_some_cache_slots_read_those_slots(tail):
    """A step over some of the slots (the engine's tail on fewer rows): row r reads cache slot slots[r], one program
    per row or its positions split (tail), and gets what the whole batch's kernel gives that slot."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    slots, window = 128, 2048
    g = torch.Generator(device="cuda").manual_seed(0)
    k, v = (torch.randn(slots, 2, window, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    q = torch.randn(slots, 2, 6, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    pos = torch.randint(0, window, (slots,), device="cuda", generator=g)
    rows = torch.randperm(slots, device="cuda", generator=g)[:32]  # [R] distinct slots, in no order
    every = decode_attention(q, k, v, pos, window, 128**-0.5)
    got = decode_attention(q[rows], k, v, pos[rows], window, 128**-0.5, None, tail, rows)
    torch.testing.assert_close(got, every[rows], atol=2e-2, rtol=2e-2)
    want = reference(q[rows].float(), k[rows].float(), v[rows].float(), pos[rows], window, 128**-0.5)
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("rotary,tail,mapped", [(128, 1, False), (96, 1, True), (128, 8, True), (64, 4, False)])
def test_queries_rotated_in_the_kernel_equal_queries_rotated_first(rotary, tail, mapped):
    """The decode step hands the kernel its queries unrotated, as a strided view of the joined q/k/v projection, with
    each row's cos/sin (rope): the same attention as queries rotated beforehand (a partial rotary of 96 of 128 dims
    included, and with the positions split, and over some of the slots)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from execrl.rollout.models.layers import rotate

    slots, window = 64, 2048
    g = torch.Generator(device="cuda").manual_seed(0)
    k, v = (torch.randn(slots, 2, window, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    rows = torch.randperm(slots, device="cuda", generator=g)[:16] if mapped else None
    n = slots if rows is None else len(rows)
    qkv = torch.randn(n, 1, (12 + 4) * 128, device="cuda", dtype=torch.bfloat16, generator=g)
    q = qkv[:, 0, :12 * 128].view(n, 2, 6, 128)  # (not contiguous: the joined projection's rows)
    pos = torch.randint(0, window, (n,), device="cuda", generator=g)
    angles = torch.rand(window, rotary, device="cuda", generator=g) * 6.3
    cos, sin = angles.cos()[pos].bfloat16(), angles.sin()[pos].bfloat16()
    got = decode_attention(q, k, v, pos, window, 128**-0.5, None, tail, rows, rope=(cos, sin))
    turned = rotate(q, cos[:, None, None], sin[:, None, None])
    torch.testing.assert_close(got, decode_attention(turned, k, v, pos, window, 128**-0.5, None, tail, rows),
                               atol=1e-2, rtol=1e-2)
    at = slice(None) if rows is None else rows
    want = reference(turned.float(), k[at].float(), v[at].float(), pos, window, 128**-0.5)
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("rotary,tail,mapped", [(128, 1, False), (96, 1, True), (128, 4, True), (64, 4, False)])
def test_keys_and_values_written_by_the_kernel_equal_writing_them_first(rotary, tail, mapped, monkeypatch):
    """The decode step hands the kernel the rows' new keys (unrotated) and values as views of the joined projection:
    the kernel writes them into the rows' cache slots at their positions, the keys rotated, then attends, the new
    position included. The same caches and attention as the torch ops that write first (rows whose sample ended read
    position 0 only and still write; with the positions split, and over some of the slots). On a CPU with
    TRITON_INTERPRET=1 the kernel runs in Triton's interpreter, in float16 (its bf16 dot products are not bf16's)."""
    import os

    from execrl.rollout import attention
    from execrl.rollout.models.layers import rotate

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        if attention.triton is None or os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("needs a CUDA device, or Triton's interpreter (TRITON_INTERPRET=1)")
        monkeypatch.setattr(attention, "kernel_supported", lambda q: True)
    slots, window = (64, 2048) if device == "cuda" else (8, 256)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    g = torch.Generator(device=device).manual_seed(0)
    k, v = (torch.randn(slots, 2, window, 128, device=device, dtype=dtype, generator=g) for _ in range(2))
    rows = torch.randperm(slots, device=device, generator=g)[:slots // 4] if mapped else None
    n = slots if rows is None else len(rows)
    qkv = torch.randn(n, 1, (12 + 2 + 2) * 128, device=device, dtype=dtype, generator=g)
    q = qkv[:, 0, :12 * 128].view(n, 2, 6, 128)  # (views of the joined projection's rows, as the decoder's)
    key, value = qkv[:, 0, 12 * 128:14 * 128].view(n, 2, 128), qkv[:, 0, 14 * 128:].view(n, 2, 128)
    pos = torch.randint(1, window, (n,), device=device, generator=g)
    reads = torch.where(torch.arange(n, device=device) % 3 == 0, 0, pos)  # every third row's sample has ended
    angles = torch.rand(window, rotary, device=device, generator=g) * 6.3
    cos, sin = angles.cos()[pos].to(dtype), angles.sin()[pos].to(dtype)
    k2, v2 = k.clone(), v.clone()
    got = decode_attention(q, k, v, reads, window, 128**-0.5, None, tail, rows, rope=(cos, sin), new=(key, value, pos))
    want = attention._torch_path(q, k2, v2, reads, rows, cos, sin, window, None, 128**-0.5, (key, value, pos))
    assert torch.equal(v, v2)
    at = torch.arange(n, device=device) if rows is None else rows
    written = rotate(key[:, :, None].float(), cos[:, None, None].float(), sin[:, None, None].float())[:, :, 0]
    torch.testing.assert_close(k[at, :, pos].float(), written, atol=2e-2, rtol=1e-2)  # one bf16 rounding apart
    untouched = torch.ones_like(k, dtype=torch.bool)
    untouched[at, :, pos] = False
    assert torch.equal(k[untouched], k2[untouched])
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("group,dim,rotary,mapped,tail", [(6, 128, 128, False, 1), (7, 64, 64, False, 1),
                                                         (2, 128, 96, False, 1), (6, 128, 128, True, 1),
                                                         (7, 64, 64, True, 4), (6, 128, 128, False, 8)])
def test_a_units_prompt_read_once_equals_each_row_reading_its_own(group, dim, rotary, mapped, tail):
    """decode_attention's `shared` (the engine's units: rows that hold one prompt): each unit's prompt read once for
    all its rows (_prefix_kernel, its positions split in runs) and merged into each row's walk of its own positions;
    the same attention, new keys written and queries rotated in the kernel, as every row reading its own copy. Units
    of several lengths (1 position, less than a block, several blocks), a full unit, a row that ended (reads position
    0; its output is not used), and rows in no unit; over every slot or some (`slots`: a batch's tail), each row's
    positions in one program or split over several (`tail`)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from execrl.rollout.attention import unit_members

    slots, window, kv = 40, 1200, 2
    members = min(8, unit_members(kv * group, kv))
    g = torch.Generator(device="cuda").manual_seed(0)
    k, v = (torch.randn(slots, kv, window, dim, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    cache_of = torch.randperm(slots)[:30] if mapped else torch.arange(slots)  # each row's cache slot
    n = len(cache_of)
    units = torch.zeros(slots // 2, members + 2, dtype=torch.int32)
    rows = torch.full((slots, 3), -1, dtype=torch.int32)
    pos = torch.randint(0, window - 1, (n,))
    chosen = [(1, list(range(0, 3))), (40, list(range(3, 9))), (300, list(range(9, 9 + members))), (513, [21, 23, 26])]
    for u, (length, unit) in enumerate(chosen):
        source = int(cache_of[unit[-1]])
        units[u, :2] = torch.tensor([length, source])
        units[u, 2:2 + len(unit)] = torch.tensor(unit, dtype=torch.int32)
        units[u, 2 + len(unit):] = -1
        for j, r in enumerate(unit):
            rows[r] = torch.tensor([u, j, length])
            c = int(cache_of[r])
            k[c, :, :length], v[c, :, :length] = k[source, :, :length], v[source, :, :length]  # one prompt's copies
            pos[r] = length + torch.randint(0, window - 1 - length, (1,)).item()
    pos[4] = 0  # (an ended sample: reads position 0 only)
    pos = pos.cuda()
    qkv = torch.randn(n, 1, (group + 2) * kv * dim, device="cuda", dtype=torch.bfloat16, generator=g)
    q = qkv[:, 0, :kv * group * dim].view(n, kv, group, dim)
    new = (qkv[:, 0, kv * group * dim:(kv * group + kv) * dim].view(n, kv, dim),
           qkv[:, 0, (kv * group + kv) * dim:].view(n, kv, dim), pos)
    angles = torch.rand(window, rotary, device="cuda", generator=g) * 6.3
    rope = (angles.cos()[pos].bfloat16(), angles.sin()[pos].bfloat16())
    at = cache_of.cuda() if mapped else None
    k2, v2 = k.clone(), v.clone()
    got = decode_attention(q, k, v, pos, window, dim**-0.5, None, tail, at, rope=rope, new=new,
                           shared=(units.cuda(), rows.cuda()))
    want = decode_attention(q, k2, v2, pos, window, dim**-0.5, None, tail, at, rope=rope, new=new)
    assert torch.equal(k, k2) and torch.equal(v, v2)  # (the new keys and values written alike)
    live = torch.arange(n) != 4
    torch.testing.assert_close(got[live].float(), want[live].float(), atol=1e-2, rtol=1e-2)
    assert got.isfinite().all()
