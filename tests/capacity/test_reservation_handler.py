"""`Custom::EC2CapacityReservation`'s handler against EC2's request and response shapes (botocore's
Stubber validates every request against botocore's EC2 model), the schema's create-only
properties, and CloudFormation's custom-resource protocol."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from fminfra.capacity.constructs.capacity_reservation import HANDLER_DIR
from fminfra.capacity.rules import CUSTOM_RESERVATION_TYPE
from fminfra.ops.guard.replacements import create_only_properties


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("reservation_handler_index", HANDLER_DIR / "index.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["reservation_handler_index"] = module
    spec.loader.exec_module(module)
    return module


handler = _load()
RID = "cr-0123456789abcdef0"
RID2 = "cr-0fedcba9876543210"
ARN = f"arn:aws:ec2:us-west-2:555555555555:capacity-reservation/{RID}"
PG = "arn:aws:ec2:us-west-2:555555555555:placement-group/fminfra-dev-train"
STACK = "arn:aws:cloudformation:us-west-2:555555555555:stack/dev-Compute/0a1b2c3d-0000-0000-0000-000000000000"
PROPS = {
    "ServiceToken": "arn:aws:lambda:us-west-2:555555555555:function:x",
    "InstanceType": "p5.48xlarge",
    "InstanceCount": "2",  # CloudFormation passes numbers and booleans as strings
    "InstancePlatform": "Linux/UNIX",
    "AvailabilityZoneId": "usw2-az4",
    "InstanceMatchCriteria": "targeted",
    "Tenancy": "default",
    "EbsOptimized": "true",
    "PlacementGroupArn": PG,
    "EndDate": "2027-03-31T00:00:00Z",
    "Tags": {"Name": "fminfra-dev-train", "fminfra:stack-id": STACK},
}


def _event(
    request: str, props: dict[str, Any] | None = None, old: dict[str, Any] | None = None, physical: str | None = None
) -> dict[str, Any]:
    event = {
        "RequestType": request,
        "RequestId": "5d2f7c4e-1111-2222-3333-444455556666",
        "ResponseURL": "https://cloudformation-custom-resource-response-uswest2.s3.amazonaws.com/x",
        "StackId": STACK,
        "LogicalResourceId": "CapacityReservationtrainReservation0A1B2C3D",
        "ResourceType": CUSTOM_RESERVATION_TYPE,
        "ResourceProperties": props if props is not None else PROPS,
    }
    if old is not None:
        event["OldResourceProperties"] = old
    if physical is not None:
        event["PhysicalResourceId"] = physical
    return event


def _reservation(state: str = "active", rid: str = RID, **extra: Any) -> dict[str, Any]:
    return {"CapacityReservationId": rid, "CapacityReservationArn": ARN.replace(RID, rid), "State": state, **extra}


@pytest.fixture
def ec2() -> Any:
    client = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        client.stub = stub  # type: ignore[attr-defined]
        yield client
        stub.assert_no_pending_responses()


def test_create_reserves_in_the_placement_group_with_the_tags_and_waits_while_pending(ec2: Any) -> None:
    ec2.stub.add_response(
        "create_capacity_reservation",
        {"CapacityReservation": _reservation("pending")},
        {
            "ClientToken": "5d2f7c4e-1111-2222-3333-444455556666",
            "InstanceType": "p5.48xlarge",
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZoneId": "usw2-az4",
            "Tenancy": "default",
            "InstanceCount": 2,
            "EbsOptimized": True,
            "InstanceMatchCriteria": "targeted",
            "PlacementGroupArn": PG,
            "EndDateType": "limited",
            "EndDate": datetime(2027, 3, 31, tzinfo=UTC),
            "TagSpecifications": [
                {
                    "ResourceType": "capacity-reservation",
                    "Tags": [{"Key": "Name", "Value": "fminfra-dev-train"}, {"Key": "fminfra:stack-id", "Value": STACK}],
                }
            ],
        },
    )
    ec2.stub.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [_reservation("active")]}, {"CapacityReservationIds": [RID]}
    )
    slept: list[float] = []
    physical, data, done = handler.handle(_event("Create"), ec2, sleep=slept.append)
    assert (physical, data) == (RID, {"Id": RID, "CapacityReservationArn": ARN})
    assert slept == [handler.POLL_S] and "2 x p5.48xlarge" in done


def test_create_fails_when_ec2_cannot_reserve(ec2: Any) -> None:
    ec2.stub.add_response("create_capacity_reservation", {"CapacityReservation": _reservation("pending")}, None)
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_reservation("failed")]}, None)
    with pytest.raises(handler.HandlerError, match="is failed, not active"):
        handler.handle(_event("Create"), ec2, sleep=lambda _: None)


def test_an_open_ended_reservation_is_unlimited(ec2: Any) -> None:
    props = {k: v for k, v in PROPS.items() if k != "EndDate"}
    ec2.stub.add_response(
        "create_capacity_reservation", {"CapacityReservation": _reservation()}, {**_any_create(), "EndDateType": "unlimited"}
    )
    handler.handle(_event("Create", props), ec2)


def _any_create() -> dict[str, Any]:
    keys = ("ClientToken", "InstanceType", "InstancePlatform", "AvailabilityZoneId", "Tenancy", "InstanceCount", "EbsOptimized")
    return {k: ANY for k in (*keys, "InstanceMatchCriteria", "PlacementGroupArn", "TagSpecifications")}


def test_a_count_or_end_change_modifies_in_place(ec2: Any) -> None:
    new = {**PROPS, "InstanceCount": "4", "EndDate": "2027-06-30T00:00:00Z"}
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_reservation()]}, {"CapacityReservationIds": [RID]})
    ec2.stub.add_response(
        "modify_capacity_reservation",
        {"Return": True},
        {"CapacityReservationId": RID, "InstanceCount": 4, "EndDateType": "limited", "EndDate": datetime(2027, 6, 30, tzinfo=UTC)},
    )
    physical, data, _ = handler.handle(_event("Update", new, PROPS, RID), ec2)
    assert physical == RID and data["CapacityReservationArn"] == ARN


def test_a_tag_change_retags_in_place(ec2: Any) -> None:
    new = {**PROPS, "Tags": {"fminfra:stack-id": STACK, "Team": "llm"}}
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_reservation()]}, None)
    ec2.stub.add_response("delete_tags", {}, {"Resources": [RID], "Tags": [{"Key": "Name"}]})
    ec2.stub.add_response("create_tags", {}, {"Resources": [RID], "Tags": [{"Key": "Team", "Value": "llm"}]})
    assert handler.handle(_event("Update", new, PROPS, RID), ec2)[0] == RID


@pytest.mark.parametrize("changed", handler.REPLACING)
def test_a_create_only_change_creates_a_new_reservation(ec2: Any, changed: str) -> None:
    values = {
        "InstanceType": "p5en.48xlarge",
        "InstancePlatform": "Ubuntu Pro",
        "AvailabilityZoneId": "usw2-az1",
        "Tenancy": "dedicated",
        "EbsOptimized": "false",
        "PlacementGroupArn": PG + "-2",
    }
    ec2.stub.add_response("create_capacity_reservation", {"CapacityReservation": _reservation(rid=RID2)}, None)
    physical, _, done = handler.handle(_event("Update", {**PROPS, changed: values[changed]}, PROPS, RID), ec2)
    assert physical == RID2 and f"replaces {RID}" in done  # CloudFormation then deletes RID


def test_replacing_is_the_schemas_create_only_properties_that_the_resource_sets() -> None:
    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::EC2::CapacityReservation").schema
    create_only = {p.removeprefix("/properties/") for p in schema["createOnlyProperties"]}
    sent = set(PROPS) - {"ServiceToken", "Tags"}
    assert set(handler.REPLACING) == create_only & sent
    # ... and the guard reads the custom resource with the same create-only properties.
    assert {p.removeprefix("/properties/") for p in create_only_properties(CUSTOM_RESERVATION_TYPE)} == create_only


def test_delete_cancels_and_tolerates_what_is_already_gone(ec2: Any) -> None:
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_reservation()]}, {"CapacityReservationIds": [RID]})
    ec2.stub.add_response("cancel_capacity_reservation", {"Return": True}, {"CapacityReservationId": RID})
    assert handler.handle(_event("Delete", physical=RID), ec2)[2] == f"{RID} cancelled"
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_reservation("expired")]}, None)
    assert handler.handle(_event("Delete", physical=RID), ec2)[2] == f"{RID} already expired"
    ec2.stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound", "not found")
    assert handler.handle(_event("Delete", physical=RID), ec2)[2] == f"{RID} already gone"
    # A create that failed answered with the logical id: nothing was reserved.
    assert "nothing was reserved" in handler.handle(_event("Delete", physical="CapacityReservationtrainReservation0A1B2C3D"), ec2)[2]


def test_delete_fails_on_other_errors(ec2: Any) -> None:
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_reservation()]}, None)
    ec2.stub.add_client_error("cancel_capacity_reservation", "UnauthorizedOperation", "no")
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        handler.handle(_event("Delete", physical=RID), ec2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"InstanceCount": "two"}, "InstanceCount must be a whole number"),
        ({"PlacementGroupArn": ""}, "missing properties: PlacementGroupArn"),
        ({"EndDate": "31/03/2027"}, "EndDate must be an ISO 8601"),
    ],
)
def test_bad_properties_fail_with_a_reason(ec2: Any, change: dict[str, Any], message: str) -> None:
    with pytest.raises(handler.HandlerError, match=message):
        handler.handle(_event("Create", {**PROPS, **change}), ec2)


def test_every_outcome_reaches_cloudformation(ec2: Any) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    ec2.stub.add_response("create_capacity_reservation", {"CapacityReservation": _reservation()}, None)
    handler.on_event(_event("Create"), ec2=ec2, put=lambda url, body: sent.append((url, json.loads(body))))
    ec2.stub.add_client_error("create_capacity_reservation", "InsufficientInstanceCapacity", "no capacity")
    handler.on_event(_event("Create"), ec2=ec2, put=lambda url, body: sent.append((url, json.loads(body))))
    (url, ok), (_, failed) = sent
    assert url.startswith("https://") and ok["Status"] == "SUCCESS" and ok["PhysicalResourceId"] == RID
    assert ok["Data"] == {"Id": RID, "CapacityReservationArn": ARN}
    assert failed["Status"] == "FAILED" and "InsufficientInstanceCapacity" in failed["Reason"]
    assert failed["PhysicalResourceId"] == "CapacityReservationtrainReservation0A1B2C3D"
    assert {k: ok[k] for k in ("StackId", "RequestId", "LogicalResourceId")} == {
        "StackId": STACK,
        "RequestId": "5d2f7c4e-1111-2222-3333-444455556666",
        "LogicalResourceId": "CapacityReservationtrainReservation0A1B2C3D",
    }
