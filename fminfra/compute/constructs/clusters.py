"""The clusters of an environment: the EKS cluster, the HyperPod cluster (Slurm or EKS) and the
inference node groups, wired the way HyperPod on EKS needs it.

HyperPod on EKS is the subtlest part of the platform; `Clusters` holds its rules in one place:
the training operator's Pod Identity role before its add-on, the HyperPod dependency chart after
the VPC CNI, the HyperPod cluster after the add-ons its prerequisites name and the chart, the
training operator after the cluster, task governance's add-on after the cluster and the teams'
quotas after the add-on, the acceptance role's access after the quotas, and the node role's
permissions for the VPC CNI, image pulls and Pod Identity (docs/facts/hyperpod.md).

The props are typed specs, one per part (`None`: the part is not built); `fminfra.compute.stack.clusters`
translates an environment's config into them. Every resource is created in `scope` (the Compute
stack), not under this construct, so each keeps the construct path and the logical id it had
before `Clusters` existed (a changed logical id would replace the EKS and HyperPod clusters); the
construct's own node holds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from fminfra.compute.constructs.launch_template import EfaLaunchTemplate, EfaLaunchTemplateProps
from fminfra.core.errors import ValidationError
from fminfra.eks.constructs.accept_access import ACCEPT_GROUP, AcceptAccess, add_accept_access
from fminfra.eks.constructs.cluster import REQUIRED_ADDONS, EksCluster, EksClusterProps
from fminfra.eks.constructs.extensions import EksExtension, install_extensions
from fminfra.eks.constructs.fsx_volume import FsxStaticVolume, FsxStaticVolumeProps
from fminfra.eks.constructs.inference_node_group import InferenceNodeGroup, InferenceNodeGroupProps
from fminfra.eks.constructs.karpenter import Karpenter, KarpenterProps, KarpenterSpec
from fminfra.eks.constructs.kueue import NAMESPACE as KUEUE_NAMESPACE
from fminfra.eks.constructs.kueue import RELEASE as KUEUE_RELEASE
from fminfra.eks.constructs.kueue import GpuFlavor, Kueue, KueueProps
from fminfra.eks.constructs.load_balancer_controller import AwsLoadBalancerController, AwsLoadBalancerControllerProps
from fminfra.eks.rules import FSX_CSI_ADDON, KARPENTER_NAMESPACE, KARPENTER_RELEASE, LBC_NAMESPACE, LBC_RELEASE, REPELLING_EFFECTS
from fminfra.hyperpod.constructs.autoscaling import add_autoscaling_manifests
from fminfra.hyperpod.constructs.cluster import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from fminfra.hyperpod.constructs.dependencies import NAMESPACE as DEPENDENCIES_NAMESPACE
from fminfra.hyperpod.constructs.dependencies import RELEASE as DEPENDENCIES_RELEASE
from fminfra.hyperpod.constructs.dependencies import HyperPodDependencies, HyperPodDependenciesProps
from fminfra.hyperpod.constructs.lifecycle_scripts import LifecycleScripts, LifecycleScriptsProps
from fminfra.hyperpod.constructs.plan_drain import HyperPodPlanDrain, HyperPodPlanDrainProps, PlanDrainGroup
from fminfra.hyperpod.constructs.task_governance import ADDON_NAME as TASK_GOVERNANCE_ADDON
from fminfra.hyperpod.constructs.task_governance import TaskGovernance, TaskGovernanceProps, TeamQuota
from fminfra.hyperpod.rules import (
    EKS_NODE_ENI_ACTIONS,
    EKS_NODE_READ_ACTIONS,
    ENI_TAG_ACTION,
    POD_IDENTITY_ACTION,
    VPC_CONFIG_ENI_ACTIONS,
    VPC_CONFIG_READ_ACTIONS,
)
from fminfra.observability.constructs.amp_scraper import DEFAULT_JOBS, AmpScraper, AmpScraperProps, PodScrapeJob
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace
from fminfra.policy.constructs.acknowledge import acknowledge, literal
from fminfra.serving.constructs.serving import (
    KEDA_NAMESPACE,
    KEDA_RELEASE,
    LWS_NAMESPACE,
    LWS_RELEASE,
    ModelServing,
    ModelServingProps,
    ServedModelSpec,
    gate_rbac,
)
from fminfra.storage.constructs.lustre import admit_lustre_clients

# The HyperPod training operator add-on's controller and the AWS managed policy it documents.
TRAINING_OPERATOR_NAMESPACE = "aws-hyperpod"
TRAINING_OPERATOR_SERVICE_ACCOUNT = "hp-training-operator-controller-manager"
TRAINING_OPERATOR_POLICY = "AmazonSageMakerHyperPodTrainingOperatorAccess"


# What the HyperPod cluster waits for: the add-ons HyperPod's prerequisites name and the dependency
# chart (docs/facts/hyperpod.md#hyperpod-eks-prerequisites, #hyperpod-eks-helm-chart-required).
HYPERPOD_PREREQUISITE_ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")


@dataclass(frozen=True, kw_only=True)
class KueueSpec:
    """fminfra's Kueue on an EKS cluster without HyperPod (`KueueProps` less the cluster)."""

    version: str
    flavors: Sequence[GpuFlavor]
    teams: Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, kw_only=True)
