"""GPU capacity: config rules per path, the Compute stack's reservations, launch templates and
Auto Scaling groups for every capacity type, the own rules, and `plan`."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra import catalog
from fminfra.capacity.rules import CUSTOM_RESERVATION_TYPE
from fminfra.cli.main import main
from fminfra.config import load_config, parse_config
from fminfra.core.errors import ConfigError
from fminfra.ops.plan import group_plans, plan_warnings, render_plan
from fminfra.policy.rules import check_templates
from tests.conftest import EXAMPLE_CONFIGS, ROOT, SHIPPED_CONFIGS, Synth
from tests.fakes.drain_fakes import AutoScalingGroupModel

DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
EC2 = yaml.safe_load((ROOT / "examples" / "ec2-odcr.yaml").read_text())
STAGING = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
BLOCK = {"type": "capacity-block", "reservation_ids": ["cr-0123456789abcdef0"]}


def _group(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    data["compute"]["instance_groups"][0].update(changes)
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return info.value.problems


# ------------------------------------------------------------------------------------------
# validate: which capacity type fits which path, each rejection one line


REJECTIONS = [
    (
        _group(DEV, capacity={"type": "odcr"}),
        "f.yaml: compute.instance_groups[0].capacity.type: group 'workers': odcr is not available to HyperPod groups "
        "(orchestrator slurm); allowed: on-demand, training-plan",
    ),
    (
        _group(
            EC2,
            capacity={"type": "training-plan", "training_plan_arn": "arn:aws:sagemaker:us-east-2:444444444444:training-plan/p"},
        ),
        "f.yaml: compute.instance_groups[0].capacity.type: group 'trainers': training-plan is not available to ec2 groups "
        "(orchestrator ec2); allowed: on-demand, odcr, reservation, capacity-block",
    ),
    (
        _group(EC2, capacity={"type": "reservation", "reservation_ids": ["cr-12345"]}),
        "f.yaml: compute.instance_groups[0].capacity.reservation_ids[0]: must be 'cr-' followed by 17 lowercase hex digits, got 'cr-12345'",
    ),
    (
        _group(EC2, placement="cluster", capacity=BLOCK),
        "f.yaml: compute.instance_groups[0].placement: group 'trainers': a Capacity Block brings its own placement; "
        "placement cluster is not allowed, use none",
    ),
    (
        _group(DEV, capacity={"type": "reservation", "reservation_ids": ["cr-0123456789abcdef0"]}),
        "f.yaml: compute.instance_groups[0].capacity.type: group 'workers': reservation is not available to HyperPod groups "
        "(orchestrator slurm); allowed: on-demand, training-plan",
    ),
    (
        _group(DEV, capacity=BLOCK),
        "f.yaml: compute.instance_groups[0].capacity.type: group 'workers': capacity-block is not available to HyperPod groups "
        "(orchestrator slurm); allowed: on-demand, training-plan",
    ),
    (
        _group(EC2, count=0, capacity={"type": "odcr"}),
        "f.yaml: compute.instance_groups[0].count: group 'trainers': an odcr reserves count instances; count must be at least 1, got 0",
    ),
    (
        _group(EC2, placement="none", capacity={**BLOCK, "starts_at": "2027-01-10T11:30:00Z"}),
        "f.yaml: compute.instance_groups[0].capacity.ends_at: starts_at and ends_at go together: starts_at is given, "
        "so ends_at is required (or drop both)",
    ),
    # Capacity Block windows (docs/facts/capacity.md#capacity-block-end-time): end at 11:30 UTC,
    # outlast EC2's 30-minute reclaim plus the drain, at most 182 days and a little.
    (
        _group(EC2, placement="none", capacity={**BLOCK, "starts_at": "2027-01-10T11:30:00Z", "ends_at": "2027-01-17T12:30:00Z"}),
        "f.yaml: compute.instance_groups[0].capacity.ends_at: Capacity Blocks end at 11:30 UTC; ends_at is 2027-01-17T12:30:00Z: "
        "copy the end from the purchase (capacity-blocks purchase prints it)",
    ),
    (
        _group(EC2, placement="none", capacity={**BLOCK, "starts_at": "2027-01-10T10:55:00Z", "ends_at": "2027-01-10T11:30:00Z"}),
        "f.yaml: compute.instance_groups[0].capacity.ends_at: the block (0:35:00) must outlast EC2's 30-minute reclaim and the "
        "0:10:00 drain, or the group scales in before it scales out",
    ),
    (
        _group(EC2, placement="none", capacity={**BLOCK, "starts_at": "2027-01-10T11:30:00Z", "ends_at": "2027-08-11T11:30:00Z"}),
        "f.yaml: compute.instance_groups[0].capacity.ends_at: a Capacity Block lasts at most 182 days (and up to a day more), got 213 days, 0:00:00",
    ),
    (
        _group(EC2, placement="none", capacity={**BLOCK, "drain_minutes": 20}),
        "f.yaml: compute.instance_groups[0].capacity.drain_minutes: applies only with starts_at and ends_at (the scheduled scale-in)",
    ),
    (
        _group(EC2, capacity={"type": "odcr", "drain_minutes": 20}),
        "f.yaml: compute.instance_groups[0].capacity.drain_minutes: not allowed with type odcr (it takes: end_date)",
    ),
    (
        _group(EC2, placement="none", capacity={**BLOCK, "reservation_ids": ["cr-0123456789abcdef0", "cr-0123456789abcdef1"]}),
        "f.yaml: compute.instance_groups[0].capacity.reservation_ids: a group targets one Capacity Block (Auto Scaling and EKS take "
        "one block's id); give each block its own group, or use type reservation for several On-Demand Capacity Reservations, "
        "got cr-0123456789abcdef0, cr-0123456789abcdef1",
    ),
    (
        _group(EC2, capacity={"type": "odcr", "reservation_ids": ["cr-0123456789abcdef0"]}),
        "f.yaml: compute.instance_groups[0].capacity.reservation_ids: not allowed with type odcr (it takes: end_date)",
    ),
]


@pytest.mark.parametrize(("data", "line"), REJECTIONS, ids=range(len(REJECTIONS)))
def test_validate_rejects_capacity_mistakes_in_one_line(data: dict[str, Any], line: str) -> None:
    assert _problems(data) == [line]


@pytest.mark.parametrize(
    ("starts_at", "ends_at"),
    [
        ("2027-01-10T14:55:00Z", "2027-01-11T11:30:00Z"),  # a "1-day" offering that starts mid-day: 20h 35m
        ("2027-01-10T04:55:00Z", "2027-01-10T11:30:00Z"),  # the API documentation's example: 6h 35m
        ("2027-01-10T08:55:00-08:00", "2027-01-17T03:30:00-08:00"),  # 11:30 UTC written in another zone
        ("2027-01-10T11:30:00Z", "2027-07-12T11:30:00Z"),  # 183 days: an offering slightly longer than 182
    ],
)
def test_validate_accepts_real_capacity_block_windows(starts_at: str, ends_at: str) -> None:
    """Blocks end at 11:30 UTC and are often a little shorter than the whole days asked for
    (docs/facts/capacity.md#capacity-block-end-time); validate takes them as the API sells them."""
    cfg = parse_config(_group(EC2, placement="none", capacity={**BLOCK, "starts_at": starts_at, "ends_at": ends_at}), "f.yaml")
    assert cfg.compute.instance_groups[0].capacity.ends_at is not None


def test_drain_minutes_moves_the_scheduled_scale_in() -> None:
    data = _group(
        EC2,
        placement="none",
        capacity={**BLOCK, "starts_at": "2027-01-10T11:30:00Z", "ends_at": "2027-01-17T11:30:00Z", "drain_minutes": 45},
    )
    text = "\n".join(plan_warnings(parse_config(data, "f.yaml")))
    assert "to 0 at 2027-01-17T10:15:00Z, 45 minutes before EC2 starts terminating the block's instances (2027-01-17T11:00:00Z)" in text


def test_inference_node_group_rejects_training_plan() -> None:
    data = copy.deepcopy(STAGING)
    data["compute"]["inference_node_groups"][0]["capacity"] = {
        "type": "training-plan",
        "training_plan_arn": "arn:aws:sagemaker:us-west-2:222222222222:training-plan/p",
    }
    assert _problems(data) == [
        "f.yaml: compute.inference_node_groups[0].capacity.type: group 'serve': training-plan is not available to EKS inference "
        "node groups; allowed: on-demand, odcr, reservation, capacity-block"
    ]


def test_inference_node_group_refuses_a_drain_eks_does_not_take() -> None:
    """EKS scales a Capacity Block node group down 40 minutes before the end on its own schedule
    (docs/facts/eks.md#eks-capacity-block-scaledown): a drain_minutes there would be ignored."""
    data = copy.deepcopy(STAGING)
    window = {"starts_at": "2027-01-10T11:30:00Z", "ends_at": "2027-01-17T11:30:00Z"}
    data["compute"]["inference_node_groups"][0]["placement"] = "none"
    data["compute"]["inference_node_groups"][0]["capacity"] = {**BLOCK, **window, "drain_minutes": 20}
    assert _problems(data) == [
        "f.yaml: compute.inference_node_groups[0].capacity.drain_minutes: does not apply to inference node groups: EKS scales a "
        "Capacity Block node group to 0 and drains it 40 minutes before the block ends, on its own schedule; remove drain_minutes"
    ]
    data["compute"]["inference_node_groups"][0]["capacity"] = {**BLOCK, **window}
    assert parse_config(data, "f.yaml").compute.inference_node_groups[0].capacity.ends_at is not None


def test_training_plan_takes_a_drain() -> None:
    """A HyperPod group on a training plan drains before SageMaker terminates the plan's
    instances (scripts/node/drain_before_plan_end.sh): drain_minutes sets how long."""
    data = copy.deepcopy(STAGING)
    group = data["compute"]["instance_groups"][0]
    group["capacity"] = {
        "type": "training-plan",
        "training_plan_arn": "arn:aws:sagemaker:us-west-2:222222222222:training-plan/p",
        "drain_minutes": 45,
    }
    assert parse_config(data, "f.yaml").compute.instance_groups[0].capacity.drain == timedelta(minutes=45)
    group["capacity"]["drain_minutes"] = 0
    assert [p for p in _problems(data) if "drain_minutes" in p]


def test_inference_node_group_with_a_block_start_needs_a_desired_size() -> None:
    """The block's start sets the node group to its desired_size: 0 there would never use the block."""
    data = copy.deepcopy(STAGING)
    group = data["compute"]["inference_node_groups"][0]
    group.update(placement="none", min_size=0, desired_size=0, max_size=2)
    group["capacity"] = {**BLOCK, "starts_at": "2027-01-10T11:30:00Z", "ends_at": "2027-01-17T11:30:00Z"}
    assert _problems(data) == [
        "f.yaml: compute.inference_node_groups[0].desired_size: must be 1 or more with capacity.starts_at: the block's start "
        "sets the node group to desired_size, got 0"
    ]
    del group["capacity"]["starts_at"], group["capacity"]["ends_at"]
    assert parse_config(data, "f.yaml").compute.inference_node_groups[0].desired_size == 0


@pytest.mark.parametrize(
    "capacity",
    [
        {"type": "on-demand"},
        {"type": "odcr", "end_date": "2027-01-01T00:00:00Z"},
        {"type": "reservation", "reservation_ids": ["cr-0123456789abcdef0", "cr-0123456789abcdef1"]},
        BLOCK,
    ],
    ids=lambda c: c["type"],
)
def test_ec2_and_inference_groups_take_ec2_capacity_types(capacity: dict[str, Any]) -> None:
    data = _group(EC2, placement="none", capacity=capacity)
    assert parse_config(data, "f.yaml").compute.instance_groups[0].capacity.type == capacity["type"]
    inference = copy.deepcopy(STAGING)
    inference["compute"]["inference_node_groups"][0]["capacity"] = capacity
    assert parse_config(inference, "f.yaml").compute.inference_node_groups[0].capacity.type == capacity["type"]


def test_capacity_block_placement_defaults_to_none() -> None:
    cfg = parse_config(_group(EC2, placement=None, capacity=BLOCK) | {}, "f.yaml")
    group = cfg.compute.instance_groups[0]
    assert cfg.compute.placement_of(group) == "none"


@pytest.mark.parametrize(("data", "line"), REJECTIONS[:4], ids=range(4))
def test_validate_cli_prints_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], line: str
) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [line.replace("f.yaml", str(path))]


