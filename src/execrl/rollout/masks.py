"""The engine's side of guided decoding: each constrained slot's matcher, and the masks of the next
token.

At each decode step the host reads the token each constrained slot sampled last and hands the slot
to the mask threads (execrl.rollout.maskpool): they advance the slot's matcher by it and write the
slot's next mask into a buffer the step reads on the device (an unconstrained slot's row allows
every token), while the device runs the step's forward. A mask not ready when the forward ends does
not hold the step: its slot is held instead (it samples nothing this step and runs the same position
again next step, when its mask is ready), so one slow mask costs one slot one step, not every slot.
Sampling draws from the masked, renormalized distribution and reports logprobs under it
(execrl.rollout.sampling), which is also what the trainer scores (execrl.guided.Guide.masks). A held
slot's sample is the one it would have drawn: same logits, same key. Slots that consumed the same
tokens of one constraint share one mask computation (maskpool.c's groups: a batch's samples start in
one state and walk a constraint's fixed text together), and the wait for the masks runs in C too
(maskpool_wait), so that little host work lies between the deadline and the sampling's launch.

Shapes: S slots, W int32 words per mask (execrl.guided).
"""

from __future__ import annotations

import ctypes
import time
import weakref

import torch

from execrl.guided import native as guides_c
from execrl.guided.grammar import ConstraintError
from execrl.rollout import maskpool

PENDING, WRITTEN, COMPLETE, FAILED = 0, 1, 2, -1  # a slot's job state, as the mask threads store it


