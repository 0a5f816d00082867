"""Kueue on an EKS cluster without HyperPod: the Kueue Helm chart of kubernetes-sigs/kueue at a pinned
version with `waitForPodsReady` set (all-or-nothing with ready pods), and per team a namespace, a
ClusterQueue and a LocalQueue whose GPU quota is drawn from one ResourceFlavor per GPU instance type.

Never on HyperPod EKS, where HyperPod task governance is the cluster's Kueue
(docs/facts/hyperpod.md#hyperpod-task-governance-addon). Chart values and Kueue objects follow the
chart and CRDs at the pinned version (docs/facts/eks.md#chart-kueue, #kueue-all-or-nothing); the
queue names are `fminfra.eks.rules.team_queue("eks", team)`'s.

Topology-aware: a flavor of a type with an EC2 topology (`fminfra.topology.rules.network_layers`) names
the Topology `fminfra-network-<N>-layers` over the node labels AWS gives it (network-node-layer-1..N,
then kubernetes.io/hostname), one Topology per layer depth among the flavors, since Kueue counts a node
in a topology-aware flavor only if it has every level's label (docs/facts/eks.md#kueue-topology-aware-scheduling).
Kueue v0.19.2 refuses a pod set without a topology annotation on a topology-aware flavor of a
ClusterQueue that also has plain flavors, and gives it implied topology-aware placement (any node
with room) in a ClusterQueue of topology-aware flavors only (docs/facts/eks.md#kueue-tas-cluster-queue-mixing):
so a team's ClusterQueue lists only the types it holds, and a type stays plain where a team holding it
also holds a plain type (its jobs stay admitted, without topology). Flavors marked not topology-aware
(nodes Karpenter starts for pending pods: Kueue's topology-aware admission needs the nodes to exist)
stay plain too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.eks.rules import DNS_LABEL, INSTANCE_TYPE_LABEL, LABEL_VALUE_MAX, RESERVED_NAMESPACES, TEAMS_REQUIRED, team_queue
from fminfra.topology.rules import kueue_topology_levels, kueue_topology_name, kueue_topology_types, network_layers

CHART = "kueue"
REPOSITORY = "oci://registry.k8s.io/kueue/charts/kueue"
# How long helm waits for the controller and its webhooks (CDK allows at most 15 minutes).
CHART_TIMEOUT_MINUTES = 15
NAMESPACE = "kueue-system"
RELEASE = "kueue"
API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU_RESOURCE = "nvidia.com/gpu"
# The values keys fminfra sets (each read by the chart's templates at the pinned version).
VALUE_KEYS = ("managerConfig",)


@dataclass(frozen=True, kw_only=True)
class GpuFlavor:
    """A ResourceFlavor: the nodes of one EC2 instance type, and the tolerations of their taints
    (Kueue adds them to the pods it admits on this flavor). topology_aware: name a Topology when the
    type has an EC2 topology (never for nodes that exist only once pods are pending). Default: false."""

    instance_type: str
    tolerations: Sequence[Mapping[str, str]] = ()
    topology_aware: bool = False


@dataclass(frozen=True, kw_only=True)
class KueueProps:
    """Props of `Kueue`.

    cluster: the EKS cluster.
    version: the chart version (the Kueue release, without the v).
    flavors: one per GPU instance type whose GPUs teams get.
    teams: team -> instance type -> GPUs of that type in the team's quota.
    pods_ready_timeout: waitForPodsReady.timeout (Kueue duration, e.g. 30m). Default: 30m, Kueue's default.
    block_admission: waitForPodsReady.blockAdmission: admit one workload at a time. Default: false.
    """

    cluster: eks.Cluster
    version: str
    flavors: Sequence[GpuFlavor]
    teams: Mapping[str, Mapping[str, int]]
    pods_ready_timeout: str = "30m"
    block_admission: bool = False


def kueue_configuration(props: KueueProps) -> dict[str, Any]:
    """The Kueue configuration (config.kueue.x-k8s.io/v1beta2): the chart's ports and leader election,
    waitForPodsReady written out, and quota checked only for the resources a ClusterQueue declares
    (GPUs), so that pods' CPU and memory requests do not make them inadmissible."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "waitForPodsReady": {"timeout": props.pods_ready_timeout, "blockAdmission": props.block_admission},
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
        "integrations": {"frameworks": ["batch/job", "kubeflow.org/mpijob", "kubeflow.org/pytorchjob", "jobset.x-k8s.io/jobset"]},
    }


def topology_layers(props: KueueProps) -> dict[str, int]:
    """Instance type -> network layers, for the flavors that name a Topology: a type with an EC2
    topology, marked topology-aware, and not held by a team that also holds a plain type
    (`fminfra.topology.rules.kueue_topology_types`)."""
    layers = {f.instance_type: n for f in props.flavors if f.topology_aware and (n := network_layers(f.instance_type))}
    return kueue_topology_types(layers, [_held(gpus) for gpus in props.teams.values()])


def _held(gpus: Mapping[str, int]) -> set[str]:
    """The instance types a team holds at least one GPU of."""
    return {t for t, count in gpus.items() if count > 0}


