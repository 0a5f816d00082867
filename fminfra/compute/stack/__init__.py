"""Compute stack: GPU capacity and the clusters that use it (consumes every other stack)."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra import catalog
from fminfra.capacity.constructs.capacity_reservation import (
    CapacityReservationGroup,
    CapacityReservationGroupProps,
    OnDemandCapacityReservation,
    OnDemandCapacityReservationProps,
)
from fminfra.capacity.rules import DRAIN_HOOK_NAME, drain_budget_seconds, reclaim_time, utc_timestamp
from fminfra.compute.constructs.gpu_auto_scaling_group import GpuAutoScalingGroup, GpuAutoScalingGroupProps
from fminfra.compute.constructs.launch_template import (
    ROOT_DEVICE_UBUNTU,
    CapacityReservationTarget,
    EfaLaunchTemplate,
    EfaLaunchTemplateProps,
)
from fminfra.compute.constructs.node_bootstrap import NodeBootstrap, NodeBootstrapProps
from fminfra.compute.constructs.node_role import NodeRole, NodeRoleProps
from fminfra.compute.constructs.placement import ClusterPlacementGroup, ClusterPlacementGroupProps
from fminfra.compute.stack.clusters import FsxMount, add_clusters
from fminfra.config import EnvironmentConfig, InferenceNodeGroupConfig, InstanceGroupConfig
from fminfra.eks.constructs.extensions import EksExtension
from fminfra.network.stack import NetworkStack
from fminfra.observability.stack import ObservabilityStack
from fminfra.storage.stack import StorageStack

# AWS Deep Learning Base OSS AMI (Ubuntu 22.04: NVIDIA driver, CUDA, EFA, aws-ofi-nccl), resolved
# at deploy time from its public SSM parameter, so synth makes no AWS call (docs/facts/node-software.md#dlami-ssm-parameter).
DLAMI_SSM_PARAMETER = "/aws/service/deeplearning/ami/{arch}/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
DEFAULT_ROOT_VOLUME_GIB = 500


class ComputeStack(cdk.Stack):
    """Cluster placement groups, capacity, launch templates and the training/inference clusters.

    Short-lived relative to Network and Storage: it imports from them and exports nothing they use.
    Attributes: `node_role`, `placement_groups`, `capacity_reservations` (ODCRs),
    `reservation_groups`, `capacity_targets` (what a group's launch template targets; inference
    node groups use it too), and for the ec2 path `launch_templates`, `auto_scaling_groups`; all
    by group name.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cfg: EnvironmentConfig,
        network: NetworkStack,
        observability: ObservabilityStack | None = None,
        storage: StorageStack | None = None,
        data_bucket: s3.IBucket | None = None,
        eks_extensions: Sequence[EksExtension] = (),
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
        # The nodes' Prometheus agent remote-writes to AMP: aps:RemoteWrite on that workspace only.
        self.remote_write_url: str | None = None
        if observability is not None and observability.prometheus is not None:
            observability.prometheus.grant_remote_write(self.node_role)
            self.remote_write_url = observability.prometheus.remote_write_url
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
                    ClusterPlacementGroupProps(name_tag=cfg.physical_name(group.name)),
                )

        # Reserved capacity of ec2 groups and inference node groups (HyperPod cannot use EC2
        # reservations; its groups take training plans, which the HyperPod cluster references).
        self.capacity_reservations: dict[str, OnDemandCapacityReservation] = {}
        self.reservation_groups: dict[str, CapacityReservationGroup] = {}
        self.capacity_targets: dict[str, CapacityReservationTarget] = {}
        for group in groups:
            target = self._capacity_target(group)
            if target is not None:
                self.capacity_targets[group.name] = target

        self.launch_templates: dict[str, EfaLaunchTemplate] = {}
        self.auto_scaling_groups: dict[str, GpuAutoScalingGroup] = {}
        if cfg.compute.orchestrator == "ec2":
            self._ec2_groups()

        # HyperPod (Slurm or EKS), the EKS cluster and the inference node groups.
        fsx = (
            FsxMount(
                dns_name=storage.dns_name,
                mount_name=storage.mount_name,
                file_system_id=storage.file_system_id,
                security_group=storage.security_group,
                efa_enabled=storage.file_system.efa_enabled,
            )
            if storage is not None
            else None
        )
        self.clusters = add_clusters(
            self,
            cfg=cfg,
            network=network,
            placement_groups=self.placement_groups,
            node_role=self.node_role,
            fsx=fsx,
            data_bucket=data_bucket,
            capacity_targets=self.capacity_targets,
            remote_write_url=self.remote_write_url,
            prometheus=observability.prometheus if observability is not None else None,
            extensions=eks_extensions,
        )

    def _capacity_target(self, group: InstanceGroupConfig | InferenceNodeGroupConfig) -> CapacityReservationTarget | None:
        cap = group.capacity
        if cap.type == "odcr":
            count = group.count if isinstance(group, InstanceGroupConfig) else group.max_size
            pg = self.placement_groups.get(group.name)
            odcr = OnDemandCapacityReservation(
                self,
                f"CapacityReservation-{group.name}",
                OnDemandCapacityReservationProps(
                    instance_type=group.instance_type,
                    instance_count=count,
                    availability_zone_id=self.cfg.network.compute_az_id,
                    placement_group=pg.placement_group if pg else None,
                    end_date=cap.end_date,
                    reservation_name=self.cfg.physical_name(group.name),
                ),
            )
            self.capacity_reservations[group.name] = odcr
            return CapacityReservationTarget(reservation_id=odcr.reservation_id)
        if cap.type in ("reservation", "capacity-block"):
            ids = cap.reservation_ids or []
            block = cap.type == "capacity-block"
            if len(ids) == 1:
                return CapacityReservationTarget(reservation_id=ids[0], capacity_block=block)
            rg = CapacityReservationGroup(
                self,
                f"ReservationGroup-{group.name}",
                CapacityReservationGroupProps(group_name=self.cfg.physical_name(group.name, "reservations"), reservation_ids=ids),
            )
            self.reservation_groups[group.name] = rg
            return CapacityReservationTarget(resource_group_arn=rg.group_arn, capacity_block=block)
        return None

    def node_environment(self, kind: str) -> dict[str, str]:
        """Settings the node scripts read (bootstrap, exporters): region, node kind, remote write."""
        env = {"FMINFRA_AWS_REGION": self.cfg.region, "FMINFRA_NODE_KIND": kind}
        if self.remote_write_url is not None:
            env["FMINFRA_REMOTE_WRITE_URL"] = self.remote_write_url
        return env

    def _bootstrap_user_data(self, group_name: str, instance_type: str, extra_env: dict[str, str] | None = None) -> ec2.UserData:
        """User data that fetches the node scripts (a CDK asset) and runs bootstrap.sh on them."""
        bootstrap = NodeBootstrap(
            self,
            f"NodeBootstrap-{group_name}",
            NodeBootstrapProps(instance_type=instance_type, environment={**self.node_environment("worker"), **(extra_env or {})}),
        )
        bootstrap.grant_read(self.node_role)
        user_data = ec2.UserData.for_linux()
        bootstrap.add_to_user_data(user_data)
        return user_data

    def _drain_environment(self, group: InstanceGroupConfig) -> dict[str, str]:
        """What the node's drain handler needs (scripts/node/drain_on_terminate.sh): the group and
        hook it completes, how long it may hold the instance, and, with a known window, the time
        EC2 starts reclaiming the block, which the drain never passes."""
        cap = group.capacity
        if cap.type != "capacity-block":
            return {}
        env = {
            "FMINFRA_DRAIN_GROUP": self.cfg.physical_name(group.name),
            "FMINFRA_DRAIN_HOOK": DRAIN_HOOK_NAME,
            "FMINFRA_DRAIN_SECONDS": str(int(cap.drain.total_seconds())),
            "FMINFRA_DRAIN_BUDGET_SECONDS": str(drain_budget_seconds(cap.drain)),
        }
        if cap.ends_at is not None:
            env["FMINFRA_DRAIN_NOT_AFTER"] = utc_timestamp(reclaim_time(cap.ends_at))
        return env

    def _ec2_groups(self) -> None:
        """The ec2 path: one Auto Scaling group per training group, from its EfaLaunchTemplate."""
        cfg = self.cfg
        # Nodes are reached through SSM Session Manager (the node role's managed policy): no SSH keys.
        profile = iam.InstanceProfile(
            self, "NodeInstanceProfile", role=self.node_role, instance_profile_name=cfg.physical_name("node", cfg.region)
        )
        for group in cfg.compute.instance_groups:
            spec = catalog.get(group.instance_type)
            pg = self.placement_groups.get(group.name)
            target = self.capacity_targets.get(group.name)
            lt = EfaLaunchTemplate(
                self,
                f"LaunchTemplate-{group.name}",
                EfaLaunchTemplateProps(
                    instance_type=spec.name,
                    efa_security_group=self.network.efa_security_group,
                    image=ec2.MachineImage.from_ssm_parameter(DLAMI_SSM_PARAMETER.format(arch=spec.architecture)),
                    instance_profile=profile,
                    root_volume_gib=group.root_volume_gib or DEFAULT_ROOT_VOLUME_GIB,
                    root_device_name=ROOT_DEVICE_UBUNTU,
                    capacity=target,
                    placement_group=pg.placement_group if pg else None,
                    threads_per_core=group.threads_per_core if spec.vcpus is not None else None,
                    user_data=self._bootstrap_user_data(group.name, spec.name, self._drain_environment(group)),
                    launch_template_name=cfg.physical_name(group.name),
                ),
            )
            self.launch_templates[group.name] = lt
            block = group.capacity.type == "capacity-block"
            self.auto_scaling_groups[group.name] = GpuAutoScalingGroup(
                self,
                f"AutoScalingGroup-{group.name}",
                GpuAutoScalingGroupProps(
                    launch_template=lt,
                    subnet=self.network.compute_subnet,
                    count=group.count,
                    capacity_block=block,
                    block_starts_at=group.capacity.starts_at if block else None,
                    block_ends_at=group.capacity.ends_at if block else None,
                    drain=group.capacity.drain,
                    group_name=cfg.physical_name(group.name),
                ),
            )
            if block:
                self.auto_scaling_groups[group.name].grant_complete_drain(self.node_role)
