"""HyperPod's rules: names, limits, and the instance types it accepts, from botocore's SageMaker model (no AWS call).

The shape `ClusterInstanceType` of the installed botocore is an enum of every `ml.` type a
HyperPod instance group takes; it moves with the pinned boto3 version.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import botocore.session

from fminfra.core.rules import Pattern

# HyperPod's rule for cluster, instance group, compute quota and cluster policy names (the schemas' pattern).
NAME = Pattern(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$", "1-63 letters, digits and hyphens, starting and ending with a letter or digit")
# Instances in one HyperPod cluster (AWS::SageMaker::Cluster's InstanceCount maximum).
MAX_INSTANCES = 6758
# InstanceConnectivity runs NCCL tests across nodes and needs at least 2
# (docs/facts/hyperpod.md#hyperpod-instance-connectivity-min-nodes).
CONNECTIVITY_MIN_INSTANCES = 2
# Team (compute quota) and priority class names. Task governance makes the namespace `hyperpod-ns-<team>` and the Kueue
# LocalQueue `hyperpod-ns-<team>-localqueue`, which jobs name in a label value (at most 63 characters): 1-40 lowercase
# letters, digits and hyphens, starting and ending with a letter or digit (docs/facts/hyperpod.md#hyperpod-task-governance-names,
# docs/facts/eks.md#kubernetes-label-syntax).
TEAM_NAME_MAX = 40
TEAM_NAME = Pattern(
    rf"^[a-z0-9]([-a-z0-9]{{0,{TEAM_NAME_MAX - 2}}}[a-z0-9])?$",
    f"1-{TEAM_NAME_MAX} lowercase letters, digits and hyphens, starting and ending with a letter or digit",
)
# A compute quota lists at most 15 instance types; a cluster policy at most 10 priority classes,
# each weighted 0-100 (docs/facts/hyperpod.md#hyperpod-compute-quota-schema).
QUOTA_MAX_INSTANCE_TYPES = 15
PRIORITY_CLASSES_MAX = 10
PRIORITY_WEIGHT_MAX = 100
# The Lambdas of HyperPodDependencies and HyperPodPlanDrain reach AWS's APIs (and GitHub) through a NAT.
NAT_SUBNETS_PROBLEM = "subnets must list at least one private subnet with a route to a NAT gateway, got none"
# The dependency chart's commit (HyperPodDependencies; its Lambda handler checks the same pattern, in its own folder).
COMMIT = Pattern(r"^[0-9a-f]{40}$", "a full 40-character lowercase hex commit")
# Regions with an image of HyperPod's health-monitoring agent; elsewhere the dependency chart pulls
# us-east-1's (docs/facts/hyperpod.md#hyperpod-health-monitoring-agent-region).
HEALTH_MONITORING_AGENT_REGIONS = (
    "us-east-1", "us-west-2", "us-east-2", "us-west-1", "eu-central-1", "eu-north-1", "eu-west-1", "eu-west-2", "eu-south-2",
    "ap-northeast-1", "ap-south-1", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ca-central-1", "sa-east-1",
)  # fmt: skip


@cache
def controller_gpu_problem(instance_type: str, gpus: int) -> str:
    """The Slurm controller on a GPU type: it runs slurmctld and no job, so its GPUs are paid for and never used."""
    return (
        f"{instance_type!r} is a GPU type ({gpus} GPUs); the Slurm controller runs slurmctld and no job, "
        "so use a CPU type such as ml.m5.12xlarge (the default) or ml.c5.4xlarge"
    )


@cache
def hyperpod_instance_types() -> frozenset[str]:
    """Every `ml.` instance type a HyperPod cluster instance group accepts (botocore's model, read once)."""
    model = botocore.session.get_session().get_service_model("sagemaker")
    return frozenset(model.shape_for("ClusterInstanceType").enum)


def is_hyperpod_instance_type(name: str) -> bool:
    return name in hyperpod_instance_types()


# What a cluster's execution role needs for its VpcConfig: SageMaker creates the nodes' network
# interfaces in the cluster's subnets and security groups, tags, detaches and deletes them; reads
# take no resource (docs/facts/iam.md#hyperpod-vpc-config-permissions).
VPC_CONFIG_READ_ACTIONS = (
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)
VPC_CONFIG_ENI_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DetachNetworkInterface",
)
ENI_TAG_ACTION = "ec2:CreateTags"
# On an EKS cluster the nodes also run the VPC CNI (IPs and ENIs of the node), pull images, get pod
# credentials from the Pod Identity agent, and read alarms: AWS's EKS execution role
# (docs/facts/iam.md#hyperpod-eks-execution-role-permissions, #eks-cni-policy-actions).
EKS_NODE_READ_ACTIONS = (
    "cloudwatch:DescribeAlarms",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeTags",
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetAuthorizationToken",
    "ecr:GetDownloadUrlForLayer",
)
EKS_NODE_ENI_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:AttachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
)
POD_IDENTITY_ACTION = "eks-auth:AssumeRoleForPodIdentity"


