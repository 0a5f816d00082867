"""The Data and Storage stacks: template assertions, pinned logical ids, protection,
the own storage rules, and the constructs' validation."""

from __future__ import annotations

import copy
import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from fminfra.app.synth import build_app
from fminfra.config import load_config
from fminfra.core.errors import ValidationError
from fminfra.policy.rules import check_templates
from fminfra.storage.constructs.lustre import LustreFileSystem, LustreFileSystemProps
from tests.conftest import ROOT, SHIPPED_NAMES, Synth

STORAGE_ENVS = [*SHIPPED_NAMES, "storage-existing"]

# Logical ids of every stateful resource. A refactor that changes one would make CloudFormation
# replace the resource (a new, empty bucket or file system): this test must then fail loudly.
PINNED_DATA = {
    "DataKey2A0DE9E6": "AWS::KMS::Key",
    "DataKeyAliasBD63605D": "AWS::KMS::Alias",
    "DataBucketBD860FE1": "AWS::S3::Bucket",
    "DataBucketAccessLogBucketB663B84B": "AWS::S3::Bucket",
}
PINNED_STORAGE = {
    "FileSystem78AF45D6": "AWS::FSx::FileSystem",
    "FileSystemRepositorydatasetsAssociation19077F76": "AWS::FSx::DataRepositoryAssociation",
    "FileSystemRepositorycheckpointsAssociationE29844E2": "AWS::FSx::DataRepositoryAssociation",
}
STATEFUL_TYPES = {"AWS::KMS::Key", "AWS::S3::Bucket", "AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation"}
# An alias holds no data (no removal policy) but is pinned too: a new logical id would create a
# second alias of the same name before deleting the first, and the deploy would fail.
PINNED_TYPES = STATEFUL_TYPES | {"AWS::KMS::Alias"}


def _stateful(synth: Synth, env: str, stack: str) -> dict[str, str]:
    return {lid: r["Type"] for lid, r in synth.template(env, stack)["Resources"].items() if r["Type"] in PINNED_TYPES}


def _file_system(synth: Synth, env: str) -> dict[str, Any]:
    (fs,) = synth.resources(env, "Storage", "AWS::FSx::FileSystem").values()
    return fs


def _exported(synth: Synth, env: str, import_name: str) -> tuple[str, dict[str, Any]]:
    """Follow an Fn::ImportValue to the exporting stack's resource: (logical id, resource)."""
    for stack in synth.stacks[env]:
        for output in (stack.template.get("Outputs") or {}).values():
            if (output.get("Export") or {}).get("Name") == import_name:
                value = output["Value"]
                lid = value.get("Ref") or value["Fn::GetAtt"][0]
                return lid, stack.template["Resources"][lid]
    raise KeyError(import_name)


@pytest.mark.parametrize("env", SHIPPED_NAMES)
def test_pinned_logical_ids_of_stateful_resources(synth: Synth, env: str) -> None:
    assert _stateful(synth, env, "Data") == PINNED_DATA
    assert _stateful(synth, env, "Storage") == PINNED_STORAGE


def test_pinned_logical_ids_with_an_existing_bucket(synth: Synth) -> None:
    assert "storage-existing/Data" not in [s.display_name for s in synth.stacks["storage-existing"]]
    assert _stateful(synth, "storage-existing", "Storage") == {"FileSystem78AF45D6": "AWS::FSx::FileSystem"}


@pytest.mark.parametrize("env", STORAGE_ENVS)
def test_stateful_resources_follow_removal_policy_and_stacks_are_protected(synth: Synth, env: str) -> None:
    cfg = synth.configs[env]
    expected = "Retain" if cfg.removal_policy == "retain" else "Delete"
    stage = synth.stages[env]
    stacks = [s for s in (stage.data, stage.storage) if s is not None]
    assert stacks
    for stack in stacks:
        assert stack.termination_protection is (cfg.removal_policy == "retain")
        for lid, resource in synth.template(env, stack.node.id)["Resources"].items():
            if resource["Type"] in STATEFUL_TYPES:
                assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == (expected, expected), lid


