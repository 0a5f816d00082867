"""Inference node groups on a Capacity Block with a known start: the group waits at 0, a one-time
EventBridge Scheduler schedule sizes it at the block's start (EKS scales it to 0 before the end),
and the schedule's request is one EKS accepts. The block 1 -> block 2 sequence runs against a
model of the three services' documented behaviour."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from fminfra.capacity.rules import EKS_SCALEDOWN_BEFORE_END
from fminfra.core.errors import ValidationError
from fminfra.eks.constructs.inference_node_group import InferenceNodeGroup, InferenceNodeGroupProps

BLOCK_1 = (datetime(2027, 1, 10, 11, 30, tzinfo=UTC), datetime(2027, 1, 17, 11, 30, tzinfo=UTC))
BLOCK_2 = (datetime(2027, 2, 7, 11, 30, tzinfo=UTC), datetime(2027, 2, 14, 11, 30, tzinfo=UTC))


def _template(starts_at: datetime | None, *, capacity_block: bool = True, sizes: tuple[int, int, int] = (1, 2, 2)) -> dict[str, Any]:
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=1,
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="c", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    template = ec2.CfnLaunchTemplate(
        stack, "Lt", launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(instance_type="p5.48xlarge")
    )
    min_size, desired_size, max_size = sizes
    InferenceNodeGroup(
        stack,
        "Serve",
        InferenceNodeGroupProps(
            cluster=eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="team-a", vpc=vpc),
            nodegroup_name="fminfra-dev-serve",
            instance_type="p5.48xlarge",
            min_size=min_size,
            desired_size=desired_size,
            max_size=max_size,
            subnets=vpc.isolated_subnets,
            launch_template=eks.LaunchTemplateSpec(id=template.ref, version=template.attr_latest_version_number),
            capacity_block=capacity_block,
            block_starts_at=starts_at,
        ),
    )
    return Template.from_stack(stack).to_json()


def _of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == resource_type}


def _nodegroup(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ((lid, group),) = _of_type(template, "AWS::EKS::Nodegroup").items()
    return lid, group["Properties"]


def _schedule(template: dict[str, Any]) -> dict[str, Any]:
    ((_, schedule),) = _of_type(template, "AWS::Scheduler::Schedule").items()
    return schedule


_NAMES = {"NodegroupName": "fminfra-dev-serve"}


def _request(schedule: dict[str, Any]) -> dict[str, Any]:
    """The schedule's Input with its tokens resolved as CloudFormation would: Ref/GetAtt to a name."""
    raw = schedule["Properties"]["Target"]["Input"]
    if isinstance(raw, dict):
        parts = raw["Fn::Join"][1]
        raw = "".join(p if isinstance(p, str) else _NAMES[p["Fn::GetAtt"][1]] for p in parts)
    return json.loads(raw)


def test_block_start_sizes_the_group_and_the_template_waits_at_zero() -> None:
    template = _template(BLOCK_1[0])
    lid, group = _nodegroup(template)
    assert group["CapacityType"] == "CAPACITY_BLOCK"
    # Before the block the group holds no node: nothing launches into a block that is not active.
    assert group["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 2}
    schedule = _schedule(template)
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == "at(2027-01-10T11:30:00)"
    assert props["ScheduleExpressionTimezone"] == "UTC"
    assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert props["Target"]["Arn"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":scheduler:::aws-sdk:eks:updateNodegroupConfig"]]
    }
    request = _request(schedule)
    assert request == {
        "ClusterName": "team-a",
        "NodegroupName": "fminfra-dev-serve",
        "ScalingConfig": {"MinSize": 1, "MaxSize": 2, "DesiredSize": 2},
    }
    assert lid in json.dumps(props["Target"]["Input"])


