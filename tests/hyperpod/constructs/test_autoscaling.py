"""HyperPod's managed autoscaling (compute.eks.autoscaling): the config's rules, the construct's own
checks, and the synthesized test config (tests/configs/hp-eks-autoscaling.yaml): the cluster's
AutoScaling, NodeProvisioningMode and ClusterRole as the registry schema allows them (and a broken
value refused), the autoscaler's role as AWS documents it, the NodeClass and NodePool after the
cluster (docs/facts/hyperpod.md#hyperpod-autoscaling-api, #hyperpod-autoscaling-cluster-role,
#hyperpod-autoscaling-node-class)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam

from fminfra.app.synth import build_app
from fminfra.config import load_config, parse_config
from fminfra.core.errors import ConfigError, ValidationError
from fminfra.hyperpod.constructs.autoscaling import AUTOSCALING_NAME
from fminfra.hyperpod.constructs.cluster import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from fminfra.hyperpod.rules import (
    AUTOSCALER_KMS_ACTIONS,
    AUTOSCALER_NODE_ACTIONS,
    AUTOSCALER_PRINCIPAL,
    NODE_CLASS_API,
    NODE_CLASS_KIND,
)
from tests.conftest import ROOT
from tests.contract import registry
from tests.contract.registry import Resolver, Stack

CONFIG = ROOT / "tests" / "configs" / "hp-eks-autoscaling.yaml"
AUTOSCALING = yaml.safe_load(CONFIG.read_text())
INFERENCE_ONLY = yaml.safe_load((ROOT / "tests" / "configs" / "eks-inference-only.yaml").read_text())


def _problems(base: dict[str, Any], changes: dict[str, Any]) -> list[str]:
    data = copy.deepcopy(base)
    for path, value in changes.items():
        node: Any = data
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[parts[-1]] = value
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return info.value.problems


def test_the_test_config_is_valid() -> None:
    cfg = parse_config(copy.deepcopy(AUTOSCALING), "f.yaml")
    assert cfg.compute.autoscaled_groups == ["burst"]


def test_shipped_configs_leave_autoscaling_off() -> None:
    for path in sorted((ROOT / "config").glob("*.yaml")):
        assert load_config(path).compute.autoscaled_groups == [], path


REJECTIONS = [
    (
        INFERENCE_ONLY,
        {"compute.eks.autoscaling": {"enabled": True, "instance_groups": ["x"]}},
        "f.yaml: compute.eks.autoscaling: HyperPod's managed autoscaling (Karpenter run by HyperPod, on continuous provisioning) "
        "is for HyperPod orchestrated by EKS only; allowed with orchestrator none: enabled false and no instance_groups",
    ),
    (
        AUTOSCALING,
        {"compute.instance_groups.1.count": 2},
        "f.yaml: compute.instance_groups[1].count: group 'burst' is scaled by HyperPod's Karpenter, which starts it at 0 nodes "
        "(and scales any others down to 0); set count: 0, got 2",
    ),
    (
        AUTOSCALING,
        {
            "compute.instance_groups.1.capacity": {
                "type": "training-plan",
                "training_plan_arn": "arn:aws:sagemaker:us-west-2:555555555555:training-plan/hp-as-p5",
            }
        },
        "f.yaml: compute.instance_groups[1].capacity.type: group 'burst': HyperPod's Karpenter scales on-demand groups only "
        "(not a training plan); allowed: on-demand, got training-plan",
    ),
    (
        AUTOSCALING,
        {"compute.instance_groups.1.deep_health_checks": ["instance_stress"]},
        "f.yaml: compute.instance_groups[1].deep_health_checks: group 'burst': HyperPod's Karpenter takes no group with deep "
        "health checks (60-90 minutes while pods wait); allowed: [] or unset, got instance_stress",
    ),
    (
        AUTOSCALING,
        {"compute.eks.autoscaling.instance_groups": ["spare"]},
        "f.yaml: compute.eks.autoscaling.instance_groups[0]: 'spare' is not an instance group; allowed: train, burst",
    ),
    (
        AUTOSCALING,
        {"compute.eks.autoscaling.instance_groups": []},
        "f.yaml: compute.eks.autoscaling.instance_groups: name the HyperPod instance groups HyperPod's Karpenter scales: 1-10 "
        "groups of compute.instance_groups (a NodeClass lists at most 10), got 0",
    ),
    (
        AUTOSCALING,
        {"compute.eks.autoscaling.enabled": False},
        "f.yaml: compute.eks.autoscaling.instance_groups: lists instance groups but enabled is false; set enabled: true or drop the list",
    ),
    (
        AUTOSCALING,
        {"compute.eks.karpenter": {"enabled": True}},
        "f.yaml: compute.eks.karpenter.enabled: HyperPod EKS scales its nodes with HyperPod's own managed autoscaling "
        "(compute.eks.autoscaling), not a second Karpenter; allowed with orchestrator eks: false",
    ),
    (
        AUTOSCALING,
        {"compute.eks.autoscaling.instance_groups": ["burst", "burst"]},
        "f.yaml: compute.eks.autoscaling.instance_groups[1]: 'burst' is listed twice",
    ),
]


@pytest.mark.parametrize(("base", "changes", "expected"), REJECTIONS)
def test_config_rejections(base: dict[str, Any], changes: dict[str, Any], expected: str) -> None:
    assert expected in _problems(base, changes)


def test_an_autoscaled_group_gets_no_deep_health_checks_by_default() -> None:
    from fminfra.compute.stack.clusters import hyperpod_instance_groups as groups_of

    groups = {g.name: g for g in groups_of(parse_config(copy.deepcopy(AUTOSCALING), "f.yaml"))}
    assert groups["burst"].effective_deep_health_checks == []
    assert groups["train"].effective_deep_health_checks == ["InstanceStress", "InstanceConnectivity"]


# ---- The construct's own checks ----------------------------------------------------------------


def _cluster(**changes: Any) -> None:
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0)
    props = dict(
        cluster_name="c",
        instance_groups=[
            HyperPodInstanceGroup(name="fixed", instance_type="ml.m5.12xlarge", instance_count=1),
            HyperPodInstanceGroup(name="burst", instance_type="ml.p5.48xlarge", instance_count=0, deep_health_checks=[]),
        ],
        execution_role=iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")),
        subnets=vpc.isolated_subnets[:1],
        security_groups=[ec2.SecurityGroup(stack, "Sg", vpc=vpc)],
        lifecycle_source_s3_uri="s3://sagemaker-b/lifecycle",
        eks_cluster_arn="arn:aws:eks:us-west-2:111111111111:cluster/e",
        autoscaled_groups=["burst"],
    )
    props.update(changes)
    HyperPodCluster(stack, "HP", HyperPodClusterProps(**props))  # type: ignore[arg-type]


def test_the_construct_takes_a_valid_autoscaled_group() -> None:
    _cluster()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"eks_cluster_arn": None}, "needs an EKS orchestrator"),
        ({"node_recovery": "None"}, "node_recovery must be Automatic with autoscaled_groups"),
        ({"autoscaled_groups": ["spare"]}, "'spare' is not an instance group"),
        ({"autoscaled_groups": ["fixed"]}, "set count: 0, got 1"),
        ({"autoscaled_groups": [f"g{i}" for i in range(11)]}, "1-10 distinct groups"),
        (
            {"instance_groups": [HyperPodInstanceGroup(name="burst", instance_type="ml.p5.48xlarge", instance_count=0)]},
            "no group with deep health checks",
        ),
    ],
)
def test_the_construct_refuses(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError, match=expected):
        _cluster(**changes)


# ---- The synthesized test config -----------------------------------------------------------------


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> list[Stack]:
    outdir = tmp_path_factory.mktemp("hp-as.out")
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(outdir), context=context)
    build_app([load_config(CONFIG)], app=app)
    app.synth()
    report = json.loads((Path(outdir) / "validation-report.json").read_text())
    assert all(p["violations"] == [] for p in report["pluginReports"])
    return registry.assembly_stacks(Path(outdir))


def _compute(stacks: list[Stack]) -> Stack:
    return next(s for s in stacks if s.name.endswith("/Compute"))


def _of_type(stack: Stack, kind: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in stack.resources().items() if r["Type"] == kind}


def test_the_cluster_sets_autoscaling_as_the_schema_allows(stacks: list[Stack]) -> None:
    compute = _compute(stacks)
    (lid, cluster), *_ = _of_type(compute, "AWS::SageMaker::Cluster").items()
    props = cluster["Properties"]
    assert props["AutoScaling"] == {"Mode": "Enable", "AutoScalerType": "Karpenter"}
    assert props["NodeProvisioningMode"] == "Continuous"
    assert props["NodeRecovery"] == "Automatic"
    role = props["ClusterRole"]["Fn::GetAtt"][0]
    assert compute.resources()[role]["Type"] == "AWS::IAM::Role"
    assert [p for p in registry.problems([compute], Resolver(stacks))[0] if lid in p] == []


@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        ("AutoScaling", {"Mode": "On", "AutoScalerType": "Karpenter"}, "'On' is not one of"),
        ("AutoScaling", {"AutoScalerType": "Karpenter"}, "'Mode' is a required property"),
        ("NodeProvisioningMode", "Standard", "'Standard' is not one of"),
        ("ClusterRole", "arn:aws:iam::555555555555:user/someone", "does not match"),
    ],
)
def test_a_broken_autoscaling_value_fails_the_schema(stacks: list[Stack], prop: str, value: Any, expected: str) -> None:
    compute = copy.deepcopy(_compute(stacks))
    (lid, cluster), *_ = _of_type(compute, "AWS::SageMaker::Cluster").items()
    cluster["Properties"][prop] = value
    found = [p for p in registry.problems([compute], Resolver(stacks))[0] if lid in p]
    assert any(expected in p for p in found), found


def test_the_autoscaler_role_is_the_documented_one_narrowed(stacks: list[Stack]) -> None:
    compute = _compute(stacks)
    roles = {lid: r for lid, r in _of_type(compute, "AWS::IAM::Role").items() if "AutoscalerRole" in lid}
    (role,) = roles.values()
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust == {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": AUTOSCALER_PRINCIPAL}}
    role_id = next(iter(roles))
    (policy,) = [r for r in _of_type(compute, "AWS::IAM::Policy").values() if r["Properties"]["Roles"] == [{"Ref": role_id}]]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    (cluster_id,) = _of_type(compute, "AWS::SageMaker::Cluster")
    policy_id = next(lid for lid, r in compute.resources().items() if r is policy)
    assert policy_id in compute.resources()[cluster_id]["DependsOn"]
    assert statements["ClusterNodes"]["Action"] == list(AUTOSCALER_NODE_ACTIONS)
    assert statements["ClusterNodes"]["Resource"] == "arn:aws:sagemaker:us-west-2:555555555555:cluster/*"
    assert statements["ClusterNodes"]["Condition"] == {"StringEquals": {"aws:ResourceAccount": "555555555555"}}
    assert statements["VolumeKeyGrants"]["Action"] == list(AUTOSCALER_KMS_ACTIONS)
    assert statements["VolumeKeyGrants"]["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}


def test_the_node_class_and_pool_follow_the_cluster(stacks: list[Stack]) -> None:
    compute = _compute(stacks)
    (cluster_id,) = _of_type(compute, "AWS::SageMaker::Cluster")
    manifests = {lid: r for lid, r in compute.resources().items() if "HyperPodAutoscaling" in lid}
    (manifest,) = manifests.values()
    assert cluster_id in manifest["DependsOn"]
    node_class, node_pool = json.loads(manifest["Properties"]["Manifest"])
    assert (node_class["apiVersion"], node_class["kind"], node_class["spec"]) == (
        NODE_CLASS_API,
        NODE_CLASS_KIND,
        {"instanceGroups": ["burst"]},
    )
    assert node_pool["spec"]["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.sagemaker.amazonaws.com",
        "kind": NODE_CLASS_KIND,
        "name": AUTOSCALING_NAME,
    }


def test_the_cluster_matches_botocore_and_a_broken_value_does_not(stacks: list[Stack]) -> None:
    from tests.contract import shapes

    (cluster,) = _of_type(_compute(stacks), "AWS::SageMaker::Cluster").values()
    props = copy.deepcopy(cluster["Properties"])
    assert shapes.problems(shapes.SAGEMAKER_CLUSTER, props) == []
    props["AutoScaling"]["AutoScalerType"] = "ClusterAutoscaler"
    props["NodeProvisioningMode"] = "Burst"
    found = shapes.problems(shapes.SAGEMAKER_CLUSTER, props)
    assert any("ClusterAutoScalerType" in p for p in found) and any("ClusterNodeProvisioningMode" in p for p in found), found


def test_the_node_pool_is_valid_against_karpenters_v1_crd() -> None:
    """Karpenter's own NodePool v1 schema (tests/data/karpenter, the release fminfra pins for EKS without
    HyperPod; which release HyperPod runs is not published): valid, and a wrong field is caught."""
    import jsonschema

    from fminfra.hyperpod.constructs.autoscaling import node_pool

    crd = json.loads((ROOT / "tests" / "data" / "karpenter" / "crd-nodepool-v1.json").read_text(encoding="utf-8"))
    spec = crd["openAPIV3Schema"]["properties"]["spec"]
    pool = node_pool()
    assert pool["apiVersion"] == f"{crd['group']}/{crd['version']}" and pool["kind"] == crd["kind"]
    jsonschema.validate(pool["spec"], spec)
    pool["spec"]["disruption"]["consolidationPolicy"] = "Sometimes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(pool["spec"], spec)