class ScraperSpec:
    """An AMP managed scraper of the EKS cluster's exporters (`AmpScraperProps` less the cluster's
    ARN and security group); AMP gives it its access to the cluster itself."""

    workspace: PrometheusWorkspace
    subnets: Sequence[ec2.ISubnet]
    scrape_interval_seconds: int
    alias: str | None = None
    jobs: Mapping[str, int | PodScrapeJob] = field(default_factory=lambda: dict(DEFAULT_JOBS))


@dataclass(frozen=True, kw_only=True)
class DataAccess:
    """The nodes' access to the data bucket: read the read-only prefixes, read and write the
    read-write ones, nothing else; `bucket_name` is the bucket's (config-derived) literal name."""

    bucket: s3.IBucket
    bucket_name: str
    read_only_prefixes: Sequence[str] = ()
    read_write_prefixes: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True)
class HyperPodSpec:
    """The HyperPod cluster (`HyperPodClusterProps` less the lifecycle scripts' location, the role
    and, on EKS, the cluster's security group and ARN) and its lifecycle scripts.

    security_groups: of the nodes (the EFA group); on EKS the cluster security group is added.
    data_access: the nodes' access to the data bucket. Default: none.
    autoscaled_groups: groups HyperPod's managed autoscaling scales (`HyperPodClusterProps`; on EKS
      with their NodeClass and NodePool, `fminfra.hyperpod.constructs.autoscaling`). Default: none.
    vpc: the VPC of the subnets, which the role's network-interface permissions name. Default: on
      EKS the EKS cluster's VPC; else any VPC of the account in the region (`vpc/*`).
    """

    cluster_name: str
    instance_groups: Sequence[HyperPodInstanceGroup]
    subnets: Sequence[ec2.ISubnet]
    security_groups: Sequence[ec2.ISecurityGroup]
    lifecycle: LifecycleScriptsProps
    data_access: DataAccess | None = None
    vpc: ec2.IVpc | None = None
    autoscaled_groups: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True)
class TaskGovernanceSpec:
    """HyperPod task governance (`TaskGovernanceProps` less the cluster's ARN)."""

    name_prefix: str
    teams: Sequence[TeamQuota]
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AcceptAccessSpec:
    """The acceptance gate's access to the cluster: the role (by name, in this account) and the
    namespaces of the teams its jobs queue in."""

    role_name: str
    namespaces: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class HyperPodOnEksSpec:
    """What HyperPod orchestrated by the EKS cluster needs beyond both clusters.

    dependencies_commit, dependencies_values: the HyperPod dependency chart (`HyperPodDependenciesProps`).
    task_governance: the teams' quotas. Default: none.
    accept_access: the acceptance role's access. Default: none.
    plan_drain: the training-plan groups `HyperPodPlanDrain` drains before their plan ends.
      Default: none (no drain is deployed).
    """

    dependencies_commit: str
    dependencies_values: Mapping[str, object]
    task_governance: TaskGovernanceSpec | None = None
    accept_access: AcceptAccessSpec | None = None
    plan_drain: Sequence[PlanDrainGroup] = ()


@dataclass(frozen=True, kw_only=True)
class InferenceGroupSpec:
    """An inference node group (`InferenceNodeGroupProps` less the cluster and the launch template).

    launch_template: an `EfaLaunchTemplate` for the group (EFA types, placement groups, reserved
      capacity); the EKS cluster security group is added to its groups. Default: none.
    """

    name: str
    nodegroup_name: str
    instance_type: str
    min_size: int
    desired_size: int
    max_size: int
    subnets: Sequence[ec2.ISubnet]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[tuple[str, str, str]] | None = None
    root_volume_gib: int = 200
    capacity_block: bool = False
    block_starts_at: datetime | None = None
    launch_template: EfaLaunchTemplateProps | None = None


@dataclass(frozen=True, kw_only=True)
class FsxVolumeSpec:
    """The environment's FSx for Lustre file system as a static PersistentVolume and claim per
    namespace (`FsxStaticVolumeProps` less the cluster); needs the FSx CSI driver add-on.

    security_group: the file system's group; the EKS cluster security group, which every node of the
      cluster carries, is admitted to it (`admit_lustre_clients`; all traffic when `efa_enabled`, as
      FSx requires), so pods on nodes without the EFA group mount the claim too. Default: none (the
      caller admits the nodes itself).
    """

    file_system_id: str
    dns_name: str
    mount_name: str
    namespaces: Sequence[str]
    security_group: ec2.ISecurityGroup | None = None
    efa_enabled: bool = False


@dataclass(frozen=True, kw_only=True)
class LoadBalancerSpec:
    """The AWS Load Balancer Controller (`AwsLoadBalancerControllerProps` less the cluster)."""

    version: str
    region: str
    vpc_id: str


