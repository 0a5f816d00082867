"""EC2 capacity reservations for GPU groups: a targeted On-Demand Capacity Reservation, and a
resource group that lets one launch template target several reservations.

A reservation inside a cluster placement group is a custom resource (`Custom::EC2CapacityReservation`,
handler `reservation_handler/index.py`) that calls EC2's API: `AWS::EC2::CapacityReservation`'s
schema refuses every `PlacementGroupArn` (docs/facts/capacity.md#cfn-schema-capacity-reservation-placement-group-arn).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_resourcegroups as resourcegroups
from constructs import Construct

from fminfra import catalog
from fminfra.capacity.rules import CUSTOM_RESERVATION_TYPE, RESERVATION_ID, utc_timestamp
from fminfra.core.errors import ValidationError
from fminfra.core.regions import is_az_id
from fminfra.policy.constructs.acknowledge import acknowledge, drop_redundant_role_dependency, nag_text

HANDLER_DIR = Path(__file__).parent / "reservation_handler"
# The handler's construct id in the stack: one function serves every reservation of the stack.
HANDLER_ID = "CapacityReservationHandler"
# The tag the handler puts on what it reserves; its role may modify and cancel only reservations
# that carry this stack's id in it.
STACK_TAG = "fminfra:stack-id"

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
    billing, so it takes no removal policy. With a placement group it is a custom resource that
    behaves as `AWS::EC2::CapacityReservation` does (same properties; a change to a create-only
    one replaces it).
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

    Attributes: `reservation_id`, `reservation_arn`, and the resource: `cfn_reservation` (an
    `AWS::EC2::CapacityReservation`, without a placement group) or `custom_reservation` (a
    `Custom::EC2CapacityReservation`, inside one); the other is None.
    """

    def __init__(self, scope: Construct, construct_id: str, props: OnDemandCapacityReservationProps) -> None:
        super().__init__(scope, construct_id)
        spec = catalog.get(props.instance_type)
        if props.instance_count < 1:
            raise ValidationError(f"instance_count must be at least 1, got {props.instance_count}", path="instance_count")
        if not is_az_id(props.availability_zone_id):
            raise ValidationError(
                f"availability_zone_id must be an AZ ID such as usw2-az4, got {props.availability_zone_id!r}", path="availability_zone_id"
            )
        if props.end_date is not None and props.end_date.tzinfo is None:
            raise ValidationError(f"end_date must carry a time zone, got {props.end_date.isoformat()}", path="end_date")
        if props.instance_platform not in INSTANCE_PLATFORMS:
            raise ValidationError(
                f"instance_platform must be one of {', '.join(INSTANCE_PLATFORMS)}, got {props.instance_platform!r}",
                path="instance_platform",
            )
        self.cfn_reservation: ec2.CfnCapacityReservation | None = None
        self.custom_reservation: cdk.CustomResource | None = None
        common: dict[str, Any] = {
            "instance_type": spec.name,
            "instance_count": props.instance_count,
            "instance_platform": props.instance_platform,
            "availability_zone_id": props.availability_zone_id,
            "instance_match_criteria": "targeted",
            "tenancy": "default",
            "ebs_optimized": True,
        }
        if props.placement_group is not None:
            self.custom_reservation = self._in_placement_group(props, common)
            self.reservation_id: str = self.custom_reservation.ref
            self.reservation_arn: str = self.custom_reservation.get_att_string("CapacityReservationArn")
            return
        self.cfn_reservation = ec2.CfnCapacityReservation(
            self,
            "Reservation",
            **common,
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
        self.reservation_id = self.cfn_reservation.ref
        self.reservation_arn = self.cfn_reservation.attr_capacity_reservation_arn

    def _in_placement_group(self, props: OnDemandCapacityReservationProps, common: dict[str, Any]) -> cdk.CustomResource:
        """The reservation through EC2's API, with the property names CloudFormation's resource takes."""
        assert props.placement_group is not None
        stack = cdk.Stack.of(self)
        handler = reservation_handler(stack)
        resource = cdk.CustomResource(
            self,
            "Reservation",
            service_token=handler.function_arn,
            resource_type=CUSTOM_RESERVATION_TYPE,
            service_timeout=cdk.Duration.minutes(15),
            properties={
                **{"".join(w.capitalize() for w in k.split("_")): v for k, v in common.items()},
                "PlacementGroupArn": stack.format_arn(
                    service="ec2", resource="placement-group", resource_name=props.placement_group.placement_group_name
                ),
                **({"EndDate": utc_timestamp(props.end_date)} if props.end_date else {}),
                # The handler's role may change only what carries this stack's tag.
                "Tags": {**({"Name": props.reservation_name} if props.reservation_name else {}), STACK_TAG: stack.stack_id},
            },
        )
        # The role's policy must exist before the first invocation.
        policy = handler.role.node.try_find_child("DefaultPolicy") if handler.role is not None else None
        if policy is not None:
            resource.node.add_dependency(policy)
        return resource


def reservation_handler(stack: cdk.Stack) -> lambda_.Function:
    """The stack's one `Custom::EC2CapacityReservation` handler, made on first use. Its role may
    reserve only with this stack's tag, and modify, tag and cancel only what carries it; the
    actions are those CloudFormation's own handlers use (docs/facts/capacity.md#odcr-handler-permissions)."""
    found = stack.node.try_find_child(HANDLER_ID)
    if isinstance(found, lambda_.Function):
        return found
    reservations = stack.format_arn(service="ec2", resource="capacity-reservation", resource_name="*")
    role = iam.Role(
        stack,
        f"{HANDLER_ID}Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaBasicExecutionRole")],
        description="Creates, modifies and cancels the stack's capacity reservations in placement groups",
    )
    acknowledge(
        role,
        "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "The reservation handler's role; this AWS managed policy only lets it write its own CloudWatch logs",
    )
    own = {"StringEquals": {f"aws:ResourceTag/{STACK_TAG}": stack.stack_id}}
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="Reserve",
            actions=["ec2:CreateCapacityReservation"],
            resources=[reservations],
            conditions={"StringEquals": {f"aws:RequestTag/{STACK_TAG}": stack.stack_id}},
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="TagOnReserve",
            actions=["ec2:CreateTags"],
            resources=[reservations],
            conditions={"StringEquals": {"ec2:CreateAction": "CreateCapacityReservation"}},
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="ChangeOwn",
            actions=["ec2:CancelCapacityReservation", "ec2:CreateTags", "ec2:DeleteTags", "ec2:ModifyCapacityReservation"],
            resources=[reservations],
            conditions=own,
        )
    )
    role.add_to_principal_policy(iam.PolicyStatement(sid="Read", actions=["ec2:DescribeCapacityReservations"], resources=["*"]))
    policy = role.node.try_find_child("DefaultPolicy")
    assert policy is not None
    acknowledge(policy, "IAM5[Resource::*]", "ec2:DescribeCapacityReservations takes no resource")
    acknowledge(
        policy,
        f"IAM5[Resource::{nag_text(stack, reservations)}]",
        "a reservation's id exists only once EC2 creates it: creating needs this stack's tag on the request, and modifying, "
        "tagging and cancelling need it on the reservation",
    )
    function = lambda_.Function(
        stack,
        HANDLER_ID,
        runtime=lambda_.Runtime.PYTHON_3_14,
        architecture=lambda_.Architecture.ARM_64,
        handler="index.on_event",
        code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["__pycache__", "*.pyc", "__init__.py"]),
        role=role,
        timeout=cdk.Duration.minutes(15),
        memory_size=256,
        description="Custom::EC2CapacityReservation: capacity reservations in cluster placement groups, through the EC2 API",
    )
    drop_redundant_role_dependency(function)
    return function


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
            raise ValidationError(f"group_name must be 1-128 letters, digits, '_', '.' or '-', got {props.group_name!r}", path="group_name")
        ids = list(props.reservation_ids)
        if not ids:
            raise ValidationError("reservation_ids must list at least one reservation", path="reservation_ids")
        for rid in ids:
            if not cdk.Token.is_unresolved(rid) and (problem := RESERVATION_ID.problem(rid)):
                raise ValidationError(f"reservation_ids {problem}", path="reservation_ids")
        literal = [r for r in ids if not cdk.Token.is_unresolved(r)]
        if len(set(literal)) != len(literal):
            raise ValidationError(f"reservation_ids must be unique, got {', '.join(literal)}", path="reservation_ids")
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
