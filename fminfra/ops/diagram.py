"""`diagram ENV`: an architecture picture of one environment, drawn from its synthesized templates.

What it shows: the VPC and its AZs by AZ ID with their subnets, the EFA security group, placement
groups, each capacity source (ODCR, Capacity Block, training plan), GPU groups as count x type,
the FSx file system and its S3 links, HyperPod and EKS, AMP, AMG and what feeds them. Groups, not
nodes: a 1,000-node environment draws like a 10-node one.

Formats: Mermaid (a flowchart, which GitHub renders in Markdown; `tests/ops/test_diagram.py` parses it
with mermaid's own parser) and SVG, drawn here without a layout engine (boxes in AZ columns), with
PNG converted from the SVG by cairosvg when it is installed. Graphviz would need a system package
and mermaid's renderer a browser; neither is needed to read the result.
"""

from __future__ import annotations

import argparse
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fminfra.capacity.rules import RESERVATION_TYPES
from fminfra.config import EnvironmentConfig
from fminfra.core.assembly import StackTemplate, auto_scaling_group_name, environment_stacks, launch_template_instance_type
from fminfra.ops.common import EXIT_OK, UsageError, load_configs, write_output


@dataclass
class Box:
    """One thing in the picture."""

    id: str
    label: str
    zone: str  # an AZ ID, "vpc" (in the VPC, no single AZ), or "region" (outside the VPC)
    shape: str = "box"  # box | store


@dataclass
class Picture:
    title: str
    vpc_label: str
    az_ids: list[str]
    compute_az: str
    boxes: list[Box] = field(default_factory=list)
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (from, to, label)

    def add(self, box: Box) -> Box:
        self.boxes.append(box)
        return box

    def has(self, box_id: str) -> bool:
        return any(b.id == box_id for b in self.boxes)