# ------------------------------------------------------------------------------------------
# the Compute stack: every capacity type on the paths that take it


def _by_group(synth: Synth, env: str, resource_type: str, prefix: str) -> dict[str, dict[str, Any]]:
    """Resources of a type whose logical ids start with `<Construct id without dashes>`."""
    return {lid: r for lid, r in synth.resources(env, "Compute", resource_type).items() if lid.startswith(prefix)}


def _one(synth: Synth, env: str, resource_type: str, prefix: str) -> tuple[str, dict[str, Any]]:
    found = _by_group(synth, env, resource_type, prefix)
    assert len(found) == 1, (prefix, list(found))
    return next(iter(found.items()))


def _lid(synth: Synth, env: str, element: Any) -> str:
    return synth.stages[env].compute.get_logical_id(element)


def _lt(synth: Synth, env: str, group: str) -> tuple[str, dict[str, Any]]:
    lid = _lid(synth, env, synth.stages[env].compute.launch_templates[group].cfn_launch_template)
    return lid, synth.template(env, "Compute")["Resources"][lid]["Properties"]["LaunchTemplateData"]


def _asg(synth: Synth, env: str, group: str) -> tuple[str, dict[str, Any]]:
    lid = _lid(synth, env, synth.stages[env].compute.auto_scaling_groups[group].cfn_group)
    return lid, synth.template(env, "Compute")["Resources"][lid]["Properties"]