@dataclass(frozen=True, kw_only=True)
class ServingSpec:
    """Models served on the EKS cluster (`ModelServingProps` less the cluster and the region).

    gate_role_name: the acceptance role (of this account) that may read the namespace's Services for the serving
      gate: the HyperPod acceptance access's entry where there is one, else an access entry of its own, with the
      group `ACCEPT_GROUP`. Default: none.
    """

    namespace: str
    models: Sequence[ServedModelSpec]
    keda_version: str
    lws_version: str
    stream_idle_timeout_seconds: int
    workspace: PrometheusWorkspace | None = None
    bucket_name: str | None = None
    bucket: s3.IBucket | None = None
    gate_role_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class ClustersProps:
    """Props of `Clusters`.

    region: the environment's region (in the outputs' commands).
    node_role: the role the HyperPod nodes run as.
    eks: the EKS cluster. Default: none (then no kueue, scraper, HyperPod on EKS or inference groups).
    kueue, scraper: on the EKS cluster. Default: none.
    hyperpod: the HyperPod cluster. Default: none.
    hyperpod_on_eks: HyperPod orchestrated by `eks` (needs both). Default: none (Slurm).
    inference_node_groups: on the EKS cluster. Default: none.
    fsx_volume, load_balancer: on the EKS cluster. Default: none.
    extensions: add-ons and charts of the user's, on the EKS cluster, each after its anchor and
      before fminfra's workloads (`fminfra.eks.constructs.extensions`). Default: none.
    karpenter: Karpenter and its pools on the EKS cluster, after the system node group and the core
      add-ons (docs/compute.md#karpenter). Default: none.
    serving: models served on the EKS cluster (docs/serving.md), after the load balancer controller,
      the FSx claim of their namespace and Karpenter. Default: none.
    """

    region: str
    node_role: iam.IRole
    eks: EksClusterProps | None = None
    kueue: KueueSpec | None = None
    scraper: ScraperSpec | None = None
    hyperpod: HyperPodSpec | None = None
    hyperpod_on_eks: HyperPodOnEksSpec | None = None
    inference_node_groups: Sequence[InferenceGroupSpec] = ()
    fsx_volume: FsxVolumeSpec | None = None
    load_balancer: LoadBalancerSpec | None = None
    extensions: Sequence[EksExtension] = ()
    karpenter: KarpenterSpec | None = None
    serving: ServingSpec | None = None


