"""The Kubernetes objects HyperPod's managed autoscaling reads: one `HyperpodNodeClass` listing the
autoscaled instance groups and one NodePool of it. HyperPod runs the Karpenter and ships neither
object (docs/facts/hyperpod.md#hyperpod-autoscaling-node-class).

They are applied after the HyperPod cluster resource: AWS creates them once the cluster's
autoscaling is `InService`; whether CloudFormation's CREATE_COMPLETE of the cluster implies that is
not published (docs/facts/hyperpod.md#hyperpod-autoscaling-cfn-order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_eks_v2 as eks

from fminfra.core.errors import ValidationError
from fminfra.eks.rules import KARPENTER_CONSOLIDATE_AFTER, KARPENTER_CONSOLIDATION_POLICY, KARPENTER_DISRUPTION_NODES
from fminfra.hyperpod.constructs.cluster import HyperPodCluster
from fminfra.hyperpod.rules import AUTOSCALING_MAX_GROUPS, NODE_CLASS_API, NODE_CLASS_KIND, NODE_POOL_API

# The one NodeClass and NodePool fminfra creates.
AUTOSCALING_NAME = "hyperpod-autoscaled"
# The architecture HyperPod's provider supports (docs/facts/hyperpod.md#hyperpod-autoscaling-node-class).
ARCH_LABEL = "kubernetes.io/arch"
ARCH = "amd64"
# HyperPod replaces and patches its own nodes; AWS's sample pool never expires them.
EXPIRE_AFTER = "Never"


def node_class(groups: Sequence[str]) -> dict[str, Any]:
    """The HyperpodNodeClass of the autoscaled instance groups (1-10)."""
    if not 1 <= len(groups) <= AUTOSCALING_MAX_GROUPS:
        raise ValidationError(f"a HyperpodNodeClass lists 1-{AUTOSCALING_MAX_GROUPS} instance groups, got {len(groups)}")
    return {
        "apiVersion": NODE_CLASS_API,
        "kind": NODE_CLASS_KIND,
        "metadata": {"name": AUTOSCALING_NAME},
        "spec": {"instanceGroups": list(groups)},
    }


def node_pool() -> dict[str, Any]:
    """The NodePool of the class: any of its groups' instance types, amd64; empty or underutilized
    nodes consolidated one at a time through the Eviction API (which honours PodDisruptionBudgets)."""
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": AUTOSCALING_NAME},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": NODE_CLASS_API.split("/")[0], "kind": NODE_CLASS_KIND, "name": AUTOSCALING_NAME},
                    "expireAfter": EXPIRE_AFTER,
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "Exists"},
                        {"key": ARCH_LABEL, "operator": "In", "values": [ARCH]},
                    ],
                }
            },
            "disruption": {
                "consolidationPolicy": KARPENTER_CONSOLIDATION_POLICY,
                "consolidateAfter": KARPENTER_CONSOLIDATE_AFTER,
                "budgets": [{"nodes": KARPENTER_DISRUPTION_NODES}],
            },
        },
    }


def add_autoscaling_manifests(cluster: eks.Cluster, hyperpod: HyperPodCluster, groups: Sequence[str]) -> eks.KubernetesManifest:
    """The NodeClass and NodePool on `cluster`, after the HyperPod cluster resource."""
    manifest = cluster.add_manifest("HyperPodAutoscaling", node_class(groups), node_pool())
    manifest.node.add_dependency(hyperpod.cluster)
    return manifest
