"""Preflight against moto (AZs, offerings, STS, subnets) and botocore Stubber (reservations,
training plans, quotas: moto 5.2 lacks them) with responses shaped like the real ones."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from botocore.validate import validate_parameters
from moto import mock_aws

from fminfra.cli.main import main
from fminfra.config import EnvironmentConfig, parse_config
from fminfra.ops import preflight
from fminfra.ops.preflight import STATUS_OF, Clients, Row, run_preflight
from tests.conftest import ROOT

NOW = datetime(2027, 1, 12, 8, 0, tzinfo=UTC)
ACCOUNT = "123456789012"  # moto's account
RID = "cr-0123456789abcdef0"
BASE: dict[str, Any] = {
    "name": "pf",
    "account": ACCOUNT,
    "region": "us-west-2",
    "network": {"cidr": "10.9.0.0/16", "az_ids": ["usw2-az1", "usw2-az4"], "compute_az_id": "usw2-az4"},
    "compute": {
        "orchestrator": "ec2",
        "instance_groups": [
            {"name": "block", "instance_type": "p5.48xlarge", "count": 2, "capacity": {"type": "capacity-block", "reservation_ids": [RID]}}
        ],
    },
}


def _cfg(**compute_group: Any) -> EnvironmentConfig:
    data = copy.deepcopy(BASE)
    data["compute"]["instance_groups"][0].update(compute_group)
    return parse_config(data, "pf.yaml")


def _reservation(**changes: Any) -> dict[str, Any]:
    """A DescribeCapacityReservations item for an active p5 Capacity Block in usw2-az4."""
    item = {
        "CapacityReservationId": RID,
        "OwnerId": ACCOUNT,
        "CapacityReservationArn": f"arn:aws:ec2:us-west-2:{ACCOUNT}:capacity-reservation/{RID}",
        "AvailabilityZoneId": "usw2-az4",
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2d",
        "Tenancy": "default",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": "active",
        "StartDate": datetime(2027, 1, 10, 11, 30, tzinfo=UTC),
        "EndDate": datetime(2027, 1, 17, 11, 30, tzinfo=UTC),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": datetime(2027, 1, 3, 9, 12, tzinfo=UTC),
        "Tags": [],
        "ReservationType": "capacity-block",
        "CapacityBlockId": "cb-0123456789abcdef0",
    }
    item.update(changes)
    return item


class _Ec2:
    """moto's EC2, except DescribeCapacityReservations: by id a Stubber answers; by filter (the
    region's reservations, for the vCPU quota) `listed` does, after botocore validates the request
    against EC2's model, paged as EC2 pages (NextToken)."""

    def __init__(self, moto_client: Any, stubbed: Any) -> None:
        self.moto, self.stubbed = moto_client, stubbed
        self.listed: list[dict[str, Any]] = []
        self.list_requests: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stubbed if name == "describe_capacity_reservations" else self.moto, name)

    def describe_capacity_reservations(self, **params: Any) -> dict[str, Any]:
        if "CapacityReservationIds" in params:
            return dict(self.stubbed.describe_capacity_reservations(**params))
        model = self.stubbed.meta.service_model.operation_model("DescribeCapacityReservations")
        validate_parameters(params, model.input_shape)
        self.list_requests.append(params)
        start = int(params.get("NextToken", "0"))
        page: dict[str, Any] = {"CapacityReservations": self.listed[start : start + 1]}
        if start + 1 < len(self.listed):
            page["NextToken"] = str(start + 1)
        return page


class Aws:
    def __init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name="us-west-2")
        self.ec2_stubbed = boto3.client("ec2", region_name="us-west-2")
        self.sq = boto3.client("service-quotas", region_name="us-west-2")
        self.sm = boto3.client("sagemaker", region_name="us-west-2")
        self.stubs = {"ec2": Stubber(self.ec2_stubbed), "sq": Stubber(self.sq), "sm": Stubber(self.sm)}
        for stub in self.stubs.values():
            stub.activate()
        self.clients = Clients(
            ec2=_Ec2(self.ec2, self.ec2_stubbed),
            service_quotas=self.sq,
            sagemaker=self.sm,
            sts=boto3.client("sts", region_name="us-west-2"),
        )

    def reservation(self, *items: dict[str, Any], rid: str = RID) -> None:
        self.stubs["ec2"].add_response(
            "describe_capacity_reservations", {"CapacityReservations": list(items)}, {"CapacityReservationIds": [rid]}
        )

    def ec2_quota(self, code: str, value: float) -> None:
        self.stubs["sq"].add_response(
            "get_service_quota",
            {
                "Quota": {
                    "ServiceCode": "ec2",
                    "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                    "QuotaArn": f"arn:aws:servicequotas:us-west-2:{ACCOUNT}:ec2/{code}",
                    "QuotaCode": code,
                    "QuotaName": "Running On-Demand P instances",
                    "Value": value,
                    "Unit": "None",
                    "Adjustable": True,
                    "GlobalQuota": False,
                }
            },
            {"ServiceCode": "ec2", "QuotaCode": code},
        )

    def eni_quota(self, value: float) -> None:
        """GetServiceQuota for "Network interfaces per Region" (service vpc, L-DF5E4CA3)."""
        self.stubs["sq"].add_response(
            "get_service_quota",
            {
                "Quota": {
                    "ServiceCode": "vpc",
                    "ServiceName": "Amazon Virtual Private Cloud (Amazon VPC)",
                    "QuotaArn": f"arn:aws:servicequotas:us-west-2:{ACCOUNT}:vpc/L-DF5E4CA3",
                    "QuotaCode": "L-DF5E4CA3",
                    "QuotaName": "Network interfaces per Region",
                    "Value": value,
                    "Unit": "None",
                    "Adjustable": True,
                    "GlobalQuota": False,
                }
            },
            {"ServiceCode": "vpc", "QuotaCode": "L-DF5E4CA3"},
        )

    def run(self, cfg: EnvironmentConfig, eni_quota: float | None = 5000.0) -> list[Row]:
        """Every check; the network-interface quota (the last quota call) answers ENI_QUOTA unless
        a test queued its own (eni_quota=None)."""
        if eni_quota is not None:
            self.eni_quota(eni_quota)
        rows = run_preflight(cfg, self.clients, now=NOW)
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()
        return rows


