"""Karpenter NodePools and EC2NodeClasses as Kubernetes manifests, one pair per inference group
(compute.eks.karpenter): the group's instance type (a GPU type of the catalog), the zones and
private subnets of the network, its capacity types, labels and taints, its max_size as the pool's
limit, and disruption one node at a time through the Eviction API (docs/facts/karpenter.md).

EFA: the node classes name no `networkInterfaces` (v1.11+): that list applies to every type a
class launches; Karpenter attaches one `efa` interface per EFA of the type itself when a pod
requests `vpc.amazonaws.com/efa` (docs/facts/karpenter.md#karpenter-efa-network-interfaces).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fminfra import catalog
from fminfra.compute.constructs.launch_template import ROOT_DEVICE_AMAZON_LINUX
from fminfra.eks.rules import (
    DEFAULT_GPU_TAINT,
    INSTANCE_TYPE_LABEL,
    KARPENTER_CAPACITY_TYPE_LABEL,
    KARPENTER_CONSOLIDATE_AFTER,
    KARPENTER_CONSOLIDATION_POLICY,
    KARPENTER_DISRUPTION_NODES,
    KARPENTER_EXPIRE_AFTER,
    KARPENTER_NODECLASS_API,
    KARPENTER_NODEPOOL_API,
    KARPENTER_RESERVED,
)

# Well-known labels of the pinned release (docs/facts/karpenter.md#karpenter-api-versions).
CAPACITY_TYPE_LABEL = KARPENTER_CAPACITY_TYPE_LABEL
ZONE_ID_LABEL = "topology.k8s.aws/zone-id"
ARCH_LABEL = "kubernetes.io/arch"
GPU_TYPE_LABEL = "fminfra/gpu-type"  # as InferenceNodeGroup labels its nodes
_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


def ami_alias(release: str) -> str:
    """The EC2NodeClass alias of a pinned EKS-optimized AL2023 release (`v20260714`): never
    `latest` (docs/facts/karpenter.md#karpenter-al2023-alias)."""
    if not release.startswith("v") or not release[1:].isdigit() or len(release) != 9:
        raise ValueError(f"an AL2023 AMI release is vYYYYMMDD, got {release!r}")
    return f"al2023@{release}"


@dataclass(frozen=True, kw_only=True)
class KarpenterPoolSpec:
    """One NodePool and its EC2NodeClass.

    name: the inference group's name (a Kubernetes name: lowercase).
    instance_type: a GPU type of the catalog (EC2 form).
    max_size: the most nodes the pool launches (`limits.nodes`, and the GPUs they carry).
    capacity_types: on-demand and/or spot; or `reserved` alone, with `reservation_ids`.
    reservation_ids: the reservations or Capacity Blocks the class selects (by id). Default: none.
    zone_ids: the AZ IDs the pool launches in.
    subnet_ids, security_group_ids: what the class launches into (tokens allowed).
    labels: the group's labels; `fminfra/gpu-type` is always added.
    taints: (key, value, effect). Default: the GPU taint.
    root_volume_gib: the root gp3 volume.
    """

    name: str
    instance_type: str
    max_size: int
    capacity_types: Sequence[str]
    zone_ids: Sequence[str]
    subnet_ids: Sequence[str]
    security_group_ids: Sequence[str]
    reservation_ids: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[tuple[str, str, str]] = (DEFAULT_GPU_TAINT,)
    root_volume_gib: int = 200

    def __post_init__(self) -> None:
        if (KARPENTER_RESERVED in self.capacity_types) != bool(self.reservation_ids):
            raise ValueError(f"pool {self.name!r}: capacity type reserved goes with reservation ids (Karpenter does no open matching)")
        if not self.capacity_types or not self.zone_ids or not self.subnet_ids:
            raise ValueError(f"pool {self.name!r}: needs capacity types, zones and subnets")


def node_class(spec: KarpenterPoolSpec, *, role_name: str, ami_release: str, tags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The pool's EC2NodeClass: the pinned accelerated AL2023 AMI, the node role, the subnets,
    security groups and reservations by id, an encrypted gp3 root volume, IMDSv2 with hop limit 1."""
    body: dict[str, Any] = {
        "role": role_name,
        "amiSelectorTerms": [{"alias": ami_alias(ami_release)}],
        "subnetSelectorTerms": [{"id": s} for s in spec.subnet_ids],
        "securityGroupSelectorTerms": [{"id": g} for g in spec.security_group_ids],
        "blockDeviceMappings": [
            {
                "deviceName": ROOT_DEVICE_AMAZON_LINUX,
                "rootVolume": True,
                "ebs": {"volumeSize": f"{spec.root_volume_gib}Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True},
            }
        ],
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
    }
    if spec.reservation_ids:
        body["capacityReservationSelectorTerms"] = [{"id": r} for r in spec.reservation_ids]
    if tags:
        body["tags"] = dict(tags)
    return {"apiVersion": KARPENTER_NODECLASS_API, "kind": "EC2NodeClass", "metadata": {"name": spec.name}, "spec": body}


def node_pool(spec: KarpenterPoolSpec) -> dict[str, Any]:
    """The NodePool: the group's one instance type in the given zones and capacity types, its
    labels and taints, at most max_size nodes, disrupted one at a time."""
    gpu = catalog.get(spec.instance_type)
    requirements = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [gpu.name]},
        {"key": ARCH_LABEL, "operator": "In", "values": [_ARCH[gpu.architecture]]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": list(spec.capacity_types)},
        {"key": ZONE_ID_LABEL, "operator": "In", "values": list(spec.zone_ids)},
    ]
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": KARPENTER_NODECLASS_API.split("/")[0], "kind": "EC2NodeClass", "name": spec.name},
        "requirements": requirements,
        "expireAfter": KARPENTER_EXPIRE_AFTER,
    }
    if spec.taints:
        template_spec["taints"] = [{"key": k, "value": v, "effect": e} if v else {"key": k, "effect": e} for k, v, e in spec.taints]
    return {
        "apiVersion": KARPENTER_NODEPOOL_API,
        "kind": "NodePool",
        "metadata": {"name": spec.name},
        "spec": {
            "template": {"metadata": {"labels": {GPU_TYPE_LABEL: gpu.name, **spec.labels}}, "spec": template_spec},
            "limits": {"nodes": str(spec.max_size), "nvidia.com/gpu": str(spec.max_size * gpu.gpus)},
            "disruption": {
                "consolidationPolicy": KARPENTER_CONSOLIDATION_POLICY,
                "consolidateAfter": KARPENTER_CONSOLIDATE_AFTER,
                "budgets": [{"nodes": KARPENTER_DISRUPTION_NODES}],
            },
        },
    }
