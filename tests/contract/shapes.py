"""Create-API contracts: the literal property values of a few resource types against the request
shape of the API call CloudFormation makes to create them, from botocore's service models.

For each resource type the mapping from CloudFormation property path to API member name is
written out per property (paths: `.` between members, `[]` for a list's items). A property the
mapping does not name fails the check, so a new property is mapped deliberately. A property the
create call does not take maps to None, with the reason next to it. Values CloudFormation resolves
at deploy time (Ref, Fn::*) are skipped. A pattern must match the whole value, as the services
check it ("Member must satisfy regular expression pattern"); Unicode classes (`\\p{L}`) as in
Java, hence the `regex` module (a dependency of cfn-lint).

Source: docs/facts/pipeline.md#botocore-request-shapes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import botocore.session
import regex
from botocore.model import Shape

from tests.contract.template import is_intrinsic


@dataclass(frozen=True)
class CreateApi:
    """How one CloudFormation resource type maps onto the API call that creates it.

    members: CloudFormation property path -> API member name (None: not a member of the create
      call; the reason is in a comment).
    generated: CloudFormation property path -> why the API requires it but a template may leave it
      out (CloudFormation generates it).
    """

    resource_type: str
    service: str
    operation: str
    members: dict[str, str | None]
    generated: dict[str, str] = field(default_factory=dict)


SAGEMAKER_CLUSTER = CreateApi(
    resource_type="AWS::SageMaker::Cluster",
    service="sagemaker",
    operation="CreateCluster",
    members={
        "ClusterName": "ClusterName",
        "InstanceGroups": "InstanceGroups",
        "InstanceGroups[].ExecutionRole": "ExecutionRole",
        "InstanceGroups[].InstanceCount": "InstanceCount",
        "InstanceGroups[].InstanceGroupName": "InstanceGroupName",
        "InstanceGroups[].InstanceStorageConfigs": "InstanceStorageConfigs",
        "InstanceGroups[].InstanceStorageConfigs[].EbsVolumeConfig": "EbsVolumeConfig",
        "InstanceGroups[].InstanceStorageConfigs[].EbsVolumeConfig.VolumeSizeInGB": "VolumeSizeInGB",
        "InstanceGroups[].InstanceType": "InstanceType",
        "InstanceGroups[].LifeCycleConfig": "LifeCycleConfig",
        "InstanceGroups[].LifeCycleConfig.OnCreate": "OnCreate",
        "InstanceGroups[].LifeCycleConfig.SourceS3Uri": "SourceS3Uri",
        "InstanceGroups[].OnStartDeepHealthChecks": "OnStartDeepHealthChecks",
        "InstanceGroups[].ThreadsPerCore": "ThreadsPerCore",
        "InstanceGroups[].TrainingPlanArn": "TrainingPlanArn",
        "InstanceGroups[].OverrideVpcConfig": "OverrideVpcConfig",
        "InstanceGroups[].OverrideVpcConfig.SecurityGroupIds": "SecurityGroupIds",
        "InstanceGroups[].OverrideVpcConfig.Subnets": "Subnets",
        "NodeRecovery": "NodeRecovery",
        # HyperPod's managed autoscaling (docs/facts/hyperpod.md#hyperpod-autoscaling-api)
        "AutoScaling": "AutoScaling",
        "AutoScaling.Mode": "Mode",
        "AutoScaling.AutoScalerType": "AutoScalerType",
        "ClusterRole": "ClusterRole",
        "NodeProvisioningMode": "NodeProvisioningMode",
        "Orchestrator": "Orchestrator",
        "Orchestrator.Eks": "Eks",
        "Orchestrator.Eks.ClusterArn": "ClusterArn",
        "Tags": "Tags",
        "Tags[].Key": "Key",
        "Tags[].Value": "Value",
        "VpcConfig": "VpcConfig",
        "VpcConfig.SecurityGroupIds": "SecurityGroupIds",
        "VpcConfig.Subnets": "Subnets",
    },
)

FSX_FILE_SYSTEM = CreateApi(
    resource_type="AWS::FSx::FileSystem",
    service="fsx",
    operation="CreateFileSystem",
    members={
        # A file system restored from a backup is made by CreateFileSystemFromBackup instead.
        "BackupId": None,
        "FileSystemType": "FileSystemType",
        "FileSystemTypeVersion": "FileSystemTypeVersion",
        "KmsKeyId": "KmsKeyId",
        "LustreConfiguration": "LustreConfiguration",
        "LustreConfiguration.AutoImportPolicy": "AutoImportPolicy",
        "LustreConfiguration.AutomaticBackupRetentionDays": "AutomaticBackupRetentionDays",
        "LustreConfiguration.CopyTagsToBackups": "CopyTagsToBackups",
        "LustreConfiguration.DailyAutomaticBackupStartTime": "DailyAutomaticBackupStartTime",
        "LustreConfiguration.DataCompressionType": "DataCompressionType",
        "LustreConfiguration.DeploymentType": "DeploymentType",
        "LustreConfiguration.DriveCacheType": "DriveCacheType",
        "LustreConfiguration.EfaEnabled": "EfaEnabled",
        "LustreConfiguration.ExportPath": "ExportPath",
        "LustreConfiguration.ImportPath": "ImportPath",
        "LustreConfiguration.ImportedFileChunkSize": "ImportedFileChunkSize",
        "LustreConfiguration.MetadataConfiguration": "MetadataConfiguration",
        "LustreConfiguration.MetadataConfiguration.Iops": "Iops",
        "LustreConfiguration.MetadataConfiguration.Mode": "Mode",
        "LustreConfiguration.PerUnitStorageThroughput": "PerUnitStorageThroughput",
        "LustreConfiguration.ThroughputCapacity": "ThroughputCapacity",
        "LustreConfiguration.WeeklyMaintenanceStartTime": "WeeklyMaintenanceStartTime",
        "SecurityGroupIds": "SecurityGroupIds",
        "StorageCapacity": "StorageCapacity",
        "StorageType": "StorageType",
        "SubnetIds": "SubnetIds",
        "Tags": "Tags",
        "Tags[].Key": "Key",
        "Tags[].Value": "Value",
    },
)

EKS_NODEGROUP = CreateApi(
    resource_type="AWS::EKS::Nodegroup",
    service="eks",
    operation="CreateNodegroup",
    members={
        "AmiType": "amiType",
        "CapacityType": "capacityType",
        "ClusterName": "clusterName",
        "DiskSize": "diskSize",
        # Only used by updates (UpdateNodegroupVersion's `force`), not by CreateNodegroup.
        "ForceUpdateEnabled": None,
        "InstanceTypes": "instanceTypes",
        "Labels": "labels",
        "LaunchTemplate": "launchTemplate",
        "LaunchTemplate.Id": "id",
        "LaunchTemplate.Name": "name",
        "LaunchTemplate.Version": "version",
        "NodeRole": "nodeRole",
        "NodegroupName": "nodegroupName",
        "ReleaseVersion": "releaseVersion",
        "ScalingConfig": "scalingConfig",
        "ScalingConfig.DesiredSize": "desiredSize",
        "ScalingConfig.MaxSize": "maxSize",
        "ScalingConfig.MinSize": "minSize",
        "Subnets": "subnets",
        "Tags": "tags",
        "Taints": "taints",
        "Taints[].Effect": "effect",
        "Taints[].Key": "key",
        "Taints[].Value": "value",
        "UpdateConfig": "updateConfig",
        "UpdateConfig.MaxUnavailable": "maxUnavailable",
        "UpdateConfig.MaxUnavailablePercentage": "maxUnavailablePercentage",
        "Version": "version",
    },
    generated={"NodegroupName": "CloudFormation generates a name when the property is absent"},
)

_LT = "LaunchTemplateData"
EC2_LAUNCH_TEMPLATE = CreateApi(
    resource_type="AWS::EC2::LaunchTemplate",
    service="ec2",
    operation="CreateLaunchTemplate",
    members={
        "LaunchTemplateName": "LaunchTemplateName",
        "VersionDescription": "VersionDescription",
        _LT: "LaunchTemplateData",
        f"{_LT}.BlockDeviceMappings": "BlockDeviceMappings",
        f"{_LT}.BlockDeviceMappings[].DeviceName": "DeviceName",
        f"{_LT}.BlockDeviceMappings[].Ebs": "Ebs",
        f"{_LT}.BlockDeviceMappings[].Ebs.DeleteOnTermination": "DeleteOnTermination",
        f"{_LT}.BlockDeviceMappings[].Ebs.Encrypted": "Encrypted",
        f"{_LT}.BlockDeviceMappings[].Ebs.Iops": "Iops",
        f"{_LT}.BlockDeviceMappings[].Ebs.KmsKeyId": "KmsKeyId",
        f"{_LT}.BlockDeviceMappings[].Ebs.Throughput": "Throughput",
        f"{_LT}.BlockDeviceMappings[].Ebs.VolumeSize": "VolumeSize",
        f"{_LT}.BlockDeviceMappings[].Ebs.VolumeType": "VolumeType",
        f"{_LT}.CapacityReservationSpecification": "CapacityReservationSpecification",
        f"{_LT}.CapacityReservationSpecification.CapacityReservationPreference": "CapacityReservationPreference",
        f"{_LT}.CapacityReservationSpecification.CapacityReservationTarget": "CapacityReservationTarget",
        f"{_LT}.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId": "CapacityReservationId",
        f"{_LT}.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationResourceGroupArn": (
            "CapacityReservationResourceGroupArn"
        ),
        f"{_LT}.CpuOptions": "CpuOptions",
        f"{_LT}.CpuOptions.CoreCount": "CoreCount",
        f"{_LT}.CpuOptions.ThreadsPerCore": "ThreadsPerCore",
        f"{_LT}.IamInstanceProfile": "IamInstanceProfile",
        f"{_LT}.IamInstanceProfile.Arn": "Arn",
        f"{_LT}.IamInstanceProfile.Name": "Name",
        f"{_LT}.ImageId": "ImageId",
        f"{_LT}.InstanceMarketOptions": "InstanceMarketOptions",
        f"{_LT}.InstanceMarketOptions.MarketType": "MarketType",
        f"{_LT}.InstanceType": "InstanceType",
        f"{_LT}.MetadataOptions": "MetadataOptions",
        f"{_LT}.MetadataOptions.HttpEndpoint": "HttpEndpoint",
        f"{_LT}.MetadataOptions.HttpPutResponseHopLimit": "HttpPutResponseHopLimit",
        f"{_LT}.MetadataOptions.HttpTokens": "HttpTokens",
        f"{_LT}.MetadataOptions.InstanceMetadataTags": "InstanceMetadataTags",
        f"{_LT}.NetworkInterfaces": "NetworkInterfaces",
        f"{_LT}.NetworkInterfaces[].AssociatePublicIpAddress": "AssociatePublicIpAddress",
        f"{_LT}.NetworkInterfaces[].DeleteOnTermination": "DeleteOnTermination",
        f"{_LT}.NetworkInterfaces[].Description": "Description",
        f"{_LT}.NetworkInterfaces[].DeviceIndex": "DeviceIndex",
        f"{_LT}.NetworkInterfaces[].Groups": "Groups",
        f"{_LT}.NetworkInterfaces[].InterfaceType": "InterfaceType",
        f"{_LT}.NetworkInterfaces[].NetworkCardIndex": "NetworkCardIndex",
        f"{_LT}.NetworkInterfaces[].SubnetId": "SubnetId",
        f"{_LT}.Placement": "Placement",
        f"{_LT}.Placement.AvailabilityZone": "AvailabilityZone",
        f"{_LT}.Placement.GroupId": "GroupId",
        f"{_LT}.Placement.GroupName": "GroupName",
        f"{_LT}.SecurityGroupIds": "SecurityGroupIds",
        f"{_LT}.TagSpecifications": "TagSpecifications",
        f"{_LT}.TagSpecifications[].ResourceType": "ResourceType",
        f"{_LT}.TagSpecifications[].Tags": "Tags",
        f"{_LT}.TagSpecifications[].Tags[].Key": "Key",
        f"{_LT}.TagSpecifications[].Tags[].Value": "Value",
        f"{_LT}.UserData": "UserData",
        "TagSpecifications": "TagSpecifications",
        "TagSpecifications[].ResourceType": "ResourceType",
        "TagSpecifications[].Tags": "Tags",
        "TagSpecifications[].Tags[].Key": "Key",
        "TagSpecifications[].Tags[].Value": "Value",
    },
    generated={"LaunchTemplateName": "CloudFormation generates a name when the property is absent"},
)

EC2_CAPACITY_RESERVATION = CreateApi(
    resource_type="AWS::EC2::CapacityReservation",
    service="ec2",
    operation="CreateCapacityReservation",
    members={
        "AvailabilityZone": "AvailabilityZone",
        "AvailabilityZoneId": "AvailabilityZoneId",
        "EbsOptimized": "EbsOptimized",
        "EndDate": "EndDate",
        "EndDateType": "EndDateType",
        "EphemeralStorage": "EphemeralStorage",
        "InstanceCount": "InstanceCount",
        "InstanceMatchCriteria": "InstanceMatchCriteria",
        "InstancePlatform": "InstancePlatform",
        "InstanceType": "InstanceType",
        "OutPostArn": "OutpostArn",
        "PlacementGroupArn": "PlacementGroupArn",
        "TagSpecifications": "TagSpecifications",
        "TagSpecifications[].ResourceType": "ResourceType",
        "TagSpecifications[].Tags": "Tags",
        "TagSpecifications[].Tags[].Key": "Key",
        "TagSpecifications[].Tags[].Value": "Value",
        "Tenancy": "Tenancy",
    },
)

# The same call made by fminfra's handler for a reservation in a placement group
# (fminfra/capacity/constructs/reservation_handler/index.py), with the same property names.
EC2_CUSTOM_CAPACITY_RESERVATION = CreateApi(
    resource_type="Custom::EC2CapacityReservation",
    service="ec2",
    operation="CreateCapacityReservation",
    members={
        "ServiceToken": None,  # CloudFormation's: the handler's ARN
        "ServiceTimeout": None,  # CloudFormation's: how long it waits for the handler
        "AvailabilityZoneId": "AvailabilityZoneId",
        "EbsOptimized": "EbsOptimized",
        "EndDate": "EndDate",
        "InstanceCount": "InstanceCount",
        "InstanceMatchCriteria": "InstanceMatchCriteria",
        "InstancePlatform": "InstancePlatform",
        "InstanceType": "InstanceType",
        "PlacementGroupArn": "PlacementGroupArn",
        "Tags": None,  # a map the handler sends as TagSpecifications (its test checks the request)
        "Tenancy": "Tenancy",
    },
)

# HyperPod task governance (docs/facts/hyperpod.md#hyperpod-compute-quota-schema).
_TAGS = {"Tags": "Tags", "Tags[].Key": "Key", "Tags[].Value": "Value"}
_QUOTA_RESOURCE = {
    "InstanceType": "InstanceType",
    "Count": "Count",
    "Accelerators": "Accelerators",
    "VCpu": "VCpu",
    "MemoryInGiB": "MemoryInGiB",
}
SAGEMAKER_COMPUTE_QUOTA = CreateApi(
    resource_type="AWS::SageMaker::ComputeQuota",
    service="sagemaker",
    operation="CreateComputeQuota",
    members={
        "ActivationState": "ActivationState",
        "ClusterArn": "ClusterArn",
        "ComputeQuotaConfig": "ComputeQuotaConfig",
        "ComputeQuotaConfig.ComputeQuotaResources": "ComputeQuotaResources",
        **{f"ComputeQuotaConfig.ComputeQuotaResources[].{k}": v for k, v in _QUOTA_RESOURCE.items()},
        "ComputeQuotaConfig.PreemptTeamTasks": "PreemptTeamTasks",
        "ComputeQuotaConfig.ResourceSharingConfig": "ResourceSharingConfig",
        "ComputeQuotaConfig.ResourceSharingConfig.Strategy": "Strategy",
        "ComputeQuotaConfig.ResourceSharingConfig.BorrowLimit": "BorrowLimit",
        "ComputeQuotaTarget": "ComputeQuotaTarget",
        "ComputeQuotaTarget.TeamName": "TeamName",
        "ComputeQuotaTarget.FairShareWeight": "FairShareWeight",
        "Description": "Description",
        "Name": "Name",
        **_TAGS,
    },
)

SAGEMAKER_CLUSTER_SCHEDULER_CONFIG = CreateApi(
    resource_type="AWS::SageMaker::ClusterSchedulerConfig",
    service="sagemaker",
    operation="CreateClusterSchedulerConfig",
    members={
        "ClusterArn": "ClusterArn",
        "Description": "Description",
        "Name": "Name",
        "SchedulerConfig": "SchedulerConfig",
        "SchedulerConfig.FairShare": "FairShare",
        "SchedulerConfig.IdleResourceSharing": "IdleResourceSharing",
        "SchedulerConfig.PriorityClasses": "PriorityClasses",
        "SchedulerConfig.PriorityClasses[].Name": "Name",
        "SchedulerConfig.PriorityClasses[].Weight": "Weight",
        **_TAGS,
    },
)

CREATE_APIS = {
    api.resource_type: api
    for api in (
        SAGEMAKER_CLUSTER,
        FSX_FILE_SYSTEM,
        EKS_NODEGROUP,
        EC2_LAUNCH_TEMPLATE,
        EC2_CAPACITY_RESERVATION,
        EC2_CUSTOM_CAPACITY_RESERVATION,
        SAGEMAKER_COMPUTE_QUOTA,
        SAGEMAKER_CLUSTER_SCHEDULER_CONFIG,
    )
}


@functools.cache
def input_shape(service: str, operation: str) -> Shape:
    model = botocore.session.get_session().get_service_model(service)
    shape = model.operation_model(operation).input_shape
    assert shape is not None, f"{service} {operation} has no input"
    return shape


@functools.cache
def _pattern(text: str) -> regex.Pattern[str]:
    return regex.compile(text)


def shape_at(api: CreateApi, path: str) -> Shape:
    """The request shape a CloudFormation property path (`A[].B`) leads to through the mapping;
    for a path ending in `[]`, the list's item shape. The empty path is the request itself."""
    shape = input_shape(api.service, api.operation)
    prefix = ""
    for segment in [s for s in path.split(".") if s]:
        name = segment.removesuffix("[]")
        prefix = f"{prefix}.{name}" if prefix else name
        member = api.members[prefix]
        assert member is not None, f"{prefix} maps to no member"
        shape = shape.members[member]  # type: ignore[attr-defined]
        if segment.endswith("[]"):
            shape = shape.member  # type: ignore[attr-defined]
            prefix += "[]"
    return shape


