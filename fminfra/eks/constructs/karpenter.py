"""Karpenter on an EKS cluster without HyperPod, installed as its getting-started guide describes at
the pinned release (docs/facts/karpenter.md#chart-karpenter, #karpenter-getting-started-template):

- the node role (the template's trust and managed policies) and its EKS access entry (EC2_LINUX);
- the controller's role through EKS Pod Identity (kube-system/karpenter), whose policy is the
  template's six controller policies, statement for statement, in the stack's partition;
- the interruption queue, its policy and the template's five EventBridge rules to it;
- the OCI chart with the CRDs, then one NodePool and EC2NodeClass per pool (`fminfra.eks.constructs.karpenter_pools`).

The chart's defaults keep the controller off Karpenter's own nodes (karpenter-chart-values): the
system node group runs it, and the chart waits for it after the core add-ons.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from fminfra.eks.constructs.karpenter_pools import KarpenterPoolSpec, node_class, node_pool
from fminfra.eks.rules import (
    KARPENTER_INTERRUPTION_EVENTS,
    KARPENTER_NAMESPACE,
    KARPENTER_RELEASE,
    KARPENTER_SERVICE_ACCOUNT,
)
from fminfra.policy.constructs.acknowledge import acknowledge, nag_text

CHART = "karpenter"
REPOSITORY = "oci://public.ecr.aws/karpenter/karpenter"
CHART_TIMEOUT_MINUTES = 15
POLICY_FILE = Path(__file__).resolve().parent.parent / "data" / "karpenter-controller-policies.json"
# The node role's AWS managed policies, as the template attaches them.
NODE_MANAGED_POLICIES = (
    "AmazonEKS_CNI_Policy",
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
)
# The interruption queue as the template has it: messages kept 5 minutes, SQS-managed encryption.
QUEUE_RETENTION_SECONDS = 300
# The values keys fminfra sets, each in the chart's values.yaml at the pinned version (tests/data/karpenter/).
VALUE_KEYS = ("settings", "serviceAccount", "controller", "replicas")
# The controller's resources as the getting-started guide sets them (step08-apply-helm-chart.sh).
CONTROLLER_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def controller_policy_documents() -> dict[str, dict[str, Any]]:
    """The template's six controller policies (name -> document), with its `${...}` placeholders."""
    return cast(dict[str, dict[str, Any]], json.loads(POLICY_FILE.read_text(encoding="utf-8")))


def controller_statements(
    *, partition: str, region: str, account: str, cluster_name: str, node_role_arn: str, queue_arn: str
) -> list[dict[str, Any]]:
    """Every statement of the six policies, the template's `!Sub` done with the values given."""
    text = json.dumps([s for d in controller_policy_documents().values() for s in d["Statement"]])
    for placeholder, value in (
        ("${AWS::Partition}", partition),
        ("${AWS::Region}", region),
        ("${AWS::AccountId}", account),
        ("${ClusterName}", cluster_name),
        ("${KarpenterNodeRole.Arn}", node_role_arn),
        ("${KarpenterInterruptionQueue.Arn}", queue_arn),
    ):
        text = text.replace(placeholder, value)
    if "${" in text.replace("${Token[", ""):
        raise ValueError("a placeholder of the template's controller policies is left unsubstituted")
    return cast(list[dict[str, Any]], json.loads(text))


def karpenter_values(*, cluster_name: str, queue_name: str, replicas: int, region: str) -> dict[str, Any]:
    """Chart values: the cluster and interruption queue, native reservations (the `ReservedCapacity`
    gate, on by default since v1.6, set explicitly), the service account the Pod Identity association
    names, the guide's controller resources, no more replicas than system nodes (one a host), and the
    region in `AWS_REGION` (the chart's own example of `controller.env`): without it the controller
    asks the instance metadata service, which pods on fminfra's nodes cannot reach (hop limit 1),
    and exits (docs/facts/karpenter.md#karpenter-region-from-env)."""
    return {
        "settings": {"clusterName": cluster_name, "interruptionQueue": queue_name, "featureGates": {"reservedCapacity": True}},
        "serviceAccount": {"create": True, "name": KARPENTER_SERVICE_ACCOUNT},
        "controller": {"resources": CONTROLLER_RESOURCES, "env": [{"name": "AWS_REGION", "value": region}]},
        "replicas": replicas,
    }


@dataclass(frozen=True, kw_only=True)
class KarpenterProps:
    """Props of `Karpenter`.

    cluster: the EKS cluster (with its kubectl provider and the Pod Identity agent add-on).
    cluster_name: its name (literal: the policies' tag conditions and the chart's settings.clusterName).
    version: the chart version (CHART_KARPENTER_VERSION).
    ami_release: the AL2023 release the node classes pin (KARPENTER_AL2023_AMI_RELEASE).
    pools: one NodePool and EC2NodeClass each; the cluster's security group is added to each pool's.
    replicas: controller replicas (at most the system nodes). Default: 2, the chart's.
    """

    cluster: eks.Cluster
    cluster_name: str
    version: str
    ami_release: str
    pools: Sequence[KarpenterPoolSpec]
    replicas: int = 2


@dataclass(frozen=True, kw_only=True)
class KarpenterSpec:
    """Karpenter on a cluster (`KarpenterProps` less the cluster and its name); each pool's security
    groups are those besides the cluster's security group, which every pool gets."""

    version: str
    ami_release: str
    pools: Sequence[KarpenterPoolSpec]
    replicas: int = 2


