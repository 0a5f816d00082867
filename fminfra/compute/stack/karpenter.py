"""Karpenter of the config (compute.eks.karpenter): one pool per inference group, in the network's
private subnets and their zones (docs/compute.md#karpenter)."""

from __future__ import annotations

from fminfra import catalog
from fminfra.config import EnvironmentConfig
from fminfra.core.versions import version
from fminfra.eks.constructs.karpenter import KarpenterSpec
from fminfra.eks.constructs.karpenter_pools import KarpenterPoolSpec
from fminfra.eks.rules import KARPENTER_RESERVED, KARPENTER_RESERVED_GROUP_CAPACITY
from fminfra.network.stack import NetworkStack


def karpenter_spec(cfg: EnvironmentConfig, network: NetworkStack) -> KarpenterSpec | None:
    """Karpenter and a pool per inference group, or None where karpenter is off. On-demand groups take
    the config's capacity types; a group on a reservation or a Capacity Block takes `reserved`, its
    reservation by id. EFA types get the EFA security group (Karpenter attaches their EFA interfaces
    for pods that ask for vpc.amazonaws.com/efa)."""
    compute = cfg.compute
    if not compute.karpenter:
        return None
    assert compute.eks is not None
    zone_ids = [plan.az_id for plan in cfg.network.subnets() if not plan.public]
    subnet_ids = [s.subnet_id for s in network.private_subnets]
    pools = []
    for g in compute.inference_node_groups:
        reserved = g.capacity.type in KARPENTER_RESERVED_GROUP_CAPACITY
        pools.append(
            KarpenterPoolSpec(
                name=g.name,
                instance_type=g.instance_type,
                max_size=g.max_size,
                capacity_types=[KARPENTER_RESERVED] if reserved else list(compute.eks.karpenter.capacity_types),
                reservation_ids=list(g.capacity.reservation_ids or []) if reserved else [],
                zone_ids=zone_ids,
                subnet_ids=subnet_ids,
                security_group_ids=[network.efa_security_group.security_group_id] if catalog.get(g.instance_type).training else [],
                labels=g.labels,
                taints=[(t.key, t.value, t.effect) for t in g.taints],
                root_volume_gib=g.root_volume_gib,
            )
        )
    return KarpenterSpec(
        version=version("CHART_KARPENTER_VERSION"),
        ami_release=version("KARPENTER_AL2023_AMI_RELEASE"),
        pools=pools,
        replicas=min(2, compute.system_node_count()),
    )
