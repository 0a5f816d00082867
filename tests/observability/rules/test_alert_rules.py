"""Alert and recording rules as code: promtool checks every file and runs the unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fminfra.observability.rules import (
    RULES_DIR,
    alert_names,
    exporter_metrics,
    load_rule_groups,
    path_jobs,
    promql_metric_names,
    recording_names,
    rule_files,
)
from tests.conftest import ROOT

PROMTOOL_TESTS = sorted((ROOT / "tests" / "promtool").glob("*.test.yaml"))
# The list: each of these conditions has an alert.
REQUIRED_ALERTS = {
    "GpuXidError",
    "GpuXidHardwareError",
    "GpuRowRemapPending",
    "GpuNvlinkCrcErrors",
    "GpuNvlinkRecoveryErrors",
    "EfaRetransmitTimeouts",
    "EfaUnresponsiveRemote",
    "EfaImpairedRemoteConnections",
    "NodesMissing",
    "SlurmScrapeFailed",
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
    "KarpenterPodsUnschedulable",
    "VllmQueueBacklog",
    "VllmTimeToFirstTokenHigh",
    "VllmInterTokenLatencyHigh",
    "VllmRequestErrors",
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
        ('label_replace(rate(a_err[5m]), "counter", "a_err", "", "") or b', {"a_err", "b"}),
        ("fminfra:nodes_expected - on () (count(up == 1) or vector(0)) > 0", {"fminfra:nodes_expected", "up"}),
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


# Which rule files apply on which path: the Slurm rules only where the Slurm exporter runs.
RULE_FILE_PATHS = {
    "gpu.yaml": ("slurm", "ec2", "eks", "eks-karpenter"),
    "efa.yaml": ("slurm", "ec2", "eks", "eks-karpenter"),
    "nodes.yaml": ("slurm", "ec2", "eks", "eks-karpenter"),
    "slurm.yaml": ("slurm",),
    "karpenter.yaml": ("eks-karpenter",),
    "serving.yaml": ("eks-serving",),
}


def _emitted_on(path: str) -> set[str]:
    """What the exporters emit on a path, from the configuration each path ships: the counters
    file the nodes install (Slurm, ec2) or the chart's customMetrics (EKS), the EFA collector the
    nodes run or the chart's sidecar runs, and the job lists of exporter_metrics.yaml."""
    import csv

    from fminfra.compute.stack.clusters import exporter_charts

    jobs = path_jobs()[path]
    emitted = {m for job in jobs if job != "dcgm" for m in exporter_metrics()[job]}
    if path.startswith("eks"):
        charts = {c.chart: c for c in exporter_charts(["ml.p5.48xlarge"])}
        text = str(charts["dcgm-exporter"].values["customMetrics"])
        rows = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
        emitted |= {row[0].strip() for row in csv.reader(rows)}
        sidecar = charts["prometheus-node-exporter"].values["sidecars"][0]
        assert "collect_efa.sh" in " ".join(sidecar["command"]), "the EKS node exporter has no EFA collector"
    else:
        emitted |= set(exporter_metrics()["dcgm"])
    return emitted


@pytest.mark.parametrize("path", ["slurm", "ec2", "eks", "eks-karpenter", "eks-serving"])
def test_every_metric_a_rule_uses_is_emitted_on_every_path(path: str) -> None:
    emitted = _emitted_on(path) | set(recording_names())
    for rule_file in rule_files():
        if path not in RULE_FILE_PATHS[rule_file.name]:
            continue
        for group in yaml.safe_load(rule_file.read_text())["groups"]:
            for rule in group["rules"]:
                missing = promql_metric_names(rule["expr"]) - emitted
                assert not missing, f"{path}: {rule.get('alert') or rule.get('record')} uses {sorted(missing)}, not emitted there"


def test_the_path_check_catches_a_field_the_eks_chart_does_not_collect() -> None:
    """A test of the test: the chart's own default list (NVIDIA/dcgm-exporter 4.5.3-4.8.2
    etc/default-counters.csv, uncommented fields) lacks what the GPU rules use."""
    chart_defaults = {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
    used = {
        m
        for g in yaml.safe_load((RULES_DIR / "gpu.yaml").read_text())["groups"]
        for r in g["rules"]
        for m in promql_metric_names(r["expr"])
    }
    assert {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_EXP_XID_ERRORS_COUNT"} <= used - chart_defaults - set(
        recording_names()
    )


def test_docs_list_every_alert_with_source_and_threshold() -> None:
    """docs/observability.md has one row per alert: what it detects, its source metric, its threshold."""
    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    for group in load_rule_groups():
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] in rows, f"{rule['alert']} is not in docs/observability.md's alert table"
                cells = [c.strip() for c in rows[rule["alert"]].split("|")[1:-1]]
                assert len(cells) == 5 and all(cells), rule["alert"]
                names = promql_metric_names(rule["expr"]) - set(recording_names())
                assert any(n in cells[2] for n in names) or "fminfra:" in rule["expr"], rule["alert"]
