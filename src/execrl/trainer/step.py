"""From scored rollouts to an optimizer update: advantages, token log-probabilities, micro-batched
loss."""

from __future__ import annotations

import math
import weakref
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import torch

from execrl.algo import ADVANTAGES, LossTerms, policy_loss
from execrl.algo.logprobs import token_logprobs_from_hidden, top_k_top_p
from execrl.algo.role_baselines import RoleBaselines
from execrl.config import BatchPlan, MasterConfig
from execrl.config.batch import Split
from execrl.config.checks import importance_correction
from execrl.games import GAMES
from execrl.guided import masks_of, restrict
from execrl.models import train_mode
from execrl.rollout.models.base import head_soft_cap, rotary_bound
from execrl.rollout.sampling import scoring_temperature
from execrl.trainer import distributed as dist
from execrl.trainer import memory
from execrl.trainer.precision import Weights
from execrl.trainer.rollouts import Rollouts
from execrl.trainer.shared_prompt import Packed, group_parts, keeps_groups, one_prompt, pack, shareable
from execrl.transfer import on_host, to_device


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [N, L] prompt + completion, right-padded
    attention_mask: torch.Tensor  # [N, L]
    loss_mask: torch.Tensor  # [N, L-1] 1 where the next token is one the model sampled (and counts)
    advantages: torch.Tensor  # [N]
    old_logprobs: torch.Tensor | None = None  # [N, L-1] proximal policy; None: the current logprobs detached
    ref_logprobs: torch.Tensor | None = None  # [N, L-1]
    sampler_logprobs: torch.Tensor | None = None  # [N, L-1] behaviour policy: the engine's logprob of each sampled
                                                  # token where loss_mask is 1 (None: the backend
                                                  # gives none)
    guided: dict[int, list[tuple[int, torch.Tensor]]] | None = None  # guided decoding: row -> (first position,
    # the masks [n, W] its sampler used there) for each of its constrained turns; scored under the
    # same masks
    kept: torch.Tensor | None = None  # [N] bool: the samples in the loss (NeMo RL's sample_mask): valid, not
    # overlong-filtered; None: those with loss tokens
    prompt_lens: torch.Tensor | None = None  # [N] each row's prompt tokens: with group_size, what a group shares
    group_size: int = 1  # rows [i*G, (i+1)*G) are one prompt's samples


