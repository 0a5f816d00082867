"""The clusters of the Compute stack (HyperPod Slurm or EKS, the EKS cluster, inference node groups,
the AMP scraper): a builder that translates the config into construct props, called by
`ComputeStack` (`fminfra/compute/stack/__init__.py`). Not a stack of its own: its resources share
the Compute stack's lifecycle (the node role, placement groups and capacity are in it too), and a
separate stack would turn every reference between them into a CloudFormation export.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import aws_cdk as cdk
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

from fminfra import catalog
from fminfra.compute.config import DEFAULT_GPU_TAINT
from fminfra.compute.constructs.launch_template import (
    IMDS_HOP_LIMIT_EKS_NODES,
    CapacityReservationTarget,
    EfaLaunchTemplate,
    EfaLaunchTemplateProps,
)
from fminfra.compute.constructs.placement import ClusterPlacementGroup
from fminfra.compute.stack.accept_access import add_accept_access
from fminfra.config import CONTROLLER_GROUP_NAME, LOGIN_GROUP_NAME, EnvironmentConfig, supported_kubernetes_versions
from fminfra.core.resources import scripts_root
from fminfra.core.versions import version
from fminfra.eks.constructs.cluster import EksCluster, EksClusterProps, HelmChartSpec
from fminfra.eks.constructs.inference_node_group import InferenceNodeGroup, InferenceNodeGroupProps
from fminfra.eks.constructs.kueue import GpuFlavor, Kueue, KueueProps
from fminfra.eks.rules import team_queue
from fminfra.hyperpod.constructs.cluster import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from fminfra.hyperpod.constructs.dependencies import HyperPodDependencies, HyperPodDependenciesProps
from fminfra.hyperpod.constructs.lifecycle_scripts import LifecycleScripts, LifecycleScriptsProps, lifecycle_bucket_name
from fminfra.hyperpod.constructs.task_governance import ADDON_NAME as TASK_GOVERNANCE_ADDON
from fminfra.hyperpod.constructs.task_governance import ADDON_VERSION_KEY as TASK_GOVERNANCE_VERSION_KEY
from fminfra.hyperpod.constructs.task_governance import TaskGovernance, TaskGovernanceProps, TeamQuota
from fminfra.network.stack import NetworkStack, removal_policy
from fminfra.observability.constructs.amp_scraper import AmpScraper, AmpScraperProps
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace
from fminfra.policy.constructs.acknowledge import acknowledge, literal

# EKS add-on name -> manifest key of its pinned version.
ADDONS = {
    "vpc-cni": "EKS_ADDON_VPC_CNI_VERSION",
    "coredns": "EKS_ADDON_COREDNS_VERSION",
    "kube-proxy": "EKS_ADDON_KUBE_PROXY_VERSION",
    "eks-pod-identity-agent": "EKS_ADDON_POD_IDENTITY_AGENT_VERSION",
}
# Added when HyperPod runs on the cluster: the training operator and the cert-manager it needs.
HYPERPOD_ADDONS = {
    "cert-manager": "EKS_ADDON_CERT_MANAGER_VERSION",
    "amazon-sagemaker-hyperpod-training-operator": "EKS_ADDON_HYPERPOD_TRAINING_OPERATOR_VERSION",
}
# Kubectl/helm Lambda layers by Kubernetes version (one per supported version; the layer's kubectl
# minor version is the cluster's: docs/facts/eks.md#eks-kubectl-layer-v34).
KUBECTL_LAYERS = {"1.34": KubectlV34Layer}
# Instance types on the Slurm controller and login groups are CPU types: no deep health checks.
SLURM_CONTROLLER_DEEP_HEALTH_CHECKS: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class FsxMount:
    """The FSx for Lustre file system the nodes mount (from the Storage stack)."""

    dns_name: str
    mount_name: str
    mount_path: str = "/fsx"


@dataclass
class Orchestration:
    """What `add_eks_and_hyperpod` created (None where the config asks for none)."""

    lifecycle: LifecycleScripts | None = None
    hyperpod: HyperPodCluster | None = None
    eks: EksCluster | None = None
    dependencies: HyperPodDependencies | None = None
    scraper: AmpScraper | None = None
    task_governance: TaskGovernance | None = None
    kueue: Kueue | None = None
    inference_node_groups: dict[str, InferenceNodeGroup] = field(default_factory=dict)


# The AMP managed scraper's Kubernetes identity (bound by an access entry to its role) and what
# it may read: the pods, nodes and endpoints it discovers exporters through.
SCRAPER_USERNAME = "aps-collector-user"
SCRAPER_RBAC: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "aps-collector-role"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["nodes", "nodes/metrics", "services", "endpoints", "pods"],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "aps-collector-user-role-binding"},
        "subjects": [{"kind": "User", "name": SCRAPER_USERNAME, "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "aps-collector-role", "apiGroup": "rbac.authorization.k8s.io"},
    },
)


# The EKS node exporter pods collect the EFA counters with the nodes' own collector: a sidecar (in
# the node exporter image, busybox sh) runs collect_efa.sh from a ConfigMap every 30 s into a volume
# the node exporter's textfile collector reads. Chart values: prometheus-node-exporter's
# configmaps, sidecars, sidecarVolumeMount, extraArgs, extraManifests
# (docs/facts/observability.md#chart-node-exporter-sidecar-values).
EFA_COLLECTOR_CONFIGMAP = "fminfra-efa-collector"
EFA_TEXTFILE_DIR = "/var/lib/fminfra/textfile"
EFA_COLLECT_SECONDS = 30


def _efa_collector_values(script: str) -> dict[str, Any]:
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": EFA_COLLECTOR_CONFIGMAP, "namespace": "monitoring"},
        "data": {"collect_efa.sh": script},
    }
    return {
        "extraArgs": [f"--collector.textfile.directory={EFA_TEXTFILE_DIR}"],
        "extraManifests": [yaml.safe_dump(configmap, sort_keys=False)],
        "configmaps": [{"name": EFA_COLLECTOR_CONFIGMAP, "mountPath": "/opt/fminfra"}],
        "sidecarVolumeMount": [{"name": "fminfra-textfile", "mountPath": EFA_TEXTFILE_DIR, "readOnly": False}],
        "sidecars": [
            {
                "name": "efa-collector",
                "command": ["/bin/sh", "/opt/fminfra/collect_efa.sh", "--every", str(EFA_COLLECT_SECONDS)],
                "env": [{"name": "SYSFS_ROOT", "value": "/host/sys"}, {"name": "TEXTFILE_DIR", "value": EFA_TEXTFILE_DIR}],
                "volumeMounts": [
                    {"name": "sys", "mountPath": "/host/sys", "readOnly": True},
                    {"name": EFA_COLLECTOR_CONFIGMAP, "mountPath": "/opt/fminfra", "readOnly": True},
                ],
            }
        ],
    }


def exporter_charts() -> list[HelmChartSpec]:
    """GPU and node exporters on every node, for the AMP scraper (ports of `AmpScraper`'s jobs).

    The DCGM exporter collects the fields of scripts/observability/dcgm-counters.csv, as the Slurm
    and ec2 nodes do (the chart's `customMetrics` replaces its default list, which lacks the ECC,
    violation, NVLink error and Xid-count fields the rules use:
    docs/facts/observability.md#dcgm-exporter-chart-custom-metrics). The node exporter also serves
    the EFA counters (see `_efa_collector_values`).
    """
    observability = scripts_root() / "observability"
    counters = (observability / "dcgm-counters.csv").read_text(encoding="utf-8")
    efa_script = (observability / "collect_efa.sh").read_text(encoding="utf-8")
    return [
        HelmChartSpec(
            name="dcgm-exporter",
            chart="dcgm-exporter",
            repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
            version=version("CHART_DCGM_EXPORTER_VERSION"),
            namespace="monitoring",
            values={"tolerations": [{"operator": "Exists"}], "serviceMonitor": {"enabled": False}, "customMetrics": counters},
        ),
        HelmChartSpec(
            name="prometheus-node-exporter",
            chart="prometheus-node-exporter",
            repository="https://prometheus-community.github.io/helm-charts",
            version=version("CHART_PROMETHEUS_NODE_EXPORTER_VERSION"),
            namespace="monitoring",
            values={
                "image": {"tag": f"v{version('NODE_EXPORTER_VERSION')}"},
                "tolerations": [{"operator": "Exists"}],
                **_efa_collector_values(efa_script),
            },
        ),
    ]


# The node label every EKS node carries with its EC2 instance type (HyperPod nodes carry the ml.
# name), selected instead of node-feature-discovery's labels (docs/facts/eks.md#k8s-instance-type-label).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# The values keys fminfra sets, each referenced as .Values.<key> by the chart's templates at the
# pinned version (docs/facts/eks.md#chart-nvidia-device-plugin-values, #chart-aws-efa-k8s-device-plugin-values).
DEVICE_PLUGIN_VALUE_KEYS = {
    "nvidia-device-plugin": ("affinity", "tolerations"),
    "aws-efa-k8s-device-plugin": ("supportedInstanceLabels", "tolerations"),
}


def _tolerations(cfg: EnvironmentConfig) -> list[dict[str, str]]:
    """Tolerations of the inference groups' taints (the GPU taint when a group lists none), one per
    (key, effect), plus the CriticalAddonsOnly one the charts' defaults carry."""
    seen: dict[tuple[str, str], None] = {("CriticalAddonsOnly", ""): None}
    for g in cfg.compute.inference_node_groups:
        taints: list[tuple[str, str]] = [(t.key, t.effect) for t in g.taints] or [(DEFAULT_GPU_TAINT[0], DEFAULT_GPU_TAINT[2])]
        for taint in taints:
            seen.setdefault(taint, None)
    return [{"key": k, "operator": "Exists", **({"effect": e} if e else {})} for k, e in seen]


def device_plugin_charts(cfg: EnvironmentConfig) -> list[HelmChartSpec]:
    """fminfra's NVIDIA and EFA device plugins, only for the EKS inference node groups: they select
    the groups' EC2 instance types (never a HyperPod ml. type, which the HyperPod dependency chart's
    own plugins select) and tolerate the groups' taints. None without inference groups."""
    groups = cfg.compute.inference_node_groups
    if not groups:
        return []
    tolerations = _tolerations(cfg)
    gpu_types = sorted({g.spec.name for g in groups})
    charts = [
        HelmChartSpec(
            name="nvidia-device-plugin",
            chart="nvidia-device-plugin",
            repository="https://nvidia.github.io/k8s-device-plugin",
            version=version("CHART_NVIDIA_DEVICE_PLUGIN_VERSION"),
            values={
                # Replaces the default affinity on node-feature-discovery labels, which nothing sets.
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": gpu_types}]}
                            ]
                        }
                    }
                },
                "tolerations": tolerations,
            },
        )
    ]
    efa_types = sorted({g.spec.name for g in groups if g.spec.training})
    if efa_types:
        charts.append(
            HelmChartSpec(
                name="aws-efa-k8s-device-plugin",
                chart="aws-efa-k8s-device-plugin",
                repository="https://aws.github.io/eks-charts",
                version=version("CHART_AWS_EFA_K8S_DEVICE_PLUGIN_VERSION"),
                values={"supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": efa_types}, "tolerations": tolerations[1:]},
            )
        )
    return charts


