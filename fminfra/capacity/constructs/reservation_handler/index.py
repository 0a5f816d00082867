"""CloudFormation custom resource `Custom::EC2CapacityReservation`: an On-Demand Capacity
Reservation inside a cluster placement group, created through the EC2 API.

`AWS::EC2::CapacityReservation` cannot take a placement group: its registry schema's pattern for
`PlacementGroupArn` has a second `^` in the middle, so no ARN matches it, and CloudFormation
validates registry resources against their schema (docs/facts/capacity.md#cfn-schema-capacity-reservation-placement-group-arn).
EC2's API accepts a real ARN (docs/facts/capacity.md#odcr-ec2-accepts-placement-group-arn), so this handler calls it with the properties CloudFormation's own
resource would send (same names) and behaves as that resource does:

- Create: `CreateCapacityReservation` (ClientToken = the request id, so a retried invocation does
  not reserve twice), then waits while the reservation is `pending`; `failed` is a failure.
- Update: a change to a property the resource's schema marks create-only (`REPLACING`) creates a
  new reservation and returns its id, so CloudFormation deletes the old one after the update;
  otherwise `ModifyCapacityReservation` (count, end date) and the tags in place.
- Delete: `CancelCapacityReservation`; a reservation already gone (cancelled, expired, failed,
  unknown id) is not an error, so a failed create can roll back.

Answers CloudFormation itself (PUT to the presigned ResponseURL). Every collaborator is an
argument, so tests drive it with botocore's Stubber (tests/capacity/test_reservation_handler.py).
"""

from __future__ import annotations

import json
import time
import traceback
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

# The schema's createOnlyProperties that this resource sets (docs/facts/capacity.md#odcr-handler-permissions;
# checked against cfn-lint's copy of the schema by tests/capacity/test_reservation_handler.py).
REPLACING = ("InstanceType", "InstancePlatform", "AvailabilityZoneId", "Tenancy", "EbsOptimized", "PlacementGroupArn")
REQUIRED = ("InstanceType", "InstanceCount", "InstancePlatform", "AvailabilityZoneId", "PlacementGroupArn")
# A reservation in one of these states holds no capacity: nothing to cancel
# (docs/facts/capacity.md#odcr-states).
ENDED = ("cancelled", "cancelling", "expired", "failed")
GONE_CODES = ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed")
WAIT_S = 600
POLL_S = 10

Client = Any  # a boto3 EC2 client (or a stubbed one)


class HandlerError(Exception):
    """A failure reported to CloudFormation as the resource's Reason."""


def parse(props: Mapping[str, Any]) -> dict[str, Any]:
    """The resource properties as EC2 wants them: CloudFormation passes numbers and booleans as strings."""
    missing = [k for k in REQUIRED if not props.get(k)]
    if missing:
        raise HandlerError(f"missing properties: {', '.join(missing)}")
    try:
        count = int(props["InstanceCount"])
    except (TypeError, ValueError):
        raise HandlerError(f"InstanceCount must be a whole number, got {props['InstanceCount']!r}") from None
    if count < 1:
        raise HandlerError(f"InstanceCount must be at least 1, got {count}")
    end = props.get("EndDate") or None
    if end is not None:
        try:
            datetime.fromisoformat(str(end).replace("Z", "+00:00"))
        except ValueError:
            raise HandlerError(f"EndDate must be an ISO 8601 UTC time, got {end!r}") from None
    tags = {str(k): str(v) for k, v in dict(props.get("Tags") or {}).items()}
    return {
        "InstanceType": str(props["InstanceType"]),
        "InstanceCount": count,
        "InstancePlatform": str(props["InstancePlatform"]),
        "AvailabilityZoneId": str(props["AvailabilityZoneId"]),
        "Tenancy": str(props.get("Tenancy") or "default"),
        "EbsOptimized": str(props.get("EbsOptimized", "true")).lower() == "true",
        "InstanceMatchCriteria": str(props.get("InstanceMatchCriteria") or "targeted"),
        "PlacementGroupArn": str(props["PlacementGroupArn"]),
        "EndDate": end,
        "Tags": tags,
    }


def _end(props: Mapping[str, Any]) -> dict[str, Any]:
    if props["EndDate"]:
        return {"EndDateType": "limited", "EndDate": datetime.fromisoformat(props["EndDate"].replace("Z", "+00:00"))}
    return {"EndDateType": "unlimited"}