def test_on_demand_ec2_group(synth: Synth) -> None:
    lid, data = _lt(synth, "cap-ec2", "ondemand")
    assert "CapacityReservationSpecification" not in data and "InstanceMarketOptions" not in data
    assert "GroupName" in data["Placement"]
    _, asg = _asg(synth, "cap-ec2", "ondemand")
    assert (asg["MinSize"], asg["MaxSize"], asg["DesiredCapacity"]) == ("2", "2", "2")
    assert asg["LaunchTemplate"] == {"LaunchTemplateId": {"Ref": lid}, "Version": {"Fn::GetAtt": [lid, "LatestVersionNumber"]}}
    assert data["CpuOptions"] == {"CoreCount": 48, "ThreadsPerCore": 1}


def test_odcr_is_a_targeted_reservation_in_the_compute_az_and_placement_group(synth: Synth) -> None:
    """Inside a placement group the reservation is made through EC2's API: `AWS::EC2::CapacityReservation`'s
    schema refuses every PlacementGroupArn (docs/facts/capacity.md#cfn-schema-capacity-reservation-placement-group-arn)."""
    rid, res = _one(synth, "cap-ec2", CUSTOM_RESERVATION_TYPE, "CapacityReservationodcr")
    props = res["Properties"]
    assert props["InstanceType"] == "p5.48xlarge"
    assert props["InstanceCount"] == 3
    assert props["AvailabilityZoneId"] == "usw2-az2"
    assert props["InstanceMatchCriteria"] == "targeted"
    assert props["InstancePlatform"] == "Linux/UNIX"
    assert props["EndDate"] == "2027-03-31T00:00:00Z"
    assert props["Tags"] == {"Name": "fminfra-cap-ec2-odcr", "fminfra:stack-id": {"Ref": "AWS::StackId"}}
    assert props["ServiceToken"] == {
        "Fn::GetAtt": [_one(synth, "cap-ec2", "AWS::Lambda::Function", "CapacityReservationHandler")[0], "Arn"]
    }
    pg_lid, _ = _one(synth, "cap-ec2", "AWS::EC2::PlacementGroup", "PlacementGroupodcr")
    pg_name = {"Fn::GetAtt": [pg_lid, "GroupName"]}
    assert props["PlacementGroupArn"] == {"Fn::Join": ["", ["arn:aws:ec2:us-west-2:555555555555:placement-group/", pg_name]]}
    assert all(
        "PlacementGroupArn" not in r.get("Properties", {})
        for r in synth.resources("cap-ec2", "Compute", "AWS::EC2::CapacityReservation").values()
    )
    _, data = _lt(synth, "cap-ec2", "odcr")
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": {"Ref": rid}},
    }
    assert data["Placement"] == {"GroupName": pg_name}
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 800


