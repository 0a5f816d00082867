"""Storage stack: the FSx for Lustre file system in the compute AZ and its S3 associations."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra.config import EnvironmentConfig, LustreConfig
from fminfra.data.stack import DataStack
from fminfra.network.stack import NetworkStack, removal_policy
from fminfra.storage.constructs.lustre import LustreFileSystem, LustreFileSystemProps


def repository_construct_id(file_system_path: str) -> str:
    """Construct id of a repository's association, from its path (stable when the list is reordered)."""
    return "Repository" + file_system_path.rstrip("/").replace("/", "_")


class StorageStack(cdk.Stack):
    """The shared file system the GPU nodes mount, linked to the data bucket.

    Attributes for the Compute stack: `file_system` (`LustreFileSystem`), `file_system_id`,
    `dns_name`, `mount_name`, `security_group` (nodes join it, or, with EFA, it is the network's
    EFA group), `bucket` (with `grant_read`/`grant_read_write`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cfg: EnvironmentConfig,
        network: NetworkStack,
        data: DataStack | None,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        assert cfg.storage is not None and cfg.storage.lustre is not None, "the stage creates a Storage stack only with storage.lustre"
        lustre: LustreConfig = cfg.storage.lustre
        self.cfg = cfg
        self.bucket: s3.IBucket = (
            data.bucket if data else s3.Bucket.from_bucket_name(self, "ExistingDataBucket", cfg.storage.bucket_name(cfg))
        )
        key: kms.IKey | None = data.key if data and lustre.persistent else None
        efa_group = network.efa_security_group
        self.file_system = LustreFileSystem(
            self,
            "FileSystem",
            LustreFileSystemProps(
                vpc=network.vpc,
                subnet=network.compute_subnet,
                storage_capacity_gib=lustre.capacity_gib,
                deployment_type=lustre.deployment_type.upper(),
                throughput_mb_per_tib=lustre.mb_per_tib if lustre.persistent else None,
                efa_enabled=lustre.efa,
                # EFA-enabled: the network's EFA group (all traffic to and from itself), which the
                # GPU nodes are in. Otherwise a Lustre-ports group open to the nodes' group.
                security_group=efa_group if lustre.efa else None,
                client_security_groups=() if lustre.efa else (efa_group,),
                kms_key=key,
                data_compression=lustre.compression.upper(),
                metadata_mode=lustre.metadata.mode.upper() if lustre.metadata else None,
                metadata_iops=lustre.metadata.iops if lustre.metadata else None,
                automatic_backup_retention_days=lustre.backup_retention_days,
                name=cfg.physical_name("lustre"),
                removal_policy=removal_policy(cfg),
            ),
        )
        for repo in lustre.repositories:
            self.file_system.add_data_repository_association(
                repository_construct_id(repo.file_system_path),
                bucket=self.bucket,
                s3_prefix=repo.s3_prefix,
                file_system_path=repo.file_system_path,
                import_events=[e.upper() for e in repo.import_events],
                export_events=[e.upper() for e in repo.export_events],
            )
        self.file_system_id: str = self.file_system.file_system_id
        self.dns_name: str = self.file_system.dns_name
        self.mount_name: str = self.file_system.mount_name
        self.security_group: ec2.ISecurityGroup = self.file_system.security_group
        cdk.CfnOutput(self, "FileSystemId", value=self.file_system_id, description="FSx for Lustre file system")
        cdk.CfnOutput(self, "DnsName", value=self.dns_name, description="mount -t lustre DNS@tcp:/MOUNT_NAME")
        cdk.CfnOutput(self, "MountName", value=self.mount_name, description="Lustre mount name")
