"""Lifecycle scripts. The simulation (tests/fakes/hyperpod_fakes.py, whose docstring
says what each fake models and where from) publishes the real LifecycleScripts construct's assets
from the synthesized app to moto's S3, downloads them as HyperPod does (no mode bits) and runs
`bash on_create.sh` on every node of a Slurm cluster (CPU controller and login, two GPU groups) and
of a HyperPod EKS group, with HyperPod's resource_config.json and the generated parameters.

The defects a review found in the scripts each have a test that fails on the scripts as they were (commit 682c543):
1 CPU nodes ran the GPU verification -> test_simulated_slurm_cluster (`verify` calls by group);
2 mode bits -> every simulation test (downloaded files are 0644; the old run_if_present skipped);
3 Slurm start -> test_simulated_slurm_cluster (registration), test_controller_waits_for_slurm_conf;
4 pyxis -> test_simulated_slurm_cluster (plugstack include), test_pyxis_needs_slurm_headers;
5 fstab -> test_fsx_mount_comes_back_after_reboot; 6 exporters started with bash -> the simulation;
7 SAGEMAKER_RESOURCE_CONFIG_PATH -> every simulation test (the file is only where it points);
8 pins -> test_enroot_and_pyxis_are_pinned, test_enroot_is_the_amis_or_built_at_the_pinned_commit.
Issue 31: the GPU groups run the real node/bootstrap.sh --verify on modelled HyperPod AMIs (every
simulation test); enroot pinned by commit and adopted from the AMI (test_enroot_is_the_amis_or_built_at_the_pinned_commit),
configured on the NVMe (test_enroot_folders_are_on_the_instance_nvme_and_writable_by_every_user),
pyxis not loaded twice (test_pyxis_the_ami_loads_is_not_loaded_twice), FSx after DNS
(test_fsx_mount_waits_for_the_name_to_resolve).
test_the_fakes_catch_broken_scripts shows the fakes failing deliberately broken copies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from moto import mock_aws

from fminfra.compute.stack.clusters import FsxMount, provisioning_parameters
from fminfra.config import load_config
from fminfra.core.errors import ValidationError
from fminfra.core.versions import load_versions
from fminfra.hyperpod.constructs.lifecycle_scripts import LifecycleScripts, LifecycleScriptsProps, lifecycle_bucket_name
from tests.conftest import ROOT, Synth
from tests.fakes.hyperpod_fakes import Cluster, Node, download, prepare_download, publish, reboot
from tests.fakes.node_fakes import IMAGES

LIFECYCLE = ROOT / "scripts" / "lifecycle"
FSX_DNS = "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"
REMOTE_WRITE = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write"
# What CloudFormation imports into the parameters' markers (export name fragment -> value).
# The remote-write URL is built from the workspace id (docs/facts/observability.md#amp-remote-write-url).
IMPORTS = {"DNSName": FSX_DNS, "LustreMountName": "abcdefgh", "WorkspaceId": "ws-1"}
SLURM_GROUPS = [
    ("controller", "ml.m5.12xlarge", 1),
    ("login", "ml.m5.4xlarge", 1),
    ("p5", "ml.p5.48xlarge", 2),
    ("p4d", "ml.p4d.24xlarge", 1),
]


def test_generated_parameters() -> None:
    dev = load_config(ROOT / "config" / "dev.yaml")
    assert provisioning_parameters(dev) == {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "cluster_name": "fminfra-dev-hyperpod",
        "region": "us-west-2",
        "gpu_groups": ["workers"],
        "controller_group": "controller",
        "login_group": "login",
        "worker_groups": [{"instance_group_name": "workers", "partition_name": "workers"}],
    }
    params = provisioning_parameters(dev, FsxMount(dns_name=FSX_DNS, mount_name="abcdefgh"), REMOTE_WRITE)
    assert (params["fsx_dns_name"], params["fsx_mountname"], params["fsx_mount_path"]) == (FSX_DNS, "abcdefgh", "/fsx")
    assert params["prometheus_remote_write_url"] == REMOTE_WRITE
    staging = load_config(ROOT / "config" / "staging.yaml")
    assert provisioning_parameters(staging) == {
        "version": "1.0.0",
        "workload_manager": "eks",
        "cluster_name": "fminfra-staging-hyperpod",
        "region": "us-west-2",
        "gpu_groups": ["workers"],
    }


def test_training_plan_groups_get_their_plan_and_drain() -> None:
    """On Slurm, each training-plan group's nodes learn their plan and drain
    (scripts/node/drain_before_plan_end.sh through on_create.sh); other groups get none."""
    prod = load_config(ROOT / "config" / "prod.yaml")
    (group,) = [g for g in prod.compute.instance_groups if g.capacity.type == "training-plan"]
    assert provisioning_parameters(prod)["plan_drains"] == {
        group.name: {"training_plan_arn": group.capacity.training_plan_arn, "drain_seconds": 600}
    }
    longer = prod.model_copy(deep=True)
    longer.compute.instance_groups[0].capacity.drain_minutes = 45
    assert provisioning_parameters(longer)["plan_drains"][group.name]["drain_seconds"] == 45 * 60
    assert "plan_drains" not in provisioning_parameters(load_config(ROOT / "config" / "dev.yaml"))


def test_cluster_info_plan(tmp_path: Path) -> None:
    arn = "arn:aws:sagemaker:us-east-1:333333333333:training-plan/p"
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"plan_drains": {"p5": {"training_plan_arn": arn, "drain_seconds": 600}}}))

    def run(group: str) -> subprocess.CompletedProcess[str]:
        command = ["python3", str(LIFECYCLE / "cluster_info.py"), str(params), "/nonexistent", "plan", group]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    assert run("p5").stdout == f"{arn} 600\n"
    assert run("p4d").stdout == "\n"
    params.write_text(json.dumps({"plan_drains": {"p5": {"training_plan_arn": arn, "drain_seconds": "ten"}}}))
    result = run("p5")
    assert (result.returncode, result.stderr.count("\n")) == (2, 1) and "plan_drains.p5" in result.stderr


# --------------------------------------------------------------------------------------------
# the simulation


@dataclass(frozen=True)
class Published:
    """moto S3 with the published lifecycle prefixes (env -> bucket, prefix), and one download of
    each (HyperPod's copy of SourceS3Uri): the bucket does not change within this module, so each
    node gets a copy of that download, the same files with the same (0644) modes."""

    s3: Any
    prefixes: dict[str, tuple[str, str]]
    downloads: dict[str, Path]


@pytest.fixture(scope="module")
def s3_published(synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    """moto S3 holding the lifecycle prefix of the two-group Slurm env and of staging (EKS)."""
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-west-2")
        envs = ("hp-two-groups", "staging")
        prefixes = {env: publish(synth.outdir, synth.template(env, "Compute"), s3, IMPORTS) for env in envs}
        base = tmp_path_factory.mktemp("lifecycle-downloads")
        yield Published(s3, prefixes, {env: download(s3, *prefixes[env], base / env) for env in envs})


def _copy_for(node: Node, s3_published: Published, env: str, *, fresh: bool = False) -> Path:
    """The scripts on the node as HyperPod leaves them: the module's download copied there, or
    (fresh) a download from the bucket of its own."""
    dest = node.root / "opt/ml/lifecycle"
    if fresh:
        scripts = download(s3_published.s3, *s3_published.prefixes[env], dest)
    else:
        scripts = Path(shutil.copytree(s3_published.downloads[env], dest))
    prepare_download(scripts)
    return scripts


def _run(cluster: Cluster, s3_published: Published, env: str = "hp-two-groups", **extra: str) -> dict[str, Path]:
    copies = {n.ip: _copy_for(n, s3_published, env) for n in cluster.nodes}
    cluster.run_each(copies, extra)
    return copies


def _verified(node: Node, instance_type: str | None) -> None:
    """The node ran the real node/bootstrap.sh --verify for its type, and it passed; or (CPU
    groups, instance_type None) never ran it."""
    stderr = _ok(node)
    if instance_type is None:
        assert "verifying this GPU node" not in stderr and not (node.root / "var/log/fminfra/bootstrap.log").exists()
    else:
        assert f"verifying this GPU node as {instance_type}" in stderr
        assert "bootstrap INFO: verify: every component the manifest names is present" in stderr, stderr[-3000:]
        assert " FAIL " not in stderr


def _ok(node: Node) -> str:
    assert node.result is not None
    assert node.result.returncode == 0, f"{node.group} {node.ip}:\n{node.result.stderr}"
    return node.result.stderr


def test_downloaded_scripts_have_no_mode_bits(s3_published: Any, tmp_path: Path) -> None:
    (node,) = Cluster(tmp_path, [("p5", "ml.p5.48xlarge", 1)]).nodes
    scripts = _copy_for(node, s3_published, "hp-two-groups", fresh=True)
    files = [p for p in scripts.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {
        "on_create.sh",
        "start_slurm.sh",
        "mount_fsx.sh",
        "setup_containers.sh",
        "cluster_info.py",
        "provisioning_parameters.json",
    }
    assert all(p.stat().st_mode & 0o111 == 0 for p in files)
    # What the other tests run: a copy of the module's one download, file for file the same.
    (other,) = Cluster(tmp_path / "copy", [("p5", "ml.p5.48xlarge", 1)]).nodes
    copy = _copy_for(other, s3_published, "hp-two-groups")
    copied = {p.relative_to(copy): (p.read_bytes(), p.stat().st_mode) for p in copy.rglob("*") if p.is_file()}
    assert copied == {p.relative_to(scripts): (p.read_bytes(), p.stat().st_mode) for p in files}


def test_simulated_slurm_cluster(s3_published: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, SLURM_GROUPS)
    _run(cluster, s3_published)
    for node in cluster.nodes:
        _ok(node)
    gpu_types = {"p5": "ml.p5.48xlarge", "p4d": "ml.p4d.24xlarge"}
    kinds = {"controller": "controller", "login": "login", "p5": "worker", "p4d": "worker"}
    for node in cluster.nodes:
        # 1: GPU verification on the GPU groups only, for their own instance type: the real
        # bootstrap.sh --verify on the modelled HyperPod AMI (issue #31), which passes
        _verified(node, gpu_types.get(node.group))
        # 6: exporters on every Slurm node, started with bash, with the role's kind
        assert [c for c in node.calls if c.startswith("install_exporters.sh")] == [
            f"install_exporters.sh  kind={kinds[node.group]} url={REMOTE_WRITE}"
        ]
        # 5: FSx mounted now
        assert f"mount -t lustre -o noatime,flock {FSX_DNS}@tcp:/abcdefgh {node.root}/fsx" in node.calls
        # 6: the training-plan group's nodes (p4d) drain before the plan ends; no other node does
        unit = node.root / "etc/systemd/system/fminfra-plan-drain.service"
        assert unit.is_file() == (node.group == "p4d"), node.group
        if node.group == "p4d":
            settings = (node.root / "etc/fminfra/plan-drain.env").read_text().splitlines()
            assert "FMINFRA_PLAN_ARN=arn:aws:sagemaker:us-west-2:666666666666:training-plan/hp-two-groups-p4d" in settings
            assert "FMINFRA_PLAN_DRAIN_SECONDS=1200" in settings and "FMINFRA_AWS_REGION=us-west-2" in settings
            # the group's instance type picks its reserved capacities; the unit runs a copy that
            # outlives the lifecycle folder, with /opt/slurm/bin on its PATH
            assert "FMINFRA_INSTANCE_TYPE=ml.p4d.24xlarge" in settings
            persistent = node.root / "opt/fminfra/node/drain_before_plan_end.sh"
            assert f"ExecStart=/usr/bin/env bash {persistent} watch" in unit.read_text() and persistent.is_file()
            assert "Environment=PATH=/opt/slurm/bin:" in unit.read_text()
    # 3: the controller started slurmctld once slurm.conf named it; every GPU node registered configless
    controller = cluster.node("controller")
    (ctld,) = [e for e in cluster.events() if e["daemon"] == "slurmctld"]
    assert ctld["up"] and ctld["ip"] == controller.ip
    assert cluster.registered(["p5", "p4d"]) == {n.ip for n in cluster.nodes if n.group in gpu_types}
    login_slurmd = [e for e in cluster.events() if e["daemon"] == "slurmd" and e["ip"] == cluster.node("login").ip]
    assert [e["conf_server"] for e in login_slurmd] == [controller.ip]
    assert not any(e["daemon"] == "slurmd" and e["ip"] == controller.ip for e in cluster.events())
    # 4: pyxis built against /opt/slurm/include and included explicitly in plugstack.conf
    assert "include /opt/slurm/etc/plugstack.conf.d/pyxis.conf" in ctld["plugstack"].splitlines()
    assert (controller.root / "opt/slurm/etc/plugstack.conf.d/pyxis.conf").read_text() == "required /usr/local/lib/slurm/spank_pyxis.so\n"


def test_simulated_cluster_second_run_changes_nothing(s3_published: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, SLURM_GROUPS[:3])
    copies = _run(cluster, s3_published)
    fstabs = {n.ip: (n.root / "etc/fstab").read_text() for n in cluster.nodes}
    for node in cluster.nodes:
        _ok(node)
        (node.root / "calls.log").unlink()
    cluster.run_each(copies, {})
    for node in cluster.nodes:
        assert "already configured with these scripts" in _ok(node)
        assert not any(c.startswith(("mount ", "systemctl enable", "bootstrap.sh")) for c in node.calls)
        assert (node.root / "etc/fstab").read_text() == fstabs[node.ip]
    # a new version of the scripts (UpdateClusterSoftware) runs the steps again, changing nothing twice
    node = cluster.node("p5")
    with (copies[node.ip] / "provisioning_parameters.json").open("a") as f:
        f.write("\n")
    cluster.run_each({node.ip: copies[node.ip]}, {})
    assert "already configured" not in _ok(node)
    _verified(node, "ml.p5.48xlarge")
    assert (node.root / "etc/fstab").read_text() == fstabs[node.ip]


@pytest.mark.parametrize("image", [i for i in IMAGES if i.startswith("hyperpod-eks-")])
def test_simulated_eks_node_group(s3_published: Any, tmp_path: Path, image: str) -> None:
    """A HyperPod EKS group on the AL2023 HyperPod AMI, in each form its release notes leave open."""
    cluster = Cluster(tmp_path, [("workers", "ml.p5en.48xlarge", 2)], images={"workers": image})
    _run(cluster, s3_published, env="staging")
    for node in cluster.nodes:
        _verified(node, "ml.p5en.48xlarge")
        assert f"mount -t lustre -o noatime,flock {FSX_DNS}@tcp:/abcdefgh {node.root}/fsx" in node.calls  # staging has FSx
        assert not any(c.startswith(("systemctl enable", "git ", "install_exporters.sh")) for c in node.calls)
    assert cluster.events() == []


def test_fsx_mount_comes_back_after_reboot(s3_published: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, [("controller", "ml.m5.12xlarge", 1)])
    _run(cluster, s3_published)
    (node,) = cluster.nodes
    _ok(node)
    entries = [line for line in (node.root / "etc/fstab").read_text().splitlines() if "lustre" in line]
    assert entries == [
        f"{FSX_DNS}@tcp:/abcdefgh /fsx lustre defaults,noatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target 0 0"
    ]
    assert reboot(node) == ["/fsx"]
    # the fake's model: the old entry (requiring network.service, absent on Ubuntu) does not come back
    (node.root / "etc/fstab").write_text(entries[0].replace("network-online.target", "network.service") + "\n")
    assert reboot(node) == []


def test_controller_waits_for_slurm_conf(s3_published: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, [("controller", "ml.m5.12xlarge", 1)], slurm_conf_delay=1.5)
    _run(cluster, s3_published)
    (node,) = cluster.nodes
    _ok(node)
    (ctld,) = [e for e in cluster.events() if e["daemon"] == "slurmctld"]
    assert ctld["up"]
    never = Cluster(tmp_path / "never", [("controller", "ml.m5.12xlarge", 1)], slurm_conf_delay=30)
    _run(never, s3_published, SLURM_CONF_TIMEOUT="1")
    (node,) = never.nodes
    assert node.result is not None and node.result.returncode == 1
    assert f"does not name the controller ({node.ip}) after 1s; HyperPod has not configured Slurm" in node.result.stderr
    assert not any(c.startswith("systemctl enable --now slurmctld") for c in node.calls)
    assert not (node.root / "var/lib/fminfra/lifecycle/done").exists()


def test_slurm_conf_must_name_the_controller_address_whole(tmp_path: Path) -> None:
    """10.0.0.1 is not the controller of a slurm.conf naming 10.0.0.12."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=ip-10-0-0-12(10.0.0.12)\n")
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(conf), "SLURM_CONF_TIMEOUT": "0", "FMINFRA_ROOT": str(tmp_path)}
    run = subprocess.run(
        ["bash", str(LIFECYCLE / "start_slurm.sh"), "controller", "10.0.0.1"], env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 1 and "does not name the controller (10.0.0.1)" in run.stderr


def test_resource_config_path(s3_published: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, [("p5", "ml.p5.48xlarge", 1)])
    (node,) = cluster.nodes
    missing = str(node.root / "nowhere.json")
    _run(cluster, s3_published, SAGEMAKER_RESOURCE_CONFIG_PATH=missing)
    assert node.result is not None and node.result.returncode == 1
    assert f"SAGEMAKER_RESOURCE_CONFIG_PATH={missing}: no such file" in node.result.stderr


def test_pyxis_needs_slurm_headers(s3_published: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, [("p5", "ml.p5.48xlarge", 1)])
    (node,) = cluster.nodes
    (node.root / "opt/slurm/include/slurm/spank.h").unlink()
    _run(cluster, s3_published)
    assert node.result is not None and node.result.returncode != 0
    assert "slurm/spank.h: No such file or directory" in node.result.stderr


def _stderr(node: Node) -> str:
    assert node.result is not None
    return node.result.stderr


def _broken(scripts: Path, rel: str, old: str, new: str) -> None:
    path = scripts / rel
    text = path.read_text()
    assert old in text, f"{rel} no longer holds {old!r}"
    path.write_text(text.replace(old, new))


def test_the_fakes_catch_broken_scripts(s3_published: Any, tmp_path: Path) -> None:
    """Tests of the test: the simulation fails deliberately broken copies of the scripts."""
    groups = [("controller", "ml.m5.12xlarge", 1), ("p5", "ml.p5.48xlarge", 1)]
    # slurmd.service edited but systemd not reloaded: slurmd starts without --conf-server and exits
    cluster = Cluster(tmp_path / "reload", groups)
    copies = {n.ip: _copy_for(n, s3_published, "hp-two-groups") for n in cluster.nodes}
    _broken(copies[cluster.node("p5").ip], "start_slurm.sh", "        systemctl daemon-reload\n", "")
    cluster.run_each(copies, {})
    node = cluster.node("p5")
    assert node.result is not None and node.result.returncode == 1
    assert "changed on disk. Run 'systemctl daemon-reload'" in node.result.stderr
    assert "slurmd is not running after start" in node.result.stderr
    assert cluster.registered(["p5"]) == set()
    # pyxis built with CPPFLAGS lacking Slurm's include path
    cluster = Cluster(tmp_path / "cppflags", groups)
    copies = {n.ip: _copy_for(n, s3_published, "hp-two-groups") for n in cluster.nodes}
    _broken(
        copies[cluster.node("p5").ip], "setup_containers.sh", 'CPPFLAGS="-I $ROOT$SLURM_DIR/include" make -C "$src"\n', 'make -C "$src"\n'
    )
    cluster.run_each({cluster.node("p5").ip: copies[cluster.node("p5").ip]}, {})
    assert "slurm/spank.h: No such file or directory" in _stderr(cluster.node("p5"))
    # the controller started before HyperPod wrote slurm.conf: slurmctld exits
    cluster = Cluster(tmp_path / "early", groups[:1], slurm_conf_delay=5)
    copies = {n.ip: _copy_for(n, s3_published, "hp-two-groups") for n in cluster.nodes}
    _broken(copies[cluster.nodes[0].ip], "start_slurm.sh", "\nwait_for_slurm_conf\n", "\n")
    cluster.run_each(copies, {})
    assert "slurmctld is not running after start" in _stderr(cluster.nodes[0])


def test_node_without_resource_config(s3_published: Any, tmp_path: Path) -> None:
    """No SAGEMAKER_RESOURCE_CONFIG_PATH and no default file: a Slurm node cannot tell its role;
    an EKS node (all of fminfra's HyperPod EKS groups are GPU groups) verifies the type from
    instance metadata."""
    for env, message in (("hp-two-groups", "cannot tell this node's Slurm role"), ("staging", "done")):
        cluster = Cluster(tmp_path / env, [("workers", "ml.p5en.48xlarge", 1)])
        (node,) = cluster.nodes
        node.env.pop("SAGEMAKER_RESOURCE_CONFIG_PATH")
        copies = {node.ip: _copy_for(node, s3_published, env)}
        cluster.run_each(copies, {})
        assert node.result is not None and message in node.result.stderr
        if env == "staging":
            assert "verifying this GPU node (instance type from instance metadata)" in node.result.stderr
            assert "verify: every component the manifest names is present" in node.result.stderr
        else:
            assert node.result.returncode == 1


def test_enroot_and_pyxis_are_pinned() -> None:
    """Issue #31: enroot is pinned by a commit, no enroot key is empty, and the enroot the lifecycle
    builds or adopts is one the acceptance image's digest needs (ENROOT_MIN_VERSION)."""
    versions = load_versions()
    assert versions["PYXIS_COMMIT"] == "424563865a491f2d8f3c396a095d18db81f1fb07"
    enroot = {k: v for k, v in versions.items() if k.startswith("ENROOT_")}
    assert set(enroot) == {"ENROOT_VERSION", "ENROOT_COMMIT", "ENROOT_MIN_VERSION"}
    assert all(enroot.values()), enroot
    assert re.fullmatch(r"[0-9a-f]{40}", enroot["ENROOT_COMMIT"])
    as_tuple = [tuple(int(p) for p in enroot[k].split(".")) for k in ("ENROOT_VERSION", "ENROOT_MIN_VERSION")]
    assert as_tuple[0] >= as_tuple[1] >= (4, 0, 0)


def _with_manifest(scripts: Path, **values: str) -> None:
    path = scripts / "node" / "versions.env"
    text = path.read_text()
    for key, value in values.items():
        text = re.sub(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
    path.write_text(text)


@pytest.mark.parametrize(
    ("ami_enroot", "values", "code", "message"),
    [
        ("4.1.1", {}, 0, "enroot 4.1.1 present"),  # the AMI's, at or above the minimum: adopted
        ("3.5.0", {}, 0, "enroot 4.1.2 built at bd51f53b6fa954805ae3e1985c5dc7594ff66d05"),
        ("", {}, 0, "enroot 4.1.2 built at bd51f53b6fa954805ae3e1985c5dc7594ff66d05"),
        (
            "",
            {"ENROOT_COMMIT": "2" * 40},
            1,
            "enroot v4.1.2 is commit bd51f53b6fa954805ae3e1985c5dc7594ff66d05, not ENROOT_COMMIT=" + "2" * 40,
        ),
        ("", {"ENROOT_COMMIT": ""}, 1, "ENROOT_COMMIT is empty or missing"),
        ("4.1.1", {"PYXIS_COMMIT": "1" * 40}, 1, "not PYXIS_COMMIT=" + "1" * 40),
    ],
)
def test_enroot_is_the_amis_or_built_at_the_pinned_commit(
    s3_published: Any, tmp_path: Path, ami_enroot: str, values: dict[str, str], code: int, message: str
) -> None:
    """Defect 2: an AMI's enroot that meets ENROOT_MIN_VERSION is kept; an older one, or none, is
    replaced by enroot built from source at the tag, checked to be ENROOT_COMMIT, with its submodules."""
    cluster = Cluster(tmp_path, [("controller", "ml.m5.12xlarge", 1), ("p5", "ml.p5.48xlarge", 1)], enroot=ami_enroot)
    node = cluster.node("p5")
    scripts = _copy_for(node, s3_published, "hp-two-groups")
    _with_manifest(scripts, **values)
    cluster.run_each({node.ip: scripts}, {})
    assert node.result is not None and node.result.returncode == code, node.result.stderr[-3000:]
    assert message in node.result.stderr, node.result.stderr[-3000:]
    clones = [c for c in node.calls if c.startswith("git clone") and "NVIDIA/enroot.git" in c]
    if "built at" in message:
        assert clones == [
            f"git clone --quiet --branch v4.1.2 --recurse-submodules https://github.com/NVIDIA/enroot.git {node.root}/tmp/fminfra-containers/enroot"
        ]
        assert any(c.startswith("make -C") and c.endswith(f"setcap DESTDIR={node.root}") for c in node.calls)
        installs = [i for i, c in enumerate(node.calls) if c.startswith("apt-get") and " libcap2-bin " in c and " squashfs-tools " in c]
        updates = [i for i, c in enumerate(node.calls) if c.startswith("apt-get") and c.split()[-1] == "update"]
        # Unconfirmed 4: the package lists are refreshed before the install (a fresh AMI's may be stale).
        assert installs and updates and updates[0] < installs[0], node.calls
    elif code == 0:
        assert clones == []


@pytest.mark.parametrize(("mounted", "base"), [("/opt/dlami/nvme", "/opt/dlami/nvme"), ("/opt/sagemaker", "/opt/sagemaker")])
def test_enroot_folders_are_on_the_instance_nvme_and_writable_by_every_user(
    s3_published: Any, tmp_path: Path, mounted: str, base: str
) -> None:
    """Defect 3: enroot's runtime, data, cache and temporary folders on the NVMe (the DLAMI's
    /opt/dlami/nvme, else /opt/sagemaker), mode 1777, so that non-root jobs do not fail on
    /run/user/<uid>; a key the image's own enroot.conf sets is kept."""
    cluster = Cluster(tmp_path, [("controller", "ml.m5.12xlarge", 1), ("p5", "ml.p5.48xlarge", 1)])
    node = cluster.node("p5")
    (node.root / mounted.lstrip("/")).mkdir(parents=True)
    (node.root / "proc/mounts").write_text(f"/dev/nvme1n1 {node.root}{mounted} ext4 rw 0 0\n")
    (node.root / "etc/enroot").mkdir(parents=True)
    (node.root / "etc/enroot/enroot.conf").write_text("#ENROOT_RUNTIME_PATH ${XDG_RUNTIME_DIR}/enroot\nENROOT_CACHE_PATH /fsx/enroot\n")
    _run(cluster, s3_published)
    stderr = _ok(node)
    _ok(cluster.node("controller"))
    dropin = (node.root / "etc/enroot/enroot.conf.d/fminfra-paths.conf").read_text()
    assert f"ENROOT_RUNTIME_PATH {base}/tmp/enroot/user-$(id -u)\n" in dropin
    assert f"ENROOT_DATA_PATH {base}/tmp/enroot/data/user-$(id -u)\n" in dropin
    assert f"ENROOT_TEMP_PATH {base}/tmp\n" in dropin
    # node read C1: containers' root filesystem writable, as AWS's reference sets it (enroot's default is false)
    assert "ENROOT_ROOTFS_WRITABLE yes\n" in dropin
    assert "ENROOT_CACHE_PATH" not in dropin and "ENROOT_CACHE_PATH is set in the image's /etc/enroot/enroot.conf; kept" in stderr
    for folder in ("tmp", "tmp/enroot", "tmp/enroot/data", "enroot"):
        assert (node.root / base.lstrip("/") / folder).stat().st_mode & 0o7777 == 0o1777, folder


@pytest.mark.parametrize(
    "plugstack",
    [
        {"opt/slurm/etc/plugstack.conf": "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis\n"},
        {
            "opt/slurm/etc/plugstack.conf": "include /opt/slurm/etc/plugstack.conf.d/*.conf\n",
            "opt/slurm/etc/plugstack.conf.d/00-pyxis.conf": "required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so\n",
        },
    ],
)
def test_pyxis_the_ami_loads_is_not_loaded_twice(s3_published: Any, tmp_path: Path, plugstack: dict[str, str]) -> None:
    """Defect 4: the HyperPod DLAMI's plugstack.conf already loads pyxis (directly, or through an
    include); fminfra neither builds another nor adds its include (awsome-distributed-ai #1207)."""
    cluster = Cluster(tmp_path, [("controller", "ml.m5.12xlarge", 1), ("p5", "ml.p5.48xlarge", 1)])
    node = cluster.node("p5")
    for rel, text in plugstack.items():
        (node.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (node.root / rel).write_text(text)
    copies = _run(cluster, s3_published)
    assert "pyxis already loaded by the image" in _ok(node)
    assert (node.root / "opt/slurm/etc/plugstack.conf").read_text() == plugstack["opt/slurm/etc/plugstack.conf"]
    assert not any(c.startswith("git clone") and "pyxis" in c for c in node.calls)
    # An include fminfra added on an earlier run is taken out again.
    with (node.root / "opt/slurm/etc/plugstack.conf").open("a") as f:
        f.write("include /opt/slurm/etc/plugstack.conf.d/pyxis.conf\n")
    (node.root / "var/lib/fminfra/lifecycle/done").unlink()
    cluster.run_each({node.ip: copies[node.ip]}, {})
    _ok(node)
    assert (node.root / "opt/slurm/etc/plugstack.conf").read_text() == plugstack["opt/slurm/etc/plugstack.conf"]


def test_a_plugstack_without_its_last_newline(s3_published: Any, tmp_path: Path) -> None:
    """Node read B1: HyperPod's plugstack.conf may lack its final newline
    (docs/facts/hyperpod.md#hyperpod-plugstack-no-final-newline). A last line that loads pyxis is
    still seen; fminfra's include goes on a line of its own, never glued onto the image's last line
    (a `required` plugin path that does not exist would fail every job step)."""
    cluster = Cluster(tmp_path, [("controller", "ml.m5.12xlarge", 1), ("p5", "ml.p5.48xlarge", 1)])
    loaded, other = cluster.node("p5"), cluster.node("controller")
    loads, other_line = "required /usr/local/lib/slurm/spank_pyxis.so", "optional /usr/lib/x86_64-linux-gnu/slurm/spank_other.so"
    for node, text in ((loaded, loads), (other, other_line)):
        (node.root / "opt/slurm/etc").mkdir(parents=True, exist_ok=True)
        (node.root / "opt/slurm/etc/plugstack.conf").write_text(text)
    _run(cluster, s3_published)
    assert "pyxis already loaded by the image" in _ok(loaded)
    assert (loaded.root / "opt/slurm/etc/plugstack.conf").read_text() == loads
    _ok(other)
    assert (other.root / "opt/slurm/etc/plugstack.conf").read_text().splitlines() == [
        other_line,
        "include /opt/slurm/etc/plugstack.conf.d/pyxis.conf",
    ]


def test_fsx_mount_waits_for_the_name_to_resolve(s3_published: Any, tmp_path: Path) -> None:
    """Risk 6: while HyperPod's agent restarts systemd-resolved the FSx name does not resolve; the
    mount waits for it, and gives up with one clear line when it never resolves."""
    cluster = Cluster(tmp_path, [("controller", "ml.m5.12xlarge", 1)])
    (node,) = cluster.nodes
    _run(cluster, s3_published, FAKE_DNS_DOWN_CALLS="3")
    assert f"waiting for {FSX_DNS} to resolve" in _ok(node)
    assert f"mount -t lustre -o noatime,flock {FSX_DNS}@tcp:/abcdefgh {node.root}/fsx" in node.calls
    never = Cluster(tmp_path / "never", [("controller", "ml.m5.12xlarge", 1)])
    (node,) = never.nodes
    _run(never, s3_published, FAKE_DNS_DOWN_CALLS="1000", DNS_TIMEOUT="1")
    assert node.result is not None and node.result.returncode == 1
    assert f"{FSX_DNS} does not resolve after 1s" in node.result.stderr
    assert not any(c.startswith("mount ") for c in node.calls)


def test_cluster_info_bad_input(tmp_path: Path) -> None:
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"workload_manager": "slurm", "controller_group": "controller", "worker_groups": []}))
    config = tmp_path / "rc.json"
    config.write_text(json.dumps({"InstanceGroups": [{"Name": "stray", "Instances": [{"CustomerIpAddress": "10.0.0.1"}]}]}))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = ["python3", str(LIFECYCLE / "cluster_info.py"), str(params), str(config), *args]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    result = run("node", "10.0.0.1")
    assert (result.returncode, result.stderr.count("\n")) == (2, 1)
    assert "instance group 'stray' is neither controller_group, login_group nor one of worker_groups" in result.stderr
    config.write_text("{")
    result = run("node", "10.0.0.1")
    assert (result.returncode, result.stderr.strip()) == (
        2,
        f"cluster_info: {config}: not valid JSON at line 1 (HyperPod's resource config)",
    )


def test_lifecycle_never_relies_on_mode_bits() -> None:
    """Every sibling script is started through bash or python3."""
    for script in LIFECYCLE.glob("*.sh"):
        for line in script.read_text().splitlines():
            for match in re.finditer(r'"\$HERE/[^"]+\.(sh|py)"', line):
                before = line[: match.start()].rstrip()
                assert before.endswith(("bash", "python3", "require_script", "[[ -f")), f"{script.name}: {line.strip()}"


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