def test_odcr_example_and_open_ended_reservation(synth: Synth) -> None:
    _, res = _one(synth, "ec2-odcr", CUSTOM_RESERVATION_TYPE, "CapacityReservationtrainers")
    assert res["Properties"]["InstanceCount"] == 4 and res["Properties"]["AvailabilityZoneId"] == "use2-az2"
    _, serve = _one(synth, "cap-ec2", "AWS::EC2::CapacityReservation", "CapacityReservationserve")
    # An inference node group's ODCR holds max_size instances; placement none: no group ARN.
    assert serve["Properties"]["InstanceType"] == "g6e.12xlarge" and serve["Properties"]["InstanceCount"] == 2
    assert "PlacementGroupArn" not in serve["Properties"]
    assert serve["Properties"]["EndDateType"] == "unlimited"
    target = synth.stages["cap-ec2"].compute.capacity_targets["serve"]
    assert target.reservation_id is not None and not target.capacity_block


def test_several_reservations_go_into_a_resource_group(synth: Synth) -> None:
    gid = _lid(synth, "cap-ec2", synth.stages["cap-ec2"].compute.reservation_groups["reserved"].cfn_group)
    group = synth.template("cap-ec2", "Compute")["Resources"][gid]
    props = group["Properties"]
    assert props["Name"] == "fminfra-cap-ec2-reserved-reservations"
    assert props["Configuration"][0] == {"Type": "AWS::EC2::CapacityReservationPool"}
    assert props["Configuration"][1]["Parameters"] == [{"Name": "allowed-resource-types", "Values": ["AWS::EC2::CapacityReservation"]}]
    assert props["Resources"] == [
        "arn:aws:ec2:us-west-2:555555555555:capacity-reservation/cr-0aaaaaaaaaaaaaaa1",
        "arn:aws:ec2:us-west-2:555555555555:capacity-reservation/cr-0aaaaaaaaaaaaaaa2",
    ]
    _, data = _lt(synth, "cap-ec2", "reserved")
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationResourceGroupArn": {"Fn::GetAtt": [gid, "Arn"]}
    }
    assert "InstanceMarketOptions" not in data and "Placement" not in data
    assert "CpuOptions" not in data  # threads_per_core 2: the type's default


