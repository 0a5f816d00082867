"""The HyperPod dependency Helm chart, installed at deploy time as AWS requires for a HyperPod
cluster on EKS set up through the APIs (docs/facts/hyperpod.md#hyperpod-eks-helm-chart-required).

A custom resource whose Lambda (in the VPC, through the NAT, with the kubectl layer's helm)
downloads `helm_chart/HyperPodHelmChart` of aws/sagemaker-hyperpod-cli at a pinned commit and
installs it as one release in `kube-system` with the chart's defaults plus the values given (the
health-monitoring agent's region). The handler is `dependencies_handler/index.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.hyperpod.rules import COMMIT, NAT_SUBNETS_PROBLEM
from fminfra.policy.constructs.acknowledge import acknowledge, drop_redundant_role_dependency

HANDLER_DIR = Path(__file__).parent / "dependencies_handler"
# AWS's guide: repository, chart folder, release name, namespace (docs/facts/hyperpod.md#hyperpod-eks-helm-chart-required).
REPOSITORY = "aws/sagemaker-hyperpod-cli"
CHART_PATH = "helm_chart/HyperPodHelmChart"
RELEASE = "hyperpod-dependencies"
NAMESPACE = "kube-system"
RESOURCE_TYPE = "Custom::HyperPodDependencies"


@dataclass(frozen=True, kw_only=True)
class HyperPodDependenciesProps:
    """Props of `HyperPodDependencies`.

    cluster: the EKS cluster (its API endpoint must be reachable from `subnets`).
    subnets: private subnets with a route to the internet (NAT): the Lambda reaches the private
      endpoint, GitHub (codeload.github.com) and the chart repositories the chart pins.
    kubectl_layer: CDK's kubectl/helm layer for the cluster's Kubernetes version (helm at /opt/helm/helm).
    commit: the 40-hex commit of `repository` to install from.
    values: Helm values on top of the chart's defaults (JSON-serializable).
    repository, chart_path, release, namespace: default AWS's (see the module constants).
    """

    cluster: eks.Cluster
    subnets: Sequence[ec2.ISubnet]
    kubectl_layer: lambda_.ILayerVersion
    commit: str
    values: Mapping[str, object] = field(default_factory=dict)
    repository: str = REPOSITORY
    chart_path: str = CHART_PATH
    release: str = RELEASE
    namespace: str = NAMESPACE


def vpc_lambda_role(scope: Construct, description: str, who: str) -> iam.Role:
    """`Role` in scope: the role of a Lambda function in the cluster's private subnets, with the AWS
    managed policies for its logs and its network interfaces (acknowledged as such), nothing else yet."""
    names = ("AWSLambdaBasicExecutionRole", "AWSLambdaVPCAccessExecutionRole")
    role = iam.Role(
        scope,
        "Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(f"service-role/{n}") for n in names],
        description=description,
    )
    for name in names:
        acknowledge(
            role,
            f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{name}]",
            f"{who} runs in the private subnets: these AWS managed policies only let it write its logs and attach its ENIs",
        )
    return role


class HyperPodDependencies(Construct):
    """Installs the HyperPod dependency chart at deploy time; `resource` is the custom resource
    (make the HyperPod cluster depend on it). Attributes: `function`, `role`, `access_entry`, `resource`."""

    def __init__(self, scope: Construct, construct_id: str, props: HyperPodDependenciesProps) -> None:
        super().__init__(scope, construct_id)
        if problem := COMMIT.problem(props.commit):
            raise ValidationError(f"commit {problem}")
        if not props.subnets:
            raise ValidationError(NAT_SUBNETS_PROBLEM)
        cluster = props.cluster
        self.role = vpc_lambda_role(self, "Installs the HyperPod dependency Helm chart into the EKS cluster", "The installer Lambda")
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn]))
        # Cluster admin inside Kubernetes: the chart creates namespaces, CRDs, cluster roles and DaemonSets.
        self.access_entry = eks.AccessEntry(
            self,
            "AccessEntry",
            cluster=cluster,  # type: ignore[arg-type]  # jsii's Python stubs miss kubectl_provider_options on Cluster
            principal=self.role.role_arn,
            access_policies=[
                eks.AccessPolicy.from_access_policy_name("AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)
            ],
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.X86_64,  # the kubectl layer's helm is an x86-64 binary
            handler="index.on_event",
            code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["__pycache__", "*.pyc", "__init__.py"]),
            layers=[props.kubectl_layer],
            role=self.role,
            timeout=cdk.Duration.minutes(15),
            memory_size=1024,
            ephemeral_storage_size=cdk.Size.mebibytes(2048),
            vpc=cluster.vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=list(props.subnets)),
            security_groups=[cluster.cluster_security_group],
            description=f"Installs {props.repository}/{props.chart_path} as release {props.release} in {props.namespace}",
        )
        drop_redundant_role_dependency(self.function)
        self.resource = cdk.CustomResource(
            self,
            "Release",
            service_token=self.function.function_arn,
            resource_type=RESOURCE_TYPE,
            service_timeout=cdk.Duration.minutes(16),
            properties={
                "ClusterName": cluster.cluster_name,
                "Repository": props.repository,
                "Commit": props.commit,
                "ChartPath": props.chart_path,
                "Release": props.release,
                "Namespace": props.namespace,
                "Values": json.dumps(dict(props.values), sort_keys=True),  # a string: CloudFormation would turn scalars into strings
            },
        )
        self.resource.node.add_dependency(self.access_entry)
        # The role's policy (DescribeCluster) must exist before the first invocation.
        policy = self.role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            self.resource.node.add_dependency(policy)
