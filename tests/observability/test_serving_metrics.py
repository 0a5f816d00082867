"""The model servers' rules and dashboard, against what the pinned vLLM exposes (tests/data/vllm/,
docs/facts/vllm.md#vllm-metric-names): every vLLM series they read is in the recording, with labels
the recording or the AMP scraper's `vllm` job gives; the promtool test's series are shaped so and
catch a broken rule; only an environment with a `serving:` section gets the rules."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.observability.rules import (
    DASHBOARDS_DIR,
    RULES_DIR,
    SERVING_DASHBOARD,
    SERVING_RULE_FILE,
    exporter_metrics,
    load_rule_groups,
    promql_metric_names,
    rule_files,
)
from fminfra.serving.rules import SCRAPE_JOB
from tests.conftest import ROOT
from tests.promtool_unit import promtool_test_with
from tests.serving.test_vllm_recording import parse_exposition, recording

PROMTOOL_TEST = ROOT / "tests" / "promtool" / "serving.test.yaml"
# The labels the scraper's relabelling and Prometheus give every target's series
# (fminfra/observability/constructs/amp_scraper.py `_job_config`).
TARGET_LABELS = frozenset({"job", "instance", "node", "exporter_namespace"})
SERVING_GROUP = "fminfra-serving-alerts"


def recorded_samples() -> dict[str, frozenset[str]]:
    """The recording's sample names ('vllm:time_to_first_token_seconds_bucket', 'vllm:request_success_total')
    and the label names of their samples (`le` included for buckets)."""
    families = parse_exposition(recording().read_text(encoding="utf-8"), recording().name)
    out: dict[str, set[str]] = {}
    for family in families.values():
        for name, labels, _ in family.samples:
            out.setdefault(name, set()).update(labels)
    return {name: frozenset(labels) for name, labels in out.items()}


def _serving_exprs() -> list[tuple[str, str]]:
    rules = yaml.safe_load((RULES_DIR / SERVING_RULE_FILE).read_text(encoding="utf-8"))["groups"]
    exprs = [(r["alert"], r["expr"]) for g in rules for r in g["rules"]]
    dashboard = json.loads((DASHBOARDS_DIR / SERVING_DASHBOARD).read_text(encoding="utf-8"))
    exprs += [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    exprs += [(v["name"], v["query"]["query"].removeprefix("label_values(").rsplit(",", 1)[0]) for v in dashboard["templating"]["list"]]
    return exprs


def name_problems(exprs: list[tuple[str, str]], recorded: dict[str, frozenset[str]]) -> list[str]:
    """A vLLM name an expression reads that the recording lacks."""
    return [
        f"{where}: {name} is not in {recording().name}"
        for where, expr in exprs
        for name in sorted(promql_metric_names(expr))
        if name.startswith("vllm:") and name not in recorded
    ]


def label_problems(exprs: list[tuple[str, str]], recorded: dict[str, frozenset[str]]) -> list[str]:
    """A label an expression matches on a vLLM series, or groups vLLM series by, that neither the
    recording nor the scrape target gives."""
    problems = []
    for where, expr in exprs:
        names = {n for n in promql_metric_names(expr) if n in recorded}
        allowed = TARGET_LABELS.union(*(recorded[n] for n in names)) if names else None
        for name, matchers in re.findall(r"(vllm:[a-zA-Z0-9_:]+)\{([^}]*)\}", expr):
            for label in re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", re.sub(r'"(?:[^"\\]|\\.)*"', "", matchers)):
                if name in recorded and label not in recorded[name] | TARGET_LABELS:
                    problems.append(f"{where}: {name} has no label {label}")
        for grouping in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            for label in (x.strip() for x in grouping.split(",") if x.strip()):
                if allowed is not None and label not in allowed:
                    problems.append(f"{where}: no vLLM series it reads has the label {label}")
    return problems


def test_the_listed_vllm_names_are_recorded_and_read() -> None:
    listed = set(exporter_metrics()[SCRAPE_JOB])
    recorded = recorded_samples()
    assert listed and listed <= set(recorded), listed - set(recorded)
    used = {n for _, e in _serving_exprs() for n in promql_metric_names(e) if n.startswith("vllm:")}
    assert used == listed, used ^ listed


def test_the_serving_rules_and_dashboard_read_recorded_names_and_labels() -> None:
    recorded = recorded_samples()
    assert name_problems(_serving_exprs(), recorded) == []
    assert label_problems(_serving_exprs(), recorded) == []


def test_every_serving_rule_reads_the_scrapers_job() -> None:
    for group in yaml.safe_load((RULES_DIR / SERVING_RULE_FILE).read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            selectors = re.findall(r"\{([^}]*)\}", rule["expr"])
            assert selectors and all(f'job="{SCRAPE_JOB}"' in s for s in selectors), rule["alert"]


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        # renamed to kv_cache_usage and removed before the pinned version
        ('max by (model_name) (vllm:gpu_cache_usage_perc{job="vllm"})', "x: vllm:gpu_cache_usage_perc is not in"),
        ('sum(vllm:num_requests_waiting{job="vllm", model="m"})', "x: vllm:num_requests_waiting has no label model"),
        ('sum by (model) (vllm:num_requests_waiting{job="vllm"})', "x: no vLLM series it reads has the label model"),
        ('sum(vllm:num_requests_waiting{job="vllm", namespace="serving"})', "x: vllm:num_requests_waiting has no label namespace"),
        ('histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds{job="vllm"}[5m])))', "is not in"),
    ],
)
def test_the_checks_refuse_a_removed_name_or_a_wrong_label(expr: str, problem: str) -> None:
    recorded = recorded_samples()
    problems = name_problems([("x", expr)], recorded) + label_problems([("x", expr)], recorded)
    assert len(problems) == 1 and problem in problems[0], problems


# --- the promtool test's series ---------------------------------------------------------------


def _series(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition("{")
    return name, dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', rest))


def series_problems(test: dict[str, Any], recorded: dict[str, frozenset[str]], buckets: dict[str, set[str]]) -> list[str]:
    """A promtool input series whose name the recording lacks, whose labels differ from the recorded
    ones plus the target's, or whose bucket bound the recording does not have."""
    problems = []
    for case in test["tests"]:
        for item in case["input_series"]:
            name, labels = _series(item["series"])
            if name == "up":
                expected = TARGET_LABELS
            elif name in recorded:
                expected = recorded[name] | TARGET_LABELS
            else:
                problems.append(f"{case['name']}: {name} is not in {recording().name}")
                continue
            if set(labels) != expected:
                problems.append(f"{case['name']}: {name} has labels {sorted(labels)}, the scraped series {sorted(expected)}")
            if "le" in labels and labels["le"] not in buckets.get(name, set()):
                problems.append(f"{case['name']}: {name} has no bucket le={labels['le']}")
    return problems