def hyperpod_dependency_values(cfg: EnvironmentConfig) -> dict[str, object]:
    """Values on top of the HyperPod dependency chart's defaults: only the health-monitoring agent's
    region, which otherwise falls back to us-east-1 while no node exists yet
    (docs/facts/hyperpod.md#hyperpod-health-monitoring-agent-region)."""
    return {"health-monitoring-agent": {"region": cfg.region}}


def provisioning_parameters(cfg: EnvironmentConfig, fsx: FsxMount | None = None, remote_write_url: str | None = None) -> dict[str, Any]:
    """provisioning_parameters.json: what the lifecycle scripts (and HyperPod's classic Slurm
    set-up) read: the group names by Slurm role, the FSx file system to mount, and where the
    exporters remote-write (the AMP workspace's URL, when there is one). `gpu_groups` names the
    training groups (all GPU types): only their nodes run the GPU verification; the Slurm
    controller and login groups are CPU types (scripts/lifecycle/on_create.sh)."""
    params: dict[str, Any] = {
        "version": "1.0.0",
        "workload_manager": cfg.compute.orchestrator,
        "cluster_name": cfg.physical_name("hyperpod"),
        "region": cfg.region,
        "gpu_groups": [g.name for g in cfg.compute.instance_groups],
    }
    if cfg.compute.orchestrator == "slurm":
        slurm = cfg.compute.slurm
        assert slurm is not None  # the config fills the default
        params["controller_group"] = CONTROLLER_GROUP_NAME
        if slurm.login.count > 0:
            params["login_group"] = LOGIN_GROUP_NAME
        params["worker_groups"] = [{"instance_group_name": g.name, "partition_name": g.name} for g in cfg.compute.instance_groups]
    if fsx is not None:
        params.update({"fsx_dns_name": fsx.dns_name, "fsx_mountname": fsx.mount_name, "fsx_mount_path": fsx.mount_path})
    if remote_write_url is not None:
        params["prometheus_remote_write_url"] = remote_write_url
    return params


