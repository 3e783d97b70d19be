"""A group's prompt forwarded once in training, not once per sample.

The G samples of a GRPO group begin with the same prompt. Scored row by row, every layer runs that
prompt G times; here a micro-batch of whole groups (or of one group's samples) becomes one packed row
per group:

    [prompt | completion 1 | completion 2 | ... | completion k]   each completion's positions continuing
                                                                  the prompt's

and attention, the one place where the samples meet, gathers for each sample the sequence [prompt,
its completion], runs transformers' SDPA on those sequences with the causal mask alone (sorted by
length, a few buckets of like lengths, each right-padded to its longest) and scatters the outputs
back: the prompt's from the group's first sample. Every other op works on the packed tokens, so the
GEMMs, norms and activations see each prompt token once. The logprobs and gradients are those of the
row-by-row forward up to rounding (tests/trainer/test_shared_prompt.py).

It applies where the model's attention is transformers' SDPA with the causal mask alone (no sliding
window, soft-capping or sinks) and its head has no bias or soft-capping; elsewhere, and where packing
saves no tokens, rows go as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from execrl.models import DROPOUTS
from execrl.rollout.generic import EXTRAS, sdpa_configs
from execrl.rollout.models import has_family
from execrl.rollout.models.base import head_soft_cap, rotary_bound
from execrl.rollout.models.layers import sliding_window
from execrl.transfer import to_device

BUCKETS = 4  # attention over the samples' sequences sorted by length, in this many SDPA calls at most


@dataclass
class Packed:
    """One micro-batch's rows, k samples of each of G groups, packed: each group's row its prompt,
    then its samples' completions back to back (Lp tokens: the longest group's). Attention runs over
    the samples' sequences [prompt, completion] sorted by length, in buckets of like lengths, each
    right-padded to its longest (S_i)."""
    ids: torch.Tensor  # [G, Lp]
    positions: torch.Tensor  # [G, Lp] each token's position in its own sample
    gather: list[torch.Tensor]  # per bucket [n_i, S_i]: its sequences' tokens, as flat indices into [G*Lp]
    scatter: torch.Tensor  # [G*Lp] the attention output of each packed token: a flat index into the buckets'
    # outputs one after the other ([sum of n_i x S_i])
    source: torch.Tensor  # [b, W-1] the packed token whose hidden state predicts row r's token t+1, flat into [G*Lp]

    def to(self, device) -> Packed:
        """On `device`, copied without the host waiting for the GPU's queued work (transfer.to_device)."""
        def move(t: torch.Tensor) -> torch.Tensor:
            return to_device(t, device)
        return Packed(move(self.ids), move(self.positions), [move(t) for t in self.gather], move(self.scatter),
                      move(self.source))


def one_prompt(ids: torch.Tensor, prompts: torch.Tensor, k: int) -> bool:
    """Whether rows ids [b, W] come in groups of k consecutive rows (k >= 2), each group's rows
    beginning with one prompt: the same `prompts` [b] tokens (self-play's seats, or turns an
    opponent began, do not)."""
    b, w = ids.shape
    if k < 2 or b == 0 or b % k:  # (a rank may hold no samples: more GPUs than groups)
        return False
    grouped = prompts.view(-1, k)  # [G, k]
    if not bool((grouped == grouped[:, :1]).all()):
        return False
    in_prompt = (torch.arange(w)[None] < prompts[:, None]).view(-1, k, w)  # [G, k, W]
    rows = ids.view(-1, k, w)
    return bool(((rows == rows[:, :1]) | ~in_prompt).all())


def keeps_groups(sequences: int, k: int) -> bool:
    """Whether micro-batches of `sequences` rows can each hold whole groups of k, or part of one."""
    return sequences % k == 0 or k % sequences == 0


