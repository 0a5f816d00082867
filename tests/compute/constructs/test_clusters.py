"""`Clusters`: the EKS cluster, the HyperPod cluster and the inference node groups as one construct
with typed props, whose resources stay at the construct paths (and logical ids) they always had."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from fminfra.compute.constructs.clusters import Clusters, ClustersProps, HyperPodOnEksSpec, KueueSpec
from fminfra.core.errors import ValidationError
from tests.conftest import Synth


def test_hyperpod_on_eks_builds_both_clusters_in_the_stack(synth: Synth) -> None:
    compute = synth.stages["staging"].compute
    clusters = compute.clusters
    assert clusters.eks is not None and clusters.hyperpod is not None and clusters.dependencies is not None
    # the resources live in the Compute stack, where their paths (and so logical ids) have always been
    assert clusters.node.children == []
    assert clusters.hyperpod.node.path == "staging/Compute/HyperPod"
    assert clusters.eks.node.path == "staging/Compute/Eks"
    assert clusters.dependencies.node.path == "staging/Compute/HyperPodDependencies"
    assert clusters.task_governance is not None
    lids = set(synth.template("staging", "Compute")["Resources"])
    assert {
        compute.resolve(clusters.hyperpod.cluster.logical_id),
        compute.resolve(clusters.eks.cluster.node.default_child.logical_id),
    } <= lids  # type: ignore[union-attr]


def test_slurm_builds_no_eks_part(synth: Synth) -> None:
    clusters = synth.stages["dev"].compute.clusters
    assert clusters.hyperpod is not None and clusters.eks is None and clusters.dependencies is None and clusters.task_governance is None


def _props(**kwargs: object) -> ClustersProps:
    stack = cdk.Stack(cdk.App(), "S")
    role = iam.Role(stack, "R", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    return ClustersProps(region="us-east-1", node_role=role, **kwargs)  # type: ignore[arg-type]


def test_hyperpod_on_eks_without_both_clusters_is_refused() -> None:
    props = _props(hyperpod_on_eks=HyperPodOnEksSpec(dependencies_commit="0" * 40, dependencies_values={}))
    with pytest.raises(ValidationError, match="hyperpod_on_eks needs both eks and hyperpod"):
        Clusters(cdk.Stack.of(props.node_role), "Clusters", props)


def test_eks_parts_without_eks_are_refused() -> None:
    props = _props(kueue=KueueSpec(version="0.14.1", flavors=[], teams={}))
    with pytest.raises(ValidationError, match="need eks"):
        Clusters(cdk.Stack.of(props.node_role), "Clusters", props)