def hyperpod_instance_groups(cfg: EnvironmentConfig) -> list[HyperPodInstanceGroup]:
    """Controller and login groups (Slurm), then the training groups, as HyperPod groups."""
    groups: list[HyperPodInstanceGroup] = []
    if cfg.compute.orchestrator == "slurm":
        slurm = cfg.compute.slurm
        assert slurm is not None
        groups.append(
            HyperPodInstanceGroup(
                name=CONTROLLER_GROUP_NAME,
                instance_type=slurm.controller.instance_type,
                instance_count=1,
                instance_storage_gib=slurm.controller.instance_storage_gib,
            )
        )
        if slurm.login.count > 0:
            groups.append(
                HyperPodInstanceGroup(
                    name=LOGIN_GROUP_NAME,
                    instance_type=slurm.login.instance_type,
                    instance_count=slurm.login.count,
                    instance_storage_gib=slurm.login.instance_storage_gib,
                )
            )
    checks = {"instance_stress": "InstanceStress", "instance_connectivity": "InstanceConnectivity"}
    for g in cfg.compute.instance_groups:
        groups.append(
            HyperPodInstanceGroup(
                name=g.name,
                instance_type=g.spec.hyperpod_name,
                instance_count=g.count,
                threads_per_core=g.threads_per_core,
                instance_storage_gib=g.instance_storage_gib if g.instance_storage_gib is not None else 500,
                deep_health_checks=[checks[c] for c in g.deep_health_checks] if g.deep_health_checks is not None else None,
                training_plan_arn=g.capacity.training_plan_arn,
            )
        )
    return groups