def test_stack_order(synth: Synth) -> None:
    assert [s.node.id for s in synth.stages["prod"].stacks] == ["Network", "Data", "Storage", "Observability", "Compute"]
    deps = {d.node.id for d in synth.stages["prod"].compute.dependencies}
    assert {"Network", "Data", "Storage"} <= deps
    assert {d.node.id for d in synth.stages["prod"].storage.dependencies} == {"Network", "Data"}  # type: ignore[union-attr]


EXPECTED_FS = {
    # env: deployment type, capacity, per-unit throughput, compression, metadata, EFA
    "dev": ("SCRATCH_2", 1200, None, "LZ4", None, None),
    "staging": ("PERSISTENT_2", 4800, 500, "LZ4", {"Mode": "AUTOMATIC"}, False),
    "prod": ("PERSISTENT_2", 43200, 1000, "LZ4", {"Mode": "USER_PROVISIONED", "Iops": 24000}, True),
    "storage-existing": ("PERSISTENT_2", 1200, 125, "NONE", {"Mode": "AUTOMATIC"}, False),
}


@pytest.mark.parametrize("env", STORAGE_ENVS)
def test_file_system(synth: Synth, env: str) -> None:
    deployment, capacity, per_tib, compression, metadata, efa = EXPECTED_FS[env]
    props = _file_system(synth, env)["Properties"]
    assert (props["FileSystemType"], props["FileSystemTypeVersion"], props["StorageType"]) == ("LUSTRE", "2.15", "SSD")
    assert props["StorageCapacity"] == capacity
    lustre = props["LustreConfiguration"]
    assert lustre["DeploymentType"] == deployment
    assert lustre.get("PerUnitStorageThroughput") == per_tib
    assert lustre["DataCompressionType"] == compression
    assert lustre.get("MetadataConfiguration") == metadata
    assert lustre.get("EfaEnabled") == efa
    assert {"Key": "Name", "Value": f"fminfra-{env}-lustre"} in props["Tags"]


@pytest.mark.parametrize("env", STORAGE_ENVS)
def test_file_system_sits_in_the_compute_az_subnet(synth: Synth, env: str) -> None:
    props = _file_system(synth, env)["Properties"]
    (subnet_ref,) = props["SubnetIds"]
    _, subnet = _exported(synth, env, subnet_ref["Fn::ImportValue"])
    assert subnet["Type"] == "AWS::EC2::Subnet"
    assert subnet["Properties"]["AvailabilityZoneId"] == synth.configs[env].network.compute_az_id
    assert {"Key": "fminfra:subnet-kind", "Value": "compute"} in subnet["Properties"]["Tags"]


@pytest.mark.parametrize(("env", "kms_key"), [("dev", False), ("staging", True), ("prod", True), ("storage-existing", False)])
def test_file_system_kms_key(synth: Synth, env: str, kms_key: bool) -> None:
    props = _file_system(synth, env)["Properties"]
    if not kms_key:
        # scratch_2 always uses keys FSx manages; encryption s3 leaves persistent on FSx's AWS-managed key.
        assert "KmsKeyId" not in props
        return
    lid, key = _exported(synth, env, props["KmsKeyId"]["Fn::ImportValue"])
    assert (lid, key["Type"], key["Properties"]["EnableKeyRotation"]) == ("DataKey2A0DE9E6", "AWS::KMS::Key", True)


@pytest.mark.parametrize(("env", "days"), [("staging", 0), ("prod", 0), ("storage-existing", 7)])
def test_backups_only_without_repositories(synth: Synth, env: str, days: int) -> None:
    lustre = _file_system(synth, env)["Properties"]["LustreConfiguration"]
    assert lustre["AutomaticBackupRetentionDays"] == days
    assert ("DailyAutomaticBackupStartTime" in lustre) is (days > 0)
    assert "AutomaticBackupRetentionDays" not in _file_system(synth, "dev")["Properties"]["LustreConfiguration"]