def _buckets() -> dict[str, set[str]]:
    families = parse_exposition(recording().read_text(encoding="utf-8"), recording().name)
    out: dict[str, set[str]] = {}
    for family in families.values():
        for name, labels, _ in family.samples:
            if "le" in labels:
                out.setdefault(name, set()).add(labels["le"])
    return out


def test_the_promtool_series_are_shaped_as_the_recording() -> None:
    test = yaml.safe_load(PROMTOOL_TEST.read_text(encoding="utf-8"))
    assert series_problems(test, recorded_samples(), _buckets()) == []
    alerts = {c["alertname"] for case in test["tests"] for c in case["alert_rule_test"] if c["exp_alerts"]}
    silent = {c["alertname"] for case in test["tests"] for c in case["alert_rule_test"] if not c["exp_alerts"]}
    names = {r["alert"] for g in yaml.safe_load((RULES_DIR / SERVING_RULE_FILE).read_text())["groups"] for r in g["rules"]}
    assert alerts == names and silent == names, (names - alerts, names - silent)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("vllm:num_requests_waiting{", "vllm:gpu_cache_usage_perc{", "vllm:gpu_cache_usage_perc is not in"),
        ('engine="0",', "", "has labels"),
        ('model_name="llama-3.1-8b-instruct"', 'model="llama-3.1-8b-instruct"', "has labels"),
        ('le="0.25"', 'le="0.3"', "has no bucket le=0.3"),
    ],
)
def test_the_series_check_refuses_a_name_or_label_the_server_does_not_give(old: str, new: str, problem: str) -> None:
    text = PROMTOOL_TEST.read_text(encoding="utf-8")
    assert old in text
    problems = series_problems(yaml.safe_load(text.replace(old, new, 1)), recorded_samples(), _buckets())
    assert problems and problem in problems[0], problems


def _promtool_with(tmp_path: Path, rule_text: str) -> subprocess.CompletedProcess[str]:
    return promtool_test_with(tmp_path, PROMTOOL_TEST, rule_text, "serving.yaml")


@pytest.mark.parametrize(
    ("old", "new", "failing_case"),
    [
        # a removed name: no series, the backlog never fires
        (
            'sum by (model_name) (vllm:num_requests_waiting{job="vllm"})\n            > on',
            'sum by (model_name) (vllm:gpu_cache_usage_perc{job="vllm"})\n            > on',
            "A queue longer",
        ),
        # the scraper's label is exporter_namespace, and vLLM's model_name
        (
            "sum by (model_name, le) (rate(vllm:time_to_first_token",
            "sum by (model, le) (rate(vllm:time_to_first_token",
            "p99 time to first token",
        ),
        # client aborts counted as errors
        ('finished_reason="error"', 'finished_reason=~"error|abort"', "client aborts are not errors"),
        # another job name than the scraper's
        ('absent(up{job="vllm"})', 'absent(up{job="vllm-server"})', "No vLLM target at all"),
        # the threshold a bucket lower: the 0.1 s model pages too
        ("[5m]))) > 0.2", "[5m]))) > 0.05", "p99 inter-token latency"),
    ],
)
def test_the_promtool_test_fails_on_a_broken_rule(tmp_path: Path, old: str, new: str, failing_case: str) -> None:
    text = (RULES_DIR / SERVING_RULE_FILE).read_text(encoding="utf-8")
    assert _promtool_with(tmp_path, text).returncode == 0
    assert old in text
    result = _promtool_with(tmp_path, text.replace(old, new, 1))
    assert result.returncode != 0 and failing_case in result.stdout + result.stderr, result.stdout


# --- which environments get them ---------------------------------------------------------------


def test_only_the_serving_rule_file_depends_on_the_serving_section() -> None:
    assert {p.name for p in rule_files()} - {p.name for p in rule_files(serving=False)} == {SERVING_RULE_FILE}
    assert SERVING_GROUP in {g["name"] for g in load_rule_groups()}
    assert SERVING_GROUP not in {g["name"] for g in load_rule_groups(serving=False)}


def _namespace_groups(synth: Any, env: str) -> set[str]:
    namespaces = synth.resources(env, "Observability", "AWS::APS::RuleGroupsNamespace")
    (namespace,) = namespaces.values()
    return {g["name"] for g in yaml.safe_load(namespace["Properties"]["Data"])["groups"]}


def test_the_serve_example_carries_the_serving_rules_and_dev_does_not(synth: Any) -> None:
    assert synth.configs["serve"].serving is not None and synth.configs["dev"].serving is None
    assert SERVING_GROUP in _namespace_groups(synth, "serve")
    assert SERVING_GROUP not in _namespace_groups(synth, "dev")
