"""The placement of an acceptance job (fminfra/ops/accept/node/placement.py): spans per level, the phrase the
table and the report carry, and the row's status; each status shown on the input that gives it."""

from __future__ import annotations

from fminfra.ops.accept.node.checks import Check
from fminfra.ops.accept.node.placement import Level, Placement, busbw_by_placement, placement_check

LEVELS = tuple(Level(f"layer-{n}", f"layer-{n} domain", f"layer-{n} domains") for n in (1, 2, 3))


def _nodes(*leaves: str) -> dict[str, dict[str, str]]:
    return {f"n{i}": {"layer-1": "a", "layer-2": "b", "layer-3": leaf} for i, leaf in enumerate(leaves)}


def test_one_domain_passes_and_a_spread_warns() -> None:
    inside = Placement(LEVELS, _nodes("c", "c"))
    assert inside.spans() == {"layer-1": 1, "layer-2": 1, "layer-3": 1}
    assert inside.label() == "inside one layer-3 domain"
    assert placement_check("nccl", "g", inside, "x").status == "PASS"
    spread = Placement(LEVELS, _nodes("c", "d"))
    assert spread.label() == "across 2 layer-3 domains, inside one layer-2 domain"
    check = placement_check("nccl", "g", spread, "x")
    assert (check.status, check.figure) == ("WARN", "1 1 2 domains")
    wide = Placement(
        LEVELS, {"n0": {"layer-1": "a", "layer-2": "b", "layer-3": "c"}, "n1": {"layer-1": "z", "layer-2": "y", "layer-3": "x"}}
    )
    assert wide.label() == "across 2 layer-3 domains"


def test_a_node_without_a_domain_warns() -> None:
    """A node missing a level's label counts as its own domain, and the row names it."""
    nodes = _nodes("c", "c")
    nodes["n1"]["layer-3"] = ""
    check = placement_check("nccl", "g", Placement(LEVELS, nodes), "x")
    assert check.status == "WARN" and "no domain recorded for n1" in check.detail


def test_unknown_and_no_topology() -> None:
    unknown = Placement(LEVELS, unknown="Forbidden")
    assert unknown.label() == "placement unknown (Forbidden)"
    assert placement_check("nccl", "g", unknown, "x").status == "WARN"
    assert unknown.to_json()["spans"] == {}
    flat = Placement((), {"n0": {}, "n1": {}})
    assert flat.label() == "no network topology" and placement_check("nccl", "g", flat, "x").status == "PASS"


def test_busbw_is_kept_with_its_placement() -> None:
    checks = [Check("nccl all_reduce g", "PASS", "313.29 GB/s", ""), Check("nccl all_reduce h", "FAIL", "-", "")]
    placements = {"g": Placement(LEVELS, _nodes("c", "d")), "h": Placement(LEVELS, unknown="gone")}
    assert busbw_by_placement(checks, placements) == {
        "g": {
            "placement": "across 2 layer-3 domains, inside one layer-2 domain",
            "spans": {"layer-1": 1, "layer-2": 1, "layer-3": 2},
            "all_reduce_busbw_gbps": 313.29,
        },
        "h": {"placement": "placement unknown (gone)", "spans": {}, "all_reduce_busbw_gbps": None},
    }
