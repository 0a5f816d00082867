"""Capacity Blocks for ML: their timing and size rules, shared by the config, the constructs and the
`capacity-blocks` command (EC2 DescribeCapacityBlockOfferings / PurchaseCapacityBlock; API only: docs/facts/capacity.md#capacity-block-api-only)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta

from fminfra.core.rules import Pattern

# The custom resource that stands for `AWS::EC2::CapacityReservation` inside a placement group
# (fminfra/capacity/constructs/capacity_reservation.py); the tools read it as that type.
CUSTOM_RESERVATION_TYPE = "Custom::EC2CapacityReservation"
RESERVATION_TYPES = ("AWS::EC2::CapacityReservation", CUSTOM_RESERVATION_TYPE)
RESERVATION_ID = Pattern(r"^cr-[0-9a-f]{17}$", "'cr-' followed by 17 lowercase hex digits")
TRAINING_PLAN_ARN_RULE = re.compile(
    r"^arn:aws[a-z-]*:sagemaker:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$"
)
CAPACITY_TYPES = ("on-demand", "odcr", "reservation", "capacity-block", "training-plan")
HYPERPOD_CAPACITY_TYPES = ("on-demand", "training-plan")
EC2_CAPACITY_TYPES = ("on-demand", "odcr", "reservation", "capacity-block")
# GB200 Capacity Blocks are sold as UltraServers, searched by UltraserverType
# (docs/facts/capacity.md#capacity-block-ultraserver-types). fminfra lists their offerings; it does
# not deploy onto them (`capacity-blocks`, and `validate` refuses an ec2 or EKS group of them): they sit in a Local Zone (not an AZ ID fminfra places by) and the GB200
# network layout is unverified (docs/facts/instances.md#gpu-p6e-gb200-36xlarge).
ULTRASERVER_TYPES = ("u-p6e-gb200x36", "u-p6e-gb200x72")
GB200_INSTANCE_TYPE = "p6e-gb200.36xlarge"
GB200_SUPPORT = (
    "fminfra lists GB200 UltraServer offerings (find --ultraserver-type) but does not deploy onto them: "
    "they are in a Local Zone, not an AZ ID, and the GB200 network layout is unverified"
)
# A Capacity Block's instances are placed by the block (docs/facts/capacity.md#capacity-block-no-separate-placement-group).
BLOCK_PLACEMENT = "a Capacity Block brings its own placement; placement cluster is not allowed, use none"

# EC2 begins terminating a Capacity Block's instances 30 minutes before the block ends, after an
# EventBridge warning 40 minutes before (docs/facts/capacity.md#capacity-block-end-termination).
EC2_TERMINATES_BEFORE_END = timedelta(minutes=30)
# Auto Scaling's guidance is to scale a group to zero *more* than 30 minutes before the end
# (docs/facts/capacity.md#capacity-block-scale-in-guidance), so the nodes shut down on our terms
# rather than EC2's. The drain window is the time between our scale-in and EC2's terminations;
# the default, 10 minutes, puts the scale-in at the expiration warning (40 minutes before the end).
DEFAULT_DRAIN = timedelta(minutes=10)
MAX_DRAIN_MINUTES = 24 * 60


def scale_in_time(ends_at: datetime, drain: timedelta = DEFAULT_DRAIN) -> datetime:
    """When a Capacity Block group scales to 0: the drain window before EC2's terminations."""
    return ends_at - EC2_TERMINATES_BEFORE_END - drain


def reclaim_time(ends_at: datetime) -> datetime:
    """When EC2 begins terminating whatever still runs in the block: the drain must be over."""
    return ends_at - EC2_TERMINATES_BEFORE_END


