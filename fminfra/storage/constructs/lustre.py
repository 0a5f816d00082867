"""FSx for Lustre: the file system and its data repository associations with S3.

Built on the L1 `AWS::FSx::FileSystem`: the L2 `fsx.LustreFileSystem` has no EFA and no metadata
configuration, and its auto-import option throws on PERSISTENT_2 (docs/facts/storage.md#cdk-fsx-l2-no-efa-metadata,
docs/facts/storage.md#cdk-fsx-l2-auto-import-persistent2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.network.constructs.efa_security_group import EfaSecurityGroup, EfaSecurityGroupProps
from fminfra.storage.rules import (
    LUSTRE_COMPRESSION_TYPES,
    LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB,
    LUSTRE_DEPLOYMENT_TYPES,
    LUSTRE_MAX_REPOSITORIES,
    LUSTRE_METADATA_IOPS_ALLOWED,
    LUSTRE_METADATA_MODES,
    LUSTRE_REPOSITORY_EVENTS,
    LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB,
    lustre_capacity_problem,
    lustre_efa_capacity_problem,
    lustre_metadata_iops_problem,
)

# The names of earlier releases for the rules (fminfra/storage/rules.py).
DEPLOYMENT_TYPES = LUSTRE_DEPLOYMENT_TYPES
THROUGHPUT_TIERS_MB_PER_TIB = LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB
DEFAULT_THROUGHPUT_MB_PER_TIB = LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB
COMPRESSION_TYPES = LUSTRE_COMPRESSION_TYPES
METADATA_MODES = LUSTRE_METADATA_MODES
REPOSITORY_EVENTS = LUSTRE_REPOSITORY_EVENTS
# Lustre's ports (docs/facts/storage.md#fsx-lustre-ports): LNet on TCP 988 and the 1018-1023 range.
LUSTRE_PORT_RANGES = (("988", 988, 988), ("1018-1023", 1018, 1023))  # (name, low, high)
LUSTRE_PORTS = tuple(ec2.Port.tcp_range(low, high) if low != high else ec2.Port.tcp(low) for _, low, high in LUSTRE_PORT_RANGES)
LUSTRE_PORT_NAMES = tuple(name for name, _, _ in LUSTRE_PORT_RANGES)


def _unresolved(value: object) -> bool:
    return isinstance(value, str) and cdk.Token.is_unresolved(value)


def admit_lustre_clients(
    scope: Construct, name: str, *, file_system_group: ec2.ISecurityGroup, client_group: ec2.ISecurityGroup, efa_enabled: bool
) -> None:
    """Rules in `scope` that let members of `client_group` mount a file system in `file_system_group`,
    as L1 resources of `scope` (so neither group's stack imports from `scope`'s).

    Without EFA: TCP 988 and 1018-1023 both ways (docs/facts/storage.md#fsx-lustre-ports). With EFA
    (`file_system_group` is then an EFA group): all traffic both ways, as FSx requires of clients in
    another group (docs/facts/network.md#efa-security-group-self-traffic). Construct ids: From<name>...,
    To<name>... (and, with EFA, EgressTo<name>).
    """
    fs_id = file_system_group.security_group_id
    client_id = client_group.security_group_id
    if efa_enabled:
        ec2.CfnSecurityGroupIngress(
            scope,
            f"From{name}AllTraffic",
            group_id=fs_id,
            source_security_group_id=client_id,
            ip_protocol="-1",
            description="EFA-enabled FSx for Lustre: all traffic from clients in another group",
        )
        ec2.CfnSecurityGroupEgress(
            scope,
            f"EgressTo{name}AllTraffic",
            group_id=fs_id,
            destination_security_group_id=client_id,
            ip_protocol="-1",
            description="EFA-enabled FSx for Lustre: all traffic to clients in another group",
        )
        ec2.CfnSecurityGroupIngress(
            scope,
            f"To{name}AllTraffic",
            group_id=client_id,
            source_security_group_id=fs_id,
            ip_protocol="-1",
            description="EFA-enabled FSx for Lustre: all traffic from the file system to its clients",
        )
        return
    for port_name, low, high in LUSTRE_PORT_RANGES:
        ec2.CfnSecurityGroupIngress(
            scope,
            f"From{name}Port{port_name}",
            group_id=fs_id,
            source_security_group_id=client_id,
            ip_protocol="tcp",
            from_port=low,
            to_port=high,
            description=f"Lustre TCP {port_name} from clients",
        )
        ec2.CfnSecurityGroupIngress(
            scope,
            f"To{name}Port{port_name}",
            group_id=client_id,
            source_security_group_id=fs_id,
            ip_protocol="tcp",
            from_port=low,
            to_port=high,
            description=f"Lustre TCP {port_name} from the file system to its clients",
        )


@dataclass(frozen=True, kw_only=True)
class LustreFileSystemProps:
    """Props of `LustreFileSystem`.

    vpc: the VPC.
    subnet: the one subnet the file system lives in: the compute AZ's, next to the GPUs.
    storage_capacity_gib: 1200, 2400 or a multiple of 2400.
    deployment_type: PERSISTENT_2 or SCRATCH_2. Default: PERSISTENT_2.
    throughput_mb_per_tib: PERSISTENT_2 only: 125, 250, 500 or 1000. Default: 500.
    efa_enabled: PERSISTENT_2 only; cannot be changed later. Default: false.
    security_group: the file system's group. Default: with EFA, a new group allowing all traffic
      to and from itself (`EfaSecurityGroup`); without, a new group allowing the Lustre ports
      from itself and from `client_security_groups`. A given group is used as it is.
    client_security_groups: groups of the instances that mount the file system: the Lustre ports
      are allowed from them into the file system's group and back from it into theirs (Lustre
      servers also connect to clients). Only with neither `security_group` nor `efa_enabled` (a
      ValidationError otherwise: those groups would get no rule). Default: none.
    kms_key: PERSISTENT_2 only: customer-managed key. Default: FSx's AWS-managed key.
    data_compression: LZ4 or NONE. Default: LZ4.
    metadata_mode: PERSISTENT_2 only: AUTOMATIC or USER_PROVISIONED. Default: AUTOMATIC
      (EFA requires a metadata configuration).
    metadata_iops: USER_PROVISIONED only: 1500, 3000, 6000, 12000 or multiples of 12000 up to
      192000.
    automatic_backup_retention_days: PERSISTENT_2 only, 0-90; 0 turns daily backups off.
      Default: 0. FSx does not back up a file system linked to S3 (see `DataRepositoryAssociation`).
    daily_automatic_backup_start_time: HH:MM UTC, with backups on. Default: 03:00.
    file_system_type_version: Default: 2.15.
    name: the Name tag; include the environment name. Default: none.
    removal_policy: Default: RETAIN.
    """

    vpc: ec2.IVpc
    subnet: ec2.ISubnet
    storage_capacity_gib: int
    deployment_type: str = "PERSISTENT_2"
    throughput_mb_per_tib: int | None = None
    efa_enabled: bool = False
    security_group: ec2.ISecurityGroup | None = None
    client_security_groups: Sequence[ec2.ISecurityGroup] = ()
    kms_key: kms.IKey | None = None
    data_compression: str = "LZ4"
    metadata_mode: str | None = None
    metadata_iops: int | None = None
    automatic_backup_retention_days: int = 0
    daily_automatic_backup_start_time: str = "03:00"
    file_system_type_version: str = "2.15"
    name: str | None = None
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


def _validate(props: LustreFileSystemProps) -> None:
    """One check per FSx rule (the fsx-lustre-* entries of docs/facts/storage.md); the message names the field, the allowed values, the value."""
    dt = props.deployment_type
    if props.client_security_groups and (props.efa_enabled or props.security_group is not None):
        given = "efa_enabled" if props.efa_enabled and props.security_group is None else "security_group"
        raise ValidationError(
            f"client_security_groups apply only to the group this construct makes for a file system without EFA, got "
            f"{len(props.client_security_groups)} with {given}: give security_group, a group the file system and its clients "
            "share (with EFA, all traffic to and from that one group: docs/facts/network.md#efa-security-group-self-traffic), "
            "and leave client_security_groups out",
            path="client_security_groups",
        )
    if dt not in DEPLOYMENT_TYPES:
        raise ValidationError(f"deployment_type must be PERSISTENT_2 or SCRATCH_2, got {dt!r}", path="deployment_type")
    persistent = dt == "PERSISTENT_2"
    gib = props.storage_capacity_gib
    if problem := lustre_capacity_problem(gib):
        raise ValidationError(f"storage_capacity_gib {problem}", path="storage_capacity_gib")
    if props.throughput_mb_per_tib is not None:
        if not persistent:
            raise ValidationError(
                f"throughput_mb_per_tib is for PERSISTENT_2 only, got {props.throughput_mb_per_tib} with {dt}", path="throughput_mb_per_tib"
            )
        if props.throughput_mb_per_tib not in THROUGHPUT_TIERS_MB_PER_TIB:
            raise ValidationError(
                f"throughput_mb_per_tib must be 125, 250, 500 or 1000 for PERSISTENT_2, got {props.throughput_mb_per_tib}",
                path="throughput_mb_per_tib",
            )
    if props.efa_enabled and not persistent:
        raise ValidationError(f"efa_enabled requires PERSISTENT_2, got {dt}", path="efa_enabled")
    if props.efa_enabled and (
        problem := lustre_efa_capacity_problem(gib, props.throughput_mb_per_tib or DEFAULT_THROUGHPUT_MB_PER_TIB)
    ):  # docs/facts/storage.md#fsx-lustre-efa-capacity-steps
        raise ValidationError(f"storage_capacity_gib {problem}", path="storage_capacity_gib")
    if props.kms_key is not None and not persistent:
        raise ValidationError(f"kms_key applies to PERSISTENT_2 only (SCRATCH_2 uses keys FSx manages), got {dt}", path="kms_key")
    if props.data_compression not in COMPRESSION_TYPES:
        raise ValidationError(f"data_compression must be LZ4 or NONE, got {props.data_compression!r}", path="data_compression")
    if props.metadata_mode is not None:
        if not persistent:
            raise ValidationError(
                f"metadata_mode applies to PERSISTENT_2 only, got {props.metadata_mode!r} with {dt}", path="metadata_mode"
            )
        if props.metadata_mode not in METADATA_MODES:
            raise ValidationError(f"metadata_mode must be AUTOMATIC or USER_PROVISIONED, got {props.metadata_mode!r}", path="metadata_mode")
    mode = props.metadata_mode or ("AUTOMATIC" if persistent else None)
    iops = props.metadata_iops
    if iops is not None and mode != "USER_PROVISIONED":
        raise ValidationError(f"metadata_iops requires metadata_mode USER_PROVISIONED, got {iops} with {mode}", path="metadata_iops")
    if mode == "USER_PROVISIONED":
        problem = f"must be {LUSTRE_METADATA_IOPS_ALLOWED}, got None" if iops is None else lustre_metadata_iops_problem(iops)
        if problem:
            raise ValidationError(f"metadata_iops {problem}", path="metadata_iops")
    days = props.automatic_backup_retention_days
    if not 0 <= days <= 90:
        raise ValidationError(f"automatic_backup_retention_days must be 0 to 90, got {days}", path="automatic_backup_retention_days")
    if days and not persistent:
        raise ValidationError(
            f"automatic_backup_retention_days is for PERSISTENT_2 only (FSx does not back up scratch), got {days} with {dt}",
            path="automatic_backup_retention_days",
        )


class LustreFileSystem(Construct):
    """Creates an FSx for Lustre file system (SSD) in one subnet, with its security group.

    Attributes: `file_system_id`, `dns_name`, `mount_name`, `security_group`, `connections`,
    `deployment_type`, `efa_enabled`, `cfn` (the L1). Link S3 prefixes with
    `add_data_repository_association`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: LustreFileSystemProps) -> None:
        super().__init__(scope, construct_id)
        _validate(props)
        persistent = props.deployment_type == "PERSISTENT_2"
        self.deployment_type = props.deployment_type
        self.efa_enabled = props.efa_enabled
        self._removal_policy = props.removal_policy
        self._associations: list[DataRepositoryAssociation] = []

        if props.security_group is not None:
            self.security_group = props.security_group
        elif props.efa_enabled:
            self.security_group = EfaSecurityGroup(
                self,
                "EfaSecurityGroup",
                EfaSecurityGroupProps(vpc=props.vpc, description="EFA: EFA-enabled FSx for Lustre, all traffic to and from members"),
            ).security_group
        else:
            group = ec2.SecurityGroup(
                self,
                "SecurityGroup",
                vpc=props.vpc,
                description="Lustre: TCP 988 and 1018-1023 between the file system and its clients",
                allow_all_outbound=True,
            )
            for port, name in zip(LUSTRE_PORTS, LUSTRE_PORT_NAMES, strict=True):
                group.add_ingress_rule(group, port, f"Lustre TCP {name} from the file system itself")
            self.security_group = group
        if props.security_group is None and not props.efa_enabled:
            # Explicit L1 rules in this stack: the client groups usually live in a longer-lived
            # stack, which must not import from this one.
            for i, client in enumerate(props.client_security_groups):
                admit_lustre_clients(self, f"Client{i}", file_system_group=self.security_group, client_group=client, efa_enabled=False)
        self.connections = self.security_group.connections

        mode = props.metadata_mode or ("AUTOMATIC" if persistent else None)
        lustre = fsx.CfnFileSystem.LustreConfigurationProperty(
            deployment_type=props.deployment_type,
            data_compression_type=props.data_compression,
            per_unit_storage_throughput=(props.throughput_mb_per_tib or DEFAULT_THROUGHPUT_MB_PER_TIB) if persistent else None,
            efa_enabled=props.efa_enabled if persistent else None,
            metadata_configuration=fsx.CfnFileSystem.MetadataConfigurationProperty(mode=mode, iops=props.metadata_iops) if mode else None,
            automatic_backup_retention_days=props.automatic_backup_retention_days if persistent else None,
            daily_automatic_backup_start_time=props.daily_automatic_backup_start_time if props.automatic_backup_retention_days else None,
            copy_tags_to_backups=True if props.automatic_backup_retention_days else None,
        )
        self.cfn = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=props.file_system_type_version,
            storage_type="SSD",
            storage_capacity=props.storage_capacity_gib,
            subnet_ids=[props.subnet.subnet_id],
            security_group_ids=[self.security_group.security_group_id],
            kms_key_id=props.kms_key.key_arn if props.kms_key else None,
            lustre_configuration=lustre,
            tags=[cdk.CfnTag(key="Name", value=props.name)] if props.name else None,
        )
        self.cfn.apply_removal_policy(props.removal_policy)
        self.file_system_id = self.cfn.ref
        self.dns_name = self.cfn.attr_dns_name
        self.mount_name = self.cfn.attr_lustre_mount_name

    def add_data_repository_association(
        self,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        s3_prefix: str,
        file_system_path: str,
        import_events: Sequence[str] = REPOSITORY_EVENTS,
        export_events: Sequence[str] = (),
    ) -> DataRepositoryAssociation:
        """Links `s3://bucket/s3_prefix` to `file_system_path`; created one after the other."""
        if len(self._associations) >= LUSTRE_MAX_REPOSITORIES:
            raise ValidationError(f"a file system takes at most {LUSTRE_MAX_REPOSITORIES} data repository associations, adding one more")
        norm = file_system_path.rstrip("/") + "/"
        for other in self._associations:
            other_norm = other.file_system_path.rstrip("/") + "/"
            if not _unresolved(file_system_path) and (norm.startswith(other_norm) or other_norm.startswith(norm)):
                raise ValidationError(
                    f"file_system_path {file_system_path!r} overlaps {other.file_system_path!r}; paths must not overlap",
                    path="file_system_path",
                )
        association = DataRepositoryAssociation(
            self,
            construct_id,
            DataRepositoryAssociationProps(
                file_system=self,
                bucket=bucket,
                s3_prefix=s3_prefix,
                file_system_path=file_system_path,
                import_events=tuple(import_events),
                export_events=tuple(export_events),
                removal_policy=self._removal_policy,
            ),
        )
        if self._associations:
            # FSx works on one association of a file system at a time.
            association.cfn.add_resource_dependency(self._associations[-1].cfn)
        self._associations.append(association)
        return association

    @property
    def data_repository_associations(self) -> list[DataRepositoryAssociation]:
        return list(self._associations)


