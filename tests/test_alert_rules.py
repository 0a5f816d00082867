"""Alert and recording rules as code: promtool checks every file and runs the unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fminfra.observability import (
    RULES_DIR,
    alert_names,
    exporter_metrics,
    load_rule_groups,
    promql_metric_names,
    recording_names,
    rule_files,
)
from tests.conftest import ROOT

PROMTOOL_TESTS = sorted((ROOT / "tests" / "promtool").glob("*.test.yaml"))
# The list: each of these conditions has an alert.
REQUIRED_ALERTS = {
    "GpuXidError",
    "GpuUncorrectableEccErrors",
    "GpuRowRemapFailure",
    "GpuThermalThrottling",
    "GpuPowerThrottling",
    "GpuFellOffTheBus",
    "EfaErrorsRising",
    "NodeDown",
    "ExporterDown",
    "SlurmNodesDrained",
    "SlurmNodesDown",
}


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: `make setup` installs it (Debian package prometheus)"
    return path


@pytest.mark.parametrize("path", rule_files(), ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    result = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(path: Path) -> None:
    result = subprocess.run([_promtool(), "test", "rules", path.name], cwd=path.parent, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    source = PROMTOOL_TESTS[0]
    broken = yaml.safe_load(source.read_text())
    broken["rule_files"] = [str((source.parent / f).resolve()) for f in broken["rule_files"]]
    broken["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"severity": "warning"}}]
    (tmp_path / "broken.test.yaml").write_text(yaml.safe_dump(broken))
    result = subprocess.run([_promtool(), "test", "rules", "broken.test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode != 0


def test_every_alert_has_a_summary_a_runbook_and_a_severity() -> None:
    for group in load_rule_groups():
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["annotations"]["summary"].strip(), rule["alert"]
                assert len(rule["annotations"]["runbook"]) > 30, rule["alert"]
                assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]


def test_the_required_conditions_have_alerts_and_names_are_unique() -> None:
    names = alert_names()
    assert set(names) >= REQUIRED_ALERTS, REQUIRED_ALERTS - set(names)
    assert len(names) == len(set(names))
    assert len(recording_names()) == len(set(recording_names()))


def test_at_least_three_alerts_have_firing_and_silent_cases() -> None:
    tested: set[str] = set()
    for path in PROMTOOL_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            checks = case["alert_rule_test"]
            tested.update(c["alertname"] for c in checks if c["exp_alerts"])
            # Each case also shows the alert staying silent: a silent evaluation, or a healthy series
            # next to the bad one (an alert with more series than expected alerts fails the test).
            assert any(not c["exp_alerts"] for c in checks) or len(case["input_series"]) > 1, case["name"]
    assert len(tested) >= 3, tested


def test_rules_dir_is_inside_the_package() -> None:
    assert RULES_DIR.parent.name == "observability" and rule_files()


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('max_over_time(DCGM_FI_DEV_XID_ERRORS{gpu="0"}[5m]) > 0', {"DCGM_FI_DEV_XID_ERRORS"}),
        ("count by (instance) (a) < count by (instance) (b offset 30m)", {"a", "b"}),
        ("sum without (device) (rate(x_total[5m])) / 1e6 > 0.1", {"x_total"}),
        ("fminfra:efa_errors:rate5m_by_device > 0 and on (instance) up == 1", {"fminfra:efa_errors:rate5m_by_device", "up"}),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names


def test_rules_query_only_metrics_the_exporters_emit() -> None:
    known = {m for names in exporter_metrics().values() for m in names} | set(recording_names())
    for group in load_rule_groups():
        for rule in group["rules"]:
            unknown = promql_metric_names(rule["expr"]) - known
            assert not unknown, f"{rule.get('alert') or rule.get('record')}: {sorted(unknown)} not emitted by any exporter"
