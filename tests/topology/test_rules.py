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


def test_job_levels_follow_the_orchestrator() -> None:
    """EKS: every layer the type has (fminfra's Kueue Topology holds each); HyperPod EKS: the three
    layers task governance schedules in, also on 4-layer types; () where EC2 reports no topology."""
    assert rules.job_topology_levels("p6-b200.48xlarge", hyperpod=False) == rules.network_node_labels("p6-b200.48xlarge")
    assert len(rules.job_topology_levels("p6-b200.48xlarge", hyperpod=False)) == 4
    assert rules.job_topology_levels("ml.p6-b200.48xlarge", hyperpod=True) == rules.HYPERPOD_LEVELS
    assert rules.job_topology_levels("ml.p5.48xlarge", hyperpod=True) == rules.HYPERPOD_LEVELS
    assert rules.job_topology_levels("g6e.12xlarge", hyperpod=False)[0] == "topology.k8s.aws/network-node-layer-1"
    for hyperpod in (False, True):
        assert rules.job_topology_levels("g6.xlarge", hyperpod=hyperpod) == ()
        assert rules.job_topology_levels("ml.g5.12xlarge", hyperpod=hyperpod) == ()
        assert rules.job_topology_levels("no-such.type", hyperpod=hyperpod) == ()
    # UltraServer domains are not offered: the catalog's p6e-gb200 row is unverified.
    assert rules.ULTRASERVER_LABEL not in rules.job_topology_levels("ml.p6e-gb200.36xlarge", hyperpod=True)


def test_kueue_topology_levels_end_with_the_hostname_and_fit_kueue() -> None:
    for layers in (3, 4):
        levels = rules.kueue_topology_levels(layers)
        assert levels[-1] == rules.HOSTNAME_LABEL and levels[:-1] == tuple(rules.network_node_label(n) for n in range(1, layers + 1))
        assert len(levels) <= rules.KUEUE_TOPOLOGY_LEVELS_MAX
    assert rules.kueue_topology_name(3) == "fminfra-network-3-layers"
    assert len(rules.kueue_topology_levels(15)) == rules.KUEUE_TOPOLOGY_LEVELS_MAX


@pytest.mark.parametrize("layers", [0, 16])
def test_a_topology_kueue_would_refuse_is_refused(layers: int) -> None:
    with pytest.raises(ValueError) as info:
        rules.kueue_topology_levels(layers)
    assert str(info.value) == f"a Kueue Topology holds 1 to 16 levels, the hostname one of them: layers must be 1 to 15, got {layers}"


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        ("v1.2.2-eksbuild.1", True),
        ("v1.6.0-eksbuild.1", True),
        ("v1.10.0-eksbuild.2", True),
        ("v1.2.1-eksbuild.3", False),
        ("v1.1.3-eksbuild.1", False),
    ],
)
def test_task_governance_schedules_topology_aware_from_1_2_2(version: str, supported: bool) -> None:
    assert rules.task_governance_supports_tas(version) is supported


@pytest.mark.parametrize("version", ["1.6.0", "v1.6-eksbuild.1", "v1.6.0-eksbuild", "latest"])
def test_an_addon_version_of_another_form_is_refused(version: str) -> None:
    with pytest.raises(ValueError) as info:
        rules.addon_version(version)
    assert str(info.value) == f"add-on version must be an add-on build such as v1.2.3-eksbuild.1 (pinned; never 'latest'), got {version!r}"


def test_no_team_mixes_topology_aware_and_plain_types() -> None:
    """p5 is held beside g6 (no topology): plain; then p4d, held beside p5: plain; p5e alone keeps its layers."""
    layers = {"p5.48xlarge": 3, "p4d.24xlarge": 3, "p5e.48xlarge": 3, "p6-b200.48xlarge": 4}
    teams = [{"p5.48xlarge", "g6.xlarge"}, {"p5.48xlarge", "p4d.24xlarge"}, {"p5e.48xlarge", "p6-b200.48xlarge"}]
    assert rules.kueue_topology_types(layers, teams) == {"p5e.48xlarge": 3, "p6-b200.48xlarge": 4}
    assert rules.kueue_topology_types(layers, [{"p5.48xlarge"}, {"p4d.24xlarge", "p5e.48xlarge"}]) == layers
    assert rules.kueue_topology_types(layers, [{"g6.xlarge"}]) == layers  # a plain-only team mixes nothing


def test_topology_regions_are_the_ec2_guides() -> None:
    assert rules.topology_in_region("us-west-2") and rules.topology_in_region("il-central-1")
    # accepted regions the guide does not list: no network-node-layer labels there
    for region in ("cn-northwest-1", "us-gov-east-1", "eu-south-1", "ca-west-1", "ap-southeast-5"):
        assert not rules.topology_in_region(region), region
    assert {"il-central-1", "us-gov-west-1"} == rules.EC2_TOPOLOGY_REGIONS - rules.RESERVATION_TOPOLOGY_REGIONS