def test_one_reservation_is_targeted_directly(synth: Synth) -> None:
    _, data = _lt(synth, "cap-ec2", "reserved-one")
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {"CapacityReservationId": "cr-0aaaaaaaaaaaaaaa3"}
    assert "reserved-one" not in synth.stages["cap-ec2"].compute.reservation_groups
    assert len(synth.resources("cap-ec2", "Compute", "AWS::ResourceGroups::Group")) == 1  # reserved (a block group has one id)


def test_capacity_block_without_window_starts_at_zero(synth: Synth) -> None:
    _, data = _lt(synth, "cap-ec2", "blocks")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    # One block, targeted by its id (docs/facts/capacity.md#capacity-block-one-per-group).
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0bbbbbbbbbbbbbbb1"},
    }
    assert "Placement" not in data
    _, asg = _asg(synth, "cap-ec2", "blocks")
    assert (asg["MinSize"], asg["MaxSize"], asg["DesiredCapacity"]) == ("0", "2", "0")
    assert synth.resources("cap-ec2", "Compute", "AWS::AutoScaling::ScheduledAction") == {}


def test_capacity_block_window_schedules_scale_out_and_in(synth: Synth) -> None:
    _, data = _lt(synth, "ec2-cb", "block")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {"CapacityReservationId": "cr-0123456789abcdef0"}
    asg_lid, asg = _asg(synth, "ec2-cb", "block")
    assert (asg["MinSize"], asg["MaxSize"], asg["DesiredCapacity"]) == ("0", "8", "0")
    # A redeploy during the block must not set the size back to 0
    # (docs/facts/capacity.md#cfn-scheduled-action-update-policy).
    resource = synth.resources("ec2-cb", "Compute", "AWS::AutoScaling::AutoScalingGroup")[asg_lid]
    assert resource["UpdatePolicy"] == {"AutoScalingScheduledAction": {"IgnoreUnmodifiedGroupSizeProperties": True}}
    actions = {lid: r["Properties"] for lid, r in synth.resources("ec2-cb", "Compute", "AWS::AutoScaling::ScheduledAction").items()}
    start = next(p for lid, p in actions.items() if "BlockStart" in lid)
    end = next(p for lid, p in actions.items() if "BlockEnd" in lid)
    assert start == {
        "AutoScalingGroupName": {"Ref": asg_lid},
        "StartTime": "2027-01-10T11:30:00Z",
        "MinSize": 8,
        "MaxSize": 8,
        "DesiredCapacity": 8,
    }
    # The drain window: 10 minutes before EC2 terminates at 11:00 (docs/facts/capacity.md#capacity-block-scale-in-guidance).
    assert end == {
        "AutoScalingGroupName": {"Ref": asg_lid},
        "StartTime": "2027-01-17T10:50:00Z",
        "MinSize": 0,
        "MaxSize": 8,
        "DesiredCapacity": 0,
    }