def advantages(rollouts: Rollouts, cfg: MasterConfig, baselines: RoleBaselines | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(advantages [N], rewards [num_groups, G], valid [num_groups, G]) by grpo.advantage's
    estimator; flat groups get 0."""
    rewards, valid = rollouts.reward_table()  # (shaped: NeMo RL's baseline and std; dynamic sampling chose the
    # groups by the rewards before shaping, pipeline.informative)
    adv = ADVANTAGES[cfg.grpo.advantage](
        rewards, valid, normalize_rewards=cfg.grpo.normalize_rewards,
        use_leave_one_out_baseline=cfg.grpo.use_leave_one_out_baseline,
        roles=[e.env.role if e.played else None for e in rollouts.episodes],
        all_roles=[(g.name, r) for g in GAMES.values() for r in g.roles], baselines=baselines,
        sum_over_processes=dist.sum_floats)
    if cfg.grpo.advantage_clip_low is not None or cfg.grpo.advantage_clip_high is not None:
        adv = adv.clamp(cfg.grpo.advantage_clip_low, cfg.grpo.advantage_clip_high)
    return adv.reshape(-1), rewards, valid


def build_batch(rollouts: Rollouts, adv: torch.Tensor, pad_id: int, overlong_filtering: bool) -> TrainBatch:
    """Right-padded trajectories; the loss mask comes from each trajectory (1 on the model's tokens
    only). Tokens and logprobs go in from one flat buffer each and the loss mask from each model turn's
    span (filled row by row and turn by turn, a 1.5B step's batch of 128 x 384 tokens took 27 ms of host
    time, the GPU idle meanwhile)."""
    trajs = rollouts.trajectories
    lengths = [len(t) for t in trajs]
    width = max(lengths, default=2)  # (a rank may hold no samples: more GPUs than groups)
    ids = torch.full((len(trajs), width), pad_id, dtype=torch.long)
    segments = [s for t in trajs for s in t.segments]
    logged = all(s.logprobs is not None for s in segments if s.sampled)
    # the samples in the loss: not those the sandbox failed on (in no normalizer either), nor, with
    # overlong filtering, the truncated ones, nor self-play's frozen seats (never trained on: counted, they halved a
    # sequence-level loss, as NeMo RL's sample_mask 0 would not)
    kept = [r.valid and not (overlong_filtering and t.truncated) and not e.frozen
            for r, t, e in zip(rollouts.rewards, trajs, rollouts.episodes)]
    turns = []  # guided decoding: (row, first position, segment) of each constrained turn
    spans: list[tuple[int, int, int]] = []  # the loss's model turns: (row, first position, end)
    for i, t in enumerate(trajs):
        at = len(t.prompt_ids) - 1  # position t predicts token t + 1
        for seg in t.segments:
            if seg.sampled and kept[i]:
                spans.append((i, at, at + len(seg.ids)))
            if seg.sampled and seg.guide is not None:
                turns.append((i, at, seg))
            at += len(seg.ids)
    mask = ones_on(spans, len(trajs), width - 1)
    cols = torch.arange(width)[None]  # [1, L]
    ends = torch.tensor(lengths, dtype=torch.long)[:, None]  # [N, 1]
    attn = (cols < ends).long()  # [N, L]: ones, then the padding
    ids[attn.bool()] = flat([part for t in trajs for part in (t.prompt_ids, *(s.ids for s in t.segments))],
                            torch.long)
    sampler = None
    if logged:  # each completion's tokens: positions [prompt - 1, end - 1)
        sampler = torch.zeros(len(trajs), width - 1)
        prompts = torch.tensor([len(t.prompt_ids) for t in trajs], dtype=torch.long)[:, None]  # [N, 1]
        completion = (cols[:, :-1] >= prompts - 1) & (cols[:, :-1] < ends - 1)  # [N, L-1]
        sampler[completion] = flat([s.logprobs if s.sampled else [0.0] * len(s.ids) for s in segments],
                                   torch.float32)
    guided: dict[int, list[tuple[int, torch.Tensor]]] = {}
    for (i, at, _), masks in zip(turns, masks_of([(seg.guide, seg.ids) for _, _, seg in turns])):
        guided.setdefault(i, []).append((at, masks))
    return TrainBatch(ids, attn, mask, adv, sampler_logprobs=sampler, guided=guided or None,
                      kept=torch.tensor(kept, dtype=torch.bool),
                      prompt_lens=torch.tensor([len(t.prompt_ids) for t in trajs], dtype=torch.long),
                      group_size=rollouts.group_size)


def ones_on(spans: list[tuple[int, int, int]], rows: int, width: int) -> torch.Tensor:
    """A [rows, width] float tensor, 1 on [start, end) of row r for each (r, start, end) of `spans` (disjoint
    within a row), 0 elsewhere: +1 at each start and -1 at each end, summed along the row (four tensor ops
    however many spans; a slice assignment per span cost ~10 us each)."""
    steps = torch.zeros(rows, width + 1)
    if spans:
        row, start, end = torch.tensor(spans, dtype=torch.long).T
        steps.index_put_((row, start), torch.ones(len(spans)), accumulate=True)
        steps.index_put_((row, end), torch.full((len(spans),), -1.0), accumulate=True)
    return steps.cumsum(1)[:, :width]


def flat(lists, dtype: torch.dtype) -> torch.Tensor:
    """The lists' items, in order, as one tensor [n] of dtype (torch.long or torch.float32): the lists joined
    (their pointers copied), then through a typed array. torch.tensor on a list of 50K numbers is 6x slower,
    and an array filled from an iterator over the lists 2x."""
    joined: list = []
    for part in lists:
        joined += part
    return torch.frombuffer(array({torch.long: "q", torch.float32: "f"}[dtype], joined), dtype=dtype) if joined \
        else torch.empty(0, dtype=dtype)


def sampler_filter(cfg: MasterConfig) -> tuple[int | None, float] | None:
    """(top_k, top_p) of the training rollouts' sampler, under which the trainer scores tokens as
    NeMo RL does (the filtered, renormalized distribution); None: no filter (or greedy rollouts,
    which are not filtered)."""
    gen = cfg.policy.generation
    if gen.temperature == 0 or (gen.top_k is None and gen.top_p >= 1.0):
        return None
    return gen.top_k, gen.top_p


def token_logprobs(model, ids: torch.Tensor, attn: torch.Tensor | None, select: torch.Tensor,
                   temperature: float = 1.0, allowed: torch.Tensor | None = None,
                   top: tuple[int | None, float] | None = None, unfiltered: bool = False,
                   packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """log pi(token_{t+1} | tokens_<=t) under softmax(logits / temperature), its entropy, and (with
    `unfiltered`) the logprob without the top filter, at the positions in `select` [B, L-1] (zeros
    elsewhere): three [B, L-1] (the last None unless asked for). The LM head runs only there, in
    chunks. `attn` [B, L]: the attention mask (None: the causal one alone, for right-padded rows:
    take). `allowed` [B, L-1, W] (guided decoding's bitmasks): the distribution restricted to the
    tokens the sampler allowed; `top` (top_k, top_p): filtered by the sampler's filter and
    renormalized. `packed`: the same rows packed, each group's prompt once (trainer/shared_prompt.py):
    forwarded so, the same numbers up to rounding."""
    if select.shape != (ids.shape[0], ids.shape[1] - 1) or (packed is not None and packed.source.shape != select.shape):
        raise ValueError(f"token_logprobs: a selection of {tuple(select.shape)} positions for rows of "
                         f"{tuple(ids.shape)} tokens (it takes [B, L-1]: position t predicts token t+1)")
    at_out, at_row = selected(select.bool(), ids.device)  # [N] each
    targets = ids.reshape(-1)[at_row + 1]  # [N]
    allowed = None if allowed is None else allowed.flatten(0, 1)[at_out]  # [N, W]
    head = model.get_output_embeddings()
    raw = None
    if getattr(head, "bias", None) is None and head_soft_cap(model.config) is None and head_shortcut(model):
        if packed is None:
            hidden = final_hidden(model, ids, attn).flatten(0, 1)[at_row]  # [N, d]
        else:
            # (a mask of ones: transformers then makes none, and reads no packing into the positions. It reads
            # the mask on the host, a sync each pass; a made 4D mask would not be, but a mixture of experts' router
            # loss reads the 2D one)
            hidden = final_hidden(model, packed.ids, torch.ones_like(packed.ids, dtype=torch.bool),
                                  position_ids=packed.positions, execrl_gather=packed.gather,
                                  execrl_scatter=packed.scatter)  # [G, Lp, d]
            hidden = hidden.flatten(0, 1)[packed.source.reshape(-1)[at_out]]  # [N, d]
        scaled = temperature / head_multiplier(model)
        logp, entropy = token_logprobs_from_hidden(hidden, head.weight, targets, scaled, allowed=allowed,
                                                   top=top)  # [N]
        if unfiltered:
            raw = token_logprobs_from_hidden(hidden, head.weight, targets, scaled, allowed=allowed)[0]
    else:  # heads with a bias or soft-capping, or that head_shortcut does not read: the model's own logits
        assert packed is None, "shareable() keeps packed rows from heads with a bias or soft-capping"
        logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits.flatten(0, 1)[at_row]
        logits = logits.float() / temperature  # [N, V]
        if allowed is not None:
            logits = restrict(logits, allowed)
        all_logp = torch.log_softmax(logits if top is None else top_k_top_p(logits, *top), -1)  # [N, V]
        logp = all_logp.gather(-1, targets[:, None])[:, 0]
        entropy = -(all_logp.exp() * all_logp.clamp_min(torch.finfo(all_logp.dtype).min)).sum(-1).detach()
        if unfiltered:
            raw = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]

    def spread(values: torch.Tensor) -> torch.Tensor:  # [N] -> [B, L-1], zeros where not selected
        zeros = torch.zeros(select.numel(), dtype=torch.float32, device=ids.device)
        return zeros.index_put((at_out,), values.float()).view(select.shape)

    if top is not None:  # a sampled token outside the trainer's own top-k/top-p set (its logits rounded otherwise
        # than the sampler's): -inf, and a NaN ratio that would skip the whole step. As NeMo RL's
        # mask_out_neg_inf_logprobs: its logprob 0, no gradient (still counted among the loss tokens)
        logp = torch.where(torch.isneginf(logp), torch.zeros_like(logp), logp)
    return spread(logp), spread(entropy), None if raw is None else spread(raw)


def head_multiplier(model) -> float:
    """What the model's LM head multiplies hidden @ W.T by: Granite divides by config.logits_scaling, Falcon-H1
    multiplies by config.lm_head_multiplier, Cohere's families by their logit_scale (the trainer's head kernels take
    it as part of the temperature)."""
    scale = 1.0 / (getattr(model.config, "logits_scaling", None) or 1.0)
    scale *= getattr(model.config, "lm_head_multiplier", None) or 1.0  # Falcon-H1: lm_head(h) * lm_head_multiplier
    own = getattr(model, "logit_scale", None)
    return scale * own if isinstance(own, (int, float)) and not isinstance(own, bool) else scale


def head_shortcut(model) -> bool:
    """Whether the model's logits are final_hidden @ W.T x head_multiplier (the trainer's chunked head reads them so):
    found once per model config by comparing the two on a few tokens, before anything relies on it (a hunt's find:
    HyperCLOVAX multiplies by the logits_scaling Granite divides by, Inkling divides its hidden state and cuts its
    vocabulary, Dory scales each token's logit: scored 0.2 to 9.8 nats off the model, without a word). A head that is
    no Linear, or whose logits differ, is read from the model's own forward. A sharded model not yet checked (FSDP2:
    build_policy checks it before sharding) is taken to be read so."""
    known = _SHORTCUT.get(id(model.config))
    if known is not None:
        return known
    key = model.config.to_json_string(use_diff=False)
    known = _SHORTCUT_BY_CONFIG.get(key)
    head = model.get_output_embeddings()
    if known is None and type(head.weight).__name__ == "DTensor":
        return True
    if known is None:
        known = isinstance(head, torch.nn.Linear) and _head_reads(model, head)
        _SHORTCUT_BY_CONFIG[key] = known
    _SHORTCUT[id(model.config)] = known
    weakref.finalize(model.config, _SHORTCUT.pop, id(model.config), None)
    return known


_SHORTCUT: dict[int, bool] = {}  # by the config object (while it lives)
_SHORTCUT_BY_CONFIG: dict[str, bool] = {}  # by its JSON: a copy of the model (bf16 compute, the reference) is known


def _head_reads(model, head) -> bool:
    ids = (torch.arange(1, 9, device=head.weight.device) % head.weight.shape[0])[None]  # [1, 8]
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            own = model(input_ids=ids, use_cache=False).logits[0].float()  # [8, V]
            short = final_hidden(model, ids, None)[0].float() @ head.weight.float().T * head_multiplier(model)
    finally:
        model.train(training)
    if own.shape != short.shape:
        return False
    exact = head.weight.dtype == torch.float32  # (else the model's logits are rounded to its dtype, twice at most:
    rtol = 1e-4 if exact else 4 * torch.finfo(head.weight.dtype).eps  # a scale after the product)
    return torch.allclose(own, short.to(head.weight.dtype).float(), rtol=rtol, atol=1e-4 if exact else 1e-2)


def selected(select: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Where select [B, L-1] is True, as flat indices [N] into [B*(L-1)] (the outputs) and into [B*L] (the rows'
    positions: +1 is the token predicted), on `device`. Found where `select` is: from a CPU mask the host does not
    wait for the GPU's queued work, as a boolean index on the GPU does (the host learns N only when it is done)."""
    r, c = select.nonzero(as_tuple=True)
    width = select.shape[1]
    return to_device(r * width + c, device), to_device(r * (width + 1) + c, device)


