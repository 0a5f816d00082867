"""Karpenter (fminfra/eks/constructs/karpenter.py) against what its project publishes at the pinned
release (tests/data/karpenter/): the getting-started template's IAM, queue and rules, and the
chart's values."""

from __future__ import annotations

import copy
import json
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer

from fminfra import FEATURE_FLAGS
from fminfra.core.versions import version
from fminfra.eks.constructs.karpenter import (
    NODE_MANAGED_POLICIES,
    POLICY_FILE,
    QUEUE_RETENTION_SECONDS,
    REPOSITORY,
    VALUE_KEYS,
    Karpenter,
    KarpenterProps,
    controller_policy_documents,
    karpenter_values,
)
from fminfra.eks.constructs.karpenter_pools import KarpenterPoolSpec
from fminfra.eks.rules import KARPENTER_INTERRUPTION_EVENTS, KARPENTER_NAMESPACE, KARPENTER_SERVICE_ACCOUNT
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "karpenter"
PARTITIONS = {"aws": "us-west-2", "aws-cn": "cn-north-1", "aws-us-gov": "us-gov-west-1"}
ACCOUNT = "111111111111"
CLUSTER = "c"
POOL = KarpenterPoolSpec(
    name="serve",
    instance_type="g6e.12xlarge",
    max_size=4,
    capacity_types=["on-demand"],
    zone_ids=["usw2-az1"],
    subnet_ids=["subnet-1"],
    security_group_ids=["sg-1"],
)


class _Loader(yaml.SafeLoader):
    """CloudFormation's short-form tags, kept as their long forms."""


_Loader.add_constructor("!Sub", lambda loader, node: {"Fn::Sub": loader.construct_scalar(node)})  # type: ignore[arg-type]
_Loader.add_constructor("!GetAtt", lambda loader, node: {"Fn::GetAtt": loader.construct_scalar(node)})  # type: ignore[arg-type]
_Loader.add_constructor("!Ref", lambda loader, node: {"Ref": loader.construct_scalar(node)})  # type: ignore[arg-type]
REFERENCE = yaml.load((DATA / "cloudformation-1.14.1.yaml").read_text(encoding="utf-8"), Loader=_Loader)["Resources"]


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, (str, dict)) else list(value)


def _grants(statements: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """What a policy allows, one (effect, action, resource, condition) per grant, whatever the order
    of the statements or how CDK merges them (Sids dropped)."""
    return {
        (s["Effect"], action, json.dumps(resource, sort_keys=True), json.dumps(s.get("Condition"), sort_keys=True))
        for s in statements
        for action in _as_list(s["Action"])
        for resource in _as_list(s["Resource"])
    }


def _stack_and_cluster(region: str) -> tuple[cdk.Stack, eks.Cluster]:
    app = cdk.App(context=FEATURE_FLAGS)
    stack = cdk.Stack(app, "S", env=cdk.Environment(account=ACCOUNT, region=region))
    layer = KubectlV35Layer(stack, "L")
    return stack, eks.Cluster(
        stack, "C", version=eks.KubernetesVersion.of("1.35"), kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=layer)
    )


def _props(cluster: eks.Cluster, **overrides: Any) -> KarpenterProps:
    fields: dict[str, Any] = {
        "cluster": cluster,
        "cluster_name": CLUSTER,
        "version": version("CHART_KARPENTER_VERSION"),
        "ami_release": version("KARPENTER_AL2023_AMI_RELEASE"),
        "pools": [POOL],
    }
    return KarpenterProps(**{**fields, **overrides})


def _synth(region: str) -> dict[str, Any]:
    stack, cluster = _stack_and_cluster(region)
    Karpenter(stack, "Karpenter", _props(cluster))
    return Template.from_stack(stack).to_json()


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == kind}


def _role(template: dict[str, Any], description: str) -> tuple[str, dict[str, Any]]:
    [(lid, role)] = [
        (k, r) for k, r in _of_type(template, "AWS::IAM::Role").items() if r["Properties"].get("Description", "").startswith(description)
    ]
    return lid, role


def _reference_statements(partition: str, region: str, node_role: Any, queue: Any) -> list[dict[str, Any]]:
    """The template's six controller policies, its `!Sub` done for this stack; the two ARNs it
    takes from its own resources given as the synthesized stack's references to fminfra's."""
    out = []
    for resource in REFERENCE.values():
        if resource["Type"] != "AWS::IAM::ManagedPolicy":
            continue
        text = resource["Properties"]["PolicyDocument"]["Fn::Sub"]
        for placeholder, value in (
            ("${AWS::Partition}", partition),
            ("${AWS::Region}", region),
            ("${AWS::AccountId}", ACCOUNT),
            ("${ClusterName}", CLUSTER),
        ):
            text = text.replace(placeholder, value)
        text = text.replace('"${KarpenterNodeRole.Arn}"', json.dumps(node_role)).replace(
            '"${KarpenterInterruptionQueue.Arn}"', json.dumps(queue)
        )
        out += json.loads(text)["Statement"]
    return out


