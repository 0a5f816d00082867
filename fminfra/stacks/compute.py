"""Compute stack: GPU capacity and the clusters that use it (consumes every other stack)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra.config import EnvironmentConfig, InferenceNodeGroupConfig, InstanceGroupConfig
from fminfra.constructs.node_role import NodeRole, NodeRoleProps
from fminfra.constructs.placement import ClusterPlacementGroup, ClusterPlacementGroupProps
from fminfra.stacks.hyperpod_eks import FsxMount, add_eks_and_hyperpod
from fminfra.stacks.network import NetworkStack
from fminfra.stacks.storage import StorageStack


class ComputeStack(cdk.Stack):
    """Cluster placement groups, capacity, launch templates and the training/inference clusters.

    Short-lived relative to Network and Storage: it imports from them and exports nothing they use.
    Attributes: `node_role`, `placement_groups` (by group name).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cfg: EnvironmentConfig,
        network: NetworkStack,
        storage: StorageStack | None = None,
        data_bucket: s3.IBucket | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.cfg = cfg
        self.network = network
        self.node_role = NodeRole(
            self,
            "NodeRole",
            NodeRoleProps(kind="hyperpod" if cfg.compute.hyperpod else "ec2", role_name=cfg.physical_name("node", cfg.region)),
        ).role
        cdk.CfnOutput(self, "NodeRoleArn", value=self.node_role.role_arn, description="Role the GPU nodes run as")
        self.placement_groups: dict[str, ClusterPlacementGroup] = {}
        groups: list[InstanceGroupConfig | InferenceNodeGroupConfig] = []
        if cfg.compute.orchestrator == "ec2":
            groups.extend(cfg.compute.instance_groups)
        groups.extend(cfg.compute.inference_node_groups)
        for group in groups:
            if cfg.compute.placement_of(group) == "cluster":
                self.placement_groups[group.name] = ClusterPlacementGroup(
                    self,
                    f"PlacementGroup-{group.name}",
                    ClusterPlacementGroupProps(group_name=cfg.physical_name(group.name)),
                )
        # HyperPod (Slurm or EKS), the EKS cluster and the inference node groups.
        fsx = FsxMount(dns_name=storage.dns_name, mount_name=storage.mount_name) if storage is not None else None
        self.orchestration = add_eks_and_hyperpod(
            self, cfg=cfg, network=network, placement_groups=self.placement_groups, fsx=fsx, data_bucket=data_bucket
        )
