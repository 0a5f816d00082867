"""SageMaker HyperPod cluster (`AWS::SageMaker::Cluster`): typed, validated instance groups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from fminfra import catalog
from fminfra.core.errors import ValidationError
from fminfra.core.regional import CDK_VALIDATE_RULE, cdk_validate_acknowledged
from fminfra.hyperpod.rules import (
    AUTOSCALER_KMS_ACTIONS,
    AUTOSCALER_KMS_GRANT_OPERATIONS,
    AUTOSCALER_KMS_VIA_SERVICE,
    AUTOSCALER_NODE_ACTIONS,
    AUTOSCALER_PRINCIPAL,
    AUTOSCALER_TYPE,
    AUTOSCALING_MAX_GROUPS,
    AUTOSCALING_MODE,
    AUTOSCALING_NODE_RECOVERY,
    CONNECTIVITY_MIN_INSTANCES,
    MAX_INSTANCES,
    NAME,
    NODE_PROVISIONING_MODE,
    autoscaled_group_problems,
    hyperpod_instance_types,
    not_a_group_problem,
)
from fminfra.policy.constructs.acknowledge import acknowledge, nag_text

# The deep health checks the CloudFormation schema (cfn-lint 1.58) accepts.
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
NODE_RECOVERY = ("Automatic", "None")


@dataclass(frozen=True, kw_only=True)
class HyperPodInstanceGroup:
    """One instance group.

    name: 1-63 letters, digits and hyphens (HyperPod's rule), unique in the cluster.
    instance_type: an `ml.` type SageMaker HyperPod supports (botocore's ClusterInstanceType).
    instance_count: 0-6758.
    threads_per_core: 1 (no hyper-threading) or 2. Default: 1.
    instance_storage_gib: an extra EBS volume per node, 1-16384 GiB. Default: none.
    deep_health_checks: checks run when nodes start, from InstanceStress, InstanceConnectivity
      (the latter needs instance_count of at least 2). Default: for GPU types of the catalog,
      InstanceStress, plus InstanceConnectivity when instance_count is 2 or more; none for other
      types.
    training_plan_arn: a SageMaker training plan the group runs on. Default: on-demand.
    """

    name: str
    instance_type: str
    instance_count: int
    threads_per_core: int = 1
    instance_storage_gib: int | None = None
    deep_health_checks: Sequence[str] | None = None
    training_plan_arn: str | None = None

    @property
    def effective_deep_health_checks(self) -> list[str]:
        if self.deep_health_checks is not None:
            return list(self.deep_health_checks)
        if catalog.normalize_instance_type(self.instance_type) not in catalog.CATALOG:
            return []
        return [c for c in DEEP_HEALTH_CHECKS if c != "InstanceConnectivity" or self.instance_count >= CONNECTIVITY_MIN_INSTANCES]


@dataclass(frozen=True, kw_only=True)
class HyperPodClusterProps:
    """Props of `HyperPodCluster`.

    cluster_name: 1-63 letters, digits and hyphens; include the environment name.
    instance_groups: at least one.
    execution_role: the role every instance group's nodes run as; it must carry the managed
      policy AmazonSageMakerClusterInstanceRolePolicy (see `NodeRole`).
    subnets: the subnets of the nodes (1-16); for EFA, the one compute subnet.
    security_groups: 1-5; for EFA, include the EFA security group.
    lifecycle_source_s3_uri: the S3 prefix holding the unpacked lifecycle scripts.
    lifecycle_entry_script: the script HyperPod runs on creation (LifeCycleConfig.OnCreate).
    eks_cluster_arn: orchestrate with this EKS cluster. Default: Slurm (classic mode, configured
      by the lifecycle scripts from provisioning_parameters.json).
    node_recovery: Automatic or None. Default: Automatic.
    autoscaled_groups: instance groups HyperPod's managed autoscaling scales (1-10, each at count 0,
      without training plan or deep health checks): sets AutoScaling (Karpenter),
      NodeProvisioningMode Continuous and ClusterRole, a role for the autoscaler; EKS only, with
      node_recovery Automatic (docs/facts/hyperpod.md#hyperpod-autoscaling-prerequisites).
      Default: none (no autoscaling).
    """

    cluster_name: str
    instance_groups: Sequence[HyperPodInstanceGroup]
    execution_role: iam.IRole
    subnets: Sequence[ec2.ISubnet]
    security_groups: Sequence[ec2.ISecurityGroup]
    lifecycle_source_s3_uri: str
    lifecycle_entry_script: str = "on_create.sh"
    eks_cluster_arn: str | None = None
    node_recovery: str = "Automatic"
    autoscaled_groups: Sequence[str] = ()


def _check_name(field: str, value: str) -> None:
    if problem := NAME.problem(value):
        raise ValidationError(f"{field} {problem}")


def _check_group(index: int, group: HyperPodInstanceGroup) -> None:
    where = f"instance_groups[{index}]"
    _check_name(f"{where}.name", group.name)
    if group.instance_type not in hyperpod_instance_types():
        raise ValidationError(
            f"{where}.instance_type must be an ml. type SageMaker HyperPod supports (botocore ClusterInstanceType), got {group.instance_type!r}"
        )
    if not 0 <= group.instance_count <= MAX_INSTANCES:
        raise ValidationError(f"{where}.instance_count must be 0-{MAX_INSTANCES}, got {group.instance_count}")
    if group.threads_per_core not in (1, 2):
        raise ValidationError(f"{where}.threads_per_core must be 1 or 2, got {group.threads_per_core}")
    if group.instance_storage_gib is not None and not 1 <= group.instance_storage_gib <= 16384:
        raise ValidationError(f"{where}.instance_storage_gib must be 1-16384, got {group.instance_storage_gib}")
    unknown = [c for c in group.effective_deep_health_checks if c not in DEEP_HEALTH_CHECKS]
    if unknown:
        raise ValidationError(f"{where}.deep_health_checks must be among {', '.join(DEEP_HEALTH_CHECKS)}, got {', '.join(unknown)}")
    if "InstanceConnectivity" in group.effective_deep_health_checks and group.instance_count < CONNECTIVITY_MIN_INSTANCES:
        raise ValidationError(
            f"{where}.deep_health_checks: InstanceConnectivity runs NCCL tests across nodes and needs instance_count of at least "
            f"{CONNECTIVITY_MIN_INSTANCES}, got {group.instance_count}"
        )


class HyperPodCluster(Construct):
    """Creates a SageMaker HyperPod cluster: its instance groups with lifecycle scripts, deep
    health checks and training plans, node recovery, and the VPC config of the nodes.

    Attributes: `cluster` (the L1), `cluster_name`, `cluster_arn`, `execution_role`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: HyperPodClusterProps) -> None:
        super().__init__(scope, construct_id)
        _check_name("cluster_name", props.cluster_name)
        if not props.instance_groups:
            raise ValidationError("instance_groups must list at least one group, got none", path="instance_groups")
        for i, group in enumerate(props.instance_groups):
            _check_group(i, group)
        names = [g.name for g in props.instance_groups]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValidationError(f"instance group names must be unique, repeated: {', '.join(repeated)}")
        if props.node_recovery not in NODE_RECOVERY:
            raise ValidationError(f"node_recovery must be Automatic or None, got {props.node_recovery!r}", path="node_recovery")
        if not 1 <= len(props.subnets) <= 16:
            raise ValidationError(f"subnets must list 1-16 subnets, got {len(props.subnets)}", path="subnets")
        if not 1 <= len(props.security_groups) <= 5:
            raise ValidationError(f"security_groups must list 1-5 groups, got {len(props.security_groups)}", path="security_groups")
        _check_autoscaling(props)
        uri = props.lifecycle_source_s3_uri
        if not cdk.Token.is_unresolved(uri) and not uri.startswith("s3://"):
            raise ValidationError(f"lifecycle_source_s3_uri must be an s3:// prefix, got {uri!r}", path="lifecycle_source_s3_uri")

        self.execution_role = props.execution_role
        life_cycle = sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(source_s3_uri=uri, on_create=props.lifecycle_entry_script)
        groups = []
        for group in props.instance_groups:
            checks = group.effective_deep_health_checks
            groups.append(
                sagemaker.CfnCluster.ClusterInstanceGroupProperty(
                    instance_group_name=group.name,
                    instance_type=group.instance_type,
                    instance_count=group.instance_count,
                    execution_role=props.execution_role.role_arn,
                    life_cycle_config=life_cycle,
                    threads_per_core=group.threads_per_core,
                    instance_storage_configs=[
                        sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                            ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                                volume_size_in_gb=group.instance_storage_gib
                            )
                        )
                    ]
                    if group.instance_storage_gib
                    else None,
                    on_start_deep_health_checks=checks or None,
                    training_plan_arn=group.training_plan_arn,
                )
            )
        orchestrator = (
            sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=props.eks_cluster_arn)
            )
            if props.eks_cluster_arn
            else None
        )
        # The autoscaler's role (docs/facts/hyperpod.md#hyperpod-autoscaling-cluster-role); None without autoscaling.
        self.autoscaler_role = _autoscaler_role(self) if props.autoscaled_groups else None
        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=props.cluster_name,
            instance_groups=groups,
            node_recovery=props.node_recovery,
            orchestrator=orchestrator,
            auto_scaling=sagemaker.CfnCluster.ClusterAutoScalingConfigProperty(mode=AUTOSCALING_MODE, auto_scaler_type=AUTOSCALER_TYPE)
            if self.autoscaler_role is not None
            else None,
            node_provisioning_mode=NODE_PROVISIONING_MODE if self.autoscaler_role is not None else None,
            cluster_role=self.autoscaler_role.role_arn if self.autoscaler_role is not None else None,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                subnets=[s.subnet_id for s in props.subnets],
                security_group_ids=[g.security_group_id for g in props.security_groups],
            ),
        )
        # The CDK's own template validator refuses some types in regions where cfn-lint's newer list, fminfra's
        # source (validate refuses the rest first), offers them: acknowledge its finding with that source
        # (docs/facts/hyperpod.md#cdk-validate-hyperpod-instance-types).
        region = cdk.Stack.of(self).region
        acknowledged = (
            [] if cdk.Token.is_unresolved(region) else cdk_validate_acknowledged(region, [g.instance_type for g in props.instance_groups])
        )
        if acknowledged:
            cdk.Validations.of(self.cluster).acknowledge(
                cdk.Acknowledgment(
                    id=CDK_VALIDATE_RULE,
                    reason=f"{', '.join(acknowledged)} in {region}: cfn-lint 1.58's HyperPod list for the region (from the AWS "
                    "price list) offers it; the CDK validator's regional data is older",
                )
            )
        # The role's inline policy (lifecycle read, logs) must exist before nodes start; the
        # role itself is already a dependency through its ARN.
        policy = props.execution_role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            self.cluster.node.add_dependency(policy)
        if self.autoscaler_role is not None:
            # the autoscaler's policy before the cluster that starts the autoscaler
            self.cluster.node.add_dependency(self.autoscaler_role.node.find_child("DefaultPolicy"))
        self.cluster_name = props.cluster_name
        self.cluster_arn = self.cluster.attr_cluster_arn