@pytest.fixture(scope="module")
def moto_aws() -> Iterator[None]:
    """One moto backend for the module (starting one costs seconds); tests leave it as found."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-west-2",
        }.items():
            mp.setenv(key, value)
        with mock_aws():
            yield


@pytest.fixture
def aws(moto_aws: None) -> Aws:
    return Aws()


def _rows(rows: list[Row], status: str) -> list[tuple[str, str, str]]:
    return [(r.path, r.check, r.message) for r in rows if STATUS_OF[r.level] == status]


# ------------------------------------------------------------------------------------------


def test_reservation_in_another_az_fails_naming_it_and_both_azs(aws: Aws) -> None:
    aws.reservation(_reservation(AvailabilityZoneId="usw2-az1", AvailabilityZone="us-west-2b"))
    rows = aws.run(_cfg())
    assert _rows(rows, "FAIL") == [
        (
            f"reservation {RID}",
            "matches the group",
            f"{RID} is in usw2-az1 (us-west-2b), but compute_az_id is usw2-az4 (us-west-2d); instances cannot use it from the compute subnet",
        )
    ]


def test_a_good_capacity_block_passes_with_its_end_shown(aws: Aws) -> None:
    aws.reservation(_reservation())
    rows = aws.run(_cfg())
    assert _rows(rows, "FAIL") == []
    passed = _rows(rows, "PASS")
    assert (f"reservation {RID}", "covers now or starts soon", "active, ends 2027-01-17T11:30:00Z (in 5.1 days)") in passed
    assert ("group block", "reserved count", "its reservations hold 2 instances for 2") in passed
    assert ("AZ usw2-az4 (compute AZ)", "AZ ID maps to a zone", "usw2-az4 is us-west-2d in this account") in passed
    assert ("p5.48xlarge", "offered in usw2-az4", "p5.48xlarge is offered in usw2-az4") in passed
    assert (f"account {ACCOUNT}", "credentials", "credentials are for the config's account") in passed
    # The block is left out of the On-Demand vCPU sum, and says so.
    assert _rows(rows, "WARN") == [("group block", "EC2 vCPU quota", "Capacity Block group left out of the On-Demand vCPU sum")]


def test_reservation_mismatches_each_fail(aws: Aws) -> None:
    aws.reservation(
        _reservation(
            InstanceType="p5en.48xlarge", InstancePlatform="Windows", Tenancy="dedicated", ReservationType="default", TotalInstanceCount=1
        )
    )
    fails = [reason for _, _, reason in _rows(aws.run(_cfg()), "FAIL")]
    assert fails == [
        f"{RID} is for p5en.48xlarge, group block runs p5.48xlarge",
        f"{RID} is for platform 'Windows'; the nodes run Linux/UNIX",
        f"{RID} has tenancy dedicated; the nodes use default tenancy",
        f"{RID} is not a Capacity Block; use capacity type reservation",
        "its reservations hold 1 instances; the group needs 2",
    ]


def test_a_capacity_block_under_type_reservation_fails(aws: Aws) -> None:
    aws.reservation(_reservation())
    aws.ec2_quota("L-417A185B", 384)
    rows = aws.run(_cfg(capacity={"type": "reservation", "reservation_ids": [RID]}, placement="none"))
    assert [r for _, _, r in _rows(rows, "FAIL")] == [
        f"{RID} is a Capacity Block; use capacity type capacity-block (launches need market type capacity-block)"
    ]


def _odcr(**changes: Any) -> dict[str, Any]:
    """A DescribeCapacityReservations item for an active p5 On-Demand Capacity Reservation (no block fields)."""
    item = _reservation(ReservationType="default", InstanceMatchCriteria="open", EndDateType="unlimited", **changes)
    for key in ("CapacityBlockId", "EndDate"):
        item.pop(key, None)
    return item


@pytest.mark.parametrize("placement", [None, "none"])
def test_a_reservation_in_another_placement_group_fails(aws: Aws, placement: str | None) -> None:
    # Launches into a new placement group (placement cluster, the default) or none do not use a
    # reservation created in a placement group (docs/facts/capacity.md#odcr-placement-group-match).
    pg = f"arn:aws:ec2:us-west-2:{ACCOUNT}:placement-group/their-pg"
    aws.reservation(_odcr(PlacementGroupArn=pg))
    aws.ec2_quota("L-417A185B", 384)
    group: dict[str, Any] = {"capacity": {"type": "reservation", "reservation_ids": [RID]}}
    if placement:
        group["placement"] = placement
    rows = aws.run(_cfg(**group))
    where = "a new cluster placement group fminfra creates" if placement is None else "no placement group"
    assert _rows(rows, "FAIL") == [
        (
            f"reservation {RID}",
            "matches the group",
            f"{RID} was created in placement group their-pg, and only launches into that group use it; the group launches into "
            f"{where}: use a reservation created without a placement group",
        )
    ]


def test_a_reservation_without_a_placement_group_matches_a_cluster_group(aws: Aws) -> None:
    aws.reservation(_odcr())
    aws.ec2_quota("L-417A185B", 384)
    rows = aws.run(_cfg(capacity={"type": "reservation", "reservation_ids": [RID]}))
    assert _rows(rows, "FAIL") == []


def test_vcpu_quota_counts_unused_reservations_outside_this_environment(aws: Aws) -> None:
    """Unused ODCRs count toward the On-Demand quota (docs/facts/capacity.md#odcr-counts-toward-on-demand-quota):
    a foreign active p5 reservation with one free slot and a scheduled one of one instance hold 384 vCPUs.
    Left out: the reservation the group names, one this environment created, Capacity Blocks."""
    ec2 = aws.clients.ec2
    ec2.listed = [
        _odcr(CapacityReservationId="cr-0f0000000000000a1", TotalInstanceCount=4, AvailableInstanceCount=1),
        _odcr(CapacityReservationId="cr-0f0000000000000a2", State="scheduled", TotalInstanceCount=1, AvailableInstanceCount=0),
        _odcr(CapacityReservationId=RID, AvailableInstanceCount=2),
        _odcr(CapacityReservationId="cr-0f0000000000000a3", Tags=[{"Key": "fminfra:environment", "Value": "pf"}]),
        _reservation(CapacityReservationId="cr-0f0000000000000a4"),
        _odcr(CapacityReservationId="cr-0f0000000000000a5", InstanceType="m5.large"),
    ]
    aws.reservation(_odcr(AvailableInstanceCount=2))
    aws.ec2_quota("L-417A185B", 600)
    rows = aws.run(_cfg(capacity={"type": "reservation", "reservation_ids": [RID]}, placement="none"))
    quota = [(STATUS_OF[r.level], r.message) for r in rows if r.check == "EC2 vCPU quota"]
    assert quota == [
        (
            "FAIL",
            "block need 384 vCPUs; 384 vCPUs are held by unused reservations outside this environment; the quota (L-417A185B) is 600: "
            "request an increase in Service Quotas",
        )
    ]
    # Every page was read, with the states that count (a request EC2's model accepts).
    assert len(ec2.list_requests) == len(ec2.listed)
    assert ec2.list_requests[0]["Filters"] == [{"Name": "state", "Values": ["assessing", "scheduled", "pending", "active", "delayed"]}]


def test_a_reservation_group_mixing_odcrs_and_capacity_blocks_fails_naming_them(aws: Aws) -> None:
    # A capacity reservation resource group may hold both kinds, but
    # fminfra's launches of a group use one market type (docs/facts/capacity.md#capacity-reservation-group-one-type).
    odcr, block = "cr-0aaaaaaaaaaaaaaa1", "cr-0bbbbbbbbbbbbbbb1"
    aws.reservation(_reservation(CapacityReservationId=odcr, ReservationType="default", TotalInstanceCount=1), rid=odcr)
    aws.reservation(_reservation(CapacityReservationId=block, TotalInstanceCount=1), rid=block)
    aws.ec2_quota("L-417A185B", 384)
    rows = aws.run(_cfg(capacity={"type": "reservation", "reservation_ids": [odcr, block]}, placement="none"))
    assert (
        "group block",
        "one reservation type",
        f"its reservations mix On-Demand Capacity Reservations ({odcr}) and Capacity Blocks ({block}); "
        "fminfra launches a group with one market type (capacity-block or none), so it uses only one kind: give each kind its own group",
    ) in _rows(rows, "FAIL")


def test_a_reservation_group_of_one_type_passes(aws: Aws) -> None:
    first, second = "cr-0bbbbbbbbbbbbbbb1", "cr-0bbbbbbbbbbbbbbb2"
    odcr = {"TotalInstanceCount": 1, "ReservationType": "default", "CapacityBlockId": None}
    for rid in (first, second):
        aws.reservation({k: v for k, v in _reservation(CapacityReservationId=rid, **odcr).items() if v is not None}, rid=rid)
    aws.ec2_quota("L-417A185B", 384)
    rows = aws.run(_cfg(capacity={"type": "reservation", "reservation_ids": [first, second]}, placement="none"))
    assert _rows(rows, "FAIL") == []
    assert ("group block", "one reservation type", "its 2 reservations are all On-Demand Capacity Reservations") in _rows(rows, "PASS")


def test_missing_reservation_fails(aws: Aws) -> None:
    aws.stubs["ec2"].add_client_error(
        "describe_capacity_reservations",
        service_error_code="InvalidCapacityReservationId.NotFound",
        service_message=f"The capacity reservation ID '{RID}' does not exist",
        expected_params={"CapacityReservationIds": [RID]},
    )
    assert _rows(aws.run(_cfg()), "FAIL") == [
        (f"reservation {RID}", "exists", f"{RID} does not exist in us-west-2 for this account (InvalidCapacityReservationId.NotFound)")
    ]


@pytest.mark.parametrize(
    ("changes", "status", "reason"),
    [
        (
            {"State": "expired", "StartDate": NOW - timedelta(days=8), "EndDate": NOW - timedelta(days=1)},
            "FAIL",
            "state expired, ends 2027-01-11T08:00:00Z (1.0 days ago): nothing can launch into it",
        ),
        (
            {"State": "scheduled", "StartDate": NOW + timedelta(days=3), "EndDate": NOW + timedelta(days=10)},
            "PASS",
            "scheduled: starts 2027-01-15T08:00:00Z (in 3.0 days), ends 2027-01-22T08:00:00Z (in 10.0 days)",
        ),
        (
            {"State": "scheduled", "StartDate": NOW + timedelta(days=30), "EndDate": NOW + timedelta(days=37)},
            "WARN",
            "scheduled: starts 2027-02-11T08:00:00Z (in 30.0 days), ends 2027-02-18T08:00:00Z (in 37.0 days)",
        ),
        ({"State": "payment-pending"}, "WARN", "state payment-pending, ends 2027-01-17T11:30:00Z (in 5.1 days)"),
    ],
    ids=["expired", "soon", "later", "payment-pending"],
)
def test_capacity_block_timing(aws: Aws, changes: dict[str, Any], status: str, reason: str) -> None:
    aws.reservation(_reservation(**changes))
    rows = [r for r in aws.run(_cfg()) if r.check == "covers now or starts soon"]
    assert [(STATUS_OF[r.level], r.message) for r in rows] == [(status, reason)]


BLOCK1 = {"type": "capacity-block", "reservation_ids": [RID], "starts_at": "2027-01-10T11:30:00Z", "ends_at": "2027-01-17T11:30:00Z"}
RID2 = "cr-0fedcba9876543210"
BLOCK2 = {"type": "capacity-block", "reservation_ids": [RID2], "starts_at": "2027-01-24T11:30:00Z", "ends_at": "2027-01-31T11:30:00Z"}
BLOCK2_RESERVATION = {
    "CapacityReservationId": RID2,
    "State": "scheduled",
    "StartDate": datetime(2027, 1, 24, 11, 30, tzinfo=UTC),
    "EndDate": datetime(2027, 1, 31, 11, 30, tzinfo=UTC),
}


def _schedule_rows(rows: list[Row]) -> list[tuple[str, str]]:
    return [(STATUS_OF[r.level], r.message) for r in rows if r.check == "block schedule on deploy"]


class _DeployedGroup:
    """This environment's `block` group as deployed with a window: moto's Auto Scaling holds the
    group and its one-time actions; `ran` removes an action the way Auto Scaling drops one that
    has run (docs/facts/capacity.md#asg-scheduled-action-past-and-run)."""

    NAME = "fminfra-pf-block"

    def __init__(self, max_size: int, block_start: str, block_end: str) -> None:
        self.client = boto3.client("autoscaling", region_name="us-west-2")
        ec2 = boto3.client("ec2", region_name="us-west-2")
        if not ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [self.NAME]}])["LaunchTemplates"]:
            ec2.create_launch_template(
                LaunchTemplateName=self.NAME, LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"}
            )
        self.client.create_auto_scaling_group(
            AutoScalingGroupName=self.NAME,
            LaunchTemplate={"LaunchTemplateName": self.NAME},
            MinSize=0,
            MaxSize=max_size,
            DesiredCapacity=0,
            AvailabilityZones=["us-west-2d"],
        )
        for name, when, size in (("BlockStart", block_start, max_size), ("BlockEnd", block_end, 0)):
            self.client.put_scheduled_update_group_action(
                AutoScalingGroupName=self.NAME,
                ScheduledActionName=name,
                StartTime=datetime.fromisoformat(when),
                MinSize=size if size else 0,
                MaxSize=max_size,
                DesiredCapacity=size,
            )

    def ran(self, action: str) -> None:
        self.client.delete_scheduled_action(AutoScalingGroupName=self.NAME, ScheduledActionName=action)

    def remove(self) -> None:
        self.client.delete_auto_scaling_group(AutoScalingGroupName=self.NAME, ForceDelete=True)


