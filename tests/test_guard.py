"""The stateful-change guard: synthetic BEFORE/AFTER templates, the CLI, baselines, change sets."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fminfra.cli import main
from fminfra.commands import guard
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


def _run(tmp_path: Path, change: Any, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    before = _write(tmp_path / "before", {"dev-Storage": BEFORE})
    after = _write(tmp_path / "after", {"dev-Storage": _after(change)})
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


@pytest.mark.parametrize("change", [_tags_only, _throughput], ids=["tags-only", "throughput"])
def test_guard_passes_in_place_updates(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any) -> None:
    code, out = _run(tmp_path, change, capsys=capsys)
    assert code == 0, out
    assert out == "guard: ok: 2 stateful resources compared\n"


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
    assert [(f.logical_id, f.property) for f in findings] == [(subnet_id, "CidrBlock")]


@pytest.mark.slow
def test_cli_synthesizes_config_and_updates_a_baseline(tmp_path: Path) -> None:
    """`guard CONFIG --update-baseline --baseline DIR`, then `guard CONFIG --baseline DIR` is clean."""
    base = tmp_path / "base"
    run = [sys.executable, "-m", "fminfra", "guard", "config/dev.yaml", "--baseline", str(base)]
    result = subprocess.run([*run, "--update-baseline"], capture_output=True, text=True, cwd=ROOT, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"wrote {base / 'dev-Network.template.json'}" in result.stdout
    network = json.loads((base / "dev-Network.template.json").read_text())
    vpc = next(lid for lid, r in network["Resources"].items() if r["Type"] == "AWS::EC2::VPC")
    network["Resources"][vpc]["Properties"]["CidrBlock"] = "10.9.0.0/16"
    (base / "dev-Network.template.json").write_text(json.dumps(network))
    result = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, check=False, timeout=300)
    assert result.returncode == 1
    assert f"dev-Network: {vpc} (AWS::EC2::VPC) would be replaced: CidrBlock: changed from" in result.stdout
    assert "Traceback" not in result.stderr


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
                "TemplateBody": json.dumps(after["dev-Storage"]),
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