def add_eks_and_hyperpod(
    stack: cdk.Stack,
    *,
    cfg: EnvironmentConfig,
    network: NetworkStack,
    placement_groups: dict[str, ClusterPlacementGroup],
    node_role: iam.IRole | None = None,
    fsx: FsxMount | None = None,
    data_bucket: s3.IBucket | None = None,
    capacity_targets: dict[str, CapacityReservationTarget] | None = None,
    remote_write_url: str | None = None,
    prometheus: PrometheusWorkspace | None = None,
) -> Orchestration:
    """Create the EKS cluster, the HyperPod cluster and the inference node groups the config asks for."""
    out = Orchestration()
    compute = cfg.compute
    if compute.needs_eks:
        assert compute.eks is not None
        addons = {name: version(key) for name, key in ADDONS.items()}
        if compute.orchestrator == "eks":
            addons.update({name: version(key) for name, key in HYPERPOD_ADDONS.items()})
        if compute.team_quotas():
            addons[TASK_GOVERNANCE_ADDON] = version(TASK_GOVERNANCE_VERSION_KEY)
        layer_class = KUBECTL_LAYERS[compute.eks.kubernetes_version]
        kubectl_layer = layer_class(stack, "KubectlLayer")
        out.eks = EksCluster(
            stack,
            "Eks",
            EksClusterProps(
                cluster_name=cfg.physical_name("eks"),
                kubernetes_version=compute.eks.kubernetes_version,
                supported_versions=supported_kubernetes_versions(),
                vpc=network.vpc,
                subnets=network.private_subnets,
                addon_versions=addons,
                admin_principal_arns=compute.eks.admin_principal_arns,
                public_access_cidrs=compute.eks.public_access_cidrs,
                helm_charts=[*device_plugin_charts(cfg), *(exporter_charts() if prometheus is not None else [])],
                kubectl_layer=kubectl_layer,
                removal_policy=removal_policy(cfg),
                system_node_count=compute.system_node_count(),
                system_node_instance_type=compute.eks.system_nodes.instance_type,
            ),
        )
        if compute.orchestrator == "eks":
            _training_operator_identity(stack, out.eks)
            out.dependencies = HyperPodDependencies(
                stack,
                "HyperPodDependencies",
                HyperPodDependenciesProps(
                    cluster=out.eks.cluster,
                    subnets=network.private_subnets,
                    kubectl_layer=kubectl_layer,
                    commit=version("HYPERPOD_CLI_COMMIT"),
                    values=hyperpod_dependency_values(cfg),
                ),
            )
            # helm reaches pods' networking only once the VPC CNI runs.
            out.dependencies.resource.node.add_dependency(out.eks.addons["vpc-cni"])
        if compute.kueue_quotas():
            out.kueue = _kueue(stack, cfg, out.eks)
        if prometheus is not None:
            out.scraper = _amp_scraper(stack, cfg, network, out.eks, prometheus)
        cdk.CfnOutput(stack, "EksClusterName", value=out.eks.cluster_name, description="EKS cluster")
        cdk.CfnOutput(
            stack,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {cfg.region} --name {cfg.physical_name('eks')}",
            description="Connect kubectl to the EKS cluster",
        )

    if compute.hyperpod:
        role = node_role or stack.node_role  # type: ignore[attr-defined]
        root = scripts_root()
        folders = {"": root / "lifecycle", "node": root / "node"}
        if (root / "observability").is_dir():
            folders["observability"] = root / "observability"
        out.lifecycle = LifecycleScripts(
            stack,
            "LifecycleScripts",
            LifecycleScriptsProps(
                bucket_name=lifecycle_bucket_name(cfg.name, cfg.account, cfg.region),
                folders=folders,
                parameters=provisioning_parameters(cfg, fsx, remote_write_url),
                removal_policy=removal_policy(cfg),
            ),
        )
        out.lifecycle.grant_read(role)
        cluster_name = cfg.physical_name("hyperpod")
        logs_arn = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"/aws/sagemaker/Clusters/{cluster_name}/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ClusterLogs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[logs_arn],
            )
        )
        policy = role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            acknowledge(
                policy,
                f"IAM5[Resource::{literal(stack, logs_arn)}]",
                "HyperPod names the log group /aws/sagemaker/Clusters/<name>/<cluster id>; the id is known only after creation, so the ARN ends in *",
            )
        if data_bucket is not None and cfg.storage is not None:
            bucket_cfg = cfg.storage.bucket
            _grant_data_bucket(
                stack, role, data_bucket, cfg.storage.bucket_name(cfg), bucket_cfg.read_only_prefixes, bucket_cfg.read_write_prefixes
            )
        if compute.orchestrator == "eks":
            _grant_eks_node_permissions(role)
        security_groups: list[ec2.ISecurityGroup] = [network.efa_security_group]
        if out.eks is not None and compute.orchestrator == "eks":
            security_groups.append(out.eks.cluster.cluster_security_group)
        out.hyperpod = HyperPodCluster(
            stack,
            "HyperPod",
            HyperPodClusterProps(
                cluster_name=cluster_name,
                instance_groups=hyperpod_instance_groups(cfg),
                execution_role=role,
                subnets=[network.compute_subnet],
                security_groups=security_groups,
                lifecycle_source_s3_uri=out.lifecycle.source_s3_uri,
                lifecycle_entry_script=out.lifecycle.entry_script,
                eks_cluster_arn=out.eks.cluster_arn if out.eks is not None and compute.orchestrator == "eks" else None,
            ),
        )
        out.hyperpod.node.add_dependency(out.lifecycle.deployment)
        # The training operator's managed policy acts only on clusters tagged SageMaker=true.
        cdk.Tags.of(out.hyperpod.cluster).add("SageMaker", "true")
        if out.eks is not None and compute.orchestrator == "eks":
            _order_hyperpod_eks(out)
            out.task_governance = _task_governance(stack, cfg, out)
            if compute.eks is not None and compute.eks.accept_access:
                # The namespace of the team accept's jobs queue in, after the quotas that create it.
                after = [out.task_governance] if out.task_governance is not None else []
                team = compute.acceptance_team()
                assert team is not None  # validated: accept_access needs a task governance team
                add_accept_access(stack, cfg, out.eks, [team_queue("hyperpod-eks", team).namespace], after=after)
        cdk.CfnOutput(stack, "HyperPodClusterName", value=cluster_name, description="SageMaker HyperPod cluster")
        cdk.CfnOutput(stack, "HyperPodClusterArn", value=out.hyperpod.cluster_arn, description="SageMaker HyperPod cluster ARN")
        cdk.CfnOutput(
            stack,
            "DescribeClusterCommand",
            value=f"aws sagemaker describe-cluster --region {cfg.region} --cluster-name {cluster_name}",
            description="Inspect the HyperPod cluster and its instance groups",
        )

    for igroup in compute.inference_node_groups:
        assert out.eks is not None
        spec = catalog.get(igroup.instance_type)
        placement = placement_groups.get(igroup.name)
        target = (capacity_targets or {}).get(igroup.name)
        launch_template = None
        if spec.training or placement is not None or target is not None:
            launch_template = _inference_launch_template(
                stack, cfg, igroup.name, spec.name, igroup.root_volume_gib, out.eks, network, placement, target
            )
        out.inference_node_groups[igroup.name] = InferenceNodeGroup(
            stack,
            f"Inference-{igroup.name}",
            InferenceNodeGroupProps(
                cluster=cast(eks.ICluster, out.eks.cluster),
                nodegroup_name=cfg.physical_name(igroup.name),
                instance_type=igroup.instance_type,
                min_size=igroup.min_size,
                desired_size=igroup.desired_size,
                max_size=igroup.max_size,
                subnets=[network.compute_subnet],
                labels=igroup.labels,
                taints=[(t.key, t.value, t.effect) for t in igroup.taints] or None,
                root_volume_gib=igroup.root_volume_gib,
                launch_template=launch_template,
                capacity_block=igroup.capacity.type == "capacity-block",
            ),
        )
    return out