@pytest.mark.parametrize("partition", PARTITIONS)
def test_the_controller_role_grants_the_templates_policy_of_its_partition(partition: str) -> None:
    region = PARTITIONS[partition]
    template = _synth(region)
    role_id, role = _role(template, "Karpenter controller")
    assert "Policies" not in role["Properties"] and "ManagedPolicyArns" not in role["Properties"]
    [policy] = [r for r in _of_type(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in r["Properties"]["Roles"]]
    node_role_id, _ = _role(template, "Nodes Karpenter launches")
    [queue_id] = _of_type(template, "AWS::SQS::Queue")
    reference = _reference_statements(partition, region, {"Fn::GetAtt": [node_role_id, "Arn"]}, {"Fn::GetAtt": [queue_id, "Arn"]})
    assert len(reference) == 18
    assert _grants(policy["Properties"]["PolicyDocument"]["Statement"]) == _grants(reference)
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"} and sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]


def test_the_parity_check_finds_a_changed_statement() -> None:
    """A test of the test: one action dropped from the packaged policies no longer matches."""
    documents = controller_policy_documents()
    changed = copy.deepcopy(documents)
    changed["ResourceDiscoveryPolicy"]["Statement"][0]["Action"].remove("ec2:DescribeCapacityReservations")
    assert _grants([s for d in changed.values() for s in d["Statement"]]) != _grants(
        [s for d in documents.values() for s in d["Statement"]]
    )


def test_the_packaged_policies_are_the_templates() -> None:
    packaged = json.loads(POLICY_FILE.read_text(encoding="utf-8"))
    recorded = {
        name: json.loads(r["Properties"]["PolicyDocument"]["Fn::Sub"])
        for name, r in REFERENCE.items()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
    }
    assert packaged == recorded


def test_the_node_role_is_the_templates_and_joins_as_ec2_linux() -> None:
    template = _synth("us-west-2")
    _, role = _role(template, "Nodes Karpenter launches")
    reference = REFERENCE["KarpenterNodeRole"]["Properties"]
    assert [s["Principal"] for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]] == [{"Service": "ec2.amazonaws.com"}]
    assert reference["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": {"Fn::Sub": "ec2.${AWS::URLSuffix}"}}
    names = sorted(json.dumps(a).split("policy/")[-1].strip('"]}') for a in role["Properties"]["ManagedPolicyArns"])
    assert names == sorted(NODE_MANAGED_POLICIES) == sorted(a["Fn::Sub"].split("policy/")[-1] for a in reference["ManagedPolicyArns"])
    node_role_id, _ = _role(template, "Nodes Karpenter launches")
    [entry] = [
        e
        for e in _of_type(template, "AWS::EKS::AccessEntry").values()
        if e["Properties"]["PrincipalArn"] == {"Fn::GetAtt": [node_role_id, "Arn"]}
    ]
    assert entry["Properties"]["Type"] == "EC2_LINUX" and "AccessPolicies" not in entry["Properties"]


def test_the_interruption_queue_and_rules_are_the_templates() -> None:
    template = _synth("us-west-2")
    [(queue_id, queue)] = _of_type(template, "AWS::SQS::Queue").items()
    expected = REFERENCE["KarpenterInterruptionQueue"]["Properties"]
    assert queue["Properties"]["MessageRetentionPeriod"] == expected["MessageRetentionPeriod"] == QUEUE_RETENTION_SECONDS
    assert queue["Properties"]["SqsManagedSseEnabled"] is expected["SqsManagedSseEnabled"] is True
    [policy] = _of_type(template, "AWS::SQS::QueuePolicy").values()
    arn = {"Fn::GetAtt": [queue_id, "Arn"]}
    reference_policy = json.loads(
        json.dumps(REFERENCE["KarpenterInterruptionQueuePolicy"]["Properties"]["PolicyDocument"]).replace(
            json.dumps({"Fn::GetAtt": "KarpenterInterruptionQueue.Arn"}), json.dumps(arn)
        )
    )
    ours = policy["Properties"]["PolicyDocument"]
    assert ours["Id"] == reference_policy["Id"]
    assert [{k: v for k, v in s.items() if k != "Sid"} for s in ours["Statement"]] == [
        {k: v for k, v in s.items() if k != "Sid"} for s in reference_policy["Statement"]
    ]
    rules = {
        (
            r["Properties"]["EventPattern"]["source"][0],
            r["Properties"]["EventPattern"]["detail-type"][0],
            json.dumps(r["Properties"]["Targets"]),
        )
        for r in _of_type(template, "AWS::Events::Rule").values()
    }
    reference_rules = {
        (p["EventPattern"]["source"][0], p["EventPattern"]["detail-type"][0], json.dumps([{"Arn": arn, "Id": p["Targets"][0]["Id"]}]))
        for p in (r["Properties"] for r in REFERENCE.values() if r["Type"] == "AWS::Events::Rule")
    }
    assert rules == reference_rules and len(rules) == len(KARPENTER_INTERRUPTION_EVENTS) == 5


