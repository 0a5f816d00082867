"""`make deploy-local`: a real cdk bootstrap/deploy/destroy against moto_server, and its clean-up."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.ci import load_script
from tests.conftest import ROOT, Synth

SCRIPT = ROOT / "scripts" / "deploy_local.py"


deploy_local = load_script(SCRIPT)


def _stack(artifact_id: str, types: list[str], depends_on: list[str] | None = None) -> Any:
    resources = {f"R{i}": {"Type": t} for i, t in enumerate(types)}
    return deploy_local.Stack(artifact_id, f"dev-{artifact_id}", f"dev/{artifact_id}", {"Resources": resources}, depends_on or [])


def test_stacks_with_types_moto_cannot_deploy_are_skipped_with_their_dependents() -> None:
    supported = deploy_local.moto_supported_types()
    assert {"AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::S3::Bucket", "AWS::KMS::Key"} <= supported
    assert not {"AWS::FSx::FileSystem", "AWS::SageMaker::Cluster", "AWS::APS::Workspace", "AWS::EC2::PlacementGroup"} & supported
    stacks = [
        _stack("Network", ["AWS::EC2::VPC", "AWS::EC2::SecurityGroupEgress", "AWS::CDK::Metadata"]),
        _stack("Data", ["AWS::S3::Bucket", "AWS::S3::BucketPolicy", "AWS::KMS::Key"], ["Network"]),
        _stack("Storage", ["AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation"], ["Network", "Data"]),
        _stack("Compute", ["AWS::IAM::Role"], ["Network", "Storage"]),
        _stack("Hooks", ["AWS::IAM::Role", "Custom::S3AutoDeleteObjects"]),
    ]
    chosen, skipped = deploy_local.select_stacks(stacks, supported)
    assert [s.stack_name for s in chosen] == ["dev-Network", "dev-Data"]
    assert skipped == {
        "dev-Storage": "moto does not deploy AWS::FSx::DataRepositoryAssociation, AWS::FSx::FileSystem",
        "dev-Compute": "depends on dev-Storage, which is not deployed",
        "dev-Hooks": "moto does not deploy Custom::S3AutoDeleteObjects",
    }


def test_every_dev_stack_moto_supports_is_selected(synth: Synth) -> None:
    """The shipped dev environment's stacks, read from the assembly the way the script reads them."""
    stacks = deploy_local.read_stacks(synth.outdir, "dev")
    chosen, skipped = deploy_local.select_stacks(stacks, deploy_local.moto_supported_types())
    assert "dev-Network" in [s.stack_name for s in chosen]
    for name, why in skipped.items():
        assert why.startswith(("moto does not deploy", "depends on")), (name, why)
    assert len(chosen) + len(skipped) == len(stacks)


def test_imports_are_found_anywhere_in_a_template() -> None:
    resources = {
        "A": {"Properties": {"SubnetIds": [{"Fn::ImportValue": "dev-Network:Subnet"}], "X": {"Fn::ImportValue": "dev-Network:Vpc"}}}
    }
    assert sorted(deploy_local._import_names(resources)) == ["dev-Network:Subnet", "dev-Network:Vpc"]


EXPORTER = {
    "Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}},
    "Outputs": {"VpcOut": {"Value": {"Ref": "Vpc"}, "Export": {"Name": "dev-Network:Vpc"}}},
}
IMPORTER = {
    "Resources": {
        "Sg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "x", "VpcId": {"Fn::ImportValue": "dev-Network:Vpc"}}}
    },
}


