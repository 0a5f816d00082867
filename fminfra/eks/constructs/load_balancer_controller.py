"""The AWS Load Balancer Controller on an EKS cluster: its Helm chart at a pinned version, run as a
role through EKS Pod Identity whose policy is the project's own `docs/install/iam_policy.json` at
that release, written in the stack's partition (the aws-cn and aws-us-gov files of the release
differ only in the partition and the order of the statements:
docs/facts/eks.md#chart-aws-load-balancer-controller).

Internal by default: the controller's default scheme is `internal`, set explicitly, and the
IngressClassParams of its `alb` class enforce it for every Ingress of that class; a Service
annotated `service.beta.kubernetes.io/aws-load-balancer-scheme: internet-facing` still gets an
internet-facing NLB: fminfra tags no subnet `kubernetes.io/role/elb`, so the controller falls back to
the subnets with a route to the internet gateway, the VPC's public ones
(docs/facts/eks.md#lbc-subnet-discovery-tags). Values:
docs/facts/eks.md#chart-aws-load-balancer-controller-values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from fminfra.eks.rules import LBC_NAMESPACE, LBC_RELEASE, LBC_SCHEME, LBC_SERVICE_ACCOUNT
from fminfra.policy.constructs.acknowledge import acknowledge, nag_text

CHART = "aws-load-balancer-controller"
REPOSITORY = "https://aws.github.io/eks-charts"
CHART_TIMEOUT_MINUTES = 15
POLICY_FILE = Path(__file__).resolve().parent.parent / "data" / "aws-load-balancer-controller-iam-policy.json"
# The values keys fminfra sets, each read by the chart's templates at the pinned version
# (tests/data/aws_load_balancer_controller/).
VALUE_KEYS = ("clusterName", "region", "vpcId", "serviceAccount", "defaultTargetType", "defaultLoadBalancerScheme", "ingressClassParams")


def load_balancer_controller_policy(partition: str) -> dict[str, Any]:
    """The release's IAM policy (commercial partition) with its ARNs in `partition`."""
    text = POLICY_FILE.read_text(encoding="utf-8")
    return cast(dict[str, Any], json.loads(text.replace('"arn:aws:', f'"arn:{partition}:')))


def load_balancer_controller_values(*, cluster_name: str, region: str, vpc_id: str) -> dict[str, Any]:
    """Chart values: the cluster, region and VPC given (pods on fminfra's nodes cannot reach the
    instance metadata service: hop limit 1), the service account the Pod Identity association names,
    IP targets (the VPC CNI gives pods VPC addresses), and the internal scheme by default and for
    every Ingress of the chart's class."""
    return {
        "clusterName": cluster_name,
        "region": region,
        "vpcId": vpc_id,
        "serviceAccount": {"create": True, "name": LBC_SERVICE_ACCOUNT},
        "defaultTargetType": "ip",
        "defaultLoadBalancerScheme": LBC_SCHEME,
        "ingressClassParams": {"create": True, "spec": {"scheme": LBC_SCHEME}},
    }


@dataclass(frozen=True, kw_only=True)
class AwsLoadBalancerControllerProps:
    """Props of `AwsLoadBalancerController`.

    cluster: the EKS cluster (with its kubectl provider and the Pod Identity agent add-on).
    cluster_name: its name (literal, for the chart's --cluster-name).
    version: the chart version.
    region, vpc_id: the cluster's region and VPC.
    """

    cluster: eks.Cluster
    cluster_name: str
    version: str
    region: str
    vpc_id: str


class AwsLoadBalancerController(Construct):
    """Creates the controller's role (trusted by pods.eks.amazonaws.com), its Pod Identity
    association (kube-system/aws-load-balancer-controller) and the chart.
    Attributes: `role`, `policy` (its default policy: the controller's own), `association`, `chart`."""

    def __init__(self, scope: Construct, construct_id: str, props: AwsLoadBalancerControllerProps) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        document = load_balancer_controller_policy(stack.partition)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            description="AWS Load Balancer Controller (EKS Pod Identity)",
        )
        # in the role's default policy, where every fminfra role's grants and their acknowledgments are
        for statement in document["Statement"]:
            self.role.add_to_policy(iam.PolicyStatement.from_json(statement))
        self.policy = cast(iam.Policy, self.role.node.find_child("DefaultPolicy"))
        self._acknowledge(document)
        self.association = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=props.cluster.cluster_name,  # a reference: created after the cluster
            namespace=LBC_NAMESPACE,
            service_account=LBC_SERVICE_ACCOUNT,
            role_arn=self.role.role_arn,
        )
        self.chart = props.cluster.add_helm_chart(
            f"Chart-{LBC_RELEASE}",
            chart=CHART,
            repository=REPOSITORY,
            version=props.version,
            namespace=LBC_NAMESPACE,
            release=LBC_RELEASE,
            values=load_balancer_controller_values(cluster_name=props.cluster_name, region=props.region, vpc_id=props.vpc_id),
            # until its pods run, its webhook refuses every new Service: helm waits for them
            # (CDK's limit: docs/facts/eks.md#cdk-helm-chart-timeout)
            wait=True,
            timeout=cdk.Duration.minutes(CHART_TIMEOUT_MINUTES),
        )
        self.chart.node.add_dependency(self.association)
        # its pods call AWS from their start: the role's policy first
        self.chart.node.add_dependency(self.policy)

    def _acknowledge(self, document: dict[str, Any]) -> None:
        reason = (
            "the AWS Load Balancer Controller's own IAM policy at the pinned release (docs/install/iam_policy.json): it creates "
            "load balancers, target groups and security groups whose ARNs do not exist yet, and its writes are conditioned on the "
            "elbv2.k8s.aws/cluster tag as the project writes them"
        )
        resources = sorted(
            {r for s in document["Statement"] for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]) if "*" in r}
        )
        for resource in resources:
            acknowledge(self.policy, f"IAM5[Resource::{nag_text(cdk.Stack.of(self), resource)}]", reason)
