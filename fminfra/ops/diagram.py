"""`diagram ENV`: an architecture picture of one environment, drawn from its synthesized templates.

What it shows: the VPC, its AZs by AZ ID and their subnets, nested (VPC > AZ > subnet); each thing
that runs in a subnet inside it (a group in several subnets beside them, with an edge to each); the
EFA security group, placement groups, each capacity source (ODCR, Capacity Block, training plan), GPU
groups as count x type, Karpenter pools (NodePools in the Kubernetes manifests the templates hold)
as 0..limit x type, the FSx file system and its S3 links, HyperPod and EKS, AMP, AMG and what
feeds them. Groups, not nodes: a 1,000-node environment draws like a 10-node one.

Only edges the templates prove are drawn: each edge carries its proof, the resource and property
that references the other end (`Edge.proof`), and `tests/ops/test_diagram.py` checks every proof
against the templates. Nothing is inferred from the config.

Formats: Mermaid (a flowchart, which GitHub renders in Markdown; the tests parse it with mermaid's
own parser) and SVG or PNG laid out by D2 (`fminfra.ops.diagram_layout`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fminfra.capacity.rules import RESERVATION_TYPES
from fminfra.config import EnvironmentConfig
from fminfra.core.assembly import (
    KUBERNETES_MANIFEST,
    StackTemplate,
    auto_scaling_group_name,
    environment_stacks,
    launch_template_instance_type,
    manifest_objects,
    tokens_in,
)
from fminfra.eks.rules import INSTANCE_TYPE_LABEL, KARPENTER_CAPACITY_TYPE_LABEL, KARPENTER_NODECLASS_API, KARPENTER_NODEPOOL_API
from fminfra.ops import diagram_layout
from fminfra.ops.common import EXIT_OK, UsageError, load_configs, write_output

VPC = "vpc"
REGION = "region"


@dataclass
class Box:
    """One thing in the picture; `zone` is the container it sits in: a subnet's, an AZ's id, VPC, or
    REGION (outside the VPC). `resource` is the logical id of the template resource it stands for."""

    id: str
    label: str
    zone: str
    shape: str = "box"  # box | store
    resource: str = ""


@dataclass(frozen=True)
class Proof:
    """Why an edge is drawn: `holder`'s property `prop` references `target` (logical ids)."""

    holder: str
    prop: str
    target: str


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str
    proof: Proof


@dataclass
class Container:
    """VPC, AZ or subnet: a box that holds others."""

    id: str
    label: str
    parent: str | None  # None: the picture's top level
    resource: str = ""


@dataclass
class Picture:
    title: str
    containers: list[Container] = field(default_factory=list)
    boxes: list[Box] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def add(self, box: Box) -> Box:
        self.boxes.append(box)
        return box

    def has(self, box_id: str) -> bool:
        return any(b.id == box_id for b in self.boxes)

    def box(self, box_id: str) -> Box:
        return next(b for b in self.boxes if b.id == box_id)

    def edge(self, source: str, target: str, label: str, proof: Proof) -> None:
        self.edges.append(Edge(source, target, label, proof))

    def path(self, node: str) -> list[str]:
        """Container ids from the top down to `node` (a box or a container), `node` last."""
        parents = {c.id: c.parent for c in self.containers}
        zone = next((b.zone for b in self.boxes if b.id == node), None)
        chain = [node]
        up = zone if zone is not None else parents.get(node)
        while up and up != REGION:
            chain.insert(0, up)
            up = parents.get(up)
        return chain


# ------------------------------------------------------------------------------------------ references


class References:
    """Which logical ids a template value references: Ref, Fn::GetAtt, and Fn::ImportValue resolved
    through the other stacks' exports (a cross-stack reference is an export and an import)."""

    def __init__(self, stacks: list[StackTemplate]) -> None:
        self.exports: dict[str, set[str]] = {}
        for s in stacks:
            for output in (s.template.get("Outputs") or {}).values():
                name = (output.get("Export") or {}).get("Name")
                if isinstance(name, str):
                    self.exports[name] = self.of(output.get("Value"))

    def of(self, value: Any) -> set[str]:
        found: set[str] = set()
        for kind, arg in _intrinsics(value):
            if kind == "Ref" and isinstance(arg, str):
                found.add(arg)
            elif kind == "Fn::GetAtt":
                found.add(str(arg[0] if isinstance(arg, list) else str(arg).split(".")[0]))
            elif kind == "Fn::ImportValue" and isinstance(arg, str):
                found |= self.exports.get(arg, set())
        return found