def test_exports_and_their_importers_are_checked(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import boto3
    from moto import mock_aws

    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    network = deploy_local.Stack("Network", "dev-Network", "dev/Network", EXPORTER)
    data = deploy_local.Stack("Data", "dev-Data", "dev/Data", IMPORTER, ["Network"])
    with mock_aws():
        session = boto3.session.Session(region_name="us-west-2")
        cfn = session.client("cloudformation")
        # an import of a missing export fails the stack in moto, as in CloudFormation
        with pytest.raises(Exception, match="dev-Network:Vpc"):
            cfn.create_stack(StackName="dev-Data-too-early", TemplateBody=json.dumps(IMPORTER))
        cfn.create_stack(StackName="dev-Network", TemplateBody=json.dumps(EXPORTER))
        checks = deploy_local.Checks()
        deploy_local.check_exports(checks, session, None, [network, data])
        assert checks.failed == 1  # the importer is not deployed
        cfn.create_stack(StackName="dev-Data", TemplateBody=json.dumps(IMPORTER))
        checks = deploy_local.Checks()
        deploy_local.check_exports(checks, session, None, [network, data])
        assert checks.failed == 0
    out = capsys.readouterr().out
    assert "ok   dev-Network: export dev-Network:Vpc (VpcOut)" in out
    assert "FAIL dev-Data: imports dev-Network:Vpc (not deployed)" in out
    assert out.rstrip().endswith("ok   dev-Data: imports dev-Network:Vpc (CREATE_COMPLETE)")


TAGGED_KEY = {
    "Resources": {
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {
                "KeyPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "kms:*", "Resource": "*"}],
                },
                "Tags": [{"Key": "fminfra:environment", "Value": "dev"}],
            },
        }
    }
}


def test_moto_patch_makes_tagged_kms_keys_deployable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two moto 5.2.5 KMS bugs the script's server works around: without the patch a tagged
    key fails the stack; with it the key exists, keeps its tags, and DescribeKey works."""
    import boto3
    from moto import mock_aws
    from moto.cloudformation import parsing
    from moto.kms.models import Key

    monkeypatch.setattr(Key, "create_from_cloudformation_json", Key.create_from_cloudformation_json)  # undone after the test
    monkeypatch.setattr(parsing, "resource_class_from_type", parsing.resource_class_from_type)
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="us-west-2")
        with pytest.raises(Exception, match=r"undefined resource|TagKey"):
            cfn.create_stack(
                StackName="unpatched", TemplateBody=json.dumps({**TAGGED_KEY, "Outputs": {"K": {"Value": {"Fn::GetAtt": ["Key", "Arn"]}}}})
            )
        deploy_local.patch_moto()
        cfn.create_stack(StackName="patched", TemplateBody=json.dumps(TAGGED_KEY))
        key_id = cfn.describe_stack_resources(StackName="patched")["StackResources"][0]["PhysicalResourceId"]
        kms = boto3.client("kms", region_name="us-west-2")
        assert kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"] == "Enabled"
        assert kms.list_resource_tags(KeyId=key_id)["Tags"] == [{"TagKey": "fminfra:environment", "TagValue": "dev"}]


def test_emulated_default_security_group_restriction(monkeypatch: pytest.MonkeyPatch, synth: Synth) -> None:
    """The Network stack's `Custom::VpcRestrictDefaultSG` resources: selected (not skipped as needing
    Docker) and carried out on moto's EC2 state: the default group ends with no rules. The handler
    function is left out here only because its code is a CDK asset this in-process check lacks."""
    import boto3
    from moto import mock_aws
    from moto.cloudformation import parsing
    from moto.kms.models import Key

    assert not any(
        t.startswith("Custom::VpcRestrictDefaultSG")
        for t in deploy_local.select_stacks(
            [_stack("Network", ["AWS::EC2::VPC", "Custom::VpcRestrictDefaultSG"])], deploy_local.moto_supported_types()
        )[1].values()
    )
    monkeypatch.setattr(Key, "create_from_cloudformation_json", Key.create_from_cloudformation_json)
    monkeypatch.setattr(parsing, "resource_class_from_type", parsing.resource_class_from_type)
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    network = json.loads(json.dumps(synth.template("dev", "Network")))
    vpc = next(lid for lid, r in network["Resources"].items() if r["Type"] == "AWS::EC2::VPC")
    resources = {lid: r for lid, r in network["Resources"].items() if r["Type"] == "Custom::VpcRestrictDefaultSG"}
    assert len(resources) == 2
    for res in resources.values():
        res["Properties"]["ServiceToken"] = "arn:aws:lambda:us-west-2:123456789012:function:handler"
        res.pop("DependsOn", None)
    template = {"Resources": {vpc: network["Resources"][vpc], **resources}}
    deploy_local.patch_moto()
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="us-west-2")
        cfn.create_stack(StackName="restricted", TemplateBody=json.dumps(template))
        ec2 = boto3.client("ec2", region_name="us-west-2")
        vpc_id = cfn.describe_stack_resource(StackName="restricted", LogicalResourceId=vpc)["StackResourceDetail"]["PhysicalResourceId"]
        groups = ec2.describe_security_groups(
            Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "group-name", "Values": ["default"]}]
        )
        group = groups["SecurityGroups"][0]
        assert (group["IpPermissions"], group["IpPermissionsEgress"]) == ([], [])


def _clean_env() -> dict[str, str]:
    """A machine without AWS credentials or configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent"
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    return env


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead but not yet reaped by its parent
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _moto_pid(output: str) -> int:
    match = re.search(r"moto_server pid (\d+) on http://localhost:(\d+)", output)
    assert match, output
    return int(match.group(1))