@pytest.fixture
def deployed(aws: Aws) -> Iterator[list[_DeployedGroup]]:
    aws.clients = Clients(**{**aws.clients.__dict__, "autoscaling": boto3.client("autoscaling", region_name="us-west-2")})
    groups: list[_DeployedGroup] = []
    yield groups
    for group in groups:
        group.remove()


def test_a_first_deploy_after_the_block_started_fails_and_a_wrong_window_too(aws: Aws, deployed: list[_DeployedGroup]) -> None:
    aws.reservation(_reservation())
    cap = {**BLOCK1, "ends_at": "2027-01-18T11:30:00Z"}
    fails = _rows(aws.run(_cfg(capacity=cap)), "FAIL")
    assert fails[0] == (
        f"reservation {RID}",
        "window matches the config",
        "the block runs 2027-01-10T11:30:00Z to 2027-01-17T11:30:00Z; the config says 2027-01-10T11:30:00Z to 2027-01-18T11:30:00Z",
    )
    assert fails[1][:2] == ("group block", "block schedule on deploy")
    assert fails[1][2].startswith("starts_at 2027-01-10T11:30:00Z has passed and the group is not deployed")


def test_a_redeploy_inside_a_running_block_passes(aws: Aws, deployed: list[_DeployedGroup]) -> None:
    """A running block is a normal state to deploy in: its BlockStart has run, its BlockEnd is
    pending, and a deploy that leaves both as they are makes no call for them."""
    deployed.append(_DeployedGroup(2, "2027-01-10T11:30:00+00:00", "2027-01-17T10:50:00+00:00"))
    deployed[0].ran("BlockStart")
    aws.reservation(_reservation())
    rows = aws.run(_cfg(capacity=BLOCK1))
    assert _schedule_rows(rows) == [
        (
            "PASS",
            "the block runs (BlockStart at 2027-01-10T11:30:00Z has run, BlockEnd at 2027-01-17T10:50:00Z is pending): "
            "a deploy leaves both and the group's size as they are",
        )
    ]
    assert not _rows(rows, "FAIL")


