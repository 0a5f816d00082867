"""The stateful-change guard: synthetic BEFORE/AFTER templates, the CLI, baselines, change sets."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fminfra.cli.main import main
from fminfra.ops import guard
from fminfra.ops.guard.sources import TemplateStore
from tests.conftest import ROOT, SHIPPED_NAMES, Synth

FSX_ID = "LustreFileSystem8A1B2C3D"

BEFORE: dict[str, Any] = {
    "Resources": {
        FSX_ID: {
            "Type": "AWS::FSx::FileSystem",
            "Properties": {
                "FileSystemType": "LUSTRE",
                "StorageCapacity": 2400,
                "SubnetIds": [{"Fn::ImportValue": "dev-Network:ExportsOutputRefComputeSubnet"}],
                "SecurityGroupIds": [{"Ref": "LustreSecurityGroup"}],
                "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250, "EfaEnabled": True},
                "Tags": [{"Key": "team", "Value": "ml-platform"}],
            },
            "UpdateReplacePolicy": "Retain",
            "DeletionPolicy": "Retain",
        },
        "LustreSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "lustre", "VpcId": "vpc-1"}},
        "DataBucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "fminfra-dev-data"}},
    }
}


def _write(directory: Path, templates: dict[str, dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for stack, template in templates.items():
        (directory / f"{stack}.template.json").write_text(json.dumps(template))
    return directory


def _after(change: Any) -> dict[str, Any]:
    template = copy.deepcopy(BEFORE)
    change(template["Resources"])
    return template


def _rename(resources: dict[str, Any]) -> None:
    resources["LustreFileSystemRenamed"] = resources.pop(FSX_ID)


def _subnets(resources: dict[str, Any]) -> None:
    resources[FSX_ID]["Properties"]["SubnetIds"] = ["subnet-0123456789abcdef0"]


def _deployment_type(resources: dict[str, Any]) -> None:
    resources[FSX_ID]["Properties"]["LustreConfiguration"]["DeploymentType"] = "SCRATCH_2"


def _efa(resources: dict[str, Any]) -> None:
    resources[FSX_ID]["Properties"]["LustreConfiguration"]["EfaEnabled"] = False


def _tags_only(resources: dict[str, Any]) -> None:
    for res in resources.values():
        res["Properties"]["Tags"] = [{"Key": "team", "Value": "research"}, {"Key": "cost-center", "Value": "42"}]


def _throughput(resources: dict[str, Any]) -> None:
    resources[FSX_ID]["Properties"]["LustreConfiguration"]["PerUnitStorageThroughput"] = 500


def _run(
    tmp_path: Path, change: Any, *extra: str, capsys: pytest.CaptureFixture[str], base: dict[str, Any] | None = None
) -> tuple[int, str]:
    base = BEFORE if base is None else base
    before = _write(tmp_path / "before", {"dev-Storage": base})
    after_template = copy.deepcopy(base)
    change(after_template["Resources"])
    after = _write(tmp_path / "after", {"dev-Storage": after_template})
    code = main(["guard", "--baseline", str(before), "--templates", str(after), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_rename, f"dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be deleted: (logical id):"),
        (_subnets, f"dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be replaced: SubnetIds: changed from"),
        (
            _deployment_type,
            f'dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be replaced: LustreConfiguration.DeploymentType: changed from "PERSISTENT_2" to "SCRATCH_2"',
        ),
        (
            _efa,
            f"dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be replaced: LustreConfiguration.EfaEnabled: changed from true to false",
        ),
    ],
    ids=["logical-id", "subnet-ids", "deployment-type", "efa-enabled"],
)
def test_guard_fails_naming_resource_and_property(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, expected: str) -> None:
    code, out = _run(tmp_path, change, capsys=capsys)
    assert code == 1, out
    assert expected in out
    assert "guard: FAIL: 1 stateful resource change(s)" in out


def test_subnet_change_comes_from_the_cfn_schema_and_deployment_type_from_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "/properties/SubnetIds" in guard.schema_create_only("AWS::FSx::FileSystem")
    assert "/properties/LustreConfiguration/DeploymentType" not in guard.schema_create_only("AWS::FSx::FileSystem")
    _, out = _run(tmp_path, _subnets, capsys=capsys)
    assert "(create-only in the CloudFormation schema)" in out
    _, out = _run(tmp_path, _deployment_type, capsys=capsys)
    assert "(replacement (FSx: the deployment type is fixed at creation))" in out


# The same file system without EFA: FSx changes its throughput tier in place.
WITHOUT_EFA = _after(_efa)


@pytest.mark.parametrize(
    ("change", "base"), [(_tags_only, BEFORE), (_throughput, WITHOUT_EFA)], ids=["tags-only", "throughput-without-efa"]
)
def test_guard_passes_in_place_updates(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, base: dict[str, Any]) -> None:
    code, out = _run(tmp_path, change, capsys=capsys, base=base)
    assert code == 0, out
    assert out == "guard: ok: 2 stateful resources compared\n"


def test_guard_fails_a_throughput_tier_change_on_an_efa_file_system(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # FSx cannot change the throughput tier of an EFA-enabled file system (docs/facts/storage.md#fsx-lustre-efa-requirements):
    # CloudFormation updates PerUnitStorageThroughput in place, FSx refuses, the stack update fails and rolls back.
    code, out = _run(tmp_path, _throughput, capsys=capsys)
    assert code == 1, out
    assert out.splitlines() == [
        f"dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would fail the deploy: LustreConfiguration.PerUnitStorageThroughput: "
        "changed from 250 to 500 on an EFA-enabled file system: FSx cannot change the throughput tier of an EFA-enabled file system, "
        "so the update fails and rolls back; keep the tier (grow the storage capacity for more throughput), or create a new file system",
        "guard: FAIL: 1 stateful resource change(s) would delete or replace data or nodes, or fail the deploy; "
        "allow a deliberate one with --allow LOGICAL_ID",
    ]
    # Disabling EFA together with the tier is a replacement (EfaEnabled), reported once as such, not as a refused update.
    findings = guard.compare_templates({"dev-Storage": BEFORE}, {"dev-Storage": _after(lambda r: (_efa(r), _throughput(r)))})
    assert [(f.action, f.property) for f in findings] == [("replaced", "LustreConfiguration.EfaEnabled")]
    # --allow lets it through, still printed.
    code, out = _run(tmp_path / "allow", _throughput, "--allow", FSX_ID, capsys=capsys)
    assert code == 0 and out.startswith(f"ALLOWED dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would fail the deploy:"), out


def test_allow_lets_a_named_change_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(tmp_path, _deployment_type, "--allow", FSX_ID, capsys=capsys)
    assert code == 0, out
    assert out.startswith(f"ALLOWED dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be replaced: LustreConfiguration.DeploymentType")
    assert out.endswith("guard: ok: 2 stateful resources compared, 1 allowed\n")
    # --allow names one resource: another resource's change still fails
    code, out = _run(tmp_path, _deployment_type, "--allow", "DataBucket", capsys=capsys)
    assert code == 1


def test_bucket_name_change_and_deleted_stack_fail(tmp_path: Path) -> None:
    after = _after(lambda r: r["DataBucket"]["Properties"].update(BucketName="fminfra-dev-data2"))
    findings = guard.compare_templates({"dev-Storage": BEFORE}, {"dev-Storage": after})
    assert [(f.logical_id, f.action, f.property) for f in findings] == [("DataBucket", "replaced", "BucketName")]
    findings = guard.compare_templates({"dev-Storage": BEFORE}, {"dev-Network": {"Resources": {}}})
    assert sorted((f.logical_id, f.property) for f in findings) == [("DataBucket", "(stack)"), (FSX_ID, "(stack)")]


def test_resource_moved_to_another_stack_fails(tmp_path: Path) -> None:
    moved = copy.deepcopy(BEFORE)
    fsx = moved["Resources"].pop(FSX_ID)
    findings = guard.compare_templates({"dev-Storage": BEFORE}, {"dev-Storage": moved, "dev-Data": {"Resources": {FSX_ID: fsx}}})
    assert len(findings) == 1 and "moved to stack dev-Data" in findings[0].detail


def test_stateless_resources_may_change(tmp_path: Path) -> None:
    after = _after(lambda r: r.pop("LustreSecurityGroup"))
    assert guard.compare_templates({"s": BEFORE}, {"s": after}) == []


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["guard", "--templates", str(tmp_path / "nope"), "--baseline", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'nope'}: (folder): no such folder\n"
    assert main(["guard"]) == 2
    assert capsys.readouterr().err == "guard: give CONFIG, or --templates DIR (with --baseline DIR)\n"
    assert main(["guard", "no/such.yaml"]) == 2
    assert capsys.readouterr().err == "no/such.yaml: (file): no such file\n"


def test_shipped_environments_pass_against_their_committed_baselines(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    """`baselines/<env>/` holds the reviewed templates; a change that replaces one of their stateful
    resources fails here (refresh deliberately with `python -m fminfra guard ENV --update-baseline`)."""
    for env in SHIPPED_NAMES:
        baseline = ROOT / "baselines" / env
        assert sorted(p.name for p in baseline.glob("*.template.json")), f"{baseline} is empty"
        before = guard.read_templates(baseline)
        after = guard.read_templates(synth.outdir, env)
        assert guard.count_stateful(before) >= 4  # VPC and subnets at least
        findings = guard.compare_templates(before, after, region=synth.configs[env].region)
        assert [str(f) for f in findings] == []


def test_guard_catches_a_real_subnet_cidr_change(synth: Synth) -> None:
    after = guard.read_templates(synth.outdir, "dev")
    changed = copy.deepcopy(after)
    subnet_id, subnet = next((lid, r) for lid, r in changed["dev-Network"]["Resources"].items() if r["Type"] == "AWS::EC2::Subnet")
    subnet["Properties"]["CidrBlock"] = "10.0.250.0/24"
    findings = guard.compare_templates(after, changed)
    direct = [(f.logical_id, f.property) for f in findings if not f.detail.startswith("references ")]
    assert direct == [(subnet_id, "CidrBlock")]
    # and what the subnet's replacement takes with it: the cluster and the file system created in it
    spread = {f.resource_type for f in findings if f.detail.startswith("references ")}
    assert {"AWS::SageMaker::Cluster", "AWS::FSx::FileSystem"} <= spread


# --------------------------------------------------------------------------------------------
# with credentials, stubbed: deployed templates and change sets


def _cfn() -> Any:
    return boto3.client("cloudformation", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")


def test_deployed_templates_are_the_baseline() -> None:
    client = _cfn()
    with Stubber(client) as stub:
        stub.add_response("get_template", {"TemplateBody": json.dumps(BEFORE)}, {"StackName": "dev-Storage", "TemplateStage": "Original"})
        stub.add_client_error(
            "get_template",
            "ValidationError",
            "Stack with id dev-New does not exist",
            expected_params={"StackName": "dev-New", "TemplateStage": "Original"},
        )
        before = guard.deployed_templates(client, ["dev-Storage", "dev-New"])
    assert before == {"dev-Storage": BEFORE}
    findings = guard.compare_templates(before, {"dev-Storage": _after(_deployment_type)})
    assert [f.property for f in findings] == ["LustreConfiguration.DeploymentType"]


def test_change_set_mode_reads_cloudformation_replacement_verdicts() -> None:
    client = _cfn()
    after = {"dev-Storage": _after(_subnets)}
    cs = {"StackName": "dev-Storage", "ChangeSetName": "fminfra-guard"}
    with Stubber(client) as stub:
        stub.add_response("describe_stacks", {"Stacks": []}, {"StackName": "dev-Storage"})
        stub.add_response(
            "create_change_set",
            {"Id": "arn:cs", "StackId": "arn:stack"},
            {
                **cs,
                "ChangeSetType": "UPDATE",
                "TemplateBody": json.dumps(after["dev-Storage"], separators=(",", ":")),
                "Capabilities": ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
            },
        )
        stub.add_response("describe_change_set", {"Status": "CREATE_PENDING"}, cs)
        stub.add_response(
            "describe_change_set",
            {
                "Status": "CREATE_COMPLETE",
                "Changes": [
                    {
                        "Type": "Resource",
                        "ResourceChange": {
                            "Action": "Modify",
                            "LogicalResourceId": FSX_ID,
                            "ResourceType": "AWS::FSx::FileSystem",
                            "Replacement": "True",
                            "Details": [{"Target": {"Attribute": "Properties", "Name": "SubnetIds", "RequiresRecreation": "Always"}}],
                        },
                    },
                    {
                        "Type": "Resource",
                        "ResourceChange": {
                            "Action": "Modify",
                            "LogicalResourceId": "LustreSecurityGroup",
                            "ResourceType": "AWS::EC2::SecurityGroup",
                            "Replacement": "True",
                        },
                    },
                    {
                        "Type": "Resource",
                        "ResourceChange": {"Action": "Remove", "LogicalResourceId": "DataBucket", "ResourceType": "AWS::S3::Bucket"},
                    },
                ],
            },
            cs,
        )
        stub.add_response("delete_change_set", {}, cs)
        findings = guard.change_set_findings(client, after, allow=["DataBucket"], poll_seconds=0)
        stub.assert_no_pending_responses()
    assert [str(f) for f in findings] == [
        f"dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be replaced: SubnetIds: CloudFormation change set: Replacement True",
        "ALLOWED dev-Storage: DataBucket (AWS::S3::Bucket) would be deleted: (logical id): CloudFormation change set: Remove",
    ]


def test_change_set_without_changes_and_new_stacks_pass() -> None:
    client = _cfn()
    cs = {"StackName": "dev-Storage", "ChangeSetName": "fminfra-guard"}
    with Stubber(client) as stub:
        stub.add_client_error(
            "describe_stacks", "ValidationError", "Stack with id dev-Data does not exist", expected_params={"StackName": "dev-Data"}
        )
        stub.add_response("describe_stacks", {"Stacks": []}, {"StackName": "dev-Storage"})
        stub.add_response("create_change_set", {"Id": "arn:cs"}, None)
        stub.add_response(
            "describe_change_set",
            {
                "Status": "FAILED",
                "StatusReason": "The submitted information didn't contain changes. Submit different information to create a change set.",
            },
            cs,
        )
        stub.add_response("delete_change_set", {}, cs)
        assert guard.change_set_findings(client, {"dev-Data": BEFORE, "dev-Storage": BEFORE}, poll_seconds=0) == []
        stub.assert_no_pending_responses()


# --------------------------------------------------------------------------------------------
# what a diff of one resource misses: policies, references, capacity, logs and alerting


def _guarded_lines(before: dict[str, Any], after: dict[str, Any], **kwargs: Any) -> list[str]:
    return [str(f) for f in guard.compare_templates(before, after, **kwargs)]


def test_retain_turning_into_delete_fails_for_each_data_type() -> None:
    """`removal_policy: retain` -> `destroy`: the policies go from Retain to Delete (or vanish)."""
    after = _after(lambda r: r[FSX_ID].update(DeletionPolicy="Delete", UpdateReplacePolicy="Delete"))
    assert _guarded_lines({"prod-Storage": BEFORE}, {"prod-Storage": after}) == [
        f"prod-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be unprotected: DeletionPolicy: changed from Retain to Delete: "
        "a removal from the template would delete the data instead of keeping it; loses data: the file system's contents",
        f"prod-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be unprotected: UpdateReplacePolicy: changed from Retain to Delete: "
        "a replacement would delete the data instead of keeping it; loses data: the file system's contents",
    ]
    dropped = _after(lambda r: [r[FSX_ID].pop(k) for k in ("DeletionPolicy", "UpdateReplacePolicy")])
    assert len(guard.compare_templates({"s": BEFORE}, {"s": dropped})) == 2  # no policy: CloudFormation deletes
    # Delete -> Retain is safe, and Delete staying Delete (dev) too
    assert guard.compare_templates({"s": after}, {"s": BEFORE}) == []


def test_retain_to_destroy_on_the_synthesized_prod_names_every_bucket_key_and_file_system(synth: Synth) -> None:
    before = guard.read_templates(synth.outdir, "prod")
    after = copy.deepcopy(before)
    expected = set()
    for stack, template in after.items():
        for lid, res in template["Resources"].items():
            if res["Type"] in guard.DATA_TYPES and res.get("DeletionPolicy") == "Retain":
                res["DeletionPolicy"] = res["UpdateReplacePolicy"] = "Delete"
                expected.add((stack, lid, res["Type"]))
    findings = guard.compare_templates(before, after, region=synth.configs["prod"].region)
    assert {(f.stack, f.logical_id, f.resource_type) for f in findings} == expected
    assert {t for _, _, t in expected} >= {"AWS::S3::Bucket", "AWS::KMS::Key", "AWS::FSx::FileSystem", "AWS::Logs::LogGroup"}
    assert all(f.action == "unprotected" for f in findings)


def test_a_replaced_security_group_replaces_the_file_system_that_references_it() -> None:
    after = _after(lambda r: r["LustreSecurityGroup"]["Properties"].update(GroupDescription="lustre clients"))
    assert _guarded_lines({"dev-Storage": BEFORE}, {"dev-Storage": after}) == [
        f"dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would be replaced: SecurityGroupIds: references LustreSecurityGroup "
        "(AWS::EC2::SecurityGroup), which is replaced (GroupDescription), and SecurityGroupIds is create-only; "
        "loses data: the file system's contents"
    ]
    # a change of a property that is not create-only replaces nothing
    after = _after(lambda r: r["LustreSecurityGroup"]["Properties"].update(Tags=[{"Key": "a", "Value": "b"}]))
    assert guard.compare_templates({"dev-Storage": BEFORE}, {"dev-Storage": after}) == []


def _two_stacks(description: str, reference: Any) -> dict[str, dict[str, Any]]:
    network = {
        "Resources": {"EfaSg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": description, "VpcId": "vpc-1"}}},
        "Outputs": {"ExportSg": {"Value": {"Fn::GetAtt": ["EfaSg", "GroupId"]}, "Export": {"Name": "dev-Network:EfaSg"}}},
    }
    storage = copy.deepcopy(BEFORE)
    storage["Resources"][FSX_ID]["Properties"]["SecurityGroupIds"] = [reference]
    return {"dev-Network": network, "dev-Storage": storage}


@pytest.mark.parametrize(
    "reference",
    [{"Fn::ImportValue": "dev-Network:EfaSg"}, {"Fn::Sub": "${EfaSg.GroupId}"}, {"Ref": "EfaSg"}],
    ids=["import-value", "sub", "ref"],
)
def test_replacement_spreads_across_stacks_and_through_sub(reference: Any) -> None:
    before = _two_stacks("efa", reference)
    after = _two_stacks("efa v2", reference)
    if "Fn::ImportValue" not in reference:  # Ref and Sub name a resource of their own stack
        for templates in (before, after):
            templates["dev-Storage"]["Resources"]["EfaSg"] = templates["dev-Network"]["Resources"]["EfaSg"]
    findings = guard.compare_templates(before, after)
    assert [(f.stack, f.logical_id, f.action, f.property) for f in findings] == [
        ("dev-Storage", FSX_ID, "replaced", "SecurityGroupIds"),
    ]
    assert ("in stack dev-Network" in findings[0].detail) == ("Fn::ImportValue" in reference)


def test_replacement_spreads_through_a_chain_of_resources() -> None:
    """VPC CIDR changed -> VPC replaced -> subnet (VpcId create-only) replaced -> file system
    (SubnetIds create-only) replaced."""
    before = copy.deepcopy(BEFORE)
    before["Resources"]["Subnet"] = {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.0.0/24"}}
    before["Resources"]["Vpc"] = {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}
    before["Resources"][FSX_ID]["Properties"]["SubnetIds"] = [{"Ref": "Subnet"}]
    after = copy.deepcopy(before)
    after["Resources"]["Vpc"]["Properties"]["CidrBlock"] = "10.1.0.0/16"
    findings = {(f.logical_id, f.property): f.detail for f in guard.compare_templates({"s": before}, {"s": after})}
    assert set(findings) == {("Vpc", "CidrBlock"), ("Subnet", "VpcId"), (FSX_ID, "SubnetIds")}
    assert findings[(FSX_ID, "SubnetIds")].startswith("references Subnet (AWS::EC2::Subnet), which is replaced (VpcId)")


def test_real_efa_security_group_description_change_replaces_prod_file_system_and_cluster(synth: Synth) -> None:
    before = guard.read_templates(synth.outdir, "prod")
    after = copy.deepcopy(before)
    sg = next(lid for lid in after["prod-Network"]["Resources"] if lid.startswith("EfaSecurityGroup"))
    after["prod-Network"]["Resources"][sg]["Properties"]["GroupDescription"] = "changed"
    findings = guard.compare_templates(before, after, region=synth.configs["prod"].region)
    replaced = {(f.stack, f.resource_type) for f in findings if f.action == "replaced"}
    assert ("prod-Storage", "AWS::FSx::FileSystem") in replaced
    assert ("prod-Compute", "AWS::SageMaker::Cluster") in replaced
    assert all(f.detail.startswith("references ") for f in findings)
    assert (
        sum(f"references {sg} (AWS::EC2::SecurityGroup) in stack prod-Network" in f.detail for f in findings if f.action == "replaced") == 2
    )
    # and the HyperPod cluster keeps its ClusterName: that replacement would fail the deploy
    assert {(f.stack, f.resource_type, f.property) for f in findings if f.action == "unreplaceable"} == {
        ("prod-Compute", "AWS::SageMaker::Cluster", "VpcConfig")
    }


CAPACITY_BEFORE: dict[str, Any] = {
    "Resources": {
        "Odcr": {
            "Type": "AWS::EC2::CapacityReservation",
            "Properties": {
                "InstanceType": "p5.48xlarge",
                "InstanceCount": 2,
                "AvailabilityZoneId": "usw2-az4",
                "InstancePlatform": "Linux/UNIX",
            },
        },
        "NodeRole": {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "fminfra-dev-nodes", "AssumeRolePolicyDocument": {}}},
        "AutoScalingGroupworkers": {
            "Type": "AWS::AutoScaling::AutoScalingGroup",
            "Properties": {"MinSize": "4", "MaxSize": "4", "DesiredCapacity": "4", "VPCZoneIdentifier": ["subnet-1"]},
        },
        "HyperPod": {
            "Type": "AWS::SageMaker::Cluster",
            "Properties": {
                "ClusterName": "fminfra-dev",
                "InstanceGroups": [
                    {
                        "InstanceGroupName": "workers",
                        "InstanceType": "ml.p5.48xlarge",
                        "InstanceCount": 2,
                        "ExecutionRole": {"Fn::GetAtt": ["NodeRole", "Arn"]},
                    }
                ],
            },
        },
        "Eks": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "fminfra-dev", "RoleArn": {"Fn::GetAtt": ["NodeRole", "Arn"]}}},
    }
}


OBSERVABILITY_BEFORE: dict[str, Any] = {
    "Resources": {
        "Logs": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"LogGroupName": "/fminfra/dev", "RetentionInDays": 90},
            "DeletionPolicy": "Retain",
        },
        "Workspace": {"Type": "AWS::APS::Workspace", "Properties": {"Alias": "dev"}},
        "Rules": {
            "Type": "AWS::APS::RuleGroupsNamespace",
            "Properties": {"Name": "alerts", "Workspace": {"Fn::GetAtt": ["Workspace", "Arn"]}, "Data": "groups: []"},
        },
    }
}


LOSSES = {"dev-Compute": CAPACITY_BEFORE, "dev-Observability": OBSERVABILITY_BEFORE}


@pytest.mark.parametrize(
    ("stack", "change", "expected"),
    [
        ("dev-Compute", lambda r: r.pop("Odcr"), "Odcr (AWS::EC2::CapacityReservation) would be deleted: (logical id): logical id Odcr"),
        (
            "dev-Compute",
            lambda r: r["Odcr"]["Properties"].update(AvailabilityZoneId="usw2-az1"),
            "Odcr (AWS::EC2::CapacityReservation) would be replaced: AvailabilityZoneId",
        ),
        (
            "dev-Compute",
            lambda r: r["HyperPod"]["Properties"].update(ClusterName="fminfra-dev2"),
            "HyperPod (AWS::SageMaker::Cluster) would be replaced: ClusterName",
        ),
        ("dev-Compute", lambda r: r["Eks"]["Properties"].update(Name="x"), "Eks (AWS::EKS::Cluster) would be replaced: Name"),
        (
            "dev-Compute",
            lambda r: r.update(AutoScalingGrouptrainers=r.pop("AutoScalingGroupworkers")),
            "AutoScalingGroupworkers (AWS::AutoScaling::AutoScalingGroup) would be deleted",
        ),
        (
            "dev-Observability",
            lambda r: r["Logs"]["Properties"].update(RetentionInDays=30),
            "Logs (AWS::Logs::LogGroup) would be truncated: RetentionInDays: shortened from 90 to 30 days",
        ),
        (
            "dev-Observability",
            lambda r: r["Logs"]["Properties"].update(LogGroupName="/fminfra/dev2"),
            "Logs (AWS::Logs::LogGroup) would be replaced: LogGroupName",
        ),
        ("dev-Observability", lambda r: r.pop("Workspace") and r.pop("Rules"), "Rules (AWS::APS::RuleGroupsNamespace) would be deleted"),
        (
            "dev-Observability",
            lambda r: r["Rules"]["Properties"].update(Name="alerts2"),
            "Rules (AWS::APS::RuleGroupsNamespace) would be replaced: Name",
        ),
    ],
    ids=[
        "odcr-deleted",
        "odcr-moved-az",
        "hyperpod-renamed",
        "eks-renamed",
        "ec2-group-renamed",
        "retention-shortened",
        "log-group-renamed",
        "workspace-and-rules-deleted",
        "rules-renamed",
    ],
)
def test_capacity_logs_and_alerting_losses_are_named(stack: str, change: Any, expected: str) -> None:
    after = copy.deepcopy(LOSSES[stack])
    change(after["Resources"])
    lines = _guarded_lines({stack: LOSSES[stack]}, {stack: after})
    assert any(line.startswith(f"{stack}: {expected}") for line in lines), lines
    assert all("; loses " in line for line in lines)


def test_a_renamed_role_or_a_replaced_security_group_replaces_the_clusters() -> None:
    after = copy.deepcopy(CAPACITY_BEFORE)
    after["Resources"]["NodeRole"]["Properties"]["RoleName"] = "fminfra-dev-nodes2"
    findings = guard.compare_templates({"dev-Compute": CAPACITY_BEFORE}, {"dev-Compute": after}, region="us-west-2")
    # the EKS cluster's RoleArn is create-only; an instance group's ExecutionRole is not (cfn-lint's schema);
    # the cluster keeps its Name, so that replacement would also fail the deploy
    assert [(f.logical_id, f.action, f.property) for f in findings] == [("Eks", "replaced", "RoleArn"), ("Eks", "unreplaceable", "RoleArn")]
    assert "capacity and running work" in findings[0].detail
    before = copy.deepcopy(CAPACITY_BEFORE)
    before["Resources"]["Sg"] = {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "efa", "VpcId": "vpc-1"}}
    before["Resources"]["HyperPod"]["Properties"]["VpcConfig"] = {"SecurityGroupIds": [{"Ref": "Sg"}], "Subnets": ["subnet-1"]}
    after = copy.deepcopy(before)
    after["Resources"]["Sg"]["Properties"]["GroupDescription"] = "efa v2"
    findings = guard.compare_templates({"dev-Compute": before}, {"dev-Compute": after}, region="us-west-2")
    assert [(f.logical_id, f.action, f.property) for f in findings] == [
        ("HyperPod", "replaced", "VpcConfig"),
        ("HyperPod", "unreplaceable", "VpcConfig"),
    ]


def test_longer_retention_and_rule_edits_pass() -> None:
    after = copy.deepcopy(OBSERVABILITY_BEFORE)
    after["Resources"]["Logs"]["Properties"]["RetentionInDays"] = 365
    after["Resources"]["Rules"]["Properties"]["Data"] = "groups: [{name: gpu, rules: []}]"
    assert guard.compare_templates({"s": OBSERVABILITY_BEFORE}, {"s": after}) == []
    del after["Resources"]["Logs"]["Properties"]["RetentionInDays"]  # never expire
    assert guard.compare_templates({"s": OBSERVABILITY_BEFORE}, {"s": after}) == []


def _assembly(tmp_path: Path, manifest: Any, files: dict[str, str] | None = None) -> Path:
    out = tmp_path / "cdk.out"
    out.mkdir(exist_ok=True)
    (out / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    for name, text in (files or {}).items():
        (out / name).write_text(text)
    return out


def _stack_manifest(template_file: Any = "s.template.json") -> dict[str, Any]:
    return {"artifacts": {"s": {"type": "aws:cloudformation:stack", "properties": {"templateFile": template_file}}}}


@pytest.mark.parametrize(
    ("manifest", "files", "expected"),
    [
        ("{not json", None, "manifest.json: (file): not a cloud assembly manifest: Expecting property name"),
        ("[]", None, "manifest.json: artifacts: must map artifact ids to objects"),
        (
            {"artifacts": {"s": {"type": "aws:cloudformation:stack", "properties": {}}}},
            None,
            "manifest.json: artifacts.s.properties.templateFile: must be",
        ),
        (_stack_manifest("../../etc/passwd"), None, "manifest.json: artifacts.s.properties.templateFile: must be a relative path inside"),
        (_stack_manifest(), None, "s.template.json: (file): no such file"),
        (_stack_manifest(), {"s.template.json": "[1]"}, "s.template.json: (template): must be a JSON object, got list"),
        (_stack_manifest(), {"s.template.json": '{"Resources": {"A": 1}}'}, "s.template.json: Resources: must map logical ids to objects"),
        (
            _stack_manifest(),
            {"s.template.json": '{"Resources": {"A": {"Properties": []}}}'},
            "s.template.json: Resources.A: needs a string Type",
        ),
        (_stack_manifest(), {"s.template.json": "[" * 100_000}, "s.template.json: (file): cannot read a JSON template: RecursionError"),
        (
            _stack_manifest(),
            {"s.template.json": '{"A": ' + "9" * 5001 + "}"},
            "s.template.json: (file): not a JSON template: Exceeds the limit",
        ),
        (
            {"artifacts": {"a": {"type": "cdk:cloud-assembly", "properties": {"directoryName": 3}}}},
            None,
            "artifacts.a.properties.directoryName: must be",
        ),
    ],
    ids=[
        "not-json",
        "not-a-mapping",
        "no-template-file",
        "path-escape",
        "missing-template",
        "template-list",
        "resource-not-object",
        "no-type",
        "deep",
        "huge-int",
        "bad-directory",
    ],
)
def test_malformed_assembly_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: Any, files: dict[str, str] | None, expected: str
) -> None:
    out = _assembly(tmp_path, manifest, files)
    before = _write(tmp_path / "before", {"s": BEFORE})
    assert main(["guard", "--baseline", str(before), "--templates", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and expected in captured.err, captured.err


# --------------------------------------------------------------------------------------------
# HyperPod instance groups: CloudFormation updates InstanceGroups in place (not create-only in the
# schema), and SageMaker's UpdateCluster then deletes groups and terminates nodes
# (docs/facts/hyperpod.md#hyperpod-instance-group-update-deletes-nodes)

HYPERPOD_ID = "HyperPodCluster11759092"


def _baseline(env: str) -> dict[str, dict[str, Any]]:
    return guard.read_templates(ROOT / "baselines" / env)


def _groups(templates: dict[str, dict[str, Any]], env: str) -> list[dict[str, Any]]:
    return templates[f"{env}-Compute"]["Resources"][HYPERPOD_ID]["Properties"]["InstanceGroups"]


def _workers(templates: dict[str, dict[str, Any]], env: str) -> dict[str, Any]:
    return next(g for g in _groups(templates, env) if g["InstanceGroupName"] == "workers")


def _group_rename(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["InstanceGroupName"] = "gpus"


def _group_delete(t: dict[str, Any], env: str) -> None:
    _groups(t, env).remove(_workers(t, env))


def _group_shrink(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["InstanceCount"] = 1


def _group_type(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["InstanceType"] = "ml.p4d.24xlarge"


def _group_storage(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["InstanceStorageConfigs"] = [{"EbsVolumeConfig": {"VolumeSizeInGB": 2000}}]


def _group_lifecycle(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["LifeCycleConfig"]["OnCreate"] = "on_create_v2.sh"


def _group_threads(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["ThreadsPerCore"] = 2


def _group_training_plan(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["TrainingPlanArn"] = "arn:aws:sagemaker:us-west-2:111111111111:training-plan/fminfra-next"


def _group_slurm_node_type(t: dict[str, Any], env: str) -> None:
    _workers(t, env)["SlurmConfig"] = {"NodeType": "Login"}


GROUP_CHANGES = {
    "renamed": (_group_rename, "shrunk", "InstanceGroups[workers]", "is no longer in InstanceGroups (removed or renamed; new: gpus)"),
    "deleted": (_group_delete, "shrunk", "InstanceGroups[workers]", "is no longer in InstanceGroups (removed or renamed)"),
    "count-down": (_group_shrink, "shrunk", "InstanceGroups[workers].InstanceCount", "changed from 2 to 1: SageMaker terminates 1 of"),
    "instance-type": (_group_type, "reprovisioned", "InstanceGroups[workers].InstanceType", 'changed from "ml.p'),
    "storage": (_group_storage, "reprovisioned", "InstanceGroups[workers].InstanceStorageConfigs", "changed from"),
    "threads": (_group_threads, "reprovisioned", "InstanceGroups[workers].ThreadsPerCore", "changed from 1 to 2"),
    "training-plan": (_group_training_plan, "reprovisioned", "InstanceGroups[workers].TrainingPlanArn", "changed from (unset) to"),
    "slurm-node-type": (
        _group_slurm_node_type,
        "reprovisioned",
        "InstanceGroups[workers].SlurmConfig",
        'changed from (unset) to {"NodeType":"Login"}',
    ),
}


@pytest.mark.parametrize("env", ["dev", "staging"], ids=["slurm", "eks"])
@pytest.mark.parametrize("change", sorted(GROUP_CHANGES))
def test_instance_group_changes_that_delete_or_replace_nodes_fail(env: str, change: str) -> None:
    """dev's HyperPod cluster is Slurm-orchestrated, staging's EKS-orchestrated (their baselines)."""
    mutate, action, prop, detail = GROUP_CHANGES[change]
    before = _baseline(env)
    assert ("Orchestrator" in before[f"{env}-Compute"]["Resources"][HYPERPOD_ID]["Properties"]) == (env == "staging")
    after = copy.deepcopy(before)
    mutate(after, env)
    findings = guard.compare_templates(before, after, region="us-west-2")
    assert [(f.stack, f.logical_id, f.action, f.property) for f in findings] == [(f"{env}-Compute", HYPERPOD_ID, action, prop)]
    line = str(findings[0])
    assert detail in line, line
    assert "group workers (2 nodes" in line, line  # the environment's group and its node count
    assert line.endswith("; loses capacity and running work: the HyperPod nodes and the jobs on them"), line


def test_instance_group_changes_are_reported_and_allowed_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _baseline("dev")
    after = copy.deepcopy(before)
    _group_rename(after, "dev")
    base, new = _write(tmp_path / "before", before), _write(tmp_path / "after", after)
    assert main(["guard", "--baseline", str(base), "--templates", str(new)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        f"dev-Compute: {HYPERPOD_ID} (AWS::SageMaker::Cluster) would be shrunk: InstanceGroups[workers]: group workers (2 nodes"
    )
    assert "guard: FAIL: 1 stateful resource change(s)" in out
    assert main(["guard", "--baseline", str(base), "--templates", str(new), "--allow", HYPERPOD_ID]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ALLOWED dev-Compute: {HYPERPOD_ID} (AWS::SageMaker::Cluster) would be shrunk: InstanceGroups[workers]")
    assert out.endswith(", 1 allowed\n")


@pytest.mark.parametrize("env", ["dev", "staging"], ids=["slurm", "eks"])
def test_instance_group_growth_and_a_new_group_pass(env: str) -> None:
    before = _baseline(env)
    after = copy.deepcopy(before)
    workers = _workers(after, env)
    workers["InstanceCount"] = 4
    workers["OnStartDeepHealthChecks"] = ["InstanceStress"]  # a health check setting replaces no node
    _group_lifecycle(after, env)  # UpdateCluster runs lifecycle scripts for new groups only: no node replaced
    workers["LifeCycleConfig"]["SourceS3Uri"] += "-next"  # a script change: the lifecycle prefix moves
    _groups(after, env).append({**copy.deepcopy(workers), "InstanceGroupName": "extra", "InstanceCount": 1})
    assert guard.compare_templates(before, after, region="us-west-2") == []


# --------------------------------------------------------------------------------------------
# custom names: CloudFormation cannot replace a resource whose name stays the same
# (docs/facts/pipeline.md#cloudformation-custom-name-replacement)

SERVE_ID = "InferenceserveNodegroupBCB21DF6"


def _serve(templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return templates["staging-Compute"]["Resources"][SERVE_ID]["Properties"]


def test_replacing_the_custom_named_inference_node_group_fails_and_a_new_name_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """config/staging.yaml's serve group g6e.12xlarge -> g6e.24xlarge: InstanceTypes is create-only,
    so the group and its nodes are replaced, and NodegroupName is set: the update would fail and roll back."""
    before = _baseline("staging")
    after = copy.deepcopy(before)
    _serve(after)["InstanceTypes"] = ["g6e.24xlarge"]
    _serve(after)["Labels"]["fminfra/gpu-type"] = "g6e.24xlarge"
    base, new = _write(tmp_path / "before", before), _write(tmp_path / "after", after)
    assert main(["guard", "--baseline", str(base), "--templates", str(new)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == [
        f"staging-Compute: {SERVE_ID} (AWS::EKS::Nodegroup) would be replaced: InstanceTypes: changed from "
        '["g6e.12xlarge"] to ["g6e.24xlarge"] (create-only in the CloudFormation schema); '
        "loses capacity and running work: the node group's nodes and the pods on them",
        f"staging-Compute: {SERVE_ID} (AWS::EKS::Nodegroup) would fail the deploy: InstanceTypes: changed from "
        '["g6e.12xlarge"] to ["g6e.24xlarge"] (create-only in the CloudFormation schema) replaces it, and its NodegroupName '
        '"fminfra-staging-serve" stays: CloudFormation cannot replace a custom-named resource, so the update fails and rolls back; '
        "give it a new NodegroupName, or delete it (remove it and deploy) before adding it back",
    ]
    assert "guard: FAIL: 2 stateful resource change(s)" in out
    # a new name lets CloudFormation create the replacement before it deletes the old one: the deploy
    # succeeds, and the replacement of the group's nodes is what is left to allow
    _serve(after)["NodegroupName"] = "fminfra-staging-serve-g6e24"
    assert [(f.action, f.property) for f in guard.compare_templates(before, after, region="us-west-2")] == [
        ("replaced", "InstanceTypes"),
        ("replaced", "NodegroupName"),
    ]
    # and --allow lets it through, still printed
    assert main(["guard", "--baseline", str(base), "--templates", str(new), "--allow", SERVE_ID]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ALLOWED staging-Compute: {SERVE_ID} (AWS::EKS::Nodegroup) would be replaced: InstanceTypes"), out
    assert f"\nALLOWED staging-Compute: {SERVE_ID} (AWS::EKS::Nodegroup) would fail the deploy: InstanceTypes" in out


def test_name_property_is_the_schemas_own_name_of_the_type() -> None:
    names = {
        "AWS::EKS::Nodegroup": "NodegroupName",  # not ClusterName: that names the parent
        "AWS::EKS::Cluster": "Name",
        "AWS::SageMaker::Cluster": "ClusterName",
        "AWS::S3::Bucket": "BucketName",
        "AWS::IAM::Role": "RoleName",
        "AWS::EC2::SecurityGroup": "GroupName",
        "AWS::Logs::LogGroup": "LogGroupName",
        "AWS::EKS::AccessEntry": None,
        "AWS::FSx::FileSystem": None,
        "AWS::Lambda::LayerVersion": None,  # a new version each time: no name to collide with
    }
    assert {t: guard.name_property(t, "us-west-2") for t in names} == names


def _other_value(value: Any) -> Any:
    return {"fminfra-guard-test": _show_json(value)}


def _show_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def test_every_custom_named_resource_of_every_synthesized_template_fails_a_create_only_change(synth: Synth) -> None:
    """For each resource type of each synthesized template whose name property is set, a change of
    each of its other top-level create-only properties is caught as a deploy that would fail, and
    a new name with it passes that check."""
    covered: set[str] = set()
    for env, cfg in synth.configs.items():
        templates = guard.read_templates(synth.outdir, env)
        seen: set[str] = set()
        for stack, template in sorted(templates.items()):
            for lid, res in sorted(template["Resources"].items()):
                rtype, props = res["Type"], res.get("Properties") or {}
                name = guard.name_property(rtype, cfg.region)
                if name is None or name not in props or rtype in seen:
                    continue
                seen.add(rtype)
                pointers = [p for p in guard.schema_create_only(rtype, cfg.region) if p.count("/") == 2 and p != f"/properties/{name}"]
                for pointer in pointers:
                    prop = pointer.split("/")[2]
                    after = copy.deepcopy(templates)
                    after[stack]["Resources"][lid].setdefault("Properties", {})[prop] = _other_value(props.get(prop))
                    findings = guard.compare_templates(templates, after, region=cfg.region)
                    failing = [(f.stack, f.logical_id, f.property) for f in findings if f.action == "unreplaceable"]
                    assert (stack, lid, prop) in failing, (env, rtype, prop, [str(f) for f in findings])
                    assert f"its {name} " in next(str(f) for f in findings if f.action == "unreplaceable" and f.logical_id == lid)
                    after[stack]["Resources"][lid]["Properties"][name] = f"{props[name]}-2" if isinstance(props[name], str) else "renamed"
                    findings = guard.compare_templates(templates, after, region=cfg.region)
                    assert (stack, lid, prop) not in [(f.stack, f.logical_id, f.property) for f in findings if f.action == "unreplaceable"]
                    covered.add(rtype)
    assert {"AWS::EKS::Nodegroup", "AWS::IAM::Role", "AWS::SageMaker::Cluster", "AWS::EKS::Cluster"} <= covered, covered


def test_a_replacement_through_a_reference_keeps_the_custom_name_and_fails() -> None:
    """A renamed node role replaces the role (a new name: fine), which replaces the EKS cluster
    (RoleArn is create-only) under the same Name: that deploy fails."""
    after = copy.deepcopy(CAPACITY_BEFORE)
    after["Resources"]["NodeRole"]["Properties"]["RoleName"] = "fminfra-dev-nodes2"
    findings = guard.compare_templates({"dev-Compute": CAPACITY_BEFORE}, {"dev-Compute": after}, region="us-west-2")
    failing = [str(f) for f in findings if f.action == "unreplaceable"]
    assert failing == [
        "dev-Compute: Eks (AWS::EKS::Cluster) would fail the deploy: RoleArn: references NodeRole (AWS::IAM::Role), which is replaced "
        '(RoleName), and RoleArn is create-only; its Name "fminfra-dev" stays: CloudFormation cannot replace a custom-named resource, '
        "so the update fails and rolls back; give it a new Name, or delete it (remove it and deploy) before adding it back"
    ]


def test_change_set_mode_names_a_replacement_under_a_kept_custom_name() -> None:
    """CloudFormation's verdict (Replacement True) on the custom-named node group: the deploy would
    fail; a change set that renames it (NodegroupName among the changed properties) passes."""
    after = _baseline("staging")
    _serve(after)["InstanceTypes"] = ["g6e.24xlarge"]
    stack = "staging-Compute"
    cs = {"StackName": stack, "ChangeSetName": "fminfra-guard"}

    def verdict(*names: str) -> list[str]:
        client = _cfn()
        details = [{"Target": {"Attribute": "Properties", "Name": n, "RequiresRecreation": "Always"}} for n in names]
        change = {"Action": "Modify", "LogicalResourceId": SERVE_ID, "ResourceType": "AWS::EKS::Nodegroup", "Replacement": "True"}
        with Stubber(client) as stub:
            stub.add_response("describe_stacks", {"Stacks": []}, {"StackName": stack})
            stub.add_response("create_change_set", {"Id": "arn:cs"}, None)
            stub.add_response(
                "describe_change_set",
                {"Status": "CREATE_COMPLETE", "Changes": [{"Type": "Resource", "ResourceChange": {**change, "Details": details}}]},
                cs,
            )
            stub.add_response("delete_change_set", {}, cs)
            s3 = _s3()
            with Stubber(s3) as stored:  # staging's Compute template is over the inline limit
                stored.add_response("put_object", {}, None)
                stored.add_response("delete_object", {}, None)
                store = TemplateStore(s3=s3, bucket="cdk-hnb659fds-assets-222222222222-us-west-2", region="us-west-2")
                findings = guard.change_set_findings(client, {stack: after[stack]}, poll_seconds=0, store=store)
        return [str(f) for f in findings]

    replaced = f"{stack}: {SERVE_ID} (AWS::EKS::Nodegroup) would be replaced: %s: CloudFormation change set: Replacement True"
    assert verdict("InstanceTypes") == [
        f"{stack}: {SERVE_ID} (AWS::EKS::Nodegroup) would fail the deploy: InstanceTypes: CloudFormation change set: Replacement True "
        'replaces it, and its NodegroupName "fminfra-staging-serve" stays: CloudFormation cannot replace a custom-named resource, '
        "so the update fails and rolls back; give it a new NodegroupName, or delete it (remove it and deploy) before adding it back",
        replaced % "InstanceTypes",
    ]
    # renamed, the deploy succeeds; the node group (a guarded type) is still replaced with its nodes
    assert verdict("InstanceTypes", "NodegroupName") == [replaced % "InstanceTypes, NodegroupName"]


# --------------------------------------------------------------------------------------------
# running capacity updated in place: an ec2 Auto Scaling group's sizes and subnets, an EKS managed
# node group's sizes, and the node group's removal or create-only change
# (docs/facts/capacity.md#asg-size-lowered-terminates-instances, docs/facts/capacity.md#asg-subnet-change-rebalances,
# docs/facts/eks.md#eks-nodegroup-scaling-config-lowered, docs/facts/eks.md#eks-nodegroup-create-only-properties)

ASG_ID = "TrainingworkersGroup1A2B3C4D"

# What GpuAutoScalingGroup synthesizes for an ec2 group on a Capacity Block with a known window.
EC2_GROUPS: dict[str, Any] = {
    "Resources": {
        ASG_ID: {
            "Type": "AWS::AutoScaling::AutoScalingGroup",
            "Properties": {
                "AutoScalingGroupName": "fminfra-dev-workers",
                "MinSize": "4",
                "MaxSize": "4",
                "DesiredCapacity": "4",
                "VPCZoneIdentifier": [{"Fn::ImportValue": "dev-Network:ExportsOutputRefComputeSubnetA"}],
                "LaunchTemplate": {"LaunchTemplateId": {"Ref": "Lt"}, "Version": {"Fn::GetAtt": ["Lt", "LatestVersionNumber"]}},
            },
            "UpdatePolicy": {"AutoScalingScheduledAction": {"IgnoreUnmodifiedGroupSizeProperties": True}},
        },
        "TrainingworkersBlockStart": {
            "Type": "AWS::AutoScaling::ScheduledAction",
            "Properties": {
                "AutoScalingGroupName": {"Ref": ASG_ID},
                "StartTime": "2026-12-10T11:30:00Z",
                "MinSize": 4,
                "MaxSize": 4,
                "DesiredCapacity": 4,
            },
        },
        "TrainingworkersBlockEnd": {
            "Type": "AWS::AutoScaling::ScheduledAction",
            "Properties": {
                "AutoScalingGroupName": {"Ref": ASG_ID},
                "StartTime": "2026-12-17T10:50:00Z",
                "MinSize": 0,
                "MaxSize": 4,
                "DesiredCapacity": 0,
            },
        },
    }
}


def _asg(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"][ASG_ID]["Properties"]


ASG_CHANGES = {
    "desired-down": (
        lambda p: p.update(DesiredCapacity="2"),
        "shrunk",
        "DesiredCapacity",
        'changed from "4" to "2": Auto Scaling terminates instances down to 2',
    ),
    "max-down": (
        lambda p: p.update(MaxSize="3", DesiredCapacity="3"),
        "shrunk",
        "DesiredCapacity",
        "terminates instances down to 3",
    ),
    "max-only-down": (
        lambda p: p.update(MaxSize="2"),
        "shrunk",
        "MaxSize",
        "a group running more than 2 instances has its desired capacity set to 2",
    ),
    "min-down": (lambda p: p.update(MinSize="0"), "shrunk", "MinSize", "the group may scale in to 0"),
    "subnets": (
        lambda p: p.update(VPCZoneIdentifier=["subnet-0123456789abcdef0"]),
        "reprovisioned",
        "VPCZoneIdentifier",
        "Auto Scaling rebalances the group",
    ),
    "desired-a-token": (
        lambda p: p.update(DesiredCapacity={"Ref": "Size"}),
        "shrunk",
        "DesiredCapacity",
        'changed from "4" to {"Ref":"Size"}: may terminate instances',
    ),
}


@pytest.mark.parametrize("change", sorted(ASG_CHANGES))
def test_an_auto_scaling_group_shrunk_or_moved_in_place_fails(change: str) -> None:
    """CloudFormation updates these in place (no replacement shows), and Auto Scaling terminates
    the group's running instances: a lower DesiredCapacity or MaxSize at once, a lower MinSize
    lets a scale-in reach them, new subnets rebalance (or roll) the group."""
    mutate, action, prop, detail = ASG_CHANGES[change]
    after = copy.deepcopy(EC2_GROUPS)
    mutate(_asg(after))
    findings = guard.compare_templates({"dev-Compute": EC2_GROUPS}, {"dev-Compute": after}, region="us-west-2")
    found = [(f.logical_id, f.action, f.property) for f in findings]
    assert (ASG_ID, action, prop) in found, [str(f) for f in findings]
    line = next(str(f) for f in findings if f.property == prop)
    assert line.startswith(f"dev-Compute: {ASG_ID} (AWS::AutoScaling::AutoScalingGroup) would be {action}: {prop}: "), line
    assert detail in line, line
    assert line.endswith("; loses capacity and running work: the group's instances and the jobs on them"), line


def test_a_shrunk_auto_scaling_group_is_reported_and_allowed_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = copy.deepcopy(EC2_GROUPS)
    _asg(after).update(MinSize="2", MaxSize="2", DesiredCapacity="2")
    base, new = _write(tmp_path / "before", {"dev-Compute": EC2_GROUPS}), _write(tmp_path / "after", {"dev-Compute": after})
    assert main(["guard", "--baseline", str(base), "--templates", str(new)]) == 1
    out = capsys.readouterr().out
    assert [line.split(": ")[2] for line in out.splitlines()[:-1]] == ["DesiredCapacity", "MaxSize", "MinSize"], out
    assert "guard: FAIL: 3 stateful resource change(s)" in out
    assert main(["guard", "--baseline", str(base), "--templates", str(new), "--allow", ASG_ID]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ALLOWED dev-Compute: {ASG_ID} (AWS::AutoScaling::AutoScalingGroup) would be shrunk: DesiredCapacity")
    assert out.endswith(", 3 allowed\n")


def _nodegroup(templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return templates["staging-Compute"]["Resources"][SERVE_ID]


def _scaling(**sizes: int) -> Any:
    return lambda res: res["Properties"]["ScalingConfig"].update(sizes)


NODEGROUP_CHANGES = {
    "desired-down": (_scaling(DesiredSize=0), "shrunk", "ScalingConfig.DesiredSize", "changed from 1 to 0: EKS terminates nodes down to 0"),
    "max-down": (_scaling(MaxSize=1), "shrunk", "ScalingConfig.MaxSize", "changed from 4 to 1: the node group may hold no more than 1"),
    "capacity-type": (
        lambda res: res["Properties"].update(CapacityType="SPOT"),
        "replaced",
        "CapacityType",
        "(create-only in the CloudFormation schema)",
    ),
    "disk-size": (lambda res: res["Properties"].update(DiskSize=400), "replaced", "DiskSize", "changed from 200 to 400"),
    "renamed": (
        lambda res: res["Properties"].update(NodegroupName="fminfra-staging-serve2"),
        "replaced",
        "NodegroupName",
        'changed from "fminfra-staging-serve" to "fminfra-staging-serve2"',
    ),
}


@pytest.mark.parametrize("change", sorted(NODEGROUP_CHANGES))
def test_an_eks_node_group_shrunk_or_replaced_fails(change: str) -> None:
    """config/staging.yaml's inference node group (its baseline): a lower size terminates nodes in
    place; a create-only change (a new name included) replaces the group and all its nodes."""
    mutate, action, prop, detail = NODEGROUP_CHANGES[change]
    before = _baseline("staging")
    after = copy.deepcopy(before)
    mutate(_nodegroup(after))
    findings = guard.compare_templates(before, after, region="us-west-2")
    lines = [str(f) for f in findings if (f.logical_id, f.action, f.property) == (SERVE_ID, action, prop)]
    assert len(lines) == 1, [str(f) for f in findings]
    assert lines[0].startswith(f"staging-Compute: {SERVE_ID} (AWS::EKS::Nodegroup) would be {action}: {prop}: "), lines[0]
    assert detail in lines[0], lines[0]
    assert lines[0].endswith("; loses capacity and running work: the node group's nodes and the pods on them"), lines[0]


def test_a_lower_node_group_min_size_fails() -> None:
    before = _baseline("staging")
    _nodegroup(before)["Properties"]["ScalingConfig"]["MinSize"] = 1
    after = copy.deepcopy(before)
    _nodegroup(after)["Properties"]["ScalingConfig"]["MinSize"] = 0
    assert _guarded_lines(before, after, region="us-west-2") == [
        f"staging-Compute: {SERVE_ID} (AWS::EKS::Nodegroup) would be shrunk: ScalingConfig.MinSize: changed from 1 to 0: "
        "the node group may scale in to 0: the Cluster Autoscaler, a scheduled scale-down or a later DesiredSize can terminate "
        "nodes down to it; loses capacity and running work: the node group's nodes and the pods on them"
    ]


@pytest.mark.parametrize("how", ["removed", "logical-id-renamed"])
def test_a_removed_eks_node_group_fails(how: str) -> None:
    """CloudFormation deletes a node group no longer in the template (DeleteNodegroup): its nodes go with it."""
    before = _baseline("staging")
    after = copy.deepcopy(before)
    group = after["staging-Compute"]["Resources"].pop(SERVE_ID)
    if how == "logical-id-renamed":
        after["staging-Compute"]["Resources"]["InferenceserveNodegroup2"] = group
    findings = guard.compare_templates(before, after, region="us-west-2")
    assert [(f.logical_id, f.action, f.property) for f in findings if f.logical_id == SERVE_ID] == [(SERVE_ID, "deleted", "(logical id)")]


def test_raised_sizes_and_a_scheduled_action_change_pass() -> None:
    """A higher size launches nodes and terminates none; a Capacity Block's scheduled actions change
    when the block moves (the Capacity Block window check, not this one, looks at a running window)."""
    after = copy.deepcopy(EC2_GROUPS)
    _asg(after).update(MinSize="6", MaxSize="8", DesiredCapacity="6")
    after["Resources"]["TrainingworkersBlockStart"]["Properties"].update(StartTime="2027-01-07T11:30:00Z", MinSize=8, DesiredCapacity=8)
    after["Resources"]["TrainingworkersBlockEnd"]["Properties"].update(StartTime="2027-01-14T10:50:00Z", MaxSize=8)
    assert guard.compare_templates({"dev-Compute": EC2_GROUPS}, {"dev-Compute": after}, region="us-west-2") == []
    del after["Resources"]["TrainingworkersBlockEnd"]  # a scheduled action removed: not guarded
    assert guard.compare_templates({"dev-Compute": EC2_GROUPS}, {"dev-Compute": after}, region="us-west-2") == []
    before = _baseline("staging")
    grown = copy.deepcopy(before)
    _nodegroup(grown)["Properties"]["ScalingConfig"].update(MinSize=1, MaxSize=8, DesiredSize=2)
    _nodegroup(grown)["Properties"]["Labels"]["team"] = "serving"  # labels update in place (UpdateNodegroupConfig)
    assert guard.compare_templates(before, grown, region="us-west-2") == []
    # EKS takes no action when DesiredSize leaves the template
    del _nodegroup(grown)["Properties"]["ScalingConfig"]["DesiredSize"]
    assert guard.compare_templates(before, grown, region="us-west-2") == []


def test_node_group_create_only_properties_come_from_the_schema() -> None:
    """docs/facts/eks.md#eks-nodegroup-create-only-properties: the list cfn-lint's schema carries."""
    assert set(guard.schema_create_only("AWS::EKS::Nodegroup", "us-west-2")) == {
        f"/properties/{p}"
        for p in (
            "CapacityType",
            "NodegroupName",
            "RemoteAccess",
            "NodeRole",
            "ClusterName",
            "InstanceTypes",
            "DiskSize",
            "AmiType",
            "Subnets",
        )
    }
    assert set(guard.schema_create_only("AWS::AutoScaling::AutoScalingGroup", "us-west-2")) == {
        "/properties/InstanceId",
        "/properties/AutoScalingGroupName",
    }


