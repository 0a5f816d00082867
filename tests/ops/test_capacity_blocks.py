"""The capacity-blocks helper: find lists offerings, purchase buys only with --yes and prints the
config snippet. EC2 is a botocore Stubber with responses shaped like the real ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from fminfra.capacity.rules import duration_problem
from fminfra.cli.main import main
from fminfra.config import parse_config
from fminfra.ops import capacity_blocks as capacity_blocks_command

ZONES = {
    "AvailabilityZones": [
        {"ZoneName": "us-west-2a", "ZoneId": "usw2-az2", "State": "available", "RegionName": "us-west-2", "ZoneType": "availability-zone"},
        {"ZoneName": "us-west-2b", "ZoneId": "usw2-az1", "State": "available", "RegionName": "us-west-2", "ZoneType": "availability-zone"},
        {"ZoneName": "us-west-2d", "ZoneId": "usw2-az4", "State": "available", "RegionName": "us-west-2", "ZoneType": "availability-zone"},
    ]
}


def _offering(oid: str, zone: str, start: datetime, end: datetime, fee: str) -> dict[str, Any]:
    """An offering as DescribeCapacityBlockOfferings returns it: its length in hours plus minutes
    (botocore's CapacityBlockOffering shape; docs/facts/capacity.md#capacity-block-end-time)."""
    minutes = int((end - start).total_seconds() // 60)
    return {
        "CapacityBlockOfferingId": oid,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": zone,
        "InstanceCount": 4,
        "StartDate": start,
        "EndDate": end,
        "CapacityBlockDurationHours": minutes // 60,
        "CapacityBlockDurationMinutes": minutes % 60,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
        "Tenancy": "default",
    }


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Stubber:
    client = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.activate()
    monkeypatch.setattr(capacity_blocks_command, "_client", lambda ns: client)
    return stub


FIND = ["capacity-blocks", "find", "--region", "us-west-2", "--instance-type", "p5.48xlarge", "--count", "4", "--duration-days", "7"]


def test_find_lists_offerings_sorted_with_az_ids(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    ec2.add_response("describe_availability_zones", ZONES, {})
    ec2.add_response(
        "describe_capacity_block_offerings",
        {
            "CapacityBlockOfferings": [
                _offering(
                    "cb-0bbbbbbbbbbbbbbbb",
                    "us-west-2b",
                    datetime(2027, 1, 12, 11, 30, tzinfo=UTC),
                    datetime(2027, 1, 19, 11, 30, tzinfo=UTC),
                    "80640.00",
                )
            ],
            "NextToken": "page-2",
        },
        {
            "InstanceType": "p5.48xlarge",
            "InstanceCount": 4,
            "CapacityDurationHours": 168,
            "StartDateRange": datetime(2027, 1, 10, tzinfo=UTC),
        },
    )
    ec2.add_response(
        "describe_capacity_block_offerings",
        {
            "CapacityBlockOfferings": [
                _offering(
                    "cb-0aaaaaaaaaaaaaaaa",
                    "us-west-2d",
                    datetime(2027, 1, 10, 11, 30, tzinfo=UTC),
                    datetime(2027, 1, 17, 11, 30, tzinfo=UTC),
                    "79872.00",
                )
            ]
        },
        {
            "InstanceType": "p5.48xlarge",
            "InstanceCount": 4,
            "CapacityDurationHours": 168,
            "StartDateRange": datetime(2027, 1, 10, tzinfo=UTC),
            "NextToken": "page-2",
        },
    )
    assert main([*FIND, "--start-after", "2027-01-10"]) == 0
    ec2.assert_no_pending_responses()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["offering", "instance", "type", "count", "AZ", "AZ", "ID", "start", "end", "duration", "upfront", "price"]
    assert lines[2].split() == [
        "cb-0aaaaaaaaaaaaaaaa",
        "p5.48xlarge",
        "4",
        "us-west-2d",
        "usw2-az4",
        "2027-01-10T11:30:00Z",
        "2027-01-17T11:30:00Z",
        "168h",
        "79872.00",
        "USD",
    ]
    assert lines[3].split()[:5] == ["cb-0bbbbbbbbbbbbbbbb", "p5.48xlarge", "4", "us-west-2b", "usw2-az1"]
    assert lines[-1] == "buy one with: python -m fminfra capacity-blocks purchase OFFERING --region us-west-2 --yes"


def test_find_with_no_offerings(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    ec2.add_response("describe_availability_zones", ZONES, {})
    ec2.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": []})
    assert main(FIND) == 0
    assert capsys.readouterr().out.strip() == "no Capacity Block offerings for 4 x p5.48xlarge for 7 days in us-west-2"


PURCHASED = {
    "CapacityReservationId": "cr-0123456789abcdef0",
    "OwnerId": "123456789012",
    "CapacityReservationArn": "arn:aws:ec2:us-west-2:123456789012:capacity-reservation/cr-0123456789abcdef0",
    "AvailabilityZoneId": "usw2-az4",
    "InstanceType": "p5.48xlarge",
    "InstancePlatform": "Linux/UNIX",
    "AvailabilityZone": "us-west-2d",
    "Tenancy": "default",
    "TotalInstanceCount": 4,
    "AvailableInstanceCount": 4,
    "EbsOptimized": True,
    "EphemeralStorage": False,
    "State": "payment-pending",
    "StartDate": datetime(2027, 1, 10, 11, 30, tzinfo=UTC),
    "EndDate": datetime(2027, 1, 17, 11, 30, tzinfo=UTC),
    "EndDateType": "limited",
    "InstanceMatchCriteria": "targeted",
    "CreateDate": datetime(2027, 1, 3, 9, 12, tzinfo=UTC),
    "ReservationType": "capacity-block",
}
SNIPPET = """# Capacity Block cr-0123456789abcdef0: 4 x p5.48xlarge in usw2-az4 (us-west-2d); network.compute_az_id must be usw2-az4
capacity:
  type: capacity-block
  reservation_ids: [cr-0123456789abcdef0]
  starts_at: "2027-01-10T11:30:00Z"
  ends_at: "2027-01-17T11:30:00Z\""""


def test_purchase_with_yes_buys_and_prints_a_snippet_that_validates(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    ec2.add_response(
        "purchase_capacity_block",
        {"CapacityReservation": PURCHASED},
        {"CapacityBlockOfferingId": "cb-0aaaaaaaaaaaaaaaa", "InstancePlatform": "Linux/UNIX"},
    )
    ec2.add_response("describe_availability_zones", ZONES, {})
    assert main(["capacity-blocks", "purchase", "cb-0aaaaaaaaaaaaaaaa", "--region", "us-west-2", "--yes"]) == 0
    ec2.assert_no_pending_responses()
    out = capsys.readouterr().out.strip().split("\n\n")[-1]
    assert out == SNIPPET
    # The snippet pastes into an ec2 group as is.
    capacity = yaml.safe_load(out)["capacity"]
    cfg = parse_config(
        {
            "name": "cb",
            "account": "123456789012",
            "region": "us-west-2",
            "network": {"az_ids": ["usw2-az1", "usw2-az4"], "compute_az_id": "usw2-az4"},
            "compute": {
                "orchestrator": "ec2",
                "instance_groups": [{"name": "w", "instance_type": "p5.48xlarge", "count": 4, "capacity": capacity}],
            },
        }
    )
    assert cfg.compute.instance_groups[0].capacity.reservation_ids == ["cr-0123456789abcdef0"]


def test_purchase_without_yes_buys_nothing(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity-blocks", "purchase", "cb-0aaaaaaaaaaaaaaaa", "--region", "us-west-2"]) == 2
    ec2.assert_no_pending_responses()  # and no call was made: an unexpected one would raise
    assert capsys.readouterr().err.strip().splitlines() == [
        "capacity-blocks purchase: buying cb-0aaaaaaaaaaaaaaaa charges its upfront fee at once; add --yes to buy it "
        "(or --dry-run to check permissions only)"
    ]


def test_purchase_failure_is_one_line_exit_1(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    ec2.add_client_error(
        "purchase_capacity_block",
        service_error_code="InsufficientInstanceCapacity",
        service_message="The offering is no longer available.",
    )
    assert main(["capacity-blocks", "purchase", "cb-0aaaaaaaaaaaaaaaa", "--region", "us-west-2", "--yes"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "capacity-blocks purchase: PurchaseCapacityBlock failed: InsufficientInstanceCapacity: The offering is no longer available."
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--count", "65"], "--count must be 1-64 (instances per Capacity Block), got 65"),
        (["--duration-days", "15"], "--duration-days must be 1-14, or a multiple of 7 up to 182, got 15"),
        (["--instance-type", "g6e.12xlarge"], "--instance-type: 'g6e.12xlarge' is not an EFA training type"),
        (
            ["--start-after", "next week"],
            "--start-after must be a date or time such as 2027-01-10 or 2027-01-10T11:30:00Z, got 'next week'",
        ),
        (["--region", "mars-1"], "--region: unknown region 'mars-1'"),
    ],
)
def test_find_rejects_bad_input_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    argv = list(FIND)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)


@pytest.mark.parametrize(("days", "ok"), [(1, True), (14, True), (15, False), (21, True), (182, True), (189, False), (0, False)])
def test_duration_steps(days: int, ok: bool) -> None:
    assert (duration_problem(days) is None) is ok


# ------------------------------------------------------------------------------------------
# real durations, several reservations per purchase, dry run, tags, GB200 UltraServers


def test_find_shows_the_real_duration_with_minutes(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    """A 7-day search returns a block starting mid-day that ends at 11:30 UTC: 164h 35m, not "164"."""
    ec2.add_response("describe_availability_zones", ZONES, {})
    ec2.add_response(
        "describe_capacity_block_offerings",
        {
            "CapacityBlockOfferings": [
                _offering(
                    "cb-0cccccccccccccccc",
                    "us-west-2d",
                    datetime(2027, 1, 10, 14, 55, tzinfo=UTC),
                    datetime(2027, 1, 17, 11, 30, tzinfo=UTC),
                    "78000.00",
                )
            ]
        },
        {"InstanceType": "p5.48xlarge", "InstanceCount": 4, "CapacityDurationHours": 168},
    )
    assert main(FIND) == 0
    row = capsys.readouterr().out.splitlines()[2].split()
    assert row[5:9] == ["2027-01-10T14:55:00Z", "2027-01-17T11:30:00Z", "164h", "35m"]


def _segment(rid: str, zone: str, zone_id: str, count: int) -> dict[str, Any]:
    return {**PURCHASED, "CapacityReservationId": rid, "AvailabilityZone": zone, "AvailabilityZoneId": zone_id, "TotalInstanceCount": count}


def test_purchase_reports_and_records_every_reservation_of_a_segmented_offering(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    """PurchaseCapacityBlock returns one reservation per segment (`CapacityReservations`, botocore's
    PurchaseCapacityBlockResult); every one is listed and goes into the snippet."""
    first = _segment("cr-0123456789abcdef0", "us-west-2d", "usw2-az4", 2)
    second = _segment("cr-0123456789abcdef1", "us-west-2d", "usw2-az4", 2)
    ec2.add_response(
        "purchase_capacity_block",
        {"CapacityReservation": first, "CapacityReservations": [first, second]},
        {"CapacityBlockOfferingId": "cb-0aaaaaaaaaaaaaaaa", "InstancePlatform": "Linux/UNIX"},
    )
    ec2.add_response("describe_availability_zones", ZONES, {})
    assert main(["capacity-blocks", "purchase", "cb-0aaaaaaaaaaaaaaaa", "--region", "us-west-2", "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "bought cb-0aaaaaaaaaaaaaaaa: 2 reservation(s)"
    assert "cr-0123456789abcdef0" in out.splitlines()[3] and "cr-0123456789abcdef1" in out.splitlines()[4]
    # A group targets one block (docs/facts/capacity.md#capacity-block-one-per-group): one snippet per reservation.
    first, second = out.strip().split("\n\n")[-2:]
    assert yaml.safe_load(first)["capacity"]["reservation_ids"] == ["cr-0123456789abcdef0"]
    assert yaml.safe_load(second)["capacity"]["reservation_ids"] == ["cr-0123456789abcdef1"]
    assert first.splitlines()[0].startswith("# Capacity Block cr-0123456789abcdef0: 2 x p5.48xlarge in usw2-az4")
    assert first.splitlines()[1] == "# one of 2 reservations with this window: give each its own group (count 2)"


def test_purchase_segments_in_different_azs_get_one_snippet_each() -> None:
    text = capacity_blocks_command.config_snippet(
        [_segment("cr-0123456789abcdef0", "us-west-2d", "usw2-az4", 2), _segment("cr-0123456789abcdef1", "us-west-2b", "usw2-az1", 2)], {}
    )
    parts = text.split("\n\n")
    assert [yaml.safe_load(p)["capacity"]["reservation_ids"] for p in parts] == [["cr-0123456789abcdef0"], ["cr-0123456789abcdef1"]]
    assert "network.compute_az_id must be usw2-az1" in parts[1]


def test_purchase_dry_run_asks_ec2_and_buys_nothing(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    """EC2 answers an allowed dry run with the error DryRunOperation (botocore's DryRun documentation)."""
    ec2.add_client_error(
        "purchase_capacity_block",
        service_error_code="DryRunOperation",
        service_message="Request would have succeeded, but DryRun flag is set.",
        http_status_code=412,
        expected_params={"CapacityBlockOfferingId": "cb-0aaaaaaaaaaaaaaaa", "InstancePlatform": "Linux/UNIX", "DryRun": True},
    )
    assert main(["capacity-blocks", "purchase", "cb-0aaaaaaaaaaaaaaaa", "--region", "us-west-2", "--dry-run"]) == 0
    ec2.assert_no_pending_responses()
    assert capsys.readouterr().out.strip() == (
        "dry run: PurchaseCapacityBlock cb-0aaaaaaaaaaaaaaaa would be allowed "
        "(Request would have succeeded, but DryRun flag is set.); nothing was bought"
    )


def test_purchase_dry_run_denied_exits_1(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    ec2.add_client_error(
        "purchase_capacity_block", service_error_code="UnauthorizedOperation", service_message="not allowed", http_status_code=403
    )
    assert main(["capacity-blocks", "purchase", "cb-0aaaaaaaaaaaaaaaa", "--region", "us-west-2", "--dry-run"]) == 1
    assert "would be denied (not allowed); nothing was bought" in capsys.readouterr().out


def test_purchase_tags_the_reservations(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    ec2.add_response(
        "purchase_capacity_block",
        {"CapacityReservation": PURCHASED},
        {
            "CapacityBlockOfferingId": "cb-0aaaaaaaaaaaaaaaa",
            "InstancePlatform": "Linux/UNIX",
            "TagSpecifications": [
                {"ResourceType": "capacity-reservation", "Tags": [{"Key": "team", "Value": "ml"}, {"Key": "env", "Value": "prod"}]}
            ],
        },
    )
    ec2.add_response("describe_availability_zones", ZONES, {})
    argv = [
        "capacity-blocks",
        "purchase",
        "cb-0aaaaaaaaaaaaaaaa",
        "--region",
        "us-west-2",
        "--yes",
        "--tag",
        "team=ml",
        "--tag",
        "env=prod",
    ]
    assert main(argv) == 0
    ec2.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["purchase", "cb-0aaaaaaaaaaaaaaaa", "--region", "us-west-2", "--yes", "--tag", "aws:x=1"],
            "--tag must be KEY=VALUE (key 1-128 characters, not starting with aws:, value up to 256), got 'aws:x=1'",
        ),
        (
            ["find", "--region", "us-east-1", "--instance-type", "p6e-gb200.36xlarge", "--count", "18", "--duration-days", "7"],
            "--instance-type: p6e-gb200.36xlarge Capacity Blocks are sold as UltraServers; search with --ultraserver-type "
            "u-p6e-gb200x36 or u-p6e-gb200x72 (fminfra lists GB200 UltraServer offerings (find --ultraserver-type) but does not "
            "deploy onto them: they are in a Local Zone, not an AZ ID, and the GB200 network layout is unverified)",
        ),
        (
            ["find", "--region", "us-east-1", "--ultraserver-type", "u-trn2x64", "--count", "1", "--duration-days", "7"],
            "--ultraserver-type: fminfra supports u-p6e-gb200x36, u-p6e-gb200x72 (GB200), got 'u-trn2x64'",
        ),
        (
            ["find", "--region", "us-east-1", "--count", "1", "--duration-days", "7"],
            "capacity-blocks find: give --instance-type or --ultraserver-type (one of them)",
        ),
    ],
)
def test_capacity_blocks_rejects_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity-blocks", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]


def test_find_gb200_ultraservers_by_ultraserver_type(ec2: Stubber, capsys: pytest.CaptureFixture[str]) -> None:
    ec2.add_response("describe_availability_zones", ZONES, {})
    offering = {
        **_offering(
            "cb-0dddddddddddddddd",
            "us-east-1-dfw-2a",
            datetime(2027, 1, 10, 11, 30, tzinfo=UTC),
            datetime(2027, 1, 17, 11, 30, tzinfo=UTC),
            "1",
        ),
        "InstanceType": "p6e-gb200.36xlarge",
        "InstanceCount": 18,
        "UltraserverType": "u-p6e-gb200x72",
        "UltraserverCount": 1,
        "ZoneType": "local-zone",
    }
    ec2.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [offering]},
        # botocore's model: InstanceTypePreferences or the legacy InstanceType is required (UltraServer search too)
        {
            "UltraserverType": "u-p6e-gb200x72",
            "UltraserverCount": 1,
            "InstanceTypePreferences": [{"InstanceType": "p6e-gb200.36xlarge"}],
            "CapacityDurationHours": 168,
        },
    )
    argv = [
        "capacity-blocks",
        "find",
        "--region",
        "us-west-2",
        "--ultraserver-type",
        "u-p6e-gb200x72",
        "--count",
        "1",
        "--duration-days",
        "7",
    ]
    assert main(argv) == 0
    ec2.assert_no_pending_responses()
    out = capsys.readouterr().out.splitlines()
    assert "p6e-gb200.36xlarge (1 x u-p6e-gb200x72)" in out[2] and "us-east-1-dfw-2a (local-zone)" in out[2]
    assert out[-2].startswith("note: fminfra lists GB200 UltraServer offerings")