def test_a_count_change_inside_a_running_block_fails(aws: Aws, deployed: list[_DeployedGroup]) -> None:
    deployed.append(_DeployedGroup(2, "2027-01-10T11:30:00+00:00", "2027-01-17T10:50:00+00:00"))
    deployed[0].ran("BlockStart")
    aws.reservation(_reservation(TotalInstanceCount=3))
    ((status, reason),) = _schedule_rows(aws.run(_cfg(count=3, capacity=BLOCK1)))
    assert status == "FAIL" and reason.startswith("count changes from 2 to 3 while the block runs")


def test_an_extended_block_moves_only_its_scale_in(aws: Aws, deployed: list[_DeployedGroup]) -> None:
    """A running block extended by a week (PurchaseCapacityBlockExtension, docs/facts/capacity.md#capacity-block-extension):
    the reservation ends later; with ends_at moved the deploy puts BlockEnd again, at a time still ahead,
    and leaves BlockStart, which has run, as it is."""
    deployed.append(_DeployedGroup(2, "2027-01-10T11:30:00+00:00", "2027-01-17T10:50:00+00:00"))
    deployed[0].ran("BlockStart")
    extended = _reservation(EndDate=datetime(2027, 1, 24, 11, 30, tzinfo=UTC))
    aws.reservation(extended)
    rows = aws.run(_cfg(capacity={**BLOCK1, "ends_at": "2027-01-24T11:30:00Z"}))
    assert _schedule_rows(rows) == [
        (
            "PASS",
            "the block ends later than deployed (extended): the deploy moves BlockEnd from 2027-01-17T10:50:00Z to "
            "2027-01-24T10:50:00Z and leaves BlockStart (2027-01-10T11:30:00Z, has run) and the group's size as they are",
        )
    ]
    assert not _rows(rows, "FAIL")
    # Before ends_at is moved, the window check says what to do.
    aws.reservation(extended)
    (fail,) = [r for r in _rows(aws.run(_cfg(capacity=BLOCK1)), "FAIL") if r[1] == "window matches the config"]
    assert fail[2].endswith("(the block was extended: set ends_at to 2027-01-24T11:30:00Z)")


def test_block_1_then_block_2(aws: Aws, deployed: list[_DeployedGroup]) -> None:
    """The sequence a team runs: block 2's window while block 1's scale-in is pending fails (the
    deploy would move it and block 1 would never drain); once it has run, block 2's window puts
    both actions again; inside block 2, a redeploy passes."""
    deployed.append(_DeployedGroup(2, "2027-01-10T11:30:00+00:00", "2027-01-17T10:50:00+00:00"))
    deployed[0].ran("BlockStart")
    aws.stubs["ec2"].add_response(
        "describe_capacity_reservations", {"CapacityReservations": [_reservation(**BLOCK2_RESERVATION)]}, {"CapacityReservationIds": [RID2]}
    )
    ((status, reason),) = _schedule_rows(aws.run(_cfg(capacity=BLOCK2)))
    assert status == "FAIL" and "scale-in at 2027-01-17T10:50:00Z has not run" in reason
    deployed[0].ran("BlockEnd")
    aws.stubs["ec2"].add_response(
        "describe_capacity_reservations", {"CapacityReservations": [_reservation(**BLOCK2_RESERVATION)]}, {"CapacityReservationIds": [RID2]}
    )
    assert _schedule_rows(run_with(aws, _cfg(capacity=BLOCK2), NOW + timedelta(days=6))) == [
        ("PASS", "the deploy puts BlockStart at 2027-01-24T11:30:00Z and BlockEnd at 2027-01-31T10:50:00Z")
    ]
    # Block 2 deployed and started: its BlockStart has run.
    deployed[0].remove()
    deployed[0] = _DeployedGroup(2, "2027-01-24T11:30:00+00:00", "2027-01-31T10:50:00+00:00")
    deployed[0].ran("BlockStart")
    aws.stubs["ec2"].add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [_reservation(**{**BLOCK2_RESERVATION, "State": "active"})]},
        {"CapacityReservationIds": [RID2]},
    )
    ((status, _),) = _schedule_rows(run_with(aws, _cfg(capacity=BLOCK2), datetime(2027, 1, 25, 8, 0, tzinfo=UTC)))
    assert status == "PASS"