def test_the_chart_is_the_pinned_oci_chart_after_its_role_and_before_the_pools() -> None:
    template = _synth("us-west-2")
    [(chart_id, chart)] = _of_type(template, "Custom::AWSCDK-EKS-HelmChart").items()
    props = chart["Properties"]
    assert (props["Chart"], props["Repository"], props["Version"], props["Namespace"]) == (
        "karpenter",
        REPOSITORY,
        version("CHART_KARPENTER_VERSION"),
        KARPENTER_NAMESPACE,
    )
    assert REPOSITORY == "oci://public.ecr.aws/karpenter/karpenter" and version("CHART_KARPENTER_VERSION") == "1.14.1"
    kinds = {template["Resources"][d]["Type"] for d in chart["DependsOn"]}
    assert {"AWS::EKS::PodIdentityAssociation", "AWS::IAM::Policy", "AWS::SQS::QueuePolicy", "AWS::EKS::AccessEntry"} <= kinds
    [manifest] = _of_type(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
    assert chart_id in manifest["DependsOn"]
    [association] = _of_type(template, "AWS::EKS::PodIdentityAssociation").values()
    assert (association["Properties"]["Namespace"], association["Properties"]["ServiceAccount"]) == (
        KARPENTER_NAMESPACE,
        KARPENTER_SERVICE_ACCOUNT,
    )


def _keys(node: Any, prefix: str = "") -> set[str]:
    """Every dotted path of a values mapping, down to its leaves."""
    if not isinstance(node, dict) or not node:
        return {prefix}
    return {k for key, value in node.items() for k in _keys(value, f"{prefix}.{key}" if prefix else key)}


def test_every_value_is_one_the_chart_has() -> None:
    chart_values = yaml.safe_load((DATA / "values-1.14.1.yaml").read_text(encoding="utf-8"))
    values = karpenter_values(cluster_name="c", queue_name="q", replicas=2, region="us-west-2")
    assert sorted(values) == sorted(VALUE_KEYS)
    known = _keys(chart_values)
    for key in _keys(values):
        # a leaf of ours is a leaf of the chart's, or sits under a mapping the chart leaves empty ({}: resources)
        assert key in known or any(key.startswith(k + ".") for k in known), f"{key} is not in the chart's values.yaml"
    deployment = (DATA / "deployment-1.14.1.yaml").read_text(encoding="utf-8")
    assert "ReservedCapacity={{ .Values.settings.featureGates.reservedCapacity }}" in deployment
    assert "{{- with .Values.settings.interruptionQueue }}" in deployment
    # the region reaches the controller (serving read r4, unconfirmed: it fell back to IMDS, out of reach at hop limit 1)
    assert values["controller"]["env"] == [{"name": "AWS_REGION", "value": "us-west-2"}]
    assert "{{- with .Values.controller.env }}" in deployment
    assert chart_values["settings"]["ignoreDRARequests"] is True  # docs/facts/karpenter.md#eks-ultraserver-dra-karpenter
    # the chart keeps the controller off Karpenter's nodes: the system node group runs it
    [term] = chart_values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]


def test_a_value_the_chart_does_not_have_is_caught() -> None:
    known = _keys(yaml.safe_load((DATA / "values-1.14.1.yaml").read_text(encoding="utf-8")))
    assert "settings.interruptionQueueName" not in known and "settings.featureGates.capacityBlocks" not in known


def test_one_replica_at_least() -> None:
    stack, cluster = _stack_and_cluster("us-west-2")
    with pytest.raises(ValueError, match="replicas must be 1 or more"):
        Karpenter(stack, "K", _props(cluster, pools=[], replicas=0))
