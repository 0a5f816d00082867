"""`capacity-blocks find|purchase`: find Capacity Block offerings and buy one (EC2
DescribeCapacityBlockOfferings / PurchaseCapacityBlock; API only: docs/facts/capacity.md#capacity-block-api-only)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fminfra import catalog
from fminfra.commands.aws import access_problem, client, error_code, make_session
from fminfra.commands.common import EXIT_CHECK_FAILED, EXIT_OK, Parser, UsageError
from fminfra.commands.plan import format_table
from fminfra.core.capacity_blocks import MAX_INSTANCES_PER_BLOCK, duration_problem, utc_timestamp
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION


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


HELP = "find and buy EC2 Capacity Blocks for ML"


def _client(ns: argparse.Namespace) -> object:
    if ns.region not in AZ_ID_PREFIX_BY_REGION:
        raise UsageError(f"--region: unknown region {ns.region!r}; known: {', '.join(AZ_ID_PREFIX_BY_REGION)}")
    return client(make_session(region=ns.region, profile=ns.profile), "ec2")


def main(ns: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    if ns.cb_command == "purchase" and not ns.yes:
        raise UsageError(f"capacity-blocks purchase: buying {ns.offering_id} charges its upfront fee at once; add --yes to buy it")
    instance_type, start_after = "", None  # set by find's checks below
    if ns.cb_command == "find":
        spec = catalog.CATALOG.get(catalog.normalize_instance_type(ns.instance_type))
        if spec is None or not spec.training:
            raise UsageError(
                f"--instance-type: {ns.instance_type!r} is not an EFA training type; allowed: {', '.join(catalog.TRAINING_TYPES)}"
            )
        instance_type = spec.name
        if not 1 <= ns.count <= MAX_INSTANCES_PER_BLOCK:
            raise UsageError(f"--count must be 1-{MAX_INSTANCES_PER_BLOCK} (instances per Capacity Block), got {ns.count}")
        if duration := duration_problem(ns.duration_days):
            raise UsageError(duration)
        if ns.start_after:
            try:
                start_after = datetime.fromisoformat(ns.start_after)
            except ValueError:
                raise UsageError(
                    f"--start-after must be a date or time such as 2027-01-10 or 2027-01-10T11:30:00Z, got {ns.start_after!r}"
                ) from None
            start_after = start_after if start_after.tzinfo else start_after.replace(tzinfo=UTC)
    ec2 = _client(ns)
    try:
        if ns.cb_command == "find":
            offerings = find_offerings(
                ec2, instance_type=instance_type, count=ns.count, duration_days=ns.duration_days, start_after=start_after
            )
            if not offerings:
                print(f"no Capacity Block offerings for {ns.count} x {instance_type} for {ns.duration_days} days in {ns.region}")
                return EXIT_OK
            print(
                format_table(
                    ["offering", "instance type", "count", "AZ", "AZ ID", "start", "end", "hours", "upfront price"],
                    [
                        [
                            o.offering_id,
                            o.instance_type,
                            str(o.instance_count),
                            o.availability_zone,
                            o.availability_zone_id,
                            utc_timestamp(o.starts_at),
                            utc_timestamp(o.ends_at),
                            str(o.duration_hours),
                            f"{o.upfront_fee} {o.currency}".strip(),
                        ]
                        for o in offerings
                    ],
                )
            )
            print(f"buy one with: python -m fminfra capacity-blocks purchase OFFERING --region {ns.region} --yes")
            return EXIT_OK
        reservation = purchase(ec2, ns.offering_id, platform=ns.platform)
        print(config_snippet(reservation, zone_ids(ec2)))
        return EXIT_OK
    except (ClientError, BotoCoreError) as exc:
        problem = access_problem(exc)
        if problem is not None:
            raise problem from None
        if isinstance(exc, ClientError):
            print(
                f"capacity-blocks {ns.cb_command}: {exc.operation_name} failed: {error_code(exc)}: {exc.response.get('Error', {}).get('Message', '')}",
                file=sys.stderr,
            )
        else:
            print(f"capacity-blocks {ns.cb_command}: {exc}", file=sys.stderr)
        return EXIT_CHECK_FAILED


def add_arguments(p: argparse.ArgumentParser) -> None:
    cb = p.add_subparsers(dest="cb_command", required=True, parser_class=Parser)
    f = cb.add_parser("find", help="list Capacity Block offerings: AZ, start, end, upfront price")
    f.add_argument("--instance-type", required=True)
    f.add_argument("--count", type=int, required=True, help="instances, 1-64")
    f.add_argument("--duration-days", type=int, required=True, help="1-14, or a multiple of 7 up to 182")
    f.add_argument("--start-after", help="earliest start, e.g. 2027-01-10 (UTC when no zone is given)")
    u = cb.add_parser("purchase", help="buy one offering (only with --yes) and print the config snippet")
    u.add_argument("offering_id", metavar="OFFERING_ID")
    u.add_argument("--yes", action="store_true", help="confirm the purchase; without it nothing is bought")
    u.add_argument("--platform", default="Linux/UNIX", help="instance platform of the block (default Linux/UNIX)")
    for q in (f, u):
        q.add_argument("--region", required=True)
        q.add_argument("--profile", help="AWS profile (default: normal credential resolution)")
