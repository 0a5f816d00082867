"""`capacity-blocks find|purchase`: find Capacity Block offerings and buy one (EC2
DescribeCapacityBlockOfferings / PurchaseCapacityBlock; API only: docs/facts/capacity.md#capacity-block-api-only)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fminfra import catalog
from fminfra.capacity.rules import (
    GB200_INSTANCE_TYPE,
    GB200_SUPPORT,
    MAX_INSTANCES_PER_BLOCK,
    ULTRASERVER_TYPES,
    duration_problem,
    duration_text,
    utc_timestamp,
)
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION, is_az_id
from fminfra.core.rules import TAG_ARGUMENT_RULE
from fminfra.core.table import format_table
from fminfra.ops.aws import access_problem, client, error_code, make_session
from fminfra.ops.common import EXIT_CHECK_FAILED, EXIT_OK, UsageError


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
    duration_minutes: int
    upfront_fee: str
    currency: str
    ultraserver_type: str = ""
    ultraserver_count: int = 0
    zone_type: str = ""

    @property
    def duration(self) -> str:
        """The real length: hours plus minutes (blocks end at 11:30 UTC; docs/facts/capacity.md#capacity-block-end-time)."""
        return duration_text(self.duration_hours, self.duration_minutes)


def zone_ids(ec2: Any) -> dict[str, str]:
    return {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}


def find_offerings(
    ec2: Any,
    *,
    instance_type: str | None = None,
    count: int,
    duration_days: int,
    start_after: datetime | None = None,
    ultraserver_type: str | None = None,
) -> list[Offering]:
    """DescribeCapacityBlockOfferings for the type (or UltraServer type), count and duration,
    sorted by start. With an UltraServer type, COUNT is UltraServers."""
    kwargs: dict[str, Any] = {"CapacityDurationHours": duration_days * 24}
    if ultraserver_type:
        # The request needs an instance type, InstanceTypePreferences or the legacy InstanceType
        # (docs/facts/capacity.md#capacity-block-offerings-instance-type): a GB200 UltraServer's is p6e-gb200.36xlarge.
        kwargs |= {
            "UltraserverType": ultraserver_type,
            "UltraserverCount": count,
            "InstanceTypePreferences": [{"InstanceType": GB200_INSTANCE_TYPE}],
        }
    else:
        kwargs |= {"InstanceType": instance_type, "InstanceCount": count}
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
                    instance_type=o.get("InstanceType", "?"),
                    instance_count=int(o.get("InstanceCount", 0)),
                    availability_zone=o["AvailabilityZone"],
                    availability_zone_id=zones.get(o["AvailabilityZone"], "?"),
                    starts_at=o["StartDate"],
                    ends_at=o["EndDate"],
                    duration_hours=int(o.get("CapacityBlockDurationHours", 0)),
                    duration_minutes=int(o.get("CapacityBlockDurationMinutes", 0)),
                    upfront_fee=str(o.get("UpfrontFee", "?")),
                    currency=str(o.get("CurrencyCode", "")),
                    ultraserver_type=str(o.get("UltraserverType", "")),
                    ultraserver_count=int(o.get("UltraserverCount", 0)),
                    zone_type=str(o.get("ZoneType", "")),
                )
            )
        token = page.get("NextToken")
        if not token:
            break
    return sorted(offerings, key=lambda o: (o.starts_at, o.availability_zone_id))