def _flavor_spec(flavor: GpuFlavor, layers: Mapping[str, int]) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": {INSTANCE_TYPE_LABEL: flavor.instance_type}}
    if flavor.tolerations:
        spec["tolerations"] = [dict(t) for t in flavor.tolerations]
    if flavor.instance_type in layers:
        spec["topologyName"] = kueue_topology_name(layers[flavor.instance_type])
    return spec


def resource_flavors(props: KueueProps, layers: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Instance type -> its ResourceFlavor. Named by the type when plain; a topology-aware one by the type,
    `-topology-` and 8 hex digits of a hash of its spec. Kueue makes a topology-aware flavor's topologyName,
    nodeLabels and tolerations immutable (docs/facts/eks.md#kueue-topology-aware-scheduling), so a change of
    any of them (new taints, turning topology off) must be a new object, which the kubectl provider creates
    while it prunes the old one, never an update Kueue refuses. `layers`: `topology_layers(props)`."""
    flavors = {}
    for flavor in props.flavors:
        spec = _flavor_spec(flavor, layers)
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
        name = f"{flavor.instance_type}-topology-{digest}" if "topologyName" in spec else flavor.instance_type
        flavors[flavor.instance_type] = {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}
    return flavors


def kueue_objects(props: KueueProps) -> list[dict[str, Any]]:
    """The Topologies (one per layer depth among the topology-aware flavors), the ResourceFlavors, and
    per team its Namespace, ClusterQueue (the flavors of the types the team holds) and LocalQueue."""
    layers = topology_layers(props)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": API_VERSION,
            "kind": "Topology",
            "metadata": {"name": kueue_topology_name(depth)},
            "spec": {"levels": [{"nodeLabel": label} for label in kueue_topology_levels(depth)]},
        }
        for depth in sorted(set(layers.values()))
    ]
    flavors_by_type = resource_flavors(props, layers)
    objects += flavors_by_type.values()
    names = {t: f["metadata"]["name"] for t, f in flavors_by_type.items()}
    for team, gpus in props.teams.items():
        queue = team_queue("eks", team)
        cluster_queue = f"{team}-clusterqueue"
        # The types the team holds GPUs of (a team holding none: every flavor, at 0).
        held = _held(gpus) or {f.instance_type for f in props.flavors}
        flavors = [
            {"name": names[f.instance_type], "resources": [{"name": GPU_RESOURCE, "nominalQuota": gpus.get(f.instance_type, 0)}]}
            for f in props.flavors
            if f.instance_type in held
        ]
        objects += [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": queue.namespace}},
            {
                "apiVersion": API_VERSION,
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": queue.namespace}},
                    "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": flavors}],
                },
            },
            {
                "apiVersion": API_VERSION,
                "kind": "LocalQueue",
                "metadata": {"name": queue.local_queue, "namespace": queue.namespace},
                "spec": {"clusterQueue": cluster_queue},
            },
        ]
    return objects


class Kueue(Construct):
    """The Kueue chart (release `kueue` in `kueue-system`, waited for) and the queue objects after it.
    Attributes: `chart`, `queues` (the manifest of `kueue_objects`)."""

    def __init__(self, scope: Construct, construct_id: str, props: KueueProps) -> None:
        super().__init__(scope, construct_id)
        _validate(props)
        self.chart = props.cluster.add_helm_chart(
            f"{construct_id}Chart",
            chart=CHART,
            repository=REPOSITORY,
            version=props.version,
            namespace=NAMESPACE,
            release=RELEASE,
            create_namespace=True,
            wait=True,  # the webhooks must answer before the queue objects are applied
            # CDK's maximum (default 5 minutes): the controller's nodes may still be joining
            # (docs/facts/eks.md#cdk-helm-chart-timeout).
            timeout=cdk.Duration.minutes(CHART_TIMEOUT_MINUTES),
            values={"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(kueue_configuration(props), sort_keys=False)}},
        )
        self.queues = props.cluster.add_manifest(f"{construct_id}Queues", *kueue_objects(props))
        self.queues.node.add_dependency(self.chart)


def _validate(props: KueueProps) -> None:
    if not props.flavors:
        raise ValidationError("flavors must list at least one GPU instance type, got none", path="flavors")
    if not props.teams:
        raise ValidationError(TEAMS_REQUIRED)
    types = {f.instance_type for f in props.flavors}
    for team, gpus in props.teams.items():
        if not DNS_LABEL.match(team) or team in RESERVED_NAMESPACES:
            raise ValidationError(f"team names are namespaces: a DNS label other than {', '.join(RESERVED_NAMESPACES)}, got {team!r}")
        # The LocalQueue's name is also the value of a job's queue label, which has at most 63 characters
        # (docs/facts/eks.md#kubernetes-label-syntax).
        queue = team_queue("eks", team).local_queue
        if len(queue) > LABEL_VALUE_MAX:
            raise ValidationError(
                f"team {team!r}: its queue {queue!r} is a label value of at most {LABEL_VALUE_MAX} characters, got {len(queue)}; "
                f"allowed: team names of at most {LABEL_VALUE_MAX - len(queue) + len(team)} characters"
            )
        for instance_type, count in gpus.items():
            if instance_type not in types:
                raise ValidationError(f"team {team!r}: {instance_type!r} is not a flavor; allowed: {', '.join(sorted(types))}")
            if count < 0:
                raise ValidationError(f"team {team!r}: GPUs must be 0 or more, got {count}")
