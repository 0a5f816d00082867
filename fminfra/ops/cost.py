"""`cost ENV`: what an environment costs, read from its synthesized templates (what will really be
deployed) and priced from the dated table in `fminfra/ops/pricing/prices.yaml` (or, with `--live`, the
AWS Price List API).

Three kinds of money:
- per hour while running: the GPU groups (EC2 prices for ec2 and EKS groups, SageMaker `ml.*`
  prices for HyperPod groups; they differ), and Karpenter pools, which run 0 to `limits.nodes`
  instances (priced at that maximum, nothing while idle);
- reserved capacity that bills whether used or not: On-Demand Capacity Reservations (at the
  On-Demand rate, docs/facts/pricing.md#odcr-billing), and the fees paid up front for Capacity
  Blocks and training plans, which no template holds (`capacity.upfront_fee_usd` in the config);
- fixed items: NAT gateways, interface endpoints per AZ, FSx for Lustre, EKS control planes,
  the HyperPod controller and login nodes, Grafana users, AMP ingestion (the last two from
  assumptions you can change, shown as such).
An item without a known price says "price unknown" and is left out of the totals, which then say
so: never a guess.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from fminfra import catalog
from fminfra.capacity.rules import EC2_TERMINATES_BEFORE_END, RESERVATION_TYPES
from fminfra.compute.config import InferenceNodeGroupConfig, InstanceGroupConfig, standard_support_end, supported_kubernetes_versions
from fminfra.config import EnvironmentConfig
from fminfra.core.assembly import (
    KUBERNETES_MANIFEST,
    StackTemplate,
    auto_scaling_group_name,
    environment_stacks,
    launch_template_instance_type,
    manifest_objects,
)
from fminfra.core.table import format_table
from fminfra.eks.rules import (
    BLOCK_START_AT,
    BLOCK_START_DESCRIPTION,
    INSTANCE_TYPE_LABEL,
    KARPENTER_CAPACITY_TYPE_LABEL,
    KARPENTER_NODEPOOL_API,
    KARPENTER_RESERVED,
)
from fminfra.hyperpod.rules import NODE_CLASS_KIND as HYPERPOD_NODE_CLASS_KIND
from fminfra.network.rules import ENDPOINT_SERVICE_REGION
from fminfra.ops.common import EXIT_OK, UsageError, load_configs
from fminfra.ops.pricing import PRICE_LIST_REGIONS, Price, PriceBook

HOURS_PER_MONTH = 730  # docs/facts/pricing.md#hours-per-month
# AMP ingestion tiers per month, in 10M samples: (price key, tier size or None for the rest, label).
# fact: docs/facts/pricing.md#amp-ingestion-tiers (first 2B samples, next 250B, over 252B)
AMP_INGESTION_TIERS: tuple[tuple[str, float | None, str], ...] = (
    ("amp:ingestion", 200, "first 2B samples/month"),
    ("amp:ingestion:next-250b", 25_000, "next 250B samples/month"),
    ("amp:ingestion:over-252b", None, "over 252B samples/month"),
)

RUNNING, RESERVED, UPFRONT, FIXED = "running", "reserved (bills while idle)", "paid up front", "fixed"

EXISTING_RESERVATION_ASSUMPTION = "an existing reservation is priced at the On-Demand rate for the group's count; its real size is in EC2 (describe-capacity-reservations)"
# What a Capacity Block's price is (docs/facts/pricing.md#capacity-block-pricing): said beside every
# block fee that is not a live quote. The OS fee has no source (docs/facts/pricing.md#capacity-block-rates).
CAPACITY_BLOCK_INDICATIVE = (
    "Capacity Block fee: indicative only; block prices move with supply and demand and are charged up front "
    "at the rate when bought (--live quotes it), and the operating system is billed separately while instances run: "
    "that OS fee is not included, no public source recorded for it"
)
# Said beside a block fee the config gives (the fee paid): only the operating system's fee is missing from it.
CAPACITY_BLOCK_OS_FEE = (
    "Capacity Block fee: the config's capacity.upfront_fee_usd; the operating system is billed separately while "
    "instances run: that OS fee is not included, no public source recorded for it"
)
# A training plan's fee is quoted when the plan is bought: no table can hold it.
TRAINING_PLAN_FEE_UNKNOWN = "price unknown: no public source for a training plan's fee (quoted when bought); set capacity.upfront_fee_usd"


@dataclass
class Item:
    """One line of the estimate."""

    kind: str  # RUNNING, RESERVED, UPFRONT or FIXED
    name: str  # as a user knows it
    quantity: float
    unit: str  # what the price is per: instance-hour, hour, GB-month, user-month, 10M samples
    key: str | None  # price table key; None for up-front fees from the config
    gpus: int = 0
    usd_each: float | None = None  # filled from the price book (or the config's fee)
    source: str = ""
    assumption: str = ""
    per_hour: float | None = field(default=None)
    per_month: float | None = field(default=None)
    unknown_hint: str = ""  # what else gives the price, added to "price unknown"
    from_config: str = ""  # what of an up-front fee's line the config gave ("fee", "window", "window and fee"): in no template
    karpenter_pool: bool = False  # a Karpenter pool's running instances: priced at its maximum, 0 while idle
    prepaid: bool = False  # instances on a Capacity Block or a training plan: their fee is paid up front

    def price(self, book: PriceBook, hours_per_month: float) -> None:
        if self.key is not None:
            found: Price | None = book.get(self.key)
            if found is None and self.kind == FIXED and self.quantity == 0:
                # none of it used (Grafana viewers 0): nothing to pay, whatever the rate
                self.per_hour, self.per_month, self.source = 0.0, 0.0, "none used: $0 at any rate"
                return
            if found is None:
                self.source = f"price unknown: {book.missing(self.key)}{self.unknown_hint}"
                return
            self.usd_each, self.source = found.usd, found.source
        if self.usd_each is None:
            return
        total = self.quantity * self.usd_each
        if self.kind == UPFRONT:
            self.per_hour, self.per_month = None, None
        elif self.unit in ("instance-hour", "hour"):
            self.per_hour, self.per_month = total, total * hours_per_month
        else:  # priced per month
            self.per_hour, self.per_month = total / hours_per_month, total


@dataclass
class Estimate:
    environment: str
    region: str
    items: list[Item]
    hours_per_month: float
    live: bool
    # Lines said before the figures: where the templates and the config disagree (a stale cdk.out), or,
    # for a baseline, what was taken from the current config because no template holds it.
    notes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        """The GPUs the hourly total pays for: not those of Capacity Blocks and training plans, whose fees are
        paid up front and are not in it (a per-GPU-hour figure over them would read as their rate)."""
        return sum(i.gpus for i in self.items if i.kind == RUNNING and not i.prepaid)

    @property
    def prepaid_gpus(self) -> int:
        return sum(i.gpus for i in self.items if i.kind == RUNNING and i.prepaid)

    def total(self, attr: str, kinds: tuple[str, ...]) -> float:
        return sum(getattr(i, attr) or 0.0 for i in self.items if i.kind in kinds)

    @property
    def unknown(self) -> list[Item]:
        return [i for i in self.items if i.source.startswith("price unknown")]

    @property
    def upfront(self) -> float:
        return sum(i.quantity * (i.usd_each or 0) for i in self.items if i.kind == UPFRONT)

    def summary(self) -> dict[str, Any]:
        hourly = self.total("per_hour", (RUNNING, RESERVED, FIXED))
        monthly = self.total("per_month", (RUNNING, RESERVED, FIXED))
        return {
            "per_hour_running": round(hourly, 4),
            "per_month": round(monthly, 2),
            # not a figure while a price is missing: a lower bound per GPU-hour reads as a price (newcomer read, C)
            "per_gpu_hour": round(hourly / self.gpus, 4) if self.gpus and not self.unknown else None,
            "idle_per_month": round(self.total("per_month", (RESERVED, FIXED)), 2),
            "paid_up_front": round(self.upfront, 2),
            "items_price_unknown": len(self.unknown),
        }


# ------------------------------------------------------------------------------------------ templates


def _resources(stacks: list[StackTemplate]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(logical id, resource, template) of every resource of the environment."""
    return [(lid, res, s.template) for s in stacks for lid, res in (s.template.get("Resources") or {}).items()]


