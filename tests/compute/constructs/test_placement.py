"""`ClusterPlacementGroup`: Tags are create-only on AWS::EC2::PlacementGroup
(docs/facts/capacity.md#placement-group-tags-create-only), so the group carries only its Name
whatever the stage tags; an edited config tag then leaves the group, and what runs in it, alone."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template

from fminfra.compute.constructs.placement import ClusterPlacementGroup, ClusterPlacementGroupProps
from fminfra.ops.guard.replacements import schema_create_only


def _groups(tags: dict[str, str], name_tag: str | None = "dev-workers") -> list[dict[str, Any]]:
    app = cdk.App()
    stack = cdk.Stack(app, "S")
    for key, value in tags.items():
        cdk.Tags.of(stack).add(key, value)
    ClusterPlacementGroup(stack, "Pg", ClusterPlacementGroupProps(name_tag=name_tag))
    return [r["Properties"] for r in Template.from_stack(stack).find_resources("AWS::EC2::PlacementGroup").values()]


def test_tags_are_create_only_on_a_placement_group() -> None:
    assert "/properties/Tags" in schema_create_only("AWS::EC2::PlacementGroup")


def test_the_group_keeps_only_its_name_whatever_the_stage_tags() -> None:
    before = _groups({"team": "ml-platform", "fminfra:environment": "dev"})
    after = _groups({"team": "research", "cost-center": "42", "fminfra:environment": "dev"})
    assert before == after == [{"Strategy": "cluster", "Tags": [{"Key": "Name", "Value": "dev-workers"}]}]
    assert _groups({"team": "x"}, name_tag=None) == [{"Strategy": "cluster"}]


def test_the_check_sees_stage_tags_reach_a_plain_placement_group() -> None:
    """The test of the test: without the override, CDK's stage tags do reach the group."""
    app = cdk.App()
    stack = cdk.Stack(app, "S")
    cdk.Tags.of(stack).add("team", "ml-platform")
    cdk.aws_ec2.PlacementGroup(stack, "Plain", strategy=cdk.aws_ec2.PlacementGroupStrategy.CLUSTER)
    (props,) = [r["Properties"] for r in Template.from_stack(stack).find_resources("AWS::EC2::PlacementGroup").values()]
    assert {"Key": "team", "Value": "ml-platform"} in props["Tags"]
