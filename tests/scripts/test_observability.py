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
COLLECT_EFA = SCRIPTS / "collect_efa.sh"
# The system tools the install uses; the fake node's PATH holds only these and the fakes, so a
# docker or apt-get of the machine running the tests cannot leak in.
SYSTEM_TOOLS = (
    "bash",
    "sh",
    "env",
    "grep",
    "sed",
    "tar",
    "gzip",
    "mktemp",
    "mv",
    "cp",
    "install",
    "cat",
    "cut",
    "date",
    "mkdir",
    "uname",
    "hostname",
    "dirname",
    "sleep",
    "sha256sum",
    "chmod",
    "rm",
    "ls",
    "head",
    "tail",
    "tr",
    "basename",
    "id",
    "readlink",
    "sort",
    "touch",
    "printf",
    "wc",
    "awk",
)
URL = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123/api/v1/remote_write"
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck") or str(ROOT / ".venv" / "bin" / "shellcheck")
    result = subprocess.run([shellcheck, str(INSTALL), str(COLLECT), str(COLLECT_EFA)], capture_output=True, text=True, check=False)
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
    """A fake node: fake curl (serving fake releases), systemctl, docker, the NVIDIA container
    toolkit's hook, nvidia-smi, sinfo; the system's own tools through a folder of links only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    system = tmp_path / "system"
    system.mkdir()
    for tool in SYSTEM_TOOLS:
        found = shutil.which(tool)
        if found:
            (system / tool).symlink_to(found)
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
    for command in ("systemctl", "docker", "nvidia-container-runtime-hook"):
        _executable(bin_dir / command, f'#!/bin/sh\necho "{command} $*" >> {calls}\n')
    _executable(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3'\n")
    _executable(bin_dir / "sinfo", "#!/bin/sh\necho 'n1 idle'\n")
    (tmp_path / "root" / "sys" / "class" / "infiniband" / "rdmap16s27").mkdir(parents=True)
    return {
        "PATH": f"{bin_dir}:{system}",
        "BIN_DIR": str(bin_dir),
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
    docker = Path(node["BIN_DIR"]) / "docker"
    assert "-a :9400" in dcgm_unit and f"ExecStop={docker} stop fminfra-dcgm-exporter" in dcgm_unit
    # The container needs the Docker daemon: ordered after it and stopped with it.
    assert "After=network-online.target docker.service\n" in dcgm_unit and "Requires=docker.service\n" in dcgm_unit
    # The Slurm collection finds sinfo in /opt/slurm/bin, which systemd's default PATH lacks.
    slurm_metrics = (root / "etc/systemd/system/fminfra-slurm-metrics.service").read_text()
    assert "PATH=/opt/slurm/bin:" in slurm_metrics
    # collect_metrics.sh efa runs the EFA collector installed beside it.
    assert (root / "opt/fminfra/observability/bin/collect_efa.sh").is_file()
    assert "--web.listen-address=:8080" in (root / "etc/systemd/system/fminfra-slurm-exporter.service").read_text()

    Path(node["CALLS"]).write_text("")
    second = _run(node, FMINFRA_NODE_KIND="controller")
    assert second.returncode == 0, second.stderr
    assert "already installed with these settings" in second.stderr
    assert Path(node["CALLS"]).read_text() == ""


def test_without_docker_it_installs_the_distributions_package(node: dict[str, str]) -> None:
    """The AMI has no docker: apt-get installs docker.io (as AWS's reference lifecycle scripts install
    Docker), then the DCGM exporter starts."""
    bin_dir = Path(node["BIN_DIR"])
    (bin_dir / "docker").unlink()
    _executable(
        bin_dir / "apt-get",
        f"""#!/bin/sh