@pytest.mark.parametrize("env", SHIPPED_NAMES)
def test_each_data_repository_association(synth: Synth, env: str) -> None:
    cfg = synth.configs[env]
    assert cfg.storage and cfg.storage.lustre
    repositories = cfg.storage.lustre.repositories
    associations = synth.resources(env, "Storage", "AWS::FSx::DataRepositoryAssociation")
    assert len(associations) == len(repositories) == 2
    by_path = {a["Properties"]["FileSystemPath"]: a for a in associations.values()}
    bucket_import = None
    for repo in repositories:
        props = by_path[repo.file_system_path]["Properties"]
        assert props["FileSystemId"] == {"Ref": "FileSystem78AF45D6"}
        assert props["BatchImportMetaDataOnCreate"] is True
        join = props["DataRepositoryPath"]["Fn::Join"][1]
        assert (join[0], join[2]) == ("s3://", f"/{repo.s3_prefix}")
        bucket_import = join[1]["Fn::ImportValue"]
        s3_policy = props.get("S3", {})
        assert s3_policy.get("AutoImportPolicy", {}).get("Events", []) == [e.upper() for e in repo.import_events]
        assert s3_policy.get("AutoExportPolicy", {}).get("Events", []) == [e.upper() for e in repo.export_events]
    assert bucket_import is not None
    assert _exported(synth, env, bucket_import)[0] == "DataBucketBD860FE1"
    # FSx works on one association of a file system at a time: they are created in a chain.
    assert by_path["/checkpoints"]["DependsOn"] == ["FileSystemRepositorydatasetsAssociation19077F76"]
    assert by_path["/checkpoints"]["Properties"]["S3"]["AutoExportPolicy"]["Events"] == ["NEW", "CHANGED", "DELETED"]
    assert "AutoExportPolicy" not in by_path["/datasets"]["Properties"]["S3"]


