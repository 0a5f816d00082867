"""An EKS managed node group of GPU instances for serving models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from fminfra import catalog
from fminfra.core.errors import ValidationError
from fminfra.eks.rules import block_start_description
from fminfra.policy.constructs.acknowledge import acknowledge

# The AWS managed policies EKS documents as a node role's minimum.
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")


def acknowledge_node_policies(role: iam.IRole) -> None:
    """cdk-nag's IAM4 on a node role's managed policies, with the reason."""
    for name in NODE_POLICIES:
        acknowledge(
            role,
            f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]",
            "EKS documents these AWS managed policies as the node role minimum: join the cluster, run the VPC CNI, pull images",
        )


_EFFECTS = {
    "NoSchedule": eks.TaintEffect.NO_SCHEDULE,
    "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NoExecute": eks.TaintEffect.NO_EXECUTE,
}
GPU_TAINT = ("nvidia.com/gpu", "true", "NoSchedule")


@dataclass(frozen=True, kw_only=True)
class InferenceNodeGroupProps:
    """Props of `InferenceNodeGroup`.

    cluster: the EKS cluster the nodes join.
    nodegroup_name: physical name; include the environment name. A change of a create-only
      property (instance type, disk size, subnets, ...) replaces the group and needs a new name
      (docs/facts/pipeline.md#cfn-schema-eks-nodegroup-create-only,
      docs/facts/pipeline.md#cloudformation-custom-name-replacement); `guard` says so.
    instance_type: a GPU type of the catalog (EC2 form, e.g. g6e.12xlarge, p5.48xlarge).
    min_size, desired_size, max_size: min <= desired <= max.
    subnets: where the nodes run (the compute subnet for EFA or placement groups).
    node_role: the role of the nodes. Default: a new role with the EKS worker, CNI and ECR
      read-only managed policies.
    labels: Kubernetes labels; `fminfra/gpu-type` is always added.
    taints: (key, value, effect) tuples. Default: the GPU taint nvidia.com/gpu=true:NoSchedule.
    root_volume_gib: root volume size; only without a launch template. Default: 200.
    launch_template: a launch template (e.g. `EfaLaunchTemplate` for EFA types) that sets the
      instance type itself (the node group then names none, as EKS requires). Default: none,
      the AMI's default networking (one ENA interface).
    capacity_block: the launch template targets a Capacity Block (node group capacity type
      CAPACITY_BLOCK). Default: false (on-demand).
    block_starts_at: the Capacity Block's start (time zone-aware; capacity_block only). The node
      group is then created at 0 nodes, and a one-time EventBridge Scheduler schedule (`BlockStart`)
      calls eks:UpdateNodegroupConfig at that time to set min/desired/max_size; EKS itself scales
      the group back to 0 forty minutes before the block ends
      (docs/facts/eks.md#eks-capacity-block-scaledown,
      docs/facts/eks.md#scheduler-universal-target-eks-update-nodegroup-config). Default: none
      (the group keeps desired_size from its creation, before the block too).
    """

    cluster: eks.ICluster
    nodegroup_name: str
    instance_type: str
    min_size: int
    desired_size: int
    max_size: int
    subnets: Sequence[ec2.ISubnet]
    node_role: iam.IRole | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[tuple[str, str, str]] | None = None
    root_volume_gib: int = 200
    launch_template: eks.LaunchTemplateSpec | None = None
    capacity_block: bool = False
    block_starts_at: datetime | None = None


def block_start_expression(starts_at: datetime) -> str:
    """The one-time schedule expression of a block's start: `at(yyyy-mm-ddThh:mm:ss)`, evaluated
    in UTC (docs/facts/eks.md#scheduler-one-time-schedule)."""
    return f"at({starts_at.astimezone(UTC):%Y-%m-%dT%H:%M:%S})"


class InferenceNodeGroup(Construct):
    """Creates a managed node group on the EKS-optimized accelerated AMI (AL2023 NVIDIA, or
    ARM64 NVIDIA for Graviton GPU types), with GPU labels and taints.

    Attributes: `nodegroup`, `node_role`, `block_start` (the start schedule, or None) and
    `block_start_role` (the role it calls EKS as, or None).
    """

    def __init__(self, scope: Construct, construct_id: str, props: InferenceNodeGroupProps) -> None:
        super().__init__(scope, construct_id)
        spec = catalog.get(props.instance_type)
        if not props.min_size <= props.desired_size <= props.max_size:
            raise ValidationError(
                f"sizes must satisfy min_size <= desired_size <= max_size, got {props.min_size} <= {props.desired_size} <= {props.max_size}",
                path="desired_size",
            )
        taints = list(props.taints) if props.taints is not None else [GPU_TAINT]
        for key, _, effect in taints:
            if effect not in _EFFECTS:
                raise ValidationError(f"taint {key!r}: effect must be one of {', '.join(_EFFECTS)}, got {effect!r}")
        if props.capacity_block and props.launch_template is None:
            raise ValidationError(
                "capacity_block needs a launch_template that targets the Capacity Block's reservation", path="capacity_block"
            )
        if not props.subnets:
            raise ValidationError("subnets must list at least one subnet, got none", path="subnets")
        if props.block_starts_at is not None:
            if not props.capacity_block:
                raise ValidationError(
                    "block_starts_at applies to Capacity Block node groups only (capacity_block=True)", path="block_starts_at"
                )
            if props.block_starts_at.tzinfo is None:
                raise ValidationError("block_starts_at must carry a time zone", path="block_starts_at")
            if props.desired_size == 0:
                raise ValidationError(
                    "block_starts_at needs desired_size 1 or more: the block's start would scale the group to 0", path="block_starts_at"
                )
        # With a known start the group waits at 0 and the start schedule sizes it; EKS scales it to
        # 0 again before the end, so each block's start needs its own call.
        scheduled = props.block_starts_at is not None
        self.node_role = props.node_role or iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(n) for n in NODE_POLICIES],
        )
        if props.node_role is None:
            acknowledge_node_policies(self.node_role)
        ami = eks.NodegroupAmiType.AL2023_ARM_64_NVIDIA if spec.architecture == "arm64" else eks.NodegroupAmiType.AL2023_X86_64_NVIDIA
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=props.cluster,
            nodegroup_name=props.nodegroup_name,
            instance_types=None if props.launch_template else [ec2.InstanceType(spec.name)],
            ami_type=ami,
            min_size=0 if scheduled else props.min_size,
            desired_size=0 if scheduled else props.desired_size,
            max_size=props.max_size,
            subnets=ec2.SubnetSelection(subnets=list(props.subnets)),
            node_role=self.node_role,
            labels={"fminfra/gpu-type": spec.name, **props.labels},
            taints=[eks.TaintSpec(key=k, value=v, effect=_EFFECTS[e]) for k, v, e in taints],
            disk_size=None if props.launch_template else props.root_volume_gib,
            launch_template_spec=props.launch_template,
            capacity_type=eks.CapacityType.CAPACITY_BLOCK if props.capacity_block else None,
        )
        self.block_start: scheduler.CfnSchedule | None = None
        self.block_start_role: iam.Role | None = None
        if props.block_starts_at is not None:
            self._block_start(props, props.block_starts_at)

    def _block_start(self, props: InferenceNodeGroupProps, starts_at: datetime) -> None:
        """The one-time schedule that sizes the node group at the block's start, and its role:
        assumed by EventBridge Scheduler for this account only, allowed UpdateNodegroupConfig on
        this node group only (docs/facts/eks.md#scheduler-execution-role)."""
        stack = cdk.Stack.of(self)
        self.block_start_role = iam.Role(
            self,
            "BlockStartRole",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}),
            description="EventBridge Scheduler: size one Capacity Block node group at the block's start",
        )
        self.block_start_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="SizeNodegroupAtBlockStart",
                actions=["eks:UpdateNodegroupConfig"],
                resources=[self.nodegroup.nodegroup_arn],
            )
        )
        # GetAtt NodegroupName, not Ref: the resource's Ref is its primary identifier, Id
        # (CloudFormation's AWS::EKS::Nodegroup schema), not the bare name the request needs.
        cfn_nodegroup = self.nodegroup.node.default_child
        assert isinstance(cfn_nodegroup, cdk.CfnResource)
        # Universal target: the request's members in the SDK's PascalCase
        # (docs/facts/eks.md#scheduler-universal-target-eks-update-nodegroup-config).
        request = {
            "ClusterName": props.cluster.cluster_name,
            "NodegroupName": cdk.Token.as_string(cfn_nodegroup.get_att("NodegroupName")),
            "ScalingConfig": {"MinSize": props.min_size, "MaxSize": props.max_size, "DesiredSize": props.desired_size},
        }
        self.block_start = scheduler.CfnSchedule(
            self,
            "BlockStart",
            description=block_start_description(props.nodegroup_name),
            schedule_expression=block_start_expression(starts_at),
            schedule_expression_timezone="UTC",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=f"arn:{stack.partition}:scheduler:::aws-sdk:eks:updateNodegroupConfig",
                role_arn=self.block_start_role.role_arn,
                input=stack.to_json_string(request),
            ),
        )
        # The role's policy must exist before the schedule can fire.
        policy = self.block_start_role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            self.block_start.node.add_dependency(policy)
