"""Observability as code: alert and recording rules, dashboards, exporter metric names.

The files live in `fminfra/observability/` (package data): `rules/*.yaml` (Prometheus rule files beside
this module, checked with promtool), `dashboards/*.json` (Grafana dashboards) and `exporter_metrics.yaml` (what the exporters emit;
the DCGM fields are those of `scripts/observability/dcgm-counters.csv`, which nodes install).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fminfra.core.resources import scripts_root

if TYPE_CHECKING:
    from fminfra.config import EnvironmentConfig

HERE = Path(__file__).resolve().parent.parent  # fminfra/observability/
RULES_DIR = HERE / "rules"
DASHBOARDS_DIR = HERE / "dashboards"
EXPORTER_METRICS = HERE / "exporter_metrics.yaml"


@dataclass(frozen=True)
class WorkspaceUrls:
    """The URLs of one AMP workspace: `base` (what Grafana's Prometheus data source takes; it
    appends `/api/v1/...` itself), `remote_write` and `query`."""

    base: str
    remote_write: str
    query: str


def workspace_urls(region: str, workspace_id: str, dns_suffix: str = "amazonaws.com") -> WorkspaceUrls:
    """AMP's URIs built from the workspace id, never from the `PrometheusEndpoint` text (its form
    differs between sources): `https://aps-workspaces.<region>.<dns suffix>/workspaces/<id>` +
    `/api/v1/remote_write` or `/api/v1/query`. `dns_suffix` is the partition's (`cdk.Aws.URL_SUFFIX`
    in a stack, `partition_dns_suffix(region)` elsewhere). docs/facts/observability.md#amp-remote-write-url,
    docs/facts/observability.md#amp-query-url, docs/facts/observability.md#amp-prometheus-endpoint-form
    """
    base = f"https://aps-workspaces.{region}.{dns_suffix}/workspaces/{workspace_id}"
    return WorkspaceUrls(base=base, remote_write=f"{base}/api/v1/remote_write", query=f"{base}/api/v1/query")


def partition_dns_suffix(region: str) -> str:
    """The DNS suffix of the partition `region` belongs to, from botocore's partitions data
    (docs/facts/observability.md#aws-partition-dns-suffix)."""
    from botocore.loaders import create_loader

    for partition in create_loader().load_data("partitions")["partitions"]:
        if region in partition.get("regions", {}) or re.match(partition["regionRegex"], region):
            return str(partition["outputs"]["dnsSuffix"])
    raise ValueError(f"region {region!r} is in no AWS partition botocore knows")


# The rule file and dashboard of the model servers: only environments with a `serving:` section get
# them (its VllmNoServerTargets fires on the absence of any server, the normal state elsewhere).
SERVING_RULE_FILE = "serving.yaml"
SERVING_DASHBOARD = "serving.json"


def rule_files(*, serving: bool = True) -> list[Path]:
    """The rule files, in name order; with `serving=False`, without the serving rules."""
    return [p for p in sorted(RULES_DIR.glob("*.yaml")) if serving or p.name != SERVING_RULE_FILE]


def load_rule_groups(*, serving: bool = True) -> list[dict[str, Any]]:
    """Every rule group of every rule file (`rule_files(serving=...)`), in file order."""
    groups: list[dict[str, Any]] = []
    for path in rule_files(serving=serving):
        groups.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["groups"])
    return groups


# The recording rule NodesMissing compares the reporting nodes with (rules/nodes.yaml).
EXPECTED_NODES_RECORD = "fminfra:nodes_expected"


def expected_nodes_group(count: int) -> dict[str, Any]:
    """The rule group holding how many nodes run a node exporter in this environment."""
    if count < 0:
        raise ValueError(f"expected node count must be 0 or more, got {count}")
    return {"name": "fminfra-expected-nodes", "interval": "1m", "rules": [{"record": EXPECTED_NODES_RECORD, "expr": f"vector({count})"}]}