def test_capacity_block_groups_drain_through_a_termination_hook(synth: Synth) -> None:
    """Every Capacity Block group holds its scaled-in instances in Terminating:Wait for the drain
    (docs/facts/capacity.md#lifecycle-hook-heartbeat-timeout) and tells its nodes which hook to
    complete and when EC2 reclaims the block; other groups have no hook."""
    asg_lid, asg = _asg(synth, "ec2-cb", "block")
    assert asg["LifecycleHookSpecificationList"] == [
        {
            "LifecycleHookName": "fminfra-drain",
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "HeartbeatTimeout": 600,
            "DefaultResult": "CONTINUE",
        }
    ]
    resource = synth.resources("ec2-cb", "Compute", "AWS::AutoScaling::AutoScalingGroup")[asg_lid]
    assert AutoScalingGroupModel.from_template("fminfra-ec2-cb-block", resource).hooks["fminfra-drain"].heartbeat_timeout_s == 600
    _, data = _lt(synth, "ec2-cb", "block")
    user_data = json.dumps(data["UserData"])
    for setting in (
        "FMINFRA_DRAIN_GROUP='fminfra-ec2-cb-block'",
        "FMINFRA_DRAIN_HOOK='fminfra-drain'",
        "FMINFRA_DRAIN_SECONDS='600'",
        "FMINFRA_DRAIN_BUDGET_SECONDS='540'",
        "FMINFRA_DRAIN_NOT_AFTER='2027-01-17T11:00:00Z'",
    ):
        assert setting in user_data
    statements = [
        st
        for policy in synth.resources("ec2-cb", "Compute", "AWS::IAM::Policy").values()
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
        if "autoscaling:CompleteLifecycleAction" in json.dumps(st["Action"])
    ]
    assert len(statements) == 1
    assert statements[0]["Action"] == ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"]
    assert "autoScalingGroupName/" in json.dumps(statements[0]["Resource"]) and asg_lid in json.dumps(statements[0]["Resource"])
    # A windowless block group drains with the default window; an on-demand group has no hook.
    _, windowless = _asg(synth, "cap-ec2", "blocks")
    assert windowless["LifecycleHookSpecificationList"][0]["HeartbeatTimeout"] == 600
    assert "FMINFRA_DRAIN_NOT_AFTER" not in json.dumps(_lt(synth, "cap-ec2", "blocks")[1]["UserData"])
    _, ondemand = _asg(synth, "cap-ec2", "ondemand")
    assert "LifecycleHookSpecificationList" not in ondemand
    assert "FMINFRA_DRAIN" not in json.dumps(_lt(synth, "cap-ec2", "ondemand")[1]["UserData"])


