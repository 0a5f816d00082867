"""Data stack (long-lived): the data bucket, its access-log bucket and the KMS key storage uses.

Deployable on the local emulator: only S3 buckets, bucket policies and KMS keys, no
Lambda-backed custom resources (so no auto-delete of objects).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra.config import EnvironmentConfig, StorageConfig
from fminfra.data.constructs.data_bucket import DataBucket, DataBucketProps
from fminfra.data.constructs.data_key import DataKey, DataKeyProps
from fminfra.network.stack import removal_policy


def needs_data_stack(cfg: EnvironmentConfig) -> bool:
    """A Data stack exists when it has something to create: a bucket or a key."""
    return cfg.storage is not None and (not cfg.storage.bucket.existing or cfg.storage.encryption == "kms")


class DataStack(cdk.Stack):
    """The environment's durable data: outlives the file system and the clusters.

    Attributes for other stacks: `bucket` (`s3.IBucket`, with `grant_read`/`grant_read_write`;
    an imported one when `storage.bucket.existing`), `key` (the customer-managed key, or None
    with `encryption: s3`), `data_bucket` (the `DataBucket` construct, or None when existing).
    """

    def __init__(self, scope: Construct, construct_id: str, *, cfg: EnvironmentConfig, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        assert cfg.storage is not None, "the stage creates a Data stack only with a storage section"
        storage: StorageConfig = cfg.storage
        self.cfg = cfg
        policy = removal_policy(cfg)
        bucket_name = storage.bucket_name(cfg)
        linked = bool(storage.lustre and storage.lustre.repositories)
        self.key: kms.IKey | None = None
        if storage.encryption == "kms":
            self.key = DataKey(
                self,
                "DataKey",
                DataKeyProps(
                    alias_name=f"alias/{cfg.physical_name('data')}",
                    fsx_linked_bucket_arn=f"arn:{self.partition}:s3:::{bucket_name}" if linked and not storage.bucket.existing else None,
                    removal_policy=policy,
                ),
            ).key
            cdk.CfnOutput(self, "DataKeyArn", value=self.key.key_arn, description="KMS key of the data bucket and the file system")
        self.data_bucket: DataBucket | None = None
        if storage.bucket.existing:
            self.bucket: s3.IBucket = s3.Bucket.from_bucket_name(self, "ExistingDataBucket", bucket_name)
        else:
            self.data_bucket = DataBucket(
                self,
                "DataBucket",
                DataBucketProps(
                    bucket_name=bucket_name,
                    access_log_bucket_name=cfg.physical_name("logs", cfg.account, cfg.region),
                    encryption_key=self.key,
                    removal_policy=policy,
                ),
            )
            self.bucket = self.data_bucket.bucket
            cdk.CfnOutput(self, "DataBucketName", value=self.bucket.bucket_name, description="Datasets and checkpoints")