WORKSPACE: dict[str, Any] = {
    "Resources": {
        "PrometheusWorkspace": {
            "Type": "AWS::APS::Workspace",
            "Properties": {"Alias": "fminfra-dev-metrics", "KmsKeyArn": {"Fn::GetAtt": ["PrometheusKey", "Arn"]}},
            "UpdateReplacePolicy": "Retain",
            "DeletionPolicy": "Retain",
        }
    }
}


@pytest.mark.parametrize(
    "key",
    [None, {"Fn::GetAtt": ["OtherKey", "Arn"]}],
    ids=["to-an-aws-owned-key", "to-another-customer-managed-key"],
)
def test_a_workspace_key_change_is_a_replacement_that_loses_the_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: Any
) -> None:
    """AMP: a workspace created with a customer managed key can't be converted to AWS owned keys
    later, nor its key updated (docs/facts/observability.md#amp-workspace-cmk-permanent): any key
    change replaces the workspace and its stored metrics."""
    after = copy.deepcopy(WORKSPACE)
    props = after["Resources"]["PrometheusWorkspace"]["Properties"]
    if key is None:
        del props["KmsKeyArn"]
    else:
        props["KmsKeyArn"] = key
    before_dir = _write(tmp_path / "before", {"dev-Observability": WORKSPACE})
    after_dir = _write(tmp_path / "after", {"dev-Observability": after})
    code = main(["guard", "--baseline", str(before_dir), "--templates", str(after_dir)])
    out = "".join(capsys.readouterr())
    assert code == 1, out
    assert "dev-Observability: PrometheusWorkspace (AWS::APS::Workspace) would be replaced: KmsKeyArn" in out
    assert "the stored metrics" in out