def run_with(aws: Aws, cfg: EnvironmentConfig, now: datetime) -> list[Row]:
    aws.eni_quota(5000.0)
    rows = run_preflight(cfg, aws.clients, now=now)
    for stub in aws.stubs.values():
        stub.assert_no_pending_responses()
    return rows


def test_denied_call_is_a_failed_row(aws: Aws) -> None:
    aws.stubs["ec2"].add_client_error(
        "describe_capacity_reservations",
        service_error_code="UnauthorizedOperation",
        service_message="You are not authorized to perform this operation.",
        http_status_code=403,
    )
    fails = _rows(aws.run(_cfg()), "FAIL")
    assert fails == [
        (
            "reservations",
            "AWS call",
            "DescribeCapacityReservations failed: UnauthorizedOperation: You are not authorized to perform this operation.",
        )
    ]


# ------------------------------------------------------------------------------------------
# moto alone: account, AZ IDs, offerings, subnets, and EC2 quotas through the Stubber


def test_type_not_offered_in_the_compute_az_fails_with_where_it_is(aws: Aws) -> None:
    data = copy.deepcopy(BASE)
    data["network"]["compute_az_id"] = "usw2-az1"
    data["compute"]["instance_groups"][0] = {"name": "w", "instance_type": "p5en.48xlarge", "count": 1, "placement": "none"}
    aws.ec2_quota("L-417A185B", 192)
    rows = aws.run(parse_config(data, "pf.yaml"))
    assert _rows(rows, "FAIL") == [
        ("p5en.48xlarge", "offered in usw2-az1", "p5en.48xlarge is not offered in usw2-az1 (offered in: usw2-az2, usw2-az3, usw2-az4)")
    ]


class _HiddenZone(_Ec2):
    """An account that does not see usw2-az3: AWS may remove a constrained zone from the list of
    newer accounts (docs/facts/network.md#az-ids-by-region), so an AZ ID that validate accepts
    offline can still be missing here."""

    def describe_availability_zones(self, **kwargs: Any) -> dict[str, Any]:
        answer = self.moto.describe_availability_zones(**kwargs)
        answer["AvailabilityZones"] = [z for z in answer["AvailabilityZones"] if z["ZoneId"] != "usw2-az3"]
        return answer


def test_unknown_az_id_and_foreign_account_fail(aws: Aws) -> None:
    data = copy.deepcopy(BASE)
    data["account"] = "111111111111"
    data["network"]["az_ids"] = ["usw2-az4", "usw2-az3"]
    data["compute"]["instance_groups"][0] = {"name": "w", "instance_type": "p5.48xlarge", "count": 1}
    aws.clients = Clients(ec2=_HiddenZone(aws.ec2, aws.ec2_stubbed), service_quotas=aws.sq, sagemaker=aws.sm, sts=aws.clients.sts)
    aws.ec2_quota("L-417A185B", 192)
    fails = _rows(aws.run(parse_config(data, "pf.yaml")), "FAIL")
    assert fails == [
        (f"account {ACCOUNT}", "credentials", f"credentials are for account {ACCOUNT}, the config is for 111111111111"),
        (
            "AZ usw2-az3",
            "AZ ID maps to a zone",
            "usw2-az3 is not a zone of us-west-2 in this account (have: usw2-az1, usw2-az2, usw2-az4)",
        ),
    ]


@pytest.mark.parametrize(("count", "status"), [(2, "PASS"), (3, "FAIL")])
def test_ec2_vcpu_quota_per_family(aws: Aws, count: int, status: str) -> None:
    aws.ec2_quota("L-417A185B", 384)
    rows = aws.run(_cfg(count=count, capacity={"type": "on-demand"}))
    quota = [r for r in rows if r.check == "EC2 vCPU quota"]
    need = 192 * count
    tail = "" if status == "PASS" else ": request an increase in Service Quotas"
    assert [(STATUS_OF[r.level], r.message) for r in quota] == [(status, f"block need {need} vCPUs; the quota (L-417A185B) is 384{tail}")]


def _compute_subnet(aws: Aws) -> tuple[str, str]:
    """The compute subnet as the Network stack names it, as a /28 (11 free addresses)."""
    vpc = aws.ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = aws.ec2.create_subnet(
        VpcId=vpc,
        CidrBlock="10.9.0.0/28",
        AvailabilityZone="us-west-2d",
        TagSpecifications=[{"ResourceType": "subnet", "Tags": [{"Key": "Name", "Value": "fminfra-pf-private-usw2-az4"}]}],
    )["Subnet"]["SubnetId"]
    return vpc, subnet


def test_subnet_free_addresses(aws: Aws) -> None:
    aws.ec2_quota("L-417A185B", 10000)
    cfg = _cfg(count=2, capacity={"type": "on-demand"})
    planned = [r for r in aws.run(cfg) if r.check == "free IP addresses"]
    assert [(STATUS_OF[r.level], r.message) for r in planned] == [
        ("PASS", "the nodes need up to 2 addresses; not deployed yet; the planned 10.9.0.0/18 will have 16379")
    ]
    vpc, subnet = _compute_subnet(aws)
    aws.ec2_quota("L-417A185B", 10000)
    try:
        deployed = [r for r in aws.run(_cfg(count=20, capacity={"type": "on-demand"})) if r.check == "free IP addresses"]
    finally:
        aws.ec2.delete_subnet(SubnetId=subnet)
        aws.ec2.delete_vpc(VpcId=vpc)
    assert [STATUS_OF[r.level] for r in deployed] == ["FAIL"]
    assert deployed[0].message.startswith("the nodes need up to 20 addresses; subnet-") and deployed[0].message.endswith(
        "has 11 free addresses"
    )