def problems(api: CreateApi, properties: dict[str, Any]) -> list[str]:
    """Every way a resource's literal properties break the create call's request shape."""
    found: list[str] = []
    _check(api, input_shape(api.service, api.operation), properties, "", found)
    return found


def _check(api: CreateApi, shape: Shape, value: Any, path: str, found: list[str]) -> None:
    if is_intrinsic(value):
        return
    where = path or "(properties)"
    kind = shape.type_name
    meta = shape.metadata
    if kind == "structure":
        if not isinstance(value, dict):
            found.append(f"{where}: must be an object ({shape.name}), got {value!r}")
            return
        given = set()
        for key, sub in value.items():
            child = f"{path}.{key}" if path else key
            if child not in api.members:
                found.append(f"{child}: not in the property-to-member mapping of {api.operation}")
                continue
            member = api.members[child]
            if member is None:
                continue
            if member not in shape.members:
                found.append(f"{child}: mapped to {member}, which {shape.name} does not have")
                continue
            given.add(member)
            _check(api, shape.members[member], sub, child, found)
        for required in shape.required_members:
            if required in given:
                continue
            # The properties of this object that map to the member (their parent path is `path`).
            sources = [p for p, m in api.members.items() if m == required and p.rpartition(".")[0] == path]
            if any(p in api.generated for p in sources):
                continue
            found.append(f"{where}: {api.operation} requires {required} ({shape.name}), not given")
    elif kind == "list":
        if not isinstance(value, list):
            found.append(f"{where}: must be a list ({shape.name}), got {value!r}")
            return
        _length(where, shape, len(value), "items", found)
        for item in value:
            _check(api, shape.member, item, f"{path}[]", found)
    elif kind == "map":
        if not isinstance(value, dict):
            found.append(f"{where}: must be a map ({shape.name}), got {value!r}")
            return
        _length(where, shape, len(value), "entries", found)
        for key, sub in value.items():
            _check(api, shape.key, key, f"{path} key {key!r}", found)
            _check(api, shape.value, sub, f"{path}[{key!r}]", found)
    elif kind == "string":
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            found.append(f"{where}: must be a string ({shape.name}), got {value!r}")
            return
        text = str(value)
        enum = getattr(shape, "enum", None)
        if enum and text not in enum:
            found.append(
                f"{where}: {text!r} is not one of {shape.name}'s values ({', '.join(enum[:12])}{' ...' if len(enum) > 12 else ''})"
            )
        _length(where, shape, len(text), "characters", found)
        if "pattern" in meta and not _pattern(meta["pattern"]).fullmatch(text):
            found.append(f"{where}: {text!r} does not match {shape.name}'s pattern {meta['pattern']}")
    elif kind in ("integer", "long", "double", "float"):
        number = _number(value, integral=kind in ("integer", "long"))
        if number is None:
            found.append(f"{where}: must be a number ({shape.name}, {kind}), got {value!r}")
            return
        if "min" in meta and number < meta["min"]:
            found.append(f"{where}: {number} is below {shape.name}'s minimum {meta['min']}")
        if "max" in meta and number > meta["max"]:
            found.append(f"{where}: {number} is above {shape.name}'s maximum {meta['max']}")
    elif kind == "boolean" and not (isinstance(value, bool) or value in ("true", "false")):
        found.append(f"{where}: must be a boolean ({shape.name}), got {value!r}")
    # timestamp and blob values are passed through unchecked.


def _length(where: str, shape: Shape, length: int, unit: str, found: list[str]) -> None:
    meta = shape.metadata
    if "min" in meta and length < meta["min"]:
        found.append(f"{where}: {length} {unit}, {shape.name} needs at least {meta['min']}")
    if "max" in meta and length > meta["max"]:
        found.append(f"{where}: {length} {unit}, {shape.name} allows at most {meta['max']}")


def _number(value: Any, *, integral: bool) -> float | None:
    """CloudFormation passes numbers as JSON numbers or numeric strings."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number: float = value
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    if integral and number != int(number):
        return None
    return number
