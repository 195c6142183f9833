"""PolyDL over VITA's scratchpads (tandem/flows/vita.py ``polydl_ranked``, poly_rank's ``rank_staged``): the
tilings ranked by the reuses of their DRAM arrays, placed in the input and weight buffers."""

from __future__ import annotations

from compiler.ops import vita
from compiler.ops.nn import ConvShape
from tandem.flows.targets import load_target
from tandem.flows.vita import machine_costs, polydl_ranked
from tandem.flows.vita_layers import tiled

TARGET = load_target("vita")
LAYER = ConvShape(7, 7, 32, 32, 3, 1, 1)   # 2 channel blocks each way, 7 output rows


def tilings() -> list[vita.Tiling]:
    return [t for t in vita.rank_tilings(tiled(LAYER, TARGET.spec), 0, spec=TARGET.spec,
                                         costs=machine_costs(TARGET)) if t.vthread_axis == "oc"]


def test_every_tiling_is_ranked_once_cheapest_first():
    ranked = polydl_ranked(LAYER, tilings(), TARGET)
    assert sorted(map(str, (t for t, _ in ranked))) == sorted(map(str, tilings()))
    costs = [c for _, c in ranked]
    assert costs == sorted(costs)


def test_one_tile_for_the_whole_layer_reuses_nothing_from_dram():
    """7 rows x 2 oc blocks x 2 ic blocks: every input and weight is loaded once, so there is no reuse to
    place and the cost is 0; it ranks first (ties: bigger tiles first)."""
    whole = vita.Tiling(7, 2, 2)
    ranked = dict(polydl_ranked(LAYER, tilings(), TARGET))
    assert ranked[whole] == 0
    assert polydl_ranked(LAYER, tilings(), TARGET)[0][0] == whole


def test_tiles_that_reload_the_weights_cost_more_than_one_that_does_not():
    """One output row per tile (7 row tiles) loads every weight 7 times; the whole-height tile once."""
    ranked = dict(polydl_ranked(LAYER, [vita.Tiling(1, 2, 2), vita.Tiling(7, 2, 2)], TARGET))
    assert ranked[vita.Tiling(1, 2, 2)] > ranked[vita.Tiling(7, 2, 2)] == 0