echo "apt-get $*" >> {node["CALLS"]}
case " $* " in *" install docker.io "*) printf '#!/bin/sh\\necho "docker $*" >> {node["CALLS"]}\\n' > {bin_dir}/docker; chmod +x {bin_dir}/docker ;; esac
""",
    )
    result = _run(node)
    assert result.returncode == 0, result.stderr
    calls = Path(node["CALLS"]).read_text().splitlines()
    assert any(c.startswith("apt-get") and "install docker.io" in c for c in calls)
    assert "systemctl enable --now docker.service" in calls
    assert "systemctl restart fminfra-dcgm-exporter.service" in calls


@pytest.mark.parametrize("missing", ["docker", "nvidia-container-runtime-hook"])
def test_without_docker_or_the_toolkit_the_rest_installs_and_the_gap_is_visible(node: dict[str, str], missing: str) -> None:
    """Docker absent and not installable (apt-get fails), or the NVIDIA container toolkit absent: the
    node exporter and the agent still install; the dcgm scrape job stays so ExporterDown fires."""
    bin_dir = Path(node["BIN_DIR"])
    (bin_dir / missing).unlink()
    _executable(bin_dir / "apt-get", "#!/bin/sh\necho 'E: Unable to locate package docker.io' >&2\nexit 100\n")
    result = _run(node)
    assert result.returncode == 0, result.stderr
    assert "WARNING: NVIDIA GPUs found but" in result.stderr and "the DCGM exporter is not started" in result.stderr
    calls = Path(node["CALLS"]).read_text().splitlines()
    started = {c.split()[-1] for c in calls if c.startswith("systemctl restart")}
    assert started == {"fminfra-node-exporter.service", "fminfra-node-metrics.timer", "fminfra-prometheus-agent.service"}
    root = Path(node["FMINFRA_ROOT"])
    config = yaml.safe_load((root / "etc/fminfra/observability/prometheus-agent.yml").read_text())
    assert {j["job_name"] for j in config["scrape_configs"]} == {"node", "dcgm"}
    assert not (root / "etc/systemd/system/fminfra-dcgm-exporter.service").exists()


# The NVIDIA container runtime as each image ships it. Docker registers its GPU driver only when
# nvidia-container-runtime-hook is on its PATH at start (moby/moby daemon/nvidia_linux.go, init:
# exec.LookPath("nvidia-container-runtime-hook")); NVIDIA's packaging puts the hook in
# nvidia-container-toolkit alone and nvidia-ctk, nvidia-container-runtime and nvidia-cdi-hook in
# nvidia-container-toolkit-base (NVIDIA/nvidia-container-toolkit packaging/debian/*.install and
# packaging/rpm/SPECS/nvidia-container-toolkit.spec): docs/facts/observability.md#docker-nvidia-gpu-driver-hook,
# #nvidia-container-toolkit-packages, #container-runtime-as-images-ship.
BASE_PACKAGE = ("nvidia-ctk", "nvidia-container-runtime", "nvidia-cdi-hook")
# The base package's version on the modelled HyperPod node: no release note publishes one; the
# version AWS's reference install_docker.sh pins when it finds none.
BASE_VERSION = "1.18.1-1"


def _runtime(node: dict[str, str], shipped: str) -> Path:
    """Dress the fake node's container runtime as an image ships it:
    - "base": the HyperPod Slurm AMI as AWS's reference install_docker.sh finds it: the package
      nvidia-container-toolkit-base (its programs and its dpkg record) and no Docker (the reference
      installs Docker there; it exits early where docker exists);
    - "full": a node after the reference's install_docker.sh: docker and nvidia-container-toolkit
      (the hook) beside the base package;
    - "none": Canonical's Ubuntu, Amazon Linux 2023, and the DLAMI as its release notes list it:
      no toolkit package and no Docker.
    Returns the bin folder."""
    bin_dir = Path(node["BIN_DIR"])
    for name in ("docker", "nvidia-container-runtime-hook"):
        (bin_dir / name).unlink(missing_ok=True)
    if shipped in ("base", "full"):
        for name in BASE_PACKAGE:
            _executable(bin_dir / name, f'#!/bin/sh\necho "{name} $*" >> {node["CALLS"]}\n')
        _executable(
            bin_dir / "dpkg-query",
            f"#!/bin/sh\ncase \"$*\" in *nvidia-container-toolkit-base*) echo 'install ok installed {BASE_VERSION}' ;; *) exit 1 ;; esac\n",
        )
    if shipped == "full":
        for name in ("docker", "nvidia-container-runtime-hook"):
            _executable(bin_dir / name, f'#!/bin/sh\necho "{name} $*" >> {node["CALLS"]}\n')
    return bin_dir


def _apt_get(node: dict[str, str], *, offers_toolkit: bool) -> None:
    """apt-get that installs docker.io and, when the node's repositories offer it,
    nvidia-container-toolkit at the base package's version (which puts the hook on PATH)."""
    bin_dir, calls = Path(node["BIN_DIR"]), node["CALLS"]
    toolkit = (
        f'*" install nvidia-container-toolkit={BASE_VERSION} "*) printf \'#!/bin/sh\\necho "nvidia-container-runtime-hook $*" >> {calls}\\n\' > {bin_dir}/nvidia-container-runtime-hook; chmod +x {bin_dir}/nvidia-container-runtime-hook ;;'
        if offers_toolkit
        else "*\" install nvidia-container-toolkit\"*) echo \"E: Version '1.18.1-1' for 'nvidia-container-toolkit' was not found\" >&2; exit 100 ;;"
    )
    _executable(
        bin_dir / "apt-get",
        f"""#!/usr/bin/env bash
echo "apt-get $*" >> {calls}
case " $* " in
  *" install docker.io "*) printf '#!/bin/sh\\necho "docker $*" >> {calls}\\n' > {bin_dir}/docker; chmod +x {bin_dir}/docker ;;
  {toolkit}
esac
""",
    )


