"""Instance types SageMaker HyperPod accepts, from botocore's SageMaker model (no AWS call).

The shape `ClusterInstanceType` of the installed botocore is an enum of every `ml.` type a
HyperPod instance group takes; it moves with the pinned boto3 version.
"""

from __future__ import annotations

from functools import cache

import botocore.session


@cache
def hyperpod_instance_types() -> frozenset[str]:
    """Every `ml.` instance type a HyperPod cluster instance group accepts."""
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
