"""EC2 launch templates for EFA GPU nodes (Auto Scaling groups and EKS managed node groups).

An L1 `AWS::EC2::LaunchTemplate`: the L2 `ec2.LaunchTemplate` cannot express network interfaces,
capacity reservation targeting or market options, and all three decide whether a GPU node gets
its reserved capacity and every EFA interface of its type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from fminfra import catalog
from fminfra.core.errors import ValidationError

# Pods reach the instance metadata service through one more network hop than the node (the pod
# network namespace), so with a hop limit of 1 IMDSv2 token responses never reach them
# (docs/facts/network.md#imds-hop-limit-for-pods) and they cannot take the node role.
# EKS nodes use 1 (docs/facts/eks.md#imds-host-network-pods): every component fminfra puts on
# them that reads IMDS or uses the node role runs with host networking (the VPC CNI's aws-node,
# kube-proxy, the EKS Pod Identity agent, the node exporter), the device plugins and the DCGM
# exporter call no AWS API, and workloads get their own role through EKS Pod Identity. A chart
# added later whose pods need the node role or IMDS (without hostNetwork) needs 2:
# `IMDS_HOP_LIMIT_FOR_PODS`.
IMDS_HOP_LIMIT_EKS_NODES = 1
IMDS_HOP_LIMIT_FOR_PODS = 2

# The root device of the AMI: Amazon Linux 2023 (the EKS-optimized AMIs) uses /dev/xvda, the
# Ubuntu Deep Learning AMIs /dev/sda1. A mapping for any other name adds a volume instead of
# sizing the root.
ROOT_DEVICE_AMAZON_LINUX = "/dev/xvda"
ROOT_DEVICE_UBUNTU = "/dev/sda1"


@dataclass(frozen=True, kw_only=True)
class CapacityReservationTarget:
    """Which reserved capacity instances launch into (`capacity-reservations-only`).

    reservation_id: one capacity reservation (`cr-` id or a token such as
      `CfnCapacityReservation.ref`).
    resource_group_arn: a capacity reservation resource group holding several reservations
      (`CapacityReservationGroup.group_arn`).
    capacity_block: the reservations are Capacity Blocks for ML; launches then use market type
      `capacity-block`. Default: false (On-Demand Capacity Reservations).
    Exactly one of `reservation_id` and `resource_group_arn`.
    """

    reservation_id: str | None = None
    resource_group_arn: str | None = None
    capacity_block: bool = False


@dataclass(frozen=True, kw_only=True)
class EfaLaunchTemplateProps:
    """Props of `EfaLaunchTemplate`.

    instance_type: a GPU catalog type (`p5.48xlarge`, `ml.` form accepted); the network
      interfaces come from `fminfra.catalog.efa_network_interfaces`, never from here.
    efa_security_group: the EFA security group (all traffic to and from itself); on every
      interface.
    additional_security_groups: more groups on every interface. EKS managed node groups must pass
      the cluster security group here: once a launch template names security groups, EKS no
      longer adds it. Default: none.
    image: the AMI. Default: none, for EKS managed node groups that pick their own AMI; Auto
      Scaling groups need one.
    instance_profile: the instance profile of the nodes. Default: none, for EKS managed node
      groups (the node group sets the role; EKS rejects a template that names a profile); Auto
      Scaling groups need one.
    root_volume_gib: size of the encrypted gp3 root volume. Default: 500.
    root_device_name: the AMI's root device (`ROOT_DEVICE_AMAZON_LINUX` or `ROOT_DEVICE_UBUNTU`).
      Default: /dev/xvda (Amazon Linux 2023, the EKS AMIs).
    root_volume_kms_key: key of the root volume. Default: the account's EBS default key.
    imds_hop_limit: IMDSv2 PUT response hop limit, 1-64; IMDSv2 is always required. Default: 1
      (the node and host-network pods only; EKS node groups pass `IMDS_HOP_LIMIT_EKS_NODES`).
    capacity: reserved capacity to launch into. Default: none (On-Demand, no reservation).
    placement_group: a cluster placement group. Default: none. Not with a Capacity Block (the
      block brings its own placement).
    threads_per_core: 1 turns hyper-threading off (CpuOptions with the type's core count);
      2 or none keeps the type's default. Default: none.
    user_data: runs at boot (the node bootstrap). Default: none.
    launch_template_name: physical name; include the environment name. Default: generated.
    """

    instance_type: str
    efa_security_group: ec2.ISecurityGroup
    additional_security_groups: Sequence[ec2.ISecurityGroup] = ()
    image: ec2.IMachineImage | None = None
    instance_profile: iam.IInstanceProfile | None = None
    root_volume_gib: int = 500
    root_device_name: str = ROOT_DEVICE_AMAZON_LINUX
    root_volume_kms_key: kms.IKey | None = None
    imds_hop_limit: int = 1
    capacity: CapacityReservationTarget | None = None
    placement_group: ec2.IPlacementGroup | None = None
    threads_per_core: int | None = None
    user_data: ec2.UserData | None = None
    launch_template_name: str | None = None


def _validate(props: EfaLaunchTemplateProps) -> catalog.GpuInstanceType:
    spec = catalog.get(props.instance_type)
    if not 8 <= props.root_volume_gib <= 16384:
        raise ValidationError(f"root_volume_gib must be 8-16384 (a gp3 volume), got {props.root_volume_gib}", path="root_volume_gib")
    if not 1 <= props.imds_hop_limit <= 64:
        raise ValidationError(f"imds_hop_limit must be 1-64, got {props.imds_hop_limit}", path="imds_hop_limit")
    if props.threads_per_core not in (None, 1, 2):
        raise ValidationError(f"threads_per_core must be 1, 2 or None, got {props.threads_per_core}", path="threads_per_core")
    if props.threads_per_core == 1 and spec.vcpus is None:
        raise ValidationError(f"threads_per_core 1 needs the vCPU count of {spec.name}, which the catalog does not have; leave it unset")
    cap = props.capacity
    if cap is not None:
        if (cap.reservation_id is None) == (cap.resource_group_arn is None):
            raise ValidationError("capacity must name exactly one of reservation_id and resource_group_arn", path="capacity")
        if cap.capacity_block and props.placement_group is not None:
            raise ValidationError(
                "placement_group must be None with a Capacity Block: the block brings its own placement, "
                "and a separately managed placement group makes launches fail",
                path="placement_group",
            )
    return spec


class EfaLaunchTemplate(Construct):
    """Creates a launch template that attaches every EFA interface of a GPU instance type.

    Card 0 device 0 is a plain ENA `interface` (the primary); every EFA interface of the type is
    `efa-only`, without IP addresses; no public IP. IMDSv2 is required; the root volume is an
    encrypted gp3 volume. With `capacity`, launches go only into the reservation (or resource
    group of reservations), with market type `capacity-block` for Capacity Blocks.

    Attributes: `cfn_launch_template`, `launch_template_id`, `latest_version_number`,
    `launch_template` (an `ec2.ILaunchTemplate` at the latest version), `instance_type`,
    `network_interfaces` (the catalog layout), `security_groups`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: EfaLaunchTemplateProps) -> None:
        super().__init__(scope, construct_id)
        spec = _validate(props)
        self.instance_type = spec.name
        self.network_interfaces = catalog.efa_network_interfaces(spec.name)
        self.security_groups: list[ec2.ISecurityGroup] = [props.efa_security_group, *props.additional_security_groups]
        group_ids = [g.security_group_id for g in self.security_groups]

        interfaces = []
        for nic in self.network_interfaces:
            primary = nic.interface_type == "interface"
            interfaces.append(
                ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                    network_card_index=nic.network_card_index,
                    device_index=nic.device_index,
                    interface_type=nic.interface_type,
                    groups=group_ids,
                    delete_on_termination=True,
                    # Only the primary could take a public IP; nodes live in private subnets, and
                    # with more than one network card none may be auto-assigned anyway.
                    associate_public_ip_address=False if primary else None,
                    description=f"{'ENA primary' if primary else 'EFA'} card {nic.network_card_index} device {nic.device_index}",
                )
            )

        image_id = props.image.get_image(self).image_id if props.image is not None else None
        capacity_spec = market = None
        if props.capacity is not None:
            capacity_spec = ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_preference="capacity-reservations-only",
                capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                    capacity_reservation_id=props.capacity.reservation_id,
                    capacity_reservation_resource_group_arn=props.capacity.resource_group_arn,
                ),
            )
            if props.capacity.capacity_block:
                market = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
        cpu_options = None
        if props.threads_per_core == 1 and spec.vcpus is not None:
            cpu_options = ec2.CfnLaunchTemplate.CpuOptionsProperty(core_count=spec.vcpus // 2, threads_per_core=1)
        tags = [cdk.CfnTag(key="Name", value=props.launch_template_name)] if props.launch_template_name else None
        tag_specs = (
            [
                ec2.CfnLaunchTemplate.TagSpecificationProperty(resource_type=kind, tags=tags)
                for kind in ("instance", "volume", "network-interface")
            ]
            if tags
            else None
        )

        self.cfn_launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_name=props.launch_template_name,
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                instance_type=spec.name,
                image_id=image_id,
                iam_instance_profile=(
                    ec2.CfnLaunchTemplate.IamInstanceProfileProperty(arn=props.instance_profile.instance_profile_arn)
                    if props.instance_profile is not None
                    else None
                ),
                network_interfaces=interfaces,
                block_device_mappings=[
                    ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                        device_name=props.root_device_name,
                        ebs=ec2.CfnLaunchTemplate.EbsProperty(
                            volume_size=props.root_volume_gib,
                            volume_type="gp3",
                            encrypted=True,
                            kms_key_id=props.root_volume_kms_key.key_arn if props.root_volume_kms_key else None,
                            delete_on_termination=True,
                        ),
                    )
                ],
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_endpoint="enabled",
                    http_tokens="required",
                    http_put_response_hop_limit=props.imds_hop_limit,
                ),
                capacity_reservation_specification=capacity_spec,
                instance_market_options=market,
                placement=(
                    ec2.CfnLaunchTemplate.PlacementProperty(group_name=props.placement_group.placement_group_name)
                    if props.placement_group is not None
                    else None
                ),
                cpu_options=cpu_options,
                user_data=cdk.Fn.base64(props.user_data.render()) if props.user_data is not None else None,
                tag_specifications=tag_specs,
            ),
        )
        # cfn-lint's per-region instance type lists lag new GPU types (1.58 lacks p5e.48xlarge and
        # p6e-gb200.36xlarge); the type was checked against fminfra.catalog above instead.
        self.cfn_launch_template.add_metadata("cfn-lint", {"config": {"ignore_checks": ["E3628"]}})
        self.launch_template_id: str = self.cfn_launch_template.ref
        self.latest_version_number: str = self.cfn_launch_template.attr_latest_version_number
        self.launch_template: ec2.ILaunchTemplate = ec2.LaunchTemplate.from_launch_template_attributes(
            self, "View", launch_template_id=self.launch_template_id, version_number=self.latest_version_number
        )
