"""A GRPO group's samples share their prompt: the engine's slots that one admission filled from one prompt hold the
same keys and values over the prompt's positions (one prefill wrote them into each). `PromptUnits` keeps those slots in
units of a few (attention.unit_members) so that decode attention reads each unit's prompt once for all its slots
(attention._prefix_kernel) rather than once per slot.

Each slot keeps its own copy of its prompt, so reading it from another member of the unit is only faster, never
different; the one rule is that a unit reads its prompt from a slot whose copy is intact: one still in the unit. A
slot leaves its unit when its sample is handed in (before its slot can take another prompt), and the unit then reads
from another member; a unit of one is dissolved.
"""

from __future__ import annotations

import torch

from execrl.transfer import to_device


class PromptUnits:
    """Units of the engine's slots, as attention.decode_attention's `shared` reads them: `units` [U, K + 2] int32 (each
    unit's prompt length, 0 for none; the slot its prompt is read from; its up to K slots, -1 for none) and `rows`
    [S, 3] int32 (each slot's unit, -1 for none; its index in the unit; the unit's prompt length, 0 for none), in the
    step's rows' terms where a step runs on some slots' rows (sync). Changed on the host, copied to the device before
    a decode step reads them. Only prompts of `shortest` tokens or more form units (attention.shared_from: shorter
    ones read about as fast from each slot's copy)."""

    def __init__(self, slots: int, members: int, device, shortest: int):
        self.members, self.shortest = members, shortest
        count = max(1, slots // 2)  # (a unit holds two slots at least)
        self.units = torch.zeros(count, members + 2, dtype=torch.int32, device=device)
        self.rows = torch.full((slots, 3), -1, dtype=torch.int32, device=device)
        self.clear()

    def clear(self) -> None:
        """No units (a generate call's start: every slot is free)."""
        self.unit_of: list[list[int]] = [[-1, 0, 0] for _ in range(self.rows.shape[0])]  # slot -> unit, index, length
        self.held: list[list[int]] = [[0, 0] + [-1] * self.members for _ in range(self.units.shape[0])]
        self.free = list(range(self.units.shape[0]))[::-1]
        self.changed, self.space = True, None

    @property
    def live(self) -> bool:
        return len(self.free) < self.units.shape[0]

    def admit(self, prompt_len: int, slots: list[int]) -> None:
        """`slots`: those one admission filled with one prompt of `prompt_len` tokens."""
        if prompt_len < self.shortest:
            return
        for i in range(0, len(slots), self.members):
            chunk = slots[i:i + self.members]
            if len(chunk) < 2:
                continue
            u = self.free.pop()
            self.held[u] = [prompt_len, chunk[0], *chunk, *[-1] * (self.members - len(chunk))]
            for j, s in enumerate(chunk):
                self.unit_of[s] = [u, j, prompt_len]
            self.changed = True

    def release(self, slots: list[int]) -> None:
        """These slots' samples are handed in: they leave their units (a unit left with one slot is dissolved)."""
        for s in slots:
            u, j, _ = self.unit_of[s]
            if u < 0:
                continue
            unit = self.held[u]
            self.unit_of[s], unit[2 + j] = [-1, 0, 0], -1
            rest = [r for r in unit[2:] if r >= 0]
            if len(rest) < 2:
                for r in rest:
                    self.unit_of[r] = [-1, 0, 0]
                self.held[u] = [0, 0] + [-1] * self.members
                self.free.append(u)
            elif unit[1] == s:
                unit[1] = rest[0]  # (its copy is intact: it is still in the unit)
            self.changed = True

    def sync(self, rows: list[int] | None = None) -> None:
        """The host's units onto the device (before a decode step reads them), for a step over every slot or over
        `rows` (the cache slots of a step's rows, engine._rows): the units' members and the row table then in those
        rows, a unit's source still a cache slot."""
        space = None if rows is None else tuple(rows)
        if not self.changed and space == self.space:
            return
        held, unit_of = self.held, self.unit_of
        if rows is not None:
            row = {s: r for r, s in enumerate(rows)}  # (a unit's slots are busy: each is one of the step's rows)
            held = [h[:2] + [row[s] if s >= 0 else -1 for s in h[2:]] for h in held]
            unit_of = [self.unit_of[s] for s in rows] + [[-1, 0, 0]] * (len(self.unit_of) - len(rows))
        to_device(held, self.units.device, torch.int32, out=self.units)  # (queued: no wait for the GPU)
        to_device(unit_of, self.rows.device, torch.int32, out=self.rows)
        self.changed, self.space = False, space
