"""The engine's path for a model family without a file in rollout/models/: transformers' own forward
drives the decode, over the engine's static cache, continuous batching and CUDA graphs (not
`generate`).

The model is called as transformers defines it (its embeddings, layers, norms and head, LoRA
layers included), with three things of the engine's: `SlotCache`, a transformers Cache whose update
writes each slot's new keys and values at that slot's own position; per-slot position ids; and the
attention masks, built here (a slot sees its positions up to its own, within a sliding window where
its config has one) and passed ready-made, so the model builds none. Where the model's attention is
transformers' SDPA, a decode step's attention with grouped key/value heads reads each head's cache
once (grouped_decode_attention) instead of through transformers' copy per query head. On a GPU the
engine compiles the decode step with the model's code inside it, as it does a family file's.
Slower than a family file (the model's own attention and unfused projections), faster than
`generate` (no per-step cache growth, no padding of finished rows, graphs).

Shapes: S slots, P prompts, T prompt width, L = max_len, W the decode window, V vocabulary.
"""

from __future__ import annotations

import inspect
import warnings
from contextlib import nullcontext

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from execrl.rollout.models.layers import sliding_window


def grouped_decode_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                             is_causal=None, **kwargs):
    """transformers' SDPA attention, except for one new token per slot with fewer key/value heads
    than query heads (GQA): there the query heads that share a key/value head are that head's
    queries (q [S, Hkv, G, D] against k, v [S, Hkv, W, D]), so the cache is read once per
    key/value head instead of being copied G times (transformers' repeat_kv, which it does whenever
    a mask is given on CUDA). The same sums; the mask [S, 1, 1, W] broadcasts over the group."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    s, hq, q_len, d = query.shape
    hk = key.shape[1]
    plain = q_len != 1 or hk == hq or dropout or any(kwargs.get(k) is not None for k in EXTRAS)
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    grouped = query.reshape(s, hk, hq // hk, d)  # query head i uses key/value head i // G, as in repeat_kv
    out = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask,
                                                           scale=scaling)  # [S, Hkv, G, D]
    return out.reshape(s, hq, 1, d).transpose(1, 2).contiguous(), None  # [S, 1, Hq, D], as transformers returns


EXTRAS = ("softcap", "position_bias", "s_aux", "sinks")  # other attention terms: transformers' own function then
GROUPED = "execrl_grouped_decode"


AttentionInterface.register(GROUPED, grouped_decode_attention)
AttentionMaskInterface.register(GROUPED, sdpa_mask)  # (its masks are SDPA's: the engine passes them ready-made)


def sdpa_configs(config) -> list:
    """The model's config and sub-configs whose attention is transformers' SDPA."""
    found, stack = [], [config]
    while stack:
        c = stack.pop()
        if getattr(c, "_attn_implementation_internal", None) == "sdpa":
            found.append(c)
        stack.extend(sub for key in getattr(c, "sub_configs", {}) if (sub := getattr(c, key, None)) is not None)
    return found


class SlotCache(Cache):
    """Keys and values [S, Hkv, L, D] per layer (made at the first prefill, in the shapes the layer
    gives: keys and values may differ). `prefill`: writes the prompts' keys at positions [0, T) of
    their slots and returns them alone (attention over the prompt); else writes one position per
    slot and returns the cache's first W positions."""

    def __init__(self, layers: int, slots: int, max_len: int):
        # (Cache.__init__ not called: its layers are transformers' own cache; the update here is ours)
        self.k: list[torch.Tensor | None] = [None] * layers
        self.v: list[torch.Tensor | None] = [None] * layers
        self.slots, self.max_len, self.layers = slots, max_len, []
        self.mode: tuple = ("decode", None, None, 0)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        mode, a, b, w = self.mode
        if self.k[layer_idx] is None:
            self.k[layer_idx], self.v[layer_idx] = (
                z.new_zeros(self.slots, z.shape[1], self.max_len, z.shape[3]) for z in (key_states, value_states))
        kc, vc = self.k[layer_idx], self.v[layer_idx]
        if mode == "prefill":  # a: the slots, b: each slot's prompt
            t = key_states.shape[2]
            kc[a, :, :t] = key_states[b]
            vc[a, :, :t] = value_states[b]
            return key_states, value_states
        rows, pos = a, b  # one new position per slot
        kc[rows, :, pos] = key_states[:, :, 0]
        vc[rows, :, pos] = value_states[:, :, 0]
        return kc[:, :, :w], vc[:, :, :w]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def __len__(self):
        return len(self.k)

    def get_mask_sizes(self, *args, **kwargs):
        return self.max_len, 0

    @property
    def is_compileable(self) -> bool:
        return True


