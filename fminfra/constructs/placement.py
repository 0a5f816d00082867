"""Cluster placement groups for GPU instances that talk over EFA."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct


@dataclass(frozen=True, kw_only=True)
class ClusterPlacementGroupProps:
    """Props of `ClusterPlacementGroup`.

    group_name: the physical name; include the environment name so that environments sharing an
      account do not collide.
    """

    group_name: str


class ClusterPlacementGroup(Construct):
    """Creates an EC2 placement group with the `cluster` strategy (one AZ, low-latency network).

    Attributes: `placement_group` (the L2), `group_name`, `group_arn`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: ClusterPlacementGroupProps) -> None:
        super().__init__(scope, construct_id)
        self.placement_group = ec2.PlacementGroup(
            self, "Group", placement_group_name=props.group_name, strategy=ec2.PlacementGroupStrategy.CLUSTER
        )
        self.group_name = self.placement_group.placement_group_name
        self.group_arn = cdk.Stack.of(self).format_arn(service="ec2", resource="placement-group", resource_name=self.group_name)