def _gpus(instance_type: str) -> int:
    spec = catalog.CATALOG.get(catalog.normalize_instance_type(instance_type))
    return spec.gpus if spec else 0


def _launch_template_data(template: dict[str, Any], reference: Any) -> dict[str, Any]:
    """The LaunchTemplateData of the launch template a group references (Ref or GetAtt of its id)."""
    if not isinstance(reference, dict):
        return {}
    target = reference.get("LaunchTemplateId") or reference.get("Id") or reference
    logical = (target.get("Ref") or (target.get("Fn::GetAtt") or [None])[0]) if isinstance(target, dict) else None
    resource = (template.get("Resources") or {}).get(logical or "", {})
    return dict((resource.get("Properties") or {}).get("LaunchTemplateData") or {})


def _capacity(props: dict[str, Any], launch_template: dict[str, Any]) -> str:
    """What a group's instances run in, as its template says: capacity-block (the node group's
    CAPACITY_BLOCK capacity type or the launch template's capacity-block market), odcr (a reservation
    the templates create: a reference), reservation (existing ones: a literal id or a reservation
    group), else on-demand."""
    if (
        props.get("CapacityType") == "CAPACITY_BLOCK"
        or (launch_template.get("InstanceMarketOptions") or {}).get("MarketType") == "capacity-block"
    ):
        return "capacity-block"
    target = (launch_template.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    if target.get("CapacityReservationResourceGroupArn") or isinstance(target.get("CapacityReservationId"), str):
        return "reservation"
    return "odcr" if target.get("CapacityReservationId") else "on-demand"


# Why a group in reserved capacity adds nothing per hour (docs/facts/pricing.md#odcr-billing).
RESERVED_CAPACITY_NOTE = {
    "odcr": "billed by its reservation",
    "capacity-block": "covered by the block's fee",
    "reservation": "billed by its reservations",
}


def _reserved_group(name: str, label: str, count: int, itype: str, capacity: str, path: str) -> list[Item]:
    """A group whose instances run in reserved capacity: $0 an hour, beside the line of what pays for it
    (an existing reservation bills at the On-Demand rate whether used or not; an ODCR the templates
    create has its own line, a block its fee)."""
    items = []
    if capacity == "reservation":
        items.append(
            Item(
                RESERVED,
                f"reservations for {name}: {count} x {itype} (existing)",
                count,
                "instance-hour",
                f"ec2:{itype}",
                assumption=EXISTING_RESERVATION_ASSUMPTION,
            )
        )
    items.append(
        Item(
            RUNNING,
            f"{label}: {count} x {itype} ({path}, {capacity})",
            0,
            "instance-hour",
            None,
            _gpus(itype) * count,
            0.0,
            RESERVED_CAPACITY_NOTE[capacity],
            prepaid=capacity == "capacity-block",
        )
    )
    return items


@dataclass(frozen=True)
class _Prepaid:
    """A group the templates show on a Capacity Block or a training plan: its fee is in no template."""

    kind: str  # capacity-block or training-plan
    name: str  # the config's group name (or, for a group the config lacks, the template's)
    count: int  # from the template
    instance_type: str
    karpenter: bool = False  # a Karpenter pool's block: no window in the config (Karpenter refuses starts_at)
    window: tuple[datetime, datetime] | None = None  # an ec2 block's scale-out and scale-in times, from its scheduled actions


def items_from_templates(
    cfg: EnvironmentConfig,
    stacks: list[StackTemplate],
    *,
    grafana_users: tuple[int, int],
    amp_samples: float,
    ec2: Any = None,
    today: date | None = None,
    hours_per_month: float = HOURS_PER_MONTH,
) -> list[Item]:
    """Every billable item the environment's templates create, with quantities (prices come later).
    Counts and capacity come from the templates; only the up-front fees (and a block's window), which no
    template holds, come from the config."""
    items: list[Item] = []
    groups = {g.name: g for g in cfg.compute.instance_groups}
    inference = {cfg.physical_name(g.name): g.name for g in cfg.compute.inference_node_groups}
    configured_groups = {g.name: g for g in cfg.compute.inference_node_groups}
    prepaid: list[_Prepaid] = []
    nat_gateways = 0
    endpoints: list[tuple[str, int]] = []
    for lid, res, template in _resources(stacks):
        kind, props = res.get("Type"), res.get("Properties") or {}
        if kind == "AWS::SageMaker::Cluster":
            for g in props.get("InstanceGroups") or []:
                name, itype, count = g.get("InstanceGroupName"), g.get("InstanceType"), int(g.get("InstanceCount") or 0)
                items.extend(_hyperpod_storage(str(name), count, g.get("InstanceStorageConfigs")))
                if g.get("TrainingPlanArn"):
                    prepaid.append(_Prepaid("training-plan", str(name), count, str(itype)))
                    items.append(
                        Item(
                            RUNNING,
                            f"{name}: {count} x {itype} (HyperPod, training plan)",
                            0,
                            "instance-hour",
                            None,
                            _gpus(itype) * count,
                            0.0,
                            "covered by the training plan's fee",
                            prepaid=True,
                        )
                    )
                    continue
                gpu = _gpus(itype)
                items.append(
                    Item(
                        RUNNING if gpu else FIXED,
                        f"{name}: {count} x {itype} (HyperPod)",
                        count,
                        "instance-hour",
                        f"sagemaker-hyperpod:{itype}",
                        gpu * count,
                    )
                )
        elif kind == "AWS::AutoScaling::AutoScalingGroup":
            itype = launch_template_instance_type(template, props.get("LaunchTemplate")) or "?"
            name = auto_scaling_group_name(lid, groups) or lid
            count = int(props.get("MaxSize") or 0)
            capacity = _capacity(props, _launch_template_data(template, props.get("LaunchTemplate")))
            items.extend(_ebs_volumes(name, count, _launch_template_data(template, props.get("LaunchTemplate"))))
            if capacity == "capacity-block":
                scheduled = block_schedules(template).get(lid)
                prepaid.append(_Prepaid(capacity, name, count, itype, window=scheduled[:2] if scheduled else None))
            if capacity != "on-demand":
                items.extend(_reserved_group(name, name, count, itype, capacity, "ec2"))
            else:
                items.append(
                    Item(RUNNING, f"{name}: {count} x {itype} (ec2)", count, "instance-hour", f"ec2:{itype}", _gpus(itype) * count)
                )
        elif kind == "AWS::EKS::Nodegroup":
            types = props.get("InstanceTypes") or [launch_template_instance_type(template, props.get("LaunchTemplate")) or "?"]
            scaling = props.get("ScalingConfig") or {}
            desired, maximum = int(scaling.get("DesiredSize") or 0), int(scaling.get("MaxSize") or 0)
            itype, label = types[0], str(props.get("NodegroupName") or lid)
            capacity = _capacity(props, _launch_template_data(template, props.get("LaunchTemplate")))
            volumes = _ebs_volumes(
                label, maximum if capacity != "on-demand" else desired, _launch_template_data(template, props.get("LaunchTemplate"))
            )
            if not volumes and props.get("LaunchTemplate") is None:
                volumes = _node_group_root_volume(label, maximum if capacity != "on-demand" else desired, props.get("DiskSize"))
            items.extend(volumes)
            if capacity != "on-demand":
                # What the reservation or the block holds: the group's maximum (an ODCR is sized by max_size).
                name = inference.get(label, label)
                if capacity == "capacity-block":
                    prepaid.append(_Prepaid(capacity, name, maximum, itype))
                items.extend(_reserved_group(name, label, maximum, itype, capacity, "EKS"))
                continue
            items.append(
                Item(
                    RUNNING,
                    f"{label}: {desired} x {itype} (EKS, up to {maximum})",
                    desired,
                    "instance-hour",
                    f"ec2:{itype}",
                    _gpus(itype) * desired,
                    assumption=f"desired size {desired}; at the maximum {maximum} it costs {maximum}/{desired or 1}x",
                )
            )
        elif kind == KUBERNETES_MANIFEST:
            for pool in _node_pools(props.get("Manifest")):
                items.extend(_pool_items(pool, configured_groups, prepaid))
        elif kind in RESERVATION_TYPES:
            itype, count = props.get("InstanceType"), int(props.get("InstanceCount") or 0)
            squeezed = re.sub(r"Reservation[0-9A-F]{8}$", "", lid.removeprefix("CapacityReservation"))
            # the logical id drops the name's punctuation: the config's group of that name, hyphens and all
            names = [g.name for g in cfg.compute.instance_groups] + [g.name for g in cfg.compute.inference_node_groups]
            group_name = next((n for n in names if re.sub(r"[^A-Za-z0-9]", "", n) == squeezed), squeezed)
            items.append(Item(RESERVED, f"ODCR for {group_name}: {count} x {itype}", count, "instance-hour", f"ec2:{itype}"))
        elif kind == "AWS::EC2::NatGateway":
            nat_gateways += 1
        elif kind == "AWS::EC2::VPCEndpoint" and props.get("VpcEndpointType") == "Interface":
            endpoints.append((str(props.get("ServiceName", "")).split(".", 3)[-1], len(props.get("SubnetIds") or [])))
        elif kind == "AWS::FSx::FileSystem":
            lustre = props.get("LustreConfiguration") or {}
            deployment = str(lustre.get("DeploymentType", "")).lower()
            tier = lustre.get("PerUnitStorageThroughput") or "baseline"
            gib = int(props.get("StorageCapacity") or 0)
            items.append(
                Item(FIXED, f"FSx for Lustre {gib} GiB {deployment} at {tier} MB/s/TiB", gib, "GB-month", f"fsx-lustre:{deployment}:{tier}")
            )
            metadata = lustre.get("MetadataConfiguration") or {}
            if metadata.get("Mode") == "USER_PROVISIONED":
                items.append(
                    Item(
                        FIXED,
                        f"FSx metadata {metadata.get('Iops')} IOPS",
                        int(metadata.get("Iops") or 0),
                        "IOPS-month",
                        "fsx-lustre:metadata-iops",
                    )
                )
        elif kind == "AWS::EKS::Cluster":
            items.append(_control_plane(lid, props, today or datetime.now(UTC).date()))
        elif kind == "AWS::Grafana::Workspace":
            editors, viewers = grafana_users
            items.append(
                Item(FIXED, f"Grafana editors ({editors})", editors, "user-month", "grafana:editor", assumption="--grafana-editors")
            )
            items.append(
                Item(FIXED, f"Grafana viewers ({viewers})", viewers, "user-month", "grafana:viewer", assumption="--grafana-viewers")
            )
        elif kind == "AWS::APS::Workspace":
            items.extend(_amp_ingestion(amp_samples, hours_per_month))
        elif kind == "AWS::APS::Scraper":
            # fact: docs/facts/pricing.md#amp-ingestion-tiers (managed collector: per collector-hour and per 10M samples collected)
            items.append(Item(FIXED, f"AMP managed scraper {props.get('Alias') or lid}", 1, "hour", "amp:scraper"))
            items.append(
                Item(
                    FIXED,
                    f"AMP managed scraper samples collected ({amp_samples:g} samples/s)",
                    amp_samples * 3600 * hours_per_month / 1e7,
                    "10M samples",
                    "amp:scraper-samples",
                    assumption="the managed scraper collects the --amp-samples-per-second samples (all of them: an upper bound)",
                )
            )
    if nat_gateways:
        items.append(
            Item(
                FIXED,
                f"NAT gateways ({nat_gateways})",
                nat_gateways,
                "hour",
                "nat-gateway",
                assumption="NAT gateways: the hourly charge only; data processed is extra",
            )
        )
    if endpoints:
        endpoint_azs = sum(azs for _, azs in endpoints)
        items.append(
            Item(
                FIXED,
                f"interface endpoints: {len(endpoints)} services in {endpoint_azs} endpoint-AZs",
                endpoint_azs,
                "hour",
                "vpc-interface-endpoint",
            )
        )
    configured: dict[str, InstanceGroupConfig | InferenceNodeGroupConfig] = {g.name: g for g in cfg.compute.instance_groups}
    configured.update({g.name: g for g in cfg.compute.inference_node_groups})
    items.extend(_fee(p, configured.get(p.name), ec2) for p in prepaid)
    return items


def _ebs_volumes(name: str, count: int, launch_template: dict[str, Any]) -> list[Item]:
    """The EBS volumes a launch template gives each instance, by volume type, for the group's COUNT instances."""
    sizes: dict[str, int] = {}
    for mapping in launch_template.get("BlockDeviceMappings") or []:
        ebs = mapping.get("Ebs") or {}
        if ebs.get("VolumeSize"):
            volume = str(ebs.get("VolumeType") or "gp2")  # EC2's default volume type
            sizes[volume] = sizes.get(volume, 0) + int(ebs["VolumeSize"])
    return [
        Item(RUNNING, f"EBS {volume} of {name}: {count} x {gib} GiB", count * gib, "GB-month", f"ebs:{volume}")
        for volume, gib in sizes.items()
        if count
    ]


# A managed node group without a launch template: its root volume is DiskSize GiB, 20 GiB for Linux by default
# (botocore's eks model, CreateNodegroupRequest.diskSize: docs/facts/pricing.md#eks-node-group-default-disk);
# its volume type is EKS's choice, not in the template.
NODE_GROUP_DEFAULT_DISK_GIB = 20


def _node_group_root_volume(name: str, count: int, disk_size: Any) -> list[Item]:
    gib = int(disk_size) if disk_size else NODE_GROUP_DEFAULT_DISK_GIB
    if not count:
        return []
    return [
        Item(RUNNING, f"EBS root volumes of {name}: {count} x {gib} GiB (EKS's default type)", count * gib, "GB-month", "ebs:eks-default")
    ]


def _hyperpod_storage(name: str, count: int, configs: Any) -> list[Item]:
    """A HyperPod group's instance storage (InstanceStorageConfigs' EBS volumes), for its COUNT instances."""
    gib = sum(int((c.get("EbsVolumeConfig") or {}).get("VolumeSizeInGB") or 0) for c in configs or [] if isinstance(c, dict))
    if not gib or not count:
        return []
    return [Item(RUNNING, f"instance storage of {name}: {count} x {gib} GiB (HyperPod)", count * gib, "GB-month", "hyperpod-ebs")]


def _amp_ingestion(per_second: float, hours_per_month: float) -> list[Item]:
    """AMP ingestion, one line per tier the month's samples reach (the first always)."""
    left = per_second * 3600 * hours_per_month / 1e7  # samples in the month asked for, in 10M
    items: list[Item] = []
    for key, size, label in AMP_INGESTION_TIERS:
        quantity = left if size is None else min(left, size)
        if quantity > 0 or not items:
            items.append(
                Item(
                    FIXED,
                    f"AMP ingestion ({per_second:g} samples/s), {label}",
                    quantity,
                    "10M samples",
                    key,
                    assumption="--amp-samples-per-second",
                )
            )
        left -= quantity
    return items


KARPENTER_POOL_ASSUMPTION = (
    "a Karpenter pool runs 0 to limits.nodes instances, only while pods wait for them: idle (0 nodes) it bills nothing; "
    "its $/hour and $/month are at that maximum, in the running figures, never in what bills while idle"
)
# docs/facts/pricing.md#spot-price-cap: Karpenter sets no maximum price, so a spot instance costs at most the On-Demand rate.
KARPENTER_SPOT_ASSUMPTION = (
    "a Karpenter pool that may launch spot is priced at the On-Demand rate, an upper bound: without a maximum price "
    "(Karpenter sets none) a spot instance never costs more than the On-Demand price"
)


@dataclass(frozen=True)
class _NodePool:
    """A Karpenter NodePool as the template applies it."""

    name: str
    instance_types: tuple[str, ...]
    capacity_types: tuple[str, ...]
    nodes: int | None  # limits.nodes; None: no limit


def _node_pools(manifest: Any) -> list[_NodePool]:
    """The Karpenter NodePools a kubectl-provider resource applies (none when it applies none)."""
    pools = []
    for doc in manifest_objects(manifest)[0]:
        if doc.get("kind") != "NodePool" or doc.get("apiVersion") != KARPENTER_NODEPOOL_API:
            continue
        spec = doc.get("spec") or {}
        node_class = (spec.get("template") or {}).get("spec", {}).get("nodeClassRef") or {}
        if node_class.get("kind") == HYPERPOD_NODE_CLASS_KIND:
            # HyperPod's managed autoscaler scales instance groups with it: the HyperPod group lines price them
            continue
        requirements = {
            r.get("key"): tuple(r.get("values") or ())
            for r in (spec.get("template") or {}).get("spec", {}).get("requirements") or []
            if r.get("operator") == "In"
        }
        nodes = (spec.get("limits") or {}).get("nodes")
        pools.append(
            _NodePool(
                name=str((doc.get("metadata") or {}).get("name")),
                instance_types=requirements.get(INSTANCE_TYPE_LABEL, ()),
                capacity_types=requirements.get(KARPENTER_CAPACITY_TYPE_LABEL, ()),
                nodes=int(nodes) if nodes is not None else None,
            )
        )
    return pools


def _pool_items(pool: _NodePool, configured: dict[str, InferenceNodeGroupConfig], prepaid: list[_Prepaid]) -> list[Item]:
    """A Karpenter pool: "0 to N x type" at the On-Demand rate per running instance, priced at N (an upper bound
    where it may launch spot); a reserved pool runs at $0 beside what pays for its reservation or block, as a node
    group on reserved capacity does. Unknown where the pool names no single type or no limit."""
    types = "/".join(pool.capacity_types) or "capacity types unknown"
    if len(pool.instance_types) != 1 or pool.nodes is None:
        return [
            Item(
                RUNNING,
                f"{pool.name}: Karpenter pool ({types}), instances unknown",
                0,
                "instance-hour",
                None,
                source="price unknown: the NodePool names no single instance type or no limits.nodes",
            )
        ]
    (itype,), count = pool.instance_types, pool.nodes
    if KARPENTER_RESERVED in pool.capacity_types:
        group = configured.get(pool.name)
        capacity = "capacity-block" if group is not None and group.capacity.type == "capacity-block" else "reservation"
        if capacity == "capacity-block":
            prepaid.append(_Prepaid(capacity, pool.name, count, itype, karpenter=True))
        return _reserved_group(pool.name, pool.name, count, itype, capacity, f"Karpenter pool, running 0 to {count}")
    assumptions = [KARPENTER_POOL_ASSUMPTION]
    if "spot" in pool.capacity_types:
        assumptions.append(KARPENTER_SPOT_ASSUMPTION)
    return [
        Item(
            RUNNING,
            f"{pool.name}: running 0 to {count} x {itype} (Karpenter pool, {types}; figures at max {count})",
            count,
            "instance-hour",
            f"ec2:{itype}",
            _gpus(itype) * count,
            assumption="; ".join(assumptions),
            karpenter_pool=True,
        )
    ]


def _control_plane(lid: str, props: dict[str, Any], today: date) -> Item:
    """An EKS control plane at the standard support rate, or the extended one once its version is past
    standard support (the version manifest's end date, docs/facts/eks.md#eks-kubernetes-version) under the
    upgrade policy EXTENDED, the default when the template sets none; with STANDARD, EKS upgrades the cluster
    at the end of standard support instead (CloudFormation's AWS::EKS::Cluster UpgradePolicy,
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-eks-cluster-upgradepolicy.html)."""
    version = str(props.get("Version") or "")
    support = (props.get("UpgradePolicy") or {}).get("SupportType", "EXTENDED")
    end = standard_support_end(version) if version in supported_kubernetes_versions() else None
    name = f"EKS control plane {props.get('Name') or lid} (Kubernetes {version})"
    if end is None:
        return Item(
            FIXED,
            name,
            1,
            "hour",
            "eks-cluster:standard",
            assumption=f"standard support rate; no standard support end known for {version}: past it, an upgrade policy {support} cluster bills the extended rate",
        )
    if today >= end and support == "EXTENDED":
        return Item(
            FIXED,
            name,
            1,
            "hour",
            "eks-cluster:extended",
            assumption=f"Kubernetes {version} is past its EKS standard support (ended {end.isoformat()}): the extended support rate (upgrade policy EXTENDED)",
        )
    after = "it bills the extended rate" if support == "EXTENDED" else "EKS upgrades it (upgrade policy STANDARD)"
    return Item(
        FIXED,
        name,
        1,
        "hour",
        "eks-cluster:standard",
        assumption=f"Kubernetes {version}: standard support until {end.isoformat()}; after it {after}",
    )


def _fee(prepaid: _Prepaid, group: InstanceGroupConfig | InferenceNodeGroupConfig | None, ec2: Any) -> Item:
    """The up-front fee of a block or a training plan the templates show: the config's upfront_fee_usd,
    a live quote, or the table's indicative rate x the template's count x the config's window."""
    block = prepaid.kind == "capacity-block"
    if group is None or group.capacity.type != prepaid.kind:
        return Item(
            UPFRONT,
            f"{prepaid.name}: {prepaid.kind} fee",
            1,
            "window",
            None,
            source=f"price unknown: the config has no {prepaid.kind} group {prepaid.name}, and no template holds the fee"
            + (" or the window" if block else ""),
        )
    cap, count = group.capacity, prepaid.count
    fee = cap.upfront_fee_usd
    window, hours = "", 0.0
    starts_at, ends_at = cap.starts_at, cap.ends_at
    if block and prepaid.window is not None:
        # The templates' window: the scale-out time, and the scale-in time plus what comes before EC2's end
        # (the drain, the config's, and EC2's lead: fminfra.capacity.rules.scale_in_time).
        starts_at, ends_at = prepaid.window[0], block_end(prepaid.window[1], cap.drain)
    if block and starts_at and ends_at:
        hours = (ends_at - starts_at).total_seconds() / 3600
        window = f", {hours:g} h window"
    given = [part for part, taken in (("window", block and prepaid.window is None and hours), ("fee", fee is not None)) if taken]
    item = Item(
        UPFRONT,
        f"{group.name}: {prepaid.kind} fee{window}",
        1,
        "window",
        None,
        usd_each=float(fee) if fee is not None else None,
        source="the config's capacity.upfront_fee_usd"
        if fee is not None
        else "price unknown: set capacity.upfront_fee_usd (a Karpenter pool's block has no starts_at/ends_at)"
        if block and prepaid.karpenter
        else "price unknown: set capacity.upfront_fee_usd or starts_at and ends_at"
        if block
        else TRAINING_PLAN_FEE_UNKNOWN,
        assumption=CAPACITY_BLOCK_OS_FEE if block and fee is not None else "",
        from_config=" and ".join(given),
    )
    if block and fee is None and ec2 is None and hours:
        # The table's indicative rate per instance-hour for the window (docs/facts/pricing.md#capacity-block-rates).
        itype = catalog.normalize_instance_type(prepaid.instance_type)
        item.quantity, item.unit, item.key = count * hours, "instance-hour", f"capacity-block:{itype}"
        item.name += f" ({count} x {hours:g} instance-hours, indicative)"
        item.unknown_hint = "; set capacity.upfront_fee_usd or quote it live (--live)"
        item.assumption = CAPACITY_BLOCK_INDICATIVE
    if block and fee is None and ec2 is not None and starts_at and ends_at and hours:
        quote = capacity_block_quote(ec2, catalog.normalize_instance_type(prepaid.instance_type), count, starts_at, ends_at)
        if quote is not None:
            item.usd_each, item.source, item.assumption = quote, LIVE_QUOTE_SOURCE, LIVE_QUOTE_ASSUMPTION
            item.name += ", live quote"
        else:
            item.source = f"{item.source}; no Capacity Block offering for this window now (DescribeCapacityBlockOfferings)"
    return item


LIVE_QUOTE_SOURCE = "EC2 DescribeCapacityBlockOfferings (--live): the lowest offering's UpfrontFee for this window"
LIVE_QUOTE_ASSUMPTION = (
    "Capacity Block fee quoted live: what a block for this window costs now; a block is charged at the rate when bought, "
    "and the operating system is billed separately"
)


def capacity_block_quote(ec2: Any, instance_type: str, count: int, starts_at: Any, ends_at: Any) -> float | None:
    """The lowest USD UpfrontFee EC2 offers now for COUNT x INSTANCE_TYPE over [starts_at, ends_at];
    None when nothing is offered (docs/facts/pricing.md#capacity-block-pricing)."""
    hours = int((ends_at - starts_at).total_seconds() // 3600)
    fees: list[float] = []
    token: str | None = None
    while True:
        page = ec2.describe_capacity_block_offerings(
            InstanceType=instance_type,
            InstanceCount=count,
            CapacityDurationHours=hours,
            StartDateRange=starts_at,
            EndDateRange=ends_at,
            **({"NextToken": token} if token else {}),
        )
        for offering in page.get("CapacityBlockOfferings", []):
            if str(offering.get("CurrencyCode", "USD")) == "USD" and offering.get("UpfrontFee") not in (None, ""):
                fees.append(float(offering["UpfrontFee"]))
        token = page.get("NextToken")
        if not token:
            break
    return min(fees) if fees else None


# ------------------------------------------------------------------------------------------ the command


def stacks_of(cfg: EnvironmentConfig, folder: Path) -> list[StackTemplate]:
    """The environment's stacks from a cloud assembly (cdk.out) or a folder of templates (baselines/ENV)."""
    if (folder / "manifest.json").exists():
        return environment_stacks(folder, cfg.name)
    if not folder.is_dir() or not any(folder.glob("*.template.json")):
        raise UsageError(
            f"{folder}: (folder): no cloud assembly (manifest.json) or templates (*.template.json) here; run `make synth` first"
        )
    from fminfra.core.assembly import AssemblyError, read_templates

    try:
        templates = read_templates(folder)
    except AssemblyError as exc:
        raise UsageError(str(exc)) from None
    # A stage's stacks are named <environment>-<stack> (CDK's default for a stage's stacks: baselines/ENV/ENV-*.template.json).
    others = sorted(name for name in templates if not name.startswith(f"{cfg.name}-"))
    if others:
        raise UsageError(
            f"{folder}: (folder): templates of stacks {', '.join(others)} are not environment {cfg.name}'s "
            f"(its stacks are named {cfg.name}-*): pass {cfg.name}'s templates (e.g. baselines/{cfg.name})"
        )
    return [StackTemplate(cfg.name, name, name, folder / f"{name}.template.json", template) for name, template in templates.items()]


def estimate(
    cfg: EnvironmentConfig,
    outdir: Path,
    *,
    book: PriceBook,
    hours_per_month: float = HOURS_PER_MONTH,
    grafana_users: tuple[int, int] = (1, 0),
    amp_samples: float = 10000.0,
    ec2: Any = None,
    baseline: bool = False,
    today: date | None = None,
) -> Estimate:
    """Price the environment's templates, read from a cloud assembly or a folder of templates; with an
    EC2 client, Capacity Block fees are quoted live (DescribeCapacityBlockOfferings). A `baseline` (the
    templates before a change) says which of its fees come from the current config; otherwise the
    estimate says where the templates and the config disagree."""
    stacks = stacks_of(cfg, outdir)
    region, region_note = cfg.region, []
    if baseline:
        # The baseline's own region (a pull request may move the environment): its templates' prices, said.
        found = _stack_regions(stacks) | _endpoint_regions(stacks)
        if len(found) == 1 and (region := next(iter(found))) != cfg.region:
            book = PriceBook(region, pricing_client=book.client)
            region_note = [
                f"before: the baseline's templates are in {region} (their endpoint service names), the config in {cfg.region}: "
                f"the baseline is priced at {region}'s prices"
            ]
        elif len(found) != 1:
            region = cfg.region
            region_note = [
                f"before: the baseline's region is not in its templates ({', '.join(sorted(found)) or 'no endpoint service names'}): "
                f"priced at the config's region {cfg.region}"
            ]
    items = items_from_templates(
        cfg, stacks, grafana_users=grafana_users, amp_samples=amp_samples, ec2=ec2, today=today, hours_per_month=hours_per_month
    )
    for item in items:
        item.price(book, hours_per_month)
    notes = (
        [*region_note, *(baseline_fee_note(i) for i in items if i.kind == UPFRONT and i.from_config)]
        if baseline
        else disagreements(cfg, stacks)
    )
    return Estimate(cfg.name, region, items, hours_per_month, book.client is not None, notes)


def baseline_fee_note(item: Item) -> str:
    """What a baseline's fee line took from the current config: no template holds a fee (nor an EKS block's window)."""
    group, _, kind = item.name.partition(": ")
    what = "Capacity Block" if kind.startswith("capacity-block") else "training plan"
    verb = "are" if " and " in item.from_config else "is"
    return (
        f"before: the {what} {item.from_config} of {group} {verb} in no template: "
        f"the baseline's {verb} assumed equal to the current config's"
    )


def block_schedules(template: dict[str, Any]) -> dict[str, tuple[datetime, datetime, int]]:
    """Auto Scaling group logical id -> (scale-out, scale-in, size) from its Capacity Block's scheduled actions."""
    from fminfra.ops.guard.capacity_blocks import _block_windows

    return _block_windows(template)


def block_end(scale_in: datetime, drain: timedelta) -> datetime:
    """A Capacity Block's end from its group's scale-in time (the inverse of fminfra.capacity.rules.scale_in_time)."""
    return scale_in + EC2_TERMINATES_BEFORE_END + drain


def _stack_regions(stacks: list[StackTemplate]) -> set[str]:
    """The regions a cloud assembly's manifests give its stacks (aws://ACCOUNT/REGION); none for a folder of templates."""
    regions: set[str] = set()
    for stack in stacks:
        manifest = stack.path.parent / "manifest.json"
        if not manifest.is_file():
            continue
        for artifact in (json.loads(manifest.read_text(encoding="utf-8")).get("artifacts") or {}).values():
            if (artifact.get("properties") or {}).get("templateFile") == stack.path.name:
                region = str(artifact.get("environment") or "").rpartition("/")[2]
                if region and region != "unknown-region":
                    regions.add(region)
    return regions


def _endpoint_regions(stacks: list[StackTemplate]) -> set[str]:
    """The regions the templates' VPC endpoints name in their service names (com.amazonaws.<region>.*)."""
    return {
        m.group(1)
        for _, res, _ in _resources(stacks)
        if res.get("Type") == "AWS::EC2::VPCEndpoint"
        and (m := ENDPOINT_SERVICE_REGION.match(str((res.get("Properties") or {}).get("ServiceName", ""))))
    }


def _template_sizes(cfg: EnvironmentConfig, stacks: list[StackTemplate]) -> dict[str, int]:
    """Config group name -> its size in the templates: a HyperPod group's InstanceCount, an Auto Scaling
    group's MaxSize, an inference node group's MaxSize, a Karpenter pool's limits.nodes."""
    names = [g.name for g in cfg.compute.instance_groups]
    inference = {cfg.physical_name(g.name): g.name for g in cfg.compute.inference_node_groups}
    sizes: dict[str, int] = {}
    for lid, res, _ in _resources(stacks):
        kind, props = res.get("Type"), res.get("Properties") or {}
        if kind == "AWS::SageMaker::Cluster":
            sizes.update({str(g.get("InstanceGroupName")): int(g.get("InstanceCount") or 0) for g in props.get("InstanceGroups") or []})
        elif kind == "AWS::AutoScaling::AutoScalingGroup" and (name := auto_scaling_group_name(lid, names)):
            sizes[name] = int(props.get("MaxSize") or 0)
        elif kind == "AWS::EKS::Nodegroup" and (name := inference.get(str(props.get("NodegroupName")))):
            sizes[name] = int((props.get("ScalingConfig") or {}).get("MaxSize") or 0)
        elif kind == KUBERNETES_MANIFEST:
            pool_names = set(inference.values())
            sizes.update({p.name: p.nodes for p in _node_pools(props.get("Manifest")) if p.name in pool_names and p.nodes is not None})
    return sizes


def disagreements(cfg: EnvironmentConfig, stacks: list[StackTemplate]) -> list[str]:
    """Where a cloud assembly and the config disagree (a cdk.out synthesized before the config changed): the
    region, and each group's count (max_size for an inference group). One line each, naming both values."""
    lines = []
    stale = "the templates and the config disagree"
    again = "(synthesize again)"
    for region in sorted(_stack_regions(stacks) - {cfg.region}):
        lines.append(f"{stale}: region {region} in the templates, {cfg.region} in the config {again}")
    sizes = _template_sizes(cfg, stacks)
    configured = [(g.name, "count", g.count) for g in cfg.compute.instance_groups]
    configured += [(g.name, "max_size", g.max_size) for g in cfg.compute.inference_node_groups]
    for name, what, value in configured:
        if name in sizes and sizes[name] != value:
            lines.append(f"{stale}: group {name} {what} {sizes[name]} in the templates, {value} in the config {again}")
    groups = {g.name: g for g in cfg.compute.instance_groups}
    for stack in stacks:
        for lid, (out, scale_in, _) in block_schedules(stack.template).items():
            group = groups.get(auto_scaling_group_name(lid, list(groups)) or "")
            if group is None or group.capacity.type != "capacity-block":
                continue
            cap = group.capacity
            then = (out, block_end(scale_in, cap.drain))
            if (cap.starts_at, cap.ends_at) != then:
                configured_window = f"{_when(cap.starts_at)} to {_when(cap.ends_at)}" if cap.starts_at and cap.ends_at else "no window"
                lines.append(
                    f"{stale}: group {group.name} Capacity Block window {_when(then[0])} to {_when(then[1])} in the templates, "
                    f"{configured_window} in the config {again}"
                )
    inference = {cfg.physical_name(g.name): g for g in cfg.compute.inference_node_groups}
    for _, res, _ in _resources(stacks):
        props = res.get("Properties") or {}
        start = BLOCK_START_AT.match(str(props.get("ScheduleExpression", "")))
        named = BLOCK_START_DESCRIPTION.match(str(props.get("Description", "")))
        if res.get("Type") != "AWS::Scheduler::Schedule" or not start or not named or named.group(1) not in inference:
            continue
        node_group = inference[named.group(1)]
        begins = datetime.fromisoformat(start.group(1)).replace(tzinfo=UTC)  # at(...) in UTC (ScheduleExpressionTimezone UTC)
        if node_group.capacity.type == "capacity-block" and node_group.capacity.starts_at != begins:
            configured_start = _when(node_group.capacity.starts_at) if node_group.capacity.starts_at else "no start"
            lines.append(
                f"{stale}: group {node_group.name} Capacity Block start {_when(begins)} in the templates, "
                f"{configured_start} in the config {again}"
            )
    return lines


def _when(moment: datetime | None) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}" if moment else "-"


def _money(value: float | None) -> str:
    return "price unknown" if value is None else f"${value:,.2f}"


def _unit_money(value: float) -> str:
    """A unit price as money, like the totals: two decimals and thousands separators; a rate below a
    dollar keeps up to four decimals (NAT's $0.045/hour)."""
    if value >= 1 or round(value, 2) == value:
        return f"${value:,.2f}"
    return "$" + f"{value:.4f}".rstrip("0")


def render(est: Estimate) -> str:
    rows = []
    for i in est.items:
        unit_price = (
            "price unknown"
            if i.usd_each is None and i.source.startswith("price unknown")
            else (f"{_unit_money(i.usd_each)}/{i.unit}" if i.usd_each is not None else "-")
        )
        rows.append(
            [
                i.kind,
                i.name,
                unit_price,
                _money(i.per_hour) if i.kind != UPFRONT else "-",
                _money(i.per_month) if i.kind != UPFRONT else _money(i.quantity * i.usd_each if i.usd_each is not None else None),
            ]
        )
    s = est.summary()
    bound = "at least " if est.unknown else ""
    prepaid_note = (
        f"; the {est.prepaid_gpus} GPUs of Capacity Blocks and training plans are left out: their fees are paid up front"
        if est.prepaid_gpus
        else ""
    )
    lines = [
        f"cost of {est.environment} ({est.region}), {'live prices (AWS Price List API)' if est.live else 'prices from fminfra/ops/pricing/prices.yaml'}; {est.hours_per_month:g} h a month",
        *est.notes,
        format_table(["kind", "item", "unit price", "$/hour", "$/month (or window)"], rows),
        f"per hour while running: {bound}${s['per_hour_running']:,.2f}; per month: {bound}${s['per_month']:,.2f}"
        + (f"; per GPU-hour: ${s['per_gpu_hour']:,.2f} ({est.gpus} GPUs{prepaid_note})" if s["per_gpu_hour"] is not None else "")
        + (f"; per GPU-hour: unknown until every price is known ({est.gpus} GPUs)" if est.gpus and est.unknown else ""),
        f"bills while idle (reserved and fixed): {bound}${s['idle_per_month']:,.2f} a month; paid up front: {bound}${s['paid_up_front']:,.2f}",
    ]
    pools = [i for i in est.items if i.karpenter_pool]
    if pools:
        known = "" if all(i.per_hour is not None for i in pools) else "at least "
        lines.append(
            f"Karpenter pools ({', '.join(i.name.split(':', 1)[0] for i in pools)}): $0 while idle; at their maximum "
            f"{known}${sum(i.per_hour or 0 for i in pools):,.2f} an hour, {known}${sum(i.per_month or 0 for i in pools):,.2f} a month "
            "(in the running figures above)"
        )
    if est.unknown:
        lines.append(f"{len(est.unknown)} item(s) have no known price and are not in the totals: the totals are a lower bound (try --live)")
        lines.extend(f"{i.name}: {i.source}" for i in est.unknown)
    assumptions = sorted({i.assumption for i in est.items if i.assumption})
    lines.extend(f"assumption: {a}" for a in assumptions)
    return "\n".join(lines)


def markdown(after: Estimate, before: Estimate | None) -> str:
    """A Markdown block for a pull request's job summary: monthly cost before -> after, known items only."""
    a = after.summary()
    lines = [f"#### Cost of {after.environment} ({after.region})", "", "| | before | after |", "|---|---|---|"]
    b = before.summary() if before is not None else None

    def cell(est: Estimate | None, s: dict[str, Any] | None, key: str) -> str:
        if est is None or s is None or s[key] is None:
            return "-"
        fees = [i for i in est.items if i.kind == UPFRONT]
        if key == "paid_up_front" and fees and all(i.usd_each is None for i in fees):
            return "unknown"  # not $0.00: every fee is unknown
        return f"${s[key]:,.2f}"

    def row(label: str, key: str) -> str:
        return f"| {label} | {cell(before, b, key)} | {cell(after, a, key)} |"

    lines += [row("per month", "per_month"), row("per hour while running", "per_hour_running"), row("paid up front", "paid_up_front")]
    unknown = a["items_price_unknown"]
    if unknown:
        lines += ["", f"{unknown} item(s) have no sourced price and are not in these figures (a lower bound; `fminfra cost --live`)."]
    notes = [*after.notes, *(before.notes if before is not None else [])]
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def command(ns: argparse.Namespace) -> int:
    (_, cfg), *_ = load_configs([ns.config])
    client = ec2 = None
    if ns.live:
        from fminfra.ops.aws import client as aws_client
        from fminfra.ops.aws import make_session

        endpoint = cfg.region if cfg.region in PRICE_LIST_REGIONS else PRICE_LIST_REGIONS[0]
        client = aws_client(make_session(region=endpoint), "pricing")
        ec2 = aws_client(make_session(region=cfg.region), "ec2")
    book = PriceBook(cfg.region, pricing_client=client)
    options = {
        "book": book,
        "hours_per_month": ns.hours_per_month,
        "grafana_users": (ns.grafana_editors, ns.grafana_viewers),
        "amp_samples": ns.amp_samples_per_second,
    }
    est = estimate(cfg, Path(ns.outdir), ec2=ec2, **options)  # type: ignore[arg-type]
    before = estimate(cfg, Path(ns.baseline), ec2=ec2, baseline=True, **options) if ns.baseline else None  # type: ignore[arg-type]
    if ns.json:
        data: dict[str, Any] = {
            "environment": est.environment,
            "region": est.region,
            "summary": est.summary(),
            "items": [asdict(i) for i in est.items],
            "notes": est.notes,
        }
        if before is not None:
            data["before"] = {**before.summary(), "notes": before.notes}
        print(json.dumps(data, indent=2))
    elif ns.markdown:
        print(markdown(est, before), end="")
    else:
        print(render(est))
        if before is not None:
            for note in before.notes:
                print(note)
            print(f"per month before -> after: ${before.summary()['per_month']:,.2f} -> ${est.summary()['per_month']:,.2f} (known prices)")
    return EXIT_OK