class SlotMasks:
    def __init__(self, slots: int, vocab: int, device: torch.device):
        self.slots, self.vocab, self.device = slots, vocab, device
        self.matchers: list = [None] * slots  # slot -> (guide, C matcher) while a constrained request holds it
        self.retired: dict[int, tuple] = {}  # slot -> (guide, C matcher) of its last request, recycled after its job
        self.held = 0  # slot-steps held so far (slots whose mask was late), for benchmarks
        self.late = 0  # slots held this step
        self.tokens: torch.Tensor | None = None  # [S] the tokens the current jobs advance by (a held slot's: unchanged)
        self.live = torch.zeros(slots, dtype=torch.int64)  # [S] the slots of the current step (nonzero: live)
        self.hold_share = 0.5  # the most of a step's slots the deadline may hold (more: wait on)
        self.state = torch.full((slots,), WRITTEN, dtype=torch.int32)  # [S] each slot's job state (see above)
        self.state_view = self.state.numpy()  # the same memory, for the finalizer (_free_matchers)
        self.handle = torch.zeros(slots, dtype=torch.int64)  # [S] each slot's C matcher (0: none)
        self.keys = torch.zeros(slots, dtype=torch.int64)  # [S] its constraint and tokens so far, hashed (maskpool.c)
        self.ends = torch.zeros(slots, dtype=torch.int64)  # [S] the address of its end-only row (end_row)
        self.end_rows: dict[tuple, torch.Tensor] = {}  # (W, end ids) -> [W] the mask allowing only the end
        self.host: torch.Tensor | None = None  # [S, W] masks as the host writes them (pinned on GPUs)
        self.masks: torch.Tensor | None = None  # [S, W] on the device: what the decode step reads
        pin = device.type == "cuda"
        self.hold_host = torch.zeros(slots, dtype=torch.bool, pin_memory=pin)  # [S] slots that sit this step out
        self.hold = torch.zeros(slots, dtype=torch.bool, device=device)  # [S] ... as the step reads it
        self.stream = self.ready = None  # (GPUs) the masks' copy stream, and its copy's event
        # a discarded engine's C matchers are freed once no job uses them (the callback keeps the
        # attributes, rows and states the jobs write, alive until then)
        weakref.finalize(self, _free_matchers, self.__dict__).atexit = False

    def _buffers(self, words: int) -> None:
        if self.host is None or self.host.shape[1] != words:
            self.host = torch.full((self.slots, words), -1, dtype=torch.int32,
                                   pin_memory=self.device.type == "cuda")
            self.masks = torch.full((self.slots, words), -1, dtype=torch.int32, device=self.device)

    def end_row(self, guide) -> torch.Tensor:
        """[W] int32: the mask of a complete constraint (only the end of the sequence), which its
        slot's job writes."""
        key = (guide.words, tuple(guide.eos_ids))
        if key not in self.end_rows:
            row = torch.zeros(1, guide.words, dtype=torch.int32)
            guide.fill_end(row, 0)
            self.end_rows[key] = row[0]
        return self.end_rows[key]

    def assign(self, slots: list[int], guides: list) -> None:
        """New requests in `slots`, each constrained by its guide (None: free)."""
        self._drain(slots)
        self.state[slots] = WRITTEN
        for s in slots:
            if s in self.retired:
                guide, m = self.retired.pop(s)
                guides_c.native(guide).recycle(guide.text, m)
        for guide in {id(g): g for g in guides if g is not None}.values():
            self._buffers(guide.words)
            mine, native = [s for s, g in zip(slots, guides) if g is guide], guides_c.native(guide)
            try:
                made = native.matchers(guide.text, len(mine))
            except RuntimeError as e:
                raise ConstraintError(f"constraint {guide.name}: {e}") from None
            for s, m in zip(mine, made):
                self.matchers[s] = (guide, m)
                self.handle[s] = m
            self.keys[mine] = native.key(guide.text)
            self.ends[mine] = self.end_row(guide).data_ptr()
        self.hold_host[slots] = False  # (a new request's first job is never a held one)
        for s, g in zip(slots, guides):
            if g is None:
                self.matchers[s] = None
                self.handle[s] = 0
        if self.host is not None:
            self.host[slots] = -1

    def any(self) -> bool:
        return any(m is not None for m in self.matchers)

    def bitmask(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """[S or len(rows), W] int32 on the device: the tokens each slot may sample next."""
        return self.masks if rows is None else self.masks[rows]

    def refresh(self, slots: list[int]) -> None:
        """The first masks of new requests in `slots`, written and sent (between decode steps: which
        slots the next step holds is settle()'s to say)."""
        new = torch.zeros(self.slots, dtype=torch.int64)
        new[slots] = 1
        self.start(torch.full((self.slots,), -1, dtype=torch.int64), new)
        self._drain(slots)  # (the other slots' hold flags stay: a held slot keeps its job at the next step)
        if bool((self.state[slots] == FAILED).any()):
            self._failed()
        self.send()

    def start(self, tokens: torch.Tensor, live: torch.Tensor) -> None:
        """Hand the mask threads the constrained `live` slots ([S] int64, nonzero: live) that
        sampled a token last step (`tokens` [S] int64, -1: none yet): their matchers advance by it
        and write their next masks. A slot held last step keeps the job it has (its token did not
        change). One call into the pool, whatever the slots."""
        if self.host is not None:
            maskpool.pool(self.host.shape[1] * 4).step(self.handle, tokens, live, self.ends, self.state,
                                                       self.hold_host, self.host, self.keys)
            self.live, self.tokens = live, tokens

    def settle(self, deadline: float | None = None) -> None:
        """Wait for the mask threads until every job is done or the clock (time.perf_counter) passes
        `deadline` (None: every job) with at most `hold_share` of the step's slots still pending (a
        step in which most slots sat out would be mostly wasted: when all the slots meet a slow
        state together, or at the end of a batch, when the last few remain), hold the slots whose
        masks are not written, and send the masks to the device."""
        late = self._wait(deadline)
        if late is not self.hold_host:  # (a test's stand-in for the wait)
            self.hold_host.copy_(late)
            self.late = int(late.sum())
        self.held += self.late
        self.send()

    def _wait(self, deadline: float | None) -> torch.Tensor:
        """The wait (maskpool.c's maskpool_wait, which marks the late slots in hold_host); a job
        done after it counts as late. A matcher that refused its token is an error. Returns
        hold_host ([S] bool: the late slots)."""
        if self.host is None:
            self.late = 0
            return self.hold_host
        failed = ctypes.c_int(0)
        self.late = maskpool.pool_library().maskpool_wait(
            self.slots, self.state.data_ptr(), self.live.data_ptr(), -1.0 if deadline is None else deadline,
            self.hold_share, self.hold_host.data_ptr(), ctypes.byref(failed))
        if failed.value:
            self._failed()
        return self.hold_host

    def _failed(self) -> None:
        """The error of a slot whose matcher refused its token (or failed to write a mask)."""
        s = int((self.state == FAILED).nonzero()[0, 0])
        self.state[s] = WRITTEN
        guide, matcher = self.matchers[s]
        token = int(self.tokens[s])
        said = guides_c.error_of(matcher)
        if token < 0:
            raise RuntimeError(f"guided decoding: {guide.name} gave no first mask: {said}")
        hint = " (an end id that is also ordinary text in this vocabulary?)" if token in guide.eos_ids else \
            " (the constraint admits no finite text: a rule that never ends, e.g. start: \"a\" start)" \
            if "Too many items" in said else ""
        raise RuntimeError(f"guided decoding: sampled token {token} does not continue {guide.name}{hint}: {said}")

    def _drain(self, slots) -> None:
        """Wait for the jobs of `slots` still with the mask threads (a slot's row is not reused
        under a running job)."""
        while bool((self.state[slots] == PENDING).any()):
            time.sleep(0)

    def send(self) -> None:
        """The masks and hold flags to the device. On a GPU the copy runs on a stream of its own,
        beside the step's forward, and the current stream waits for it before what it runs next (the
        sampling). The host synchronized with the last step that read them before it wrote these, so
        the copy waits for nothing."""
        if self.masks is None:
            return
        if self.device.type != "cuda":
            self.masks.copy_(self.host)
            self.hold.copy_(self.hold_host)
            return
        if self.stream is None:
            self.stream, self.ready = torch.cuda.Stream(self.device), torch.cuda.Event()
        with torch.cuda.stream(self.stream):
            self.masks.copy_(self.host, non_blocking=True)
            self.hold.copy_(self.hold_host, non_blocking=True)
            self.ready.record()
        torch.cuda.current_stream().wait_event(self.ready)

    def release(self, slots: list[int]) -> None:
        """The requests in `slots` are done: their matchers retired (recycled at the slot's next
        assign, once no job uses them). A slot without one needs nothing: its handle is 0 and its
        hold flag off (maskpool_wait marks only pending slots late), so an unguided batch's end, the
        GPU idle, runs no tensor op here (two per slot cost a 0.5B step's 128 samples ~11 ms)."""
        mine = [s for s in slots if self.matchers[s] is not None]
        for s in mine:
            self.retired[s] = self.matchers[s]
            self.matchers[s] = None
        if mine:
            self.handle[mine] = 0
            self.hold_host[mine] = False


def _free_matchers(attributes: dict) -> None:
    """A discarded SlotMasks' C matchers (its attributes), freed once no job uses them; not
    recycled: their guides often go with the engine. No torch op here: the garbage collector may run
    it in the middle of a torch.compile trace, whose fake tensors would take the op (the trace then
    failed, and the function it compiled ran uncompiled)."""
    while (attributes["state_view"] == PENDING).any():
        time.sleep(0)
    for entry in [m for m in attributes["matchers"] if m is not None] + list(attributes["retired"].values()):
        guides_c.llg().llg_free_matcher(entry[1])
    attributes["matchers"][:] = [None] * len(attributes["matchers"])
    attributes["retired"].clear()