def final_hidden(model, ids: torch.Tensor, attn: torch.Tensor | None, **inputs) -> torch.Tensor:
    """The decoder's output after the final norm [B, L, d], from the model's own forward with the LM
    head applied at no position. Through forward, not the decoder alone, because FSDP hooks forward:
    a sharded model gathers its embeddings, final norm and head there (and keeps them gathered for
    the head's use and the backward). `inputs`: more of forward's arguments."""
    out = {}

    def keep(_module, _args, output) -> None:  # returns None: the output goes on unchanged
        out["hidden"] = output.last_hidden_state

    decoder = model.get_decoder()
    if decoder is model:  # (Llama 4's and Mllama's causal LMs answer themselves: their decoder is .model)
        decoder = model.model
    hook = decoder.register_forward_hook(keep)
    try:
        model(input_ids=ids, attention_mask=attn, use_cache=False,
              logits_to_keep=torch.empty(0, dtype=torch.long, device=ids.device), **inputs)
    finally:
        hook.remove()
    return out["hidden"]


def micro_batches(batch: TrainBatch, rows: range, split: Split, share: bool = False,
                  bound: int | None = None) -> list[list[int]]:
    """Rows of similar length together, by count or by tokens (any split gives the same gradient:
    normalizers are global); with `share`, whole groups (or one group's samples) together where the
    split allows, each group's prompt then forwarded once (packed_rows). `bound`: the model's
    rotary_bound, rows up to it never in a micro-batch with longer ones (transformers would give
    them the long frequencies: 11.8 nats from the engine's logprobs of a 50-token sample)."""
    lengths = batch.attention_mask.sum(1).tolist()
    if bound is not None:
        short, long = [i for i in rows if lengths[i] <= bound], [i for i in rows if lengths[i] > bound]
        if short and long:
            return split.parts(lengths, short) + split.parts(lengths, long)
    if share and batch.prompt_lens is not None and prompts_shared(batch, rows):
        def width(group: list[int]) -> int:
            # a token budget counts each sample's whole sequence, as rows do: attention gathers them
            # so, and the packed rows' other activations are fewer
            return sum(split.width(lengths[i]) for i in group)

        parts = group_parts(lengths, rows, batch.group_size, split.sequences, split.tokens, width)
        if parts is not None:
            return parts
    return split.parts(lengths, rows)


