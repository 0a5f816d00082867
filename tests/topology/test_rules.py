"""The network layers per instance type (docs/facts/instances.md#ec2-topology-network-layers) and the
label names they give (docs/facts/eks.md#network-node-layer-labels)."""

from __future__ import annotations

import pytest

from fminfra import catalog
from fminfra.topology import rules

# The EC2 guide's lists, as the fact quotes them (catalog types only).
FOUR_LAYERS = {"p6-b200.48xlarge", "p6-b300.48xlarge"}
THREE_LAYERS = {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6e-gb200.36xlarge"}


def test_the_catalog_layers_are_the_ec2_guides() -> None:
    for name, entry in catalog.CATALOG.items():
        expected = 4 if name in FOUR_LAYERS else 3 if name in THREE_LAYERS or name.startswith("g6e.") else None
        assert entry.network_layers == expected, name
    assert {n for n, e in catalog.CATALOG.items() if e.training} <= FOUR_LAYERS | THREE_LAYERS


def test_labels_count_from_the_top_and_take_hyperpod_names() -> None:
    assert rules.network_node_labels("ml.p6-b300.48xlarge") == tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3, 4))
    assert rules.network_node_labels("p5.48xlarge")[-1] == "topology.k8s.aws/network-node-layer-3"
    assert rules.network_node_labels("g6.48xlarge") == ()
    assert rules.network_node_labels("m5.large") == ()
    assert rules.network_node_labels("p5.48xlarge") == rules.HYPERPOD_LEVELS


def test_layer_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="count from 1"):
        rules.network_node_label(0)