# ------------------------------------------------------------------------------------------
# HyperPod: training plans and SageMaker cluster quotas


def _hyperpod(**group: Any) -> EnvironmentConfig:
    data = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
    data.update(account=ACCOUNT, region="us-west-2")
    data["network"].update(az_ids=["usw2-az1", "usw2-az4"], compute_az_id="usw2-az4")
    data["compute"]["instance_groups"][0]["capacity"]["training_plan_arn"] = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:training-plan/p5en"
    data["compute"]["instance_groups"][0].update(group)
    return parse_config(data, "prod.yaml")


def _plan(**changes: Any) -> dict[str, Any]:
    plan = {
        "TrainingPlanArn": f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:training-plan/p5en",
        "TrainingPlanName": "p5en",
        "Status": "Active",
        "DurationHours": 336,
        "DurationMinutes": 0,
        "StartTime": NOW - timedelta(days=2),
        "EndTime": NOW + timedelta(days=12),
        "UpfrontFee": "1234567.00",
        "CurrencyCode": "USD",
        "TotalInstanceCount": 16,
        "AvailableInstanceCount": 16,
        "InUseInstanceCount": 0,
        "TargetResources": ["hyperpod-cluster"],
        "ReservedCapacitySummaries": [
            {
                "ReservedCapacityArn": f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:reserved-capacity/rc-1",
                "InstanceType": "ml.p5en.48xlarge",
                "TotalInstanceCount": 16,
                "Status": "Active",
                "AvailabilityZone": "us-west-2d",
                "AvailabilityZoneId": "usw2-az4",
                "DurationHours": 336,
                "DurationMinutes": 0,
                "StartTime": NOW - timedelta(days=2),
                "EndTime": NOW + timedelta(days=12),
            }
        ],
    }
    plan.update(changes)
    return plan


def _quota_list(values: dict[str, float]) -> dict[str, Any]:
    """A ListServiceQuotas / ListAWSDefaultServiceQuotas page for SageMaker (botocore's ServiceQuota shape)."""
    return {
        "Quotas": [
            {
                "ServiceCode": "sagemaker",
                "ServiceName": "Amazon SageMaker",
                "QuotaArn": f"arn:aws:servicequotas:us-west-2:{ACCOUNT}:sagemaker/L-{i:08X}",
                "QuotaCode": f"L-{i:08X}",
                "QuotaName": name,
                "Value": value,
                "Unit": "None",
                "Adjustable": True,
                "GlobalQuota": False,
            }
            for i, (name, value) in enumerate(values.items())
        ]
    }


def _sagemaker_quotas(
    aws: Aws, values: dict[str, float], clusters: list[dict[str, Any]] | None = None, defaults: dict[str, float] | None = None
) -> None:
    """Applied quotas; AWS's defaults when a test gives them (preflight asks for them only when a
    quota has no applied value); the account's HyperPod clusters (ListClusters)."""
    aws.stubs["sq"].add_response("list_service_quotas", _quota_list(values), {"ServiceCode": "sagemaker"})
    if defaults is not None:
        aws.stubs["sq"].add_response("list_aws_default_service_quotas", _quota_list(defaults), {"ServiceCode": "sagemaker"})
    aws.stubs["sm"].add_response("list_clusters", {"ClusterSummaries": clusters or []}, {})


QUOTAS_OK = {
    "ml.p5en.48xlarge for cluster usage": 16,
    "ml.m5.12xlarge for cluster usage": 1,
    "ml.m5.4xlarge for cluster usage": 4,
    "ml.p5.48xlarge for training job usage": 2,
    "Maximum number instances allowed per SageMaker HyperPod cluster": 100,
    "Total number of instances allowed across SageMaker HyperPod clusters": 100,
}


def test_training_plan_and_sagemaker_quotas_pass(aws: Aws) -> None:
    aws.stubs["sm"].add_response("describe_training_plan", _plan(), {"TrainingPlanName": "p5en"})
    _sagemaker_quotas(aws, QUOTAS_OK)
    rows = aws.run(_hyperpod())
    assert _rows(rows, "FAIL") == [] and _rows(rows, "WARN") == []
    passed = _rows(rows, "PASS")
    assert ("training plan p5en", "matches the group", "ml.p5en.48xlarge, 16 instances, usw2-az4") in passed
    assert ("training plan p5en", "covers now", "active, ends 2027-01-24T08:00:00Z (in 12.0 days)") in passed
    assert ("quota ml.p5en.48xlarge for cluster usage", "SageMaker cluster quota", "needs 16; the quota is 16") in passed
    assert ("quota ml.m5.4xlarge for cluster usage", "SageMaker cluster quota", "needs 2; the quota is 4") in passed


def test_training_plan_mismatches_and_small_quota_fail(aws: Aws) -> None:
    plan = _plan(Status="Expired", TotalInstanceCount=8, TargetResources=["training-job"])
    plan["ReservedCapacitySummaries"][0].update(InstanceType="ml.p5.48xlarge", AvailabilityZoneId="usw2-az1")
    aws.stubs["sm"].add_response("describe_training_plan", plan, {"TrainingPlanName": "p5en"})
    _sagemaker_quotas(aws, {**QUOTAS_OK, "ml.p5en.48xlarge for cluster usage": 4})
    fails = _rows(aws.run(_hyperpod()), "FAIL")
    assert fails == [
        ("training plan p5en", "matches the group", "targets training-job, not hyperpod-cluster"),
        ("training plan p5en", "matches the group", "reserves ml.p5.48xlarge; group workers runs ml.p5en.48xlarge"),
        ("training plan p5en", "matches the group", "holds 8 instances; group workers needs 16"),
        ("training plan p5en", "matches the group", "is in usw2-az1, but compute_az_id is usw2-az4"),
        ("training plan p5en", "covers now", "status Expired, ends 2027-01-24T08:00:00Z (in 12.0 days): HyperPod cannot place nodes on it"),
        (
            "quota ml.p5en.48xlarge for cluster usage",
            "SageMaker cluster quota",
            "needs 16; the quota is 4: request an increase in Service Quotas",
        ),
    ]


