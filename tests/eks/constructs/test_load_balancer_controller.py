"""The AWS Load Balancer Controller (fminfra/eks/constructs/load_balancer_controller.py) against
what its project publishes at the pinned release (tests/data/aws_load_balancer_controller/)."""

from __future__ import annotations

import json
import re
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer

from fminfra import FEATURE_FLAGS
from fminfra.core.versions import version
from fminfra.eks.constructs.load_balancer_controller import (
    POLICY_FILE,
    VALUE_KEYS,
    AwsLoadBalancerController,
    AwsLoadBalancerControllerProps,
    load_balancer_controller_values,
)
from fminfra.eks.rules import INTERNAL_ELB_SUBNET_TAG, LBC_NAMESPACE, LBC_SERVICE_ACCOUNT
from tests.conftest import ROOT, Synth

DATA = ROOT / "tests" / "data" / "aws_load_balancer_controller"
PARTITIONS = {"aws": "us-west-2", "aws-cn": "cn-north-1", "aws-us-gov": "us-gov-west-1"}


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, str) else list(value)


def _statements(document: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """What a policy allows, one (effect, action, resource, condition) per grant: the same whatever the
    order of the statements (the partitions' files differ in it) or how CDK merges them."""
    return {
        (s["Effect"], action, resource, json.dumps(s.get("Condition"), sort_keys=True))
        for s in document["Statement"]
        for action in _as_list(s["Action"])
        for resource in _as_list(s["Resource"])
    }


def _synth(region: str) -> dict[str, Any]:
    app = cdk.App(context=FEATURE_FLAGS)
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region=region))
    cluster = eks.Cluster(
        stack,
        "C",
        version=eks.KubernetesVersion.of("1.35"),
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(stack, "L")),
    )
    AwsLoadBalancerController(
        stack,
        "Lbc",
        AwsLoadBalancerControllerProps(cluster=cluster, cluster_name="c", version="3.5.0", region=region, vpc_id="vpc-1"),
    )
    return Template.from_stack(stack).to_json()


@pytest.mark.parametrize("partition", PARTITIONS)
def test_the_role_grants_the_projects_policy_of_its_partition(partition: str) -> None:
    template = _synth(PARTITIONS[partition])
    [(role_id, role)] = [
        (lid, r)
        for lid, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role" and (r["Properties"].get("Description") or "").startswith("AWS Load Balancer Controller")
    ]
    # every grant in the role's default policy, none inline or managed
    assert "Policies" not in role["Properties"] and "ManagedPolicyArns" not in role["Properties"]
    [policy] = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
    ]
    reference = json.loads((DATA / f"iam_policy-{partition}.json").read_text(encoding="utf-8"))
    assert _statements(policy["Properties"]["PolicyDocument"]) == _statements(reference)
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"} and sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]


def test_the_parity_check_finds_a_changed_statement() -> None:
    """A test of the test: one action dropped from the packaged policy no longer matches."""
    document = json.loads(POLICY_FILE.read_text(encoding="utf-8"))
    document["Statement"][1]["Action"].remove("ec2:DescribeSubnets")
    reference = json.loads((DATA / "iam_policy-aws.json").read_text(encoding="utf-8"))
    assert _statements(document) != _statements(reference)


def test_the_packaged_policy_is_the_recorded_commercial_one() -> None:
    assert POLICY_FILE.read_bytes() == (DATA / "iam_policy-aws.json").read_bytes()


def test_pod_identity_names_the_charts_service_account() -> None:
    template = _synth("us-west-2")
    [association] = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    assert (association["Properties"]["Namespace"], association["Properties"]["ServiceAccount"]) == (LBC_NAMESPACE, LBC_SERVICE_ACCOUNT)
    values = load_balancer_controller_values(cluster_name="c", region="r", vpc_id="v")
    assert values["serviceAccount"] == {"create": True, "name": LBC_SERVICE_ACCOUNT}
    # the chart creates the service account it names by serviceAccount.name (its template's helper)
    assert "aws-load-balancer-controller.serviceAccountName" in (DATA / "serviceaccount-3.5.0.yaml").read_text(encoding="utf-8")


def test_every_value_is_one_the_chart_reads() -> None:
    chart_values = yaml.safe_load((DATA / "values-3.5.0.yaml").read_text(encoding="utf-8"))
    deployment = (DATA / "deployment-3.5.0.yaml").read_text(encoding="utf-8")
    values = load_balancer_controller_values(cluster_name="c", region="r", vpc_id="v")
    assert sorted(values) == sorted(VALUE_KEYS)
    for key in values:
        assert key in chart_values, f"{key} is not in the chart's values.yaml"
    assert "--default-load-balancer-scheme={{ .Values.defaultLoadBalancerScheme }}" in deployment
    assert values["defaultLoadBalancerScheme"] == "internal" == values["ingressClassParams"]["spec"]["scheme"]
    assert re.search(r"internal.*internet-facing.*default \"internal\"", (DATA / "values-3.5.0.yaml").read_text(encoding="utf-8"))
    assert version("CHART_AWS_LOAD_BALANCER_CONTROLLER_VERSION") == "3.5.0" == chart_values["image"]["tag"].lstrip("v")


def test_a_value_the_chart_does_not_read_is_caught() -> None:
    chart_values = yaml.safe_load((DATA / "values-3.5.0.yaml").read_text(encoding="utf-8"))
    assert "defaultScheme" not in chart_values


@pytest.mark.parametrize("env", ["eks-inf"])
def test_the_private_subnets_carry_the_internal_elb_tag(synth: Synth, env: str) -> None:
    subnets = synth.resources(env, "Network", "AWS::EC2::Subnet")
    key, value = INTERNAL_ELB_SUBNET_TAG
    for subnet in subnets.values():
        tags = {t["Key"]: t["Value"] for t in subnet["Properties"]["Tags"]}
        assert (tags.get(key) == value) == (tags["fminfra:subnet-kind"] != "public"), tags


def test_without_the_controller_no_subnet_is_tagged(synth: Synth) -> None:
    key, _ = INTERNAL_ELB_SUBNET_TAG
    for subnet in synth.resources("dev", "Network", "AWS::EC2::Subnet").values():
        assert key not in {t["Key"] for t in subnet["Properties"]["Tags"]}
