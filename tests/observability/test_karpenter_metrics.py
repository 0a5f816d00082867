"""Karpenter's metrics, against what the pinned release publishes (tests/data/karpenter/, v1.14.1):
the AMP scraper's `karpenter` job keeps the pod the chart's Service selects, on the port it targets,
at the path its ServiceMonitor scrapes; every Karpenter metric fminfra reads is in the release's
metrics reference; the alert's promtool test catches the two ways the rule could go wrong."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.eks.constructs.karpenter import CHART, karpenter_values
from fminfra.eks.rules import KARPENTER_NAMESPACE, KARPENTER_RELEASE
from fminfra.observability.constructs.amp_scraper import (
    DEFAULT_JOBS,
    KARPENTER_JOB,
    PodScrapeJob,
    karpenter_scrape_job,
    scrape_configuration,
    scrape_jobs,
)
from fminfra.observability.rules import RULES_DIR, exporter_metrics, load_dashboards, load_rule_groups, promql_metric_names
from tests.conftest import ROOT
from tests.promtool_unit import promtool_test_with

DATA = ROOT / "tests" / "data" / "karpenter"
VERSION = "1.14.1"
# Labels of the Karpenter series fminfra reads, as the code at the pin gives them
# (docs/facts/karpenter.md#karpenter-metrics-used): a target label of the same name would rename them.
SERIES_LABELS = {
    "controller",
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
    "resource_type",
    "reason",
    "min_values_relaxed",
    "method",
    "provider",
    "error",
}


# The chart files and the metrics reference of the release, as tests/data/karpenter/SOURCES.md lists them.
FILES = {name: f"{name}-{VERSION}.yaml" for name in ("values", "deployment", "service", "servicemonitor")} | {
    "helpers": f"helpers-{VERSION}.tpl",
    "metrics": f"metrics-{VERSION}.md",
}


def _text(name: str) -> str:
    return (DATA / FILES[name]).read_text(encoding="utf-8")


def _values() -> dict[str, Any]:
    return yaml.safe_load(_text("values"))


def _template_value(expr: str) -> str:
    """The value of a chart expression fminfra's install gives it: the release, the chart name,
    or a values path (the chart's default unless karpenter_values sets it)."""
    expr = expr.strip()
    if expr == ".Release.Name":
        return KARPENTER_RELEASE
    if expr == 'include "karpenter.name" .':
        # default .Chart.Name .Values.nameOverride: the chart's name unless the values override it
        assert "nameOverride" not in karpenter_values(cluster_name="c", queue_name="q", replicas=2, region="us-west-2")
        assert _values()["nameOverride"] == ""
        return CHART
    if expr.startswith(".Values."):
        path = expr.removeprefix(".Values.").split(".")
        ours = karpenter_values(cluster_name="c", queue_name="q", replicas=2, region="us-west-2")
        node: Any = ours
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            return str(node)
        value: Any = _values()
        for key in path:
            value = value[key]
        return str(value)
    raise AssertionError(f"no value for the chart expression {expr!r}")


def _render(line: str) -> str:
    return re.sub(r"\{\{\s*(.*?)\s*\}\}", lambda m: _template_value(m.group(1)), line)


def chart_pod() -> dict[str, Any]:
    """The controller pod as the chart at the pin makes it, in the terms of Kubernetes pod discovery:
    its namespace, its labels (the chart's selector labels, which the Service selects) and its
    container ports (name -> number)."""
    helpers = _text("helpers")
    block = helpers[helpers.index('define "karpenter.selectorLabels"') :]
    block = block[block.index("\n") + 1 : block.index("{{- end }}")]
    labels = dict(_render(line).split(": ", 1) for line in block.strip().splitlines())
    deployment = _text("deployment")
    ports = dict(re.findall(r"- name: ([a-z-]+)\n\s+containerPort: (\{\{[^}]*\}\})", deployment))
    assert "selectorLabels" in deployment.split("template:", 1)[1].split("spec:", 1)[0], "the pods carry the selector labels"
    return {"namespace": KARPENTER_NAMESPACE, "labels": labels, "ports": {name: int(_render(port)) for name, port in ports.items()}}


def service_target() -> tuple[str, int]:
    """The port name the chart's Service targets and the number it serves it on."""
    service = _text("service")
    [(name, port, target)] = re.findall(r"- name: (\S+)\n\s+port: (\{\{[^}]*\}\})\n\s+targetPort: (\S+)", service)
    assert name == target and "karpenter.selectorLabels" in service.split("selector:", 1)[1]
    return target, int(_render(port))


def _meta(pod: dict[str, Any], port_name: str) -> dict[str, str]:
    """Prometheus's pod discovery labels of one container port of `pod`."""
    meta = {
        "__meta_kubernetes_namespace": pod["namespace"],
        "__meta_kubernetes_pod_container_port_name": port_name,
        "__meta_kubernetes_pod_container_port_number": str(pod["ports"][port_name]),
        "__meta_kubernetes_pod_node_name": "ip-10-0-1-9",
    }
    for label, value in pod["labels"].items():
        meta["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)] = value
    return meta


def kept(job: dict[str, Any], meta: dict[str, str]) -> dict[str, str] | None:
    """The target's labels after the job's relabelling (`keep` and plain copies), or None if dropped."""
    labels = dict(meta)
    for rule in job["relabel_configs"]:
        value = ";".join(labels.get(s, "") for s in rule["source_labels"])
        if rule.get("action", "replace") == "keep":
            if not re.fullmatch(rule["regex"], value):
                return None
        else:
            labels[rule["target_label"]] = value
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def _jobs(jobs: dict[str, int | PodScrapeJob]) -> dict[str, dict[str, Any]]:
    return {c["job_name"]: c for c in yaml.safe_load(scrape_configuration(30, jobs))["scrape_configs"]}


def test_the_karpenter_job_scrapes_the_pod_and_port_the_charts_service_serves() -> None:
    pod = chart_pod()
    port_name, port = service_target()
    assert pod["ports"][port_name] == port == 8080
    job = _jobs(scrape_jobs(karpenter=True))[KARPENTER_JOB]
    assert kept(job, _meta(pod, port_name)) is not None
    assert kept(job, _meta(pod, "http")) is None, "the health probe port is not scraped"
    # the chart's ServiceMonitor scrapes /metrics, the job's path (Prometheus's default when absent)
    path = re.search(r"- port: http-metrics\n\s+path: (\S+)", _text("servicemonitor"))
    assert path is not None and path.group(1) == job.get("metrics_path", "/metrics") == "/metrics"


def test_the_karpenter_job_keeps_no_other_pod_and_the_exporter_jobs_not_karpenter() -> None:
    """The load balancer controller also serves metrics on 8080 in kube-system."""
    jobs = _jobs(scrape_jobs(karpenter=True))
    lbc = {
        "namespace": "kube-system",
        "labels": {"app.kubernetes.io/name": "aws-load-balancer-controller", "app.kubernetes.io/instance": "aws-load-balancer-controller"},
        "ports": {"metrics-server": 8080},
    }
    assert kept(jobs[KARPENTER_JOB], _meta(lbc, "metrics-server")) is None
    pod = chart_pod()
    for name in DEFAULT_JOBS:
        assert all(kept(jobs[name], _meta(pod, p)) is None for p in pod["ports"]), name


def test_the_karpenter_job_is_only_where_karpenter_runs_and_the_exporter_jobs_are_unchanged() -> None:
    assert _jobs(scrape_jobs(karpenter=False)) == _jobs(dict(DEFAULT_JOBS))
    assert set(_jobs(scrape_jobs(karpenter=True))) == {*DEFAULT_JOBS, KARPENTER_JOB}


def test_the_karpenter_job_renames_none_of_karpenters_own_labels() -> None:
    target = kept(_jobs(scrape_jobs(karpenter=True))[KARPENTER_JOB], _meta(chart_pod(), "http-metrics"))
    assert target is not None
    assert not set(target) & SERIES_LABELS, set(target) & SERIES_LABELS


def test_the_checks_catch_a_wrong_port_namespace_or_label() -> None:
    """Tests of the tests: a job on another port, namespace or release keeps nothing of the chart's
    pod; the exporters' default target label `node` would rename Karpenter's own."""
    pod, (port_name, _) = chart_pod(), service_target()
    right = karpenter_scrape_job()
    for wrong in (
        PodScrapeJob(port=8000, port_name=right.port_name, namespace=right.namespace, pod_labels=right.pod_labels),
        PodScrapeJob(port=right.port, port_name=right.port_name, namespace="karpenter", pod_labels=right.pod_labels),
        PodScrapeJob(
            port=right.port, port_name=right.port_name, namespace=right.namespace, pod_labels={"app.kubernetes.io/instance": "kp"}
        ),
    ):
        assert kept(_jobs({"k": wrong})["k"], _meta(pod, port_name)) is None, wrong
    target = kept(_jobs({"k": PodScrapeJob(port=right.port)})["k"], _meta(pod, port_name))
    assert target is not None and "node" in set(target) & SERIES_LABELS


def reference_names() -> set[str]:
    """The metric names of the release's metrics reference (its `### \\`name\\`` headings)."""
    return set(re.findall(r"(?m)^### `([a-z_:][a-z0-9_:]*)`$", _text("metrics")))


def test_every_karpenter_metric_fminfra_lists_is_in_the_releases_reference() -> None:
    listed = set(exporter_metrics()[KARPENTER_JOB])
    assert listed and listed <= reference_names(), listed - reference_names()


def test_the_karpenter_rule_and_dashboard_read_only_listed_karpenter_metrics() -> None:
    exprs = [r["expr"] for g in load_rule_groups() for r in g["rules"]]
    exprs += [t["expr"] for d in load_dashboards() for p in d["panels"] for t in p["targets"] if "expr" in t]
    used = {n for e in exprs for n in promql_metric_names(e) if n.startswith("karpenter_")}
    assert used == set(exporter_metrics()[KARPENTER_JOB]), used ^ set(exporter_metrics()[KARPENTER_JOB])


def test_the_reference_check_refuses_a_name_the_release_lacks() -> None:
    """A test of the test: main's v1.14 page lists launch failures by reason, which the release's
    page does not (docs/facts/karpenter.md#karpenter-metrics-reference); a misspelt name fails too."""
    names = reference_names()
    assert len(names) > 100 and "karpenter_scheduler_unschedulable_pods_count" in names
    assert "karpenter_cloudprovider_instance_launch_failures_total" not in names
    assert "karpenter_scheduler_unschedulable_pod_count" not in names


PROMTOOL_TEST = ROOT / "tests" / "promtool" / "karpenter.test.yaml"


def _promtool_with(tmp_path: Path, rule_text: str) -> subprocess.CompletedProcess[str]:
    return promtool_test_with(tmp_path, PROMTOOL_TEST, rule_text, "karpenter.yaml")


@pytest.mark.parametrize(
    ("broken", "failing_case"),
    [
        # the gauge alone: its last value pages after the pod is gone
        (r"\n\s+and on \(\)\n\s+count\(karpenter_pods_state[^\n]*", "A gauge left at its last value"),
        # per replica: a failover restarts the 10 minutes
        (r"max without \(instance, exporter_node, exporter_namespace\) ", "A leader failover"),
    ],
)
def test_the_promtool_test_fails_on_a_broken_rule(tmp_path: Path, broken: str, failing_case: str) -> None:
    text = (RULES_DIR / "karpenter.yaml").read_text()
    assert _promtool_with(tmp_path, text).returncode == 0
    changed = re.sub(broken, "", text, count=1)
    assert changed != text
    result = _promtool_with(tmp_path, changed)
    assert result.returncode != 0 and failing_case in result.stdout + result.stderr, result.stdout