class GenericDecoder:
    """The CachedDecoder interface (rollout/decoder.py) over transformers' forward."""

    prefill_logits_bytes = 2**30  # a prefill chunk's logits at most (the model's head makes them at every position)

    def __init__(self, model, slots: int, max_len: int, merge_adapters: bool = False):
        cfg = model.config
        self.model, self.slots, self.max_len, self.merge = model, slots, max_len, False
        self.head = model.get_output_embeddings()
        self.cache = SlotCache(cfg.num_hidden_layers, slots, max_len)
        self.rows = torch.arange(slots, device=self.head.weight.device)
        types = getattr(cfg, "layer_types", None)
        windows = (sliding_window(cfg, i) for i in range(cfg.num_hidden_layers))
        self.window = next((w for w in windows if w is not None), None)  # (its sliding layers': one size)
        self.types = sorted(set(types)) if types else None
        # eager attention adds its mask to the scores (0 or the dtype's minimum); the others take booleans
        self.additive = getattr(cfg, "_attn_implementation", None) == "eager"
        self.grouped = sdpa_configs(cfg)  # their attention runs as grouped_decode_attention inside the engine
        self.keeps = "logits_to_keep" in inspect.signature(model.forward).parameters

    def compile_prefill(self, compiler) -> None:
        pass  # (the model's own code: nothing of ours to fuse)

    def refresh_adapters(self) -> None:
        pass  # (LoRA layers are inside the model's modules: its forward applies them)

    def adapters_merged(self):
        return nullcontext()

    def _masks(self, visible: torch.Tensor, sliding: torch.Tensor | None):
        """The ready-made masks: one [B, 1, Q, K] boolean, or one per layer type where the config has
        them (transformers then takes them as they are)."""
        if self.additive:
            low = torch.finfo(self.head.weight.dtype).min
            visible, sliding = (None if m is None else torch.zeros(m.shape, dtype=self.head.weight.dtype,
                                                                    device=m.device).masked_fill(~m, low)
                                for m in (visible, sliding))
        if self.types is None:
            return visible if self.window is None else sliding
        return {t: sliding if t == "sliding_attention" else visible for t in self.types}

    def _forward(self, ids, positions, masks, keep: torch.Tensor | None = None):
        """The model's logits; `keep`: of those positions only (transformers' logits_to_keep, where the forward
        takes it: else of every position)."""
        kept = {"logits_to_keep": keep} if keep is not None and self.keeps else {}
        for c in self.grouped:  # (only while the engine runs the model: training keeps transformers' SDPA)
            c._attn_implementation_internal = GROUPED
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # (past_key_values: renamed in later transformers)
                out = self.model(input_ids=ids, position_ids=positions, attention_mask=masks,
                                 past_key_values=self.cache, use_cache=True, **kept)
        finally:
            for c in self.grouped:
                c._attn_implementation_internal = "sdpa"
        return out.logits

    def prefill(self, tokens: torch.Tensor, lengths: torch.Tensor, slots: torch.Tensor, source: torch.Tensor):
        """As CachedDecoder.prefill. The model's own head makes logits at every position ([P, T, V]),
        so prompts go through in chunks of about a GiB of logits."""
        p, t = tokens.shape
        dev = tokens.device
        n = torch.arange(t, device=dev)
        per_prompt = t * self.head.weight.shape[0] * self.head.weight.element_size()
        chunk = max(1, min(p, self.prefill_logits_bytes // per_prompt))
        out = []
        for a in range(0, p, chunk):
            b = min(p, a + chunk)
            causal = (n[None, :] <= n[:, None])[None, None].expand(b - a, 1, t, t)  # [P', 1, T, T]
            sliding = None if self.window is None else causal & (n[:, None] - n[None, :] < self.window)[None, None]
            mine = (source >= a) & (source < b)  # the slots that take one of these prompts
            self.cache.mode = ("prefill", slots[mine], source[mine] - a, 0)
            ends = lengths[a:b] - 1  # (the head at each prompt's last position only: a 16K prompt's logits at every
            keep, at = torch.unique(ends, return_inverse=True)  # position took 4 GB more of a 32K vocabulary)
            logits = self._forward(tokens[a:b], n[None].expand(b - a, t), self._masks(causal, sliding), keep)
            out.append(logits[torch.arange(b - a, device=dev), at if logits.shape[1] == len(keep) else ends])
        return torch.cat(out)

    def decode(self, tokens: torch.Tensor, pos: torch.Tensor, window: int, reads: torch.Tensor,
               tail: int = 1, rows: None = None, shared: None = None) -> torch.Tensor:
        # (tail: transformers' attention does not split; rows: every slot's, always: engine._rows; shared: no units,
        # engine.units)
        n = torch.arange(window, device=tokens.device)[None]  # [1, W]
        visible = (n <= reads[:, None])[:, None, None]  # [S, 1, 1, W]
        sliding = None if self.window is None else visible & (n > reads[:, None] - self.window)[:, None, None]
        self.cache.mode = ("decode", self.rows, pos, window)
        return self._forward(tokens[:, None], pos[:, None], self._masks(visible, sliding))[:, 0]


def check_generic(dec: GenericDecoder, model, steps: int = 3) -> None:
    """The generic path against the model's own forward on a few tokens, before anything relies on it: a family
    whose code does not take the engine's cache and masks as transformers' attention functions do (recurrent or
    convolutional layers in a hybrid, attention that branches on the implementation's name and adds a boolean
    mask) would sample from another model than the one trained; it is refused, naming the backend that runs it.
    The check: greedy tokens from a short prompt, each step's distribution against the forward's (total variation
    at most 0.05 in bf16, 1e-3 in fp32)."""
    from execrl.rollout.models import UnsupportedModel
    from execrl.rollout.models.base import rotary_bound

    fix = ("set policy.generation.backend=transformers (execrl eval: --backend transformers); transformers' generate "
           "runs it")
    cfg = model.config
    # Llama 4's chunks, GPT-Neo's local layers: masks the engine does not make (the probe below is shorter than them;
    # GPT-Neo's configs all hold a window_size, used by its "local" layers only)
    unknown = sorted(set(getattr(cfg, "layer_types", None) or []) - {"full_attention", "sliding_attention"})
    local = [f"attention_chunk_size={cfg.attention_chunk_size}"] if getattr(cfg, "attention_chunk_size", None) else []
    if getattr(cfg, "window_size", None) and "local" in (getattr(cfg, "attention_layers", None) or ["local"]):
        local.append(f"window_size={cfg.window_size}")
    if cfg.model_type == "bloom" or (cfg.model_type == "falcon" and getattr(cfg, "alibi", False)):
        local.append("ALiBi biases built from a 2-D attention mask")  # (the engine's masks are 4-D)
    if unknown or local:
        raise UnsupportedModel(f"the execrl engine's generic path cannot run {cfg.model_type!r} models with "
                               f"{', '.join(unknown + local)} (its masks are full and sliding-window attention "
                               f"only): {fix}")
    bound = rotary_bound(model)
    if bound is not None:  # (transformers' layers take one rotary for the slots decoded together: a slot's frequencies
        # would follow the longest other slot's length, 0.67 nats off a 40-token sample beside a 300-token one)
        raise UnsupportedModel(f"the execrl engine's generic path cannot run {model.config.model_type!r} models with a "
                               f"rotary whose frequencies change past {bound} tokens (longrope, dynamic NTK): {fix}")
    dev, vocab = dec.rows.device, dec.head.weight.shape[0]
    if dec.max_len < 6 + steps:
        return
    training = model.training
    model.eval()  # (dropout off, as when the engine samples)
    prompt = (torch.arange(6, device=dev) * 7 + 3) % vocab  # [T]
    seq, got = prompt.tolist(), []
    try:
        with torch.no_grad():
            zero = torch.zeros(1, dtype=torch.long, device=dev)
            got.append(dec.prefill(prompt[None], torch.tensor([len(seq)], device=dev), dec.rows[:1], zero)[0])
            for _ in range(steps):
                seq.append(int(got[-1].argmax()))
                pos = torch.full((dec.slots,), len(seq) - 1, dtype=torch.long, device=dev)  # (slot 0's row is read)
                tokens = torch.full((dec.slots,), seq[-1], dtype=torch.long, device=dev)
                got.append(dec.decode(tokens, pos, min(64, dec.max_len), pos)[0])
            own = model(input_ids=torch.tensor([seq], device=dev), use_cache=False).logits[0, len(prompt) - 1:]
    except Exception as e:  # noqa: BLE001 - any failure of the model's code under the engine's cache is this refusal
        raise UnsupportedModel(f"the execrl engine's generic path cannot run {model.config.model_type!r} models "
                               f"({type(e).__name__}: {str(e)[:200]}): {fix}") from None
    finally:
        model.train(training)
    p, q = (torch.softmax(x.float(), -1) for x in (torch.stack(got), own))  # [steps + 1, V]
    distance = 0.5 * (p - q).abs().sum(-1).max().item()
    if distance > (1e-3 if dec.head.weight.dtype == torch.float32 else 0.05):
        raise UnsupportedModel(f"the execrl engine's generic path gives {model.config.model_type!r} models other "
                               f"next-token distributions than their own forward (total variation {distance:.3f} on a "
                               f"few tokens): {fix}")
