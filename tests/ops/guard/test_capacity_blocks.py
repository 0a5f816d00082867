"""A deploy while a Capacity Block runs: the update policy that keeps the group's size, and what
`guard` and `plan` say about it. Templates come from the real synth of
examples/ec2-capacity-block.yaml; CloudFormation's behaviour is the one its documentation states
(docs/facts/capacity.md#cfn-scheduled-action-update-policy)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fminfra.config import load_config
from fminfra.ops.guard import capacity_block_deploy_findings
from fminfra.ops.plan import capacity_block_deploy_notes, plan_warnings
from tests.conftest import ROOT, Synth

EXAMPLE = ROOT / "examples" / "ec2-capacity-block.yaml"
INSIDE = datetime(2027, 1, 12, 9, 0, tzinfo=UTC)  # the example's block runs 2027-01-10 .. 2027-01-17
BEFORE_BLOCK = datetime(2027, 1, 9, 9, 0, tzinfo=UTC)
IN_DRAIN = datetime(2027, 1, 17, 10, 55, tzinfo=UTC)  # after the 10:50 scale-in


def _templates(synth: Synth) -> tuple[str, dict[str, dict[str, Any]]]:
    template = synth.template("ec2-cb", "Compute")
    return "Compute", {"Compute": copy.deepcopy(template)}


def _group_lid(template: dict[str, Any]) -> str:
    (lid,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"]
    return lid


def _new_launch_template_version(templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """BEFORE = the same stack with an older launch template version: what any node-script change
    or a newer DLAMI from the SSM lookup makes of an ordinary deploy."""
    before = copy.deepcopy(templates)
    group = before["Compute"]["Resources"][_group_lid(before["Compute"])]
    group["Properties"]["LaunchTemplate"]["Version"] = "1"
    return before


def test_group_carries_the_scheduled_action_update_policy(synth: Synth) -> None:
    _, after = _templates(synth)
    group = after["Compute"]["Resources"][_group_lid(after["Compute"])]
    assert group["UpdatePolicy"] == {"AutoScalingScheduledAction": {"IgnoreUnmodifiedGroupSizeProperties": True}}


def test_guard_warns_but_passes_a_routine_deploy_inside_the_block(synth: Synth) -> None:
    _, after = _templates(synth)
    findings = capacity_block_deploy_findings(_new_launch_template_version(after), after, INSIDE)
    assert len(findings) == 1
    blocking, line = findings[0]
    assert not blocking
    assert "runs 8 instances in its Capacity Block until 2027-01-17T10:50:00Z" in line
    assert "the deploy updates it (LaunchTemplate); the update policy keeps its size" in line


def test_guard_fails_a_deploy_without_the_update_policy_inside_the_block(synth: Synth) -> None:
    """The template as fminfra wrote it before it set an UpdatePolicy: CloudFormation would
    set the running group back to 0/8/0."""
    _, after = _templates(synth)
    del after["Compute"]["Resources"][_group_lid(after["Compute"])]["UpdatePolicy"]
    findings = capacity_block_deploy_findings(_new_launch_template_version(after), after, INSIDE)
    assert findings == [
        (
            True,
            f"Compute: {_group_lid(after['Compute'])} (AWS::AutoScaling::AutoScalingGroup) runs 8 instances in its Capacity Block "
            "until 2027-01-17T10:50:00Z: the deploy updates it without the AutoScalingScheduledAction update policy, "
            "so CloudFormation sets min/max/desired back to 0/8/0 and terminates its nodes",
        )
    ]


def test_guard_fails_a_size_change_inside_the_block(synth: Synth) -> None:
    _, after = _templates(synth)
    before = copy.deepcopy(after)
    after["Compute"]["Resources"][_group_lid(after["Compute"])]["Properties"]["MaxSize"] = "4"
    ((blocking, line),) = capacity_block_deploy_findings(before, after, INSIDE)
    assert blocking and "the deploy changes MaxSize 8 -> 4, which Auto Scaling applies at once" in line


def test_guard_says_nothing_outside_the_block_or_when_the_group_is_untouched(synth: Synth) -> None:
    _, after = _templates(synth)
    before = _new_launch_template_version(after)
    assert capacity_block_deploy_findings(before, after, BEFORE_BLOCK) == []
    assert capacity_block_deploy_findings(before, after, IN_DRAIN) == []
    assert capacity_block_deploy_findings(copy.deepcopy(after), after, INSIDE) == []


def test_plan_says_when_a_deploy_touches_a_running_block_group() -> None:
    cfg = load_config(EXAMPLE)
    assert capacity_block_deploy_notes(cfg, BEFORE_BLOCK) == []
    (note,) = capacity_block_deploy_notes(cfg, INSIDE)
    assert note.startswith("block: its Capacity Block runs now (until 2027-01-17T11:30:00Z); a deploy keeps its 8 instances")
    # A count change inside the block puts BlockStart again in the past (docs/facts/capacity.md#asg-scheduled-action-past-and-run).
    assert note.endswith("a changed count fails the deploy (BlockStart would be put again with its start in the past; docs/capacity.md)")
    assert f"WARN deploy: {note}" in plan_warnings(cfg, now=INSIDE)
    assert not [line for line in plan_warnings(cfg, now=BEFORE_BLOCK) if line.startswith("WARN deploy:")]


def test_plan_warns_that_a_windowless_block_group_is_reset_by_a_deploy() -> None:
    cfg = load_config(ROOT / "tests" / "configs" / "capacity-ec2.yaml")
    notes = capacity_block_deploy_notes(cfg, INSIDE)
    # capacity-ec2's Capacity Block group gives no window.
    assert [n.split(":")[0] for n in notes] == ["blocks"]
    assert "sets it back to 0 instances" in notes[0]


def test_guard_command_fails_a_deploy_that_resets_a_running_block_group(
    synth: Synth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line: `guard --baseline BEFORE --templates AFTER` prints the Capacity Block
    line and exits 1. The block's window is moved around the real current time."""
    import json

    from fminfra.cli.main import main

    _, after = _templates(synth)
    now = datetime.now(UTC)
    for res in after["Compute"]["Resources"].values():
        if res["Type"] == "AWS::AutoScaling::ScheduledAction":
            when = now - timedelta(days=1) if res["Properties"]["DesiredCapacity"] else now + timedelta(days=1)
            res["Properties"]["StartTime"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    before = _new_launch_template_version(after)
    del after["Compute"]["Resources"][_group_lid(after["Compute"])]["UpdatePolicy"]
    for folder, templates in (("before", before), ("after", after)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "Compute.template.json").write_text(json.dumps(templates["Compute"]))
    assert main(["guard", "--baseline", str(tmp_path / "before"), "--templates", str(tmp_path / "after")]) == 1
    out = capsys.readouterr().out
    assert "FAIL Compute: " in out and "sets min/max/desired back to 0/8/0 and terminates its nodes" in out
