"""Auto Scaling groups of GPU instances for the `ec2` path (teams that run their own scheduler)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from fminfra.capacity.rules import (
    DEFAULT_DRAIN,
    DRAIN_HOOK_NAME,
    DRAIN_HOOK_TRANSITION,
    EC2_TERMINATES_BEFORE_END,
    drain_problem,
    hook_heartbeat_seconds,
    scale_in_time,
    utc_timestamp,
)
from fminfra.compute.constructs.launch_template import EfaLaunchTemplate
from fminfra.core.errors import ValidationError
from fminfra.policy.constructs.acknowledge import acknowledge, nag_text


@dataclass(frozen=True, kw_only=True)
class GpuAutoScalingGroupProps:
    """Props of `GpuAutoScalingGroup`.

    launch_template: the group's `EfaLaunchTemplate` (image, profile, interfaces, capacity).
    subnet: the compute subnet (the AZ of the reservation and the placement group).
    count: instances to run, 0 or more.
    capacity_block: the template launches into a Capacity Block: the group is 0 outside the
      block. Default: false (the group holds `count` instances).
    block_starts_at / block_ends_at: the block's window (time zone-aware, both or neither). With
      them, scheduled actions scale to `count` at the start and back to 0 `drain` before EC2
      starts terminating the block's instances (30 minutes before the end). Without them, a
      Capacity Block group stays at 0 until an operator scales it.
    drain: time between the scale-in and EC2's terminations, for jobs to checkpoint and nodes to
      drain. A Capacity Block group gets a termination lifecycle hook (`fminfra-drain`) that holds
      each instance the scale-in picks for at most this long (HeartbeatTimeout, capped at 7200 s;
      DefaultResult CONTINUE) while the node drains itself and completes the hook
      (scripts/node/drain_on_terminate.sh). Default: 10 minutes (scale-in 40 minutes before the
      end, when EC2 sends its expiration warning; docs/facts/capacity.md#capacity-block-scale-in-guidance).
    group_name: physical name; include the environment name. Default: generated.
    """

    launch_template: EfaLaunchTemplate
    subnet: ec2.ISubnet
    count: int
    capacity_block: bool = False
    block_starts_at: datetime | None = None
    block_ends_at: datetime | None = None
    drain: timedelta = DEFAULT_DRAIN
    group_name: str | None = None


class GpuAutoScalingGroup(Construct):
    """Creates an `AWS::AutoScaling::AutoScalingGroup` of GPU instances from an `EfaLaunchTemplate`
    in one subnet, and for a Capacity Block with a known window the scheduled actions that run
    it only inside the block.

    No rolling-update policy: a new launch template version applies to new instances only, so a
    deploy never replaces nodes under a running training job. The `AutoScalingScheduledAction`
    update policy (IgnoreUnmodifiedGroupSizeProperties) keeps a stack update from setting the
    size back to the template's 0 while the block's scale-out is in effect: CloudFormation
    otherwise resets MinSize/MaxSize/DesiredCapacity on every update of a group with scheduled
    actions (docs/facts/capacity.md#cfn-scheduled-action-update-policy). It changes the size only
    when the template's size values themselves change (a new `count`).
    A Capacity Block group also carries the termination lifecycle hook `fminfra-drain` in the
    group itself (so it exists before the first launch): every scale-in, scheduled or by hand,
    waits in Terminating:Wait until the node completes the hook or the drain runs out. EC2's own
    reclaim at the block's end does not wait for a hook
    (docs/facts/capacity.md#lifecycle-hook-not-held-by-capacity-reclaim): the scale-in is what
    drains.
    Attributes: `cfn_group`, `group_name`, `scale_out`, `scale_in` (the scheduled actions, or None),
    `drain_hook_name` (None without a hook). Methods: `grant_complete_drain(grantee)`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: GpuAutoScalingGroupProps) -> None:
        super().__init__(scope, construct_id)
        if props.count < 0:
            raise ValidationError(f"count must be 0 or more, got {props.count}", path="count")
        window = (props.block_starts_at, props.block_ends_at)
        if (window[0] is None) != (window[1] is None):
            raise ValidationError("block_starts_at and block_ends_at go together: give both or neither")
        if window[0] is not None and not props.capacity_block:
            raise ValidationError("block_starts_at and block_ends_at apply to Capacity Block groups only (capacity_block=True)")
        starts_at, ends_at = window
        if props.capacity_block and (problem := drain_problem(props.drain)) is not None:
            raise ValidationError(problem)
        if starts_at is not None and ends_at is not None:
            if starts_at.tzinfo is None or ends_at.tzinfo is None:
                raise ValidationError("block_starts_at and block_ends_at must carry a time zone")
            if scale_in_time(ends_at, props.drain) <= starts_at:
                raise ValidationError(
                    f"block_ends_at must be more than {EC2_TERMINATES_BEFORE_END + props.drain} (30 minutes and the drain) after "
                    f"block_starts_at, got {starts_at.isoformat()} to {ends_at.isoformat()}",
                    path="block_ends_at",
                )
        size = 0 if props.capacity_block else props.count
        self.cfn_group = autoscaling.CfnAutoScalingGroup(
            self,
            "Group",
            auto_scaling_group_name=props.group_name,
            min_size="0" if props.capacity_block else str(props.count),
            max_size=str(props.count),
            desired_capacity=str(size),
            launch_template=autoscaling.CfnAutoScalingGroup.LaunchTemplateSpecificationProperty(
                launch_template_id=props.launch_template.launch_template_id,
                version=props.launch_template.latest_version_number,
            ),
            vpc_zone_identifier=[props.subnet.subnet_id],
            health_check_type="EC2",
            health_check_grace_period=900,
            lifecycle_hook_specification_list=[
                autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty(
                    lifecycle_hook_name=DRAIN_HOOK_NAME,
                    lifecycle_transition=DRAIN_HOOK_TRANSITION,
                    heartbeat_timeout=hook_heartbeat_seconds(props.drain),
                    default_result="CONTINUE",
                )
            ]
            if props.capacity_block
            else None,
        )
        self.drain_hook_name: str | None = DRAIN_HOOK_NAME if props.capacity_block else None
        self.cfn_group.cfn_options.update_policy = cdk.CfnUpdatePolicy(
            auto_scaling_scheduled_action=cdk.CfnAutoScalingScheduledAction(ignore_unmodified_group_size_properties=True)
        )
        self.group_name: str = self.cfn_group.ref
        acknowledge(
            self.cfn_group,
            "AS3",
            "GPU node groups scale only by operators or the Capacity Block schedule; every activity is in the group's "
            "activity history and CloudTrail, and alerting is the observability stack's job, not per-group SNS notifications",
        )
        self.scale_out: autoscaling.CfnScheduledAction | None = None
        self.scale_in: autoscaling.CfnScheduledAction | None = None
        if starts_at is not None and ends_at is not None:
            self.scale_out = autoscaling.CfnScheduledAction(
                self,
                "BlockStart",
                auto_scaling_group_name=self.group_name,
                start_time=utc_timestamp(starts_at),
                min_size=props.count,
                max_size=props.count,
                desired_capacity=props.count,
            )
            self.scale_in = autoscaling.CfnScheduledAction(
                self,
                "BlockEnd",
                auto_scaling_group_name=self.group_name,
                start_time=utc_timestamp(scale_in_time(ends_at, props.drain)),
                min_size=0,
                max_size=props.count,
                desired_capacity=0,
            )

    def grant_complete_drain(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets the nodes complete (and extend) this group's drain hook: CompleteLifecycleAction and
        RecordLifecycleActionHeartbeat on this group only (its ARN carries a generated id, hence
        the one `*`)."""
        group_arn = cdk.Stack.of(self).format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name=f"*:autoScalingGroupName/{self.group_name}",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"],
            resource_arns=[group_arn],
        )
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            acknowledge(
                principal,
                f"IAM5[Resource::{nag_text(cdk.Stack.of(self), group_arn)}]",
                "an Auto Scaling group's ARN holds an id Auto Scaling generates; the group is named in full, so the "
                "nodes complete lifecycle actions of this one group only",
            )
        return grant