def _literal_tail(value: Any) -> str:
    """The literal end of a string or Fn::Join (an S3 path's prefix), for labels."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        parts = value["Fn::Join"][1]
        return str(parts[-1]) if parts and isinstance(parts[-1], str) else ""
    return ""


def build(cfg: EnvironmentConfig, stacks: list[StackTemplate]) -> Picture:
    """The picture's boxes and edges, from the templates (names and counts) and the config (AZs)."""
    pic = Picture(
        title=f"fminfra {cfg.name} ({cfg.account}, {cfg.region})",
        vpc_label=f"VPC {cfg.network.cidr}",
        az_ids=list(cfg.network.az_ids),
        compute_az=cfg.network.compute_az_id,
    )
    resources = [(lid, r.get("Type"), r.get("Properties") or {}) for s in stacks for lid, r in (s.template.get("Resources") or {}).items()]
    subnets: dict[str, list[str]] = {}
    for lid, kind, props in resources:
        if kind == "AWS::EC2::Subnet" and isinstance(props.get("AvailabilityZoneId"), str):
            access = "public" if "Public" in lid else "private"
            subnets.setdefault(props["AvailabilityZoneId"], []).append(f"{access} {props.get('CidrBlock')}")
    for az in pic.az_ids:
        label = "subnets: " + ", ".join(sorted(subnets.get(az, []))) if subnets.get(az) else "no subnet"
        pic.add(Box(f"subnets_{_id(az)}", label, az))
    nat = sum(1 for _, kind, _ in resources if kind == "AWS::EC2::NatGateway")
    endpoints = sum(1 for _, kind, p in resources if kind == "AWS::EC2::VPCEndpoint")
    pic.add(Box("network", f"{nat} NAT gateway(s), {endpoints} VPC endpoints, flow logs", "vpc"))
    if any(kind == "AWS::EC2::SecurityGroup" and str(p.get("GroupDescription", "")).startswith("EFA") for _, kind, p in resources):
        pic.add(Box("efa_sg", "EFA security group (all traffic within)", "vpc"))
    placement = [lid for lid, kind, _ in resources if kind == "AWS::EC2::PlacementGroup"]
    if placement:
        pic.add(Box("placement", f"{len(placement)} cluster placement group(s)", pic.compute_az))

    # Capacity sources and GPU groups.
    for lid, kind, props in resources:
        if kind in RESERVATION_TYPES:
            box = pic.add(Box(f"odcr_{_id(lid)}", f"ODCR {props.get('InstanceCount')} x {props.get('InstanceType')}", pic.compute_az))
            _ = box
    groups_by_name = {g.name: g for g in cfg.compute.instance_groups}
    cluster_id = None
    for lid, kind, props in resources:
        if kind == "AWS::SageMaker::Cluster":
            orchestrator = "EKS" if (props.get("Orchestrator") or {}).get("Eks") else "Slurm"
            cluster_id = "hyperpod"
            pic.add(Box(cluster_id, f"SageMaker HyperPod ({orchestrator}) {props.get('ClusterName', '')}", "region"))
            for g in props.get("InstanceGroups") or []:
                gid = f"group_{_id(g['InstanceGroupName'])}"
                pic.add(Box(gid, f"{g['InstanceGroupName']}: {g.get('InstanceCount')} x {g.get('InstanceType')}", pic.compute_az))
                pic.edges.append((cluster_id, gid, "runs"))
                if g.get("TrainingPlanArn"):
                    plan = f"plan_{_id(g['InstanceGroupName'])}"
                    pic.add(Box(plan, "SageMaker training plan", "region"))
                    pic.edges.append((plan, gid, "capacity"))
        elif kind == "AWS::AutoScaling::AutoScalingGroup":
            name = auto_scaling_group_name(lid, groups_by_name) or lid
            group = groups_by_name.get(name)
            gid = f"group_{_id(name)}"
            count = group.count if group else props.get("MaxSize")
            itype = group.instance_type if group else "?"
            pic.add(Box(gid, f"{name}: {count} x {itype} (Auto Scaling group)", pic.compute_az))
            if group is not None and group.capacity.type == "capacity-block":
                block = f"block_{_id(name)}"
                pic.add(
                    Box(block, f"Capacity Block {group.capacity.starts_at:%Y-%m-%d} to {group.capacity.ends_at:%Y-%m-%d}", pic.compute_az)
                )
                pic.edges.append((block, gid, "capacity"))
            elif group is not None and group.capacity.type == "odcr":
                for b in [b for b in pic.boxes if b.id.startswith("odcr_")]:
                    pic.edges.append((b.id, gid, "capacity"))
        elif kind == "AWS::EKS::Cluster":
            pic.add(Box("eks", f"EKS {props.get('Name', '')} (Kubernetes {props.get('Version')})", "region"))
        elif kind == "AWS::EKS::Nodegroup":
            scaling = props.get("ScalingConfig") or {}
            gid = f"nodegroup_{_id(lid)}"
            template = next(s.template for s in stacks if lid in (s.template.get("Resources") or {}))
            types = ", ".join(props.get("InstanceTypes") or [launch_template_instance_type(template, props.get("LaunchTemplate")) or "?"])
            label = f"{props.get('NodegroupName') or lid}: {scaling.get('MinSize')}-{scaling.get('DesiredSize')}-{scaling.get('MaxSize')} x {types}"
            pic.add(Box(gid, label, pic.compute_az))
    if pic.has("eks"):
        for b in pic.boxes:
            if b.id.startswith("nodegroup_"):
                pic.edges.append(("eks", b.id, "schedules"))
        if pic.has("hyperpod"):
            pic.edges.append(("hyperpod", "eks", "orchestrated by"))

    # Storage.
    for lid, kind, props in resources:
        if kind == "AWS::FSx::FileSystem":
            lustre = props.get("LustreConfiguration") or {}
            efa = ", EFA" if lustre.get("EfaEnabled") else ""
            tier = lustre.get("PerUnitStorageThroughput")
            label = (
                f"FSx for Lustre {props.get('StorageCapacity')} GiB {str(lustre.get('DeploymentType', '')).lower()}"
                + (f" {tier} MB/s/TiB" if tier else "")
                + efa
            )
            pic.add(Box("fsx", label, pic.compute_az, "store"))
        elif kind == "AWS::S3::Bucket" and not pic.has("bucket") and "AccessLog" not in lid and "Lifecycle" not in lid:
            pic.add(Box("bucket", "S3 data bucket (datasets, checkpoints)", "region", "store"))
    links = [
        (props.get("FileSystemPath"), _literal_tail(props.get("DataRepositoryPath")))
        for _, kind, props in resources
        if kind == "AWS::FSx::DataRepositoryAssociation"
    ]
    if links and pic.has("fsx"):
        if not pic.has("bucket"):
            pic.add(Box("bucket", "S3 data bucket", "region", "store"))
        label = "; ".join(f"{path} = s3 {prefix.strip('/')}/" for path, prefix in links)
        pic.edges.append(("fsx", "bucket", label))
    for b in list(pic.boxes):
        if pic.has("fsx") and (b.id.startswith("group_") or b.id.startswith("nodegroup_")):
            pic.edges.append((b.id, "fsx", "mounts"))

    # Observability.
    kinds = {kind for _, kind, _ in resources}
    if "AWS::APS::Workspace" in kinds:
        pic.add(Box("amp", "Amazon Managed Prometheus (rules, alert manager)", "region", "store"))
        for b in pic.boxes:
            if b.id.startswith("group_") and cfg.compute.orchestrator in ("slurm", "ec2"):
                pic.edges.append((b.id, "amp", "remote write"))
        if "AWS::APS::Scraper" in kinds and pic.has("eks"):
            pic.edges.append(("eks", "amp", "managed scraper"))
    if "AWS::SNS::Topic" in kinds and pic.has("amp"):
        pic.add(Box("alerts", "SNS alert topic", "region"))
        pic.edges.append(("amp", "alerts", "alerts"))
    if "AWS::Grafana::Workspace" in kinds:
        pic.add(Box("grafana", "Amazon Managed Grafana", "region"))
        if pic.has("amp"):
            pic.edges.append(("grafana", "amp", "queries"))
    return pic