def pack(ids: torch.Tensor, lengths: torch.Tensor, prompts: torch.Tensor, k: int) -> Packed | None:
    """The packed form of right-padded rows ids [b, W] (each of `lengths` [b] tokens, its prompt the
    first `prompts` [b]), where each k consecutive rows share their prompt; None where they do not, or
    where packing saves no tokens."""
    b, w = ids.shape
    if not one_prompt(ids, prompts, k):
        return None
    g = b // k
    first = prompts.view(g, k)[:, 0]  # [G]
    done = lengths - prompts  # [b] each completion's tokens
    ends = first[:, None] + done.view(g, k).cumsum(1)  # [G, k] where each completion ends in its group's row
    lp, c, p = int(ends[:, -1].max()), int(done.max()), int(first.max())
    s = p + c  # the longest sequence
    if c < 1 or g * lp >= b * w:
        return None
    rows = torch.arange(b)
    base = (rows // k) * lp  # [b] each row's packed row, flat
    slot = base + (ends.view(-1) - done)  # [b] the flat start of each row's completion

    # Every write below goes through whole [G, P] / [b, C] index grids, their unused entries sent to one spare
    # element past the end (n), dropped after: boolean-mask indexing finds the same entries with a nonzero()
    # per mask, a third of this function's host time (5.9 -> 4.0 ms for 128 x 384 tokens on a 2-core machine).
    n = g * lp
    head = torch.arange(g) * k  # [G] each group's first row
    x = torch.arange(p)[None]  # [1, P]
    at = torch.where(x < first[:, None], (torch.arange(g) * lp)[:, None] + x, n)  # [G, P] the prompts' flat places
    u = torch.arange(c)[None]  # [1, C]
    dest = torch.where(u < done[:, None], slot[:, None] + u, n)  # [b, C] the completions' flat places
    flat_ids = torch.zeros(n + 1, dtype=ids.dtype)
    flat_pos = torch.zeros(n + 1, dtype=torch.long)
    flat_ids[at] = ids[head, :p]
    flat_pos[at] = x.expand(g, -1)
    flat_ids[dest] = ids.gather(1, (prompts[:, None] + u).clamp(max=w - 1))
    flat_pos[dest] = prompts[:, None] + u
    flat_ids, flat_pos = flat_ids[:n], flat_pos[:n]

    sq = torch.arange(s)[None]  # [1, S]
    last = slot + done - 1  # [b] each sequence's last token (the prompt's, where the completion is empty)
    gather = torch.where(sq < prompts[:, None], base[:, None] + sq,
                         torch.minimum(slot[:, None] + sq - prompts[:, None], last[:, None]))  # [b, S]
    scatter = torch.cat([(head * s)[:, None].expand(g, lp).reshape(-1) + s - 1, torch.zeros(1, dtype=torch.long)])
    # [G*Lp (+1 spare)] padding: any output
    scatter[at] = ((head * s)[:, None] + x).expand(g, -1)  # the prompt: the first sample's
    scatter[dest] = rows[:, None] * s + prompts[:, None] + u
    scatter = scatter[:n]
    tw = torch.arange(w - 1)[None]  # [1, W-1]
    source = torch.where(tw < prompts[:, None], base[:, None] + tw,
                         torch.minimum(slot[:, None] + tw - prompts[:, None], last[:, None]))  # [b, W-1]
    gather, scatter = bucketed(gather, scatter, lengths, s)
    return Packed(flat_ids.view(g, lp), flat_pos.view(g, lp), gather, scatter, source)


def bucketed(gather: torch.Tensor, scatter: torch.Tensor, lengths: torch.Tensor, s: int
             ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The sequences (gather [b, S], each of `lengths` [b] tokens) sorted by length and split into
    BUCKETS runs of like lengths, each padded to its own longest rather than the micro-batch's (real
    lengths vary 10x within a group); one run where that saves attention less than a quarter of its
    work (each SDPA call costs). Returns each run's gather [n_i, S_i], and `scatter` (flat indices
    into [b*S]) as flat indices into the runs' outputs one after the other."""
    b = len(lengths)
    order = torch.sort(lengths, stable=True).indices
    runs = list(torch.tensor_split(order, BUCKETS)) if b >= BUCKETS else [order]
    work = sum(len(run) * int(lengths[run].max()) ** 2 for run in runs)  # attention's query-key pairs, x2
    if b * int(lengths.max()) ** 2 <= 1.25 * work:
        runs = [order]  # (1 or BUCKETS runs, no other count: each is one more compiled version of every layer)
    where = torch.zeros(b, dtype=torch.long)  # each sequence's first output in the runs' outputs
    offset = 0
    for run in runs:
        width = int(lengths[run].max())
        where[run] = offset + torch.arange(len(run)) * width
        offset += len(run) * width
    row, at = scatter // s, scatter % s
    return [gather[run, :int(lengths[run].max())] for run in runs], where[row] + torch.minimum(at, lengths[row] - 1)


