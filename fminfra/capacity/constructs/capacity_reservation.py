"""EC2 capacity reservations for GPU groups: a targeted On-Demand Capacity Reservation, and a
resource group that lets one launch template target several reservations."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_resourcegroups as resourcegroups
from constructs import Construct

from fminfra import catalog
from fminfra.capacity.rules import RESERVATION_ID, utc_timestamp
from fminfra.core.errors import ValidationError
from fminfra.core.regions import is_az_id

INSTANCE_PLATFORMS = ("Linux/UNIX", "Red Hat Enterprise Linux", "SUSE Linux", "Ubuntu Pro", "Windows")


@dataclass(frozen=True, kw_only=True)
class OnDemandCapacityReservationProps:
    """Props of `OnDemandCapacityReservation`.

    instance_type: a GPU catalog type (`ml.` form accepted; reservations take the EC2 form).
    instance_count: instances reserved, 1 or more.
    availability_zone_id: the AZ **ID** (`usw2-az4`): the same physical zone in every account,
      where the compute subnet is.
    placement_group: a cluster placement group to reserve inside. Default: none.
    end_date: when the reservation ends (time zone-aware). Default: none, open-ended until the
      reservation or the stack is deleted.
    instance_platform: the platform launches use. Default: Linux/UNIX.
    reservation_name: the Name tag; include the environment name. Default: none.

    A reservation is not stateful data: deleting the stack cancels it, which is what stops its
    billing, so it takes no removal policy.
    """

    instance_type: str
    instance_count: int
    availability_zone_id: str
    placement_group: ec2.IPlacementGroup | None = None
    end_date: datetime | None = None
    instance_platform: str = "Linux/UNIX"
    reservation_name: str | None = None


class OnDemandCapacityReservation(Construct):
    """Creates a **targeted** `AWS::EC2::CapacityReservation`: only launches that name it (the
    `EfaLaunchTemplate` does, with `capacity-reservations-only`) use it. It bills from creation
    whether or not instances run.

    Attributes: `cfn_reservation`, `reservation_id`, `reservation_arn`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: OnDemandCapacityReservationProps) -> None:
        super().__init__(scope, construct_id)
        spec = catalog.get(props.instance_type)
        if props.instance_count < 1:
            raise ValidationError(f"instance_count must be at least 1, got {props.instance_count}")
        if not is_az_id(props.availability_zone_id):
            raise ValidationError(f"availability_zone_id must be an AZ ID such as usw2-az4, got {props.availability_zone_id!r}")
        if props.end_date is not None and props.end_date.tzinfo is None:
            raise ValidationError(f"end_date must carry a time zone, got {props.end_date.isoformat()}")
        if props.instance_platform not in INSTANCE_PLATFORMS:
            raise ValidationError(f"instance_platform must be one of {', '.join(INSTANCE_PLATFORMS)}, got {props.instance_platform!r}")
        placement_group_arn = None
        if props.placement_group is not None:
            placement_group_arn = cdk.Stack.of(self).format_arn(
                service="ec2", resource="placement-group", resource_name=props.placement_group.placement_group_name
            )
        self.cfn_reservation = ec2.CfnCapacityReservation(
            self,
            "Reservation",
            instance_type=spec.name,
            instance_count=props.instance_count,
            instance_platform=props.instance_platform,
            availability_zone_id=props.availability_zone_id,
            instance_match_criteria="targeted",
            tenancy="default",
            ebs_optimized=True,
            placement_group_arn=placement_group_arn,
            end_date_type="limited" if props.end_date else "unlimited",
            end_date=utc_timestamp(props.end_date) if props.end_date else None,
            tag_specifications=(
                [
                    ec2.CfnCapacityReservation.TagSpecificationProperty(
                        resource_type="capacity-reservation", tags=[cdk.CfnTag(key="Name", value=props.reservation_name)]
                    )
                ]
                if props.reservation_name
                else None
            ),
        )
        self.reservation_id: str = self.cfn_reservation.ref
        self.reservation_arn: str = self.cfn_reservation.attr_capacity_reservation_arn


@dataclass(frozen=True, kw_only=True)
class CapacityReservationGroupProps:
    """Props of `CapacityReservationGroup`.

    group_name: the resource group's name (letters, digits, `_.-`); include the environment name.
    reservation_ids: the reservations (`cr-` ids of this account, or tokens such as
      `OnDemandCapacityReservation.reservation_id`), at least one, unique.
    """

    group_name: str
    reservation_ids: Sequence[str]


class CapacityReservationGroup(Construct):
    """Creates a capacity reservation resource group (`AWS::ResourceGroups::Group` with the
    `AWS::EC2::CapacityReservationPool` configuration) holding the given reservations, so that a
    launch template can target all of them through one ARN.

    Attributes: `cfn_group`, `group_arn`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: CapacityReservationGroupProps) -> None:
        super().__init__(scope, construct_id)
        if not re.match(r"^[a-zA-Z0-9_.-]{1,128}$", props.group_name):
            raise ValidationError(f"group_name must be 1-128 letters, digits, '_', '.' or '-', got {props.group_name!r}")
        ids = list(props.reservation_ids)
        if not ids:
            raise ValidationError("reservation_ids must list at least one reservation")
        for rid in ids:
            if not cdk.Token.is_unresolved(rid) and (problem := RESERVATION_ID.problem(rid)):
                raise ValidationError(f"reservation_ids {problem}")
        literal = [r for r in ids if not cdk.Token.is_unresolved(r)]
        if len(set(literal)) != len(literal):
            raise ValidationError(f"reservation_ids must be unique, got {', '.join(literal)}")
        stack = cdk.Stack.of(self)
        self.cfn_group = resourcegroups.CfnGroup(
            self,
            "Group",
            name=props.group_name,
            description="fminfra capacity reservations of one GPU group",
            configuration=[
                resourcegroups.CfnGroup.ConfigurationItemProperty(type="AWS::EC2::CapacityReservationPool"),
                resourcegroups.CfnGroup.ConfigurationItemProperty(
                    type="AWS::ResourceGroups::Generic",
                    parameters=[
                        resourcegroups.CfnGroup.ConfigurationParameterProperty(
                            name="allowed-resource-types", values=["AWS::EC2::CapacityReservation"]
                        )
                    ],
                ),
            ],
            resources=[stack.format_arn(service="ec2", resource="capacity-reservation", resource_name=rid) for rid in ids],
        )
        self.group_arn: str = self.cfn_group.attr_arn
