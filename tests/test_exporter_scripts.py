"""Node scripts of the metrics collection: shellcheck, and runs with fake commands on PATH, twice."""

from __future__ import annotations

import hashlib
import io
import os
import platform
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from fminfra.core.versions import version
from tests.conftest import ROOT

SCRIPTS = ROOT / "scripts" / "observability"
INSTALL = SCRIPTS / "install_exporters.sh"
COLLECT = SCRIPTS / "collect_metrics.sh"
URL = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123/api/v1/remote_write"
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck") or str(ROOT / ".venv" / "bin" / "shellcheck")
    result = subprocess.run([shellcheck, str(INSTALL), str(COLLECT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def _release(tmp: Path, project: str, ver: str, binaries: dict[str, str]) -> None:
    """A fake GitHub release of a Prometheus project: the tarball and its sha256sums.txt."""
    name = f"{project}-{ver}.linux-{ARCH}"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for binary, script in binaries.items():
            data = script.encode()
            info = tarfile.TarInfo(f"{name}/{binary}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    folder = tmp / "releases" / project / f"v{ver}"
    folder.mkdir(parents=True)
    (folder / f"{name}.tar.gz").write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    (folder / "sha256sums.txt").write_text(f"{'0' * 64}  {project}-{ver}.darwin-{ARCH}.tar.gz\n{digest}  {name}.tar.gz\n")


@pytest.fixture
def node(tmp_path: Path) -> dict[str, str]:
    """A fake node: fake curl (serving fake releases), systemctl, docker, nvidia-smi, sinfo."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `make setup` installs it"
    _release(tmp_path, "node_exporter", version("NODE_EXPORTER_VERSION"), {"node_exporter": "#!/bin/sh\nexit 0\n"})
    _release(
        tmp_path,
        "prometheus",
        version("PROMETHEUS_VERSION"),
        {"prometheus": "#!/bin/sh\nexit 0\n", "promtool": f'#!/bin/sh\nexec {promtool} "$@"\n'},
    )
    _executable(
        bin_dir / "curl",
        f"""#!/usr/bin/env bash
set -o errexit -o nounset
out="" url=""
while (($#)); do case $1 in -o) out=$2; shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac; done
echo "curl $url" >> {calls}
path=${{url#https://github.com/prometheus/}}
path=${{path/releases\\/download\\//}}
cp "{tmp_path}/releases/$path" "$out"
""",
    )
    for command in ("systemctl", "docker"):
        _executable(bin_dir / command, f'#!/bin/sh\necho "{command} $*" >> {calls}\n')
    _executable(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3'\n")
    _executable(bin_dir / "sinfo", "#!/bin/sh\necho 'n1 idle'\n")
    (tmp_path / "root" / "sys" / "class" / "infiniband" / "rdmap16s27").mkdir(parents=True)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FMINFRA_ROOT": str(tmp_path / "root"),
        "FMINFRA_REMOTE_WRITE_URL": URL,
        "FMINFRA_AWS_REGION": "us-west-2",
        "FMINFRA_CLUSTER": "fminfra-dev",
        "CALLS": str(calls),
        "RETRIES": "1",
    }


def _run(env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(INSTALL)], env={**env, **extra}, capture_output=True, text=True, check=False)


def test_controller_install_runs_once_and_the_second_run_does_nothing(node: dict[str, str]) -> None:
    first = _run(node, FMINFRA_NODE_KIND="controller")
    assert first.returncode == 0, first.stderr
    calls = Path(node["CALLS"]).read_text().splitlines()
    assert sum(c.startswith("curl ") for c in calls) == 4
    assert f"docker pull --quiet nvcr.io/nvidia/k8s/dcgm-exporter:{version('DCGM_EXPORTER_VERSION')}-distroless" in calls
    started = {c.split()[-1] for c in calls if c.startswith("systemctl restart")}
    assert started == {
        "fminfra-node-exporter.service",
        "fminfra-node-metrics.timer",
        "fminfra-dcgm-exporter.service",
        "fminfra-slurm-metrics.timer",
        "fminfra-slurm-exporter.service",
        "fminfra-prometheus-agent.service",
    }
    root = Path(node["FMINFRA_ROOT"])
    config = yaml.safe_load((root / "etc/fminfra/observability/prometheus-agent.yml").read_text())
    assert config["remote_write"][0]["url"] == URL
    assert config["remote_write"][0]["sigv4"] == {"region": "us-west-2"}
    assert config["global"]["scrape_interval"] == "30s" and config["global"]["external_labels"] == {"cluster": "fminfra-dev"}
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in config["scrape_configs"]}
    assert jobs == {"node": ["localhost:9100"], "dcgm": ["localhost:9400"], "slurm": ["localhost:8080"]}
    dcgm_unit = (root / "etc/systemd/system/fminfra-dcgm-exporter.service").read_text()
    assert "-a :9400" in dcgm_unit and "ExecStop=/usr/bin/docker stop fminfra-dcgm-exporter" in dcgm_unit
    assert "--web.listen-address=:8080" in (root / "etc/systemd/system/fminfra-slurm-exporter.service").read_text()

    Path(node["CALLS"]).write_text("")
    second = _run(node, FMINFRA_NODE_KIND="controller")
    assert second.returncode == 0, second.stderr
    assert "already installed with these settings" in second.stderr
    assert Path(node["CALLS"]).read_text() == ""


def test_worker_has_no_slurm_exporter_and_a_changed_url_reinstalls_config_only(node: dict[str, str]) -> None:
    assert _run(node).returncode == 0
    root = Path(node["FMINFRA_ROOT"])
    config = yaml.safe_load((root / "etc/fminfra/observability/prometheus-agent.yml").read_text())
    assert {j["job_name"] for j in config["scrape_configs"]} == {"node", "dcgm"}
    Path(node["CALLS"]).write_text("")
    other = URL.replace("ws-0123", "ws-4567")
    assert _run(node, FMINFRA_REMOTE_WRITE_URL=other).returncode == 0
    calls = Path(node["CALLS"]).read_text().splitlines()
    assert not any(c.startswith("curl ") for c in calls), "releases already installed are not downloaded again"
    assert yaml.safe_load((root / "etc/fminfra/observability/prometheus-agent.yml").read_text())["remote_write"][0]["url"] == other


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"FMINFRA_REMOTE_WRITE_URL": ""}, "set FMINFRA_REMOTE_WRITE_URL"),
        (
            {"FMINFRA_REMOTE_WRITE_URL": "http://example.com/api/v1/remote_write"},
            "FMINFRA_REMOTE_WRITE_URL must be https://.../remote_write",
        ),
        ({"FMINFRA_AWS_REGION": "oregon"}, "FMINFRA_AWS_REGION must be a region such as us-west-2, got oregon"),
        ({"FMINFRA_NODE_KIND": "head"}, "FMINFRA_NODE_KIND must be worker, controller or login, got head"),
        ({"FMINFRA_SCRAPE_INTERVAL_SECONDS": "1"}, "FMINFRA_SCRAPE_INTERVAL_SECONDS must be 5 to 300, got 1"),
    ],
)
def test_bad_settings_fail_with_one_clear_line(node: dict[str, str], extra: dict[str, str], message: str) -> None:
    result = _run(node, **extra)
    assert result.returncode != 0 and message in result.stderr
    assert not (Path(node["FMINFRA_ROOT"]) / "var/lib/fminfra/install_exporters.done").exists()


def test_a_tampered_release_is_rejected(node: dict[str, str], tmp_path: Path) -> None:
    tarball = next((tmp_path / "releases" / "node_exporter").glob("*/*.tar.gz"))
    tarball.write_bytes(tarball.read_bytes() + b"tampered")
    result = _run(node)
    assert result.returncode != 0 and "checksum mismatch" in result.stderr


def _promtool_check_metrics(text: str) -> None:
    """The exposition format parses; the only lint allowed is the missing _total suffix, since the
    names are the amazonefa collector's (which the rules and dashboards query)."""
    result = subprocess.run(
        [shutil.which("promtool") or "promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    lint_only = all('counter metrics should have "_total" suffix' in line for line in problems)
    assert result.returncode == 0 or (result.returncode == 3 and lint_only), problems


def test_efa_counters_become_node_amazonefa_metrics(tmp_path: Path) -> None:
    for device, value in (("rdmap16s27", "123"), ("rdmap32s27", "7")):
        counters = tmp_path / "sys" / "class" / "infiniband" / device / "ports" / "1" / "hw_counters"
        counters.mkdir(parents=True)
        (counters / "rx_drops").write_text(f"{value}\n")
        (counters / "rdma_read_wr_err").write_text("0\n")
        (counters / "unrelated").write_text("5\n")
    out = tmp_path / "textfile"
    env = {**os.environ, "SYSFS_ROOT": str(tmp_path / "sys"), "TEXTFILE_DIR": str(out)}
    for _ in range(2):
        subprocess.run(["bash", str(COLLECT), "efa"], env=env, check=True)
    text = (out / "efa.prom").read_text()
    assert 'node_amazonefa_rx_drops{device="rdmap16s27",port="1"} 123' in text
    assert 'node_amazonefa_rx_drops{device="rdmap32s27",port="1"} 7' in text
    assert 'node_amazonefa_info{device="rdmap32s27"} 1' in text
    assert "unrelated" not in text
    assert [p.name for p in out.iterdir()] == ["efa.prom"]
    _promtool_check_metrics(text)


def test_slurm_states_become_slurm_nodes_metrics(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # n3 is listed in two partitions: counted once. Suffixes (* ~ $) are flags, not states.
    _executable(
        bin_dir / "sinfo", "#!/bin/sh\nprintf 'n1 allocated\\nn2 drained*\\nn3 idle~\\nn3 idle~\\nn4 draining\\nn5 down$\\nn6 mixed\\n'\n"
    )
    _executable(bin_dir / "squeue", "#!/bin/sh\nprintf 'RUNNING\\nRUNNING\\nPENDING\\nCOMPLETING\\n'\n")
    out = tmp_path / "textfile"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TEXTFILE_DIR": str(out)}
    subprocess.run(["bash", str(COLLECT), "slurm"], env=env, check=True)
    text = (out / "slurm.prom").read_text()
    values = dict(line.split() for line in text.splitlines() if not line.startswith("#"))
    assert values["slurm_nodes_alloc"] == "1" and values["slurm_nodes_drain"] == "2" and values["slurm_nodes_idle"] == "1"
    assert values["slurm_nodes_down"] == "1" and values["slurm_nodes_mix"] == "1" and values["slurm_nodes_fail"] == "0"
    assert values["slurm_queue_running"] == "2" and values["slurm_queue_pending"] == "1"
    _promtool_check_metrics(text)


def test_collectors_emit_only_metric_names_the_rules_know() -> None:
    from fminfra.observability import exporter_metrics

    text = COLLECT.read_text()
    efa = text.split("EFA_COUNTERS=(")[1].split(")")[0].split()
    states = text.split("SLURM_STATES=(")[1].split(")")[0].split()
    known = set(exporter_metrics()["node"]) | set(exporter_metrics()["slurm"])
    used_by_rules = {f"node_amazonefa_{c}" for c in efa} | {f"slurm_nodes_{s}" for s in states}
    listed = {m for m in known if m.startswith(("node_amazonefa_", "slurm_nodes_")) and m != "node_amazonefa_info"}
    assert listed <= used_by_rules, listed - used_by_rules
