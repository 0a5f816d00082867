"""The NodePools and EC2NodeClasses fminfra writes (fminfra/eks/constructs/karpenter_pools.py), against the
CRDs of the pinned Karpenter release (tests/data/karpenter/crd-*.json: JSON Schema, not the CEL rules)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from fminfra.core.versions import version
from fminfra.eks.constructs.karpenter_pools import KarpenterPoolSpec, ami_alias, node_class, node_pool
from fminfra.eks.rules import KARPENTER_NODECLASS_API, KARPENTER_NODEPOOL_API
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "karpenter"
SCHEMAS = {name: json.loads((DATA / f"crd-{name}-v1.json").read_text(encoding="utf-8")) for name in ("nodepool", "ec2nodeclass")}
ON_DEMAND = KarpenterPoolSpec(
    name="serve-g6e",
    instance_type="g6e.12xlarge",
    max_size=4,
    capacity_types=["on-demand", "spot"],
    zone_ids=["usw2-az1", "usw2-az2"],
    subnet_ids=["subnet-1", "subnet-2"],
    security_group_ids=["sg-1"],
    labels={"fminfra/serving": "llm"},
)
BLOCK = KarpenterPoolSpec(
    name="serve-p5",
    instance_type="p5.48xlarge",
    max_size=2,
    capacity_types=["reserved"],
    reservation_ids=["cr-0123456789abcdef0"],
    zone_ids=["usw2-az2"],
    subnet_ids=["subnet-2"],
    security_group_ids=["sg-1", "sg-efa"],
    taints=[],
)


def _valid(manifest: dict[str, Any], crd: str) -> None:
    schema = SCHEMAS[crd]
    assert manifest["apiVersion"] == f"{schema['group']}/{schema['version']}" and manifest["kind"] == schema["kind"]
    jsonschema.validate(manifest["spec"], schema["openAPIV3Schema"]["properties"]["spec"])


@pytest.mark.parametrize("spec", [ON_DEMAND, BLOCK], ids=["on-demand", "block"])
def test_manifests_are_valid_against_the_crds(spec: KarpenterPoolSpec) -> None:
    _valid(node_pool(spec), "nodepool")
    _valid(node_class(spec, role_name="role", ami_release=version("KARPENTER_AL2023_AMI_RELEASE")), "ec2nodeclass")
    assert KARPENTER_NODEPOOL_API == "karpenter.sh/v1" and KARPENTER_NODECLASS_API == "karpenter.k8s.aws/v1"


def test_the_crd_check_catches_a_wrong_field() -> None:
    """A test of the test: a field the CRD lacks, or a wrong capacity type operator, is refused."""
    pool = node_pool(ON_DEMAND)
    broken = copy.deepcopy(pool)
    broken["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    with pytest.raises(jsonschema.ValidationError):
        _valid(broken, "nodepool")
    nodeclass = node_class(ON_DEMAND, role_name="role", ami_release="v20260714")
    nodeclass["spec"]["metadataOptions"]["httpTokens"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        _valid(nodeclass, "ec2nodeclass")


def test_the_pool_is_the_groups() -> None:
    pool = node_pool(ON_DEMAND)
    requirements = {r["key"]: r["values"] for r in pool["spec"]["template"]["spec"]["requirements"]}
    assert requirements == {
        "node.kubernetes.io/instance-type": ["g6e.12xlarge"],
        "kubernetes.io/arch": ["amd64"],
        "karpenter.sh/capacity-type": ["on-demand", "spot"],
        "topology.k8s.aws/zone-id": ["usw2-az1", "usw2-az2"],
    }
    assert pool["spec"]["template"]["metadata"]["labels"] == {"fminfra/gpu-type": "g6e.12xlarge", "fminfra/serving": "llm"}
    assert pool["spec"]["template"]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert pool["spec"]["limits"] == {"nodes": "4", "nvidia.com/gpu": "16"}  # g6e.12xlarge: 4 GPUs
    assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "1"}]
    assert "terminationGracePeriod" not in pool["spec"]["template"]["spec"]  # never past a blocking PodDisruptionBudget


def test_a_block_pool_selects_its_reservation_and_takes_reserved_only() -> None:
    nodeclass = node_class(BLOCK, role_name="role", ami_release="v20260714")
    assert nodeclass["spec"]["capacityReservationSelectorTerms"] == [{"id": "cr-0123456789abcdef0"}]
    assert nodeclass["spec"]["securityGroupSelectorTerms"] == [{"id": "sg-1"}, {"id": "sg-efa"}]
    assert "networkInterfaces" not in nodeclass["spec"]  # Karpenter's own EFA layout for pods asking vpc.amazonaws.com/efa
    pool = node_pool(BLOCK)
    assert "taints" not in pool["spec"]["template"]["spec"]
    with pytest.raises(ValueError, match="capacity type reserved goes with reservation ids"):
        KarpenterPoolSpec(**{**BLOCK.__dict__, "reservation_ids": ()})


def test_the_ami_is_pinned() -> None:
    nodeclass = node_class(ON_DEMAND, role_name="role", ami_release=version("KARPENTER_AL2023_AMI_RELEASE"))
    assert nodeclass["spec"]["amiSelectorTerms"] == [{"alias": "al2023@v20260714"}]
    assert nodeclass["spec"]["metadataOptions"]["httpPutResponseHopLimit"] == 1
    for bad in ("latest", "20260714", "v2026071"):
        with pytest.raises(ValueError, match="vYYYYMMDD"):
            ami_alias(bad)