def purchase(ec2: Any, offering_id: str, *, platform: str = "Linux/UNIX", tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """PurchaseCapacityBlock: buys the offering and returns every reservation it created (one per
    segment of the offering; docs/facts/capacity.md#capacity-block-purchase-reservations)."""
    kwargs: dict[str, Any] = {"CapacityBlockOfferingId": offering_id, "InstancePlatform": platform}
    if tags:
        kwargs["TagSpecifications"] = [{"ResourceType": "capacity-reservation", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    response = ec2.purchase_capacity_block(**kwargs)
    reservations = [dict(r) for r in response.get("CapacityReservations") or []]
    single = response.get("CapacityReservation")
    if single and all(r.get("CapacityReservationId") != single.get("CapacityReservationId") for r in reservations):
        reservations.insert(0, dict(single))
    return reservations


def purchase_dry_run(ec2: Any, offering_id: str, *, platform: str = "Linux/UNIX") -> tuple[bool, str]:
    """PurchaseCapacityBlock with DryRun: (allowed, the API's message). EC2 answers a dry run with
    the error DryRunOperation when the call would be allowed, UnauthorizedOperation when not."""
    from botocore.exceptions import ClientError

    try:
        ec2.purchase_capacity_block(CapacityBlockOfferingId=offering_id, InstancePlatform=platform, DryRun=True)
    except ClientError as exc:
        message = exc.response.get("Error", {}).get("Message", "")
        if error_code(exc) == "DryRunOperation":
            return True, message
        if error_code(exc) == "UnauthorizedOperation":
            return False, message
        raise
    return True, "the dry run returned no error"


def _segments(reservations: list[dict[str, Any]], zone_ids: dict[str, str]) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    """Reservations grouped by what one config group needs in common: AZ ID, type and window."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in reservations:
        az_id = r.get("AvailabilityZoneId") or zone_ids.get(r.get("AvailabilityZone", ""), "?")
        start = utc_timestamp(r["StartDate"]) if r.get("StartDate") else ""
        end = utc_timestamp(r["EndDate"]) if r.get("EndDate") else ""
        groups.setdefault((az_id, str(r.get("InstanceType")), start, end), []).append(r)
    return groups


def config_snippet(reservations: list[dict[str, Any]] | dict[str, Any], zone_ids: dict[str, str]) -> str:
    """The `capacity:` block to paste into a group of the config, and where the block lives: one
    per set of reservations that share AZ, type and window (a group runs in one AZ)."""
    if isinstance(reservations, dict):
        reservations = [reservations]
    parts: list[str] = []
    for (az_id, instance_type, start, end), found in _segments(reservations, zone_ids).items():
        # A group targets one block (docs/facts/capacity.md#capacity-block-one-per-group): one
        # snippet, for one group, per reservation, even of one purchase.
        for r in found:
            rid = r["CapacityReservationId"]
            az_name = r.get("AvailabilityZone", "?")
            count = int(r.get("TotalInstanceCount") or 0)
            lines = [f"# Capacity Block {rid}: {count} x {instance_type} in {az_id} ({az_name}); network.compute_az_id must be {az_id}"]
            if len(found) > 1:
                lines.append(f"# one of {len(found)} reservations with this window: give each its own group (count {count})")
            if not is_az_id(az_id):
                lines.append(f"# {az_id} is not an Availability Zone ID: {GB200_SUPPORT}")
            lines += ["capacity:", "  type: capacity-block", f"  reservation_ids: [{rid}]"]
            if start and end:
                lines += [f'  starts_at: "{start}"', f'  ends_at: "{end}"']
            parts.append("\n".join(lines))
    return "\n\n".join(parts)


def reservations_table(reservations: list[dict[str, Any]], zone_ids: dict[str, str]) -> str:
    """Every reservation the purchase created, one row each."""
    return format_table(
        ["reservation", "instance type", "count", "AZ ID", "start", "end", "state"],
        [
            [
                str(r.get("CapacityReservationId")),
                str(r.get("InstanceType")),
                str(r.get("TotalInstanceCount")),
                str(r.get("AvailabilityZoneId") or zone_ids.get(r.get("AvailabilityZone", ""), "?")),
                utc_timestamp(r["StartDate"]) if r.get("StartDate") else "?",
                utc_timestamp(r["EndDate"]) if r.get("EndDate") else "?",
                str(r.get("State", "?")),
            ]
            for r in reservations
        ],
    )


def _client(ns: argparse.Namespace) -> object:
    if ns.region not in AZ_ID_PREFIX_BY_REGION:
        raise UsageError(f"--region: unknown region {ns.region!r}; known: {', '.join(AZ_ID_PREFIX_BY_REGION)}")
    return client(make_session(region=ns.region, profile=ns.profile), "ec2")


def _tags(values: list[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for value in values:
        match = TAG_ARGUMENT_RULE.match(value)
        if not match or match["key"].lower().startswith("aws:"):
            raise UsageError(f"--tag must be KEY=VALUE (key 1-128 characters, not starting with aws:, value up to 256), got {value!r}")
        tags[match["key"]] = match["value"]
    return tags


def _find_target(ns: argparse.Namespace) -> tuple[str | None, str | None]:
    """(instance type, UltraServer type) for find, exactly one of them; one line otherwise."""
    if bool(ns.instance_type) == bool(ns.ultraserver_type):
        raise UsageError("capacity-blocks find: give --instance-type or --ultraserver-type (one of them)")
    if ns.ultraserver_type:
        if ns.ultraserver_type not in ULTRASERVER_TYPES:
            raise UsageError(f"--ultraserver-type: fminfra supports {', '.join(ULTRASERVER_TYPES)} (GB200), got {ns.ultraserver_type!r}")
        return None, ns.ultraserver_type
    spec = catalog.CATALOG.get(catalog.normalize_instance_type(ns.instance_type))
    if spec is None or not spec.training:
        raise UsageError(f"--instance-type: {ns.instance_type!r} is not an EFA training type; allowed: {', '.join(catalog.TRAINING_TYPES)}")
    if spec.name == GB200_INSTANCE_TYPE:
        raise UsageError(
            f"--instance-type: {spec.name} Capacity Blocks are sold as UltraServers; search with --ultraserver-type "
            f"{' or '.join(ULTRASERVER_TYPES)} ({GB200_SUPPORT})"
        )
    return spec.name, None


def _find(ns: argparse.Namespace, ec2: Any, instance_type: str | None, ultraserver_type: str | None, start_after: datetime | None) -> int:
    offerings = find_offerings(
        ec2,
        instance_type=instance_type,
        count=ns.count,
        duration_days=ns.duration_days,
        start_after=start_after,
        ultraserver_type=ultraserver_type,
    )
    what = f"{ns.count} x {ultraserver_type or instance_type}"
    if not offerings:
        print(f"no Capacity Block offerings for {what} for {ns.duration_days} days in {ns.region}")
        return EXIT_OK
    print(
        format_table(
            ["offering", "instance type", "count", "AZ", "AZ ID", "start", "end", "duration", "upfront price"],
            [
                [
                    o.offering_id,
                    o.instance_type + (f" ({o.ultraserver_count} x {o.ultraserver_type})" if o.ultraserver_type else ""),
                    str(o.instance_count),
                    o.availability_zone + (f" ({o.zone_type})" if o.zone_type and o.zone_type != "availability-zone" else ""),
                    o.availability_zone_id,
                    utc_timestamp(o.starts_at),
                    utc_timestamp(o.ends_at),
                    o.duration,
                    f"{o.upfront_fee} {o.currency}".strip(),
                ]
                for o in offerings
            ],
        )
    )
    if ultraserver_type:
        print(f"note: {GB200_SUPPORT}")
    print(f"buy one with: python -m fminfra capacity-blocks purchase OFFERING --region {ns.region} --yes")
    return EXIT_OK


def _purchase(ns: argparse.Namespace, ec2: Any, tags: dict[str, str]) -> int:
    if ns.dry_run:
        allowed, message = purchase_dry_run(ec2, ns.offering_id, platform=ns.platform)
        verdict = "would be allowed" if allowed else "would be denied"
        print(f"dry run: PurchaseCapacityBlock {ns.offering_id} {verdict} ({message}); nothing was bought")
        return EXIT_OK if allowed else EXIT_CHECK_FAILED
    reservations = purchase(ec2, ns.offering_id, platform=ns.platform, tags=tags)
    zones = zone_ids(ec2)
    print(f"bought {ns.offering_id}: {len(reservations)} reservation(s)")
    print(reservations_table(reservations, zones))
    print()
    print(config_snippet(reservations, zones))
    return EXIT_OK


def command(ns: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    tags: dict[str, str] = {}
    if ns.cb_command == "purchase":
        if not ns.yes and not ns.dry_run:
            raise UsageError(
                f"capacity-blocks purchase: buying {ns.offering_id} charges its upfront fee at once; add --yes to buy it "
                "(or --dry-run to check permissions only)"
            )
        tags = _tags(ns.tag)
    instance_type, ultraserver_type, start_after = None, None, None
    if ns.cb_command == "find":
        instance_type, ultraserver_type = _find_target(ns)
        limit = MAX_INSTANCES_PER_BLOCK if instance_type else None
        if ns.count < 1 or (limit is not None and ns.count > limit):
            raise UsageError(
                f"--count must be 1-{MAX_INSTANCES_PER_BLOCK} (instances per Capacity Block), got {ns.count}"
                if limit
                else f"--count must be 1 or more (UltraServers), got {ns.count}"
            )
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
            return _find(ns, ec2, instance_type, ultraserver_type, start_after)
        return _purchase(ns, ec2, tags)
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