def _id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


# ------------------------------------------------------------------------------------------ Mermaid


def _mermaid_label(text: str) -> str:
    return text.replace('"', "'").replace("#", "no. ")


def mermaid(pic: Picture) -> str:
    """A Mermaid flowchart: subgraphs for the VPC and each AZ, stores drawn as cylinders."""
    lines = ["flowchart LR", f'  title_["{_mermaid_label(pic.title)}"]:::title']

    def node(b: Box) -> str:
        label = _mermaid_label(b.label)
        return f'{b.id}[("{label}")]' if b.shape == "store" else f'{b.id}["{label}"]'

    lines.append(f'  subgraph vpc["{_mermaid_label(pic.vpc_label)}"]')
    for b in pic.boxes:
        if b.zone == "vpc":
            lines.append(f"    {node(b)}")
    for az in pic.az_ids:
        suffix = " (compute AZ)" if az == pic.compute_az else ""
        lines.append(f'    subgraph az_{_id(az)}["{az}{suffix}"]')
        lines.extend(f"      {node(b)}" for b in pic.boxes if b.zone == az)
        lines.append("    end")
    lines.append("  end")
    lines.extend(f"  {node(b)}" for b in pic.boxes if b.zone == "region")
    for source, target, label in pic.edges:
        lines.append(f'  {source} -->|"{_mermaid_label(label)}"| {target}')
    lines.append("  classDef title fill:none,stroke:none,font-weight:bold")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ SVG

CHAR_W, LINE_H, PAD, BOX_W = 7.0, 18, 12, 300


def _wrap(text: str, width: int = int((BOX_W - 2 * PAD) / CHAR_W)) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line] if line else lines