def prompts_shared(batch: TrainBatch, rows: range) -> bool:
    """Whether each group of the rows begins with one prompt (shared_prompt.one_prompt)."""
    return one_prompt(batch.input_ids[rows.start:rows.stop], batch.prompt_lens[rows.start:rows.stop],
                      batch.group_size)


def packed_rows(batch: TrainBatch, rows: list[int], device) -> Packed | None:
    """The micro-batch's rows packed, each group's prompt once (trainer/shared_prompt.py), on the
    device; None where its rows share no prompt (or packing saves no tokens)."""
    if batch.prompt_lens is None:
        return None
    idx = torch.tensor(rows)
    lengths = batch.attention_mask[idx].sum(1)
    width = int(lengths.max())
    if not right_padded(batch.attention_mask[idx, :width]):
        return None
    packed = pack(batch.input_ids[idx, :width], lengths, batch.prompt_lens[idx], min(batch.group_size, len(rows)))
    return None if packed is None else packed.to(device)


def sharing(cfg: MasterConfig, model) -> bool:
    """Whether this run's passes pack each group's prompt once: policy.shared_prompts, where the
    model's attention allows it."""
    return cfg.policy.shared_prompts and shareable(model)


def sharing_note(cfg: MasterConfig, model, split: Split) -> str | None:
    """The start-up's line on policy.shared_prompts: where it is on, whether training packs each
    group's prompt once, and if not, why."""
    k = cfg.grpo.num_generations_per_prompt
    if not cfg.policy.shared_prompts or k < 2:
        return None
    if not shareable(model):
        return (f"training: a row per sample ({model.config.model_type}: packed rows need a family of "
                "execrl/rollout/models/ with plain causal SDPA attention, no sliding windows, soft-capping or "
                "dropout: policy.shared_prompts)")
    if split.tokens is None and not keeps_groups(split.sequences, k):
        return (f"training: a row per sample: micro-batches of {split.sequences} split groups of {k} unevenly; "
                f"a multiple or a divisor of {k} forwards each group's prompt once (policy.shared_prompts)")
    return ("training: each group's prompt forwarded once, its samples packed after it, where they share it" +
            (" and a group fits the token budget" if split.tokens is not None else "") + " (policy.shared_prompts)")


