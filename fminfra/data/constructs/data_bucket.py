"""The data bucket that datasets and checkpoints live in, and its access-log bucket."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra.core.errors import ValidationError


@dataclass(frozen=True, kw_only=True)
class DataBucketProps:
    """Props of `DataBucket`.

    bucket_name: physical name of the data bucket; include the environment name.
    access_log_bucket_name: physical name of the server-access-log bucket.
    encryption_key: SSE-KMS with this customer-managed key (S3 Bucket Keys on). Default: SSE-S3.
    removal_policy: of both buckets. Default: RETAIN. DESTROY deletes only empty buckets: there
      is deliberately no auto-delete (a Lambda-backed custom resource) so that the stack deploys
      on emulators and a mistake cannot empty the bucket.
    abort_incomplete_uploads_days: incomplete multipart uploads (interrupted checkpoint writes)
      are removed after this many days. Default: 7.
    """

    bucket_name: str
    access_log_bucket_name: str
    encryption_key: kms.IKey | None = None
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    abort_incomplete_uploads_days: int = 7


class DataBucket(Construct):
    """Creates the data bucket (versioned, TLS-only, public access blocked, SSE-KMS or SSE-S3,
    server access logs) and the bucket its access logs go to (SSE-S3, which S3 requires of log
    targets, versioned, TLS-only, public access blocked).

    Versioning keeps overwritten and deleted objects, so the bucket is the durable copy of what a
    linked file system exports. Attributes: `bucket`, `access_log_bucket`; `grant_read`,
    `grant_read_write` (they include the KMS key when there is one).
    """

    def __init__(self, scope: Construct, construct_id: str, props: DataBucketProps) -> None:
        super().__init__(scope, construct_id)
        if props.abort_incomplete_uploads_days < 1:
            raise ValidationError(
                f"abort_incomplete_uploads_days must be at least 1, got {props.abort_incomplete_uploads_days}",
                path="abort_incomplete_uploads_days",
            )
        self.access_log_bucket = s3.Bucket(
            self,
            "AccessLogBucket",
            bucket_name=props.access_log_bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            # Versioned like the data bucket: an overwritten or deleted access log stays recoverable.
            versioned=True,
            removal_policy=props.removal_policy,
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=props.bucket_name,
            encryption=s3.BucketEncryption.KMS if props.encryption_key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=props.encryption_key,
            bucket_key_enabled=True if props.encryption_key else None,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix=f"{props.bucket_name}/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="AbortIncompleteUploads",
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(props.abort_incomplete_uploads_days),
                )
            ],
            removal_policy=props.removal_policy,
        )

    def grant_read(self, grantee: iam.IGrantable, prefix: str | None = None) -> iam.Grant:
        """Read objects, only under `prefix` when given (and decrypt with the key)."""
        return self.bucket.grant_read(grantee, f"{prefix}*" if prefix else None)

    def grant_read_write(self, grantee: iam.IGrantable, prefix: str | None = None) -> iam.Grant:
        """Read, write and delete objects, only under `prefix` when given (and use the key)."""
        return self.bucket.grant_read_write(grantee, f"{prefix}*" if prefix else None)
