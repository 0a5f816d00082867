"""Capacity Blocks for ML: their timing and size rules, shared by the config, the constructs and the
`capacity-blocks` command (EC2 DescribeCapacityBlockOfferings / PurchaseCapacityBlock; API only: docs/facts/capacity.md#capacity-block-api-only)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# EC2 begins terminating a Capacity Block's instances 30 minutes before the block ends (EC2 user
# guide, "Monitor Capacity Blocks": a warning 40 minutes before, terminations 10 minutes later).
# Scaling a group to 0 then keeps it from relaunching into a block that is being reclaimed.
CAPACITY_BLOCK_SCALE_IN_BEFORE_END = timedelta(minutes=30)


def utc_timestamp(value: datetime) -> str:
    """A time zone-aware datetime as the UTC timestamp CloudFormation and EC2 expect."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


MAX_INSTANCES_PER_BLOCK = 64
MAX_DURATION_DAYS = 182


def duration_problem(days: int) -> str | None:
    """Capacity Block durations: 1-day steps up to 14 days, then 7-day steps up to 182 days."""
    if 1 <= days <= 14 or (14 < days <= MAX_DURATION_DAYS and days % 7 == 0):
        return None
    return f"--duration-days must be 1-14, or a multiple of 7 up to {MAX_DURATION_DAYS}, got {days}"