def _describe(ec2: Client, rid: str) -> dict[str, Any] | None:
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
    except Exception as exc:
        if _code(exc) in GONE_CODES:
            return None
        raise
    return dict(found[0]) if found else None


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def create(ec2: Client, props: Mapping[str, Any], token: str, sleep: Callable[[float], None]) -> dict[str, str]:
    """Reserve, wait until the reservation leaves `pending`; its id and ARN."""
    response = ec2.create_capacity_reservation(
        ClientToken=token[:64],
        InstanceType=props["InstanceType"],
        InstancePlatform=props["InstancePlatform"],
        AvailabilityZoneId=props["AvailabilityZoneId"],
        Tenancy=props["Tenancy"],
        InstanceCount=props["InstanceCount"],
        EbsOptimized=props["EbsOptimized"],
        InstanceMatchCriteria=props["InstanceMatchCriteria"],
        PlacementGroupArn=props["PlacementGroupArn"],
        TagSpecifications=[
            {"ResourceType": "capacity-reservation", "Tags": [{"Key": k, "Value": v} for k, v in sorted(props["Tags"].items())]}
        ],
        **_end(props),
    )
    reservation = dict(response["CapacityReservation"])
    rid = str(reservation["CapacityReservationId"])
    waited = 0.0
    while reservation.get("State") == "pending":
        if waited >= WAIT_S:
            raise HandlerError(f"{rid} still pending after {WAIT_S} s")
        sleep(POLL_S)
        waited += POLL_S
        reservation = _describe(ec2, rid) or {"State": "failed"}
    if reservation.get("State") != "active":
        raise HandlerError(
            f"{rid} is {reservation.get('State')}, not active: EC2 could not reserve {props['InstanceCount']} x {props['InstanceType']}"
        )
    return {"Id": rid, "CapacityReservationArn": str(reservation.get("CapacityReservationArn", ""))}


def update(
    ec2: Client, rid: str, old: Mapping[str, Any], new: Mapping[str, Any], token: str, sleep: Callable[[float], None]
) -> dict[str, str]:
    """Replace on a create-only change, else modify in place."""
    if any(old.get(k) != new[k] for k in REPLACING):
        return create(ec2, new, token, sleep)
    current = _describe(ec2, rid)
    if current is None or current.get("State") in ENDED:
        raise HandlerError(
            f"{rid} is {'gone' if current is None else current['State']}: it cannot be modified; delete and recreate the group's capacity"
        )
    if (old.get("InstanceCount"), old.get("EndDate")) != (new["InstanceCount"], new["EndDate"]):
        ec2.modify_capacity_reservation(CapacityReservationId=rid, InstanceCount=new["InstanceCount"], **_end(new))
    arn = str(current.get("CapacityReservationArn", ""))
    removed = sorted(set(old.get("Tags") or {}) - set(new["Tags"]))
    if removed:
        ec2.delete_tags(Resources=[rid], Tags=[{"Key": k} for k in removed])
    changed = {k: v for k, v in new["Tags"].items() if (old.get("Tags") or {}).get(k) != v}
    if changed:
        ec2.create_tags(Resources=[rid], Tags=[{"Key": k, "Value": v} for k, v in sorted(changed.items())])
    return {"Id": rid, "CapacityReservationArn": arn}


def delete(ec2: Client, rid: str) -> str:
    """Cancel; a reservation that holds nothing any more is already done."""
    if not rid.startswith("cr-"):
        return f"{rid} is not a reservation id: nothing was reserved"
    current = _describe(ec2, rid)
    if current is None or current.get("State") in ENDED:
        return f"{rid} already {'gone' if current is None else current['State']}"
    try:
        ec2.cancel_capacity_reservation(CapacityReservationId=rid)
    except Exception as exc:
        if _code(exc) in GONE_CODES:
            return f"{rid} already gone"
        raise
    return f"{rid} cancelled"


def handle(event: Mapping[str, Any], ec2: Client, sleep: Callable[[float], None] = time.sleep) -> tuple[str, dict[str, str], str]:
    """One CloudFormation request -> (physical id, Data, what was done)."""
    request = event["RequestType"]
    physical = str(event.get("PhysicalResourceId") or "")
    if request == "Delete":
        return physical, {}, delete(ec2, physical)
    new = parse(event["ResourceProperties"])
    if request == "Create":
        data = create(ec2, new, event["RequestId"], sleep)
        return data["Id"], data, f"{data['Id']} reserved: {new['InstanceCount']} x {new['InstanceType']}"
    try:
        old = parse(event.get("OldResourceProperties") or {})
    except HandlerError:
        old = {}
    data = update(ec2, physical, old, new, event["RequestId"], sleep)
    return data["Id"], data, f"{data['Id']} {'replaces ' + physical if data['Id'] != physical else 'updated'}"


def response_body(event: Mapping[str, Any], status: str, physical: str, data: Mapping[str, str], reason: str) -> bytes:
    """The JSON CloudFormation expects at ResponseURL (docs/facts/hyperpod.md#cfn-custom-resource-response)."""
    return json.dumps(
        {
            "Status": status,
            "Reason": reason[:3000],
            "PhysicalResourceId": physical or event["LogicalResourceId"],
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": dict(data),
        }
    ).encode()


def _put(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))})  # noqa: S310
    with urllib.request.urlopen(request, timeout=60):  # noqa: S310 - the presigned ResponseURL
        pass


def on_event(event: Mapping[str, Any], context: Any = None, ec2: Client = None, put: Callable[[str, bytes], None] = _put) -> None:
    """Lambda entry point."""
    if ec2 is None:
        import boto3  # Lambda's runtime ships boto3; imported here so tests need no AWS

        ec2 = boto3.client("ec2")
    physical = str(event.get("PhysicalResourceId") or "")
    try:
        physical, data, done = handle(event, ec2)
        print(done)
        put(event["ResponseURL"], response_body(event, "SUCCESS", physical, data, done))
    except Exception as exc:  # every failure must reach CloudFormation, or the stack waits an hour
        traceback.print_exc()
        put(event["ResponseURL"], response_body(event, "FAILED", physical, {}, f"{type(exc).__name__}: {exc}"))