def test_ec2_nodes_use_the_dlami_an_instance_profile_and_no_ssh_key(synth: Synth) -> None:
    params = synth.template("cap-ec2", "Compute").get("Parameters") or {}
    defaults = {p.get("Default") for p in params.values()}
    assert "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id" in defaults
    # No arm64 image: the catalog's one arm64 type, p6e-gb200, is refused on ec2 (its Capacity Blocks are not
    # deployed), so no ec2 group of a config takes the arm64 DLAMI (compute/stack DLAMI_SSM_PARAMETER keeps it).
    assert not any("/arm64/" in str(d) for d in defaults)
    profiles = synth.resources("cap-ec2", "Compute", "AWS::IAM::InstanceProfile")
    assert [p["Properties"]["InstanceProfileName"] for p in profiles.values()] == ["fminfra-cap-ec2-node-us-west-2"]
    role = next(iter(synth.resources("cap-ec2", "Compute", "AWS::IAM::Role").values()))
    assert "AmazonSSMManagedInstanceCore" in str(role["Properties"]["ManagedPolicyArns"])
    for lid, lt in synth.resources("cap-ec2", "Compute", "AWS::EC2::LaunchTemplate").items():
        if lid.startswith("InferenceLaunchTemplate"):
            continue  # EKS node groups: the EKS AMI picks the image (tests/eks/constructs/test_cluster.py)
        data = lt["Properties"]["LaunchTemplateData"]
        assert "KeyName" not in data, lid
        assert data["BlockDeviceMappings"][0]["DeviceName"] == "/dev/sda1"
        assert data["MetadataOptions"]["HttpTokens"] == "required" and data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1


def test_asgs_launch_in_the_compute_subnet(synth: Synth) -> None:
    stage = synth.stages["cap-ec2"]
    resolved = stage.compute.resolve(stage.network.compute_subnet.subnet_id)
    for lid, asg in synth.resources("cap-ec2", "Compute", "AWS::AutoScaling::AutoScalingGroup").items():
        assert asg["Properties"]["VPCZoneIdentifier"] == [resolved], lid


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_hyperpod_environments_create_no_ec2_capacity(synth: Synth, env: str) -> None:
    for kind in ("AWS::EC2::CapacityReservation", "AWS::ResourceGroups::Group", "AWS::AutoScaling::AutoScalingGroup"):
        assert synth.resources(env, "Compute", kind) == {}, kind


def test_every_ec2_group_launch_template_attaches_what_plan_reports(synth: Synth) -> None:
    for env in ("cap-ec2", "ec2-cb", "ec2-odcr"):
        cfg = synth.configs[env]
        rows = {r.name: r for r in group_plans(cfg)}
        for group in cfg.compute.instance_groups:
            _, data = _lt(synth, env, group.name)
            efa = sum(1 for n in data["NetworkInterfaces"] if n["InterfaceType"] == "efa-only")
            assert efa == rows[group.name].efa_attached == catalog.CATALOG[group.instance_type].max_efa_interfaces, (env, group.name)
            assert data["InstanceType"] == group.instance_type


# ------------------------------------------------------------------------------------------
# own rules: they pass on every template (test_policy) and fail on broken launch templates


def _cap_template(synth: Synth) -> dict[str, Any]:
    return copy.deepcopy(synth.template("cap-ec2", "Compute"))


def _launch_template(synth: Synth, template: dict[str, Any], group: str) -> dict[str, Any]:
    lid = _lid(synth, "cap-ec2", synth.stages["cap-ec2"].compute.launch_templates[group].cfn_launch_template)
    return template["Resources"][lid]["Properties"]["LaunchTemplateData"]


def test_rule_catches_a_missing_efa_interface(synth: Synth) -> None:
    template = _cap_template(synth)
    _launch_template(synth, template, "odcr")["NetworkInterfaces"].pop()
    findings = check_templates({"t": template})
    assert [(f.rule_id, f.message) for f in findings] == [("FMI-LT-EFA-ALL", "p5.48xlarge has 32 EFA interfaces; the template attaches 31")]


def test_rule_catches_the_primary_only(synth: Synth) -> None:
    template = _cap_template(synth)
    data = _launch_template(synth, template, "reserved")
    data["NetworkInterfaces"] = data["NetworkInterfaces"][:1]
    assert [f.message for f in check_templates({"t": template})] == ["p5en.48xlarge has 16 EFA interfaces; the template attaches 0"]


def test_rule_catches_efa_on_card_0_of_p6_b300(synth: Synth) -> None:
    template = _cap_template(synth)
    nics = _launch_template(synth, template, "blocks")["NetworkInterfaces"]
    nics[0]["InterfaceType"] = "efa"
    nics.pop()
    assert [f.rule_id for f in check_templates({"t": template})] == ["FMI-LT-EFA-ALL"]