class Clusters(Construct):
    """The EKS cluster, the HyperPod cluster and the inference node groups of `props`, in `scope`.

    Attributes (None where not built): `eks`, `dependencies`, `kueue`, `scraper`, `lifecycle`,
    `hyperpod`, `task_governance`, `plan_drain`, `accept_access`, `inference_node_groups` (name -> node group),
    `fsx_volume`, `load_balancer`, `extensions` (name -> construct).
    """

    def __init__(self, scope: Construct, construct_id: str, props: ClustersProps) -> None:
        super().__init__(scope, construct_id)
        if props.hyperpod_on_eks is not None and (props.eks is None or props.hyperpod is None):
            raise ValidationError("Clusters: hyperpod_on_eks needs both eks and hyperpod")
        if (
            props.kueue or props.scraper or props.inference_node_groups or props.fsx_volume or props.load_balancer or props.extensions
        ) and props.eks is None:
            raise ValidationError("Clusters: kueue, scraper, inference_node_groups, fsx_volume, load_balancer and extensions need eks")
        self.eks: EksCluster | None = None
        self.dependencies: HyperPodDependencies | None = None
        self.kueue: Kueue | None = None
        self.scraper: AmpScraper | None = None
        self.lifecycle: LifecycleScripts | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.task_governance: TaskGovernance | None = None
        self.plan_drain: HyperPodPlanDrain | None = None
        self.accept_access: AcceptAccess | None = None
        self.inference_node_groups: dict[str, InferenceNodeGroup] = {}
        self.fsx_volume: FsxStaticVolume | None = None
        self.load_balancer: AwsLoadBalancerController | None = None
        self.extensions: dict[str, IConstruct] = {}
        self.karpenter: Karpenter | None = None
        self.autoscaling: IConstruct | None = None
        self.serving: ModelServing | None = None
        # Every resource goes in `scope`, where it has always been (its path and logical id).
        stack = scope
        on_eks = props.hyperpod_on_eks
        if props.eks is not None:
            self.eks = EksCluster(stack, "Eks", props.eks)
            if on_eks is not None:
                _training_operator_identity(stack, self.eks)
                assert props.eks.kubectl_layer is not None  # EksCluster requires it with helm charts
                self.dependencies = HyperPodDependencies(
                    stack,
                    "HyperPodDependencies",
                    HyperPodDependenciesProps(
                        cluster=self.eks.cluster,
                        subnets=props.eks.subnets,
                        kubectl_layer=props.eks.kubectl_layer,
                        commit=on_eks.dependencies_commit,
                        values=on_eks.dependencies_values,
                    ),
                )
                # helm reaches pods' networking only once the VPC CNI runs.
                self.dependencies.resource.node.add_dependency(self.eks.addons["vpc-cni"])
            if props.kueue is not None:
                self.kueue = _kueue(stack, props.kueue, self.eks)
            if props.scraper is not None:
                self.scraper = _amp_scraper(stack, props.scraper, self.eks)
            cdk.CfnOutput(stack, "EksClusterName", value=self.eks.cluster_name, description="EKS cluster")
            cdk.CfnOutput(
                stack,
                "UpdateKubeconfigCommand",
                value=f"aws eks update-kubeconfig --region {props.region} --name {props.eks.cluster_name}",
                description="Connect kubectl to the EKS cluster",
            )

        if props.hyperpod is not None:
            self._hyperpod(stack, props, props.hyperpod)

        controller_nodes: list[IConstruct] = []
        for group in props.inference_node_groups:
            assert self.eks is not None
            launch_template = None
            if group.launch_template is not None:
                launch_template = _inference_launch_template(stack, group.name, group.launch_template, self.eks)
            inference_group = InferenceNodeGroup(
                stack,
                f"Inference-{group.name}",
                InferenceNodeGroupProps(
                    cluster=cast(eks.ICluster, self.eks.cluster),
                    nodegroup_name=group.nodegroup_name,
                    instance_type=group.instance_type,
                    min_size=group.min_size,
                    desired_size=group.desired_size,
                    max_size=group.max_size,
                    subnets=group.subnets,
                    labels=group.labels,
                    taints=group.taints,
                    root_volume_gib=group.root_volume_gib,
                    launch_template=launch_template,
                    capacity_block=group.capacity_block,
                    block_starts_at=group.block_starts_at,
                ),
            )
            self.eks.add_node_group_dependencies(inference_group.nodegroup)
            self.inference_node_groups[group.name] = inference_group
            runs_controllers = group.desired_size > 0 and not any(
                e in REPELLING_EFFECTS for _, _, e in group.taints or [("", "", "NoSchedule")]
            )
            if self.kueue is not None and runs_controllers:
                # Kueue's controller can run here (no system node group needed): its chart waits for the nodes.
                self.kueue.chart.node.add_dependency(inference_group.nodegroup)
            if runs_controllers:
                controller_nodes.append(inference_group.nodegroup)
        if props.karpenter is not None:
            self._karpenter(stack, props, props.karpenter)
        if props.serving is not None:
            self._serving(stack, props, props.serving, controller_nodes)
        if self.eks is not None:
            self._addons_and_extensions(stack, props, controller_nodes)

    def _serving(self, stack: Construct, props: ClustersProps, spec: ServingSpec, controller_nodes: list[IConstruct]) -> None:
        """The served models. Their charts' controllers (KEDA, LeaderWorkerSet) run on the system nodes or an
        untainted inference group and wait for them and the core add-ons; the models come after Karpenter,
        which starts their nodes (and, on delete, they go before it); the load balancer controller's chart
        and the FSx claim come before them in `_addons_and_extensions`."""
        if self.eks is None:
            raise ValidationError("Clusters: serving needs eks")
        self.serving = ModelServing(
            stack,
            "Serving",
            ModelServingProps(
                cluster=self.eks.cluster,
                namespace=spec.namespace,
                region=props.region,
                models=spec.models,
                keda_version=spec.keda_version,
                lws_version=spec.lws_version,
                stream_idle_timeout_seconds=spec.stream_idle_timeout_seconds,
                workspace=spec.workspace,
                bucket_name=spec.bucket_name,
                bucket=spec.bucket,
            ),
        )
        system = [self.eks.system_nodegroup] if self.eks.system_nodegroup is not None else []
        for chart in self.serving.charts.values():
            for before in [*system, *controller_nodes, *(self.eks.addons[name] for name in REQUIRED_ADDONS)]:
                chart.node.add_dependency(before)
        self.serving.namespace.node.add_dependency(self.eks.addons["vpc-cni"])
        if self.karpenter is not None:
            for manifest in self.serving.models.values():
                manifest.node.add_dependency(self.karpenter)
        if spec.gate_role_name is not None:
            entry: IConstruct
            if self.accept_access is not None:
                entry = self.accept_access.entry  # one access entry per principal and cluster
            else:
                principal = cdk.Stack.of(stack).format_arn(service="iam", region="", resource="role", resource_name=spec.gate_role_name)
                entry = eks_l1.CfnAccessEntry(
                    stack,
                    "ServingGateAccessEntry",
                    cluster_name=self.eks.cluster_name,
                    principal_arn=principal,
                    type="STANDARD",
                    kubernetes_groups=[ACCEPT_GROUP],
                )
            rbac = self.eks.cluster.add_manifest("ServingGateRbac", *gate_rbac(spec.namespace, ACCEPT_GROUP))
            rbac.node.add_dependency(entry, self.serving.namespace)

    def _karpenter(self, stack: Construct, props: ClustersProps, spec: KarpenterSpec) -> None:
        """Karpenter's chart waits for the system node group (its controller's nodes) and the core add-ons."""
        if self.eks is None or props.eks is None:
            raise ValidationError("Clusters: karpenter needs eks")
        self.karpenter = Karpenter(
            stack,
            "Karpenter",
            KarpenterProps(
                cluster=self.eks.cluster,
                cluster_name=props.eks.cluster_name,
                version=spec.version,
                ami_release=spec.ami_release,
                pools=spec.pools,
                replicas=spec.replicas,
            ),
        )
        system = [self.eks.system_nodegroup] if self.eks.system_nodegroup is not None else []
        for before in [*system, *(self.eks.addons[name] for name in REQUIRED_ADDONS)]:
            self.karpenter.chart.node.add_dependency(before)

    def _addons_and_extensions(self, stack: Construct, props: ClustersProps, controller_nodes: list[IConstruct]) -> None:
        """The FSx volume, the AWS Load Balancer Controller and the user's extensions, in the order
        vpc-cni -> core add-ons -> (the load balancer controller's chart, when on: every other install
        waits for it, `_after_load_balancer`) -> FSx CSI driver -> extensions (each after its anchor) ->
        fminfra's workloads (docs/compute.md#add-ons-fsx-load-balancers-and-your-own)."""
        assert self.eks is not None and props.eks is not None
        addons = self.eks.addons
        workloads: list[IConstruct] = [*self.eks.charts.values(), *([self.kueue.chart] if self.kueue is not None else [])]
        if self.serving is not None:
            workloads += [*self.serving.charts.values(), *self.serving.models.values()]
        anchors: dict[str, list[IConstruct]] = {"vpc-cni": [addons["vpc-cni"]], "core-addons": [addons[a] for a in REQUIRED_ADDONS]}
        if props.fsx_volume is not None:
            spec = props.fsx_volume
            self.fsx_volume = FsxStaticVolume(
                stack,
                "FsxVolume",
                FsxStaticVolumeProps(
                    cluster=self.eks.cluster,
                    file_system_id=spec.file_system_id,
                    dns_name=spec.dns_name,
                    mount_name=spec.mount_name,
                    namespaces=spec.namespaces,
                ),
            )
            self.fsx_volume.manifest.node.add_dependency(addons[FSX_CSI_ADDON])
            if spec.security_group is not None:
                # System nodes and node groups without the EFA group carry only the cluster security group
                # (docs/facts/eks.md#eks-cluster-security-group-default-rules).
                admit_lustre_clients(
                    stack,
                    "EksClusterGroup",
                    file_system_group=spec.security_group,
                    client_group=self.eks.cluster.cluster_security_group,
                    efa_enabled=spec.efa_enabled,
                )
            for creator in self._namespace_creators():
                self.fsx_volume.manifest.node.add_dependency(creator)
            if self.serving is not None:
                # the claim in the serving namespace, before the servers that mount it
                for manifest in self.serving.models.values():
                    manifest.node.add_dependency(self.fsx_volume.manifest)
            workloads.append(self.fsx_volume.manifest)
        if FSX_CSI_ADDON in addons:
            anchors[FSX_CSI_ADDON] = [addons[FSX_CSI_ADDON]]
        if props.load_balancer is not None:
            spec_lb = props.load_balancer
            self.load_balancer = AwsLoadBalancerController(
                stack,
                "LoadBalancerController",
                AwsLoadBalancerControllerProps(
                    cluster=self.eks.cluster,
                    cluster_name=props.eks.cluster_name,
                    version=spec_lb.version,
                    region=spec_lb.region,
                    vpc_id=spec_lb.vpc_id,
                ),
            )
            chart = self.load_balancer.chart
            chart.node.add_dependency(addons["eks-pod-identity-agent"])
            for name in REQUIRED_ADDONS:
                chart.node.add_dependency(addons[name])
            # Its webhook refuses every new Service until its pods run (failurePolicy Fail): it waits for
            # nodes it can run on and for its pods, and everything that creates Services comes after it.
            for nodes in [*([self.eks.system_nodegroup] if self.eks.system_nodegroup is not None else []), *controller_nodes]:
                chart.node.add_dependency(nodes)
            if self.hyperpod is not None and props.hyperpod_on_eks is not None:
                chart.node.add_dependency(self.hyperpod)
            anchors[LBC_RELEASE] = [chart]
        releases = [
            *((c.name, c.namespace) for c in props.eks.helm_charts),
            *([(LBC_RELEASE, LBC_NAMESPACE)] if self.load_balancer is not None else []),
            *([(KUEUE_RELEASE, KUEUE_NAMESPACE)] if self.kueue is not None else []),
            *([(DEPENDENCIES_RELEASE, DEPENDENCIES_NAMESPACE)] if self.dependencies is not None else []),
            *([(KARPENTER_RELEASE, KARPENTER_NAMESPACE)] if self.karpenter is not None else []),
            *(
                (r, n)
                for r, n in ((KEDA_RELEASE, KEDA_NAMESPACE), (LWS_RELEASE, LWS_NAMESPACE))
                if self.serving and r in self.serving.charts
            ),
        ]
        self.extensions = install_extensions(stack, self.eks, props.extensions, anchors, workloads, releases)
        if self.load_balancer is not None:
            _after_load_balancer(self.load_balancer.chart, self._installs_after_load_balancer(workloads))

    def _namespace_creators(self) -> list[IConstruct]:
        """What creates the teams' namespaces the FSx claims live in: task governance's quotas
        (`hyperpod-ns-<team>`), the Kueue queues' manifest (each team's namespace), and the acceptance
        access's own Namespace manifest where there is one (whether a quota's namespace exists at its
        CREATE_COMPLETE is not documented: fminfra/eks/constructs/accept_access.py). Each is a construct
        that holds the resources (Kueue's chart and queues live under the EKS cluster, not under `Kueue`)."""
        return [
            *([self.task_governance] if self.task_governance is not None else []),
            *([self.kueue.queues] if self.kueue is not None else []),
            *(self.accept_access.manifests[:1] if self.accept_access is not None else []),
            *([self.serving.namespace] if self.serving is not None else []),
        ]

    def _installs_after_load_balancer(self, workloads: Sequence[IConstruct]) -> list[IConstruct]:
        """What installs into the cluster and is not already before the load balancer controller's chart:
        fminfra's workloads, the extensions, the acceptance and plan-drain manifests, Karpenter, and every add-on but
        the core ones (and, with HyperPod, the ones HyperPod needs first), which the chart waits for."""
        assert self.eks is not None
        before = {*REQUIRED_ADDONS, *(HYPERPOD_PREREQUISITE_ADDONS if self.dependencies is not None else ())}
        addons = [addon for name, addon in self.eks.addons.items() if name not in before]
        manifests = [
            *(self.accept_access.manifests if self.accept_access is not None else ()),
            *([self.plan_drain] if self.plan_drain is not None else []),
            *([self.karpenter] if self.karpenter is not None else []),
        ]
        return [*workloads, *addons, *manifests, *self.extensions.values()]

    def _hyperpod(self, stack: Construct, props: ClustersProps, spec: HyperPodSpec) -> None:
        role = props.node_role
        on_eks = props.hyperpod_on_eks
        self.lifecycle = LifecycleScripts(stack, "LifecycleScripts", spec.lifecycle)
        self.lifecycle.grant_read(role)
        logs_arn = cdk.Stack.of(stack).format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"/aws/sagemaker/Clusters/{spec.cluster_name}/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ClusterLogs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[logs_arn],
            )
        )
        # Slurm nodes of a training-plan group read their plan's end to drain before it
        # (scripts/node/drain_before_plan_end.sh): DescribeTrainingPlan on those plans only.
        plans = sorted({g.training_plan_arn for g in spec.instance_groups if g.training_plan_arn})
        if plans and on_eks is None:
            role.add_to_principal_policy(
                iam.PolicyStatement(sid="TrainingPlanEndRead", actions=["sagemaker:DescribeTrainingPlan"], resources=plans)
            )
        policy = role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            acknowledge(
                policy,
                f"IAM5[Resource::{literal(cdk.Stack.of(stack), logs_arn)}]",
                "HyperPod names the log group /aws/sagemaker/Clusters/<name>/<cluster id>; the id is known only after creation, so the ARN ends in *",
            )
        if spec.data_access is not None:
            access = spec.data_access
            _grant_data_bucket(
                cdk.Stack.of(stack), role, access.bucket, access.bucket_name, access.read_only_prefixes, access.read_write_prefixes
            )
        security_groups: list[ec2.ISecurityGroup] = list(spec.security_groups)
        vpc = spec.vpc
        eks_cluster_name = None
        if on_eks is not None and self.eks is not None:
            security_groups.append(self.eks.cluster.cluster_security_group)
            vpc = vpc or self.eks.cluster.vpc
            assert props.eks is not None
            eks_cluster_name = props.eks.cluster_name
        _grant_vpc_config_permissions(role, spec.subnets, security_groups, vpc, eks_cluster_name)
        self.hyperpod = HyperPodCluster(
            stack,
            "HyperPod",
            HyperPodClusterProps(
                cluster_name=spec.cluster_name,
                instance_groups=spec.instance_groups,
                execution_role=role,
                subnets=spec.subnets,
                security_groups=security_groups,
                lifecycle_source_s3_uri=self.lifecycle.source_s3_uri,
                lifecycle_entry_script=self.lifecycle.entry_script,
                eks_cluster_arn=self.eks.cluster_arn if on_eks is not None and self.eks is not None else None,
                autoscaled_groups=spec.autoscaled_groups,
            ),
        )
        self.hyperpod.node.add_dependency(self.lifecycle.deployment)
        # The training operator's managed policy acts only on clusters tagged SageMaker=true.
        cdk.Tags.of(self.hyperpod.cluster).add("SageMaker", "true")
        if on_eks is not None and self.eks is not None:
            self._order_hyperpod_eks()
            if spec.autoscaled_groups:
                self.autoscaling = add_autoscaling_manifests(self.eks.cluster, self.hyperpod, spec.autoscaled_groups)
            if on_eks.task_governance is not None:
                self.task_governance = self._task_governance(stack, on_eks.task_governance)
            if on_eks.accept_access is not None:
                # The namespace of the team accept's jobs queue in, after the quotas that create it.
                after = [self.task_governance] if self.task_governance is not None else []
                self.accept_access = add_accept_access(
                    stack, on_eks.accept_access.role_name, self.eks, on_eks.accept_access.namespaces, after=after
                )
            if on_eks.plan_drain:
                # Training-plan groups: drained from outside the nodes before the plan ends (docs/capacity.md).
                assert props.eks is not None
                self.plan_drain = HyperPodPlanDrain(
                    stack,
                    "PlanDrain",
                    HyperPodPlanDrainProps(cluster=self.eks.cluster, subnets=props.eks.subnets, groups=on_eks.plan_drain),
                )
        cdk.CfnOutput(stack, "HyperPodClusterName", value=spec.cluster_name, description="SageMaker HyperPod cluster")
        cdk.CfnOutput(stack, "HyperPodClusterArn", value=self.hyperpod.cluster_arn, description="SageMaker HyperPod cluster ARN")
        cdk.CfnOutput(
            stack,
            "DescribeClusterCommand",
            value=f"aws sagemaker describe-cluster --region {props.region} --cluster-name {spec.cluster_name}",
            description="Inspect the HyperPod cluster and its instance groups",
        )

    def _order_hyperpod_eks(self) -> None:
        """HyperPod after its prerequisites; the training operator after HyperPod (its install page
        lists an existing HyperPod cluster as a prerequisite: docs/facts/hyperpod.md#hyperpod-training-operator-addon)."""
        assert self.eks is not None and self.hyperpod is not None and self.dependencies is not None
        for name in HYPERPOD_PREREQUISITE_ADDONS:
            self.hyperpod.node.add_dependency(self.eks.addons[name])
        self.hyperpod.node.add_dependency(self.dependencies.resource)
        self.eks.addons["amazon-sagemaker-hyperpod-training-operator"].node.add_dependency(self.hyperpod.cluster)

    def _task_governance(self, stack: Construct, spec: TaskGovernanceSpec) -> TaskGovernance:
        """HyperPod task governance: its add-on after the HyperPod cluster (AWS installs it on an existing
        HyperPod EKS cluster), and the teams' quotas and the cluster policy after the add-on, which
        runs the Kueue they configure (docs/facts/hyperpod.md#hyperpod-task-governance-addon)."""
        assert self.eks is not None and self.hyperpod is not None
        addon = self.eks.addons[TASK_GOVERNANCE_ADDON]
        addon.node.add_dependency(self.hyperpod.cluster)
        governance = TaskGovernance(
            stack,
            "TaskGovernance",
            TaskGovernanceProps(
                cluster_arn=self.hyperpod.cluster_arn,
                name_prefix=spec.name_prefix,
                teams=spec.teams,
                priority_classes=spec.priority_classes,
                tags=spec.tags,
            ),
        )
        governance.node.add_dependency(addon)
        return governance


