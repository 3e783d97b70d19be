"""The execrl rollout engine: continuous batching over static KV-cache slots, run with the trainer's
own weights.

Each prompt is prefilled once and its keys/values copied into the slots of its G samples; every
decode step advances all slots at once (a CUDA graph per attention-window size on GPUs, eager on
CPU: the same code), samples on the device, and the host looks at the state only every `sync_every`
steps: then finished slots are collected, stop strings are checked, and free slots are refilled from
waiting requests.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from dataclasses import dataclass
from functools import partial

import torch

from execrl.compiling import compile_settings, raise_recompile_limit
from execrl.guided import Guides
from execrl.models import kv_shape
from execrl.rollout.attention import kernel_fits, shared_from, tail_splits, unit_members
from execrl.rollout.completion import Completion, end_ids, text_of
from execrl.rollout.decoder import CachedDecoder, generic_in
from execrl.rollout.generic import GenericDecoder, check_generic
from execrl.rollout.masks import SlotMasks
from execrl.rollout.models import has_family
from execrl.rollout.sampling import SamplingParams, request_key, sample, token_keys
from execrl.rollout.units import PromptUnits
from execrl.sandbox.cgroups import memory_room
from execrl.transfer import to_device

MIN_ROWS = 16  # the fewest rows a step over some of the slots runs (_rows): each count has its own CUDA graphs
# an admission's prefill runs as a CUDA graph when its activations (~ACTIVATION_COPIES of its tokens x the widest
# projection, bf16) fit this; what a graph allocates stays reserved for its replays
ADMISSION_GRAPH_BYTES = 512 << 20
ACTIVATION_COPIES = 4
MASK_COPY_MS = 0.25  # guided decoding: the masks' copy to the device and the sampling's launch (H100, 256 x 151K)


@dataclass
class Slot:
    """What a busy slot is generating, as the host knows it (updated at each host sync)."""
    request: tuple[int, int]  # (prompt i, sample j)
    prompt_len: int
    limit: int  # tokens it may generate
    generated: int = 1  # tokens generated at the last sync (the prefill samples the first)
    checked: int = 0  # leading generated tokens whose text holds no stop string


def check_room(prompts: list[list[int]], max_len: int) -> None:
    """A ValueError naming the fix where a prompt is empty or leaves no token to generate within `max_len`."""
    for p in prompts:
        if not 0 < len(p) < max_len:
            raise ValueError(f"a prompt of {len(p)} tokens leaves no room to generate within {max_len} tokens: "
                             "raise policy.max_total_sequence_length or lower data.max_input_seq_length")


class Call:
    """One generate call's requests: waiting ones, and the results as they come in."""

    def __init__(self, prompts: list[list[int]], num_samples: int, max_new_tokens: int | list[int],
                 params: SamplingParams, stop_strings: list[str] | None, on_batch, seeds: list[int] | None, max_len: int,
                 guides=None, on_sample=None, guided_stops: list[str] | None = None):
        check_room(prompts, max_len)
        if seeds is None:
            seeds = torch.randint(0, 2**62, (len(prompts),)).tolist()
        elif len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        if guides is not None and len(guides) != len(prompts):
            raise ValueError(f"{len(guides)} constraints for {len(prompts)} prompts")
        if isinstance(max_new_tokens, int):
            max_new_tokens = [max_new_tokens] * len(prompts)
        elif len(max_new_tokens) != len(prompts) or min(max_new_tokens, default=1) < 1:
            raise ValueError(f"max_new_tokens: one budget >= 1 per prompt ({len(max_new_tokens)} for {len(prompts)})")
        self.guides = guides if guides is not None and any(g is not None for g in guides) else None
        self.prompts, self.max_new_tokens, self.params = prompts, max_new_tokens, params  # (budgets per prompt)
        self.stop_strings, self.on_batch, self.on_sample = stop_strings, on_batch, on_sample
        self.guided_stops = guided_stops if self.guides else None  # a constrained request's, where not stop_strings
        self.keys = [[request_key(seed, j) for j in range(num_samples)] for seed in seeds]
        self.waiting = deque((i, j) for i in range(len(prompts)) for j in range(num_samples))
        self.results: list[list[Completion | None]] = [[None] * num_samples for _ in prompts]
        self.pending = [num_samples] * len(prompts)  # completions each prompt still waits for

    def stops(self, request: tuple[int, int]) -> list[str]:
        """The stop strings of a request: a constrained one's guided_stops where given."""
        if self.guided_stops is not None and self.guides[request[0]] is not None:
            return self.guided_stops
        return self.stop_strings or []

    def finish(self, request: tuple[int, int], completion: Completion) -> None:
        i, j = request
        self.results[i][j] = completion
        if self.on_sample is not None:  # (while the other requests still generate)
            self.on_sample(i, j, completion)
        self.pending[i] -= 1
        if self.pending[i] == 0 and self.on_batch is not None:
            self.on_batch(1)


