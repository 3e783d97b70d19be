"""Rollout generation: token ids in, Completions out. The execrl engine (engine.py) is the default;
transformers' `generate` (hf.py) is kept as the reference backend. Both sit behind one `generate`
call."""

from __future__ import annotations

from execrl.rollout.completion import Completion
from execrl.rollout.engine import RolloutEngine, check_room
from execrl.rollout.hf import hf_generate
from execrl.rollout.models import UnsupportedModel
from execrl.rollout.sampling import SamplingParams

BACKENDS = ("execrl", "transformers")


NO_GUIDES = "guided decoding needs the execrl engine: set policy.generation.backend: execrl"


class HFGenerator:
    """transformers `generate`, batch by batch (the reference backend)."""

    def __init__(self, model, tokenizer, batch_size: int, stop_token_ids: list[int] | None = None,
                 max_len: int | None = None):
        self.model, self.tokenizer, self.batch_size, self.stop_token_ids = model, tokenizer, batch_size, stop_token_ids
        self.max_len = max_len  # prompt + completion, as the engine's cache (None: no bound)
        self.streams = next(model.parameters()).device.type == "cuda"  # (as the engine's: RolloutEngine.streams)

    @property
    def guides(self):
        raise ValueError(NO_GUIDES)

    def generate(self, prompts, num_samples, max_new_tokens, params: SamplingParams, stop_strings=None, on_batch=None,
                 seeds=None, guides=None, on_sample=None, guided_stops=None):
        """`seeds` is accepted for the common interface; transformers samples from torch's global
        generator. `max_new_tokens`: one budget, or one per prompt (generated a budget at a time), each
        cut to what fits `max_len` after its prompt, as the engine's."""
        if guides is not None and any(g is not None for g in guides):
            raise ValueError(NO_GUIDES)
        if self.max_len is not None:
            check_room(prompts, self.max_len)
            asked = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
            fits = [min(b, self.max_len - len(p)) for b, p in zip(asked, prompts)]
            if fits != asked:
                max_new_tokens = fits if len(set(fits)) > 1 else fits[0]
        if isinstance(max_new_tokens, list):
            out = [None] * len(prompts)
            for budget in sorted(set(max_new_tokens)):
                idx = [i for i, b in enumerate(max_new_tokens) if b == budget]
                mapped = None if on_sample is None else (lambda i, j, c, idx=idx: on_sample(idx[i], j, c))
                for i, group in zip(idx, self.generate([prompts[i] for i in idx], num_samples, budget, params,
                                                       stop_strings, on_batch, on_sample=mapped)):
                    out[i] = group
            return out
        return hf_generate(self.model, self.tokenizer, prompts, num_samples, max_new_tokens, params.temperature,
                           params.top_p, params.top_k, stop_strings, self.batch_size, on_batch,
                           params.ignore_eos, self.stop_token_ids, on_sample)


def build_generator(model, tokenizer, backend: str, slots: int, max_len: int, cuda_graphs: bool = True,
                    sync_every: int = 16, compile: bool = False, stop_token_ids: list[int] | None = None,
                    merge_adapters: bool = False):
    """The rollout backend by name; the engine's cache has `slots` sequences of up to `max_len`
    tokens; generation ends at the model's EOS tokens and `stop_token_ids`; `merge_adapters`: LoRA's
    merge mode (decoder.py)."""
    if backend == "transformers":
        return HFGenerator(model, tokenizer, slots, stop_token_ids, max_len)
    if backend != "execrl":
        raise ValueError(f"generation backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    return RolloutEngine(model, tokenizer, slots, max_len, cuda_graphs=cuda_graphs, sync_every=sync_every,
                         compile=compile, stop_token_ids=stop_token_ids, merge_adapters=merge_adapters)


__all__ = ["BACKENDS", "Completion", "HFGenerator", "RolloutEngine", "SamplingParams", "UnsupportedModel",
           "build_generator", "hf_generate"]
