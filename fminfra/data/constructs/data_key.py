"""The customer-managed KMS key that encrypts the data bucket and the persistent file system."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

# FSx links a file system to S3 through a service-linked role per file system,
# AWSServiceRoleForFSxS3Access_<file system id>: its name is unknown until the file system exists.
FSX_S3_ROLE_PATH = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"


@dataclass(frozen=True, kw_only=True)
class DataKeyProps:
    """Props of `DataKey`.

    alias_name: the key's alias, `alias/...`; include the environment name.
    fsx_linked_bucket_arn: ARN of an SSE-KMS bucket that FSx data repository associations read
      and write: the key policy then lets FSx's S3 service-linked roles of this account use the
      key through S3 for objects of that bucket (FSx "server-side encrypted S3 buckets" page).
      Default: no such statement.
    removal_policy: Default: RETAIN (deleting the key makes everything it encrypted unreadable).
    """

    alias_name: str
    fsx_linked_bucket_arn: str | None = None
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


class DataKey(Construct):
    """Creates a symmetric KMS key with yearly automatic rotation and an alias.

    Attributes: `key`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: DataKeyProps) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            alias=props.alias_name,
            description="fminfra data: the data bucket and the persistent FSx for Lustre file system",
            enable_key_rotation=True,
            removal_policy=props.removal_policy,
        )
        if props.fsx_linked_bucket_arn is not None:
            stack = cdk.Stack.of(self)
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="FsxS3AccessThroughS3",
                    principals=[iam.AnyPrincipal()],
                    actions=["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
                    resources=["*"],
                    conditions={
                        "ArnLike": {"aws:PrincipalArn": f"arn:{stack.partition}:iam::{stack.account}:{FSX_S3_ROLE_PATH}"},
                        "StringEquals": {"kms:CallerAccount": stack.account, "kms:ViaService": f"s3.{stack.region}.amazonaws.com"},
                        # With S3 Bucket Keys the encryption context is the bucket ARN.
                        "StringLike": {"kms:EncryptionContext:aws:s3:arn": props.fsx_linked_bucket_arn},
                    },
                )
            )
