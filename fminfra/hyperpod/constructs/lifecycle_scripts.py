"""HyperPod lifecycle scripts published, unpacked, to an environment-specific `sagemaker-` bucket."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.policy.constructs.acknowledge import acknowledge, arn_reference, drop_redundant_role_dependency
from fminfra.promotion.rules import BOOTSTRAP_QUALIFIER
from fminfra.storage.rules import BUCKET_NAME

# S3 bucket names: 3-63 lowercase letters, digits, dots and hyphens.
PARAMETERS_FILE = "provisioning_parameters.json"


def partition_of(region: str) -> str:
    """The AWS partition of a region name (aws-cn for cn-*, aws-us-gov for us-gov-*, else aws), for
    acknowledgments that must name an ARN literally when the app leaves the partition a token."""
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def lifecycle_bucket_name(environment: str, account: str, region: str) -> str:
    """`sagemaker-fminfra-<env>-<hash>`: starts with `sagemaker-` (the HyperPod managed policy
    covers only those buckets) and is unique per account, region and environment."""
    digest = hashlib.sha256(f"{account}/{region}/{environment}".encode()).hexdigest()[:12]
    return f"sagemaker-fminfra-{environment}-{digest}"


@dataclass(frozen=True, kw_only=True)
class LifecycleScriptsProps:
    """Props of `LifecycleScripts`.

    bucket_name: physical name; must start with `sagemaker-` (see `lifecycle_bucket_name`).
    folders: what to publish: prefix inside the published tree ("" for the top) -> local folder.
      The entry script must be at the top.
    parameters: the provisioning parameters, published as provisioning_parameters.json beside the
      scripts; values may be CDK tokens (FSx DNS name). Default: none published.
    entry_script: the file HyperPod runs (`LifeCycleConfig.OnCreate`). Default: on_create.sh.
    key_prefix: where the versions live in the bucket. Default: lifecycle.
    removal_policy: of the bucket. Default: RETAIN.
    """

    bucket_name: str
    folders: Mapping[str, Path]
    parameters: Mapping[str, Any] | None = None
    entry_script: str = "on_create.sh"
    key_prefix: str = "lifecycle"
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


class LifecycleScripts(Construct):
    """Creates a private, encrypted, TLS-only bucket and publishes the scripts unpacked to
    `<key_prefix>/<version>/`, where the version is a hash of every published file and of the
    parameters: a change to any script gives a new `source_s3_uri`, so HyperPod picks it up.

    Attributes: `bucket`, `version`, `key_prefix` (ends in /), `source_s3_uri`, `entry_script`,
    `deployment`; `grant_read(grantee)` reads only this version's prefix.
    """

    def __init__(self, scope: Construct, construct_id: str, props: LifecycleScriptsProps) -> None:
        super().__init__(scope, construct_id)
        if not cdk.Token.is_unresolved(props.bucket_name):
            if not props.bucket_name.startswith("sagemaker-"):
                raise ValidationError(
                    f"bucket_name must start with 'sagemaker-' (the HyperPod managed policy covers only those), got {props.bucket_name!r}",
                    path="bucket_name",
                )
            if problem := BUCKET_NAME.problem(props.bucket_name):
                raise ValidationError(f"bucket_name {problem}", path="bucket_name")
        if "" not in props.folders:
            raise ValidationError(
                "folders must map '' (the top of the published tree) to the folder holding the entry script", path="folders"
            )
        for prefix, folder in props.folders.items():
            if not Path(folder).is_dir():
                raise ValidationError(f"folders[{prefix!r}]: {folder} is not a folder")
        if not (Path(props.folders[""]) / props.entry_script).is_file():
            raise ValidationError(f"entry_script {props.entry_script!r} is not in {props.folders['']}", path="entry_script")

        stack = cdk.Stack.of(self)
        staging = _stage(props.folders)
        digest = hashlib.sha256(_tree_digest(staging).encode())
        if props.parameters is not None:
            # Tokens resolve to stable CloudFormation intrinsics, so the hash is stable too.
            digest.update(json.dumps(stack.resolve(dict(props.parameters)), sort_keys=True).encode())
        self.version = digest.hexdigest()[:16]
        self.key_prefix = f"{props.key_prefix.strip('/')}/{self.version}/"
        self.entry_script = props.entry_script

        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=props.bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            removal_policy=props.removal_policy,
            auto_delete_objects=False,
        )
        acknowledge(
            self.bucket,
            "S1",
            "Holds only the lifecycle scripts (public in fminfra's source) and their parameters (names and ARNs, no secrets), written "
            "solely by the CDK BucketDeployment and read by the HyperPod nodes' role; object reads and writes are CloudTrail data "
            "events, recorded only where the account enables them, so no per-object log exists unless it does",
        )
        sources = [s3deploy.Source.asset(str(staging))]
        if props.parameters is not None:
            sources.append(s3deploy.Source.json_data(PARAMETERS_FILE, dict(props.parameters)))
        self.deployment = s3deploy.BucketDeployment(
            self,
            "Publish",
            sources=sources,
            destination_bucket=self.bucket,
            destination_key_prefix=self.key_prefix,
            extract=True,
            prune=True,
            retain_on_delete=True,
            memory_limit=256,
        )
        self.source_s3_uri = f"s3://{props.bucket_name}/{self.key_prefix}"
        self._acknowledge_deployment(stack)

    def _acknowledge_deployment(self, stack: cdk.Stack) -> None:
        """The BucketDeployment handler (a CDK singleton Lambda) and its role: CDK generates
        them; the wildcards are on this bucket and the bootstrap asset bucket only."""
        role = self.deployment.handler_role
        function = role.node.scope
        acknowledge(
            role,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's BucketDeployment handler role; this AWS managed policy only lets it write its own CloudWatch logs",
        )
        assert function is not None
        drop_redundant_role_dependency(function)
        acknowledge(
            function, "L1", "CDK's BucketDeployment handler; aws-cdk-lib pins its runtime, which moves with the aws-cdk-lib version"
        )
        policy = role.node.try_find_child("DefaultPolicy")
        assert policy is not None
        bucket = self.bucket.node.default_child
        assert isinstance(bucket, cdk.CfnResource)
        reason = "CDK's BucketDeployment grants: read of the CDK bootstrap asset bucket, and write/prune of the lifecycle bucket; wildcards are CDK's grant action groups on those two buckets only"
        for action in ("s3:GetObject*", "s3:GetBucket*", "s3:List*", "s3:DeleteObject*", "s3:Abort*"):
            acknowledge(policy, f"IAM5[Action::{action}]", reason)
        acknowledge(policy, f"IAM5[Resource::{arn_reference(bucket)}/*]", reason)
        # The asset bucket's ARN in the stack's partition (aws, aws-us-gov, aws-cn), as CDK's grant writes it.
        partition = stack.partition if not cdk.Token.is_unresolved(stack.partition) else partition_of(stack.region)
        assets = f"arn:{partition}:s3:::cdk-{BOOTSTRAP_QUALIFIER}-assets-{stack.account}-{stack.region}/*"
        acknowledge(policy, f"IAM5[Resource::{assets}]", reason)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read access to this version's prefix only (CDK's read action groups, acknowledged)."""
        grant = self.bucket.grant_read(grantee, f"{self.key_prefix}*")
        role = grantee.grant_principal
        policy = role.node.try_find_child("DefaultPolicy") if isinstance(role, iam.Role) else None
        if policy is not None:
            bucket = self.bucket.node.default_child
            assert isinstance(bucket, cdk.CfnResource)
            reason = (
                "CDK grant_read's action groups (GetObject*, GetBucket*, List*), on this lifecycle bucket's current version prefix only"
            )
            for action in ("s3:GetObject*", "s3:GetBucket*", "s3:List*"):
                acknowledge(policy, f"IAM5[Action::{action}]", reason)
            acknowledge(policy, f"IAM5[Resource::{arn_reference(bucket)}/{self.key_prefix}*]", reason)
        return grant


def _stage(folders: Mapping[str, Path]) -> Path:
    """Copy the folders into one tree (prefix -> subfolder), the asset that gets published."""
    root = Path(tempfile.mkdtemp(prefix="fminfra-lifecycle-"))
    for prefix, folder in sorted(folders.items()):
        target = root / prefix if prefix else root
        shutil.copytree(folder, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
    return root


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()