def _started(node: dict[str, str]) -> set[str]:
    return {c.split()[-1] for c in Path(node["CALLS"]).read_text().splitlines() if c.startswith("systemctl restart")}


def test_the_toolkits_base_package_alone_never_starts_the_exporter(node: dict[str, str]) -> None:
    """nvidia-ctk is no proof: without the hook Docker has no GPU driver and `docker run --gpus`
    fails. With no repository offering the full package, the exporter is not started."""
    _runtime(node, "base")
    _apt_get(node, offers_toolkit=False)
    result = _run(node)
    assert result.returncode == 0, result.stderr
    assert "needs nvidia-container-runtime-hook (package nvidia-container-toolkit)" in result.stderr
    assert "fminfra-dcgm-exporter.service" not in _started(node)
    assert not (Path(node["FMINFRA_ROOT"]) / "etc/systemd/system/fminfra-dcgm-exporter.service").exists()


def test_the_base_package_gets_the_full_toolkit_at_its_version_and_docker_restarts(node: dict[str, str]) -> None:
    """As AWS's reference does on HyperPod nodes: nvidia-container-toolkit at the installed base
    package's version; Docker (installed here) restarts afterwards, since dockerd looks for the hook
    only when it starts; a second run does nothing."""
    _runtime(node, "base")
    _apt_get(node, offers_toolkit=True)
    result = _run(node)
    assert result.returncode == 0, result.stderr
    calls = Path(node["CALLS"]).read_text().splitlines()
    installs = [c for c in calls if c.startswith("apt-get") and " install " in c]
    assert any(f"install nvidia-container-toolkit={BASE_VERSION}" in c for c in installs)
    restart_docker = calls.index("systemctl restart docker.service")
    assert restart_docker < calls.index("systemctl restart fminfra-dcgm-exporter.service")
    assert calls.index(next(c for c in installs if "nvidia-container-toolkit" in c)) < restart_docker
    Path(node["CALLS"]).write_text("")
    assert _run(node).returncode == 0
    assert not any(c.startswith(("apt-get", "systemctl restart")) for c in Path(node["CALLS"]).read_text().splitlines())


@pytest.mark.parametrize(("shipped", "starts"), [("full", True), ("none", False)])
def test_the_exporter_starts_where_the_image_ships_the_hook(node: dict[str, str], shipped: str, starts: bool) -> None:
    """The full toolkit: the exporter starts and Docker is left alone. None at all: nothing to
    install it at (no base package, no version of our own): a WARNING and no exporter."""
    _runtime(node, shipped)
    _apt_get(node, offers_toolkit=True)
    result = _run(node)
    assert result.returncode == 0, result.stderr
    calls = Path(node["CALLS"]).read_text().splitlines()
    assert ("fminfra-dcgm-exporter.service" in _started(node)) is starts
    assert not any("nvidia-container-toolkit" in c for c in calls if c.startswith("apt-get"))
    assert "systemctl restart docker.service" not in calls
    if not starts:
        assert "WARNING: NVIDIA GPUs found but Docker's GPU support needs nvidia-container-runtime-hook" in result.stderr


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


def _efa_sysfs(root: Path) -> None:
    """/sys/class/infiniband as the EFA driver lays it out: device counters in <dev>/hw_counters,
    port counters in <dev>/ports/1/hw_counters (docs/facts/observability.md#efa-hw-counters-sysfs).
    rdmap32s27 models an older driver without the retransmit counters."""
    for device, drops in (("rdmap16s27", "123"), ("rdmap32s27", "7")):
        base = root / "class" / "infiniband" / device
        (base / "hw_counters").mkdir(parents=True)
        (base / "hw_counters" / "cmds_err").write_text("2\n")
        (base / "hw_counters" / "submitted_cmds").write_text("900\n")
        port = base / "ports" / "1" / "hw_counters"
        port.mkdir(parents=True)
        (port / "rx_drops").write_text(f"{drops}\n")
        (port / "rdma_read_wr_err").write_text("0\n")
        (port / "unrelated").write_text("5\n")
        if device == "rdmap16s27":
            (port / "retrans_timeout_events").write_text("4\n")