# The HyperPod EKS training-plan drain (`HyperPodPlanDrain`, its handler plan_drain_handler/index.py).
# It drains the training-plan groups of an EKS-orchestrated cluster; Slurm nodes drain themselves
# (scripts/node/drain_before_plan_end.sh). It runs every minute, as its handler's docstring says
# (docs/facts/eks.md#scheduler-lambda-templated-target). In Kubernetes it lists and patches the
# groups' nodes (cordon, uncordon), lists the pods of a node across namespaces, and creates evictions:
# the requests the handler sends, as the API server authorizes them (a GET without a name is `list`,
# PATCH `patch`, a POST to pods/NAME/eviction `create` on `pods/eviction`:
# docs/facts/eks.md#k8s-rbac-request-attributes); `get` on nodes beside them, for an operator's check.
PLAN_DRAIN_CAPACITY = "training-plan"
PLAN_DRAIN_SCHEDULE = "rate(1 minute)"
PLAN_DRAIN_RBAC_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
)


def plan_drained(orchestrator: str, capacity_type: str) -> bool:
    """Whether the HyperPod EKS plan drain drains a group: a training-plan group of a HyperPod
    cluster orchestrated by EKS."""
    return orchestrator == "eks" and capacity_type == PLAN_DRAIN_CAPACITY


# --- HyperPod's managed autoscaling (compute.eks.autoscaling; docs/compute.md#hyperpod-autoscaling) ---
# The CloudFormation values (docs/facts/hyperpod.md#hyperpod-autoscaling-api).
AUTOSCALING_MODE = "Enable"
AUTOSCALER_TYPE = "Karpenter"
NODE_PROVISIONING_MODE = "Continuous"
# Managed autoscaling needs node recovery Automatic (docs/facts/hyperpod.md#hyperpod-autoscaling-prerequisites).
AUTOSCALING_NODE_RECOVERY = "Automatic"
# The autoscaler's role: trusted by HyperPod, allowed to add and remove the cluster's nodes and to
# grant SageMaker the use of a volume's KMS key; no AWS managed policy covers it
# (docs/facts/hyperpod.md#hyperpod-autoscaling-cluster-role).
AUTOSCALER_PRINCIPAL = "hyperpod.sagemaker.amazonaws.com"
AUTOSCALER_NODE_ACTIONS = ("sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes")
AUTOSCALER_KMS_ACTIONS = ("kms:CreateGrant", "kms:DescribeKey")
AUTOSCALER_KMS_VIA_SERVICE = "sagemaker.*.amazonaws.com"
AUTOSCALER_KMS_GRANT_OPERATIONS = (
    "CreateGrant", "Decrypt", "DescribeKey", "GenerateDataKeyWithoutPlaintext", "ReEncryptTo", "ReEncryptFrom", "RetireGrant",
)  # fmt: skip
# The NodeClass and NodePool HyperPod's Karpenter reads; a NodeClass lists at most 10 instance groups
# (docs/facts/hyperpod.md#hyperpod-autoscaling-node-class).
NODE_CLASS_API = "karpenter.sagemaker.amazonaws.com/v1"
NODE_CLASS_KIND = "HyperpodNodeClass"
NODE_POOL_API = "karpenter.sh/v1"
AUTOSCALING_MAX_GROUPS = 10
AUTOSCALING_ONLY_EKS = (
    "HyperPod's managed autoscaling (Karpenter run by HyperPod, on continuous provisioning) is for HyperPod "
    "orchestrated by EKS only; allowed with orchestrator {orchestrator}: enabled false and no instance_groups"
)
AUTOSCALING_NEEDS_GROUPS = (
    f"name the HyperPod instance groups HyperPod's Karpenter scales: 1-{AUTOSCALING_MAX_GROUPS} groups of "
    f"compute.instance_groups (a NodeClass lists at most {AUTOSCALING_MAX_GROUPS})"
)
AUTOSCALING_GROUPS_WITHOUT_ENABLED = "lists instance groups but enabled is false; set enabled: true or drop the list"


def not_a_group_problem(name: str, allowed: Sequence[str]) -> str:
    """A name that is not one of the cluster's instance groups."""
    return f"{name!r} is not an instance group; allowed: {', '.join(allowed) or 'none'}"


def autoscaled_group_problems(name: str, count: int, capacity_type: str, deep_health_checks: Sequence[str] | None) -> list[tuple[str, str]]:
    """(field, problem) for an instance group HyperPod's Karpenter is to scale: it starts at 0 nodes,
    is on demand, and runs no deep health checks (docs/facts/hyperpod.md#hyperpod-autoscaling-node-class)."""
    problems = []
    if count != 0:
        problems.append(
            (
                "count",
                f"group {name!r} is scaled by HyperPod's Karpenter, which starts it at 0 nodes (and scales any others down to 0); set count: 0, got {count}",
            )
        )
    if capacity_type != "on-demand":
        problems.append(
            (
                "capacity.type",
                f"group {name!r}: HyperPod's Karpenter scales on-demand groups only (not a training plan); allowed: on-demand, got {capacity_type}",
            )
        )
    if deep_health_checks:
        problems.append(
            (
                "deep_health_checks",
                f"group {name!r}: HyperPod's Karpenter takes no group with deep health checks (60-90 minutes while pods wait); allowed: [] or unset, got {', '.join(deep_health_checks)}",
            )
        )
    return problems  # fmt: skip