def _after_load_balancer(chart: IConstruct, installs: Sequence[IConstruct]) -> None:
    """Each of `installs` after the AWS Load Balancer Controller's chart: its webhook refuses every new
    Service until its pods answer (`mservice.elbv2.k8s.aws`, failurePolicy Fail, on by default:
    the webhook template recorded in tests/data/aws_load_balancer_controller/), and Helm waits for those pods, so
    nothing that may create a Service installs while the chart does."""
    for install in installs:
        if install is not chart:
            install.node.add_dependency(chart)


def _kueue(stack: Construct, spec: KueueSpec, eks_cluster: EksCluster) -> Kueue:
    """fminfra's Kueue on EKS without HyperPod: after the VPC CNI and the system nodes its controller runs on."""
    kueue = Kueue(stack, "Kueue", KueueProps(cluster=eks_cluster.cluster, version=spec.version, flavors=spec.flavors, teams=spec.teams))
    kueue.chart.node.add_dependency(eks_cluster.addons["vpc-cni"])
    if eks_cluster.system_nodegroup is not None:
        kueue.chart.node.add_dependency(eks_cluster.system_nodegroup)
    return kueue


def _amp_scraper(stack: Construct, spec: ScraperSpec, eks_cluster: EksCluster) -> AmpScraper:
    """An AMP managed scraper of the cluster's exporters. AMP creates its access entry and
    permissions in the cluster (authentication mode API), so none is declared here
    (docs/facts/observability.md#amp-scraper-creates-its-access-entry)."""
    scraper = AmpScraper(
        stack,
        "AmpScraper",
        AmpScraperProps(
            cluster_arn=eks_cluster.cluster_arn,
            subnets=spec.subnets,
            workspace=spec.workspace,
            security_groups=[eks_cluster.cluster.cluster_security_group],
            scrape_interval_seconds=spec.scrape_interval_seconds,
            alias=spec.alias,
            jobs=spec.jobs,
        ),
    )
    cdk.CfnOutput(stack, "AmpScraperArn", value=scraper.scraper_arn, description="AMP managed scraper of the EKS cluster")
    return scraper