def take(batch: TrainBatch, rows: list[int], device
         ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(ids, attention mask (None: right-padded rows, which need none), loss mask, row index, guided
    decoding's masks [b, width-1, W] or None) of some rows, trimmed to their longest sequence, on the
    device."""
    idx = torch.tensor(rows)
    width = int(batch.attention_mask[idx].sum(1).max())
    allowed = None
    if batch.guided and any(r in batch.guided for r in rows):
        words = next(iter(batch.guided.values()))[0][1].shape[1]
        allowed = torch.full((len(rows), width - 1, words), -1, dtype=torch.int32)
        for n, r in enumerate(rows):
            for at, masks in batch.guided.get(r, []):
                allowed[n, at:at + len(masks)] = masks
        allowed = to_device(allowed, device)
    attn = batch.attention_mask[idx, :width]
    return (to_device(batch.input_ids[idx, :width], device), None if right_padded(attn) else to_device(attn, device),
            on(device, batch.loss_mask, idx, width - 1), idx, allowed)


def on(device, t: torch.Tensor | None, idx: torch.Tensor, width: int) -> torch.Tensor | None:
    """Rows idx of a batch's [N, L-1] tensor t, its first `width` columns, on the device (copied without blocking);
    None for None."""
    return None if t is None else to_device(t[idx, :width], device)


def right_padded(attn: torch.Tensor) -> bool:
    """Whether each row of an attention mask [B, L] is ones then zeros. Such rows need no mask in the
    forward: under the causal mask alone a real token sees only earlier positions, all real (and the
    positions are 0, 1, ... either way), and attention runs as one causal kernel that skips the upper
    triangle, where a [B, L, L] padding mask makes it read every position (the forward and backward
    1.29x faster at 1.5B over rows of 128 + up to 4,096 tokens: bench/trainer_parts.py). The pad
    positions' outputs change, and nothing reads them."""
    return bool((attn.cummin(1).values == attn).all())


def idle_pass(model, device) -> None:
    """A forward and backward through every parameter that add nothing to any gradient: what a rank
    with fewer micro-batches than another runs in their place."""
    ids = torch.zeros(1, 2, dtype=torch.long, device=device)
    logp, _, _ = token_logprobs(model, ids, None, torch.ones(1, 1))
    (logp.sum() * 0.0).backward()


@torch.no_grad()
def score_tokens(model, batch: TrainBatch, split: Split, temperature: float,
                 top: tuple[int | None, float] | None = None, share: bool = False) -> torch.Tensor:
    """Each token's logprob [N, L-1] (no gradient), under the sampler's filter `top` (None:
    unfiltered); `share`: each group's prompt forwarded once."""
    device = next(model.parameters()).device
    out = torch.zeros_like(batch.loss_mask)
    with dist.full_weights(model):  # a sharded model: gathered once for all micro-batches
        for rows in micro_batches(batch, range(len(batch.input_ids)), split, share, rotary_bound(model)):
            ids, attn, mask, idx, allowed = take(batch, rows, device)
            packed = packed_rows(batch, rows, device) if share else None
            select = batch.loss_mask[idx, :mask.shape[1]] > 0  # (the host's copy: selected() then needs no sync)
            out[idx, :mask.shape[1]] = token_logprobs(model, ids, attn, select, temperature, allowed, top,
                                                      packed=packed)[0].cpu()
    return out


def optimize(weights: Weights, optimizer, scheduler, batch: TrainBatch, cfg: MasterConfig, plan: BatchPlan,
             defer: bool = False) -> Callable[[], dict]:
    """One or more optimizer steps over the batch (whole groups each), micro-batched with gradient
    accumulation: forward and backward on the compute model, gradients accumulated and applied in
    the master's dtype; `scheduler` steps after each optimizer step (None: not here). Returns a
    function that gives the step's numbers. `defer` (one optimizer step of torch's fused Adam(W), one
    process: deferrable()): the host does not wait for the GPU here, a non-finite step is skipped by
    the kernel itself, and the numbers are read when the function is called (the next step's
    generation is launched meanwhile); else they are read here."""
    model = weights.compute
    device, loss_cfg = next(model.parameters()).device, cfg.loss_fn
    temperature, correct = scoring_temperature(cfg.policy.generation.temperature), importance_correction(cfg)
    top = sampler_filter(cfg)  # (the reference's logprobs are unfiltered: the KL reads the current ones unfiltered too)
    kl = top is not None and cfg.loss_fn.reference_policy_kl_penalty > 0 and batch.ref_logprobs is not None
    stats = {"loss": 0.0, "clip_frac": 0.0, "clip_frac_high": 0.0, "clip_frac_low": 0.0, "kl": 0.0, "entropy": 0.0,
             "grad_norm": 0.0, "skipped_steps": 0, "applied_steps": 0, "token_steps": 0}
    averaged = ("clip_frac", "clip_frac_high", "clip_frac_low", "kl")  # token means, over the whole batch
    if batch.sampler_logprobs is not None:  # the engine against the trainer, logged every step (async or not)
        averaged += ("logprob_mismatch", "sampler_kl", "is_weight", "is_truncated_frac")
        stats.update(dict.fromkeys(averaged[4:], 0.0))
    share, bound = sharing(cfg, model), rotary_bound(model)
    train_mode(model)
    steps = plan.optimizer_steps_per_rollout
    mine = len(batch.input_ids) // steps  # this rank's rows of each optimizer batch: whole groups, maybe none
    for k in range(steps):
        rows = range(k * mine, (k + 1) * mine)
        # The normalizers are those of the whole optimizer batch, over all ranks: each rank's loss
        # is then its share of the global mean, and the gradients summed over ranks are the
        # one-process gradient. sequences: NeMo RL's valid ones (not infra_error, not
        # overlong-filtered), with loss tokens or not
        own = batch.loss_mask[rows.start:rows.stop]
        kept = (own.sum(1) > 0) if batch.kept is None else batch.kept[rows.start:rows.stop]
        num_tokens, num_seqs, with_tokens = dist.sum_floats(own.sum().item(), kept.sum().item(),
                                                            (own.sum(1) > 0).sum().item())
        stats["token_steps"] += num_tokens > 0  # (the token means are over these: an optimizer batch without a loss
        # token, every sample cut and overlong-filtered, has none, and read 0 entropy, a certain policy)
        weights.zero_grad(optimizer)
        # the step's loss and metrics summed on the device, in float64 (the numbers Python floats gave):
        # read once after the micro-batches, not with a sync after each backward
        sums = torch.zeros(2 + len(averaged), dtype=torch.float64, device=device)  # loss, entropy, *averaged
        parts = micro_batches(batch, rows, plan.train_split, share, bound)
        # every rank makes as many passes (FSDP gathers and reduces in them): one with fewer groups
        # (or, by tokens, shorter samples) idles in step
        passes = dist.largest(len(parts))
        for i in range(passes):
            dist.reduce_after_backward(model, last=i == passes - 1)
            if i >= len(parts):
                idle_pass(model, device)
                weights.accumulate_grads()
                continue
            with memory.phase("training", cfg):
                ids, attn, mask, idx, allowed = take(batch, parts[i], device)
                select = batch.loss_mask[idx, :mask.shape[1]] > 0  # (the host's copy: selected() then needs no sync)
                logp, entropy, raw = token_logprobs(model, ids, attn, select, temperature, allowed, top,
                                                    unfiltered=kl,
                                                    packed=packed_rows(batch, parts[i], device) if share else None)
                width = mask.shape[1]
                # the proximal policy: the weights as this step began (one optimizer step: the
                # current ones, detached)
                old = logp.detach() if batch.old_logprobs is None else on(device, batch.old_logprobs, idx, width)
                terms = LossTerms(logp, old, to_device(batch.advantages[idx], device), mask,
                                  on(device, batch.ref_logprobs, idx, width),
                                  on(device, batch.sampler_logprobs, idx, width), unfiltered_logprobs=raw,
                                  zero_is_filtered=top is not None)
                loss, metrics = policy_loss(terms, loss_cfg, num_tokens=num_tokens, num_seqs=num_seqs,
                                            is_correction=correct)
                loss.backward()
                weights.accumulate_grads()
            part = mask.sum().double() / max(num_tokens, 1.0)  # a token mean's share of the step's
            # (GSPO's is_weight, a mean over sequences: their share)
            per_seq = {"is_weight": metrics["sequences"].double() / max(with_tokens, 1.0)} if "sequences" in metrics else {}
            sums += torch.stack([loss.detach().double(), (entropy * mask).sum().double() / max(num_tokens, 1.0),
                                 *(metrics[name].to(device, torch.float64) * per_seq.get(name, part)
                                   for name in averaged)])
        norm = weights.clip(math.inf if cfg.policy.max_grad_norm is None else cfg.policy.max_grad_norm)
        if defer:
            finite = torch.isfinite(norm) & torch.isfinite(sums[0])  # (tally's test, on the device)
            with memory.phase("the optimizer step", cfg):
                weights.step(optimizer, skip=~finite)
            model.eval()
            return later(on_host(torch.cat([sums, norm.detach().double().reshape(1)])), stats, averaged, scheduler)
        if not tally(stats, averaged, sums.tolist(), dist.total_norm(norm)):
            weights.zero_grad(optimizer)  # a NaN/inf step is skipped, never applied
            continue
        with memory.phase("the optimizer step", cfg):
            weights.step(optimizer)
        if scheduler is not None:  # (None: the caller steps it once per GRPO step)
            scheduler.step()
    model.eval()
    done = summed(stats, averaged)
    return lambda: done


def later(read: Callable[[], list[float]], stats: dict, averaged: tuple[str, ...], scheduler) -> Callable[[], dict]:
    """A deferred optimizer step's numbers, as a function: read (the sums, then the gradient's norm), tallied, and
    the scheduler stepped where the kernel applied the step (before the next step's optimizer reads the rate)."""
    done: list[dict] = []

    def numbers() -> dict:  # (once: a second call returns the first's numbers, the scheduler not stepped again)
        if not done:
            *sums, grad_norm = read()
            applied = tally(stats, averaged, sums, grad_norm)
            done.append(summed(stats, averaged))
            if applied and scheduler is not None:
                scheduler.step()
        return done[0]
    return numbers


def tally(stats: dict, averaged: tuple[str, ...], sums: list[float], grad_norm: float) -> bool:
    """One optimizer step's numbers into `stats`: sums (loss, entropy, *averaged, read from the device) and the
    gradient's norm; whether the step is applied (its loss and norm finite: the whole batch's loss, so every rank
    skips or not alike)."""
    step_loss, entropy_part, *averaged_parts = sums
    stats["entropy"] += entropy_part
    for name, part in zip(averaged, averaged_parts):
        stats[name] += part
    (step_loss,) = dist.sum_floats(step_loss)
    if not (math.isfinite(grad_norm) and math.isfinite(step_loss)):
        stats["skipped_steps"] += 1
        return False
    stats["loss"] += step_loss
    stats["grad_norm"] += grad_norm
    stats["applied_steps"] += 1
    return True


def summed(stats: dict, averaged: tuple[str, ...]) -> dict:
    """stats with each rank's part of a global token mean summed over ranks, the token means the mean over the
    optimizer steps that had loss tokens (none had: no token means, which read 0 and a certain policy, a hunt's
    find), and the loss and the gradient's norm the mean over the optimizer steps applied (none applied: no loss
    or norm; they read 0, a perfect-looking point, for a step skipped as non-finite)."""
    names, counted = (*averaged, "entropy"), stats.pop("token_steps")
    stats.update(zip(names, (v / max(counted, 1) for v in dist.sum_floats(*(stats[k] for k in names)))))
    if not counted:
        for name in names:
            del stats[name]
    applied = stats.pop("applied_steps")
    for name in ("loss", "grad_norm"):
        if applied:
            stats[name] /= applied
        else:
            del stats[name]
    return stats


def deferrable(weights: Weights, optimizer, cfg: MasterConfig, plan: BatchPlan) -> bool:
    """Whether a step's optimizer may run on while the host goes on (optimize's `defer`): one optimizer step per
    rollout, one process, not async GRPO, and torch's fused Adam(W) on plain weights, whose kernel skips the update
    where a flag on the device says so (as under GradScaler), so that no host read decides it."""
    return (plan.optimizer_steps_per_rollout == 1 and dist.world_size() == 1 and not cfg.grpo.async_grpo.enabled
            and type(weights) is Weights and type(optimizer) in (torch.optim.AdamW, torch.optim.Adam)
            and all(group.get("fused") for group in optimizer.param_groups))