@dataclass(frozen=True, kw_only=True)
class DataRepositoryAssociationProps:
    """Props of `DataRepositoryAssociation`.

    file_system: the file system (not SCRATCH_1, which has no associations).
    bucket: the S3 bucket.
    s3_prefix: prefix in the bucket, ending in '/'; '' links the whole bucket.
    file_system_path: directory in the file system, starting with '/'.
    import_events: S3 changes imported automatically, a subset of NEW, CHANGED, DELETED.
      Default: all three. Empty: no automatic import.
    export_events: file system changes exported automatically, same values. Default: none.
    batch_import_metadata_on_create: list what is already under the prefix when the association
      is created. Default: true.
    removal_policy: Default: RETAIN.
    """

    file_system: LustreFileSystem
    bucket: s3.IBucket
    s3_prefix: str
    file_system_path: str
    import_events: tuple[str, ...] = REPOSITORY_EVENTS
    export_events: tuple[str, ...] = ()
    batch_import_metadata_on_create: bool = True
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


class DataRepositoryAssociation(Construct):
    """Creates an `AWS::FSx::DataRepositoryAssociation` between an S3 prefix and a directory.

    With an association FSx does not back the file system up: the (versioned) bucket holds the
    durable copy. Attributes: `cfn`, `association_id`, `file_system_path`, `data_repository_path`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: DataRepositoryAssociationProps) -> None:
        super().__init__(scope, construct_id)
        if props.file_system.deployment_type not in DEPLOYMENT_TYPES:
            raise ValidationError(
                f"file_system: data repository associations need SCRATCH_2 or PERSISTENT_2, got {props.file_system.deployment_type}"
            )
        if not _unresolved(props.file_system_path) and not props.file_system_path.startswith("/"):
            raise ValidationError(f"file_system_path must start with '/', got {props.file_system_path!r}", path="file_system_path")
        if props.s3_prefix and (props.s3_prefix.startswith("/") or not props.s3_prefix.endswith("/")):
            raise ValidationError(
                f"s3_prefix must be '' or a prefix ending in '/' without a leading '/', got {props.s3_prefix!r}", path="s3_prefix"
            )
        for name, events in (("import_events", props.import_events), ("export_events", props.export_events)):
            bad = [e for e in events if e not in REPOSITORY_EVENTS]
            if bad or len(set(events)) != len(events):
                raise ValidationError(f"{name} must be distinct values of NEW, CHANGED, DELETED, got {', '.join(events)}")
        self.file_system_path = props.file_system_path
        self.data_repository_path = f"s3://{props.bucket.bucket_name}/{props.s3_prefix}"
        self.cfn = fsx.CfnDataRepositoryAssociation(
            self,
            "Association",
            file_system_id=props.file_system.file_system_id,
            file_system_path=props.file_system_path,
            data_repository_path=self.data_repository_path,
            batch_import_meta_data_on_create=props.batch_import_metadata_on_create,
            s3=None
            if not (props.import_events or props.export_events)
            else fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=list(props.import_events))
                if props.import_events
                else None,
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=list(props.export_events))
                if props.export_events
                else None,
            ),
        )
        self.cfn.apply_removal_policy(props.removal_policy)
        self.association_id = self.cfn.attr_association_id