def _check_autoscaling(props: HyperPodClusterProps) -> None:
    """HyperPod's managed autoscaling: EKS, node recovery Automatic, 1-10 groups of the cluster, each
    at 0 nodes, on demand, without deep health checks (docs/facts/hyperpod.md#hyperpod-autoscaling-node-class)."""
    names = list(props.autoscaled_groups)
    if not names:
        return
    if props.eks_cluster_arn is None:
        raise ValidationError(
            "autoscaled_groups: HyperPod's managed autoscaling needs an EKS orchestrator (eks_cluster_arn); Slurm has none"
        )
    if props.node_recovery != AUTOSCALING_NODE_RECOVERY:
        raise ValidationError(
            f"node_recovery must be {AUTOSCALING_NODE_RECOVERY} with autoscaled_groups, got {props.node_recovery!r}", path="node_recovery"
        )
    if len(names) > AUTOSCALING_MAX_GROUPS or len(set(names)) != len(names):
        raise ValidationError(
            f"autoscaled_groups must name 1-{AUTOSCALING_MAX_GROUPS} distinct groups, got {', '.join(names)}", path="autoscaled_groups"
        )
    groups = {g.name: g for g in props.instance_groups}
    for name in names:
        group = groups.get(name)
        if group is None:
            raise ValidationError(f"autoscaled_groups: {not_a_group_problem(name, list(groups))}")
        capacity = "training-plan" if group.training_plan_arn else "on-demand"
        problems = autoscaled_group_problems(name, group.instance_count, capacity, group.effective_deep_health_checks)
        if problems:
            raise ValidationError("; ".join(f"instance group {field}: {problem}" for field, problem in problems))


