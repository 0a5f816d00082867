"""`plan CONFIG...`: what an environment will run, computed from the config alone (no synth, no AWS calls).
With `--topology` it also reads, from EC2, how each reserved group's reservations spread over the
network (`fminfra.ops.plan_topology`; read-only calls, docs/compute.md#before-deploy-plan)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from fminfra import catalog
from fminfra.capacity.rules import scale_in_time, utc_timestamp
from fminfra.compute.config import CONTROLLER_GROUP_NAME, LOGIN_GROUP_NAME
from fminfra.config import CapacityConfig, EnvironmentConfig, InferenceNodeGroupConfig, InstanceGroupConfig, standard_support_end
from fminfra.core.table import format_table
from fminfra.eks.rules import team_queue
from fminfra.network.rules import POD_IP_SUBNET_SHARE, SubnetPlan, usable_addresses, vpc_cni_max_pods, vpc_cni_node_addresses

INFERENCE_KIND = "eks-inference"


@dataclass(frozen=True, kw_only=True)
class GroupPlan:
    """One row of `plan`: a training group or an inference node group."""

    name: str
    kind: str
    instance_type: str
    count: int
    count_text: str
    gpus: int
    efa_attached: int
    efa_max: int
    network_gbps: int
    capacity: str
    placement: str
    notes: tuple[str, ...]

    @property
    def efa_text(self) -> str:
        """attached/maximum; an inference (G) type that supports EFA gets none from fminfra."""
        text = f"{self.efa_attached}/{self.efa_max}"
        return f"{text} (none attached: inference)" if self.efa_attached == 0 and self.efa_max else text


def _capacity_text(group: InstanceGroupConfig | InferenceNodeGroupConfig) -> str:
    cap = group.capacity
    if cap.type in ("reservation", "capacity-block"):
        return f"{cap.type} {','.join(cap.reservation_ids or [])}"
    if cap.type == "training-plan":
        return f"training-plan {(cap.training_plan_arn or '').rsplit('/', 1)[-1]}"
    return cap.type


def _capacity_block_note(cap: CapacityConfig, count: int) -> str:
    if cap.starts_at is None or cap.ends_at is None:
        return (
            f"Capacity Block group starts at 0 instances; scale it to {count} while the block is active (docs/capacity.md, Capacity Blocks)"
        )
    scale_in = scale_in_time(cap.ends_at, cap.drain)
    minutes = int(cap.drain.total_seconds() // 60)
    return (
        f"Capacity Block: the group scales to {count} at {utc_timestamp(cap.starts_at)} and to 0 at {utc_timestamp(scale_in)}, "
        f"{minutes} minutes before EC2 starts terminating the block's instances ({utc_timestamp(scale_in + cap.drain)})"
    )


def group_plans(cfg: EnvironmentConfig) -> list[GroupPlan]:
    """Rows for every training group and inference node group of the environment."""
    rows: list[GroupPlan] = []
    kind = {"slurm": "hyperpod-slurm", "eks": "hyperpod-eks", "ec2": "ec2", "none": "none"}[cfg.compute.orchestrator]
    groups: list[tuple[str, InstanceGroupConfig | InferenceNodeGroupConfig]] = [
        *((kind, g) for g in cfg.compute.instance_groups),
        *((INFERENCE_KIND, g) for g in cfg.compute.inference_node_groups),
    ]
    for group_kind, group in groups:
        spec = catalog.get(group.instance_type)
        if isinstance(group, InstanceGroupConfig):
            count, count_text = group.count, str(group.count)
        else:
            count, count_text = group.max_size, f"{group.min_size}-{group.desired_size}-{group.max_size}"
        notes: list[str] = []
        if not spec.verified:
            notes.append(f"{spec.name}: network layout unverified (docs/facts/instances.md#gpu-p6e-gb200-36xlarge)")
        if group.capacity.type == "odcr":
            notes.append("an ODCR bills from creation whether or not instances run")
        if group.capacity.type == "capacity-block" and group_kind == "ec2":
            notes.append(_capacity_block_note(group.capacity, count))
        if isinstance(group, InferenceNodeGroupConfig) and cfg.compute.karpenter:
            assert cfg.compute.eks is not None
            types = (
                "reserved"
                if group.capacity.type in ("reservation", "capacity-block")
                else ", ".join(cfg.compute.eks.karpenter.capacity_types)
            )
            count_text = f"0-{group.max_size}"
            notes.append(
                f"Karpenter pool: nodes for pending pods, up to {group.max_size}, capacity {types}; EFA interfaces only for pods "
                "that ask for vpc.amazonaws.com/efa (docs/compute.md#karpenter)"
            )
        rows.append(
            GroupPlan(
                name=group.name,
                kind=group_kind,
                instance_type=spec.hyperpod_name if group_kind.startswith("hyperpod") else spec.name,
                count=count,
                count_text=count_text,
                gpus=count * spec.gpus,
                efa_attached=catalog.attached_efa_interfaces(spec.name),
                efa_max=spec.max_efa_interfaces,
                network_gbps=spec.network_gbps,
                capacity=_capacity_text(group),
                placement=cfg.compute.placement_of(group),
                notes=tuple(notes),
            )
        )
    return rows


def slurm_head_rows(cfg: EnvironmentConfig) -> list[tuple[str, str, str, int]]:
    """The Slurm controller group (always one node) and the login group when it has nodes:
    (name, kind, HyperPod instance type, count); neither has GPUs or EFA."""
    slurm = cfg.compute.slurm if cfg.compute.orchestrator == "slurm" else None
    if slurm is None:
        return []
    rows = [(CONTROLLER_GROUP_NAME, "slurm controller", slurm.controller.instance_type, 1)]
    if slurm.login.count:
        rows.append((LOGIN_GROUP_NAME, "slurm login", slurm.login.instance_type, slurm.login.count))
    return rows


def training_gpus(rows: list[GroupPlan]) -> int:
    """GPUs of the training groups: the nodes that mount the file system (inference node groups do not)."""
    return sum(r.gpus for r in rows if r.kind != INFERENCE_KIND)


def capacity_block_deploy_notes(cfg: EnvironmentConfig, now: datetime) -> list[str]:
    """What a deploy now does to each ec2 Capacity Block group: inside its window the
    update policy keeps the group's size and only a new `count` resizes it; without a window
    fminfra cannot tell whether the block runs, and a deploy that updates the group resets a
    hand-scaled size (docs/facts/capacity.md#cfn-scheduled-action-update-policy)."""
    if cfg.compute.orchestrator != "ec2":
        return []
    notes: list[str] = []
    for group in cfg.compute.instance_groups:
        cap = group.capacity
        if cap.type != "capacity-block":
            continue
        if cap.starts_at is None or cap.ends_at is None:
            notes.append(
                f"{group.name}: a deploy that updates this group while its block runs sets it back to 0 instances "
                "(no scheduled window, so no update policy applies); deploy outside the block or give starts_at/ends_at"
            )
        elif cap.starts_at <= now < scale_in_time(cap.ends_at, cap.drain):
            notes.append(
                f"{group.name}: its Capacity Block runs now (until {utc_timestamp(cap.ends_at)}); a deploy keeps its "
                f"{group.count} instances (update policy), changes reach new instances only, and a changed count fails the deploy "
                "(BlockStart would be put again with its start in the past; docs/capacity.md)"
            )
    return notes


def render_plan(cfg: EnvironmentConfig) -> str:
    """The text `python -m fminfra plan` prints on stdout for one environment; its warnings are
    `plan_warnings`, which go to stderr."""
    rows = group_plans(cfg)
    what = (
        "inference only: an EKS cluster with GPU node groups, no training cluster"
        if cfg.compute.orchestrator == "none"
        else f"orchestrator {cfg.compute.orchestrator}"
    )
    out = [f"environment {cfg.name} ({cfg.account}, {cfg.region}, compute AZ {cfg.network.compute_az_id}), {what}"]
    table = [
        [r.name, r.kind, r.instance_type, r.count_text, str(r.gpus), r.efa_text, str(r.network_gbps), r.capacity, r.placement] for r in rows
    ]
    table += [
        [name, kind, instance_type, str(count), "0", "-", "-", "on-demand", "-"]
        for name, kind, instance_type, count in slurm_head_rows(cfg)
    ]
    out.append(
        format_table(
            ["group", "kind", "instance type", "count", "GPUs", "EFA attached/max", "network Gbps", "capacity", "placement"], table
        )
    )
    total = sum(r.gpus for r in rows)
    out.append(f"total GPUs (training groups and inference at max size): {total}")
    out.extend(storage_lines(cfg, training_gpus(rows)))
    out.extend(eks_lines(cfg))
    out.extend(pod_ip_lines(cfg))
    out.extend(scheduling_lines(cfg))
    return "\n".join(out)


def plan_warnings(cfg: EnvironmentConfig, now: datetime | None = None) -> list[str]:
    """The `WARN ...` lines of `plan` (NOW: for the Capacity Block notes; default the current time):
    each group's notes, what a deploy now does to Capacity Block groups, the config's warnings."""
    out = [f"WARN {r.name}: {note}" for r in group_plans(cfg) for note in r.notes]
    out.extend(f"WARN deploy: {note}" for note in capacity_block_deploy_notes(cfg, now or datetime.now(UTC)))
    out.extend(f"WARN {note}" for note in pod_ip_warnings(cfg))
    out.extend(f"WARN {f.path}: {f.message}" for f in cfg.warnings())
    return out


def eks_lines(cfg: EnvironmentConfig) -> list[str]:
    """The EKS line of `plan`: Kubernetes version and its support end, and the system node group."""
    eks = cfg.compute.eks
    if eks is None:
        return []
    end = standard_support_end(eks.kubernetes_version).isoformat()
    count = cfg.compute.system_node_count()
    if count:
        system = (
            f"system nodes {count} x {eks.system_nodes.instance_type} on demand (CoreDNS and other system pods; billed per instance hour)"
        )
    else:
        system = "system nodes none (" + ", ".join(cfg.compute.untainted_node_sources()) + " run CoreDNS and other system pods)"
    return [f"eks: Kubernetes {eks.kubernetes_version} (EKS standard support ends {end}), {system}"]


@dataclass(frozen=True, kw_only=True)
class PodIpPlan:
    """What the VPC CNI takes from the subnets for one Karpenter pool or EKS managed inference node group at its
    maximum (docs/compute.md#pod-ip-addresses): per node (with its pods on one ENI and a warm one; at max pods),
    None where the type's limits are unknown; the subnets its nodes launch into, any of which may take them all."""

    name: str
    kind: str  # "karpenter pool" or "node group"
    instance_type: str
    nodes: int
    per_node: tuple[int, int] | None
    max_pods: int | None
    subnets: tuple[SubnetPlan, ...]

    @property
    def total(self) -> tuple[int, int] | None:
        return None if self.per_node is None else (self.per_node[0] * self.nodes, self.per_node[1] * self.nodes)


def pod_ip_plans(cfg: EnvironmentConfig) -> list[PodIpPlan]:
    """Each EKS inference group at max_size: a Karpenter pool in every private subnet (compute.eks.karpenter), or
    a managed node group in the compute subnet. A Karpenter pool of an EFA type also counts the `efa` interfaces
    Karpenter attaches beyond card 0 for pods that ask for EFA, one address each
    (docs/facts/karpenter.md#karpenter-efa-network-interfaces); fminfra's node-group launch templates attach
    `efa-only` interfaces, which take none (docs/facts/network.md#efa-only-no-ip-addresses)."""
    subnets = cfg.network.subnets()
    private = tuple(s for s in subnets if not s.public)
    compute = tuple(s for s in subnets if s.compute)
    plans = []
    for group in cfg.compute.inference_node_groups:
        spec = catalog.get(group.instance_type)
        karpenter = cfg.compute.karpenter
        efa = spec.max_efa_interfaces if karpenter and spec.training else 0
        plans.append(
            PodIpPlan(
                name=group.name,
                kind="karpenter pool" if karpenter else "node group",
                instance_type=spec.name,
                nodes=group.max_size,
                per_node=vpc_cni_node_addresses(spec.name, efa),
                max_pods=vpc_cni_max_pods(spec.name),
                subnets=private if karpenter else compute,
            )
        )
    return plans


def _range(values: tuple[int, int] | None) -> str:
    if values is None:
        return "unknown"
    low, high = values
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def pod_ip_lines(cfg: EnvironmentConfig) -> list[str]:
    """The pod-IP lines of `plan`: per pool or node group at its maximum, what the VPC CNI takes per node
    and in all, and from which subnets (their usable addresses)."""
    plans = pod_ip_plans(cfg)
    if not plans:
        return []
    rows = [
        [
            p.name,
            p.kind,
            p.instance_type,
            str(p.nodes),
            "unknown" if p.max_pods is None else str(p.max_pods),
            _range(p.per_node),
            _range(p.total),
            ", ".join(f"{s.name} {s.cidr} ({usable_addresses(s.cidr):,} usable)" for s in p.subnets),
        ]
        for p in plans
    ]
    return [
        "pod IPs (VPC CNI defaults: WARM_ENI_TARGET=1, no prefix delegation, network card 0; per node: pods on one ENI "
        "and a warm one, to every ENI at max pods; any one of the subnets may take all of a pool's nodes):",
        format_table(["group", "kind", "instance type", "nodes at max", "max pods", "IPs per node", "IPs at max", "subnets"], rows),
    ]


def pod_ip_warnings(cfg: EnvironmentConfig) -> list[str]:
    """A pool or node group whose VPC CNI addresses at its maximum (upper bound) come to more than
    POD_IP_SUBNET_SHARE of the usable addresses of a subnet its nodes can all land in; those that can
    land in one subnet together at their maxima, past all its usable addresses; a type whose limits are unknown."""
    out = []
    plans = pod_ip_plans(cfg)
    for p in plans:
        total = p.total
        if total is None:
            out.append(
                f"{p.name}: pod IPs unknown: no VPC CNI limits recorded for {p.instance_type} (docs/facts/eks.md#vpc-cni-eni-limits)"
            )
            continue
        for subnet in p.subnets:
            usable = usable_addresses(subnet.cidr)
            if total[1] > POD_IP_SUBNET_SHARE * usable:
                out.append(
                    f"{p.name}: at its maximum ({p.nodes} x {p.instance_type}) the VPC CNI can take up to {total[1]:,} addresses, "
                    f"more than {POD_IP_SUBNET_SHARE:.0%} of the {usable:,} usable in {subnet.name} ({subnet.cidr}), where all its nodes "
                    "can land; give the network a larger subnet prefix, lower max_size, or set the VPC CNI's WARM_IP_TARGET/prefix "
                    "delegation (docs/compute.md#pod-ip-addresses)"
                )
    for subnet in cfg.network.subnets():
        sharing = [p for p in plans if subnet in p.subnets and p.total is not None]
        together = sum(p.total[1] for p in sharing if p.total is not None)
        if len(sharing) > 1 and together > usable_addresses(subnet.cidr):
            out.append(
                f"{subnet.name} ({subnet.cidr}): {', '.join(p.name for p in sharing)} together at their maximum can take up to "
                f"{together:,} addresses, more than its {usable_addresses(subnet.cidr):,} usable (docs/compute.md#pod-ip-addresses)"
            )
    return out


def scheduling_lines(cfg: EnvironmentConfig) -> list[str]:
    """HyperPod EKS: the teams of task governance, each with its quota and the queue its jobs name."""
    quotas = cfg.compute.team_quotas()
    if not quotas:
        return []
    gpus = {g.spec.hyperpod_name: g.spec.gpus for g in cfg.compute.instance_groups}
    lines = ["scheduling: HyperPod task governance (Kueue; gang scheduling is a console step, see docs/compute.md)"]
    for team, by_type in quotas.items():
        held = ", ".join(f"{n * gpus[t]} GPUs ({n} x {t})" for t, n in by_type.items()) or "no instances"
        lines.append(f"  team {team}: {held}; queue {team_queue('hyperpod-eks', team).local_queue} in hyperpod-ns-{team}")
    return lines


def storage_lines(cfg: EnvironmentConfig, gpus: int) -> list[str]:
    """The storage lines of `plan`: bucket, and the file system's capacity and throughput, per GPU
    of the GPUS that mount it (the training groups' GPUs: inference node groups do not mount it)."""
    storage = cfg.storage
    if storage is None:
        return ["storage: none (no data bucket, no file system)"]
    bucket = storage.bucket_name(cfg)
    lines = [f"storage: bucket {bucket} ({'existing' if storage.bucket.existing else 'created'}, encryption {storage.encryption})"]
    lustre = storage.lustre
    if lustre is None:
        lines.append("lustre: none")
        return lines
    tier = f"{lustre.mb_per_tib} MB/s/TiB" if lustre.persistent else f"{lustre.mb_per_tib} MB/s/TiB baseline"
    sized = (
        f" (smallest valid capacity for target {lustre.target_throughput_gb_per_s:g} GB/s)"
        if lustre.target_throughput_gb_per_s is not None
        else ""
    )
    lines.append(
        f"lustre: {lustre.deployment_type}, {lustre.capacity_gib} GiB{sized}, {tier}, "
        f"throughput {lustre.throughput_gb_per_s:.2f} GB/s, "
        + (f"{lustre.throughput_gb_per_s / gpus:.3f} GB/s per training GPU ({gpus} GPUs)" if gpus else "no training GPUs to feed")
        + f", efa {'on' if lustre.efa else 'off'}, {len(lustre.repositories)} repositories"
    )
    return lines


def command(ns: argparse.Namespace) -> int:
    from fminfra.ops.common import EXIT_OK, UsageError, load_configs

    if getattr(ns, "profile", None) and not getattr(ns, "topology", False):
        raise UsageError("plan: --profile applies to --topology only (plan alone makes no AWS calls)")
    for i, (_, cfg) in enumerate(load_configs(ns.configs)):
        if i:
            print()
        print(render_plan(cfg))
        for line in plan_warnings(cfg):  # once, on stderr (as `validate` prints them): stdout is the plan
            print(line, file=sys.stderr)
        if getattr(ns, "topology", False):
            from fminfra.ops.plan_topology import reader_for, render_topology

            print(render_topology(cfg, reader_for(cfg, ns.profile)))
    return EXIT_OK
