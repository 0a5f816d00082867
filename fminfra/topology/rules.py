"""Network topology: where AWS says a node sits in the network, per instance type, and the names a
scheduler asks for it by.

EC2 returns each instance's network nodes from the top of the hierarchy down
(docs/facts/instances.md#ec2-topology-network-layers: 3 layers on most supported types, 4 on
p6-b200 and p6-b300, none on g5 and g6: the catalog's `network_layers`); EKS labels a node with one
`topology.k8s.aws/network-node-layer-N` per layer (docs/facts/eks.md#network-node-layer-labels),
HyperPod EKS with layers 1-3 and, on UltraServers, `topology.k8s.aws/ultraserver-id`
(docs/facts/hyperpod.md#hyperpod-topology-labels). Kueue's Topology orders levels coarsest first
and asks for a domain with a pod template annotation (docs/facts/eks.md#kueue-topology-aware-scheduling).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from fminfra import catalog
from fminfra.eks.rules import ADDON_BUILD

NETWORK_NODE_LABEL_PREFIX = "topology.k8s.aws/network-node-layer-"
ULTRASERVER_LABEL = "topology.k8s.aws/ultraserver-id"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The levels HyperPod labels and task governance (and the HyperPod CLI) schedule in, coarsest first.
HYPERPOD_LAYERS = 3
HYPERPOD_LEVELS = tuple(f"{NETWORK_NODE_LABEL_PREFIX}{n}" for n in range(1, HYPERPOD_LAYERS + 1))
TASK_GOVERNANCE_TAS_MIN_VERSION = (1, 2, 2)
PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
# Pod sets of one job fitted to one domain together (Kueue: exactly 2, one of 1 pod; docs/facts/jobs.md#kueue-podset-group)
PODSET_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
# A topology-aware request without locality (any nodes with room): docs/facts/eks.md#kueue-topology-aware-scheduling
PODSET_UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_TOPOLOGY_LEVELS_MAX = 16
# The regions where EC2 describes instance topology (DescribeInstanceTopology, and so the network-node-layer
# labels); DescribeCapacityReservationTopology is offered in each of them but two
# (docs/facts/instances.md#ec2-topology-regions). Elsewhere a node gets no network-node-layer label.
EC2_TOPOLOGY_REGIONS = frozenset(
    {
        "us-east-1", "us-east-2", "us-west-1", "us-west-2", "af-south-1", "ap-southeast-3", "ap-east-1", "ap-south-2",
        "ap-southeast-4", "ap-south-1", "ap-northeast-3", "ap-northeast-2", "ap-southeast-1", "ap-southeast-2",
        "ap-northeast-1", "ca-central-1", "eu-central-1", "eu-west-1", "eu-west-2", "eu-west-3", "eu-south-2",
        "eu-north-1", "eu-central-2", "il-central-1", "me-south-1", "me-central-1", "sa-east-1", "us-gov-west-1",
    }
)  # fmt: skip
RESERVATION_TOPOLOGY_REGIONS = EC2_TOPOLOGY_REGIONS - {"il-central-1", "us-gov-west-1"}
# The name of fminfra's Kueue Topology over N network layers (EKS without HyperPod; docs/compute.md).
KUEUE_TOPOLOGY_NAME = "fminfra-network-{layers}-layers"


def network_node_label(layer: int) -> str:
    """The node label of one network layer (1: the top of the hierarchy)."""
    if layer < 1:
        raise ValueError(f"network layers count from 1, got {layer}")
    return f"{NETWORK_NODE_LABEL_PREFIX}{layer}"


def network_layers(instance_type: str) -> int | None:
    """The network layers EC2 reports for an instance type (EC2 or HyperPod `ml.` name): None for a type
    with no EC2 topology or one the catalog does not hold."""
    entry = catalog.CATALOG.get(instance_type.removeprefix("ml."))
    return entry.network_layers if entry else None


def network_node_labels(instance_type: str) -> tuple[str, ...]:
    """The node labels of a type's network layers, coarsest first; () for a type with no EC2 topology."""
    return tuple(network_node_label(n) for n in range(1, (network_layers(instance_type) or 0) + 1))


def job_topology_levels(instance_type: str, hyperpod: bool) -> tuple[str, ...]:
    """The node labels a job on `instance_type` may ask for a domain by (podset-required-topology /
    podset-preferred-topology), coarsest first; () for a type with no EC2 topology. EKS without
    HyperPod: the type's network layers (fminfra's Kueue Topology holds each of them). HyperPod EKS
    (`hyperpod`): the three layers HyperPod labels and task governance schedules in, whatever the
    type's depth (docs/facts/hyperpod.md#hyperpod-topology-labels). `ULTRASERVER_LABEL` is not offered:
    fminfra's UltraServer catalog row is unverified."""
    labels = network_node_labels(instance_type)
    if not labels:
        return ()
    return HYPERPOD_LEVELS if hyperpod else labels


def kueue_topology_levels(layers: int) -> tuple[str, ...]:
    """The levels of fminfra's Kueue Topology over `layers` network layers: each layer's label, coarsest
    first, then `kubernetes.io/hostname` (Kueue: only as the last level; node taints are respected only
    with it last, docs/facts/eks.md#kueue-topology-aware-scheduling)."""
    if not 1 <= layers < KUEUE_TOPOLOGY_LEVELS_MAX:
        raise ValueError(
            f"a Kueue Topology holds 1 to {KUEUE_TOPOLOGY_LEVELS_MAX} levels, the hostname one of them: layers must be 1 to {KUEUE_TOPOLOGY_LEVELS_MAX - 1}, got {layers}"
        )
    return (*(network_node_label(n) for n in range(1, layers + 1)), HOSTNAME_LABEL)


def kueue_topology_types(layers: Mapping[str, int], teams: Iterable[Collection[str]]) -> dict[str, int]:
    """Of `layers` (instance type -> network layers: the types that may be topology-aware), those whose
    Kueue flavor names a Topology, given the types each team holds: none that a team holds beside a
    type outside the result. A ClusterQueue mixing both would refuse jobs without a topology
    annotation on the topology-aware flavors (docs/facts/eks.md#kueue-tas-cluster-queue-mixing), so
    such a type stays plain; repeated until no team mixes, since one type kept plain may make
    another team's queue mixed."""
    kept = dict(layers)
    held = [set(team) for team in teams]
    changed = True
    while changed:
        changed = False
        for types in held:
            if types - kept.keys() and types & kept.keys():
                for instance_type in types & kept.keys():
                    del kept[instance_type]
                changed = True
    return kept


def kueue_topology_name(layers: int) -> str:
    """The stable name of fminfra's Kueue Topology over `layers` network layers."""
    return KUEUE_TOPOLOGY_NAME.format(layers=layers)


def addon_version(value: str) -> tuple[int, int, int]:
    """(major, minor, patch) of an EKS add-on version; ValueError naming what is allowed otherwise."""
    if problem := ADDON_BUILD.problem(value):
        raise ValueError(f"add-on version {problem}")
    major, minor, patch = value.removeprefix("v").split("-", 1)[0].split(".")
    return int(major), int(minor), int(patch)


def task_governance_supports_tas(version: str) -> bool:
    """Whether task governance at add-on `version` schedules topology-aware (from v1.2.2-eksbuild.1,
    docs/facts/hyperpod.md#hyperpod-topology-labels)."""
    return addon_version(version) >= TASK_GOVERNANCE_TAS_MIN_VERSION


def topology_in_region(region: str) -> bool:
    """Whether EC2 describes instance topology in the region, so that nodes there carry network-node-layer labels."""
    return region in EC2_TOPOLOGY_REGIONS