def svg(pic: Picture) -> str:
    """The picture as SVG: the VPC box with one column per AZ, the regional services in a row below."""
    positions: dict[str, tuple[float, float, float, float]] = {}
    parts: list[str] = []

    def draw(b: Box, x: float, y: float) -> float:
        lines = _wrap(b.label)
        h = PAD * 2 + LINE_H * len(lines)
        rx = 18 if b.shape == "store" else 4
        fill = "#e8f1fb" if b.shape == "store" else "#ffffff"
        parts.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{h}" rx="{rx}" fill="{fill}" stroke="#3b5b7a"/>')
        for i, line in enumerate(lines):
            parts.append(f'<text x="{x + PAD}" y="{y + PAD + LINE_H * (i + 0.8)}">{html.escape(line)}</text>')
        positions[b.id] = (x, y, BOX_W, h)
        return h

    margin, gap = 30, 16
    columns = pic.az_ids
    top = margin + 40
    in_vpc = [b for b in pic.boxes if b.zone == "vpc"]
    y: float = top + 30
    for b in in_vpc:
        y += draw(b, margin + 20, y) + gap
    column_top = y + 10
    bottom = column_top
    for i, az in enumerate(columns):
        x = margin + 20 + i * (BOX_W + 40)
        yy: float = column_top + 30
        for b in [b for b in pic.boxes if b.zone == az]:
            yy += draw(b, x + 10, yy) + gap
        parts.insert(
            0,
            f'<rect x="{x}" y="{column_top}" width="{BOX_W + 20}" height="{{h_{_id(az)}}}" fill="#f6f8f2" stroke="#8aa05a" stroke-dasharray="6 3"/>',
        )
        parts.insert(
            1,
            f'<text x="{x + 8}" y="{column_top + 20}" font-weight="bold">{html.escape(az)}{" (compute AZ)" if az == pic.compute_az else ""}</text>',
        )
        parts[0] = parts[0].replace(f"{{h_{_id(az)}}}", str(yy - column_top))
        bottom = max(bottom, yy)
    vpc_w = max(len(columns), 1) * (BOX_W + 40) + 20
    parts.insert(0, f'<rect x="{margin}" y="{top}" width="{vpc_w}" height="{bottom - top + 10}" fill="#fbfbfb" stroke="#555"/>')
    parts.insert(1, f'<text x="{margin + 10}" y="{top + 20}" font-weight="bold">{html.escape(pic.vpc_label)}</text>')
    row_y: float = bottom + 60
    regional = [b for b in pic.boxes if b.zone == "region"]
    per_row = max(len(columns), 2)
    row_h = 0.0
    for i, b in enumerate(regional):
        if i and i % per_row == 0:
            row_y += row_h + gap
            row_h = 0.0
        row_h = max(row_h, draw(b, margin + 20 + (i % per_row) * (BOX_W + 40), row_y))
    height = row_y + row_h + margin
    width = margin * 2 + vpc_w + 160  # room for edge labels past the VPC box
    lines_svg: list[str] = []
    labels_svg: list[str] = []
    for source, target, label in pic.edges:
        if source not in positions or target not in positions:
            continue
        (ax, ay), (bx, by) = _anchors(positions[source], positions[target])
        lines_svg.append(f'<line x1="{ax}" y1="{ay}" x2="{bx}" y2="{by}" stroke="#c0504d" stroke-width="1.5" marker-end="url(#arrow)"/>')
        lx, ly = ax + (bx - ax) * 0.35, ay + (by - ay) * 0.35
        text = label[:70]
        labels_svg.append(f'<rect x="{lx + 2}" y="{ly - 15}" width="{len(text) * 6.3 + 4:.0f}" height="14" fill="white" opacity="0.85"/>')
        labels_svg.append(f'<text x="{lx + 4}" y="{ly - 4}" fill="#a03030" font-size="11">{html.escape(text)}</text>')
    containers = [q for q in parts if "stroke-dasharray" in q or 'stroke="#555"' in q or 'font-weight="bold"' in q]
    boxes = [q for q in parts if q not in containers]
    parts = [*containers, *lines_svg, *boxes, *labels_svg]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#c0504d"/></marker></defs>'
        f'<rect width="100%" height="100%" fill="white"/><text x="{margin}" y="{margin + 10}" font-size="16" font-weight="bold">{html.escape(pic.title)}</text>'
    )
    return head + "".join(parts) + "</svg>\n"


def _anchors(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> tuple[tuple[float, float], tuple[float, float]]:
    """Where a line between two boxes leaves the first and meets the second: facing sides' midpoints."""
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    if by >= ay + ah:  # b below a
        return (ax + aw / 2, ay + ah), (bx + bw / 2, by)
    if by + bh <= ay:  # b above a
        return (ax + aw / 2, ay), (bx + bw / 2, by + bh)
    if bx >= ax + aw:  # b right of a
        return (ax + aw, ay + ah / 2), (bx, by + bh / 2)
    return (ax, ay + ah / 2), (bx + bw, by + bh / 2)


def png(svg_text: str) -> bytes:
    try:
        import cairosvg  # type: ignore[import-not-found]
    except ImportError:
        raise UsageError("--format png needs cairosvg (pip install cairosvg, and the cairo library); SVG needs nothing") from None
    return bytes(cairosvg.svg2png(bytestring=svg_text.encode("utf-8")))


# ------------------------------------------------------------------------------------------ the command


def picture_of(cfg: EnvironmentConfig, outdir: Path) -> Picture:
    return build(cfg, environment_stacks(outdir, cfg.name))


def command(ns: argparse.Namespace) -> int:
    (_, cfg), *_ = load_configs([ns.config])
    pic = picture_of(cfg, Path(ns.outdir))
    if ns.format == "png":
        if not ns.output:
            raise UsageError("diagram --format png: give --output FILE.png")
        write_output(Path(ns.output), png(svg(pic)))
        return EXIT_OK
    text = mermaid(pic) if ns.format == "mermaid" else svg(pic)
    if ns.output:
        write_output(Path(ns.output), text)
    else:
        print(text, end="")
    return EXIT_OK
