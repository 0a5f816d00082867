"""The clusters of the Compute stack (HyperPod Slurm or EKS, the EKS cluster, inference node groups,
the AMP scraper): the builder that translates the config into the typed props of `Clusters`
(`fminfra/compute/constructs/clusters.py`), called by `ComputeStack` (`fminfra/compute/stack/__init__.py`). Not a stack of its own: its resources share
the Compute stack's lifecycle (the node role, placement groups and capacity are in it too), and a
separate stack would turn every reference between them into a CloudFormation export.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer

from fminfra import catalog
from fminfra.compute.config import CapacityConfig
from fminfra.compute.constructs.clusters import (
    AcceptAccessSpec,
    Clusters,
    ClustersProps,
    DataAccess,
    FsxVolumeSpec,
    HyperPodOnEksSpec,
    HyperPodSpec,
    InferenceGroupSpec,
    KueueSpec,
    LoadBalancerSpec,
    ScraperSpec,
    ServingSpec,
    TaskGovernanceSpec,
)
from fminfra.compute.constructs.launch_template import (
    IMDS_HOP_LIMIT_EKS_NODES,
    CapacityReservationTarget,
    EfaLaunchTemplateProps,
)
from fminfra.compute.constructs.placement import ClusterPlacementGroup
from fminfra.compute.stack.karpenter import karpenter_spec
from fminfra.config import (
    CONTROLLER_GROUP_NAME,
    LOGIN_GROUP_NAME,
    EnvironmentConfig,
    InferenceNodeGroupConfig,
    supported_kubernetes_versions,
)
from fminfra.core.resources import scripts_root
from fminfra.core.versions import version
from fminfra.eks.constructs.cluster import EksClusterProps, HelmChartSpec
from fminfra.eks.constructs.extensions import AddonExtension, AddonPodIdentity, EksExtension
from fminfra.eks.constructs.kueue import GpuFlavor
from fminfra.eks.rules import FSX_CSI_ADDON, FSX_DEFAULT_NAMESPACE, INSTANCE_TYPE_LABEL, team_queue
from fminfra.hyperpod.constructs.cluster import HyperPodInstanceGroup
from fminfra.hyperpod.constructs.lifecycle_scripts import LifecycleScriptsProps, lifecycle_bucket_name
from fminfra.hyperpod.constructs.plan_drain import PlanDrainGroup
from fminfra.hyperpod.constructs.task_governance import ADDON_NAME as TASK_GOVERNANCE_ADDON
from fminfra.hyperpod.constructs.task_governance import ADDON_VERSION_KEY as TASK_GOVERNANCE_VERSION_KEY
from fminfra.hyperpod.constructs.task_governance import TeamQuota
from fminfra.hyperpod.rules import plan_drained
from fminfra.network.stack import NetworkStack, removal_policy
from fminfra.observability.constructs.amp_scraper import PodScrapeJob, scrape_jobs
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace
from fminfra.promotion.rules import accept_role_name
from fminfra.serving.rules import ROLE_LABEL, ROLE_SERVER, SCRAPE_JOB, SERVER_PORT, SERVER_PORT_NAME
from fminfra.serving.stack import serves_from_fsx, serving_models
from fminfra.storage.rules import FSX_MOUNT

# EKS add-on name -> the name part of its manifest keys, EKS_ADDON_<NAME>_<major>_<minor>_VERSION
# (one build per Kubernetes version: `addon_version`).
ADDONS = {
    "vpc-cni": "VPC_CNI",
    "coredns": "COREDNS",
    "kube-proxy": "KUBE_PROXY",
    "eks-pod-identity-agent": "POD_IDENTITY_AGENT",
}
# Added with an FSx for Lustre file system (storage.lustre): its CSI driver, for the static volume.
FSX_CSI_ADDONS = {FSX_CSI_ADDON: "FSX_CSI_DRIVER"}
# Added when HyperPod runs on the cluster: the training operator and the cert-manager it needs.
HYPERPOD_ADDONS = {
    "cert-manager": "CERT_MANAGER",
    "amazon-sagemaker-hyperpod-training-operator": "HYPERPOD_TRAINING_OPERATOR",
}
# cert-manager's controller, webhook and cainjector tolerate every taint, as AWS's HyperPod cluster-setup
# template configures the add-on (docs/facts/eks.md#eks-addon-cert-manager-tolerations): the training
# operator needs its webhook while HyperPod's nodes still carry the deep-health-check taint
# (docs/facts/eks.md#hyperpod-node-health-taint) and the inference groups the GPU taint.
_TOLERATE_EVERY_TAINT = [{"operator": "Exists", "effect": effect} for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")]
HYPERPOD_ADDON_CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "cert-manager": {
        "tolerations": _TOLERATE_EVERY_TAINT,
        "webhook": {"tolerations": _TOLERATE_EVERY_TAINT},
        "cainjector": {"tolerations": _TOLERATE_EVERY_TAINT},
    }
}
# Kubectl/helm Lambda layers by Kubernetes version (one per supported version; the layer's kubectl
# minor version is the cluster's: docs/facts/eks.md#eks-kubectl-layer-v34, #eks-kubectl-layer-v35).
KUBECTL_LAYERS = {"1.34": KubectlV34Layer, "1.35": KubectlV35Layer}


def addon_version(name: str, kubernetes_version: str) -> str:
    """The pinned build of an add-on (its `ADDONS` name part) for a Kubernetes version."""
    return version(f"EKS_ADDON_{name}_{kubernetes_version.replace('.', '_')}_VERSION")


# Instance types on the Slurm controller and login groups are CPU types: no deep health checks.
SLURM_CONTROLLER_DEEP_HEALTH_CHECKS: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class FsxMount:
    """The FSx for Lustre file system the nodes mount (from the Storage stack)."""

    dns_name: str
    mount_name: str
    mount_path: str = FSX_MOUNT
    file_system_id: str | None = None
    security_group: ec2.ISecurityGroup | None = None
    efa_enabled: bool = False


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


def exporter_charts(gpu_node_types: Sequence[str]) -> list[HelmChartSpec]:
    """The node exporter on every node and the GPU exporter on the GPU nodes, for the AMP scraper
    (ports of `AmpScraper`'s jobs).

    The DCGM exporter runs only on nodes of `gpu_node_types` (the `node.kubernetes.io/instance-type`
    values of the cluster's GPU nodes: `gpu_node_types(cfg)`), as the chart's `affinity` value
    places it (docs/facts/observability.md#dcgm-exporter-chart-node-placement): on a CPU system
    node it finds no GPU and `ExporterDown` would fire for ever. None without GPU nodes. It
    collects the fields of scripts/observability/dcgm-counters.csv, as the Slurm and ec2 nodes do
    (the chart's `customMetrics` replaces its default list, which lacks the ECC, violation, NVLink
    error and Xid-count fields the rules use:
    docs/facts/observability.md#dcgm-exporter-chart-custom-metrics). The node exporter also serves
    the EFA counters (see `_efa_collector_values`).
    """
    observability = scripts_root() / "observability"
    counters = (observability / "dcgm-counters.csv").read_text(encoding="utf-8")
    efa_script = (observability / "collect_efa.sh").read_text(encoding="utf-8")
    charts = (
        []
        if not gpu_node_types
        else [
            HelmChartSpec(
                name="dcgm-exporter",
                chart="dcgm-exporter",
                repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
                version=version("CHART_DCGM_EXPORTER_VERSION"),
                namespace="monitoring",
                values={
                    "affinity": node_type_affinity(gpu_node_types),
                    "tolerations": [{"operator": "Exists"}],
                    "serviceMonitor": {"enabled": False},
                    "customMetrics": counters,
                },
            )
        ]
    )
    return [
        *charts,
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


# The device plugins select nodes by INSTANCE_TYPE_LABEL, which every EKS node carries with its EC2 instance
# type (HyperPod nodes carry the ml. name), instead of node-feature-discovery's labels.
# The values keys fminfra sets, each referenced as .Values.<key> by the chart's templates at the
# pinned version (docs/facts/eks.md#chart-nvidia-device-plugin-values, #chart-aws-efa-k8s-device-plugin-values).
DEVICE_PLUGIN_VALUE_KEYS = {
    "nvidia-device-plugin": ("affinity", "tolerations"),
    "aws-efa-k8s-device-plugin": ("supportedInstanceLabels", "tolerations"),
}


def node_type_affinity(instance_types: Sequence[str]) -> dict[str, Any]:
    """A pod affinity requiring a node of one of `instance_types` (by INSTANCE_TYPE_LABEL)."""
    terms = [{"matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(instance_types)}]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def gpu_node_types(cfg: EnvironmentConfig) -> list[str]:
    """The instance-type label values of the EKS cluster's GPU nodes: the HyperPod EKS groups'
    `ml.` names and the inference node groups' EC2 types (every catalog type has GPUs)."""
    compute = cfg.compute
    types = {g.spec.name for g in compute.inference_node_groups}
    if compute.orchestrator == "eks":
        types |= {g.spec.hyperpod_name for g in compute.instance_groups}
    return sorted(types)


def _tolerations(cfg: EnvironmentConfig) -> list[dict[str, str]]:
    """Tolerations of the inference groups' taints (the GPU taint unless a group lists others), one per
    (key, effect), plus the CriticalAddonsOnly one the charts' defaults carry."""
    seen: dict[tuple[str, str], None] = {("CriticalAddonsOnly", ""): None}
    for g in cfg.compute.inference_node_groups:
        for taint in [(t.key, t.effect) for t in g.taints]:
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
                "affinity": node_type_affinity(gpu_types),
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
    controller and login groups are CPU types (scripts/lifecycle/on_create.sh). On Slurm,
    `plan_drains` gives each training-plan group's plan and drain, so its nodes drain before the
    plan ends (scripts/node/drain_before_plan_end.sh)."""
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
        drains = {g.name: _plan_drain(g.capacity) for g in cfg.compute.instance_groups if g.capacity.type == "training-plan"}
        if drains:
            params["plan_drains"] = drains
    if fsx is not None:
        params.update({"fsx_dns_name": fsx.dns_name, "fsx_mountname": fsx.mount_name, "fsx_mount_path": fsx.mount_path})
    if remote_write_url is not None:
        params["prometheus_remote_write_url"] = remote_write_url
    return params


def _plan_drain(capacity: CapacityConfig) -> dict[str, Any]:
    """What a node of a training-plan group needs to drain before the plan ends
    (scripts/node/drain_before_plan_end.sh): the plan and the drain in seconds."""
    return {"training_plan_arn": capacity.training_plan_arn, "drain_seconds": int(capacity.drain.total_seconds())}


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
    autoscaled = cfg.compute.autoscaled_groups
    for g in cfg.compute.instance_groups:
        # HyperPod's Karpenter takes no group with deep health checks (docs/facts/hyperpod.md#hyperpod-autoscaling-node-class)
        default_checks: list[str] | None = [] if g.name in autoscaled else None
        groups.append(
            HyperPodInstanceGroup(
                name=g.name,
                instance_type=g.spec.hyperpod_name,
                instance_count=g.count,
                threads_per_core=g.threads_per_core,
                instance_storage_gib=g.instance_storage_gib if g.instance_storage_gib is not None else 500,
                deep_health_checks=[checks[c] for c in g.deep_health_checks] if g.deep_health_checks is not None else default_checks,
                training_plan_arn=g.capacity.training_plan_arn,
            )
        )
    return groups


def add_clusters(
    stack: cdk.Stack,
    *,
    cfg: EnvironmentConfig,
    network: NetworkStack,
    placement_groups: dict[str, ClusterPlacementGroup],
    node_role: iam.IRole,
    fsx: FsxMount | None = None,
    data_bucket: s3.IBucket | None = None,
    capacity_targets: dict[str, CapacityReservationTarget] | None = None,
    remote_write_url: str | None = None,
    prometheus: PrometheusWorkspace | None = None,
    extensions: Sequence[EksExtension] = (),
) -> Clusters:
    """The `Clusters` of the config: the EKS cluster, the HyperPod cluster and the inference node
    groups it asks for (and the kubectl layer they use, in `stack`); on EKS also the FSx volume, the
    load balancer controller, the config's extra add-ons and the library user's `extensions`."""
    compute = cfg.compute
    eks_props = None
    kueue = scraper = fsx_volume = load_balancer = None
    all_extensions: list[EksExtension] = []
    if compute.needs_eks:
        assert compute.eks is not None
        k8s = compute.eks.kubernetes_version
        addons = {name: addon_version(key, k8s) for name, key in ADDONS.items()}
        if compute.orchestrator == "eks":
            addons.update({name: addon_version(key, k8s) for name, key in HYPERPOD_ADDONS.items()})
        if compute.team_quotas():
            addons[TASK_GOVERNANCE_ADDON] = addon_version(TASK_GOVERNANCE_VERSION_KEY, k8s)
        if fsx is not None and fsx.file_system_id is not None and cfg.storage is not None and cfg.storage.lustre is not None:
            addons.update({name: addon_version(key, k8s) for name, key in FSX_CSI_ADDONS.items()})
            fsx_volume = FsxVolumeSpec(
                file_system_id=fsx.file_system_id,
                dns_name=fsx.dns_name,
                mount_name=fsx.mount_name,
                namespaces=fsx_namespaces(cfg),
                security_group=fsx.security_group,
                efa_enabled=fsx.efa_enabled,
            )
        if compute.eks.load_balancer_controller:
            load_balancer = LoadBalancerSpec(
                version=version("CHART_AWS_LOAD_BALANCER_CONTROLLER_VERSION"), region=cfg.region, vpc_id=network.vpc.vpc_id
            )
        all_extensions = [
            AddonExtension(
                name=a.name,
                version=a.version,
                after=a.after,
                pod_identity=[
                    AddonPodIdentity(service_account=i.service_account, managed_policies=i.managed_policies) for i in a.pod_identity
                ],
            )
            for a in compute.eks.addons
        ]
        all_extensions.extend(extensions)
        layer_class = KUBECTL_LAYERS[compute.eks.kubernetes_version]
        eks_props = EksClusterProps(
            cluster_name=cfg.physical_name("eks"),
            kubernetes_version=compute.eks.kubernetes_version,
            supported_versions=supported_kubernetes_versions(),
            vpc=network.vpc,
            subnets=network.private_subnets,
            addon_versions=addons,
            addon_configurations={n: c for n, c in HYPERPOD_ADDON_CONFIGURATIONS.items() if n in addons},
            admin_principal_arns=compute.eks.admin_principal_arns,
            public_access_cidrs=compute.eks.public_access_cidrs,
            helm_charts=[*device_plugin_charts(cfg), *(exporter_charts(gpu_node_types(cfg)) if prometheus is not None else [])],
            kubectl_layer=layer_class(stack, "KubectlLayer"),
            # anything applied through the kubectl provider besides the charts (`applies_manifests`), and the
            # FSx volume, the load balancer controller and extension charts
            kubectl_manifests=applies_manifests(cfg)
            or fsx_volume is not None
            or load_balancer is not None
            or bool(all_extensions)
            or compute.karpenter
            or cfg.serving is not None,
            removal_policy=removal_policy(cfg),
            system_node_count=compute.system_node_count(),
            system_node_instance_type=compute.eks.system_nodes.instance_type,
        )
        if compute.kueue_quotas():
            kueue = KueueSpec(version=version("CHART_KUEUE_VERSION"), flavors=kueue_flavors(cfg), teams=compute.kueue_quotas())
        if prometheus is not None:
            scraper = ScraperSpec(
                workspace=prometheus,
                subnets=network.private_subnets[:5],
                scrape_interval_seconds=cfg.observability.scrape_interval_seconds,
                alias=cfg.physical_name("scraper"),
                jobs=cluster_scrape_jobs(cfg),
            )
    hyperpod = on_eks = None
    if compute.hyperpod:
        hyperpod = HyperPodSpec(
            cluster_name=cfg.physical_name("hyperpod"),
            instance_groups=hyperpod_instance_groups(cfg),
            subnets=[network.compute_subnet],
            security_groups=[network.efa_security_group],
            vpc=network.vpc,
            lifecycle=LifecycleScriptsProps(
                bucket_name=lifecycle_bucket_name(cfg.name, cfg.account, cfg.region),
                folders=lifecycle_folders(),
                parameters=provisioning_parameters(cfg, fsx, remote_write_url),
                removal_policy=removal_policy(cfg),
            ),
            data_access=data_access(cfg, data_bucket),
            autoscaled_groups=compute.autoscaled_groups,
        )
        if compute.orchestrator == "eks" and eks_props is not None:
            on_eks = HyperPodOnEksSpec(
                dependencies_commit=version("HYPERPOD_CLI_COMMIT"),
                dependencies_values=hyperpod_dependency_values(cfg),
                task_governance=task_governance(cfg),
                accept_access=accept_access(cfg),
                plan_drain=plan_drain_groups(cfg),
            )
    return Clusters(
        stack,
        "Clusters",
        ClustersProps(
            region=cfg.region,
            node_role=node_role,
            eks=eks_props,
            kueue=kueue,
            scraper=scraper,
            hyperpod=hyperpod,
            hyperpod_on_eks=on_eks,
            inference_node_groups=[
                inference_group(cfg, g, network, placement_groups.get(g.name), (capacity_targets or {}).get(g.name))
                for g in compute.inference_node_groups
                if not compute.karpenter  # Karpenter's pools instead (compute/stack/karpenter.py)
            ],
            karpenter=karpenter_spec(cfg, network),
            fsx_volume=fsx_volume,
            load_balancer=load_balancer,
            extensions=all_extensions,
            serving=serving_spec(stack, cfg, prometheus, data_bucket) if eks_props is not None else None,
        ),
    )


def serving_spec(
    stack: cdk.Stack, cfg: EnvironmentConfig, prometheus: PrometheusWorkspace | None, data_bucket: s3.IBucket | None
) -> ServingSpec | None:
    """The served models of `cfg.serving` (docs/serving.md), or None."""
    if cfg.serving is None:
        return None
    s3_weights = any(m.weights.source == "s3" for m in cfg.serving.models)
    return ServingSpec(
        namespace=cfg.serving.namespace,
        models=serving_models(cfg, stack),
        keda_version=version("CHART_KEDA_VERSION"),
        lws_version=version("CHART_LWS_VERSION"),
        stream_idle_timeout_seconds=cfg.serving.stream_idle_timeout_seconds,
        workspace=prometheus,
        bucket_name=cfg.storage.bucket_name(cfg) if s3_weights and cfg.storage is not None else None,
        bucket=data_bucket if s3_weights else None,
        gate_role_name=accept_role_name(cfg.name) if cfg.serving_gate_access else None,
    )


def cluster_scrape_jobs(cfg: EnvironmentConfig) -> dict[str, int | PodScrapeJob]:
    """The scraper's jobs: the exporters, Karpenter's controller, and the model servers' /metrics (their
    serving pods in the serving namespace, on the server's named port)."""
    jobs = scrape_jobs(karpenter=cfg.compute.karpenter)
    if cfg.serving is not None:
        jobs[SCRAPE_JOB] = PodScrapeJob(
            port=SERVER_PORT, port_name=SERVER_PORT_NAME, namespace=cfg.serving.namespace, pod_labels={ROLE_LABEL: ROLE_SERVER}
        )
    return jobs


def fsx_namespaces(cfg: EnvironmentConfig) -> list[str]:
    """The namespaces whose pods mount the file system through the claim: every team's (HyperPod
    task governance or fminfra's Kueue), else `default`; and the serving namespace where a model's
    weights are on the file system."""
    serving = [cfg.serving.namespace] if cfg.serving is not None and serves_from_fsx(cfg) else []
    return [*training_fsx_namespaces(cfg), *serving]


def training_fsx_namespaces(cfg: EnvironmentConfig) -> list[str]:
    compute = cfg.compute
    if compute.orchestrator == "eks" and compute.team_quotas():
        return [team_queue("hyperpod-eks", team).namespace for team in compute.team_quotas()]
    if compute.kueue_quotas():
        return [team_queue("eks", team).namespace for team in compute.kueue_quotas()]
    return [FSX_DEFAULT_NAMESPACE]


def lifecycle_folders() -> dict[str, Path]:
    """The lifecycle scripts' folders: the scripts, the node scripts and the observability scripts."""
    root = scripts_root()
    folders = {"": root / "lifecycle", "node": root / "node"}
    if (root / "observability").is_dir():
        folders["observability"] = root / "observability"
    return folders


def data_access(cfg: EnvironmentConfig, data_bucket: s3.IBucket | None) -> DataAccess | None:
    if data_bucket is None or cfg.storage is None:
        return None
    bucket = cfg.storage.bucket
    return DataAccess(
        bucket=data_bucket,
        bucket_name=cfg.storage.bucket_name(cfg),
        read_only_prefixes=bucket.read_only_prefixes,
        read_write_prefixes=bucket.read_write_prefixes,
    )


def applies_manifests(cfg: EnvironmentConfig) -> bool:
    """Whether anything but the charts applies Kubernetes objects through CDK's kubectl provider (which
    the cluster then needs even without a chart; aws-cdk-lib's KubernetesManifest refuses a cluster
    without one): the HyperPod EKS plan drain's RBAC, the acceptance role's namespaces and RBAC, and
    Kueue's queue objects, HyperPod's autoscaling NodeClass and NodePool."""
    plan_drain = cfg.compute.orchestrator == "eks" and bool(plan_drain_groups(cfg))
    return plan_drain or accept_access(cfg) is not None or bool(cfg.compute.kueue_quotas()) or bool(cfg.compute.autoscaled_groups)


def plan_drain_groups(cfg: EnvironmentConfig) -> list[PlanDrainGroup]:
    """The groups the HyperPod EKS plan drain drains (`fminfra.hyperpod.rules.plan_drained`): each
    with its plan, its `ml.` type and its drain (`drain_minutes`) in seconds."""
    return [
        PlanDrainGroup(
            instance_group=g.name,
            training_plan_arn=g.capacity.training_plan_arn,
            instance_type=g.spec.hyperpod_name,
            drain_seconds=int(g.capacity.drain.total_seconds()),
        )
        for g in cfg.compute.instance_groups
        if plan_drained(cfg.compute.orchestrator, g.capacity.type) and g.capacity.training_plan_arn
    ]


def task_governance(cfg: EnvironmentConfig) -> TaskGovernanceSpec | None:
    quotas = cfg.compute.team_quotas()
    if not quotas:
        return None
    assert cfg.compute.eks is not None
    return TaskGovernanceSpec(
        name_prefix=cfg.name,
        teams=[TeamQuota(team=team, instances=instances) for team, instances in quotas.items()],
        priority_classes=cfg.compute.eks.scheduling.priority_classes,
        tags={"fminfra:environment": cfg.name, **cfg.tags},  # the stage's tags (fminfra/app/stage.py)
    )


def accept_access(cfg: EnvironmentConfig) -> AcceptAccessSpec | None:
    """The acceptance role's access, in the namespace of the team accept's jobs queue in."""
    if cfg.compute.eks is None or not cfg.compute.eks.accept_access:
        return None
    team = cfg.compute.acceptance_team()
    assert team is not None  # validated: accept_access needs a task governance team
    return AcceptAccessSpec(role_name=accept_role_name(cfg.name), namespaces=[team_queue("hyperpod-eks", team).namespace])


def kueue_flavors(cfg: EnvironmentConfig) -> list[GpuFlavor]:
    """A Kueue flavor per inference GPU type, tolerating its groups' taints; topology-aware with
    `compute.eks.scheduling.kueue_topology` (refused with Karpenter, which starts nodes only for pods
    Kueue has admitted, while Kueue places topology-aware only on nodes that exist:
    docs/facts/eks.md#kueue-tas-cluster-queue-mixing)."""
    flavors: dict[str, list[dict[str, str]]] = {}
    for g in cfg.compute.inference_node_groups:
        taints = [(t.key, t.value, t.effect) for t in g.taints]
        tolerations = flavors.setdefault(g.spec.name, [])
        for key, value, effect in taints:
            toleration = {"key": key, "operator": "Equal", "value": value, "effect": effect}
            if toleration not in tolerations:
                tolerations.append(toleration)
    topology = cfg.compute.eks is not None and cfg.compute.eks.scheduling.kueue_topology  # validated: not with Karpenter
    return [GpuFlavor(instance_type=t, tolerations=tol, topology_aware=topology) for t, tol in sorted(flavors.items())]


def inference_group(
    cfg: EnvironmentConfig,
    igroup: InferenceNodeGroupConfig,
    network: NetworkStack,
    placement: ClusterPlacementGroup | None,
    capacity: CapacityReservationTarget | None,
) -> InferenceGroupSpec:
    """An inference node group; an `EfaLaunchTemplate` for EFA types, placement groups and reserved
    capacity: every EFA interface of the type, IMDSv2 for the node and host-network pods only."""
    spec = catalog.get(igroup.instance_type)
    launch_template = None
    if spec.training or placement is not None or capacity is not None:
        launch_template = EfaLaunchTemplateProps(
            instance_type=spec.name,
            efa_security_group=network.efa_security_group,
            root_volume_gib=igroup.root_volume_gib,
            imds_hop_limit=IMDS_HOP_LIMIT_EKS_NODES,
            capacity=capacity,
            placement_group=placement.placement_group if placement else None,
            launch_template_name=cfg.physical_name(igroup.name),
        )
    return InferenceGroupSpec(
        name=igroup.name,
        nodegroup_name=cfg.physical_name(igroup.name),
        instance_type=igroup.instance_type,
        min_size=igroup.min_size,
        desired_size=igroup.desired_size,
        max_size=igroup.max_size,
        subnets=[network.compute_subnet],
        labels=igroup.labels,
        taints=[(t.key, t.value, t.effect) for t in igroup.taints],
        root_volume_gib=igroup.root_volume_gib,
        capacity_block=igroup.capacity.type == "capacity-block",
        block_starts_at=igroup.capacity.starts_at if igroup.capacity.type == "capacity-block" else None,
        launch_template=launch_template,
    )
