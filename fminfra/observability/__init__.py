"""Observability as code: alert and recording rules, dashboards, exporter metric names.

The files live beside this module (package data): `rules/*.yaml` (Prometheus rule files, checked
with promtool), `dashboards/*.json` (Grafana dashboards) and `exporter_metrics.yaml` (what the exporters emit;
the DCGM fields are those of `scripts/observability/dcgm-counters.csv`, which nodes install).
"""

from __future__ import annotations

import csv
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from fminfra.core.resources import scripts_root

HERE = Path(__file__).resolve().parent
RULES_DIR = HERE / "rules"
DASHBOARDS_DIR = HERE / "dashboards"
EXPORTER_METRICS = HERE / "exporter_metrics.yaml"


def rule_files() -> list[Path]:
    """The rule files, in name order."""
    return sorted(RULES_DIR.glob("*.yaml"))


def load_rule_groups() -> list[dict[str, Any]]:
    """Every rule group of every rule file, in file order."""
    groups: list[dict[str, Any]] = []
    for path in rule_files():
        groups.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["groups"])
    return groups


def rules_document() -> str:
    """All rule groups as one Prometheus rule file: the AMP rule groups namespace's data."""
    return yaml.safe_dump({"groups": load_rule_groups()}, sort_keys=False, width=1000)


def alert_names() -> list[str]:
    return [r["alert"] for g in load_rule_groups() for r in g["rules"] if "alert" in r]


def recording_names() -> list[str]:
    return [r["record"] for g in load_rule_groups() for r in g["rules"] if "record" in r]


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
    metrics = {job: tuple(names) for job, names in data.items() if job != "cloudwatch"}
    metrics["dcgm"] = dcgm_fields()
    return metrics


@cache
def cloudwatch_metrics() -> dict[str, tuple[str, ...]]:
    """CloudWatch metric names by namespace that dashboards may read."""
    data = yaml.safe_load(EXPORTER_METRICS.read_text(encoding="utf-8"))
    return {ns: tuple(names) for ns, names in data["cloudwatch"].items()}


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def load_dashboards() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in dashboard_files()]


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