def _padded(compact_bytes: int) -> dict[str, Any]:
    """A one-resource template whose compact JSON has about this many bytes and whose indented JSON has more."""
    template: dict[str, Any] = {"Resources": {f"P{i}": {"Type": "AWS::SNS::Topic", "Properties": {}} for i in range(3)}, "Description": ""}
    template["Description"] = "x" * max(0, compact_bytes - len(json.dumps(template, separators=(",", ":")).encode()))
    return template


def _s3() -> Any:
    return boto3.client("s3", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")


def _one_change_set(template: dict[str, Any], store: Any, **expected: Any) -> list[Any]:
    client, stack = _cfn(), "dev-Compute"
    cs = {"StackName": stack, "ChangeSetName": "fminfra-guard"}
    with Stubber(client) as stub:
        stub.add_response("describe_stacks", {"Stacks": []}, {"StackName": stack})
        params = {"StackName": stack, "ChangeSetName": "fminfra-guard", "ChangeSetType": "UPDATE", **expected}
        params["Capabilities"] = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
        stub.add_response("create_change_set", {"Id": "arn:cs"}, params)
        stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "Changes": []}, cs)
        stub.add_response("delete_change_set", {}, cs)
        return guard.change_set_findings(client, {stack: template}, poll_seconds=0, store=store)


