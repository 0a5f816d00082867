"""Grafana dashboards as code: structure, and every query names metrics the exporters emit."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fminfra.observability.rules import (
    cloudwatch_metrics,
    dashboard_files,
    exporter_metrics,
    load_dashboards,
    promql_metric_names,
    recording_names,
)
from fminfra.ops.grafana import CLOUDWATCH_UID, PROMETHEUS_UID

PANEL_TYPES = {"timeseries", "stat", "table", "gauge", "bargauge"}
DASHBOARDS = dashboard_files()


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return dashboard["panels"]


def test_the_six_dashboards_exist() -> None:
    titles = {d["title"] for d in load_dashboards()}
    assert titles == {
        "fminfra / GPU health",
        "fminfra / EFA",
        "fminfra / FSx for Lustre",
        "fminfra / Slurm",
        "fminfra / Karpenter",
        "fminfra / Serving",
    }
    assert {d["title"] for d in load_dashboards(serving=False)} == titles - {"fminfra / Serving"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"] == f"fminfra-{path.stem}" and len(dashboard["uid"]) <= 40
    assert "id" not in dashboard, "a dashboard id is per Grafana instance; sync matches by uid"
    assert dashboard["title"].startswith("fminfra / ")
    assert isinstance(dashboard["schemaVersion"], int) and "fminfra" in dashboard["tags"]
    panels = _panels(dashboard)
    assert panels
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        assert panel["title"].strip()
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        assert panel["datasource"]["uid"] in (PROMETHEUS_UID, CLOUDWATCH_UID), panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
    # No two panels overlap.
    cells = set()
    for panel in panels:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def _known_prometheus_names() -> set[str]:
    return {m for names in exporter_metrics().values() for m in names} | set(recording_names())


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_each_query_names_metrics_the_exporters_emit(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    known = _known_prometheus_names()
    cloudwatch = cloudwatch_metrics()
    queries = [(p["title"], t) for p in _panels(dashboard) for t in p["targets"]]
    variables = [(v["name"], v) for v in dashboard["templating"]["list"] if v["type"] == "query"]
    for title, target in queries:
        if target["datasource"]["uid"] == PROMETHEUS_UID:
            names = promql_metric_names(target["expr"])
            assert names, f"{title}: query names no metric"
            assert names <= known, f"{title}: {sorted(names - known)} not emitted by any exporter or recording rule"
        else:
            assert target["namespace"] in cloudwatch, title
            assert target["metricName"] in cloudwatch[target["namespace"]], f"{title}: {target['metricName']}"
    for name, variable in variables:
        if variable["datasource"]["uid"] == PROMETHEUS_UID:
            names = promql_metric_names(variable["query"]["query"].removeprefix("label_values(").rsplit(",", 1)[0])
            assert names and names <= known, f"variable {name}: {names}"
        else:
            query = variable["query"]
            assert query["namespace"] in cloudwatch and query["metricName"] in cloudwatch[query["namespace"]], f"variable {name}"


# The query types of Grafana's CloudWatch data source for variables (grafana/grafana,
# public/app/plugins/datasource/cloudwatch/types.ts, VariableQueryType).
CLOUDWATCH_VARIABLE_TYPES = {"regions", "namespaces", "metrics", "dimensionKeys", "dimensionValues"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_variable_gets_its_options_without_editing(path: Path) -> None:
    """A variable lists its values from a query (a custom variable with no options would need
    editing before the dashboard shows anything), and every panel's $variables exist."""
    dashboard = json.loads(path.read_text())
    defined = set()
    for variable in dashboard["templating"]["list"]:
        defined.add(variable["name"])
        assert variable["type"] == "query", f"{variable['name']}: type {variable['type']} has no options of its own"
        query = variable["query"]
        if variable["datasource"]["uid"] == PROMETHEUS_UID:
            assert query["query"].startswith("label_values("), variable["name"]
        else:
            assert query["queryType"] in CLOUDWATCH_VARIABLE_TYPES, variable["name"]
            if query["queryType"] == "dimensionValues":
                assert query["dimensionKey"] and query["metricName"] and query["namespace"], variable["name"]
    used = set(re.findall(r"\$([A-Za-z_]+)", json.dumps(dashboard["panels"])))
    assert used <= defined, used - defined


def test_fsx_free_capacity_panel_shows_the_file_system_total() -> None:
    """FreeDataStorageCapacity's Sum is the file system's free bytes, and FSx emits one data point
    per storage target per minute, so the Sum needs a 1-minute period
    (docs/facts/observability.md#fsx-free-storage-capacity-statistics)."""
    dashboard = json.loads((DASHBOARDS[0].parent / "fsx.json").read_text())
    targets = [t for p in dashboard["panels"] for t in p["targets"] if t.get("metricName") == "FreeDataStorageCapacity"]
    sums = [t for t in targets if t["statistic"] == "Sum"]
    assert sums and all(t["period"] == "60" for t in sums)


def test_the_metric_check_catches_an_unknown_metric() -> None:
    assert not promql_metric_names("rate(DCGM_FI_DEV_NOT_A_FIELD[5m])") <= _known_prometheus_names()
