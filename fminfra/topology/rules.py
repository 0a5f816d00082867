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

from fminfra import catalog

NETWORK_NODE_LABEL_PREFIX = "topology.k8s.aws/network-node-layer-"
ULTRASERVER_LABEL = "topology.k8s.aws/ultraserver-id"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The levels HyperPod labels and task governance (and the HyperPod CLI) schedule in, coarsest first.
HYPERPOD_LAYERS = 3
HYPERPOD_LEVELS = tuple(f"{NETWORK_NODE_LABEL_PREFIX}{n}" for n in range(1, HYPERPOD_LAYERS + 1))
TASK_GOVERNANCE_TAS_MIN_VERSION = (1, 2, 2)
PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_TOPOLOGY_LEVELS_MAX = 16


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