class Karpenter(Construct):
    """Attributes: `node_role`, `access_entry`, `role`, `policy` (its default policy), `association`,
    `queue`, `queue_policy`, `rules` (id -> rule), `chart`, `manifests` (pool name -> its NodePool and
    EC2NodeClass manifest)."""

    def __init__(self, scope: Construct, construct_id: str, props: KarpenterProps) -> None:
        super().__init__(scope, construct_id)
        if props.replicas < 1:
            raise ValueError("Karpenter: replicas must be 1 or more (the controller runs on the system node group)")
        stack = cdk.Stack.of(self)
        self.node_role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="Nodes Karpenter launches (its getting-started template's node role)",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(n) for n in NODE_MANAGED_POLICIES],
        )
        for name in NODE_MANAGED_POLICIES:
            acknowledge(
                self.node_role,
                f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]",
                "the AWS managed policies Karpenter's getting-started template gives its node role: join the cluster, run the "
                "VPC CNI, pull images, and Systems Manager access to the node",
            )
        # nodes join as system:nodes through an EC2_LINUX access entry (EKS gives that type the node groups)
        self.access_entry = eks.CfnAccessEntry(
            self, "NodeAccess", cluster_name=props.cluster.cluster_name, principal_arn=self.node_role.role_arn, type="EC2_LINUX"
        )
        self.queue = sqs.Queue(
            self,
            "InterruptionQueue",
            retention_period=cdk.Duration.seconds(QUEUE_RETENTION_SECONDS),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
        )
        acknowledge(
            self.queue,
            "SQS3",
            "Karpenter's interruption queue as its template has it: EventBridge notices that expire after 5 minutes and that "
            "Karpenter alone reads; a dead-letter queue would keep notices no one acts on",
        )
        self.queue_policy = sqs.CfnQueuePolicy(
            self,
            "InterruptionQueuePolicy",
            queues=[self.queue.queue_url],
            policy_document={
                "Id": "EC2InterruptionPolicy",
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                        "Action": "sqs:SendMessage",
                        "Resource": self.queue.queue_arn,
                    },
                    {
                        "Sid": "DenyHTTP",
                        "Effect": "Deny",
                        "Action": "sqs:*",
                        "Resource": self.queue.queue_arn,
                        "Condition": {"Bool": {"aws:SecureTransport": False}},
                        "Principal": "*",
                    },
                ],
            },
        )
        self.rules: dict[str, events.CfnRule] = {
            rule_id: events.CfnRule(
                self,
                f"{rule_id}Rule",
                event_pattern={"source": [source], "detail-type": [detail_type]},
                targets=[events.CfnRule.TargetProperty(id="KarpenterInterruptionQueueTarget", arn=self.queue.queue_arn)],
            )
            for rule_id, source, detail_type in KARPENTER_INTERRUPTION_EVENTS
        }
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            description="Karpenter controller (EKS Pod Identity)",
        )
        statements = controller_statements(
            partition=stack.partition,
            region=stack.region,
            account=stack.account,
            cluster_name=props.cluster_name,
            node_role_arn=self.node_role.role_arn,
            queue_arn=self.queue.queue_arn,
        )
        # in the role's default policy, where every fminfra role's grants and their acknowledgments are
        for statement in statements:
            self.role.add_to_policy(iam.PolicyStatement.from_json(statement))
        self.policy = cast(iam.Policy, self.role.node.find_child("DefaultPolicy"))
        self._acknowledge(statements)
        self.association = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=props.cluster.cluster_name,
            namespace=KARPENTER_NAMESPACE,
            service_account=KARPENTER_SERVICE_ACCOUNT,
            role_arn=self.role.role_arn,
        )
        self.chart = props.cluster.add_helm_chart(
            f"Chart-{KARPENTER_RELEASE}",
            chart=CHART,
            repository=REPOSITORY,
            version=props.version,
            namespace=KARPENTER_NAMESPACE,
            release=KARPENTER_RELEASE,
            values=karpenter_values(
                cluster_name=props.cluster_name, queue_name=self.queue.queue_name, replicas=props.replicas, region=stack.region
            ),
            # the NodePools after it need its CRDs and a running controller (docs/facts/eks.md#cdk-helm-chart-timeout)
            wait=True,
            timeout=cdk.Duration.minutes(CHART_TIMEOUT_MINUTES),
        )
        for before in (self.association, self.policy, self.queue_policy, self.access_entry):
            self.chart.node.add_dependency(before)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for pool in props.pools:
            # the nodes join through the cluster's security group, as managed node groups do
            groups = [props.cluster.cluster_security_group_id, *pool.security_group_ids]
            manifest = props.cluster.add_manifest(
                f"KarpenterPool-{pool.name}",
                node_class(replace(pool, security_group_ids=groups), role_name=self.node_role.role_name, ami_release=props.ami_release),
                node_pool(pool),
            )
            manifest.node.add_dependency(self.chart)
            self.manifests[pool.name] = manifest

    def _acknowledge(self, statements: list[dict[str, Any]]) -> None:
        reason = (
            "Karpenter's own controller policy at the pinned release (its getting-started template): it launches and tags "
            "instances, fleets, launch templates and instance profiles whose ARNs do not exist yet, each write conditioned on "
            "the cluster's kubernetes.io/cluster tag and a karpenter.sh/nodepool tag; reads are limited to the region"
        )
        stack = cdk.Stack.of(self)
        resources = sorted(
            {r for s in statements for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]) if "*" in r}
        )
        for resource in resources:
            acknowledge(self.policy, f"IAM5[Resource::{nag_text(stack, resource)}]", reason)