# The drain on the ec2 path: a termination lifecycle hook holds each instance the scale-in picks
# in Terminating:Wait while the node drains itself and completes the hook. A hook holds only
# what Auto Scaling terminates: EC2's own reclaim at the block's end does not wait for it
# (docs/facts/capacity.md#lifecycle-hook-not-held-by-capacity-reclaim), so the scheduled scale-in
# comes first and the hook's wait ends before EC2's terminations.
DRAIN_HOOK_NAME = "fminfra-drain"
DRAIN_HOOK_TRANSITION = "autoscaling:EC2_INSTANCE_TERMINATING"
# HeartbeatTimeout is 30-7200 seconds; a longer wait needs RecordLifecycleActionHeartbeat, up to
# 100 timeouts or 48 hours (docs/facts/capacity.md#lifecycle-hook-heartbeat-timeout).
HOOK_HEARTBEAT_MIN_S = 30
HOOK_HEARTBEAT_MAX_S = 7200
HOOK_WAIT_MAX = timedelta(hours=48)
# Time the node keeps for itself after the drain: completing the hook and shutting down.
DRAIN_SHUTDOWN_MARGIN_S = 60


def hook_heartbeat_seconds(drain: timedelta) -> int:
    """The termination hook's HeartbeatTimeout for a drain: the drain itself, capped at 7200 s
    (the node records heartbeats for a longer drain)."""
    return max(HOOK_HEARTBEAT_MIN_S, min(HOOK_HEARTBEAT_MAX_S, int(drain.total_seconds())))


