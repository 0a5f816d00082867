"""Lifecycle scripts: run on_create.sh on the parameters the config generates, with
fake system commands on PATH, twice; and the publishing construct's versioned prefix."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest

from fminfra.config import load_config
from fminfra.constructs.lifecycle_scripts import LifecycleScripts, LifecycleScriptsProps, lifecycle_bucket_name
from fminfra.core.errors import ValidationError
from fminfra.stacks.compute.clusters import FsxMount, provisioning_parameters
from tests.conftest import ROOT

LIFECYCLE = ROOT / "scripts" / "lifecycle"
NODE_IP = "10.0.64.12"
FAKES = {
    # every fake logs its name and arguments, one call a line
    "mount": "",
    "systemctl": "",
    "curl": 'while [[ $# -gt 0 ]]; do if [[ $1 == -o ]]; then touch "$2"; fi; shift; done',
    "apt-get": "",
    "dpkg": "echo amd64",
    "git": 'mkdir -p "${@: -1}"',
    "make": "",
    "hostname": f"echo {NODE_IP} 172.17.0.1",
    "mountpoint": 'exit "$(cat "$FAKE_LOG.mounted" 2>/dev/null || echo 1)"',
}


def _fake_bin(tmp: Path, with_enroot: bool) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    names = dict(FAKES)
    if with_enroot:
        names["enroot"] = ""
    for name, body in names.items():
        path = bin_dir / name
        path.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >> "$FAKE_LOG"\n{body}\n')
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _node(tmp: Path, params: dict, groups: list[str], this_group: str, *, with_enroot: bool = True) -> tuple[Path, dict[str, str]]:
    """A published tree (scripts + parameters + fake bootstrap/exporters) and the environment."""
    published = tmp / "published"
    shutil.copytree(LIFECYCLE, published)
    (published / "provisioning_parameters.json").write_text(json.dumps(params))
    for rel, extra in (
        ("node/bootstrap.sh", ""),
        (
            "observability/install_exporters.sh",
            " url=$FMINFRA_REMOTE_WRITE_URL region=$FMINFRA_AWS_REGION kind=$FMINFRA_NODE_KIND cluster=$FMINFRA_CLUSTER",
        ),
    ):
        path = published / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'#!/usr/bin/env bash\necho "{rel} $*{extra}" >> "$FAKE_LOG"\n')
        path.chmod(0o755)
    shutil.copy(ROOT / "scripts" / "node" / "versions.env", published / "node" / "versions.env")
    resource_config = {
        "InstanceGroups": [
            {"Name": g, "Instances": [{"CustomerIpAddress": NODE_IP if g == this_group else f"10.0.9.{i}"}]} for i, g in enumerate(groups)
        ]
    }
    (tmp / "resource_config.json").write_text(json.dumps(resource_config))
    plugstack = tmp / "plugstack"
    if with_enroot:
        plugstack.mkdir()
        (plugstack / "pyxis.conf").write_text("required spank_pyxis.so\n")
    env = {
        "PATH": f"{_fake_bin(tmp, with_enroot)}:{os.environ['PATH']}",
        "FAKE_LOG": str(tmp / "calls.log"),
        "RESOURCE_CONFIG": str(tmp / "resource_config.json"),
        "FSTAB": str(tmp / "fstab"),
        "STATE_DIR": str(tmp / "state"),
        "LOG_FILE": str(tmp / "lifecycle.log"),
        "PLUGSTACK_DIR": str(plugstack),
        "RETRIES": "1",
        "HOME": str(tmp),
    }
    return published, env


def _run(published: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(published / "on_create.sh")], env=env, capture_output=True, text=True, check=False, timeout=60)


def _calls(env: dict[str, str]) -> list[str]:
    log = Path(env["FAKE_LOG"])
    return log.read_text().splitlines() if log.exists() else []


FSX = FsxMount(dns_name="fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", mount_name="abcdefgh")
REMOTE_WRITE = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write"


def _params(env_name: str, tmp: Path) -> dict:
    cfg = load_config(ROOT / "config" / f"{env_name}.yaml")
    fsx = FsxMount(dns_name=FSX.dns_name, mount_name=FSX.mount_name, mount_path=str(tmp / "fsx"))
    return provisioning_parameters(cfg, fsx, REMOTE_WRITE)


def test_generated_parameters(tmp_path: Path) -> None:
    dev = load_config(ROOT / "config" / "dev.yaml")
    assert provisioning_parameters(dev) == {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "cluster_name": "fminfra-dev-hyperpod",
        "region": "us-west-2",
        "controller_group": "controller",
        "login_group": "login",
        "worker_groups": [{"instance_group_name": "workers", "partition_name": "workers"}],
    }
    params = _params("dev", tmp_path)
    assert (params["fsx_dns_name"], params["fsx_mountname"], params["fsx_mount_path"]) == (
        FSX.dns_name,
        FSX.mount_name,
        str(tmp_path / "fsx"),
    )
    staging = load_config(ROOT / "config" / "staging.yaml")
    assert provisioning_parameters(staging) == {
        "version": "1.0.0",
        "workload_manager": "eks",
        "cluster_name": "fminfra-staging-hyperpod",
        "region": "us-west-2",
    }


@pytest.mark.parametrize(
    ("group", "daemon"),
    [("workers", "systemctl enable --now slurmd"), ("controller", "systemctl enable --now slurmctld"), ("login", None)],
)
def test_slurm_node_reads_its_parameters_and_is_idempotent(tmp_path: Path, group: str, daemon: str | None) -> None:
    params = _params("dev", tmp_path)
    published, env = _node(tmp_path, params, ["controller", "login", "workers"], group)
    first = _run(published, env)
    assert first.returncode == 0, first.stderr
    calls = _calls(env)
    assert f"mount -t lustre -o noatime,flock {FSX.dns_name}@tcp:/{FSX.mount_name} {tmp_path / 'fsx'}" in calls
    assert [c for c in calls if c.startswith("systemctl")] == ([daemon] if daemon else [])
    assert "node/bootstrap.sh --verify" in calls
    kind = {"workers": "worker", "controller": "controller", "login": "login"}[group]
    assert f"observability/install_exporters.sh  url={REMOTE_WRITE} region=us-west-2 kind={kind} cluster=fminfra-dev-hyperpod" in calls
    assert not any(c.startswith(("curl", "git", "apt-get")) for c in calls)  # enroot and pyxis present
    fstab = (tmp_path / "fstab").read_text().splitlines()
    assert fstab == [
        f"{FSX.dns_name}@tcp:/{FSX.mount_name} {tmp_path / 'fsx'} lustre defaults,noatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service 0 0"
    ]
    role = {"workers": "compute", "controller": "controller", "login": "login"}[group]
    assert f"Slurm role {role}" in first.stderr

    Path(env["FAKE_LOG"]).unlink()
    Path(env["FAKE_LOG"] + ".mounted").write_text("0")
    second = _run(published, env)
    assert second.returncode == 0, second.stderr
    assert "already configured" in second.stderr
    assert not any(c.startswith(("mount ", "systemctl")) for c in _calls(env))
    assert (tmp_path / "fstab").read_text().splitlines() == fstab


def test_prod_without_fsx_skips_the_mount(tmp_path: Path) -> None:
    prod = load_config(ROOT / "config" / "prod.yaml")
    published, env = _node(tmp_path, provisioning_parameters(prod), ["controller", "login", "workers"], "workers")
    result = _run(published, env)
    assert result.returncode == 0, result.stderr
    assert "no FSx file system in the parameters" in result.stderr
    assert "no prometheus_remote_write_url in the parameters; skipping the exporters" in result.stderr
    assert not any(c.startswith(("mount ", "observability/")) for c in _calls(env))
    assert "systemctl enable --now slurmd" in _calls(env)


def test_unknown_group_fails(tmp_path: Path) -> None:
    published, env = _node(tmp_path, _params("dev", tmp_path), ["controller", "stray"], "stray")
    result = _run(published, env)
    assert result.returncode != 0
    assert "instance group stray is neither the controller, the login nor a worker group" in result.stderr
    assert not (tmp_path / "state" / "done").exists()


def test_eks_node_does_no_slurm_work(tmp_path: Path) -> None:
    staging = load_config(ROOT / "config" / "staging.yaml")
    published, env = _node(tmp_path, provisioning_parameters(staging), ["workers"], "workers")
    result = _run(published, env)
    assert result.returncode == 0, result.stderr
    calls = _calls(env)
    assert not any(c.startswith(("systemctl", "mount ", "observability/")) for c in calls)
    assert "node/bootstrap.sh --verify" in calls


def test_containers_installed_at_manifest_versions_when_missing(tmp_path: Path) -> None:
    from fminfra.core.versions import version

    published, env = _node(tmp_path, _params("dev", tmp_path), ["controller", "workers"], "workers", with_enroot=False)
    result = _run(published, env)
    assert result.returncode == 0, result.stderr
    calls = _calls(env)
    enroot, pyxis = version("ENROOT_VERSION"), version("PYXIS_VERSION")
    assert any(f"/v{enroot}/enroot_{enroot}-1_amd64.deb" in c for c in calls if c.startswith("curl"))
    assert any(f"--branch v{pyxis} " in c for c in calls if c.startswith("git clone"))
    assert (tmp_path / "plugstack" / "pyxis.conf").exists()


def test_missing_bootstrap_is_skipped(tmp_path: Path) -> None:
    published, env = _node(tmp_path, _params("dev", tmp_path), ["controller", "workers"], "workers")
    (published / "node" / "bootstrap.sh").unlink()
    result = _run(published, env)
    assert result.returncode == 0, result.stderr
    assert "bootstrap.sh not published; skipping" in result.stderr


def test_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(os.sys.executable).with_name("shellcheck"))
    result = subprocess.run([shellcheck, *map(str, sorted(LIFECYCLE.glob("*.sh")))], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


# --------------------------------------------------------------------------------------------
# publishing


def _publish(folder: Path, name: str = "sagemaker-fminfra-t-0123") -> LifecycleScripts:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="111111111111", region="us-west-2"))
    return LifecycleScripts(stack, "L", LifecycleScriptsProps(bucket_name=name, folders={"": folder}, parameters={"a": "b"}))


def test_a_script_change_changes_the_uri(tmp_path: Path) -> None:
    folder = tmp_path / "scripts"
    shutil.copytree(LIFECYCLE, folder)
    before = _publish(folder).source_s3_uri
    assert before == _publish(folder).source_s3_uri
    assert before.startswith("s3://sagemaker-fminfra-t-0123/lifecycle/") and before.endswith("/")
    with (folder / "on_create.sh").open("a") as f:
        f.write("# changed\n")
    assert _publish(folder).source_s3_uri != before


def test_bucket_name_rules(tmp_path: Path) -> None:
    name = lifecycle_bucket_name("dev", "111111111111", "us-west-2")
    assert name.startswith("sagemaker-fminfra-dev-") and len(name) <= 63
    assert name != lifecycle_bucket_name("dev", "111111111111", "us-east-1")
    assert name != lifecycle_bucket_name("dev", "222222222222", "us-west-2")
    with pytest.raises(ValidationError, match=r"^bucket_name must start with 'sagemaker-'"):
        _publish(LIFECYCLE, name="fminfra-dev-scripts")