# What HyperPod nodes of an EKS cluster do beyond the managed policy: the VPC CNI manages their
# ENIs and IPs, the kubelet pulls images, and pods get credentials from the Pod Identity agent.
EKS_NODE_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:AttachNetworkInterface",
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
    "ec2:DescribeVpcs",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetAuthorizationToken",
    "ecr:GetDownloadUrlForLayer",
    "eks-auth:AssumeRoleForPodIdentity",
)


# The HyperPod training operator add-on's controller and the AWS managed policy it documents.
TRAINING_OPERATOR_NAMESPACE = "aws-hyperpod"
TRAINING_OPERATOR_SERVICE_ACCOUNT = "hp-training-operator-controller-manager"
TRAINING_OPERATOR_POLICY = "AmazonSageMakerHyperPodTrainingOperatorAccess"


def _amp_scraper(
    stack: cdk.Stack, cfg: EnvironmentConfig, network: NetworkStack, eks_cluster: EksCluster, prometheus: PrometheusWorkspace
) -> AmpScraper:
    """An AMP managed scraper of the cluster's exporters, with the access it needs in the cluster."""
    scraper = AmpScraper(
        stack,
        "AmpScraper",
        AmpScraperProps(
            cluster_arn=eks_cluster.cluster_arn,
            subnets=network.private_subnets[:5],
            workspace=prometheus,
            security_groups=[eks_cluster.cluster.cluster_security_group],
            scrape_interval_seconds=cfg.observability.scrape_interval_seconds,
            alias=cfg.physical_name("scraper"),
        ),
    )
    access = eks_l1.CfnAccessEntry(
        stack,
        "AmpScraperAccessEntry",
        cluster_name=eks_cluster.cluster_name,
        principal_arn=scraper.role_arn,
        username=SCRAPER_USERNAME,
        type="STANDARD",
    )
    rbac = eks_cluster.cluster.add_manifest("AmpScraperRbac", *SCRAPER_RBAC)
    rbac.node.add_dependency(access)
    cdk.CfnOutput(stack, "AmpScraperArn", value=scraper.scraper_arn, description="AMP managed scraper of the EKS cluster")
    return scraper