def test_rule_catches_imdsv1(synth: Synth) -> None:
    template = _cap_template(synth)
    _launch_template(synth, template, "ondemand")["MetadataOptions"]["HttpTokens"] = "optional"
    findings = check_templates({"t": template})
    assert [(f.rule_id, f.message) for f in findings] == [
        ("FMI-LT-IMDSV2", "MetadataOptions.HttpTokens must be required (IMDSv2), got 'optional'")
    ]


def test_rule_catches_a_capacity_block_in_a_placement_group(synth: Synth) -> None:
    template = _cap_template(synth)
    _launch_template(synth, template, "blocks")["Placement"] = {"GroupName": "fminfra-cap-ec2-blocks"}
    assert [f.rule_id for f in check_templates({"t": template})] == ["FMI-CB-NO-PLACEMENT"]


# ------------------------------------------------------------------------------------------
# plan


@pytest.mark.parametrize("path", [*SHIPPED_CONFIGS, *EXAMPLE_CONFIGS], ids=lambda p: str(p.relative_to(ROOT)))
def test_plan_reports_every_efa_interface_attached(path: Path) -> None:
    cfg = load_config(path)
    rows = group_plans(cfg)
    assert rows
    for row in rows:
        spec = catalog.get(row.instance_type)
        # training types get every EFA interface they have; inference (G) types none (catalog.efa_network_interfaces)
        attached = spec.max_efa_interfaces if spec.training else 0
        assert (row.efa_attached, row.efa_max) == (attached, spec.max_efa_interfaces)
        assert row.efa_text in render_plan(cfg)


def test_plan_warns_about_reservation_billing_and_block_windows() -> None:
    text = "\n".join(plan_warnings(load_config(ROOT / "tests" / "configs" / "capacity-ec2.yaml")))
    assert "WARN odcr: an ODCR bills from creation whether or not instances run" in text
    assert "WARN serve: an ODCR bills from creation whether or not instances run" in text
    assert "WARN blocks: Capacity Block group starts at 0 instances" in text
    block = "\n".join(plan_warnings(load_config(ROOT / "examples" / "ec2-capacity-block.yaml")))
    assert (
        "WARN block: Capacity Block: the group scales to 8 at 2027-01-10T11:30:00Z and to 0 at 2027-01-17T10:50:00Z, "
        "10 minutes before EC2 starts terminating the block's instances (2027-01-17T11:00:00Z)"
    ) in block


# ------------------------------------------------------------------------------------------
# HyperPod on EKS with a training plan; inference node groups on reservations and a block


def test_inference_node_groups_get_reservation_targets(synth: Synth) -> None:
    compute = synth.stages["cap-eks"].compute
    reserved = compute.capacity_targets["serve-reserved"]
    group = compute.reservation_groups["serve-reserved"]
    assert compute.resolve(reserved.resource_group_arn) == compute.resolve(group.group_arn)
    assert reserved.reservation_id is None and not reserved.capacity_block
    block = compute.capacity_targets["serve-block"]
    assert (block.reservation_id, block.capacity_block) == ("cr-0ddddddddddddddd1", True)
    groups = synth.resources("cap-eks", "Compute", "AWS::ResourceGroups::Group")
    assert [g["Properties"]["Resources"] for g in groups.values()] == [
        [
            "arn:aws:ec2:us-east-1:555555555555:capacity-reservation/cr-0ccccccccccccccc1",
            "arn:aws:ec2:us-east-1:555555555555:capacity-reservation/cr-0ccccccccccccccc2",
        ]
    ]
    # placement: cluster on the reserved group; none (the default) on the block.
    assert set(compute.placement_groups) == {"serve-reserved"}


def test_hyperpod_training_plan_group_creates_no_ec2_capacity(synth: Synth) -> None:
    compute = synth.stages["cap-eks"].compute
    assert "train" not in compute.capacity_targets
    assert compute.launch_templates == {} and compute.auto_scaling_groups == {}
    assert synth.resources("cap-eks", "Compute", "AWS::EC2::CapacityReservation") == {}
    assert synth.resources("cap-eks", "Compute", "AWS::AutoScaling::AutoScalingGroup") == {}