@pytest.mark.parametrize("env", ["dev", "staging", "storage-existing"])
def test_lustre_ports_group_without_efa(synth: Synth, env: str) -> None:
    groups = synth.resources(env, "Storage", "AWS::EC2::SecurityGroup")
    ((group_id, group),) = groups.items()
    assert group["Properties"]["GroupDescription"].startswith("Lustre:")
    assert _file_system(synth, env)["Properties"]["SecurityGroupIds"] == [{"Fn::GetAtt": [group_id, "GroupId"]}]
    rules = [r["Properties"] for r in synth.resources(env, "Storage", "AWS::EC2::SecurityGroupIngress").values()]
    own = {"Fn::GetAtt": [group_id, "GroupId"]}
    nodes = {
        "Fn::ImportValue": next(
            r["SourceSecurityGroupId"]["Fn::ImportValue"] for r in rules if "Fn::ImportValue" in r["SourceSecurityGroupId"]
        )
    }
    assert _exported(synth, env, nodes["Fn::ImportValue"])[1]["Properties"]["GroupDescription"].startswith("EFA:")
    found = {(json.dumps(r["GroupId"]), json.dumps(r["SourceSecurityGroupId"]), r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in rules}
    expected = {
        (json.dumps(target), json.dumps(source), "tcp", low, high)
        for target, source in ((own, own), (own, nodes), (nodes, own))
        for low, high in ((988, 988), (1018, 1023))
    }
    assert found == expected


def test_efa_file_system_uses_the_efa_all_traffic_group(synth: Synth) -> None:
    assert synth.resources("prod", "Storage", "AWS::EC2::SecurityGroup") == {}
    (group,) = _file_system(synth, "prod")["Properties"]["SecurityGroupIds"]
    _, resource = _exported(synth, "prod", group["Fn::ImportValue"])
    assert resource["Properties"]["GroupDescription"].startswith("EFA:")
    assert synth.stages["prod"].storage.security_group is synth.stages["prod"].network.efa_security_group  # type: ignore[union-attr]


@pytest.mark.parametrize("env", SHIPPED_NAMES)
def test_data_bucket(synth: Synth, env: str) -> None:
    cfg = synth.configs[env]
    template = Template.from_stack(synth.stages[env].data)  # type: ignore[arg-type]
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": f"fminfra-{env}-data-{cfg.account}-{cfg.region}",
            "VersioningConfiguration": {"Status": "Enabled"},
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "BucketKeyEnabled": True,
                        "ServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "aws:kms",
                            "KMSMasterKeyID": {"Fn::GetAtt": ["DataKey2A0DE9E6", "Arn"]},
                        },
                    }
                ]
            },
            "LoggingConfiguration": {"DestinationBucketName": {"Ref": "DataBucketAccessLogBucketB663B84B"}},
        },
    )
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": f"fminfra-{env}-logs-{cfg.account}-{cfg.region}",
            "BucketEncryption": {"ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]},
        },
    )
    for bucket in ("DataBucketBD860FE1", "DataBucketAccessLogBucketB663B84B"):
        template.has_resource_properties(
            "AWS::S3::BucketPolicy",
            {
                "Bucket": {"Ref": bucket},
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [Match.object_like({"Effect": "Deny", "Action": "s3:*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                    )
                },
            },
        )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.has_resource_properties("AWS::KMS::Alias", {"AliasName": f"alias/fminfra-{env}-data"})


def test_key_lets_fsx_use_it_through_s3_for_the_data_bucket_only(synth: Synth) -> None:
    (key,) = synth.resources("prod", "Data", "AWS::KMS::Key").values()
    (statement,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "FsxS3AccessThroughS3"]
    assert statement["Condition"] == {
        "ArnLike": {
            "aws:PrincipalArn": "arn:aws:iam::333333333333:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
        },
        "StringEquals": {"kms:CallerAccount": "333333333333", "kms:ViaService": "s3.us-east-1.amazonaws.com"},
        "StringLike": {"kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::fminfra-prod-data-333333333333-us-east-1"},
    }


@pytest.mark.parametrize("env", SHIPPED_NAMES)
def test_data_stack_deploys_on_the_emulator(synth: Synth, env: str) -> None:
    """Only types moto deploys, and no Lambda-backed custom resources (no auto-delete)."""
    types = {r["Type"] for r in synth.template(env, "Data")["Resources"].values()}
    assert types <= {"AWS::S3::Bucket", "AWS::S3::BucketPolicy", "AWS::KMS::Key", "AWS::KMS::Alias"}


def test_stage_attributes_for_the_compute_stack(synth: Synth) -> None:
    stage = synth.stages["prod"]
    assert stage.storage is not None and stage.data is not None
    for token in (stage.storage.file_system_id, stage.storage.dns_name, stage.storage.mount_name):
        assert cdk.Token.is_unresolved(token)
    assert stage.data_bucket is stage.data.bucket and stage.storage.bucket is stage.data.bucket
    existing = synth.stages["storage-existing"]
    assert existing.data is None and existing.data_bucket is not None
    assert existing.data_bucket.bucket_name == "team-datasets-example"


def test_node_role_grants_cross_stack_without_a_cycle() -> None:
    """A node role in Compute gets bucket and key access by identity policy; the Data stack does not change."""
    app = cdk.App(context=json.loads((ROOT / "cdk.json").read_text())["context"])
    _, (stage,) = build_app([load_config(ROOT / "config" / "staging.yaml")], app=app)
    role = iam.Role(stage.compute, "GrantProbe", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    assert stage.data_bucket is not None
    stage.data_bucket.grant_read_write(role)
    data = Template.from_stack(stage.data).to_json()  # type: ignore[arg-type]
    assert "GrantProbe" not in json.dumps(data)
    policies = Template.from_stack(stage.compute).find_resources("AWS::IAM::Policy")
    actions = json.dumps(policies)
    assert "s3:PutObject" in actions and "kms:Decrypt" in actions and "kms:GenerateDataKey*" in actions


# ------------------------------------------------------------------------------------------
# own rules: they pass on every template (tests/policy/rules/test_checks.py) and fail when broken


def _env_templates(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {s.stack_name: copy.deepcopy(s.template) for s in synth.stacks[env]}


def test_rule_catches_a_file_system_outside_the_compute_subnet(synth: Synth) -> None:
    templates = _env_templates(synth, "staging")
    network = templates["staging-Network"]
    other = next(
        lid
        for lid, r in network["Resources"].items()
        if r["Type"] == "AWS::EC2::Subnet" and {"Key": "fminfra:subnet-kind", "Value": "private"} in r["Properties"]["Tags"]
    )
    fs = next(r for r in templates["staging-Storage"]["Resources"].values() if r["Type"] == "AWS::FSx::FileSystem")
    (subnet,) = fs["Properties"]["SubnetIds"]
    network["Outputs"]["Moved"] = {"Value": {"Ref": other}, "Export": {"Name": "moved"}}
    fs["Properties"]["SubnetIds"] = [{"Fn::ImportValue": "moved"}]
    findings = check_templates(templates)
    assert [(f.rule_id, f.message) for f in findings] == [
        ("FMI-FSX-COMPUTE-SUBNET", f"file system is in subnet {other}, not the compute AZ's subnet (tag fminfra:subnet-kind=compute)")
    ]
    fs["Properties"]["SubnetIds"] = [subnet, subnet]
    assert [f.rule_id for f in check_templates(templates)] == ["FMI-FSX-COMPUTE-SUBNET"]


def test_rule_catches_an_efa_file_system_without_an_all_traffic_group(synth: Synth) -> None:
    templates = _env_templates(synth, "staging")
    fs = next(r for r in templates["staging-Storage"]["Resources"].values() if r["Type"] == "AWS::FSx::FileSystem")
    fs["Properties"]["LustreConfiguration"]["EfaEnabled"] = True  # with the Lustre-ports group
    findings = check_templates(templates)
    assert [f.rule_id for f in findings] == ["FMI-FSX-EFA-SG-SELF"]
    # prod's EFA file system passes; without the network's self egress rule it fails.
    prod = _env_templates(synth, "prod")
    assert check_templates(prod) == []
    network = prod["prod-Network"]["Resources"]
    for lid in [lid for lid, r in network.items() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]:
        del network[lid]
    assert sorted(f.rule_id for f in check_templates(prod)) == ["FMI-EFA-SG-SELF", "FMI-FSX-EFA-SG-SELF"]


# ------------------------------------------------------------------------------------------
# construct validation (no synth)


@pytest.fixture(scope="module")
def scope() -> tuple[cdk.Stack, ec2.IVpc, ec2.ISubnet]:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-1",
        availability_zones=["us-west-2a"],
        private_subnet_ids=["subnet-1"],
        private_subnet_route_table_ids=["rtb-1"],
    )
    return stack, vpc, vpc.private_subnets[0]


_counter = iter(range(10_000))


def _fs(scope: tuple[cdk.Stack, ec2.IVpc, ec2.ISubnet], **kwargs: Any) -> LustreFileSystem:
    stack, vpc, subnet = scope
    props: dict[str, Any] = {"vpc": vpc, "subnet": subnet, "storage_capacity_gib": 2400} | kwargs
    return LustreFileSystem(stack, f"Fs{next(_counter)}", LustreFileSystemProps(**props))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"storage_capacity_gib": 3000}, "storage_capacity_gib must be 1200, 2400 or a multiple of 2400 GiB, got 3000"),
        ({"throughput_mb_per_tib": 300}, "throughput_mb_per_tib must be 125, 250, 500 or 1000 for PERSISTENT_2, got 300"),
        ({"deployment_type": "SCRATCH_1"}, "deployment_type must be PERSISTENT_2 or SCRATCH_2, got 'SCRATCH_1'"),
        ({"deployment_type": "SCRATCH_2", "efa_enabled": True}, "efa_enabled requires PERSISTENT_2, got SCRATCH_2"),
        (
            {"efa_enabled": True, "throughput_mb_per_tib": 1000},
            "storage_capacity_gib must be a multiple of 4800 GiB for an EFA-enabled file system at 1000 MB/s/TiB "
            "(steps by tier: 125: 38400, 250: 19200, 500: 9600, 1000: 4800), got 2400",
        ),
        (
            {"deployment_type": "SCRATCH_2", "throughput_mb_per_tib": 250},
            "throughput_mb_per_tib is for PERSISTENT_2 only, got 250 with SCRATCH_2",
        ),
        ({"data_compression": "ZSTD"}, "data_compression must be LZ4 or NONE, got 'ZSTD'"),
        (
            {"metadata_mode": "USER_PROVISIONED", "metadata_iops": 7000},
            "metadata_iops must be 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000, got 7000",
        ),
        ({"metadata_iops": 12000}, "metadata_iops requires metadata_mode USER_PROVISIONED, got 12000 with AUTOMATIC"),
        (
            {"deployment_type": "SCRATCH_2", "automatic_backup_retention_days": 7},
            "automatic_backup_retention_days is for PERSISTENT_2 only (FSx does not back up scratch), got 7 with SCRATCH_2",
        ),
    ],
)
def test_lustre_construct_validation(scope: tuple[cdk.Stack, ec2.IVpc, ec2.ISubnet], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        _fs(scope, **kwargs)
    assert str(info.value) == message


def test_lustre_construct_kms_only_for_persistent(scope: tuple[cdk.Stack, ec2.IVpc, ec2.ISubnet]) -> None:
    key = kms.Key(scope[0], f"Key{next(_counter)}")
    with pytest.raises(ValidationError, match=r"^kms_key applies to PERSISTENT_2 only \(SCRATCH_2 uses keys FSx manages\), got SCRATCH_2$"):
        _fs(scope, deployment_type="SCRATCH_2", kms_key=key)


def test_data_repository_association_rules(scope: tuple[cdk.Stack, ec2.IVpc, ec2.ISubnet]) -> None:
    fs = _fs(scope)
    bucket = s3.Bucket.from_bucket_name(scope[0], f"B{next(_counter)}", "bucket-b")
    fs.add_data_repository_association("A", bucket=bucket, s3_prefix="a/", file_system_path="/data")
    with pytest.raises(ValidationError, match=r"^file_system_path '/data/x' overlaps '/data'; paths must not overlap$"):
        fs.add_data_repository_association("B", bucket=bucket, s3_prefix="b/", file_system_path="/data/x")
    with pytest.raises(ValidationError, match=r"^file_system_path must start with '/', got 'x'$"):
        fs.add_data_repository_association("C", bucket=bucket, s3_prefix="c/", file_system_path="x")
    with pytest.raises(ValidationError, match=r"^export_events must be distinct values of NEW, CHANGED, DELETED, got NEW, RENAMED$"):
        fs.add_data_repository_association("D", bucket=bucket, s3_prefix="d/", file_system_path="/d", export_events=["NEW", "RENAMED"])
    for i in range(7):
        fs.add_data_repository_association(f"Ok{i}", bucket=bucket, s3_prefix=f"p{i}/", file_system_path=f"/p{i}")
    assert len(fs.data_repository_associations) == 8
    with pytest.raises(ValidationError, match=r"^a file system takes at most 8 data repository associations, adding one more$"):
        fs.add_data_repository_association("Ninth", bucket=bucket, s3_prefix="n/", file_system_path="/n")


@pytest.mark.parametrize("given", ["efa_enabled", "security_group"])
def test_client_groups_the_construct_would_not_open_are_refused(scope: tuple[cdk.Stack, ec2.IVpc, ec2.ISubnet], given: str) -> None:
    # With EFA (its own all-traffic group) or a given group, client groups would get no rule: the
    # clients could not mount. Refused in one line instead of silently dropped.
    stack, vpc, _ = scope
    clients = ec2.SecurityGroup(stack, f"Clients-{given}", vpc=vpc)
    extra: dict[str, Any] = (
        {"efa_enabled": True} if given == "efa_enabled" else {"security_group": ec2.SecurityGroup(stack, f"Own-{given}", vpc=vpc)}
    )
    with pytest.raises(ValidationError, match=f"^client_security_groups apply only .* got 1 with {given}: give security_group"):
        _fs(scope, client_security_groups=(clients,), **extra)