def _training_operator_identity(stack: cdk.Stack, eks_cluster: EksCluster) -> None:
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


# What the HyperPod cluster waits for: the add-ons HyperPod's prerequisites name and the dependency
# chart (docs/facts/hyperpod.md#hyperpod-eks-prerequisites, #hyperpod-eks-helm-chart-required).
HYPERPOD_PREREQUISITE_ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")


def _order_hyperpod_eks(out: Orchestration) -> None:
    """HyperPod after its prerequisites; the training operator after HyperPod (its install page
    lists an existing HyperPod cluster as a prerequisite: docs/facts/hyperpod.md#hyperpod-training-operator-addon)."""
    assert out.eks is not None and out.hyperpod is not None and out.dependencies is not None
    for name in HYPERPOD_PREREQUISITE_ADDONS:
        out.hyperpod.node.add_dependency(out.eks.addons[name])
    out.hyperpod.node.add_dependency(out.dependencies.resource)
    out.eks.addons["amazon-sagemaker-hyperpod-training-operator"].node.add_dependency(out.hyperpod.cluster)


def _task_governance(stack: cdk.Stack, cfg: EnvironmentConfig, out: Orchestration) -> TaskGovernance | None:
    """HyperPod task governance: its add-on after the HyperPod cluster (AWS installs it on an existing
    HyperPod EKS cluster), and the teams' quotas and the cluster policy after the add-on, which
    runs the Kueue they configure (docs/facts/hyperpod.md#hyperpod-task-governance-addon)."""
    assert out.eks is not None and out.hyperpod is not None
    quotas = cfg.compute.team_quotas()
    if not quotas:
        return None
    addon = out.eks.addons[TASK_GOVERNANCE_ADDON]
    addon.node.add_dependency(out.hyperpod.cluster)
    assert cfg.compute.eks is not None
    governance = TaskGovernance(
        stack,
        "TaskGovernance",
        TaskGovernanceProps(
            cluster_arn=out.hyperpod.cluster_arn,
            name_prefix=cfg.name,
            teams=[TeamQuota(team=team, instances=instances) for team, instances in quotas.items()],
            priority_classes=cfg.compute.eks.scheduling.priority_classes,
            tags={"fminfra:environment": cfg.name, **cfg.tags},  # the stage's tags (fminfra/app/stage.py)
        ),
    )
    governance.node.add_dependency(addon)
    return governance