def _inference_launch_template(
    stack: Construct, name: str, props: EfaLaunchTemplateProps, eks_cluster: EksCluster
) -> eks.LaunchTemplateSpec:
    """The group's `EfaLaunchTemplate` with the EKS cluster security group beside its groups (EKS
    stops adding it once a template names groups)."""
    template = EfaLaunchTemplate(
        stack,
        f"InferenceLaunchTemplate-{name}",
        replace(props, additional_security_groups=[*props.additional_security_groups, eks_cluster.cluster.cluster_security_group]),
    )
    return eks.LaunchTemplateSpec(id=template.launch_template_id, version=template.latest_version_number)


def _training_operator_identity(stack: Construct, eks_cluster: EksCluster) -> None:
    """A role for the training operator's controller through EKS Pod Identity, created before the add-on."""
    role = iam.Role(
        stack,
        "TrainingOperatorRole",
        assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(TRAINING_OPERATOR_POLICY)],
        description="HyperPod training operator (EKS Pod Identity)",
    )
    acknowledge(
        role,
        f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{TRAINING_OPERATOR_POLICY}]",
        "The AWS managed policy HyperPod documents for its training operator; it acts only on clusters tagged SageMaker=true",
    )
    association = eks.CfnPodIdentityAssociation(
        stack,
        "TrainingOperatorPodIdentity",
        cluster_name=eks_cluster.cluster_name,
        namespace=TRAINING_OPERATOR_NAMESPACE,
        service_account=TRAINING_OPERATOR_SERVICE_ACCOUNT,
        role_arn=role.role_arn,
    )
    operator = eks_cluster.addons["amazon-sagemaker-hyperpod-training-operator"]
    operator.node.add_dependency(association)
    operator.node.add_dependency(eks_cluster.addons["cert-manager"])
    operator.node.add_dependency(eks_cluster.addons["eks-pod-identity-agent"])


