"""The engine's units of slots that hold one prompt (rollout/units.py): which slots form them, and the slot a unit
reads its prompt from as its samples are handed in."""

from execrl.rollout.attention import SHARED_FROM, shared_from, unit_members
from execrl.rollout.units import PromptUnits


def test_a_prompts_slots_form_units_of_a_few_and_only_from_a_long_enough_prompt():
    units = PromptUnits(slots=16, members=3, device="cpu", shortest=10)
    units.admit(9, [0, 1, 2])  # shorter than `shortest`: each slot reads its own copy
    assert not units.live
    units.admit(10, [3, 4, 5, 6, 7, 8, 9])  # units of 3, and 9 alone in none
    units.sync()
    held, rows = units.units.tolist(), units.rows.tolist()
    assert sorted((h[0], h[1], tuple(h[2:])) for h in held if h[0]) == [(10, 3, (3, 4, 5)), (10, 6, (6, 7, 8))]
    assert rows[9] == rows[0] == [-1, 0, 0] and rows[4][1:] == [1, 10] and rows[8][1:] == [2, 10]
    # the rule: the same keys-and-values size per layer from every model's shape (1.5B: 2 kv heads of 128)
    assert shared_from(2, 128) == 256 and shared_from(2, 64) == 512 and shared_from(4, 128) * 4 * 128 == SHARED_FROM
    assert unit_members(12, 2) == 10 and unit_members(14, 2) == 9 and unit_members(64, 1) == 0


def test_a_unit_reads_from_a_slot_still_in_it_and_a_unit_of_one_is_dissolved():
    units = PromptUnits(slots=8, members=4, device="cpu", shortest=1)
    units.admit(5, [2, 3, 4])
    (u,) = [i for i, h in enumerate(units.held) if h[0]]
    units.release([2])  # the slot it read from is handed in (its slot may take another prompt next)
    assert units.held[u][1] in (3, 4) and units.held[u][2:] == [-1, 3, 4, -1]
    units.release([6])  # (a slot in no unit)
    units.release([3])
    units.sync()
    assert not units.live and units.rows.tolist()[4] == [-1, 0, 0] and units.units.tolist()[u][0] == 0
    units.admit(5, [0, 1])  # the freed unit is used again
    assert units.live