@pytest.mark.slow
def test_deploy_local_deploys_checks_and_destroys_dev() -> None:
    """The real thing, bounded in time: `make deploy-local` runs exactly this script."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--config", "config/dev.yaml"],
        cwd=ROOT,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, output[-6000:]
    assert "FAIL" not in output
    for pattern in (
        r"ok   cdk bootstrap aws://111111111111/us-west-2 \(exit 0\)",
        r"ok   dev-Network: CREATE_COMPLETE",
        r"ok   dev-Network: outputs \[.*'ComputeSubnetId'.*'VpcId'.*\]",
        r"ok   VPC vpc-\w+: CIDR 10\.0\.0\.0/16",
        r"ok   VPC vpc-\w+: 6 subnets with the planned CIDRs",
        r"ok   VPC vpc-\w+: \d+ endpoints \(1 gateway, \d+ interface\)",
        r"ok   security group sg-\w+ \(EfaSecurityGroup\w+\): 1/1 ingress rules present",
        r"ok   VPC vpc-\w+: (deleted|subnets and security groups deleted)",
        r"ok   no deployed stack left active",
        r"deploy-local: ok: 0 failed check\(s\)",
    ):
        assert re.search(pattern, output), pattern
    assert not _pid_alive(_moto_pid(output))


FAKE_CDK = """
import shutil, sys, time
args = sys.argv[1:]
if args[0] == "synth":
    shutil.copytree({src!r}, args[args.index("-o") + 1], dirs_exist_ok=True)
elif {mode!r} == "hang":
    print("bootstrap hangs", flush=True)
    time.sleep(300)
else:
    sys.exit(3)
"""


def _fake_cdk(tmp_path: Path, synth: Synth, mode: str) -> str:
    path = tmp_path / "fake_cdk.py"
    path.write_text(textwrap.dedent(FAKE_CDK.format(src=str(synth.outdir), mode=mode)))
    return f"{sys.executable} {path}"


def test_failed_bootstrap_stops_the_server(tmp_path: Path, synth: Synth) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--cdk", _fake_cdk(tmp_path, synth, "fail"), "--workdir", str(tmp_path / "w")],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL cdk bootstrap aws://111111111111/us-west-2 (exit 3)" in result.stdout
    assert "moto_server stopped" in result.stdout
    assert not _pid_alive(_moto_pid(result.stdout))


def test_interrupted_run_stops_the_server_and_the_cdk_command(tmp_path: Path, synth: Synth) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--cdk", _fake_cdk(tmp_path, synth, "hang"), "--workdir", str(tmp_path / "w")],
        cwd=ROOT,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log = tmp_path / "w" / "deploy-local.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and "bootstrap hangs" in log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "bootstrap never started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, output
    assert "moto_server stopped" in output
    assert not _pid_alive(_moto_pid(output))
    fake_cdk_still_running = subprocess.run(["pgrep", "-f", str(tmp_path / "fake_cdk.py")], capture_output=True, text=True, check=False)
    assert fake_cdk_still_running.stdout == "", "the hanging cdk command survived"


def test_bad_config_exits_2_before_starting_anything(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--config", "config/nope.yaml"],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "config/nope.yaml: (file): no such file\n"
    assert "moto_server" not in result.stdout


def test_script_reads_the_assembly_the_cdk_cli_writes(synth: Synth) -> None:
    manifest = json.loads((synth.outdir / "manifest.json").read_text())
    assert any(a.get("type") == "cdk:cloud-assembly" for a in manifest["artifacts"].values())
    stacks = deploy_local.read_stacks(synth.outdir, "dev")
    assert [s.stack_name for s in stacks][:1] == ["dev-Network"]
    compute = next(s for s in stacks if s.stack_name == "dev-Compute")
    network = next(s for s in stacks if s.stack_name == "dev-Network")
    assert network.artifact_id in compute.depends_on
