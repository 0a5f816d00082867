"""HyperPod: config rejections, the construct's own checks, the synthesized clusters,
IAM of the node role, and the own rules' ability to fail."""

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

from fminfra.config import parse_config
from fminfra.core.errors import ConfigError, ValidationError
from fminfra.hyperpod.constructs.cluster import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from fminfra.hyperpod.rules import hyperpod_instance_types
from fminfra.policy.rules import check_templates
from tests.conftest import ROOT, Synth

DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
STAGING = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())


def _problems(base: dict[str, Any], path: str, value: Any) -> list[str]:
    data = copy.deepcopy(base)
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = value
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return info.value.problems


REJECTIONS = [
    (
        STAGING,
        "network.az_ids",
        ["usw2-az4"],
        "f.yaml: network.az_ids: EKS needs subnets in at least two AZs; list at least two AZ IDs",
    ),
    (
        DEV,
        "compute.slurm.controller.instance_type",
        "ml.p99.xlarge",
        "f.yaml: compute.slurm.controller.instance_type: 'ml.p99.xlarge' is not an instance type SageMaker HyperPod supports (botocore's ClusterInstanceType), e.g. ml.m5.12xlarge, ml.c5.4xlarge",
    ),
    (
        DEV,
        "compute.instance_groups.0.name",
        "gpu_workers",
        "f.yaml: compute.instance_groups[0].name: must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit, got 'gpu_workers'",
    ),
    (
        DEV,
        "compute.instance_groups.0.name",
        "controller",
        "f.yaml: compute.instance_groups[0].name: 'controller' is the Slurm controller group's name; choose another",
    ),
    (
        DEV,
        "compute.instance_groups.0.name",
        "login",
        "f.yaml: compute.instance_groups[0].name: 'login' is the Slurm login group's name; choose another",
    ),
    (DEV, "compute.slurm.login.count", -1, "f.yaml: compute.slurm.login.count: Input should be greater than or equal to 0, got -1"),
    (
        STAGING,
        "compute.eks.kubernetes_version",
        "1.30",
        "f.yaml: compute.eks.kubernetes_version: '1.30' is not a supported version; allowed: 1.34, 1.35 (pinned in EKS standard support with their add-ons; EKS_SUPPORTED_KUBERNETES_VERSIONS in scripts/node/versions.env)",
    ),
    (
        STAGING,
        "compute.eks.kubernetes_version",
        "1.35",
        "f.yaml: compute.eks.kubernetes_version: '1.35' is not on SageMaker HyperPod's list of Kubernetes versions; allowed with orchestrator eks: 1.34 (HYPERPOD_EKS_KUBERNETES_VERSIONS in scripts/node/versions.env)",
    ),
]


@pytest.mark.parametrize(("base", "path", "value", "expected"), REJECTIONS, ids=[f"{c[1]}={c[2]}" for c in REJECTIONS])
def test_validate_rejects_in_one_line(base: dict[str, Any], path: str, value: Any, expected: str) -> None:
    assert _problems(base, path, value) == [expected]