def test_change_set_body_is_compact_so_whitespace_does_not_count_against_the_limit() -> None:
    """Over 51,200 bytes as indented JSON, under it compact: the change set takes it inline
    (CloudFormation's TemplateBody limit counts every byte sent)."""
    template = {"Resources": {f"Topic{i}": {"Type": "AWS::SNS::Topic", "Properties": {}} for i in range(900)}}
    body = json.dumps(template, separators=(",", ":"))
    assert len(json.dumps(template, indent=2).encode()) > 51_200 > len(body.encode())
    assert _one_change_set(template, None, TemplateBody=body) == []


def test_a_template_over_the_inline_limit_goes_through_the_asset_bucket_and_is_deleted() -> None:
    """CreateChangeSet's TemplateURL (an https S3 URL, up to 1 MB: docs/facts/pipeline.md#cloudformation-template-body-limit)."""
    template = _padded(60_000)
    body = json.dumps(template, separators=(",", ":"))
    bucket = "cdk-hnb659fds-assets-111111111111-us-west-2"
    key = f"fminfra-guard/dev-Compute-{hashlib.sha256(body.encode()).hexdigest()[:16]}.json"
    s3 = _s3()
    with Stubber(s3) as stored:
        stored.add_response("put_object", {}, {"Bucket": bucket, "Key": key, "Body": body.encode(), "ContentType": "application/json"})
        stored.add_response("delete_object", {}, {"Bucket": bucket, "Key": key})
        store = TemplateStore(s3=s3, bucket=bucket, region="us-west-2")
        assert _one_change_set(template, store, TemplateURL=f"https://{bucket}.s3.us-west-2.amazonaws.com/{key}") == []
        stored.assert_no_pending_responses()