def test_missing_training_plan_and_quota_fail(aws: Aws) -> None:
    aws.stubs["sm"].add_client_error(
        "describe_training_plan", service_error_code="ResourceNotFound", service_message="Training plan p5en not found"
    )
    _sagemaker_quotas(aws, {k: v for k, v in QUOTAS_OK.items() if not k.startswith("ml.p5en")}, defaults={})
    fails = _rows(aws.run(_hyperpod()), "FAIL")
    arn = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:training-plan/p5en"
    assert fails == [
        ("training plan p5en", "exists", f"{arn} does not exist in us-west-2 for this account (ResourceNotFound)"),
        (
            "quota ml.p5en.48xlarge for cluster usage",
            "SageMaker cluster quota",
            "no SageMaker quota named 'ml.p5en.48xlarge for cluster usage' in us-west-2: the type is not available to HyperPod here",
        ),
    ]


# ------------------------------------------------------------------------------------------
# the command: exit codes and credentials


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "pf.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_exits_1_on_a_failed_check(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    aws.reservation(_reservation(AvailabilityZoneId="usw2-az1", AvailabilityZone="us-west-2b"))
    aws.eni_quota(5000)
    monkeypatch.setattr(preflight, "clients_for", lambda cfg, profile: aws.clients)
    monkeypatch.setattr(preflight, "datetime", type("D", (), {"now": staticmethod(lambda tz=None: NOW)}))
    assert main(["preflight", str(_write(tmp_path, BASE))]) == 1
    out = capsys.readouterr().out
    assert "FAIL    reservation cr-0123456789abcdef0" in out
    assert out.strip().endswith("1 FAIL")


def test_missing_credentials_exit_2_with_one_line_quickly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)  # the one-second IMDS limit must hold on its own
    started = time.monotonic()
    assert main(["preflight", str(_write(tmp_path, BASE))]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "no AWS credentials found (environment variables, --profile, SSO or an instance role); "
        "this command needs read access to the account in the config"
    ]


def test_unknown_profile_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    assert main(["preflight", str(_write(tmp_path, BASE)), "--profile", "nope"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["--profile nope: no such profile in the AWS config files"]


def test_bad_config_exits_2_before_any_aws_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = copy.deepcopy(BASE)
    data["compute"]["instance_groups"][0]["capacity"]["reservation_ids"] = ["cr-1"]
    path = _write(tmp_path, data)
    assert main(["preflight", str(path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{path}: compute.instance_groups[0].capacity.reservation_ids[0]: must be 'cr-' followed by 17 lowercase hex digits, got 'cr-1'"
    ]


@pytest.mark.parametrize(
    ("end_date", "status", "reason"),
    [
        ("2027-01-01T00:00:00Z", "FAIL", "end_date 2027-01-01T00:00:00Z (11.3 days ago) has passed: EC2 cannot create the reservation"),
        ("2027-06-30T00:00:00Z", "PASS", "the reservation the stack creates ends 2027-06-30T00:00:00Z (in 168.7 days)"),
    ],
)
def test_odcr_end_date_must_lie_ahead(aws: Aws, end_date: str, status: str, reason: str) -> None:
    aws.ec2_quota("L-417A185B", 10000)
    rows = [r for r in aws.run(_cfg(capacity={"type": "odcr", "end_date": end_date})) if r.check == "odcr end_date ahead"]
    assert [(STATUS_OF[r.level], r.message) for r in rows] == [(status, reason)]


# ------------------------------------------------------------------------------------------
# what AWS counts: network interfaces, what already runs, defaults, HyperPod's
# account-level quotas. moto models instances, ENIs, subnets and Auto Scaling groups; quotas and
# SageMaker clusters are Stubber answers in botocore's shapes.


def _own_group(aws: Aws, count: int, subnet: str | None = None) -> None:
    """This environment's deployed `block` group: an Auto Scaling group named as the Compute stack
    names it (fminfra-pf-block); moto launches its instances with the aws:autoscaling:groupName tag."""
    autoscaling = boto3.client("autoscaling", region_name="us-west-2")
    if not aws.ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": ["fminfra-pf-block"]}])["LaunchTemplates"]:
        aws.ec2.create_launch_template(
            LaunchTemplateName="fminfra-pf-block", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"}
        )
    placement = {"VPCZoneIdentifier": subnet} if subnet else {"AvailabilityZones": ["us-west-2d"]}
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="fminfra-pf-block",
        LaunchTemplate={"LaunchTemplateName": "fminfra-pf-block"},
        MinSize=count,
        MaxSize=count,
        DesiredCapacity=count,
        **placement,
    )


def _cleanup(aws: Aws) -> None:
    autoscaling = boto3.client("autoscaling", region_name="us-west-2")
    if autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["fminfra-pf-block"])["AutoScalingGroups"]:
        autoscaling.delete_auto_scaling_group(AutoScalingGroupName="fminfra-pf-block", ForceDelete=True)
    live = aws.ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])["Reservations"]
    ids = [i["InstanceId"] for r in live for i in r["Instances"]]
    if ids:
        aws.ec2.terminate_instances(InstanceIds=ids)