def expected_node_count(cfg: EnvironmentConfig) -> int:
    """Nodes that run a node exporter writing to this environment's workspace: the Slurm controller
    and login nodes and every training instance group (HyperPod Slurm, HyperPod EKS or ec2), and,
    where the EKS cluster runs the exporter charts (the node exporter tolerates every taint and
    selects no node), its system nodes and each inference node group at its desired size: EKS keeps
    a managed node group there, nothing scales it (docs/facts/eks.md#eks-nodegroup-desired-size-without-autoscaler).
    NodesMissing means fewer than that. An inference group on a Capacity Block with starts_at is left
    out: it has no nodes before the block and none after EKS's scale-down, so a fixed count would
    page for the whole time outside the block (its nodes are not covered by NodesMissing). So are
    the groups Karpenter provisions (compute.eks.karpenter): it starts nodes for pending pods and
    removes empty ones, keeping no desired size (KarpenterPodsUnschedulable watches them instead)."""
    compute = cfg.compute
    count = sum(g.count for g in compute.instance_groups)
    if compute.orchestrator == "slurm" and compute.slurm is not None:
        count += 1 + compute.slurm.login.count
    if compute.needs_eks:
        groups = [] if compute.karpenter else [g for g in compute.inference_node_groups if not _scheduled_block(g)]
        count += compute.system_node_count() + sum(g.desired_size for g in groups)
    return count


def rules_document(expected_nodes: int | None = None, *, serving: bool = True) -> str:
    """All rule groups as one Prometheus rule file: the AMP rule groups namespace's data; with
    `expected_nodes`, also the group recording that count (`expected_nodes_group`); with
    `serving=False`, without the serving rules."""
    groups = load_rule_groups(serving=serving)
    if expected_nodes is not None:
        groups.append(expected_nodes_group(expected_nodes))
    return yaml.safe_dump({"groups": groups}, sort_keys=False, width=1000)


def alert_names() -> list[str]:
    return [r["alert"] for g in load_rule_groups() for r in g["rules"] if "alert" in r]


def recording_names() -> list[str]:
    """Recording rules of the rule files, and the expected-node count the stack adds."""
    return [r["record"] for g in load_rule_groups() for r in g["rules"] if "record" in r] + [EXPECTED_NODES_RECORD]


def dcgm_counters_file() -> Path:
    """The DCGM exporter's counters file; it travels with the node scripts."""
    return scripts_root() / "observability" / "dcgm-counters.csv"


@cache
def dcgm_fields() -> tuple[str, ...]:
    """DCGM fields of dcgm-counters.csv (the exporter's metric names)."""
    lines = [line for line in dcgm_counters_file().read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]
    return tuple(row[0].strip() for row in csv.reader(lines))


@cache
def exporter_metrics() -> dict[str, tuple[str, ...]]:
    """Prometheus metric names by scrape job (dcgm, node, slurm, prometheus)."""
    data = yaml.safe_load(EXPORTER_METRICS.read_text(encoding="utf-8"))
    metrics = {job: tuple(names) for job, names in data.items() if job not in ("cloudwatch", "paths")}
    metrics["dcgm"] = dcgm_fields()
    return metrics


@cache
def path_jobs() -> dict[str, tuple[str, ...]]:
    """The scrape jobs of each deployment path (slurm, ec2, eks)."""
    data = yaml.safe_load(EXPORTER_METRICS.read_text(encoding="utf-8"))
    return {path: tuple(jobs) for path, jobs in data["paths"].items()}


@cache
def cloudwatch_metrics() -> dict[str, tuple[str, ...]]:
    """CloudWatch metric names by namespace that dashboards may read."""
    data = yaml.safe_load(EXPORTER_METRICS.read_text(encoding="utf-8"))
    return {ns: tuple(names) for ns, names in data["cloudwatch"].items()}


def dashboard_files(*, serving: bool = True) -> list[Path]:
    """The dashboards, in name order; with `serving=False`, without the serving dashboard."""
    return [p for p in sorted(DASHBOARDS_DIR.glob("*.json")) if serving or p.name != SERVING_DASHBOARD]


def load_dashboards(*, serving: bool = True) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in dashboard_files(serving=serving)]


def environment_rules_document(cfg: EnvironmentConfig) -> str:
    """The rule groups namespace's data of one environment: the rule files (the serving rules only
    with a `serving:` section) and its expected-node count."""
    return rules_document(expected_nodes=expected_node_count(cfg), serving=cfg.serving is not None)


_PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-z]+")
_IDENT = re.compile(r"(?<![0-9a-zA-Z_:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![a-zA-Z0-9_:])(?!\s*\()")
_NUMBER_LIKE = re.compile(r"^(e[0-9]*|[0-9].*)$")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and labels excluded)."""
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    names = {m for m in _IDENT.findall(text) if m.lower() not in _PROMQL_KEYWORDS and not _NUMBER_LIKE.match(m)}
    return names


def _scheduled_block(group: Any) -> bool:
    """An inference group whose size follows a Capacity Block's schedule (0 before and after the block)."""
    return bool(group.capacity.type == "capacity-block" and group.capacity.starts_at is not None)