def _grant_data_bucket(
    stack: cdk.Stack, role: iam.IRole, bucket: s3.IBucket, bucket_name: str, read_only: Sequence[str], read_write: Sequence[str]
) -> None:
    """Nodes read the read-only prefixes (datasets) and read, write and delete in the read-write ones
    (checkpoints); nothing else of the bucket. The grant goes through a view of the bucket by its
    (config-derived) name, so the statement names the bucket literally rather than through a
    cross-stack export, and the encryption key through the bucket's key."""
    view = s3.Bucket.from_bucket_attributes(stack, "DataBucketView", bucket_name=bucket_name, encryption_key=bucket.encryption_key)
    for prefix in read_only:
        view.grant_read(role, f"{prefix}*")
    for prefix in read_write:
        view.grant_read_write(role, f"{prefix}*")
    policy = role.node.try_find_child("DefaultPolicy")
    if policy is None:  # no prefixes: no grant
        return
    reason = (
        "CDK grant_read/grant_read_write action groups on the environment's data bucket and its KMS key only, each on the prefixes "
        "storage.bucket.read_only_prefixes / read_write_prefixes name: nodes read datasets and write checkpoints"
    )
    actions = ["s3:GetObject*", "s3:GetBucket*", "s3:List*"]
    if read_write:
        actions += ["s3:DeleteObject*", "s3:Abort*"]
    if bucket.encryption_key is not None:
        actions += ["kms:GenerateDataKey*", "kms:ReEncrypt*"] if read_write else []
    for action in actions:
        acknowledge(policy, f"IAM5[Action::{action}]", reason)
    for prefix in [*read_only, *read_write]:
        acknowledge(policy, f"IAM5[Resource::{literal(stack, view.arn_for_objects(f'{prefix}*'))}]", reason)


