"""Capacity Blocks for ML: their timing rules, and the `capacity-blocks` helper that finds and
buys them (EC2 DescribeCapacityBlockOfferings / PurchaseCapacityBlock; API only, facts §2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# EC2 begins terminating a Capacity Block's instances 30 minutes before the block ends (EC2 user
# guide, "Monitor Capacity Blocks": a warning 40 minutes before, terminations 10 minutes later).
# Scaling a group to 0 then keeps it from relaunching into a block that is being reclaimed.
CAPACITY_BLOCK_SCALE_IN_BEFORE_END = timedelta(minutes=30)


def utc_timestamp(value: datetime) -> str:
    """A time zone-aware datetime as the UTC timestamp CloudFormation and EC2 expect."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
