"""Where an acceptance job's nodes landed in the network, and how that reads in the table and the report.

A placement is, per node, the domain it sits in at each level of the network, coarsest level first:
on Kubernetes the node's `topology.k8s.aws/network-node-layer-N` labels (docs/facts/eks.md#network-node-layer-labels),
on Slurm the switches `scontrol show topology NODE` prints above the node (docs/facts/jobs.md#slurm-show-topology).
`spans` counts the distinct domains the nodes cover at each level; `label` says it in one phrase
("inside one layer-3 domain", "across 2 layer-3 domains, inside one layer-2 domain"), which the NCCL
check carries next to its bus bandwidth. Standard library only (the package runs on the login node)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import Check


@dataclass(frozen=True)
class Level:
    key: str  # the label (Kubernetes) or the switch level (Slurm) the domains are read from
    noun: str  # one domain at this level: "layer-3 domain", "leaf switch"
    nouns: str  # several: "layer-3 domains", "leaf switches"


@dataclass
class Placement:
    levels: tuple[Level, ...]  # coarsest first
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> level key -> domain
    unknown: str = ""  # why the placement could not be read (empty when it was)
    absent: str = "no network topology"  # what the label says when there are no levels: why there is nothing to read

    def spans(self) -> dict[str, int]:
        """Distinct domains per level over the nodes; a node without a domain at a level counts as its own."""
        out = {}
        for level in self.levels:
            out[level.key] = len({where.get(level.key) or f"?{node}" for node, where in self.nodes.items()})
        return out

    def missing(self) -> list[str]:
        return sorted(node for node, where in self.nodes.items() if any(not where.get(lv.key) for lv in self.levels))

    def label(self) -> str:
        if self.unknown:
            return f"placement unknown ({self.unknown})"
        if not self.levels:
            return self.absent
        spans = self.spans()
        finest = self.levels[-1]
        if spans[finest.key] == 1:
            return f"inside one {finest.noun}"
        text = f"across {spans[finest.key]} {finest.nouns}"
        inside = [lv for lv in self.levels if spans[lv.key] == 1]
        return f"{text}, inside one {inside[-1].noun}" if inside else text

    def to_json(self) -> dict[str, object]:
        return {
            "label": self.label(),
            "levels": [lv.key for lv in self.levels],
            "spans": self.spans() if not self.unknown else {},
            "nodes": self.nodes,
            **({"unknown": self.unknown} if self.unknown else {}),
        }


def placement_check(kind: str, group: str, placement: Placement, asked: str) -> Check:
    """The table's row for a job's placement: PASS inside one domain of the finest level (or no topology
    to ask for), WARN when the nodes span several or their placement could not be read: the job ran,
    but its figures are not those of the tightest placement. `asked` says what the job asked for."""
    name = f"placement {kind} {group}"
    label = placement.label()
    if placement.unknown or not placement.levels:
        return Check(name, "WARN" if placement.unknown else "PASS", "-", f"{label}; asked: {asked}")
    missing = placement.missing()
    if missing:
        return Check(name, "WARN", "-", f"{label}; no domain recorded for {', '.join(missing)}; asked: {asked}")
    spans = placement.spans()
    figure = " ".join(str(spans[lv.key]) for lv in placement.levels)
    by_level = ", ".join(f"{spans[lv.key]} {lv.nouns if spans[lv.key] > 1 else lv.noun}" for lv in placement.levels)
    status = "PASS" if spans[placement.levels[-1].key] == 1 else "WARN"
    return Check(name, status, f"{figure} domains", f"{len(placement.nodes)} nodes, {label} ({by_level}); asked: {asked}")


def busbw_by_placement(checks: list[Check], placements: dict[str, Placement]) -> dict[str, dict[str, object]]:
    """Per group (its NCCL job's placement in `placements`), the all_reduce bus bandwidth with the
    placement it was measured in: what the JSON report keeps so that runs can be compared inside one
    domain against across domains (docs/first-job.md, "Placement")."""
    out: dict[str, dict[str, object]] = {}
    for group, placement in placements.items():
        row = next((c for c in checks if c.name == f"nccl all_reduce {group}"), None)
        figure = row.figure.split()[0] if row is not None else "-"
        out[group] = {
            "placement": placement.label(),
            "spans": placement.spans() if not placement.unknown else {},
            "all_reduce_busbw_gbps": float(figure) if figure != "-" else None,
        }
    return out