def test_a_template_over_the_limits_is_one_line() -> None:
    with pytest.raises(
        guard.GuardInputError, match=r"^dev-Compute: \(template\): 6\d{4} bytes, over the 51,200 of a change set's TemplateBody$"
    ):
        guard.change_set_findings(_cfn(), {"dev-Compute": _padded(60_000)}, poll_seconds=0)
    store = TemplateStore(s3=_s3(), bucket="b", region="us-west-2")
    with pytest.raises(guard.GuardInputError, match=r"over the 1 MB of a change set's TemplateURL$"):
        guard.change_set_findings(_cfn(), {"dev-Compute": _padded(1_000_100)}, poll_seconds=0, store=store)


def _smaller(resources: dict[str, Any]) -> None:
    resources[FSX_ID]["Properties"]["StorageCapacity"] = 1200


def _metadata(iops: int) -> Any:
    def change(resources: dict[str, Any]) -> None:
        resources[FSX_ID]["Properties"]["LustreConfiguration"]["MetadataConfiguration"] = {"Mode": "USER_PROVISIONED", "Iops": iops}

    return change


def test_guard_fails_a_file_system_shrunk_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Promotion read C1: FSx for Lustre only grows a file system's storage and metadata IOPS
    (docs/facts/storage.md#fsx-lustre-update-only-grows); neither property is create-only, so
    CloudFormation updates in place, FSx refuses and the stack rolls back."""
    from fminfra.ops.guard.replacements import schema_create_only

    in_place = {"/properties/StorageCapacity", "/properties/LustreConfiguration/MetadataConfiguration/Iops"}
    assert not in_place & set(schema_create_only("AWS::FSx::FileSystem"))
    code, out = _run(tmp_path, _smaller, capsys=capsys)
    assert code == 1, out
    assert out.splitlines()[0] == (
        f"dev-Storage: {FSX_ID} (AWS::FSx::FileSystem) would fail the deploy: StorageCapacity: lowered from 2400 to 1200 GiB: "
        "FSx for Lustre only grows a file system's storage, so the update fails and rolls back; keep the capacity, "
        "or create a new file system and move the data"
    )
    base = _after(_metadata(24000))
    code, out = _run(tmp_path / "iops", _metadata(12000), capsys=capsys, base=base)
    assert code == 1 and "LustreConfiguration.MetadataConfiguration.Iops: lowered from 24000 to 12000" in out, out
    # grown, or the same: in place, passes
    for name, change in (("grown", lambda r: r[FSX_ID]["Properties"].update(StorageCapacity=4800)), ("more-iops", _metadata(36000))):
        code, out = _run(tmp_path / name, change, capsys=capsys, base=base)
        assert code == 0, (name, out)
    # a switch to AUTOMATIC with more IOPS than AUTOMATIC gives at 2400 GiB (3000) is refused too (promotion read 2, C1)
    code, out = _run(
        tmp_path / "auto",
        lambda r: r[FSX_ID]["Properties"]["LustreConfiguration"].update(MetadataConfiguration={"Mode": "AUTOMATIC"}),
        capsys=capsys,
        base=base,
    )
    assert (
        code == 1 and "MetadataConfiguration.Mode: switched to AUTOMATIC with 24000 metadata IOPS provisioned" in out and "(3000)" in out
    ), out
    small = _after(_metadata(3000))
    code, out = _run(
        tmp_path / "auto-ok",
        lambda r: r[FSX_ID]["Properties"]["LustreConfiguration"].update(MetadataConfiguration={"Mode": "AUTOMATIC"}),
        capsys=capsys,
        base=small,
    )
    assert code == 0, out
    # the test of the test: a value the guard cannot compare (an intrinsic) is not called lowered
    code, out = _run(tmp_path / "ref", lambda r: r[FSX_ID]["Properties"].update(StorageCapacity={"Ref": "Size"}), capsys=capsys)
    assert code == 0, out
