"""HyperPod's rules: names, limits, and the instance types it accepts, from botocore's SageMaker model (no AWS call).

The shape `ClusterInstanceType` of the installed botocore is an enum of every `ml.` type a
HyperPod instance group takes; it moves with the pinned boto3 version.
"""

from __future__ import annotations

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
