"""Cluster placement groups for GPU instances that talk over EFA."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct


@dataclass(frozen=True, kw_only=True)
class ClusterPlacementGroupProps:
    """Props of `ClusterPlacementGroup`.

    name_tag: value of the group's `Name` tag, to find it in the console; include the environment
      name. The group gets no `GroupName` (read-only in the AWS::EC2::PlacementGroup schema, though AWS
      says a template may set it); EC2 generates the name, which `group_name` reads
      (docs/facts/capacity.md#placement-group-name-generated).
      Default: no Name tag.
    """

    name_tag: str | None = None


class ClusterPlacementGroup(Construct):
    """Creates an EC2 placement group with the `cluster` strategy (one AZ, low-latency network).

    Attributes (all resolved at deploy time, as EC2 generates them): `placement_group` (the L2),
    `group_name` (the generated name, what launches reference), `group_id`, `group_arn`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: ClusterPlacementGroupProps | None = None) -> None:
        super().__init__(scope, construct_id)
        props = props or ClusterPlacementGroupProps()
        self.placement_group = ec2.PlacementGroup(self, "Group", strategy=ec2.PlacementGroupStrategy.CLUSTER)
        cfn = self.placement_group.node.default_child
        assert isinstance(cfn, ec2.CfnPlacementGroup)
        # Tags are create-only on a placement group (docs/facts/capacity.md#placement-group-tags-create-only):
        # an edited stage or config tag would replace the group under running nodes. So it carries
        # only its Name, whatever tags reach it from the stage.
        if props.name_tag:
            cfn.add_property_override("Tags", [{"Key": "Name", "Value": props.name_tag}])
        else:
            cfn.add_property_deletion_override("Tags")
        self.group_name: str = self.placement_group.placement_group_name
        self.group_id: str = cfn.attr_group_id
        self.group_arn: str = cdk.Stack.of(self).format_arn(service="ec2", resource="placement-group", resource_name=self.group_name)