def test_cli_validate_rejects_with_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    data = copy.deepcopy(DEV)
    data["compute"]["instance_groups"][0]["name"] = "login"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = subprocess.run([sys.executable, "-m", "fminfra", "validate", str(bad)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert lines == [f"{bad}: compute.instance_groups[0].name: 'login' is the Slurm login group's name; choose another"]


def test_hyperpod_types_come_from_botocore() -> None:
    types = hyperpod_instance_types()
    assert {"ml.p5.48xlarge", "ml.p5en.48xlarge", "ml.m5.12xlarge"} <= types
    assert "p5.48xlarge" not in types and all(t.startswith("ml.") for t in types)


# --------------------------------------------------------------------------------------------
# construct checks (no synth)


def _stack() -> tuple[cdk.Stack, ec2.IVpc, iam.Role]:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["a"], private_subnet_ids=["subnet-1"])
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    return stack, vpc, role


def _props(vpc: ec2.IVpc, role: iam.Role, groups: list[HyperPodInstanceGroup], **kw: Any) -> HyperPodClusterProps:
    sg = ec2.SecurityGroup.from_security_group_id(vpc.stack, "Sg", "sg-1")
    return HyperPodClusterProps(
        cluster_name=kw.pop("cluster_name", "c1"),
        instance_groups=groups,
        execution_role=role,
        subnets=vpc.private_subnets,
        security_groups=[sg],
        lifecycle_source_s3_uri="s3://sagemaker-x/lifecycle/1/",
        **kw,
    )


@pytest.mark.parametrize(
    ("groups", "kw", "message"),
    [
        (
            [HyperPodInstanceGroup(name="w", instance_type="p5.48xlarge", instance_count=1)],
            {},
            "instance_groups[0].instance_type must be an ml. type SageMaker HyperPod supports (botocore ClusterInstanceType), got 'p5.48xlarge'",
        ),
        (
            [HyperPodInstanceGroup(name="-w", instance_type="ml.p5.48xlarge", instance_count=1)],
            {},
            "instance_groups[0].name must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit, got '-w'",
        ),
        (
            [HyperPodInstanceGroup(name="w", instance_type="ml.p5.48xlarge", instance_count=1)] * 2,
            {},
            "instance group names must be unique, repeated: w",
        ),
        (
            [
                HyperPodInstanceGroup(
                    name="w", instance_type="ml.p5.48xlarge", instance_count=1, deep_health_checks=["MultiNodeTrainingValidation"]
                )
            ],
            {},
            "instance_groups[0].deep_health_checks must be among InstanceStress, InstanceConnectivity, got MultiNodeTrainingValidation",
        ),
        (
            [HyperPodInstanceGroup(name="w", instance_type="ml.p5.48xlarge", instance_count=6759)],
            {},
            "instance_groups[0].instance_count must be 0-6758, got 6759",
        ),
        (
            [HyperPodInstanceGroup(name="w", instance_type="ml.p5.48xlarge", instance_count=1)],
            {"node_recovery": "Auto"},
            "node_recovery must be Automatic or None, got 'Auto'",
        ),
        (
            [HyperPodInstanceGroup(name="w", instance_type="ml.p5.48xlarge", instance_count=1)],
            {"cluster_name": "a_b"},
            "cluster_name must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit, got 'a_b'",
        ),
    ],
)
def test_construct_rejects(groups: list[HyperPodInstanceGroup], kw: dict[str, Any], message: str) -> None:
    stack, vpc, role = _stack()
    with pytest.raises(ValidationError) as info:
        HyperPodCluster(stack, "HP", _props(vpc, role, groups, **kw))
    assert str(info.value) == message


def test_deep_health_checks_default_on_for_gpu_groups_only() -> None:
    assert HyperPodInstanceGroup(name="g", instance_type="ml.p5.48xlarge", instance_count=2).effective_deep_health_checks == [
        "InstanceStress",
        "InstanceConnectivity",
    ]
    assert HyperPodInstanceGroup(name="c", instance_type="ml.m5.12xlarge", instance_count=1).effective_deep_health_checks == []


@pytest.mark.parametrize("count", [0, 1])
def test_instance_connectivity_needs_two_nodes(count: int) -> None:
    # InstanceConnectivity runs NCCL tests across nodes and needs at least 2
    # (docs/facts/hyperpod.md#hyperpod-instance-connectivity-min-nodes): off by default below 2,
    # and rejected when asked for.
    group = HyperPodInstanceGroup(name="g", instance_type="ml.p5.48xlarge", instance_count=count)
    assert group.effective_deep_health_checks == ["InstanceStress"]
    asked = HyperPodInstanceGroup(
        name="g", instance_type="ml.p5.48xlarge", instance_count=count, deep_health_checks=["InstanceStress", "InstanceConnectivity"]
    )
    stack, vpc, role = _stack()
    with pytest.raises(ValidationError) as info:
        HyperPodCluster(stack, "HP", _props(vpc, role, [asked]))
    assert str(info.value) == (
        "instance_groups[0].deep_health_checks: InstanceConnectivity runs NCCL tests across nodes and needs instance_count of at least 2, "
        f"got {count}"
    )


# --------------------------------------------------------------------------------------------
# synthesized clusters


def _cluster(synth: Synth, env: str) -> dict[str, Any]:
    clusters = synth.resources(env, "Compute", "AWS::SageMaker::Cluster")
    assert len(clusters) == 1
    return next(iter(clusters.values()))["Properties"]


def _groups(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {g["InstanceGroupName"]: g for g in _cluster(synth, env)["InstanceGroups"]}


def test_dev_slurm_groups_match_config(synth: Synth) -> None:
    groups = _groups(synth, "dev")
    assert list(groups) == ["controller", "login", "workers"]
    assert (groups["controller"]["InstanceType"], groups["controller"]["InstanceCount"]) == ("ml.m5.12xlarge", 1)
    assert (groups["login"]["InstanceType"], groups["login"]["InstanceCount"]) == ("ml.m5.4xlarge", 1)
    assert (groups["workers"]["InstanceType"], groups["workers"]["InstanceCount"]) == ("ml.p5.48xlarge", 2)
    assert groups["workers"]["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert "OnStartDeepHealthChecks" not in groups["controller"]
    assert groups["workers"]["ThreadsPerCore"] == 1
    assert groups["workers"]["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}]
    assert "TrainingPlanArn" not in groups["workers"]
    cluster = _cluster(synth, "dev")
    assert cluster["ClusterName"] == "fminfra-dev-hyperpod"
    assert cluster["NodeRecovery"] == "Automatic"
    assert "Orchestrator" not in cluster  # classic Slurm: configured by the lifecycle scripts


def test_prod_training_plan_and_login_groups(synth: Synth) -> None:
    groups = _groups(synth, "prod")
    assert groups["workers"]["TrainingPlanArn"] == "arn:aws:sagemaker:us-east-1:333333333333:training-plan/fminfra-prod-p5en"
    assert groups["workers"]["InstanceType"] == "ml.p5en.48xlarge" and groups["workers"]["InstanceCount"] == 16
    assert groups["login"]["InstanceCount"] == 2


def test_test_config_groups_without_login_and_custom_checks(synth: Synth) -> None:
    groups = _groups(synth, "hp-slurm-inf")
    assert list(groups) == ["controller", "h100", "h200"]
    assert groups["controller"]["InstanceType"] == "ml.c5.4xlarge"
    assert groups["h100"]["ThreadsPerCore"] == 2
    assert groups["h100"]["OnStartDeepHealthChecks"] == ["InstanceStress"]
    assert "OnStartDeepHealthChecks" not in groups["h200"]
    assert groups["h200"]["InstanceCount"] == 0
    assert groups["h200"]["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 2000}}]


@pytest.mark.parametrize("env", ["dev", "prod", "staging", "hp-slurm-inf"])
def test_lifecycle_uri_and_vpc_config(synth: Synth, env: str) -> None:
    cluster = _cluster(synth, env)
    uris = {g["LifeCycleConfig"]["SourceS3Uri"] for g in cluster["InstanceGroups"]}
    assert len(uris) == 1
    uri = uris.pop()
    assert uri.startswith(f"s3://sagemaker-fminfra-{env}-") and "/lifecycle/" in uri and uri.endswith("/")
    assert {g["LifeCycleConfig"]["OnCreate"] for g in cluster["InstanceGroups"]} == {"on_create.sh"}
    vpc = cluster["VpcConfig"]
    network = synth.template(env, "Network")
    exports = {o["Export"]["Name"]: o["Value"] for o in network["Outputs"].values() if "Export" in o}
    (subnet,) = vpc["Subnets"]
    subnet_id = exports[subnet["Fn::ImportValue"]]["Ref"]
    tags = {t["Key"]: t["Value"] for t in network["Resources"][subnet_id]["Properties"]["Tags"]}
    assert tags["fminfra:subnet-kind"] == "compute"
    groups = [exports[g["Fn::ImportValue"]]["Fn::GetAtt"][0] for g in vpc["SecurityGroupIds"] if "Fn::ImportValue" in g]
    assert any(network["Resources"][g]["Properties"]["GroupDescription"].startswith("EFA:") for g in groups)


def test_outputs_give_connect_commands(synth: Synth) -> None:
    outputs = synth.template("dev", "Compute")["Outputs"]
    assert outputs["HyperPodClusterName"]["Value"] == "fminfra-dev-hyperpod"
    assert (
        outputs["DescribeClusterCommand"]["Value"]
        == "aws sagemaker describe-cluster --region us-west-2 --cluster-name fminfra-dev-hyperpod"
    )
    assert "HyperPodClusterArn" in outputs


# --------------------------------------------------------------------------------------------
# IAM of the node (execution) role


def _node_role_statements(synth: Synth, env: str) -> list[dict[str, Any]]:
    policies = synth.resources(env, "Compute", "AWS::IAM::Policy")
    attached = [p for p in policies.values() if {"Ref": "NodeRole52753DAC"} in p["Properties"]["Roles"]]
    assert attached
    return [s for p in attached for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_node_role_is_least_privilege(synth: Synth) -> None:
    statements = _node_role_statements(synth, "dev")
    by_resource = {json.dumps(s["Resource"]): sorted(s["Action"] if isinstance(s["Action"], list) else [s["Action"]]) for s in statements}
    lifecycle = next(v for k, v in by_resource.items() if "/lifecycle/" in k)
    assert lifecycle == ["s3:GetBucket*", "s3:GetObject*", "s3:List*"]
    logs = by_resource['"arn:aws:logs:us-west-2:111111111111:log-group:/aws/sagemaker/Clusters/fminfra-dev-hyperpod/*"']
    assert logs == ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]
    # the data bucket: read-write under checkpoints/ only; datasets/ read-only (CDK merges that read
    # with the lifecycle prefix's, same actions)
    data = by_resource[
        '["arn:aws:s3:::fminfra-dev-data-111111111111-us-west-2", "arn:aws:s3:::fminfra-dev-data-111111111111-us-west-2/checkpoints/*"]'
    ]
    assert "s3:PutObject" in data and "s3:GetObject*" in data and "s3:DeleteObject*" in data
    assert "datasets/*" in next(k for k in by_resource if "/lifecycle/" in k)
    key = next(v for k, v in by_resource.items() if "DataKey" in k)
    assert key == ["kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"]
    # ... plus the observability grant: aps:RemoteWrite on the environment's workspace only.
    remote_write = [s for s in statements if s["Action"] == "aps:RemoteWrite"]
    assert len(remote_write) == 1 and remote_write[0]["Resource"] != "*"
    # ... and what the cluster's VpcConfig needs (tests/app/test_reference_parity.py holds AWS's reference)
    vpc = {s["Sid"] for s in statements if s.get("Sid", "").startswith("VpcConfig")}
    assert vpc == {"VpcConfigRead", "VpcConfigEnis", "VpcConfigEniTags", "VpcConfigDetachEnis"}
    # ... and the workspace's key, only through AMP (docs/facts/observability.md#amp-workspace-cmk-key-access).
    workspace_key = [s for s in statements if sorted(s["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]]
    assert len(workspace_key) == 1 and "kms:ViaService" in workspace_key[0]["Condition"]["StringEquals"]
    assert len(statements) == 10
    roles = synth.resources("dev", "Compute", "AWS::IAM::Role")
    managed = json.dumps(roles["NodeRole52753DAC"]["Properties"]["ManagedPolicyArns"])
    assert "AmazonSageMakerClusterInstanceRolePolicy" in managed


def test_no_wildcard_actions_anywhere(synth: Synth) -> None:
    findings = check_templates({s.stack_name: s.template for s in synth.all_templates()})
    assert [f for f in findings if f.rule_id == "FMI-IAM-NO-WILDCARD-ACTION"] == []


def test_nag_acknowledgments_of_wildcards_are_narrow(synth: Synth) -> None:
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    suppressed = [v for p in report["pluginReports"] for v in p.get("suppressedViolations") or []]
    iam5 = [v for v in suppressed if v["ruleName"].startswith("AwsSolutions-IAM5[")]
    node_role = [
        v for v in iam5 if any(c["constructPath"] == "dev/Compute/NodeRole/Role/DefaultPolicy/Resource" for c in v["violatingConstructs"])
    ]
    # CDK's grant_read (lifecycle prefix) and grant_read_write (data bucket and key) action groups
    assert sorted(v["ruleName"].split("[", 1)[1] for v in node_role if "Action::" in v["ruleName"]) == [
        "Action::kms:GenerateDataKey*]",
        "Action::kms:ReEncrypt*]",
        "Action::s3:Abort*]",
        "Action::s3:DeleteObject*]",
        "Action::s3:GetBucket*]",
        "Action::s3:GetObject*]",
        "Action::s3:List*]",
    ]
    for v in iam5:
        # one finding (with its evidence) per acknowledgment, on policies only, with a reason
        assert v["acknowledgedId"] == f"AwsSolutions::{v['ruleName']}"
        assert all(c["constructPath"].endswith("DefaultPolicy/Resource") for c in v["violatingConstructs"])
        assert len(v["reason"]) >= 30


# --------------------------------------------------------------------------------------------
# own rules fail on broken templates


def _templates(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {s.stack_name: copy.deepcopy(s.template) for s in synth.stacks[env]}


def _compute(templates: dict[str, dict[str, Any]], env: str) -> dict[str, Any]:
    return templates[f"{env}-Compute"]


def test_own_rules_pass_on_the_real_cluster(synth: Synth) -> None:
    templates = _templates(synth, "staging")
    assert [f for f in check_templates(templates) if f.rule_id.startswith("FMI-HYPERPOD")] == []


def test_own_rule_catches_hyperpod_outside_compute_subnet(synth: Synth) -> None:
    templates = _templates(synth, "staging")
    cluster = next(r for r in _compute(templates, "staging")["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster")
    network = templates["staging-Network"]
    other = next(
        lid
        for lid, r in network["Resources"].items()
        if r["Type"] == "AWS::EC2::Subnet" and {"Key": "fminfra:subnet-kind", "Value": "private"} in r["Properties"]["Tags"]
    )
    network["Outputs"]["X"] = {"Value": {"Ref": other}, "Export": {"Name": "x-other"}}
    cluster["Properties"]["VpcConfig"]["Subnets"] = [{"Fn::ImportValue": "x-other"}]
    findings = [f for f in check_templates(templates) if f.rule_id == "FMI-HYPERPOD-VPC"]
    assert len(findings) == 1 and "compute subnet" in findings[0].message


def test_own_rule_catches_hyperpod_without_efa_group(synth: Synth) -> None:
    templates = _templates(synth, "dev")
    cluster = next(r for r in _compute(templates, "dev")["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster")
    cluster["Properties"]["VpcConfig"]["SecurityGroupIds"] = ["sg-0123456789abcdef0"]
    findings = [f for f in check_templates(templates) if f.rule_id == "FMI-HYPERPOD-VPC"]
    assert len(findings) == 1 and "EFA security group" in findings[0].message


def test_own_rule_catches_lifecycle_outside_sagemaker_bucket(synth: Synth) -> None:
    templates = _templates(synth, "dev")
    cluster = next(r for r in _compute(templates, "dev")["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster")
    cluster["Properties"]["InstanceGroups"][2]["LifeCycleConfig"]["SourceS3Uri"] = "s3://my-scripts/lifecycle/"
    findings = [f for f in check_templates(templates) if f.rule_id == "FMI-HYPERPOD-LIFECYCLE-BUCKET"]
    assert len(findings) == 1 and "workers: 's3://my-scripts/lifecycle/'" in findings[0].message


@pytest.mark.parametrize("action", ["*", "s3:*", ["sts:AssumeRole", "ec2:*"]])
def test_own_rule_catches_wildcard_actions(synth: Synth, action: Any) -> None:
    templates = _templates(synth, "dev")
    policy = next(r for r in _compute(templates, "dev")["Resources"].values() if r["Type"] == "AWS::IAM::Policy")
    policy["Properties"]["PolicyDocument"]["Statement"].append({"Effect": "Allow", "Action": action, "Resource": "*"})
    findings = [f for f in check_templates(templates) if f.rule_id == "FMI-IAM-NO-WILDCARD-ACTION"]
    assert len(findings) == 1


def test_own_rule_allows_wildcard_in_deny(synth: Synth) -> None:
    templates = _templates(synth, "dev")
    policy = next(r for r in _compute(templates, "dev")["Resources"].values() if r["Type"] == "AWS::IAM::Policy")
    policy["Properties"]["PolicyDocument"]["Statement"].append({"Effect": "Deny", "Action": "s3:*", "Resource": "*"})
    assert [f for f in check_templates(templates) if f.rule_id == "FMI-IAM-NO-WILDCARD-ACTION"] == []


def test_lifecycle_parameters_carry_the_storage_file_system(synth: Synth) -> None:
    (deployment,) = synth.resources("dev", "Compute", "Custom::CDKBucketDeployment").values()
    markers = json.dumps(deployment["Properties"]["SourceMarkers"])
    storage = synth.template("dev", "Storage")
    exports = {o["Export"]["Name"]: o["Value"] for o in storage["Outputs"].values() if "Export" in o}
    imported = [name for name in exports if name in markers]
    assert sorted(exports[n]["Fn::GetAtt"][1] for n in imported) == ["DNSName", "LustreMountName"]


def test_training_plan_nodes_may_read_their_plans_end_only(synth: Synth) -> None:
    """The Slurm nodes of a training-plan group read the plan's end (DescribeTrainingPlan) to
    drain before it, in their own statement, on that plan only."""
    from tests.eks.constructs.test_cluster import _node_role_sids

    prod = synth.configs["prod"]
    plans = sorted({g.capacity.training_plan_arn for g in prod.compute.instance_groups if g.capacity.training_plan_arn})
    statement = _node_role_sids(synth, "prod")["TrainingPlanEndRead"]
    assert statement["Action"] == "sagemaker:DescribeTrainingPlan"
    assert statement["Resource"] == (plans[0] if len(plans) == 1 else plans)
    assert "TrainingPlanEndRead" not in _node_role_sids(synth, "dev")