def at_rows(t: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """A per-slot state's entries at `rows` [R] (None: every slot's, t itself)."""
    return t if rows is None else t[rows]


class CacheTooLarge(MemoryError):
    """The KV cache asked for is more than the device has free: said before any of it is allocated (a host that
    overcommits would hand the allocation out and kill the process, without a word, as the zeros touch it)."""


def kv_bytes_per_token(model) -> int:
    """Keys and values of one token over every layer, in the model's dtype (an upper bound where
    some layers keep a window or share their cache)."""
    layers, kv_heads, head_dim = kv_shape(model.config)
    return layers * 2 * kv_heads * head_dim * next(model.parameters()).element_size()


def free_bytes(device: torch.device) -> int | None:
    """What the device can still give: on a GPU its free memory and what torch holds unused; on the host its
    available memory and swap, within what the limits of our cgroup and those above it leave (cgroups.memory_room);
    None where it cannot be read."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type != "cpu":
        return None
    try:
        info = dict(line.split(":", 1) for line in open("/proc/meminfo", encoding="ascii"))
        swap = int(info.get("SwapFree", "0 kB").split()[0]) * 1024
        free = int(info["MemAvailable"].split()[0]) * 1024 + swap
    except (OSError, KeyError, ValueError):
        return None
    try:
        room = memory_room(swap)
    except (OSError, ValueError):
        room = None
    return free if room is None else min(free, room)


def check_cache(model, slots: int, max_len: int) -> None:
    """CacheTooLarge where `slots` sequences of `max_len` tokens' keys and values are more than the model's device
    has free."""
    device = next(model.parameters()).device
    try:
        per_slot = slots * kv_bytes_per_token(model)
    except (AttributeError, TypeError):  # (a config without the usual names: make_decoder's own error says why)
        return
    need, free = per_slot * max_len, free_bytes(device)
    if free is None or need <= free:
        return
    fits = free // max(per_slot, 1)
    raise CacheTooLarge(f"the KV cache of {slots:,} sequences of up to {max_len:,} tokens needs {need / 2**30:,.1f} "
                        f"GiB, and the {device.type} has {free / 2**30:,.1f} GiB free: at {slots:,} at once, at most "
                        f"{fits:,} tokens each fit")


def make_decoder(model, slots: int, max_len: int, merge_adapters: bool):
    """A family with a file in rollout/models/: its CachedDecoder; any other causal LM: the generic
    path (transformers' own forward over the engine's cache)."""
    check_cache(model, slots, max_len)
    if has_family(model):
        return CachedDecoder(model, slots, max_len, merge_adapters)
    try:
        dec = GenericDecoder(model, slots, max_len)
    except AttributeError as e:  # (a multimodal model's config: its text model's settings are inside it)
        from execrl.rollout.models import UnsupportedModel

        nested = [k for k in ("text_config", "language_config", "llm_config") if hasattr(model.config, k)]
        why = f"a multimodal model: its language model's settings are in its config's {nested[0]}" if nested else \
            f"{type(e).__name__}: {e}"
        raise UnsupportedModel(f"the execrl engine cannot run {getattr(model.config, 'model_type', '?')!r} models "
                               f"({why}): set policy.generation.backend=transformers (execrl eval: "
                               "--backend transformers)") from None
    check_generic(dec, model)
    return dec


CAPTURED = {"graphs": 0, "seconds": 0.0}  # this process's CUDA graph captures (trainer/startup.py says them)


class RolloutEngine:
    def __init__(self, model, tokenizer, slots: int, max_len: int, cuda_graphs: bool = True, sync_every: int = 16,
                 prefill_tokens: int = 32768, compile: bool = False, stop_token_ids: list[int] | None = None,
                 merge_adapters: bool = False):
        self.tokenizer, self.sync_every, self.prefill_tokens = tokenizer, max(1, sync_every), prefill_tokens
        self.dec = make_decoder(model, slots, max_len, merge_adapters)  # (LoRA: decoder.adapters_merged)
        dev = self.dec.rows.device
        self.graphs_on = cuda_graphs and dev.type == "cuda"
        # worth grading each completion as it ends (generate's on_sample), while the rest generate: on a GPU; on a
        # CPU the decode loop and the sandbox share the cores (bench/README.md, "Grading while generation runs")
        self.streams = dev.type == "cuda"
        # fuses the small ops (see compiled()): our decoder compiles one layer that all its layers run
        # (and the head), the step's sampling is compiled here; on the generic path the whole step,
        # the model's own code with it
        self.compiled = compile and dev.type == "cuda"
        per_layer = self.compiled and isinstance(self.dec, CachedDecoder)
        whole = compiled if self.compiled and not per_layer else (lambda fn: fn)
        self.body, self.forward = whole(self._body), whole(self._forward)
        self.sample_step = compiled(self._sample) if per_layer else self._sample
        self.guided_sample = compiled(self._guided_sample) if self.compiled else self._guided_sample
        if self.compiled:
            self.dec.compile_prefill(compiled)
        if per_layer:
            self.dec.compile_decode(compiled)
        self.eos_list = end_ids(model, tokenizer, stop_token_ids)  # each ends a sequence
        self.eos = torch.tensor(self.eos_list, device=dev)  # [E]
        z = dict(dtype=torch.long, device=dev)
        self.tokens, self.pos, self.n_gen = (torch.zeros(slots, **z) for _ in range(3))  # [S] each
        self.keys = torch.zeros(slots, dtype=torch.int32, device=dev)  # [S] each slot's sampling key
        self.limit = torch.ones(slots, **z)  # [S] tokens this slot may generate
        self.active = torch.zeros(slots, dtype=torch.bool, device=dev)  # [S]
        self.out_tok = torch.zeros(slots, max_len, **z)  # [S, L] sampled tokens, by index within the completion
        self.out_lp = torch.zeros(slots, max_len, dtype=torch.float32, device=dev)  # [S, L] their logprobs
        self.graphs: dict = {}
        self.live: dict[int, torch.Tensor] = {}  # _rows: per count of rows, the slots a step runs on
        self.rows_map: list[int] = []  # ... the last one's, on the host
        self.admitted: dict[tuple[int, int, int], list[torch.Tensor]] = {}  # _prefill's graphs' inputs, per shape
        self.admit_graphs = True  # (off for good where a prefill cannot be captured)
        self.pool = None
        self.constraints = SlotMasks(slots, self.dec.head.weight.shape[0], dev)  # guided decoding: matchers, masks
        self._guides = None
        self.host_state = torch.zeros(2, slots, dtype=torch.long, pin_memory=dev.type == "cuda")  # tokens, active
        self.copied = torch.cuda.Event() if dev.type == "cuda" else None
        # guided decoding on a GPU: each step's forward timed (two pairs of events, one per step in
        # turn), and the host's deadline for the masks: the forward's end less the masks' copy
        # (MASK_COPY_MS)
        self.timing = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(2)] \
            if dev.type == "cuda" else None
        self.forward_ms, self.steps_timed, self.deadline_at = 0.0, 0, float("inf")
        # since the engine was built: tokens sampled by decode steps, and decode steps x slots (their ratio is the
        # decode batch's fullness: low where a few long samples decode alone, bench/README.md "Realistic lengths")
        self.decoded = {"tokens": 0, "slot_steps": 0}
        # the slots one admission filled from one prompt, in units whose prompt decode attention reads once
        # (rollout/units.py); None where the decoder is transformers' own or a unit would hold one slot
        members = unit_members(self.dec.heads, self.dec.kv_heads) if isinstance(self.dec, CachedDecoder) else 0
        self.units = PromptUnits(slots, members, dev, shared_from(self.dec.kv_heads, self.dec.head_dim)) \
            if members else None
        # where the Triton kernels run (torch's ops read a unit's prompt slower than each slot's own copy); off: each
        # slot reads its own copy, as without units
        self.share_prompts = members > 0 and dev.type == "cuda" and \
            kernel_fits(self.dec.head_dim, self.dec.heads // self.dec.kv_heads)
        self.sharing = False  # this generate call has had units: its steps read units' prompts once

    @property
    def slots(self) -> int:
        return self.dec.slots

    @property
    def guides(self):
        """Guided decoding's constraints compiled for this engine's tokenizer, vocabulary and end
        tokens."""
        if self._guides is None:
            self._guides = Guides(self.tokenizer, self.constraints.vocab, self.eos_list)
        return self._guides

    def reset_graphs(self) -> None:
        """Forget the captured CUDA graphs (they are captured again on use; compiled code is kept):
        needed when the weights move to new memory, as a sharded model's gathered weights do in
        every rollout phase. Their memory pool goes with them: capturing into a pool whose graphs
        were all freed trips an internal assert of torch's allocator."""
        if self.graphs and torch.cuda.is_available():
            torch.cuda.synchronize()
        self.graphs.clear()
        self.pool = None

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], num_samples: int, max_new_tokens: int | list[int], params: SamplingParams,
                 stop_strings: list[str] | None = None, on_batch=None, seeds: list[int] | None = None,
                 guides: list | None = None, on_sample=None, guided_stops: list[str] | None = None
                 ) -> list[list[Completion]]:
        """For each prompt (token ids), `num_samples` completions. Sample j of prompt i takes its
        random draws from (seeds[i], j) (None: seeds from torch's generator), so results do not depend on
        the slots, the rest of the batch or the rank, except through floating-point batch effects on
        the logits. `guides`: per prompt, the execrl.guided.Guide its completions keep to (None:
        free), their logprobs then those of the masked distribution. `max_new_tokens`: one budget for
        all, or one per prompt. `on_sample(i, j, completion)`: called as each completion is in (its
        slot's last token read), in this thread, while the others generate. `guided_stops`: the stop strings of the
        constrained requests where they are not `stop_strings` (a batch of constrained and free requests)."""
        self.dec.refresh_adapters()  # (LoRA: the adapters as they are now)
        call = Call(prompts, num_samples, max_new_tokens, params, stop_strings, on_batch, seeds, self.dec.max_len,
                    guides, on_sample, guided_stops)
        busy: dict[int, Slot] = {}  # slot index -> what it is generating
        if self.units is not None:
            self.units.clear()
        self.sharing = False
        with self.dec.adapters_merged():
            while call.waiting or busy:
                self._admit(call, busy)  # free slots take waiting requests: prefill, first token
                self._decode(call, busy)  # up to sync_every steps of every slot, on the device
                self._harvest(call, busy)  # the one host sync: finished and stopped slots hand in their completions
        return call.results  # type: ignore[return-value]

    def _admit(self, call: Call, busy: dict[int, Slot]) -> None:
        free = [s for s in range(self.slots) if s not in busy]
        take = [call.waiting.popleft() for _ in range(min(len(free), len(call.waiting)))]
        if not take:
            return
        slots = free[:len(take)]
        for s, (i, j) in zip(slots, take):
            prompt_len = len(call.prompts[i])
            busy[s] = Slot((i, j), prompt_len, min(call.max_new_tokens[i], self.dec.max_len - prompt_len))
        if call.guides:
            self.constraints.assign(slots, [call.guides[i] for i, _ in take])
            self.constraints.refresh(slots)  # the masks of their first tokens
        self.keys[to_device(slots, self.keys.device)] = to_device([call.keys[i][j] for i, j in take],
                                                                  self.keys.device, torch.int32)
        if self.units is not None:  # each prompt's slots: one prefill writes the same prompt into them
            filled: dict[int, list[int]] = {}
            for s, (i, _) in zip(slots, take):
                filled.setdefault(i, []).append(s)
            for i, group in filled.items():
                self.units.admit(len(call.prompts[i]), group)
            # (for the rest of the call, even once its units are gone: one compiled version of the step per call)
            self.sharing = self.sharing or (self.share_prompts and self.units.live)
        self._prefill(take, slots, call.prompts, [busy[s].limit for s in slots], call.params)

    def _decode(self, call: Call, busy: dict[int, Slot]) -> None:
        steps = min(self.sync_every, max(slot.limit - slot.generated for slot in busy.values()))
        if steps > 0:
            window = self._window(max(slot.prompt_len + slot.generated for slot in busy.values()) + steps)
            tail = self._tail(len(busy), window)
            rows = None if call.guides else self._rows(busy)
            self.decoded["slot_steps"] += steps * self.slots
            for _ in range(steps):
                if call.guides:
                    self._guided_step(window, call.params, tail)
                else:
                    self._step(window, call.params, tail, rows)

    def _harvest(self, call: Call, busy: dict[int, Slot]) -> None:
        active, counts = torch.stack([self.active.long(), self.n_gen]).cpu().tolist()  # the one host sync
        for s, slot in busy.items():
            self.decoded["tokens"] += counts[s] - slot.generated
            slot.generated = counts[s]
        cuts = self._stops(call, busy, counts) if call.stop_strings or call.guided_stops else {}
        done = [s for s in sorted(busy) if not active[s] or s in cuts]
        if not done:
            return
        width = max(counts[s] for s in done)
        idx = torch.tensor(done, device=self.out_tok.device)
        toks, lps = self.out_tok[idx, :width].tolist(), self.out_lp[idx, :width].tolist()
        self.constraints.release(done)
        if self.units is not None:  # (before their slots take other prompts)
            self.units.release(done)
        for s, row, lp in zip(done, toks, lps):
            n = cuts.get(s, counts[s])
            request = busy.pop(s).request
            guide = call.guides[request[0]] if call.guides else None
            call.finish(request, self._completion(row[:n], lp[:n], s in cuts, call.params, guide))
        stopped = [s for s in cuts if active[s]]
        if stopped:
            self.active[torch.tensor(stopped, device=self.active.device)] = False

    def _stops(self, call: Call, busy: dict[int, Slot], counts: list[int]) -> dict[int, int]:
        """slot -> the tokens to keep, for the busy slots whose text now holds a stop string. Only the
        tokens since the last sync are read, behind a lookback that covers a stop string begun
        before them: the text of the earlier ones was checked then (decoding every slot's whole
        sequence at every sync made long samples' syncs outlast their decode steps)."""
        back = stop_lookback([*(call.stop_strings or []), *(call.guided_stops or [])])
        stops = {s: call.stops(slot.request) for s, slot in busy.items()}
        starts = {s: max(0, slot.checked - back) for s, slot in busy.items() if counts[s] > slot.checked and stops[s]}
        if not starts:
            return {}
        dev = self.out_tok.device
        span = max(counts[s] - start for s, start in starts.items())  # (a slot admitted since: from its start)
        cols = torch.tensor(list(starts.values()), device=dev)[:, None] + torch.arange(span, device=dev)  # [N, span]
        rows = self.out_tok[torch.tensor(list(starts), device=dev)[:, None],
                            cols.clamp(max=self.out_tok.shape[1] - 1)].tolist()
        cuts = {}
        for (s, start), row in zip(starts.items(), rows):
            slot = busy[s]
            cut = first_stop(self.tokenizer, row[:counts[s] - start], stops[s], slot.checked - start)
            if cut is None:
                slot.checked = counts[s]
            else:
                cuts[s] = start + cut
        return cuts

    def _completion(self, ids: list[int], lps: list[float], stopped: bool, params: SamplingParams, guide=None
                    ) -> Completion:
        ended = stopped or (not params.ignore_eos and bool(ids) and ids[-1] in self.eos_list)
        return Completion(ids, text_of(self.tokenizer, ids), not ended, lps, guide)

    def _prefill(self, take: list[tuple[int, int]], slots: list[int], prompts: list[list[int]], limits: list[int],
                 params: SamplingParams) -> None:
        """Prefill each distinct prompt once (in chunks of ~prefill_tokens), fill its samples'
        slots, sample token 1. A small chunk on a GPU runs as a CUDA graph (_admission_shape)."""
        order = list(dict.fromkeys(i for i, _ in take))
        chunks, chunk = [], []
        for i in order:
            if chunk and (len(chunk) + 1) * max(len(prompts[k]) for k in chunk + [i]) > self.prefill_tokens:
                chunks.append(chunk)
                chunk = []
            chunk.append(i)
        chunks.append(chunk)
        for chunk in chunks:
            where = {i: n for n, i in enumerate(chunk)}
            mine = [(s, where[i], lim) for s, (i, _), lim in zip(slots, take, limits) if i in where]
            width = max(len(prompts[i]) for i in chunk)
            shape = self._admission_shape(len(chunk), width, len(mine))
            p, t, n = shape or (len(chunk), width, len(mine))
            tokens = torch.zeros(p, t, dtype=torch.long)  # [P, T], right-padded
            for row, i in enumerate(chunk):
                tokens[row, :len(prompts[i])] = torch.tensor(prompts[i])
            # a graph's extra prompt rows are one token long and feed no slot; its extra samples repeat the last,
            # writing the same values to the same slot
            lengths = [len(prompts[i]) for i in chunk] + [1] * (p - len(chunk))
            mine += [mine[-1]] * (n - len(mine))
            inputs = [tokens, torch.tensor(lengths), *(torch.tensor([m[k] for m in mine]) for k in range(3))]
            if shape is None:
                self._first_tokens(*(to_device(x, self.out_tok.device) for x in inputs), params)
                continue
            buffers = self.admitted.get(shape)
            if buffers is None:  # the graph reads its inputs where they are: one set per shape
                buffers = self.admitted[shape] = [torch.empty_like(x, device=self.out_tok.device) for x in inputs]
            for buffer, x in zip(buffers, inputs):
                to_device(x, buffer.device, out=buffer)
            try:
                self._run(("admit", shape, params), partial(self._first_tokens, *buffers, params))
            except RuntimeError as e:  # (a model whose prefill syncs with the host: eager from now on)
                warnings.warn(f"a prefill cannot be captured as a CUDA graph ({str(e)[:120]}): prefilling without "
                              "graphs", stacklevel=2)
                torch.cuda.synchronize()
                self.admit_graphs = False
                self._first_tokens(*buffers, params)

    def _admission_shape(self, prompts: int, width: int, samples: int) -> tuple[int, int, int] | None:
        """The padded shape (prompts, width, samples) under which a chunk's prefill and first tokens run as a CUDA
        graph, or None: eager. A small prefill is host-bound (each layer's kernels are launched one by one, a few
        ms of GPU work behind ~15 ms of launches at 0.5B), so it is captured once per shape and replayed: counts
        rounded up to powers of two and the width to a multiple of 64, for few graphs. Only where its activations
        stay within ADMISSION_GRAPH_BYTES (the graphs' memory stays reserved for them), decoding runs in graphs
        on our own decoder (without routed experts), and no guided-decoding masks apply (the host writes them)."""
        if not (self.graphs_on and self.admit_graphs and isinstance(self.dec, CachedDecoder) and self.dec.widest) \
                or self.constraints.any():
            return None
        p, t, n = 1 << (prompts - 1).bit_length(), min(-(-width // 64) * 64, self.dec.max_len), \
            1 << (samples - 1).bit_length()
        return (p, t, n) if p * t * self.dec.widest * ACTIVATION_COPIES * 2 <= ADMISSION_GRAPH_BYTES else None

    def _first_tokens(self, tokens: torch.Tensor, lengths: torch.Tensor, slot: torch.Tensor, source: torch.Tensor,
                      limit: torch.Tensor, params: SamplingParams) -> None:
        """Prompts tokens [P, T] (true lengths [P]) prefilled into cache slots `slot` [N], slot n taking prompt
        source[n] and a budget of limit[n] tokens; each slot's first token sampled and its state set."""
        logits = self.dec.prefill(tokens, lengths, slot, source)  # [P, V]
        bitmask = self.constraints.bitmask(slot) if self.constraints.any() else None  # [N, W] or None
        tok, lp = sample(logits[source], params, token_keys(self.keys[slot], torch.zeros_like(slot)), bitmask)
        self.tokens[slot], self.pos[slot], self.limit[slot] = tok, lengths[source], limit
        self.n_gen.index_fill_(0, slot, 1)  # (not n_gen[slot] = 1: its value is copied to the device, a sync)
        self.out_tok[slot, 0], self.out_lp[slot, 0] = tok, lp
        ended = self._is_eos(tok) if not params.ignore_eos else torch.zeros_like(tok, dtype=torch.bool)
        self.active[slot] = (limit > 1) & ~ended

    def _is_eos(self, tok: torch.Tensor) -> torch.Tensor:
        return (tok[:, None] == self.eos[None]).any(-1)

    def _window(self, needed: int) -> int:
        """Attention reads a power-of-two window of positions (>= 64) or the whole cache: few
        graphs, little waste."""
        w = 64
        while w < needed:
            w *= 2
        return min(w, self.dec.max_len)

    def _rows(self, busy: dict[int, Slot]) -> torch.Tensor | None:
        """The cache slots the next steps run on, once at most half of them are busy: the busy ones,
        and free ones up to a power of two rows (>= MIN_ROWS; each count its own CUDA graphs), so that a
        batch's tail, a few long samples, runs its GEMMs, norms and sampling on a few rows rather than
        every slot's. None: every slot (also on the generic path, whose attention is transformers')."""
        n = MIN_ROWS
        while n < len(busy):
            n *= 2
        if 2 * n > self.slots or not isinstance(self.dec, CachedDecoder):
            return None
        live = sorted(busy)
        live += [s for s in range(self.slots) if s not in busy][:n - len(live)]  # (free: nothing to keep)
        if n not in self.live:  # one buffer per count: its graphs read it where it is
            self.live[n] = torch.empty(n, dtype=torch.long, device=self.tokens.device)
        self.live[n].copy_(torch.tensor(live))
        self.rows_map = live  # (the host's copy: units in the rows' space, units.sync)
        return self.live[n]

    def _tail(self, running: int, window: int) -> int:
        """Attention's split of each slot's positions for steps with `running` samples still
        decoding (attention.tail_splits; 1 on the generic path, whose attention is transformers')."""
        return tail_splits(running, self.dec.kv_heads, window) if isinstance(self.dec, CachedDecoder) else 1

    def _body(self, window: int, params: SamplingParams, tail: int = 1, rows: torch.Tensor | None = None,
              shared: bool = False) -> None:
        """One decode step for every slot (or those in `rows`); all state stays on the device. `shared`: attention
        reads each unit's prompt once (self.units)."""
        logits = self._logits(window, tail, rows, shared)
        if rows is not None:  # (one compiled version for every count; decode marked rows so)
            logits = generic_in(logits, 0)
        self.sample_step(logits, params, None, None, rows)

    def _forward(self, window: int, tail: int = 1) -> torch.Tensor:
        """Guided decoding's first half of a step: the logits [S, V], while the host makes the
        masks."""
        return self._logits(window, tail)

    def _logits(self, window: int, tail: int = 1, rows: torch.Tensor | None = None,
                shared: bool = False) -> torch.Tensor:
        """The decoder's step over every slot [S, V] (rows: over those [R, V]); a slot whose sample has
        ended attends to position 0 only (its tokens are not kept; its cache no longer matters)."""
        tokens, pos, active = (at_rows(t, rows) for t in (self.tokens, self.pos, self.active))
        units = (self.units.units, self.units.rows) if shared else None
        return self.dec.decode(tokens, pos, window, torch.where(active, pos, 0), tail, rows, units)

    def _guided_sample(self, logits: torch.Tensor, params: SamplingParams) -> None:
        """... and its second half: sampling under the masks the host wrote meanwhile."""
        self._sample(logits, params, self.constraints.bitmask(), self.constraints.hold)

    def _sample(self, logits: torch.Tensor, params: SamplingParams, bitmask: torch.Tensor | None,
                hold: torch.Tensor | None = None, rows: torch.Tensor | None = None) -> None:
        """logits [S, V] (bitmask [S, W] or None) -> each active slot's next token, its logprob, and
        the state. Slots `hold` [S] (guided decoding: their masks were late) sample nothing and run
        the same position again next step. `rows` [R]: logits [R, V] are those slots'."""
        def put(t: torch.Tensor, value: torch.Tensor) -> None:
            if rows is None:
                t.copy_(value)
            else:
                t.index_put_((rows,), value)

        n_gen, active = at_rows(self.n_gen, rows), at_rows(self.active, rows)
        tok, lp = sample(logits, params, token_keys(at_rows(self.keys, rows), n_gen), bitmask)  # [S], [S]: token n_gen of each
        at, act = self.dec.rows if rows is None else rows, active if hold is None else active & ~hold
        col = n_gen.clamp(max=self.dec.max_len - 1)
        self.out_tok[at, col] = torch.where(act, tok, self.out_tok[at, col])
        self.out_lp[at, col] = torch.where(act, lp, self.out_lp[at, col])
        n = n_gen + act.long()
        done = n >= at_rows(self.limit, rows)
        if not params.ignore_eos:
            done = done | self._is_eos(tok)
        put(self.n_gen, n)
        put(self.pos, (at_rows(self.pos, rows) + act.long()).clamp(max=self.dec.max_len - 1))
        if hold is None:
            put(self.tokens, tok)
            put(self.active, act & ~done)
        else:
            self.tokens.copy_(torch.where(act, tok, self.tokens))
            self.active.copy_(self.active & ~(act & done))

    def _step(self, window: int, params: SamplingParams, tail: int = 1, rows: torch.Tensor | None = None) -> None:
        shared = self.sharing  # (units' prompts read once)
        if shared:
            self.units.sync(None if rows is None else self.rows_map)
        self._run((window, params, tail, None if rows is None else len(rows), shared),
                  lambda: self.body(window, params, tail, rows, shared))

    def _guided_step(self, window: int, params: SamplingParams, tail: int = 1) -> None:
        """A decode step under constraints. The last tokens go to the host ahead of this step's
        forward, so the host's workers advance the matchers and write the masks while the device
        runs the forward; sampling then reads them. On a GPU the host waits for the masks only until
        the forward is about done (_plan_deadline): the slots whose masks are late sit this step out
        (SlotMasks)."""
        state = torch.stack([self.tokens, self.active.long()])
        if self.tokens.is_cuda:
            self.host_state.copy_(state, non_blocking=True)
            self.copied.record()
            begin, end = self.timing[self.steps_timed % 2]
            begin.record()
        else:
            self.host_state.copy_(state)
        # on a GPU the forward graph's own output (no copy; each window's graph keeps its [S, V]
        # logits)
        logits = self._run(("forward", window, tail), lambda: self.forward(window, tail))
        if self.tokens.is_cuda:
            end.record()
            self.copied.synchronize()  # (this step's forward starts now on the device)
            self._plan_deadline()
        self.constraints.start(self.host_state[0], self.host_state[1])  # (an active slot is a busy one)
        self.constraints.settle(self.mask_deadline())
        # (keyed as its forward is: it reads that graph's logits)
        self._run(("sample", params, window, tail), lambda: self.guided_sample(logits, params))

    def _plan_deadline(self) -> None:
        """When the host stops waiting for this step's masks: the forward's expected end (the last
        steps' mean time, read off the previous step's events, done by now) less the time the masks'
        copy takes, so that sampling follows the forward at once."""
        if self.steps_timed:
            begin, end = self.timing[(self.steps_timed - 1) % 2]
            ms = begin.elapsed_time(end)
            self.forward_ms = ms if self.steps_timed == 1 else 0.9 * self.forward_ms + 0.1 * ms
        self.steps_timed += 1
        self.deadline_at = time.perf_counter() + max(0.0, self.forward_ms - MASK_COPY_MS) / 1e3 \
            if self.steps_timed > 1 else float("inf")

    def mask_deadline(self) -> float | None:
        """When the host stops waiting for late masks (time.perf_counter; see _plan_deadline); None
        on a CPU, where the forward ran before the host got here."""
        return self.deadline_at if self.timing is not None else None

    def _run(self, key, fn):
        """fn, as a CUDA graph (captured on first use under `key`) where graphs are on; its result
        (a graph's: the tensors its capture returned, which each replay rewrites in place, so a
        graph that reads them is keyed by the graph that writes them)."""
        if not self.graphs_on:
            return fn()
        entry = self.graphs.get(key)
        if entry is None:
            try:
                entry = self.graphs[key] = self._capture(fn)
            except RuntimeError as e:  # the generic path: a model whose own code syncs with the host
                if not isinstance(self.dec, GenericDecoder):
                    raise
                warnings.warn(f"the model's own forward cannot be captured as a CUDA graph ({str(e)[:120]}): "
                              "decoding without graphs", stacklevel=2)
                torch.cuda.synchronize()
                self.graphs_on = False
                return fn()
        entry[0].replay()
        return entry[1]

    def _capture(self, fn):
        state = [self.tokens, self.pos, self.n_gen, self.active]
        saved = [t.clone() for t in state]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up run (lazy kernel and workspace init), then undo its state change
            fn()
        torch.cuda.current_stream().wait_stream(side)
        for t, old in zip(state, saved):
            t.copy_(old)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        began = time.perf_counter()
        # recorded, not run; thread_local: what other threads do meanwhile (async GRPO's reward model scoring
        # in the grading thread: its syncs, its allocations) neither breaks the capture nor is refused
        try:
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                out = fn()
        except BaseException:
            rng_out_of_capture()
            raise
        CAPTURED["graphs"] += 1
        CAPTURED["seconds"] += time.perf_counter() - began
        return graph, out


def rng_out_of_capture() -> None:
    """After a failed CUDA graph capture (the engine then goes on without graphs): torch leaves the device's default
    generator marked as capturing, and every later random draw on the GPU (torch.randn, multinomial) fails with
    "Offset increment outside graph capture"; the generator takes a copy of its own state (seed and offset), which is
    not capturing."""
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    gen.graphsafe_set_state(gen.clone_state())


def compiled(fn):
    """torch.compile, falling back to eager (with torch's warning) where a compiler is missing or
    fails. Shapes are static except the attention window, generic from the first compilation (one
    step serves every window; attention reads only the positions in use)."""
    compile_settings()
    raise_recompile_limit(64)  # each engine compiles its own step (its `self` is guarded)
    dynamic_source("L['window']")
    return torch.compile(fn)


def dynamic_source(name: str) -> None:
    """Compile the argument `name` (dynamo's source name) as a symbol from its first call, rather than
    specialized to its first value and compiled again at the second."""
    config = torch.compiler.config
    if hasattr(config, "dynamic_sources") and name not in config.dynamic_sources.split(","):
        config.dynamic_sources = ",".join(x for x in (config.dynamic_sources, name) if x)


def stop_lookback(stop_strings: list[str]) -> int:
    """Tokens before the unchecked ones that a stop string's search decodes again: more than any
    stop string can span (a token that holds part of one holds at least one of its bytes; the
    rest is margin for tokens that decode to nothing)."""
    return 2 * max(len(s.encode()) for s in stop_strings) + 16


def first_stop(tokenizer, ids: list[int], stop_strings: list[str], known: int = 0) -> int | None:
    """The number of leading tokens whose text first contains a stop string (None: no stop string
    yet); the text of the first `known` tokens is known to hold none."""
    def holds(n: int) -> bool:
        text = text_of(tokenizer, ids[:n])
        return any(s in text for s in stop_strings)

    if len(ids) <= known or not holds(len(ids)):
        return None
    lo, hi = known + 1, len(ids)  # the shortest prefix containing a stop string: the predicate is monotone in the length
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
