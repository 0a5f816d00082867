"""An EKS cluster (aws_eks_v2) ready for SageMaker HyperPod and GPU inference node groups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from fminfra.compute.rules import GRAVITON_TYPE_RULE
from fminfra.core.errors import ValidationError
from fminfra.eks.constructs.inference_node_group import NODE_POLICIES, acknowledge_node_policies
from fminfra.eks.rules import ADDON_RESOLVE_CONFLICTS, NODE_NETWORKING_ADDONS
from fminfra.policy.constructs.acknowledge import acknowledge, arn_reference, drop_redundant_role_dependency

# EKS add-on names HyperPod needs (VPC CNI >= 1.18.3, CoreDNS, kube-proxy, Pod Identity agent).
REQUIRED_ADDONS = ("vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent")
# The system node group's role (docs/facts/iam.md#iam-eks-node-role-policies).
SYSTEM_NODE_POLICIES = NODE_POLICIES
LOGGING = (
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
)


@dataclass(frozen=True, kw_only=True)
class HelmChartSpec:
    """A Helm chart installed at deploy time from its repository, at a pinned version."""

    name: str
    chart: str
    repository: str
    version: str
    namespace: str = "kube-system"
    values: Mapping[str, object] = field(default_factory=dict)

    def add_to(self, cluster: eks.Cluster, construct_id: str) -> eks.HelmChart:
        """This chart on `cluster`, released under its name (`construct_id` is part of the contract)."""
        return cluster.add_helm_chart(
            construct_id,
            chart=self.chart,
            repository=self.repository,
            version=self.version,
            namespace=self.namespace,
            release=self.name,
            values=dict(self.values) or None,
        )


@dataclass(frozen=True, kw_only=True)
class EksClusterProps:
    """Props of `EksCluster`.

    cluster_name: physical name; include the environment name.
    kubernetes_version: a minor version such as "1.34"; must be in `supported_versions`.
    supported_versions: versions this construct may build (the version manifest's list).
    vpc, subnets: the private subnets of the control plane ENIs (at least two AZs).
    addon_versions: EKS add-on name -> pinned version; must include VPC CNI, CoreDNS,
      kube-proxy and the Pod Identity agent.
    addon_configurations: EKS add-on name -> its configuration values (the add-on's own schema,
      `aws eks describe-addon-configuration`). Default: none, the add-on's defaults.
    admin_principal_arns: IAM roles/users given AmazonEKSClusterAdminPolicy through access entries.
    public_access_cidrs: CIDRs allowed to a public API endpoint. Default: none, private endpoint only.
    helm_charts: charts installed through the kubectl provider (a Lambda in the VPC). Default: none.
    kubectl_layer: the Lambda layer with kubectl and helm, required with helm_charts or kubectl_manifests.
    kubectl_manifests: the cluster's kubectl provider also without charts, for manifests others
      apply to it (`eks.KubernetesManifest`, the HyperPod EKS plan drain's RBAC). Default: False.
    removal_policy: of the secrets-encryption KMS key. Default: RETAIN.
    system_node_count: nodes of an untainted CPU managed node group (`<cluster_name>-system`,
      label fminfra/role=system) for CoreDNS and other system pods. Default: 0, no such group.
    system_node_instance_type: its EC2 instance type. Default: m6i.large.
    """

    cluster_name: str
    kubernetes_version: str
    supported_versions: Sequence[str]
    vpc: ec2.IVpc
    subnets: Sequence[ec2.ISubnet]
    addon_versions: Mapping[str, str]
    addon_configurations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    admin_principal_arns: Sequence[str] = ()
    public_access_cidrs: Sequence[str] = ()
    helm_charts: Sequence[HelmChartSpec] = ()
    kubectl_layer: lambda_.ILayerVersion | None = None
    kubectl_manifests: bool = False
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    system_node_count: int = 0
    system_node_instance_type: str = "m6i.large"


class EksCluster(Construct):
    """Creates an EKS cluster with authentication mode API, a private endpoint (public only for
    the given CIDRs), secrets encrypted with a customer-managed KMS key, every control-plane log
    type on, the pinned add-ons, access entries for the admins and the pinned Helm charts.

    No default capacity: HyperPod nodes and the inference node groups join it.
    Attributes: `cluster` (an `eks.Cluster`), `cluster_name`, `cluster_arn`, `addons` (by name),
    `secrets_key`, `charts` (by name).
    """

    def __init__(self, scope: Construct, construct_id: str, props: EksClusterProps) -> None:
        super().__init__(scope, construct_id)
        if props.kubernetes_version not in props.supported_versions:
            raise ValidationError(
                f"kubernetes_version must be one of {', '.join(props.supported_versions)}, got {props.kubernetes_version!r}",
                path="kubernetes_version",
            )
        missing = [a for a in REQUIRED_ADDONS if a not in props.addon_versions]
        if missing:
            raise ValidationError(
                f"addon_versions must pin {', '.join(REQUIRED_ADDONS)}; missing: {', '.join(missing)}", path="addon_versions"
            )
        if len(props.subnets) < 2:
            raise ValidationError(
                f"subnets must span at least two AZs (EKS requires it), got {len(props.subnets)} subnet(s)", path="subnets"
            )
        kubectl_provider = bool(props.helm_charts) or props.kubectl_manifests
        if kubectl_provider and props.kubectl_layer is None:
            raise ValidationError("kubectl_layer is required when helm_charts or kubectl_manifests are given", path="kubectl_layer")
        if props.system_node_count < 0:
            raise ValidationError(f"system_node_count must be 0 or more, got {props.system_node_count}", path="system_node_count")

        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"EKS secrets encryption for {props.cluster_name}",
            removal_policy=props.removal_policy,
        )
        endpoint = (
            eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*props.public_access_cidrs)
            if props.public_access_cidrs
            else eks.EndpointAccess.PRIVATE
        )
        subnet_selection = [ec2.SubnetSelection(subnets=list(props.subnets))]
        kubectl = None
        if kubectl_provider:
            assert props.kubectl_layer is not None  # checked above
            kubectl = eks.KubectlProviderOptions(kubectl_layer=props.kubectl_layer, private_subnets=list(props.subnets))
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=props.cluster_name,
            version=eks.KubernetesVersion.of(props.kubernetes_version),
            vpc=props.vpc,
            vpc_subnets=subnet_selection,
            endpoint_access=endpoint,
            secrets_encryption_key=self.secrets_key,
            cluster_logging=list(LOGGING),
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            bootstrap_self_managed_addons=False,
            bootstrap_cluster_creator_admin_permissions=False,
            kubectl_provider_options=kubectl,
        )
        acknowledge(
            self.cluster.role,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy]",
            "EKS requires this AWS managed policy on the cluster role; AWS keeps it in step with what the control plane needs",
        )
        if kubectl_provider:
            self._acknowledge_kubectl_provider()
        # The subnets are imported from the Network stack, which CDK cannot tag from here.
        cdk.Annotations.of(self.cluster).acknowledge_warning(
            "@aws-cdk/aws-eks:clusterMustManuallyTagSubnet",
            "the Network stack tags the private subnets kubernetes.io/role/internal-elb=1 when the load balancer controller is on "
            "(docs/facts/eks.md#lbc-subnet-discovery-tags); nothing else creates Kubernetes load balancers",
        )
        self.cluster_name = self.cluster.cluster_name
        self.cluster_arn = self.cluster.cluster_arn
        self.addons: dict[str, eks.Addon] = {}
        for name, addon_version in props.addon_versions.items():
            self.addons[name] = eks.Addon(
                self,
                f"Addon-{name}",
                cluster=cast(eks.ICluster, self.cluster),
                addon_name=name,
                addon_version=addon_version,
                configuration_values=props.addon_configurations.get(name),
                preserve_on_delete=False,
            )
            if name in ADDON_RESOLVE_CONFLICTS:
                # Its resources may already exist (created by the HyperPod dependency chart): take them over.
                cfn_addon = self.addons[name].node.default_child
                assert isinstance(cfn_addon, cdk.CfnResource)
                cfn_addon.add_property_override("ResolveConflicts", ADDON_RESOLVE_CONFLICTS[name])
        self.system_nodegroup: eks.Nodegroup | None = None
        if props.system_node_count > 0:
            self.system_nodegroup = self._system_nodegroup(props)
        for i, arn in enumerate(props.admin_principal_arns):
            self.cluster.grant_access(
                f"Admin{i}",
                arn,
                [eks.AccessPolicy.from_access_policy_name("AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)],
            )
        self.charts: dict[str, eks.HelmChart] = {}
        for spec in props.helm_charts:
            chart = spec.add_to(self.cluster, f"Chart-{spec.name}")
            # Device plugins are DaemonSets on nodes whose networking the CNI add-on provides.
            chart.node.add_dependency(self.addons["vpc-cni"])
            self.charts[spec.name] = chart

    def _system_nodegroup(self, props: EksClusterProps) -> eks.Nodegroup:
        """An untainted CPU node group for CoreDNS and other system pods; it waits for the VPC CNI
        and kube-proxy (its nodes are not Ready without them) and CoreDNS waits for it."""
        role = iam.Role(
            self,
            "SystemNodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(n) for n in SYSTEM_NODE_POLICIES],
        )
        acknowledge_node_policies(role)
        graviton = GRAVITON_TYPE_RULE.match(props.system_node_instance_type) is not None
        nodegroup = eks.Nodegroup(
            self,
            "SystemNodes",
            cluster=cast(eks.ICluster, self.cluster),
            nodegroup_name=f"{props.cluster_name}-system",
            instance_types=[ec2.InstanceType(props.system_node_instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_ARM_64_STANDARD if graviton else eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=props.system_node_count,
            desired_size=props.system_node_count,
            max_size=props.system_node_count,
            subnets=ec2.SubnetSelection(subnets=list(props.subnets)),
            node_role=role,
            labels={"fminfra/role": "system"},
        )
        self.add_node_group_dependencies(nodegroup)
        self.addons["coredns"].node.add_dependency(nodegroup)
        return nodegroup

    def add_node_group_dependencies(self, node_group: Construct) -> None:
        """Create `node_group` (a managed node group of this cluster) after the add-ons its nodes need
        to become Ready, the VPC CNI and kube-proxy: the cluster installs no networking add-ons of its
        own (docs/facts/eks.md#eks-nodegroup-after-cni)."""
        for name in NODE_NETWORKING_ADDONS:
            node_group.node.add_dependency(self.addons[name])

    def _acknowledge_kubectl_provider(self) -> None:
        """The kubectl provider (a CDK Lambda and its custom-resource framework) installs the charts."""
        provider = self.cluster.kubectl_provider
        assert provider is not None
        handler = provider.node.find_child("Handler")
        role = handler.node.find_child("ServiceRole")
        drop_redundant_role_dependency(handler)
        acknowledge(
            handler.node.find_child("Resource"),
            "L1",
            "CDK's kubectl provider handler; aws-cdk-lib pins its runtime to the one its kubectl layer supports",
        )
        managed = (
            "AWSLambdaBasicExecutionRole",
            "AWSLambdaVPCAccessExecutionRole",
        )
        for name in managed:
            acknowledge(
                role,
                f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{name}]",
                "CDK's kubectl provider runs in the private subnets: these AWS managed policies only let it write its logs and attach its ENIs",
            )
        acknowledge(
            role,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly]",
            "CDK's kubectl provider pulls the kubectl/helm image layers; read-only registry access is what CDK attaches",
        )
        condition = next(c for c in handler.node.children if isinstance(c, cdk.CfnCondition))
        condition_id = cdk.Stack.of(self).resolve(condition.logical_id)
        acknowledge(
            role,
            'IAM4[Policy::{"Fn::If":["'
            + condition_id
            + '",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]',
            "CDK's kubectl provider: read-only ECR Public access, attached only in partitions that have ECR Public, to pull chart images",
        )
        framework = provider.node.find_child("Provider").node.find_child("framework-onEvent")
        framework_role = framework.node.find_child("ServiceRole")
        drop_redundant_role_dependency(framework)
        for name in managed:
            acknowledge(
                framework_role,
                f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{name}]",
                "CDK's custom-resource framework for the kubectl provider, in the private subnets: logs and ENIs only",
            )
        handler_fn = handler.node.find_child("Resource")
        assert isinstance(handler_fn, cdk.CfnResource)
        acknowledge(
            framework_role.node.find_child("DefaultPolicy"),
            f"IAM5[Resource::{arn_reference(handler_fn)}:*]",
            "CDK's custom-resource framework invokes the kubectl handler function and its versions (the :* suffix), nothing else",
        )
