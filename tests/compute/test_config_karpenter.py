"""compute.eks.karpenter: where it is allowed, the system node group it needs, and the inference
groups a Karpenter pool can take (docs/facts/karpenter.md)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fminfra.config import parse_config, read_yaml
from fminfra.core.errors import ConfigError
from fminfra.eks.rules import KARPENTER_NEEDS_SYSTEM_NODES

ROOT = Path(__file__).resolve().parents[2]
KARPENTER = read_yaml(ROOT / "tests" / "configs" / "eks-karpenter.yaml")
STAGING = read_yaml(ROOT / "config" / "staging.yaml")  # HyperPod EKS


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return "\n".join(info.value.problems)


def _with(**group: Any) -> dict[str, Any]:
    data = copy.deepcopy(KARPENTER)
    data["compute"]["inference_node_groups"][0].update(group)
    return data


def test_the_test_config_is_valid_and_defaults_to_two_system_nodes() -> None:
    compute = parse_config(KARPENTER, "f.yaml").compute
    assert compute.karpenter
    assert compute.system_node_count() == 2
    # no "nothing scales the group" warning (Karpenter does); only spot's service-linked role
    assert [w.path for w in compute.warnings()] == ["eks.karpenter.capacity_types"]


def test_off_by_default() -> None:
    data = copy.deepcopy(KARPENTER)
    del data["compute"]["eks"]["karpenter"]
    compute = parse_config(data, "f.yaml").compute
    assert not compute.karpenter
    assert compute.eks is not None and compute.eks.karpenter.capacity_types == ["on-demand"]


def test_untainted_groups_do_not_replace_the_system_node_group() -> None:
    """Karpenter's nodes come and go: an untainted group is no home for the controller or CoreDNS."""
    data = _with(taints=[], desired_size=1, min_size=1)
    compute = parse_config(data, "f.yaml").compute
    assert compute.untainted_node_sources() == []
    assert compute.system_node_count() == 2


def test_refuses_no_system_nodes() -> None:
    data = copy.deepcopy(KARPENTER)
    data["compute"]["eks"]["system_nodes"] = {"count": 0}
    assert f"compute.eks.system_nodes.count: {KARPENTER_NEEDS_SYSTEM_NODES}" in _error(data)


def test_refuses_hyperpod_eks() -> None:
    data = copy.deepcopy(STAGING)
    data["compute"].setdefault("eks", {})["karpenter"] = {"enabled": True}
    assert "compute.eks.karpenter.enabled: HyperPod EKS scales its nodes with HyperPod's own managed autoscaling" in _error(data)


def test_refuses_ultraservers_saying_dra() -> None:
    data = _with(instance_type="p6e-gb200.36xlarge", capacity={"type": "capacity-block", "reservation_ids": ["cr-0123456789abcdef0"]})
    message = _error(data)
    assert "compute.inference_node_groups[0].instance_type: group 'serve-g6e': UltraServer instances (p6e-gb200)" in message
    assert "DRA is not supported in Karpenter or EKS Auto Mode" in message


def test_refuses_an_odcr_of_fminfra() -> None:
    message = _error(_with(capacity={"type": "odcr"}))
    assert (
        "compute.inference_node_groups[0].capacity.type: group 'serve-g6e': a Karpenter pool takes on-demand, reservation, capacity-block, not odcr"
        in message
    )


def test_refuses_a_scheduled_block() -> None:
    data = copy.deepcopy(KARPENTER)
    data["compute"]["inference_node_groups"][1]["capacity"].update(starts_at="2027-01-04T11:30:00Z", ends_at="2027-01-11T11:30:00Z")
    data["compute"]["inference_node_groups"][1]["desired_size"] = 1
    data["compute"]["inference_node_groups"][1]["min_size"] = 1
    assert "compute.inference_node_groups[1].capacity.starts_at: group 'serve-p5': Karpenter launches into a Capacity Block" in _error(data)


def test_refuses_cluster_placement() -> None:
    assert "compute.inference_node_groups[0].placement: group 'serve-g6e': fminfra's Karpenter pools spread" in _error(
        _with(placement="cluster")
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], "must list at least one capacity type; allowed: on-demand, spot"),
        (["spot", "spot"], "'spot' is listed twice"),
        (["reserved"], "compute.eks.karpenter.capacity_types"),
    ],
)
def test_capacity_types(value: list[str], expected: str) -> None:
    data = copy.deepcopy(KARPENTER)
    data["compute"]["eks"]["karpenter"]["capacity_types"] = value
    assert expected in _error(data)


def test_min_size_is_not_kept_and_says_so() -> None:
    compute = parse_config(_with(min_size=1, desired_size=1), "f.yaml").compute
    assert [(w.path, "min_size (1) and desired_size are not kept" in w.message) for w in compute.warnings()] == [
        ("inference_node_groups[0].min_size", True),
        ("eks.karpenter.capacity_types", False),  # spot's service-linked role
    ]


def test_the_capacity_type_literal_is_the_rule() -> None:
    from typing import get_args

    from fminfra.compute.config import KarpenterCapacityType
    from fminfra.eks.rules import KARPENTER_CAPACITY_TYPES

    assert get_args(KarpenterCapacityType) == KARPENTER_CAPACITY_TYPES


def test_group_names_are_kubernetes_names() -> None:
    message = _error(_with(name="Serve-G6e"))
    assert "compute.inference_node_groups[0].name: group 'Serve-G6e' names its NodePool and EC2NodeClass: must be a DNS label" in message


def test_plan_says_karpenter() -> None:
    from fminfra.ops.plan import group_plans

    rows = {r.name: r for r in group_plans(parse_config(KARPENTER, "f.yaml"))}
    assert rows["serve-g6e"].count_text == "0-4"
    assert any("Karpenter pool: nodes for pending pods, up to 4, capacity on-demand, spot" in n for n in rows["serve-g6e"].notes)
    assert any("capacity reserved" in n for n in rows["serve-p5"].notes)