def _intrinsics(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, arg in value.items():
            if key in ("Ref", "Fn::GetAtt", "Fn::ImportValue"):
                yield key, arg
            yield from _intrinsics(arg)
    elif isinstance(value, list):
        for item in value:
            yield from _intrinsics(item)


def _literal_tail(value: Any) -> str:
    """The literal end of a string or Fn::Join (an S3 path's prefix), for labels."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        parts = value["Fn::Join"][1]
        return str(parts[-1]) if parts and isinstance(parts[-1], str) else ""
    return ""


def _id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


# ------------------------------------------------------------------------------------------ the picture


def build(cfg: EnvironmentConfig, stacks: list[StackTemplate]) -> Picture:
    """The picture's containers, boxes and edges, from the templates."""
    pic = Picture(title=f"fminfra {cfg.name} ({cfg.account}, {cfg.region})")
    refs = References(stacks)
    resources = {
        lid: (r.get("Type"), r.get("Properties") or {}, s) for s in stacks for lid, r in (s.template.get("Resources") or {}).items()
    }

    def of_type(*kinds: str) -> list[tuple[str, dict[str, Any], StackTemplate]]:
        return [(lid, props, s) for lid, (kind, props, s) in resources.items() if kind in kinds]

    # VPC > AZ > subnet.
    vpc = next((lid for lid, _, _ in of_type("AWS::EC2::VPC")), "")
    cidr = resources[vpc][1].get("CidrBlock") if vpc else cfg.network.cidr
    pic.containers.append(Container(VPC, f"VPC {cidr}", None, vpc))
    az_of_subnet: dict[str, str] = {}
    for lid, props, _ in of_type("AWS::EC2::Subnet"):
        az = props.get("AvailabilityZoneId")
        if isinstance(az, str):
            az_of_subnet[lid] = az
    for az in sorted(set(az_of_subnet.values()), key=lambda a: (a != cfg.network.compute_az_id, a)):
        suffix = " (compute AZ)" if az == cfg.network.compute_az_id else ""
        pic.containers.append(Container(f"az_{_id(az)}", f"{az}{suffix}", VPC))
    # Public: the subnet's route table has a route to an internet gateway.
    to_internet = {
        t
        for _, props, _ in of_type("AWS::EC2::Route")
        if any(resources.get(g, ("",))[0] == "AWS::EC2::InternetGateway" for g in refs.of(props.get("GatewayId")))
        for t in refs.of(props.get("RouteTableId"))
    }
    public = {
        s
        for _, props, _ in of_type("AWS::EC2::SubnetRouteTableAssociation")
        if refs.of(props.get("RouteTableId")) & to_internet
        for s in refs.of(props.get("SubnetId"))
    }
    for lid, az in sorted(az_of_subnet.items()):
        props = resources[lid][1]
        access = "public" if lid in public else "private"
        pic.containers.append(Container(f"subnet_{_id(lid)}", f"{access} subnet {props.get('CidrBlock')}", f"az_{_id(az)}", lid))
    subnet_box = {c.resource: c.id for c in pic.containers if c.id.startswith("subnet_")}

    def place(box: Box, holder: str, prop: str, value: Any) -> Box:
        """Puts `box` in the one subnet `value` references, or beside its subnets with an edge to each."""
        subnets = sorted(s for s in refs.of(value) if s in subnet_box)
        box.zone = subnet_box[subnets[0]] if len(subnets) == 1 else (VPC if subnets else box.zone)
        pic.add(box)
        if len(subnets) > 1:
            for subnet in subnets:
                pic.edge(box.id, subnet_box[subnet], "subnet", Proof(holder, prop, subnet))
        return box

    def az_of(gid: str) -> str:
        """Where a capacity source of group `gid` sits: a reservation belongs to an AZ, the AZ of the
        group's one subnet; the VPC when the group spans AZs."""
        zone = pic.box(gid).zone
        return next((c.parent for c in pic.containers if c.id == zone and zone.startswith("subnet_") and c.parent), VPC)

    nat = len(of_type("AWS::EC2::NatGateway"))
    endpoints = len(of_type("AWS::EC2::VPCEndpoint"))
    pic.add(Box("network", f"{nat} NAT gateway(s), {endpoints} VPC endpoints, flow logs", VPC))
    for lid, props, _ in of_type("AWS::EC2::SecurityGroup"):
        if str(props.get("GroupDescription", "")).startswith("EFA"):
            pic.add(Box("efa_sg", "EFA security group (all traffic within)", VPC, resource=lid))
    placement = [lid for lid, _, _ in of_type("AWS::EC2::PlacementGroup")]
    if placement:
        pic.add(Box("placement", f"{len(placement)} cluster placement group(s)", VPC, resource=placement[0]))

    # Capacity reservations this stack creates, in their AZ.
    for lid, props, _ in of_type(*RESERVATION_TYPES):
        az = props.get("AvailabilityZoneId")
        zone = f"az_{_id(az)}" if isinstance(az, str) and f"az_{_id(az)}" in {c.id for c in pic.containers} else VPC
        pic.add(Box(f"odcr_{_id(lid)}", f"ODCR {props.get('InstanceCount')} x {props.get('InstanceType')}", zone, resource=lid))
    odcr_box = {b.resource: b.id for b in pic.boxes if b.id.startswith("odcr_")}

    # Storage and observability first: the groups' edges point at them.
    for lid, props, _ in of_type("AWS::FSx::FileSystem"):
        lustre = props.get("LustreConfiguration") or {}
        tier = lustre.get("PerUnitStorageThroughput")
        label = (
            f"FSx for Lustre {props.get('StorageCapacity')} GiB {str(lustre.get('DeploymentType', '')).lower()}"
            + (f" {tier} MB/s/TiB" if tier else "")
            + (", EFA" if lustre.get("EfaEnabled") else "")
        )
        place(Box("fsx", label, VPC, "store", lid), lid, "SubnetIds", props.get("SubnetIds"))
        break
    fsx = pic.box("fsx").resource if pic.has("fsx") else ""
    for lid, props, _ in of_type("AWS::FSx::DataRepositoryAssociation"):
        if fsx not in refs.of(props.get("FileSystemId")):
            continue
        bucket = next(iter(refs.of(props.get("DataRepositoryPath"))), "")
        if bucket and not pic.has("bucket"):
            pic.add(Box("bucket", "S3 data bucket (datasets, checkpoints)", REGION, "store", bucket))
        if bucket:
            prefix = _literal_tail(props.get("DataRepositoryPath")).strip("/")
            pic.edge("fsx", "bucket", f"{props.get('FileSystemPath')} = s3 {prefix}/", Proof(lid, "DataRepositoryPath", bucket))
    amp = next((lid for lid, _, _ in of_type("AWS::APS::Workspace")), "")
    if amp:
        pic.add(Box("amp", "Amazon Managed Prometheus (rules, alert manager)", REGION, "store", amp))
        definition = resources[amp][1].get("AlertManagerDefinition")
        for topic in sorted(t for t in refs.of(definition) if resources.get(t, ("",))[0] == "AWS::SNS::Topic"):
            pic.add(Box("alerts", "SNS alert topic", REGION, resource=topic))
            pic.edge("amp", "alerts", "alerts", Proof(amp, "AlertManagerDefinition", topic))
            break
    for lid, props, _ in of_type("AWS::Grafana::Workspace"):
        pic.add(Box("grafana", "Amazon Managed Grafana", REGION, resource=lid))
        if amp and "PROMETHEUS" in (props.get("DataSources") or []):
            pic.edge("grafana", "amp", "queries", Proof(lid, "DataSources", "PROMETHEUS"))
        break

    # Lifecycle script deployments by the key prefix HyperPod reads them from, and what they reference.
    lifecycle = {
        str(props.get("DestinationBucketKeyPrefix")): (lid, refs.of(props.get("SourceMarkers")))
        for lid, props, _ in of_type("Custom::CDKBucketDeployment")
        if isinstance(props.get("DestinationBucketKeyPrefix"), str)
    }

    def node_edges(gid: str, holder: str, prop: str, referenced: set[str], *, writes: bool = True) -> None:
        """`mounts` and `remote write` where what the group's nodes get references FSx or AMP (`writes`:
        the nodes run what writes to the workspace, not only receive its URL)."""
        if fsx and fsx in referenced:
            pic.edge(gid, "fsx", "mounts", Proof(holder, prop, fsx))
        if amp and amp in referenced and writes:
            pic.edge(gid, "amp", "remote write", Proof(holder, prop, amp))

    # HyperPod.
    for lid, props, _ in of_type("AWS::SageMaker::Cluster"):
        orchestrator = "EKS" if (props.get("Orchestrator") or {}).get("Eks") else "Slurm"
        pic.add(Box("hyperpod", f"SageMaker HyperPod ({orchestrator}) {props.get('ClusterName', '')}", REGION, resource=lid))
        for i, g in enumerate(props.get("InstanceGroups") or []):
            gid = f"group_{_id(g['InstanceGroupName'])}"
            override = g.get("OverrideVpcConfig")
            subnets_at = f"InstanceGroups[{i}].OverrideVpcConfig.Subnets" if override else "VpcConfig.Subnets"
            box = Box(gid, f"{g['InstanceGroupName']}: {g.get('InstanceCount')} x {g.get('InstanceType')}", VPC, resource=lid)
            place(box, lid, subnets_at, (override or props.get("VpcConfig") or {}).get("Subnets"))
            pic.edge("hyperpod", gid, "runs", Proof(lid, f"InstanceGroups[{i}].InstanceGroupName", g["InstanceGroupName"]))
            if g.get("TrainingPlanArn"):
                plan = f"plan_{_id(g['InstanceGroupName'])}"
                pic.add(Box(plan, "SageMaker training plan", az_of(gid)))
                pic.edge(plan, gid, "capacity", Proof(lid, f"InstanceGroups[{i}].TrainingPlanArn", str(g["TrainingPlanArn"])))
            uri = str((g.get("LifeCycleConfig") or {}).get("SourceS3Uri", ""))
            for prefix, (deployment, referenced) in lifecycle.items():
                if uri.endswith("/" + prefix):
                    # scripts/lifecycle/on_create.sh installs the exporters that remote-write only on
                    # Slurm (workload_manager slurm); on EKS the workspace's URL reaches the nodes unused.
                    node_edges(gid, deployment, "SourceMarkers", referenced, writes=orchestrator == "Slurm")

    # EC2 Auto Scaling groups and EKS node groups, with what their launch templates reference.
    groups_by_name = {g.name: g for g in cfg.compute.instance_groups}
    for lid, props, s in of_type("AWS::AutoScaling::AutoScalingGroup", "AWS::EKS::Nodegroup"):
        template = s.template
        lt_ref = props.get("LaunchTemplate")
        lt = next(iter(refs.of((lt_ref or {}).get("LaunchTemplateId") or (lt_ref or {}).get("Id"))), "")
        data = resources[lt][1].get("LaunchTemplateData") or {} if lt in resources else {}
        if resources[lid][0] == "AWS::AutoScaling::AutoScalingGroup":
            name = auto_scaling_group_name(lid, groups_by_name) or lid
            gid = f"group_{_id(name)}"
            itype = launch_template_instance_type(template, lt_ref) or "?"
            label = f"{name}: {props.get('MaxSize')} x {itype} (Auto Scaling group)"
            place(Box(gid, label, VPC, resource=lid), lid, "VPCZoneIdentifier", props.get("VPCZoneIdentifier"))
        else:
            scaling = props.get("ScalingConfig") or {}
            gid = f"nodegroup_{_id(lid)}"
            types = ", ".join(props.get("InstanceTypes") or [launch_template_instance_type(template, lt_ref) or "?"])
            label = f"{props.get('NodegroupName') or lid}: {scaling.get('MinSize')}-{scaling.get('DesiredSize')}-{scaling.get('MaxSize')} x {types}"
            place(Box(gid, label, VPC, resource=lid), lid, "Subnets", props.get("Subnets"))
        if lt:
            node_edges(gid, lt, "LaunchTemplateData.UserData", refs.of(data.get("UserData")))
        target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
        reservation = target.get("CapacityReservationId")
        reserved = refs.of(target)
        for odcr in sorted(reserved & set(odcr_box)):
            pic.edge(odcr_box[odcr], gid, "capacity", Proof(lt, "LaunchTemplateData.CapacityReservationSpecification", odcr))
        if isinstance(reservation, str):
            block = (data.get("InstanceMarketOptions") or {}).get("MarketType") == "capacity-block"
            bid = f"reservation_{_id(gid)}"
            kind = "Capacity Block" if block else "reservation"
            pic.add(Box(bid, f"{kind} {reservation}", az_of(gid)))
            pic.edge(bid, gid, "capacity", Proof(lt, "LaunchTemplateData.CapacityReservationSpecification", reservation))
        elif target.get("CapacityReservationResourceGroupArn") and not reserved & set(odcr_box):
            bid = f"reservation_{_id(gid)}"
            pic.add(Box(bid, "capacity reservation group", az_of(gid), resource=next(iter(reserved), "")))
            pic.edge(bid, gid, "capacity", Proof(lt, "LaunchTemplateData.CapacityReservationSpecification", next(iter(reserved), "")))

    def karpenter_pools(mid: str, mprops: dict[str, Any]) -> list[str]:
        """The Karpenter NodePools a manifest resource declares, drawn where their EC2NodeClass's
        subnets (`subnetSelectorTerms` by id) are, with the reservations its
        `capacityReservationSelectorTerms` name; their box ids."""
        objects, tokens = manifest_objects(mprops.get("Manifest"))
        classes = {
            (o.get("metadata") or {}).get("name"): o.get("spec") or {}
            for o in objects
            if o.get("apiVersion") == KARPENTER_NODECLASS_API and o.get("kind") == "EC2NodeClass"
        }
        drawn = []
        for o in objects:
            if o.get("apiVersion") != KARPENTER_NODEPOOL_API or o.get("kind") != "NodePool":
                continue
            name = str((o.get("metadata") or {}).get("name"))
            spec = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
            wants = {r.get("key"): r.get("values") or [] for r in spec.get("requirements") or [] if r.get("operator") == "In"}
            itype = ", ".join(wants.get(INSTANCE_TYPE_LABEL) or ["?"])
            kinds = ", ".join(wants.get(KARPENTER_CAPACITY_TYPE_LABEL) or ["?"])
            nodes = ((o.get("spec") or {}).get("limits") or {}).get("nodes", "?")
            node_class = classes.get((spec.get("nodeClassRef") or {}).get("name")) or {}
            subnets = tokens_in([t.get("id") for t in node_class.get("subnetSelectorTerms") or []], tokens)
            pid = f"pool_{_id(name)}"
            label = f"{name}: 0..{nodes} x {itype} (Karpenter NodePool: {kinds})"
            place(Box(pid, label, VPC, resource=mid), mid, "Manifest", subnets)
            drawn.append(pid)
            # An id selects an ODCR or a Capacity Block alike; the manifest does not say which
            # (docs/facts/karpenter.md#karpenter-reserved-capacity), so the box says "reservation".
            for term in node_class.get("capacityReservationSelectorTerms") or []:
                reservation = term.get("id")
                if isinstance(reservation, str) and not tokens_in(reservation, tokens):
                    bid = f"reservation_{_id(pid)}_{_id(reservation)}"
                    pic.add(Box(bid, f"reservation {reservation}", az_of(pid)))
                    pic.edge(bid, pid, "capacity", Proof(mid, "Manifest", reservation))
        return drawn

    # EKS.
    for lid, props, _ in of_type("AWS::EKS::Cluster"):
        pic.add(Box("eks", f"EKS {props.get('Name', '')} (Kubernetes {props.get('Version')})", REGION, resource=lid))
        for nid, nprops, _ in of_type("AWS::EKS::Nodegroup"):
            if lid in refs.of(nprops.get("ClusterName")):
                pic.edge("eks", f"nodegroup_{_id(nid)}", "schedules", Proof(nid, "ClusterName", lid))
        for mid, mprops, _ in of_type(KUBERNETES_MANIFEST):
            if lid in refs.of(mprops.get("ClusterName")):
                for pool in karpenter_pools(mid, mprops):
                    pic.edge("eks", pool, "schedules", Proof(mid, "ClusterName", lid))
        for hid, hprops, _ in of_type("AWS::SageMaker::Cluster"):
            if lid in refs.of(hprops.get("Orchestrator")):
                pic.edge("hyperpod", "eks", "orchestrated by", Proof(hid, "Orchestrator.Eks.ClusterArn", lid))
        for sid, sprops, _ in of_type("AWS::APS::Scraper"):
            if lid in refs.of(sprops.get("Source")) and amp in refs.of(sprops.get("Destination")):
                pic.edge("eks", "amp", "managed scraper", Proof(sid, "Source.EksConfiguration.ClusterArn", lid))
    return pic


# ------------------------------------------------------------------------------------------ Mermaid


def _mermaid_label(text: str) -> str:
    return text.replace('"', "'").replace("#", "no. ")


def mermaid(pic: Picture) -> str:
    """A Mermaid flowchart: nested subgraphs for the VPC, each AZ and each subnet, stores as cylinders."""
    lines = ["flowchart LR", f'  title_["{_mermaid_label(pic.title)}"]:::title']

    def node(b: Box) -> str:
        label = _mermaid_label(b.label)
        return f'{b.id}[("{label}")]' if b.shape == "store" else f'{b.id}["{label}"]'

    def container(c: Container, indent: str) -> None:
        lines.append(f'{indent}subgraph {c.id}["{_mermaid_label(c.label)}"]')
        lines.extend(f"{indent}  {node(b)}" for b in pic.boxes if b.zone == c.id)
        for child in pic.containers:
            if child.parent == c.id:
                container(child, indent + "  ")
        lines.append(f"{indent}end")

    for c in pic.containers:
        if c.parent is None:
            container(c, "  ")
    lines.extend(f"  {node(b)}" for b in pic.boxes if b.zone == REGION)
    for e in pic.edges:
        lines.append(f'  {e.source} -->|"{_mermaid_label(e.label)}"| {e.target}')
    lines.append("  classDef title fill:none,stroke:none,font-weight:bold")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ D2


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', "'") + '"'


def d2_id(pic: Picture, node: str) -> str:
    return ".".join(pic.path(node))


def d2_source(pic: Picture) -> str:
    """The picture in D2's language: containers nested, stores as cylinders, edges with labels."""
    lines = ["direction: right", f"title: {_quote(pic.title)} {{shape: text; near: top-center; style.bold: true}}"]

    def block(container: str | None, indent: str) -> None:
        for c in pic.containers:
            if c.parent == container:
                lines.append(f"{indent}{c.id}: {_quote(c.label)} {{")
                block(c.id, indent + "  ")
                lines.append(f"{indent}}}")
        zone = container if container is not None else REGION
        for b in pic.boxes:
            if b.zone == zone:
                shape = " {shape: cylinder}" if b.shape == "store" else ""
                lines.append(f"{indent}{b.id}: {_quote(b.label)}{shape}")

    block(None, "")
    for e in pic.edges:
        lines.append(f"{d2_id(pic, e.source)} -> {d2_id(pic, e.target)}: {_quote(e.label)}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ the command


def picture_of(cfg: EnvironmentConfig, outdir: Path) -> Picture:
    return build(cfg, environment_stacks(outdir, cfg.name))


def command(ns: argparse.Namespace) -> int:
    (_, cfg), *_ = load_configs([ns.config])
    pic = picture_of(cfg, Path(ns.outdir))
    if ns.format == "mermaid":
        text = mermaid(pic)
        if ns.output:
            write_output(Path(ns.output), text)
        else:
            print(text, end="")
        return EXIT_OK
    if ns.format == "png" and not ns.output:
        raise UsageError("diagram --format png: give --output FILE.png")
    data = diagram_layout.render(d2_source(pic), ns.format)
    if ns.output:
        write_output(Path(ns.output), data)
    else:
        print(data.decode("utf-8"), end="")
    return EXIT_OK