def _kueue(stack: cdk.Stack, cfg: EnvironmentConfig, eks_cluster: EksCluster) -> Kueue:
    """fminfra's Kueue on EKS without HyperPod (opt-in): a flavor per inference GPU type tolerating
    its groups' taints, a queue per team; after the VPC CNI and the system nodes its controller runs on."""
    flavors: dict[str, list[dict[str, str]]] = {}
    for g in cfg.compute.inference_node_groups:
        taints: list[tuple[str, str, str]] = [(t.key, t.value, t.effect) for t in g.taints] or [DEFAULT_GPU_TAINT]
        tolerations = flavors.setdefault(g.spec.name, [])
        for key, value, effect in taints:
            toleration = {"key": key, "operator": "Equal", "value": value, "effect": effect}
            if toleration not in tolerations:
                tolerations.append(toleration)
    kueue = Kueue(
        stack,
        "Kueue",
        KueueProps(
            cluster=eks_cluster.cluster,
            version=version("CHART_KUEUE_VERSION"),
            flavors=[GpuFlavor(instance_type=t, tolerations=tol) for t, tol in sorted(flavors.items())],
            teams=cfg.compute.kueue_quotas(),
        ),
    )
    kueue.chart.node.add_dependency(eks_cluster.addons["vpc-cni"])
    if eks_cluster.system_nodegroup is not None:
        kueue.chart.node.add_dependency(eks_cluster.system_nodegroup)
    return kueue


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