def test_network_interface_quota_counts_every_efa_interface(aws: Aws) -> None:
    """150 p5 nodes take 150 x 33 = 4,950 interfaces (1 ENA + 32 EFA, the catalog's layout); with
    60 interfaces already in the region the default quota of 5,000 is exceeded."""
    vpc = aws.ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = aws.ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.0.0/24", AvailabilityZone="us-west-2a")["Subnet"]["SubnetId"]
    enis = [aws.ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"] for _ in range(60)]
    existing = len(aws.ec2.describe_network_interfaces()["NetworkInterfaces"])
    aws.ec2_quota("L-417A185B", 100000)
    try:
        rows = [r for r in aws.run(_cfg(count=150, capacity={"type": "on-demand"})) if r.check == "network interface quota"]
        aws.ec2_quota("L-417A185B", 100000)
        small = [r for r in aws.run(_cfg(count=100, capacity={"type": "on-demand"})) if r.check == "network interface quota"]
    finally:
        for eni in enis:
            aws.ec2.delete_network_interface(NetworkInterfaceId=eni)
        aws.ec2.delete_subnet(SubnetId=subnet)
        aws.ec2.delete_vpc(VpcId=vpc)
    assert [(STATUS_OF[r.level], r.path, r.message) for r in rows] == [
        (
            "FAIL",
            "quota Network interfaces per Region",
            f"the nodes take up to 4950 (block 150 x 33); {existing} other interfaces exist in us-west-2; "
            "the quota (L-DF5E4CA3) is 5000: request an increase in Service Quotas",
        )
    ]
    assert [STATUS_OF[r.level] for r in small] == ["PASS"]


def test_vcpu_quota_counts_what_already_runs_but_not_this_environment(aws: Aws) -> None:
    """A foreign p5 instance takes 192 of the 384 vCPUs: two more nodes no longer fit. This
    environment's own deployed nodes are not counted again on a re-run."""
    _own_group(aws, 2)
    try:
        aws.ec2_quota("L-417A185B", 384)
        rerun = [r for r in aws.run(_cfg(count=2, capacity={"type": "on-demand"})) if r.check == "EC2 vCPU quota"]
        aws.ec2.run_instances(ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=1, MaxCount=1)
        aws.ec2_quota("L-417A185B", 384)
        crowded = [r for r in aws.run(_cfg(count=2, capacity={"type": "on-demand"})) if r.check == "EC2 vCPU quota"]
    finally:
        _cleanup(aws)
    assert [(STATUS_OF[r.level], r.message) for r in rerun] == [("PASS", "block need 384 vCPUs; the quota (L-417A185B) is 384")]
    assert [(STATUS_OF[r.level], r.message) for r in crowded] == [
        (
            "FAIL",
            "block need 384 vCPUs; 192 vCPUs already run outside this environment; the quota (L-417A185B) is 384: "
            "request an increase in Service Quotas",
        )
    ]


def test_subnet_check_gives_back_the_addresses_this_environment_holds(aws: Aws) -> None:
    """After a deploy the nodes' own addresses are no longer free; a re-run must not count them
    as new demand (a /28 has 11 free addresses; two nodes hold 2 of them)."""
    vpc, subnet = _compute_subnet(aws)
    _own_group(aws, 2, subnet=subnet)
    aws.ec2_quota("L-417A185B", 100000)
    try:
        rows = [r for r in aws.run(_cfg(count=11, capacity={"type": "on-demand"})) if r.check == "free IP addresses"]
    finally:
        _cleanup(aws)
        for eni in aws.ec2.describe_network_interfaces(Filters=[{"Name": "subnet-id", "Values": [subnet]}])["NetworkInterfaces"]:
            aws.ec2.delete_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"])
        aws.ec2.delete_subnet(SubnetId=subnet)
        aws.ec2.delete_vpc(VpcId=vpc)
    assert [(STATUS_OF[r.level], r.message) for r in rows] == [
        ("PASS", f"the nodes need up to 11 addresses; {subnet} has 9 free addresses and 2 held by this environment's nodes")
    ]


def test_sagemaker_quota_without_an_applied_value_falls_back_to_the_default(aws: Aws) -> None:
    """A quota nobody raised has no applied value, so ListServiceQuotas leaves it out; its AWS
    default (ListAWSDefaultServiceQuotas) is the limit."""
    aws.stubs["sm"].add_response("describe_training_plan", _plan(), {"TrainingPlanName": "p5en"})
    applied = {k: v for k, v in QUOTAS_OK.items() if not k.startswith("ml.p5en")}
    _sagemaker_quotas(aws, applied, defaults={"ml.p5en.48xlarge for cluster usage": 16})
    rows = aws.run(_hyperpod())
    assert ("quota ml.p5en.48xlarge for cluster usage", "SageMaker cluster quota", "needs 16; the quota is 16") in _rows(rows, "PASS")
    assert _rows(rows, "FAIL") == []


def _cluster(name: str, groups: list[tuple[str, int]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ListClusters summary and its DescribeCluster answer (botocore's SageMaker shapes)."""
    arn = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:cluster/{name}"
    summary = {"ClusterArn": arn, "ClusterName": name, "CreationTime": NOW - timedelta(days=3), "ClusterStatus": "InService"}
    detail = {
        "ClusterArn": arn,
        "ClusterName": name,
        "ClusterStatus": "InService",
        "InstanceGroups": [
            {"InstanceGroupName": f"g{i}", "InstanceType": t, "CurrentCount": n, "TargetCount": n} for i, (t, n) in enumerate(groups)
        ],
    }
    return summary, detail


def test_hyperpod_account_quotas_count_the_other_clusters(aws: Aws) -> None:
    """HyperPod's prerequisites: the per-cluster quota must exceed this cluster's instances, the
    across-clusters quota all clusters' together (docs/facts/hyperpod.md#hyperpod-account-quotas)."""
    aws.stubs["sm"].add_response("describe_training_plan", _plan(), {"TrainingPlanName": "p5en"})
    other, other_detail = _cluster("team-b", [("ml.p5.48xlarge", 80), ("ml.m5.12xlarge", 2)])
    own, own_detail = _cluster("fminfra-prod-hyperpod", [("ml.p5en.48xlarge", 16)])
    _sagemaker_quotas(
        aws,
        {
            **QUOTAS_OK,
            "Maximum number instances allowed per SageMaker HyperPod cluster": 20,
            "Total number of instances allowed across SageMaker HyperPod clusters": 100,
        },
        clusters=[other, own],
    )
    aws.stubs["sm"].add_response("describe_cluster", other_detail, {"ClusterName": "team-b"})
    aws.stubs["sm"].add_response("describe_cluster", own_detail, {"ClusterName": "fminfra-prod-hyperpod"})
    rows = aws.run(_hyperpod())
    hyperpod = [(STATUS_OF[r.level], r.path, r.message) for r in rows if r.check == "HyperPod account quota"]
    need = 16 + 1 + 2  # workers, the Slurm controller, two login nodes (config/prod.yaml)
    assert hyperpod == [
        ("PASS", "quota Maximum number instances allowed per SageMaker HyperPod cluster", f"this cluster needs {need}; the quota is 20"),
        (
            "FAIL",
            "quota Total number of instances allowed across SageMaker HyperPod clusters",
            f"this cluster needs {need} and other clusters run 82; the quota is 100: request an increase in Service Quotas",
        ),
    ]
    # HyperPod nodes take interfaces in the VPC too: 17 per p5en node (1 ENA + 16 EFA).
    eni = next(r for r in rows if r.check == "network interface quota")
    assert STATUS_OF[eni.level] == "PASS"
    assert eni.message.startswith("the nodes take up to 275 (workers 16 x 17, Slurm controller and login 3 x 1);")