def shared_prompt_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                            scaling: float | None = None, execrl_gather=None, execrl_scatter=None, **kwargs):
    """transformers' attention interface over packed rows: query [G, Hq, Lp, D], key and value [G,
    Hkv, Lp, D] -> [G, Lp, Hq, Dv]."""
    extra = [name for name in (*EXTRAS, "sliding_window") if kwargs.get(name) is not None]
    if extra or not getattr(module, "is_causal", True) or execrl_gather is None:
        raise ValueError(f"this model's attention ({', '.join(extra) or 'not causal'}) is not the causal SDPA "
                         "that a shared prompt's packed rows need: set policy.shared_prompts=false")
    g, lp, hq = query.shape[0], query.shape[2], query.shape[1]
    q, k, v = (x.transpose(1, 2).reshape(g * lp, x.shape[1], x.shape[3]) for x in (query, key, value))  # [G*Lp, H, D]
    outs = []
    for at in execrl_gather:  # [n, S] each bucket's sequences, right-padded
        out, _ = sdpa_attention_forward(module, *(x[at].transpose(1, 2) for x in (q, k, v)), None, dropout=dropout,
                                        scaling=scaling, is_causal=True)  # [n, S, Hq, Dv]
        outs.append(out.reshape(-1, hq, out.shape[3]))
    return torch.cat(outs)[execrl_scatter].view(g, lp, hq, -1), None


SDPA = getattr(ALL_ATTENTION_FUNCTIONS["sdpa"], "sdpa", ALL_ATTENTION_FUNCTIONS["sdpa"])  # transformers' own


def sdpa_or_packed(module, query, key, value, attention_mask, *args, execrl_gather=None, execrl_scatter=None,
                   **kwargs):
    """transformers' SDPA, or over packed rows where the forward was given their layout. Registered
    as "sdpa" itself rather than under a name of its own that a pass would switch to: activation
    checkpointing recomputes a layer's forward in the backward, after any switch is undone, with the
    same arguments, and this sees them there too."""
    if execrl_gather is None:
        return SDPA(module, query, key, value, attention_mask, *args, **kwargs)
    return shared_prompt_attention(module, query, key, value, attention_mask, *args, execrl_gather=execrl_gather,
                                   execrl_scatter=execrl_scatter, **kwargs)


sdpa_or_packed.sdpa = SDPA  # (what it wraps: a second import of this module wraps that, not itself)
AttentionInterface.register("sdpa", sdpa_or_packed)


def shareable(model) -> bool:
    """Whether packed rows give this model's logprobs: a family whose layers execrl's engine knows
    one by one (rollout/models/: attention through transformers' attention functions, nothing else
    mixing positions, where a family of the generic path may have its own SDPA call, a convolution
    or a recurrent state that would run across the packed samples), causal SDPA attention in every
    layer, no sliding window, no attention or final soft-capping, a head without a bias, no
    dropout (the samples would share the prompt's dropout mask), and no rotary whose frequencies
    depend on the sequence's length (longrope, dynamic NTK: a pack's samples would take the
    longest's)."""
    cfg = model.config
    configs = sdpa_configs(cfg)
    head = model.get_output_embeddings()
    return (has_family(model) and cfg in configs and len(configs) == 1
            and getattr(head, "bias", None) is None
            and head_soft_cap(cfg) is None
            and getattr(cfg, "attn_logit_softcapping", None) is None
            and not any(getattr(cfg, name, 0) or 0 for name in DROPOUTS)
            and all(sliding_window(cfg, i) is None for i in range(cfg.num_hidden_layers))
            and rotary_bound(model) is None)


def group_parts(lengths: list[int], rows: range, k: int, sequences: int, tokens: int | None,
                width) -> list[list[int]] | None:
    """Micro-batches of whole groups (k consecutive rows each), or of one group's samples `sequences`
    at a time where a micro-batch holds fewer than a group; by tokens: groups together while they
    fit in `tokens` (width(rows) -> a group's tokens). None where neither applies: the rows then go
    as Split.parts makes them."""
    if k < 2 or not rows or rows.start % k or len(rows) % k:
        return None
    groups = [list(range(i, i + k)) for i in range(rows.start, rows.stop, k)]
    groups.sort(key=lambda grp: sum(lengths[i] for i in grp))  # like lengths together: less padding
    if tokens is not None:
        widths = [width(grp) for grp in groups]
        if max(widths) > tokens:
            return None
        parts: list[list[int]] = []
        width = 0
        for grp, wd in zip(groups, widths):
            if parts and (len(parts[-1]) // k + 1) * max(width, wd) <= tokens:
                parts[-1] += grp
                width = max(width, wd)
            else:
                parts.append(list(grp))
                width = wd
        return parts
    if not keeps_groups(sequences, k):
        return None
    if sequences % k == 0:
        per = sequences // k
        return [sum(groups[i:i + per], []) for i in range(0, len(groups), per)]
    return [grp[i:i + sequences] for grp in groups for i in range(0, k, sequences)]