def _grant_vpc_config_permissions(
    role: iam.IRole,
    subnets: Sequence[ec2.ISubnet],
    security_groups: Sequence[ec2.ISecurityGroup],
    vpc: ec2.IVpc | None,
    eks_cluster_name: str | None,
) -> None:
    """What the execution role needs for the cluster's VpcConfig, scoped as AWS's reference roles do
    or narrower (docs/facts/iam.md#hyperpod-vpc-config-permissions): reads on `*` (they take no
    resource); network-interface changes on this account's and region's interfaces and on the
    cluster's own subnets, security groups and VPC, detaching also on its instances; tags on network interfaces, with no key
    condition (no source names the keys HyperPod writes: docs/facts/eks.md#vpc-cni-eni-tag-keys).
    On EKS (`eks_cluster_name`) also the VPC CNI's, image pulls' and Pod Identity's permissions
    (docs/facts/iam.md#hyperpod-eks-execution-role-permissions), the latter on this cluster only."""
    stack = cdk.Stack.of(role)
    on_eks = eks_cluster_name is not None

    def ec2_arn(resource: str, name: str) -> str:
        return stack.format_arn(service="ec2", resource=resource, resource_name=name)

    reads = [*VPC_CONFIG_READ_ACTIONS, *(EKS_NODE_READ_ACTIONS if on_eks else ())]
    # Attaching takes an instance and an interface only (AWS's EKS role grants it on those alone).
    attach = "ec2:AttachNetworkInterface"
    # Detaching is authorized against the instance as well as the interface, on Slurm too
    # (docs/facts/iam.md#iam-required-resource-types); on Slurm it gets its own statement so the
    # create/delete actions do not gain instances.
    detach = "ec2:DetachNetworkInterface"
    enis = sorted(
        [*(a for a in VPC_CONFIG_ENI_ACTIONS if on_eks or a != detach), *(a for a in EKS_NODE_ENI_ACTIONS if a != attach and on_eks)]
    )
    interfaces = ec2_arn("network-interface", "*")
    instances = ec2_arn("instance", "*")
    eni_resources = [
        interfaces,
        *([instances] if on_eks else []),
        *(ec2_arn("subnet", s.subnet_id) for s in subnets),
        *(ec2_arn("security-group", g.security_group_id) for g in security_groups),
        ec2_arn("vpc", vpc.vpc_id if vpc is not None else "*"),
    ]
    role.add_to_principal_policy(iam.PolicyStatement(sid="VpcConfigRead", actions=sorted(reads), resources=["*"]))
    role.add_to_principal_policy(iam.PolicyStatement(sid="VpcConfigEnis", actions=enis, resources=eni_resources))
    if not on_eks:
        role.add_to_principal_policy(iam.PolicyStatement(sid="VpcConfigDetachEnis", actions=[detach], resources=[instances, interfaces]))
    role.add_to_principal_policy(iam.PolicyStatement(sid="VpcConfigEniTags", actions=[ENI_TAG_ACTION], resources=[interfaces]))
    if on_eks:
        role.add_to_principal_policy(iam.PolicyStatement(sid="EksNodeAttachEnis", actions=[attach], resources=[instances, interfaces]))
    if eks_cluster_name is not None:
        cluster = stack.format_arn(service="eks", resource="cluster", resource_name=eks_cluster_name)
        role.add_to_principal_policy(iam.PolicyStatement(sid="EksPodIdentity", actions=[POD_IDENTITY_ACTION], resources=[cluster]))
    policy = role.node.try_find_child("DefaultPolicy")
    assert policy is not None
    acknowledge(
        policy,
        "IAM5[Resource::*]",
        "EC2 Describe*, cloudwatch:DescribeAlarms and ecr:GetAuthorizationToken take no resource; the image-pull actions are what "
        "AWS's HyperPod EKS execution role grants on *",
    )
    acknowledge(
        policy,
        f"IAM5[Resource::{literal(stack, interfaces)}]",
        "SageMaker and the VPC CNI create, tag and delete the nodes' network interfaces, whose ids do not exist yet: the "
        "resource type, account and region are fixed, and creation also needs the cluster's own subnets and security groups",
    )
    if vpc is None:
        acknowledge(
            policy,
            f"IAM5[Resource::{literal(stack, ec2_arn('vpc', '*'))}]",
            "no VPC was given: network interfaces in any VPC of this account and region, as AWS's Slurm execution role allows",
        )
    acknowledge(
        policy,
        f"IAM5[Resource::{literal(stack, instances)}]",
        "ec2:DetachNetworkInterface is authorized against the instance an interface is attached to, a HyperPod node whose "
        "instance id is not known in advance"
        + ("; the VPC CNI also attaches interfaces to and assigns IPs on those nodes" if on_eks else ""),
    )