SHELLS = [s for s in ("bash", "dash", "busybox") if shutil.which(s)]


@pytest.mark.parametrize("shell", SHELLS)
def test_efa_counters_at_both_levels_become_node_amazonefa_metrics(tmp_path: Path, shell: str) -> None:
    """Under bash (nodes), dash and busybox sh (the node exporter image of the EKS sidecar)."""
    _efa_sysfs(tmp_path / "sys")
    out = tmp_path / "textfile"
    env = {**os.environ, "SYSFS_ROOT": str(tmp_path / "sys"), "TEXTFILE_DIR": str(out)}
    command = [shell, "sh", str(COLLECT_EFA)] if shell == "busybox" else [shell, str(COLLECT_EFA)]
    for _ in range(2):
        subprocess.run(command, env=env, check=True)
    text = (out / "efa.prom").read_text()
    assert 'node_amazonefa_cmds_err{device="rdmap16s27"} 2' in text
    assert 'node_amazonefa_rx_drops{device="rdmap16s27",port="1"} 123' in text
    assert 'node_amazonefa_rx_drops{device="rdmap32s27",port="1"} 7' in text
    assert 'node_amazonefa_retrans_timeout_events{device="rdmap16s27",port="1"} 4' in text
    assert 'retrans_timeout_events{device="rdmap32s27"' not in text
    assert 'node_amazonefa_info{device="rdmap32s27"} 1' in text
    assert "unrelated" not in text and "submitted_cmds" not in text
    assert [p.name for p in out.iterdir()] == ["efa.prom"]
    _promtool_check_metrics(text)


def test_collect_metrics_efa_runs_the_efa_collector(tmp_path: Path) -> None:
    _efa_sysfs(tmp_path / "sys")
    out = tmp_path / "textfile"
    env = {**os.environ, "SYSFS_ROOT": str(tmp_path / "sys"), "TEXTFILE_DIR": str(out)}
    subprocess.run(["bash", str(COLLECT), "efa"], env=env, check=True)
    assert 'node_amazonefa_cmds_err{device="rdmap32s27"} 2' in (out / "efa.prom").read_text()


def test_efa_collector_rejects_a_bad_interval() -> None:
    result = subprocess.run(["sh", str(COLLECT_EFA), "--every", "soon"], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "--every takes a number of seconds, got 'soon'" in result.stderr


def test_a_failed_sinfo_writes_scrape_success_0_and_no_figures(tmp_path: Path) -> None:
    """sinfo fails (slurmctld unreachable): slurm_scrape_success 0, no slurm_nodes_* (never zeros), exit 1."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "sinfo", "#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n")
    _executable(bin_dir / "squeue", "#!/bin/sh\nprintf 'RUNNING\\n'\n")
    out = tmp_path / "textfile"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TEXTFILE_DIR": str(out)}
    result = subprocess.run(["bash", str(COLLECT), "slurm"], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    text = (out / "slurm.prom").read_text()
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == ["slurm_scrape_success 0"]
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
    assert values["slurm_scrape_success"] == "1"
    _promtool_check_metrics(text)


def test_collectors_emit_only_metric_names_the_record_lists() -> None:
    """Every name the collectors write is in exporter_metrics.yaml, and every node_amazonefa_ or
    slurm_ name listed there is written by a collector."""
    from fminfra.observability.rules import exporter_metrics

    efa_text = COLLECT_EFA.read_text()
    efa = efa_text.split('DEVICE_COUNTERS="')[1].split('"')[0].split() + efa_text.split('PORT_COUNTERS="')[1].split('"')[0].split()
    states = COLLECT.read_text().split("SLURM_STATES=(")[1].split(")")[0].split()
    written = (
        {f"node_amazonefa_{c}" for c in efa}
        | {"node_amazonefa_info", "slurm_scrape_success", "slurm_queue_running", "slurm_queue_pending"}
        | {f"slurm_nodes_{s}" for s in states}
    )
    listed = {m for names in (exporter_metrics()["node"], exporter_metrics()["slurm"]) for m in names}
    listed = {m for m in listed if m.startswith(("node_amazonefa_", "slurm_"))}
    assert listed == written, (listed - written, written - listed)
