"""Capacity Blocks for ML: their timing rules, and the `capacity-blocks` helper that finds and
buys them (EC2 DescribeCapacityBlockOfferings / PurchaseCapacityBlock; API only, facts §2)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# EC2 begins terminating a Capacity Block's instances 30 minutes before the block ends (EC2 user
# guide, "Monitor Capacity Blocks": a warning 40 minutes before, terminations 10 minutes later).
# Scaling a group to 0 then keeps it from relaunching into a block that is being reclaimed.
CAPACITY_BLOCK_SCALE_IN_BEFORE_END = timedelta(minutes=30)


def utc_timestamp(value: datetime) -> str:
    """A time zone-aware datetime as the UTC timestamp CloudFormation and EC2 expect."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# the helper: find offerings, buy one


MAX_INSTANCES_PER_BLOCK = 64
MAX_DURATION_DAYS = 182


def duration_problem(days: int) -> str | None:
    """Capacity Block durations: 1-day steps up to 14 days, then 7-day steps up to 182 days."""
    if 1 <= days <= 14 or (14 < days <= MAX_DURATION_DAYS and days % 7 == 0):
        return None
    return f"--duration-days must be 1-14, or a multiple of 7 up to {MAX_DURATION_DAYS}, got {days}"


@dataclass(frozen=True)
class Offering:
    """One Capacity Block offering, with the AZ ID of its zone in this account."""

    offering_id: str
    instance_type: str
    instance_count: int
    availability_zone: str
    availability_zone_id: str
    starts_at: datetime
    ends_at: datetime
    duration_hours: int
    upfront_fee: str
    currency: str


def zone_ids(ec2: Any) -> dict[str, str]:
    return {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}


def find_offerings(ec2: Any, *, instance_type: str, count: int, duration_days: int, start_after: datetime | None = None) -> list[Offering]:
    """DescribeCapacityBlockOfferings for the type, count and duration, sorted by start."""
    kwargs: dict[str, Any] = {"InstanceType": instance_type, "InstanceCount": count, "CapacityDurationHours": duration_days * 24}
    if start_after is not None:
        kwargs["StartDateRange"] = start_after
    zones = zone_ids(ec2)
    offerings: list[Offering] = []
    token: str | None = None
    while True:
        page = ec2.describe_capacity_block_offerings(**kwargs, **({"NextToken": token} if token else {}))
        for o in page.get("CapacityBlockOfferings", []):
            offerings.append(
                Offering(
                    offering_id=o["CapacityBlockOfferingId"],
                    instance_type=o["InstanceType"],
                    instance_count=int(o["InstanceCount"]),
                    availability_zone=o["AvailabilityZone"],
                    availability_zone_id=zones.get(o["AvailabilityZone"], "?"),
                    starts_at=o["StartDate"],
                    ends_at=o["EndDate"],
                    duration_hours=int(o["CapacityBlockDurationHours"]),
                    upfront_fee=str(o.get("UpfrontFee", "?")),
                    currency=str(o.get("CurrencyCode", "")),
                )
            )
        token = page.get("NextToken")
        if not token:
            break
    return sorted(offerings, key=lambda o: (o.starts_at, o.availability_zone_id))


def purchase(ec2: Any, offering_id: str, *, platform: str = "Linux/UNIX") -> dict[str, Any]:
    """PurchaseCapacityBlock: buys the offering and returns the new reservation."""
    return dict(ec2.purchase_capacity_block(CapacityBlockOfferingId=offering_id, InstancePlatform=platform)["CapacityReservation"])


def config_snippet(reservation: dict[str, Any], zone_ids: dict[str, str]) -> str:
    """The `capacity:` block to paste into a group of the config, and where the block lives."""
    az_name = reservation.get("AvailabilityZone", "?")
    az_id = reservation.get("AvailabilityZoneId") or zone_ids.get(az_name, "?")
    lines = [
        f"# Capacity Block {reservation['CapacityReservationId']}: {reservation.get('TotalInstanceCount')} x {reservation.get('InstanceType')} "
        f"in {az_id} ({az_name}); network.compute_az_id must be {az_id}",
        "capacity:",
        "  type: capacity-block",
        f"  reservation_ids: [{reservation['CapacityReservationId']}]",
    ]
    if reservation.get("StartDate") and reservation.get("EndDate"):
        lines.append(f'  starts_at: "{utc_timestamp(reservation["StartDate"])}"')
        lines.append(f'  ends_at: "{utc_timestamp(reservation["EndDate"])}"')
    return "\n".join(lines)