def _autoscaler_role(scope: Construct) -> iam.Role:
    """The role HyperPod's autoscaler assumes: AWS's documented policy with its resources narrowed to
    this stack's partition, region and account (docs/facts/hyperpod.md#hyperpod-autoscaling-cluster-role)."""
    stack = cdk.Stack.of(scope)
    clusters = stack.format_arn(service="sagemaker", resource="cluster", resource_name="*")
    keys = stack.format_arn(service="kms", resource="key", resource_name="*")
    role = iam.Role(
        scope,
        "AutoscalerRole",
        assumed_by=iam.ServicePrincipal(AUTOSCALER_PRINCIPAL),
        description="SageMaker HyperPod's managed Karpenter: adds and removes this account's HyperPod cluster nodes",
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ClusterNodes",
            actions=list(AUTOSCALER_NODE_ACTIONS),
            resources=[clusters],
            conditions={"StringEquals": {"aws:ResourceAccount": stack.account}},
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="VolumeKeyGrants",
            actions=list(AUTOSCALER_KMS_ACTIONS),
            resources=[keys],
            conditions={
                "StringLike": {"kms:ViaService": AUTOSCALER_KMS_VIA_SERVICE},
                "Bool": {"kms:GrantIsForAWSResource": "true"},
                "ForAllValues:StringEquals": {"kms:GrantOperations": list(AUTOSCALER_KMS_GRANT_OPERATIONS)},
            },
        )
    )
    policy = role.node.find_child("DefaultPolicy")
    reason = (
        "AWS's documented autoscaler policy (docs/facts/hyperpod.md#hyperpod-autoscaling-cluster-role), narrowed to this "
        "account and region: the cluster's ARN ends in an id SageMaker assigns at creation, after the role it needs; "
        "the keys are whatever volumes HyperPod launches use, granted only to SageMaker for AWS resources"
    )
    acknowledge(policy, f"IAM5[Resource::{nag_text(stack, clusters)}]", reason)
    acknowledge(policy, f"IAM5[Resource::{nag_text(stack, keys)}]", reason)
    return role