def test_block_start_role_is_scheduler_only_and_this_nodegroup_only() -> None:
    template = _template(BLOCK_1[0])
    lid, _ = _nodegroup(template)
    schedule = _schedule(template)
    role_id = schedule["Properties"]["Target"]["RoleArn"]["Fn::GetAtt"][0]
    role = template["Resources"][role_id]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "111111111111"}}
    policies = [p for p in _of_type(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    (policy,) = policies
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "eks:UpdateNodegroupConfig"
    assert statement["Resource"] == {"Fn::GetAtt": [lid, "Arn"]}
    assert "ManagedPolicyArns" not in role
    # The policy exists before the schedule can fire.
    policy_id = next(pid for pid, p in _of_type(template, "AWS::IAM::Policy").items() if {"Ref": role_id} in p["Properties"]["Roles"])
    assert policy_id in schedule["DependsOn"]


def test_without_a_start_the_group_keeps_its_sizes_and_has_no_schedule() -> None:
    template = _template(None)
    _, group = _nodegroup(template)
    assert group["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 2, "MaxSize": 2}
    assert _of_type(template, "AWS::Scheduler::Schedule") == {}


@pytest.mark.parametrize(
    ("starts_at", "capacity_block", "sizes", "message"),
    [
        (BLOCK_1[0], False, (1, 2, 2), "Capacity Block node groups only"),
        (datetime(2027, 1, 10, 11, 30), True, (1, 2, 2), "time zone"),
        (BLOCK_1[0], True, (0, 0, 2), "desired_size 1 or more"),
    ],
)
def test_block_start_rejects(starts_at: datetime, capacity_block: bool, sizes: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _template(starts_at, capacity_block=capacity_block, sizes=sizes)


# --- the request against EKS's published API model ------------------------------------------


def _eks_model() -> dict[str, Any]:
    (path,) = (Path(botocore.__file__).parent / "data" / "eks").glob("*/service-2.json.gz")
    return json.loads(gzip.decompress(path.read_bytes()))


def request_problems(operation: str, request: dict[str, Any]) -> list[str]:
    """A universal target's Input against botocore's shape of the operation: each key is a member
    in PascalCase (docs/facts/eks.md#scheduler-universal-target-eks-update-nodegroup-config), every
    required member is there, and integers are within the shape's range."""
    model = _eks_model()
    shapes = model["shapes"]

    def check(shape_name: str, value: Any, path: str) -> list[str]:
        shape = shapes[shape_name]
        if shape["type"] == "structure":
            members = {m[0].upper() + m[1:]: (m, s) for m, s in shape["members"].items()}
            found = [f"{path}{k}: no such member of {shape_name}" for k in value if k not in members]
            for key, (member, spec) in members.items():
                if key in value:
                    found += check(spec["shape"], value[key], f"{path}{key}.")
                elif member in shape.get("required", []):
                    found.append(f"{path}{key}: required by {shape_name}")
            return found
        if shape["type"] == "integer":
            low, high = shape.get("min", float("-inf")), shape.get("max", float("inf"))
            return [] if isinstance(value, int) and low <= value <= high else [f"{path[:-1]}: {value!r} not an integer in {low}..{high}"]
        return [] if isinstance(value, str) else [f"{path[:-1]}: {value!r} not a string"]

    return check(model["operations"][operation]["input"]["shape"], request, "")


def test_the_request_is_an_update_nodegroup_config_request() -> None:
    schedule = _schedule(_template(BLOCK_1[0]))
    action = re.fullmatch(r".*:aws-sdk:eks:(\w+)", schedule["Properties"]["Target"]["Arn"]["Fn::Join"][1][-1])
    assert action is not None
    operation = action.group(1)[0].upper() + action.group(1)[1:]
    assert request_problems(operation, _request(schedule)) == []


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        ({"clusterName": "a", "NodegroupName": "b"}, "clusterName: no such member"),
        ({"NodegroupName": "b"}, "ClusterName: required"),
        ({"ClusterName": "a", "NodegroupName": "b", "ScalingConfig": {"DesiredSize": -1}}, "DesiredSize: -1"),
    ],
)
def test_request_check_catches_a_broken_request(request_: dict[str, Any], problem: str) -> None:
    assert any(problem in p for p in request_problems("UpdateNodegroupConfig", request_))


# --- block 1 -> block 2 ------------------------------------------------------------------------


@dataclass
class Model:
    """A node group, its one-time start schedule and EKS's own scale-down, as documented:
    - CloudFormation creates the node group with the template's ScalingConfig; on an update it
      calls EKS only for properties whose template value changed (an unchanged ScalingConfig is
      not sent again: docs/facts/eks.md#cfn-nodegroup-scaling-config-update);
    - EventBridge Scheduler invokes a one-time schedule once, at its `at()` time (60-second
      precision); an update that moves the time arms it again (docs/facts/eks.md#scheduler-one-time-schedule);
    - EKS scales a Capacity Block node group to 0 forty minutes before the reservation ends
      (docs/facts/eks.md#eks-capacity-block-scaledown)."""

    desired: int = 0
    deployed: dict[str, Any] = field(default_factory=dict)
    schedule_at: datetime | None = None
    schedule_request: dict[str, Any] | None = None
    fired: bool = False
    ends: list[datetime] = field(default_factory=list)
    launched_outside_a_block: list[datetime] = field(default_factory=list)

    def deploy(self, template: dict[str, Any], block_end: datetime) -> None:
        _, group = _nodegroup(template)
        if not self.deployed or group["ScalingConfig"] != self.deployed["ScalingConfig"]:
            self.desired = group["ScalingConfig"]["DesiredSize"]
        self.deployed = group
        self.ends.append(block_end)
        schedules = _of_type(template, "AWS::Scheduler::Schedule")
        if schedules:
            (schedule,) = schedules.values()
            at = datetime.strptime(schedule["Properties"]["ScheduleExpression"], "at(%Y-%m-%dT%H:%M:%S)").replace(tzinfo=UTC)
            if at != self.schedule_at:
                self.schedule_at, self.fired = at, False
            self.schedule_request = _request(schedule)

    def run_until(self, now: datetime, active: list[tuple[datetime, datetime]]) -> None:
        """Every event up to `now`, in order; records any time a node is wanted outside a block."""
        events: list[tuple[datetime, str]] = [(end - EKS_SCALEDOWN_BEFORE_END, "scaledown") for end in self.ends]
        if self.schedule_at is not None and not self.fired:
            events.append((self.schedule_at, "start"))
        for when, what in sorted(events):
            if when > now:
                break
            if what == "start" and self.schedule_request is not None:
                self.desired, self.fired = self.schedule_request["ScalingConfig"]["DesiredSize"], True
            elif what == "scaledown":
                self.desired = 0
        if self.desired and not any(start <= now < end for start, end in active):
            self.launched_outside_a_block.append(now)


def test_block_1_then_block_2() -> None:
    model = Model()
    blocks = [BLOCK_1, BLOCK_2]
    model.deploy(_template(BLOCK_1[0]), BLOCK_1[1])
    model.run_until(BLOCK_1[0] - timedelta(days=1), blocks)
    assert model.desired == 0  # before block 1: no launches into an inactive block
    model.run_until(BLOCK_1[0] + timedelta(minutes=1), blocks)
    assert model.desired == 2  # block 1 starts: the schedule sizes the group
    model.deploy(_template(BLOCK_1[0]), BLOCK_1[1])  # a redeploy inside block 1 changes nothing
    assert model.desired == 2
    model.run_until(BLOCK_1[1] - timedelta(minutes=39), blocks)
    assert model.desired == 0  # EKS's scale-down, 40 minutes before the end
    model.deploy(_template(BLOCK_2[0]), BLOCK_2[1])  # after block 1: block 2's window
    model.run_until(BLOCK_2[0] - timedelta(minutes=1), blocks)
    assert model.desired == 0
    model.run_until(BLOCK_2[0] + timedelta(minutes=1), blocks)
    assert model.desired == 2  # block 2 starts: the moved schedule sizes the group again
    model.run_until(BLOCK_2[1] - timedelta(minutes=39), blocks)
    assert model.desired == 0
    assert model.launched_outside_a_block == []


def test_model_catches_a_group_sized_before_its_block() -> None:
    """Test of the test: a group created with its desired size (no start schedule) is caught
    launching before block 1 and never comes back for block 2."""
    model = Model()
    blocks = [BLOCK_1, BLOCK_2]
    model.deploy(_template(None), BLOCK_1[1])
    model.run_until(BLOCK_1[0] - timedelta(days=1), blocks)
    assert model.launched_outside_a_block
    model.run_until(BLOCK_1[1] - timedelta(minutes=39), blocks)
    model.deploy(_template(None), BLOCK_2[1])
    model.run_until(BLOCK_2[0] + timedelta(minutes=1), blocks)
    assert model.desired == 0