def drain_budget_seconds(drain: timedelta) -> int:
    """How long the node waits for its jobs before it completes the hook: the drain less a
    shutdown margin (a minute, or half a drain shorter than two minutes, rounded down).
    scripts/node/drain_lib.sh's drain_budget_seconds is the same (tests/scripts/test_drain.py compares them)."""
    seconds = int(drain.total_seconds())
    return seconds - min(DRAIN_SHUTDOWN_MARGIN_S, seconds // 2)


def drain_problem(drain: timedelta) -> str | None:
    """A drain the hook can hold: more than 0, at most 1 day (within the hook's 48 hours)."""
    if timedelta(0) < drain <= timedelta(days=1):
        return None
    return f"drain must be more than 0 and at most 1 day, got {drain}"


# Every Capacity Block ends at 11:30 UTC; an offering can be slightly shorter or longer than the
# duration asked for (docs/facts/capacity.md#capacity-block-end-time).
BLOCK_END_UTC = time(11, 30)


def end_time_problem(ends_at: datetime) -> str | None:
    """Capacity Blocks end at 11:30 UTC; another end time is a typo or a different reservation."""
    end = ends_at.astimezone(UTC)
    if end.timetz().replace(tzinfo=None) == BLOCK_END_UTC:
        return None
    return f"Capacity Blocks end at 11:30 UTC; ends_at is {utc_timestamp(ends_at)}"


def duration_text(hours: int, minutes: int = 0) -> str:
    """A block's length as the API reports it (CapacityBlockDurationHours + ...Minutes): 167h 35m."""
    return f"{hours}h {minutes:02d}m" if minutes else f"{hours}h"


def utc_timestamp(value: datetime) -> str:
    """A time zone-aware datetime as the UTC timestamp CloudFormation and EC2 expect."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# A group (an Auto Scaling group or an EKS node group) targets one Capacity Block by its id: Auto
# Scaling "can only target one Capacity Block at a time" (docs/facts/capacity.md#capacity-block-one-per-group).
ONE_BLOCK_PER_GROUP = (
    "a group targets one Capacity Block (Auto Scaling and EKS take one block's id); give each block its own group, "
    "or use type reservation for several On-Demand Capacity Reservations"
)

MAX_INSTANCES_PER_BLOCK = 64
MAX_DURATION_DAYS = 182
# An offering can run slightly longer than the longest duration asked for (it ends at 11:30 UTC).
MAX_BLOCK_LENGTH = timedelta(days=MAX_DURATION_DAYS + 1)


def duration_problem(days: int) -> str | None:
    """Capacity Block durations: 1-day steps up to 14 days, then 7-day steps up to 182 days."""
    if 1 <= days <= 14 or (14 < days <= MAX_DURATION_DAYS and days % 7 == 0):
        return None
    return f"--duration-days must be 1-14, or a multiple of 7 up to {MAX_DURATION_DAYS}, got {days}"


# EKS managed node groups on a Capacity Block: EKS itself puts a scheduled action on the node
# group's Auto Scaling group ("Amazon EKS Node Group Capacity Scaledown Before Reservation End")
# that scales it to 0 forty minutes before the end, and drains the nodes as it terminates them
# (docs/facts/eks.md#eks-capacity-block-scaledown). fminfra's drain window does not apply there.
EKS_SCALEDOWN_BEFORE_END = timedelta(minutes=40)
EKS_DRAIN_MINUTES_PROBLEM = (
    "does not apply to inference node groups: EKS scales a Capacity Block node group to 0 and drains it "
    "40 minutes before the block ends, on its own schedule; remove drain_minutes"
)


def ended_problem(field: str, capacity_type: str, end: datetime, now: datetime) -> str | None:
    """A reservation's end that has passed (a warning: a deployed group keeps its config, and
    validation does not depend on the clock): the group gets no capacity from it."""
    if end > now:
        return None
    if capacity_type == "odcr":
        return (
            f"{field} {utc_timestamp(end)} has passed: EC2 cannot create a reservation that has ended (preflight refuses it); "
            "give a later end_date or leave it out (open-ended)"
        )
    return (
        f"{field} {utc_timestamp(end)} has passed: the block is over and the group never scales out into it; "
        "give the next block's reservation_ids and window, or remove the group"
    )


# A reservation created in a placement group (PlacementGroupArn) is used only by launches into that
# group; a launch into another group, or into none, does not match it, while one without a
# placement group is used by launches with or without one (AWS ParallelCluster's
# PlacementGroupCapacityReservationValidator: docs/facts/capacity.md#odcr-placement-group-match).
def reservation_placement_problem(reservation_pg_arn: str | None, placement: str) -> str | None:
    """A reservation an existing-reservation group cannot use because of its placement group: fminfra
    launches such a group into a new cluster placement group (placement cluster) or none."""
    if not reservation_pg_arn:
        return None
    name = reservation_pg_arn.rsplit("/", 1)[-1]
    where = "a new cluster placement group fminfra creates" if placement == "cluster" else "no placement group"
    return (
        f"was created in placement group {name}, and only launches into that group use it; the group launches into {where}: "
        "use a reservation created without a placement group"
    )


RESERVATION_PLACEMENT_WARNING = (
    "placement cluster puts the group in a new placement group: a reservation created in another placement group does not "
    "match its launches (preflight checks each reservation's), and one created without may still fail for capacity inside "
    "the group's placement; placement none avoids both"
)

# On-Demand Capacity Reservations count toward the On-Demand vCPU quotas while unused, in states
# assessing, scheduled, pending, active and delayed (docs/facts/capacity.md#odcr-counts-toward-on-demand-quota).
RESERVATION_QUOTA_STATES = ("assessing", "scheduled", "pending", "active", "delayed")


def reservation_shared_problem(reservation_id: str, owner: str) -> str:
    """A reservation (ODCR, Capacity Block) named by a second group."""
    return (
        f"{reservation_id} is already {owner}'s: each reservation or Capacity Block serves one group (each group's launch "
        "template targets it, a block's schedule sizes the group to it, and `cost` counts it per group); "
        "give each group its own reservation"
    )


# DescribeCapacityReservationTopology: at most 10 reservation ids a call, MaxResults not with ids
# (docs/facts/capacity.md#capacity-reservation-topology-request); network nodes only for these states
# (docs/facts/capacity.md#capacity-reservation-topology-response); its IAM action
# (docs/facts/capacity.md#capacity-reservation-topology-iam).
TOPOLOGY_IDS_PER_CALL = 10
TOPOLOGY_STATES = ("active", "pending")
TOPOLOGY_IAM_ACTION = "ec2:DescribeCapacityReservationTopology"