def _grant_eks_node_permissions(role: iam.IRole) -> None:
    """The VPC CNI's, image pulls' and Pod Identity's permissions on HyperPod EKS nodes, as narrow as
    EC2 allows: reads and ecr:GetAuthorizationToken take no resource (docs/facts/iam.md#eks-cni-policy-actions);
    ENI changes are limited to the stack's region; ENI tags to the keys the VPC CNI writes
    (docs/facts/eks.md#vpc-cni-eni-tag-keys)."""
    stack = cdk.Stack.of(role)
    cni_tag_keys = [
        "node.k8s.amazonaws.com/instance_id",
        "node.k8s.amazonaws.com/createdAt",
        "cluster.k8s.amazonaws.com/name",
        "eks:eni:owner",
    ]
    mutating = tuple(a for a in EKS_NODE_ACTIONS if a.startswith("ec2:") and not a.startswith("ec2:Describe"))
    reads = tuple(a for a in EKS_NODE_ACTIONS if a not in mutating)
    role.add_to_principal_policy(iam.PolicyStatement(sid="EksNodesRead", actions=list(reads), resources=["*"]))
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="EksNodeEnis",
            actions=list(mutating),
            resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": stack.region}},
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="EksNodeEniTags",
            actions=["ec2:CreateTags"],
            resources=[stack.format_arn(service="ec2", resource="network-interface", resource_name="*")],
            conditions={"ForAllValues:StringEquals": {"aws:TagKeys": cni_tag_keys}},
        )
    )
    policy = role.node.try_find_child("DefaultPolicy")
    assert policy is not None
    acknowledge(
        policy,
        "IAM5[Resource::*]",
        "EC2 Describe* and ecr:GetAuthorizationToken take no resource, eks-auth:AssumeRoleForPodIdentity is scoped by the cluster's pod "
        "identity associations, and the VPC CNI creates and attaches ENIs whose ids do not exist yet (AmazonEKS_CNI_Policy grants them on *): "
        "ENI changes are limited to this region by aws:RequestedRegion",
    )
    acknowledge(
        policy,
        "IAM5[Resource::arn:aws:ec2:" + f"{stack.region}:{stack.account}:network-interface/*]",
        "The VPC CNI tags the ENIs it creates; their ids are not known in advance, so the resource type is fixed and aws:TagKeys allows only the CNI's keys",
    )


def _inference_launch_template(
    stack: cdk.Stack,
    cfg: EnvironmentConfig,
    name: str,
    instance_type: str,
    root_volume_gib: int,
    eks_cluster: EksCluster,
    network: NetworkStack,
    placement: ClusterPlacementGroup | None,
    capacity: CapacityReservationTarget | None,
) -> eks.LaunchTemplateSpec:
    """An `EfaLaunchTemplate` for an EKS managed node group: every EFA interface of the type, the
    EKS cluster security group beside the EFA group (EKS stops adding it once a template names
    groups), IMDSv2 for the node and host-network pods only, the placement group and the reserved capacity."""
    template = EfaLaunchTemplate(
        stack,
        f"InferenceLaunchTemplate-{name}",
        EfaLaunchTemplateProps(
            instance_type=instance_type,
            efa_security_group=network.efa_security_group,
            additional_security_groups=[eks_cluster.cluster.cluster_security_group],
            root_volume_gib=root_volume_gib,
            imds_hop_limit=IMDS_HOP_LIMIT_EKS_NODES,
            capacity=capacity,
            placement_group=placement.placement_group if placement else None,
            launch_template_name=cfg.physical_name(name),
        ),
    )
    return eks.LaunchTemplateSpec(id=template.launch_template_id, version=template.latest_version_number)
