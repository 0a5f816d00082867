"""The node scripts, run under a fake root with fake commands on PATH (tests/fakes/node_fakes.py),
on fake nodes that model named images (node_fakes.IMAGES), plus shellcheck, the no-eval rule, the
per-type table against the catalog and the one-manifest rule.

The defects a review found in them each have a test here, named in its docstring ("defect N")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fminfra import catalog
from tests.conftest import ROOT
from tests.fakes.node_fakes import (
    IMAGES,
    KERNEL,
    MANIFEST,
    NCCL_PKG,
    NODE,
    VERIFY_UNTOUCHED,
    FakeNode,
    make_image,
    make_node,
    nccl_package,
    read_only,
    sign,
    write_efa_installer,
)
from tests.source_files import source_files

SCRIPTS = sorted(NODE.glob("*.sh"))


def _index(calls: list[str], needle: str) -> int:
    for i, call in enumerate(calls):
        if needle in call:
            return i
    raise AssertionError(f"no call containing {needle!r} in:\n" + "\n".join(calls))


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    return make_node(tmp_path)


# --- static checks ------------------------------------------------------------------------------


def test_shellcheck_is_clean_on_every_script() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    result = subprocess.run([str(shellcheck), "--external-sources", *map(str, SCRIPTS)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_would_catch_a_bad_script(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $1/\n")
    shellcheck = Path(sys.executable).parent / "shellcheck"
    assert subprocess.run([str(shellcheck), str(bad)], capture_output=True, check=False).returncode != 0


def test_no_script_uses_eval() -> None:
    offenders = [f"{p.name}:{n}" for p in SCRIPTS for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\beval\b", line)]
    assert offenders == []


def test_every_script_is_strict_and_ends_in_main() -> None:
    assert "set -o errexit -o nounset -o pipefail" in (NODE / "lib.sh").read_text()
    for script in SCRIPTS:
        if script.name in ("lib.sh", "manifest.sh", "drain_lib.sh"):  # sourced libraries, never run
            continue
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n"), script.name
        assert 'source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"' in text, script.name
        assert text.rstrip().endswith('main "$@"'), script.name


def _table() -> dict[str, list[str]]:
    rows = {}
    for line in (NODE / "instance_types.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, *cols = line.split()
            rows[name] = cols
    return rows


def _manifest_values_outside(root: Path) -> list[str]:
    """Each source file of root (tests/source_files.py: git's list, or the walk that leaves out what
    .gitignore ignores, such as the *.egg-info/ a wheel build writes) that quotes a pin of the manifest."""
    keys = [
        k for k in MANIFEST if k.endswith(("_VERSION", "_FINGERPRINT", "_COMMIT", "_SHA256")) and k != "EKS_SUPPORTED_KUBERNETES_VERSIONS"
    ]
    keys += [k for k in MANIFEST if k.startswith(("CHART_", "EKS_ADDON_"))]
    values = {k: MANIFEST[k] for k in keys if MANIFEST[k] and len(MANIFEST[k]) >= 4}
    assert "NCCL_VERSION" in values and "EFA_INSTALLER_VERSION" in values
    # baselines/ holds synthesized templates (like the snapshots under tests/): they quote the manifest.
    skip_parts = {"baselines", "tests"}
    hits = []
    for name in source_files(root):
        rel = Path(name)
        # package-lock.json pins npm packages, whose versions can equal a manifest value by chance.
        if skip_parts & set(rel.parts) or rel.suffix == ".md" or rel.name == "package-lock.json":
            continue
        if rel == Path("scripts/node/versions.env"):
            continue
        text = (root / rel).read_text(errors="ignore")
        for key, value in values.items():
            if re.search(rf"(?<![0-9A-Za-z.]){re.escape(value)}(?![0-9A-Za-z])", text):
                hits.append(f"{rel}: {key}={value}")
    return hits


def test_no_component_version_outside_the_manifest() -> None:
    assert _manifest_values_outside(ROOT) == []


def test_manifest_rule_reads_the_source_files_not_build_output(tmp_path: Path) -> None:
    """Test of the test: README's `python -m build --wheel` leaves fminfra.egg-info/ (and build/) in
    the checkout, which .gitignore ignores; a pin quoted there is not a source file's, one quoted in
    a script is."""
    (tmp_path / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    nccl = MANIFEST["NCCL_VERSION"]
    for name in ("fminfra.egg-info/PKG-INFO", "build/lib/fminfra/x.py", "scripts/node/stray.sh"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"NCCL {nccl}\n")
    assert _manifest_values_outside(tmp_path) == [f"scripts/node/stray.sh: NCCL_VERSION={nccl}"]


# --- bootstrap: plan, order, idempotency --------------------------------------------------------


@pytest.mark.parametrize(("os_name", "instance_type"), [("ubuntu-22.04", "p5.48xlarge"), ("al2023", "p6-b200.48xlarge")])
def test_dry_run_prints_the_plan_with_manifest_versions(tmp_path: Path, os_name: str, instance_type: str) -> None:
    # The acceptance command itself, with the real manifest, on this machine.
    result = subprocess.run(
        ["bash", str(NODE / "bootstrap.sh"), "--dry-run", "--os", os_name, "--instance-type", instance_type],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "FMINFRA_LOG_DIR": str(tmp_path / "log"), "FMINFRA_STATE_DIR": str(tmp_path / "state")},
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for key in ("NCCL_VERSION", "EFA_INSTALLER_VERSION", "AWS_OFI_NCCL_VERSION", "GDRCOPY_VERSION", "NCCL_TESTS_VERSION"):
        assert MANIFEST[key] in out, key
    assert f"NCCL {NCCL_PKG}" in out
    assert f"EFA installer {MANIFEST['EFA_INSTALLER_VERSION']}" in out
    assert f"os={os_name}" in out and f"instance-type={instance_type}" in out
    steps = re.findall(r"^  \[([a-z-]+)\]", out, flags=re.M)
    assert steps == [
        "nvidia-repo",
        "nvidia-driver",
        "fabric-manager",
        "nvlsm",
        "nvidia-imex",
        "cuda-toolkit",
        "efa",
        "nccl",
        "aws-ofi-nccl",
        "gdrcopy",
        "nccl-tests",
        "environment",
    ]
    assert not (tmp_path / "log").exists() and not (tmp_path / "state").exists()
    if instance_type.startswith("p6-b200"):
        assert "nvlsm" in out.split("[nvlsm]")[1].split("[cuda-toolkit]")[0]
        assert "dnf -y -q module install nvidia-driver:" in out
    else:
        assert "[nvlsm] not needed on p5.48xlarge" in out
    assert "FI_PROVIDER" not in out and "NCCL_PROTO" not in out


def test_dry_run_on_a_fake_node_changes_nothing(node: FakeNode) -> None:
    before = node.snapshot()
    result = node.run("bootstrap.sh", "--dry-run", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr
    assert node.snapshot() == before
    assert not (node.root / "var").exists()
    assert {c.split()[0] for c in node.calls()} <= set(), node.calls()


def test_bootstrap_installs_in_order_then_a_second_run_changes_nothing(node: FakeNode) -> None:
    first = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert first.returncode == 0, first.stderr
    calls = node.calls()
    order = [
        "apt-get -o DPkg::Lock::Timeout=120 -q update",
        f"nvidia-driver-{MANIFEST['NVIDIA_DRIVER_BRANCH']}-open",
        f"nvidia-fabricmanager-{MANIFEST['NVIDIA_DRIVER_BRANCH']}",
        "cuda-toolkit-",
        "efa_installer.sh -y",
        f"libnccl2={MANIFEST['NCCL_VERSION']}",
        "gdrcopy.git",
        "lib_install",
        "systemctl enable --now fminfra-gdrdrv.service",
        "nccl-tests.git",
        "BUILDDIR=",
    ]
    positions = [_index(calls, needle) for needle in order]
    assert positions == sorted(positions), list(zip(order, positions, strict=True))
    assert not any("nvlsm" in c for c in calls)  # p5 is Hopper: no NVLink Subnet Manager
    markers = sorted(p.name for p in node.markers.iterdir())
    assert markers == sorted(
        f"{s}.done"
        for s in [
            "nvidia-repo",
            "nvidia-driver",
            "fabric-manager",
            "cuda-toolkit",
            "efa",
            "nccl",
            "aws-ofi-nccl",
            "gdrcopy",
            "nccl-tests",
            "environment",
            "bootstrap",
        ]
    )
    profile = (node.root / "etc/profile.d/fminfra-gpu.sh").read_text()
    # aws-ofi-nccl 1.22 (deb): /opt/amazon/ofi-nccl/lib; NCCL 2.30 loads the tuner from the net plugin.
    assert ":/opt/amazon/ofi-nccl/lib${LD_LIBRARY_PATH" in profile and "NCCL_TUNER_PLUGIN" not in profile
    for banned in ("FI_PROVIDER", "NCCL_PROTO", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE"):
        assert banned not in profile
    assert (node.root / "var/log/fminfra/bootstrap.log").read_text().count("bootstrap: done") == 1
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ install_efa INFO: ", (node.root / "var/log/fminfra/install_efa.log").read_text())

    before, n_calls = node.snapshot(), len(calls)
    second = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert second.returncode == 0, second.stderr
    again = node.calls()[n_calls:]
    assert read_only(again), again
    assert node.snapshot() == before
    assert "done-marker matches" in second.stderr


def test_al2023_uses_dnf_and_the_rpm_key(tmp_path: Path) -> None:
    node = make_node(tmp_path, os_id="amzn", os_version="2023")
    result = node.run("bootstrap.sh", "--instance-type", "p6-b200.48xlarge")
    assert result.returncode == 0, result.stderr
    calls = node.calls()
    # Amazon Linux names Fabric Manager nvidia-fabricmanager from branch 580 on
    # (docs/facts/node-software.md#nvidia-fabric-manager-rpm-name).
    fabric = "dnf -y -q install nvidia-fabricmanager-580.95.05-1"
    assert _index(calls, "dnf -y -q module install nvidia-driver:") < _index(calls, fabric) < _index(calls, "nvlsm")
    assert not any("nvidia-fabric-manager" in c for c in node.installs())
    repo = (node.root / "etc/yum.repos.d/fminfra-cuda.repo").read_text()
    assert "gpgcheck=1" in repo and "/repos/amzn2023/x86_64" in repo
    assert not any(c.startswith("apt-get") for c in calls)


def test_types_without_efa_skip_the_efa_stack(node: FakeNode) -> None:
    result = node.run("bootstrap.sh", "--instance-type", "g6e.12xlarge")
    assert result.returncode == 0, result.stderr
    calls = node.calls()
    assert not any("efa_installer.sh" in c or "fabricmanager" in c for c in calls)
    assert any(c.startswith("make ") and " MPI=0 " in c for c in calls)
    profile = (node.root / "etc/profile.d/fminfra-gpu.sh").read_text()
    assert "NCCL_TUNER_PLUGIN" not in profile and "/opt/amazon" not in profile
    assert "efa: not needed on g6e.12xlarge" in result.stderr


def test_verify_mode_installs_nothing_and_fails_on_a_bare_node(node: FakeNode) -> None:
    result = node.run("bootstrap.sh", "--verify", "--instance-type", "p5.48xlarge")
    assert result.returncode == 1
    assert "FAIL nvidia-driver: no NVIDIA driver responds" in result.stderr
    assert "FAIL efa: no EFA installer has run" in result.stderr
    assert read_only(node.calls())


# --- verification and retries -------------------------------------------------------------------


def test_bad_signature_aborts_with_a_clear_message_and_no_marker(node: FakeNode) -> None:
    sign(node, good=False)
    result = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 1
    version = MANIFEST["EFA_INSTALLER_VERSION"]
    assert f"verification failed: bad or missing signature on aws-efa-installer-{version}.tar.gz" in result.stderr
    assert not (node.markers / "efa.done").exists()
    assert not (node.markers / "bootstrap.done").exists()
    assert not any("efa_installer.sh" in c for c in node.calls())


def test_key_with_another_fingerprint_is_refused(node: FakeNode) -> None:
    (node.downloads / "aws-efa-installer.key").write_text("0" * 40 + "\n")
    sign(node, good=True, fingerprint="0" * 40)
    result = node.run("install_efa.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 1
    assert f"has fingerprint '{'0' * 40}', but the manifest pins {MANIFEST['EFA_INSTALLER_KEY_FINGERPRINT']}" in result.stderr
    assert not (node.markers / "efa.done").exists()


def test_allow_unverified_continues_loudly(node: FakeNode) -> None:
    sign(node, good=False)
    result = node.run("install_efa.sh", "--instance-type", "p5.48xlarge", FMINFRA_ALLOW_UNVERIFIED="1")
    assert result.returncode == 0, result.stderr
    assert "!!!!!!!! UNVERIFIED: bad or missing signature" in result.stderr
    assert (node.markers / "efa.done").exists()


def test_transient_download_failure_is_retried(node: FakeNode) -> None:
    tarball = f"aws-efa-installer-{MANIFEST['EFA_INSTALLER_VERSION']}.tar.gz"
    result = node.run("install_efa.sh", "--instance-type", "p5.48xlarge", FAKE_CURL_FAIL_ONCE=tarball)
    assert result.returncode == 0, result.stderr
    assert sum(1 for c in node.calls() if c.startswith("curl") and c.endswith("/" + tarball)) == 2
    assert "attempt 1/5 failed" in result.stderr
    assert (node.markers / "efa.done").exists()


def test_persistent_download_failure_gives_up(node: FakeNode) -> None:
    (node.downloads / "aws-efa-installer.key").unlink()
    result = node.run("install_efa.sh", "--instance-type", "p5.48xlarge", FMINFRA_RETRIES="3")
    assert result.returncode == 1
    assert "gave up after 3 attempts" in result.stderr
    assert not (node.markers / "efa.done").exists()


def test_unpinned_commit_aborts_unless_allowed(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.set_manifest(GDRCOPY_COMMIT="")
    result = node.run("install_gdrcopy.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 1
    assert "verification failed: no commit pinned for https://github.com/NVIDIA/gdrcopy.git" in result.stderr
    assert not (node.markers / "gdrcopy.done").exists()


def test_checked_out_commit_must_equal_the_pin(node: FakeNode) -> None:
    result = node.run("install_nccl_tests.sh", "--instance-type", "p5.48xlarge", FAKE_GIT_HEAD="3" * 40)
    assert result.returncode == 1
    assert f"checked out {'3' * 40}, the manifest pins {MANIFEST['NCCL_TESTS_COMMIT']}" in result.stderr
    assert not (node.markers / "nccl-tests.done").exists()


# --- bad input ----------------------------------------------------------------------------------


def test_unsupported_os_without_os_flag_exits_2_naming_the_supported(tmp_path: Path) -> None:
    node = make_node(tmp_path, os_id="debian", os_version="12")
    result = node.run("bootstrap.sh", "--dry-run", "--instance-type", "p5.48xlarge")
    assert result.returncode == 2
    assert "unsupported OS 'debian 12'" in result.stderr and "supported: ubuntu-22.04 ubuntu-24.04 al2023" in result.stderr
    assert node.run("bootstrap.sh", "--dry-run", "--os", "ubuntu-24.04", "--instance-type", "p5.48xlarge").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--os", "rhel9", "--instance-type", "p5.48xlarge"], "--os 'rhel9' is not supported; supported: ubuntu-22.04"),
        (["--instance-type", "p9.48xlarge"], "instance type 'p9.48xlarge' is not in"),
        (["--bogus"], "unknown argument '--bogus'"),
        ([], "cannot read the instance type from instance metadata"),
    ],
)
def test_bad_arguments_exit_2(node: FakeNode, args: list[str], message: str) -> None:
    result = node.run("bootstrap.sh", "--dry-run", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "command failed" not in result.stderr


def test_malformed_manifest_exits_2(node: FakeNode) -> None:
    manifest = Path(node.env["FMINFRA_VERSIONS"])
    manifest.write_text(manifest.read_text() + 'NCCL_VERSION="2.0"\n')
    result = node.run("bootstrap.sh", "--dry-run", "--instance-type", "p5.48xlarge")
    assert result.returncode == 2
    assert "expected KEY=VALUE (no quotes, spaces or expansions)" in result.stderr


def test_exporters_run_only_with_a_remote_write_url(node: FakeNode) -> None:
    result = node.run("bootstrap.sh", "--dry-run", "--instance-type", "p5.48xlarge")
    assert "SKIP exporters: FMINFRA_REMOTE_WRITE_URL is not set" in result.stderr
    assert "install_exporters.sh" not in result.stdout
    result = node.run(
        "bootstrap.sh", "--dry-run", "--instance-type", "p5.48xlarge", FMINFRA_REMOTE_WRITE_URL="https://aps/api/v1/remote_write"
    )
    assert "SKIP exporters:" not in result.stderr
    assert "observability/install_exporters.sh" in result.stdout


# --- validate.sh --------------------------------------------------------------------------------


def _validate(node: FakeNode, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    tests_dir = node.base / "nccl-tests"
    tests_dir.mkdir(exist_ok=True)
    perf = tests_dir / "all_reduce_perf"
    nccl = MANIFEST["NCCL_VERSION"].rsplit("-", 1)[0]
    perf.write_text(
        "#!/usr/bin/env bash\n"
        f"echo 'ip-10-0-0-1:1:1 [0] NCCL INFO NCCL version {nccl}+cuda{MANIFEST['CUDA_VERSION']}'\n"
        f"echo 'ip-10-0-0-1:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl {MANIFEST['AWS_OFI_NCCL_VERSION']}'\n"
    )
    perf.chmod(0o755)
    defaults = {
        "FAKE_DRIVER_VERSION": f"{MANIFEST['NVIDIA_DRIVER_BRANCH']}.95.05",
        "FAKE_EFA_COUNT": "32",
        "FMINFRA_NCCL_TESTS_DIR": str(tests_dir),
    }
    result = node.run("validate.sh", *args, **{**defaults, **env})
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return result, summary


def _status(summary: dict, check: str) -> str:
    return next(c["status"] for c in summary["checks"] if c["check"] == check)


def test_validate_passes_a_healthy_p5(node: FakeNode) -> None:
    result, summary = _validate(node, "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stdout
    assert summary["result"] == "PASS"
    assert [c["status"] for c in summary["checks"]] == ["PASS"] * 7 + ["SKIP"]
    assert "SKIP nccl-allreduce: multi-node test not requested (--nccl-hosts H1,H2)" in result.stdout
    assert f"PASS ofi-plugin: aws-ofi-nccl {MANIFEST['AWS_OFI_NCCL_VERSION']} loaded" in result.stdout


def test_validate_fails_on_a_short_efa_count(node: FakeNode) -> None:
    result, summary = _validate(node, "--instance-type", "p5.48xlarge", FAKE_EFA_COUNT="31")
    assert result.returncode == 1
    assert "FAIL efa-count: 31 EFA devices, p5.48xlarge has 32" in result.stdout
    assert summary["result"] == "FAIL" and _status(summary, "efa-count") == "FAIL"


def test_validate_skips_nccl_for_a_type_without_a_threshold(node: FakeNode) -> None:
    result, summary = _validate(node, "--instance-type", "p4d.24xlarge", "--nccl-hosts", "a,b", FAKE_EFA_COUNT="4")
    assert result.returncode == 0, result.stdout
    assert _status(summary, "nccl-allreduce") == "SKIP"
    assert "SKIP nccl-allreduce: no measured threshold for p4d.24xlarge" in result.stdout
    assert not any(c.startswith(("mpirun", "srun")) for c in node.calls())


@pytest.mark.parametrize(("busbw", "status"), [("444.10", "PASS"), ("310.50", "WARN"), ("201.00", "FAIL")])
def test_validate_compares_two_node_allreduce_with_p5_thresholds(node: FakeNode, busbw: str, status: str) -> None:
    output = node.base / "allreduce.txt"
    output.write_text(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        f"   1073741824     268435456     float     sum      -1   4600.0  233.42  {busbw}      0   4590.0  233.9  {busbw}      0\n"
        f"   2147483648     536870912     float     sum      -1   9000.0  238.60  {float(busbw) + 5:.2f}      0   9001.0  238.5  447.1      0\n"
    )
    result, summary = _validate(
        node,
        "--instance-type",
        "p5.48xlarge",
        "--nccl-hosts",
        "h1,h2",
        "--launcher",
        "mpirun",
        FAKE_ALLREDUCE_OUTPUT=str(output),
        FAKE_SSH_OK="1",
    )
    assert _status(summary, "nccl-allreduce") == status, result.stdout
    assert f"{status} nccl-allreduce: bus bandwidth {busbw} GB/s" in result.stdout
    assert result.returncode == (1 if status == "FAIL" else 0)
    assert any(c.startswith("mpirun --allow-run-as-root -np 16 --host h1:8,h2:8") for c in node.calls())


def test_validate_reports_missing_driver_and_inactive_nvlink(node: FakeNode) -> None:
    result, _ = _validate(node, "--instance-type", "p5.48xlarge", FAKE_DRIVER_VERSION="", FAKE_FI_INFO_OK="0")
    assert "FAIL driver: nvidia-smi failed" in result.stdout and "FAIL fi-info:" in result.stdout
    result, _ = _validate(node, "--instance-type", "p5.48xlarge", FAKE_NVLINK_INACTIVE="1")
    assert "FAIL nvlink: 1 NVLinks inactive" in result.stdout


# --- modelled images: install, verify, re-run --------------------------------------------------


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_install_verify_and_rerun_on_each_modelled_image(tmp_path: Path, image: str) -> None:
    node, instance_type = make_image(tmp_path, image)
    first = node.run("bootstrap.sh", "--instance-type", instance_type)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "bootstrap: done" in first.stderr
    verify = node.run("bootstrap.sh", "--verify", "--instance-type", instance_type)
    assert verify.returncode == 0, verify.stderr[-3000:]
    assert "FAIL" not in verify.stderr
    before, n_calls = node.snapshot(), len(node.calls())
    second = node.run("bootstrap.sh", "--instance-type", instance_type)
    assert second.returncode == 0, second.stderr[-3000:]
    assert read_only(node.calls()[n_calls:]), node.calls()[n_calls:]
    assert node.snapshot() == before
    # What the image carries at another version is adopted and said so, never recorded as the pin.
    done = (node.markers / "bootstrap.done").read_text()
    for marker in node.markers.glob("*.done"):
        text = marker.read_text()
        if text.startswith("adopted:"):
            assert f"{marker.stem}: {text.strip()}" in done
    # A pin bump, then a re-run: the NCCL marker names the NCCL installed, or says it was adopted.
    package = "libnccl" if IMAGES[image][0] == "amzn" else "libnccl2"
    bumped = "2.30.5-1+cuda13.2"
    for name in (package, "libnccl-dev" if package == "libnccl2" else "libnccl-devel"):
        node.offer(name, bumped)
    node.set_manifest(NCCL_VERSION="2.30.5-1")
    third = node.run("bootstrap.sh", "--instance-type", instance_type)
    assert third.returncode == 0, third.stderr[-3000:]
    nccl_marker = (node.markers / "nccl.done").read_text().strip()
    if nccl_marker.startswith("adopted:"):
        assert node.package(package) != bumped and f"nccl: {nccl_marker}" in (node.markers / "bootstrap.done").read_text()
    else:
        assert nccl_marker == f"NCCL {bumped}" and node.package(package) == bumped


def test_dry_run_for_every_os_and_catalog_type(tmp_path: Path) -> None:
    """Every catalog type on every OS: types with the same instance_types.tsv row (name aside) get
    the same plan, so one dry run per distinct row and OS covers them all."""
    table = _table()
    assert set(table) == set(catalog.CATALOG)
    representatives: dict[tuple[str, ...], str] = {}
    for name, cols in table.items():
        representatives.setdefault(tuple(cols), name)
    env = {"PATH": "/usr/bin:/bin", "FMINFRA_LOG_DIR": str(tmp_path / "log"), "FMINFRA_STATE_DIR": str(tmp_path / "state")}
    for os_name in ("ubuntu-22.04", "ubuntu-24.04", "al2023"):
        for cols, name in representatives.items():
            result = subprocess.run(
                ["bash", str(NODE / "bootstrap.sh"), "--dry-run", "--os", os_name, "--instance-type", name],
                capture_output=True,
                text=True,
                check=False,
                env=env,
            )
            assert result.returncode == 0, (os_name, name, result.stderr)
            fabric = cols[3]
            assert ("[fabric-manager] Fabric Manager at the loaded driver's version" in result.stdout) == fabric.startswith("fm")
            assert ("[nvlsm] NVLink Subnet Manager" in result.stdout) == (fabric == "fm+nvlsm")
            assert ("[nvidia-imex] nvidia-imex at the loaded driver's version" in result.stdout) == (fabric == "imex")
    assert not (tmp_path / "state").exists()


# --- defects a review found ---------------------------------------------------------------------------


def test_plain_image_install_reaches_the_environment_step(node: FakeNode) -> None:
    """Defect 1: with the shipped manifest (no substituted commits) install mode gets past GDRCopy
    and nccl-tests, at the pinned tag commits, to the environment step."""
    result = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr[-2000:]
    calls = node.calls()
    assert any(c.endswith(f"gdrcopy.git {MANIFEST['GDRCOPY_COMMIT']}") for c in calls)
    assert any(c.endswith(f"nccl-tests.git {MANIFEST['NCCL_TESTS_COMMIT']}") for c in calls)
    assert (node.markers / "environment.done").exists()


def test_nccl_package_is_built_for_its_own_cuda_pin(node: FakeNode) -> None:
    """Defect 2: the package's CUDA suffix is NCCL_PACKAGE_CUDA, not CUDA_VERSION, and the exact
    version is looked up in the repository before installing."""
    assert MANIFEST["NCCL_PACKAGE_CUDA"] != MANIFEST["CUDA_VERSION"]
    result = node.run("install_nccl.sh", "--instance-type", "g6e.xlarge")
    assert result.returncode == 0, result.stderr
    calls = node.calls()
    assert _index(calls, "apt-cache madison libnccl2") < _index(calls, f"libnccl2={NCCL_PKG}")
    assert node.package("libnccl2") == NCCL_PKG


@pytest.mark.parametrize(("os_id", "os_version", "package"), [("ubuntu", "24.04", "libnccl2"), ("amzn", "2023", "libnccl")])
def test_nccl_version_the_repository_lacks_fails_with_one_line(tmp_path: Path, os_id: str, os_version: str, package: str) -> None:
    """Defect 2: a pinned NCCL build the repository does not offer stops with one line naming what it offers."""
    node = make_node(tmp_path, os_id=os_id, os_version=os_version)
    node.set_manifest(NCCL_PACKAGE_CUDA="13.0")
    result = node.run("install_nccl.sh", "--instance-type", "g6e.xlarge")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, result.stderr
    assert f"{MANIFEST['NCCL_VERSION']}+cuda13.0 is not in the configured repositories" in errors[0]
    assert "2.30.4-1+cuda13.2" in errors[0]
    assert node.package(package) is None and not (node.markers / "nccl.done").exists()


def test_dlami_driver_stack_is_adopted_not_replaced(tmp_path: Path) -> None:
    """Defect 3: on the DLAMI (driver 595 with its Fabric Manager) nothing of the driver stack is
    installed; the driver is adopted and reported, Fabric Manager passes because it matches."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    result = node.run("bootstrap.sh", "--instance-type", instance_type, FMINFRA_ENFORCE_VERSIONS="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert not any("nvidia-driver" in c or "fabricmanager" in c for c in node.installs()), node.installs()
    assert "nvidia-driver: adopting what the image carries (driver 595.91.07 loaded" in result.stderr
    assert "fabric-manager: the node already has it (nvidia-fabricmanager-595 595.91.07-1, driver 595.91.07)" in result.stderr
    assert (node.markers / "nvidia-driver.done").read_text().startswith("adopted: driver 595.91.07")


def test_fabric_manager_that_differs_from_the_driver_stops_without_changes(tmp_path: Path) -> None:
    """Defect 3: a Fabric Manager at another version than the loaded driver is not 'fixed' by
    installing the manifest's branch over it: install stops, verify FAILs, nothing changes."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    node.install_packages(**{"nvidia-fabricmanager-595": "595.58.03-1"})
    result = node.run("install_driver.sh", "--instance-type", instance_type)
    assert result.returncode == 1
    assert (
        "fabric-manager: nvidia-fabricmanager-595 595.58.03-1, driver 595.91.07; Fabric Manager must be at the driver's version exactly"
        in result.stderr
    )
    assert node.installs() == []
    verify = node.run("install_driver.sh", "--verify", "--instance-type", instance_type)
    assert verify.returncode == 1 and "FAIL fabric-manager:" in verify.stderr


def test_driver_and_module_that_disagree_stop(tmp_path: Path) -> None:
    """Defect 3: nvidia-smi reporting another version than the loaded module (a package upgrade
    without reboot) is not a working stack to adopt."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    result = node.run("install_driver.sh", "--instance-type", instance_type, FAKE_SMI_VERSION="595.99.01")
    assert result.returncode == 1
    assert "nvidia-smi reports driver 595.99.01 but the loaded kernel module is 595.91.07" in result.stderr
    assert node.installs() == []


def test_bare_node_gets_fabric_manager_at_the_driver_version_held(node: FakeNode) -> None:
    """Defect 3: where fminfra installs the driver, Fabric Manager follows the loaded driver's exact version; both are held."""
    result = node.run("install_driver.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr
    assert any(c.endswith("nvidia-fabricmanager-580=580.95.05-1") for c in node.installs())
    assert {p.name for p in (node.state / "held").iterdir()} >= {"nvidia-driver-580-open", "nvidia-fabricmanager-580"}


def test_existing_nvidia_repository_entry_is_reused_and_pinned(tmp_path: Path) -> None:
    """Defect 4: the DLAMI's cuda-keyring entry is kept (a second entry with another signed-by
    keyring makes apt refuse every source); NVIDIA's packages are pinned to NVIDIA's origin."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    result = node.run("install_nvidia_repo.sh", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert "reusing it" in result.stderr
    assert not (node.root / "etc/apt/sources.list.d/fminfra-cuda.list").exists()
    pin = (node.root / "etc/apt/preferences.d/fminfra-nvidia").read_text()
    assert "Pin: origin developer.download.nvidia.com" in pin and "Pin-Priority: 600" in pin
    assert "nvidia-*" in pin and "libnccl2" in pin


def test_fake_apt_refuses_conflicting_signed_by(tmp_path: Path) -> None:
    """Test of the test (defect 4): the fake apt fails as apt does when one URL has two keyrings."""
    node, _ = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
    node.put(
        "/etc/apt/sources.list.d/fminfra-cuda.list", f"deb [signed-by=/usr/share/keyrings/fminfra-cuda-archive-keyring.gpg] {url}/ /\n"
    )
    result = subprocess.run(["apt-get", "update"], env=node.env, capture_output=True, text=True, check=False)
    assert result.returncode == 100 and "Conflicting values set for option Signed-By" in result.stderr


def test_repository_keyring_of_the_image_must_hold_the_pinned_key(tmp_path: Path) -> None:
    """Defect 4: reusing the image's entry still checks its keyring against the pinned fingerprint."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    node.put("/usr/share/keyrings/cuda-archive-keyring.gpg", "0" * 40 + "\n")
    result = node.run("install_nvidia_repo.sh", "--instance-type", instance_type)
    assert result.returncode == 1
    assert "cuda-archive-keyring.gpg (trusted by /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list) has fingerprint" in result.stderr


@pytest.mark.parametrize(
    ("image", "libs"),
    [
        ("al2023-x86_64", "/opt/amazon/efa/lib64:/opt/amazon/openmpi/lib64:/opt/amazon/ofi-nccl/lib64"),
        ("ubuntu-24.04", "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/amazon/ofi-nccl/lib"),
        (
            "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib-arch",
            "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
        ),
    ],
)
def test_library_paths_are_found_where_the_packages_put_them(tmp_path: Path, image: str, libs: str) -> None:
    """Defect 5: lib64 on AL2023 (rpm), lib on Ubuntu (deb, aws-ofi-nccl >= 1.17), the old
    lib/<arch>-linux-gnu where the image has it; no NCCL_TUNER_PLUGIN with NCCL >= 2.21."""
    node, instance_type = make_image(tmp_path, image)
    for script in ("install_efa.sh", "install_nccl.sh", "configure_environment.sh"):
        result = node.run(script, "--instance-type", instance_type)
        assert result.returncode == 0, result.stderr[-2000:]
    ldconf = (node.root / "etc/ld.so.conf.d/fminfra-gpu.conf").read_text()
    assert libs.replace(":", "\n") in ldconf
    assert "NCCL_TUNER_PLUGIN" not in (node.root / "etc/profile.d/fminfra-gpu.sh").read_text()


def test_tuner_variable_only_for_nccl_older_than_2_21(tmp_path: Path) -> None:
    """Defect 5: NCCL 2.19/2.20 load the tuner only through NCCL_TUNER_PLUGIN."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib-arch")
    nccl_package(node, "libnccl2", "2.20.5-1+cuda12.4", "/usr/lib/x86_64-linux-gnu")
    node.put("/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-ofi-tuner.so")
    result = node.run("configure_environment.sh", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    profile = (node.root / "etc/profile.d/fminfra-gpu.sh").read_text()
    assert "export NCCL_TUNER_PLUGIN=/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-ofi-tuner.so" in profile


def _allreduce_output(node: FakeNode) -> str:
    output = node.base / "allreduce.txt"
    output.write_text(
        "   1073741824     268435456     float     sum      -1   4600.0  233.42  444.10      0   4590.0  233.9  444.10      0\n"
        "   2147483648     536870912     float     sum      -1   9000.0  238.60  447.10      0   9001.0  238.5  447.1      0\n"
    )
    return str(output)


def test_mpirun_command_line_has_what_open_mpi_needs(node: FakeNode) -> None:
    """Defect 6: root allowed, the MCA settings of AWS's EFA guide, no binding, environment passed."""
    result, summary = _validate(
        node,
        "--instance-type",
        "p5.48xlarge",
        "--nccl-hosts",
        "ip-10-0-0-1,h2",
        FAKE_ALLREDUCE_OUTPUT=_allreduce_output(node),
        FAKE_SSH_OK="1",
    )
    assert _status(summary, "nccl-allreduce") == "PASS", result.stdout
    mpirun = next(c for c in node.calls() if c.startswith("mpirun "))
    for part in (
        "--allow-run-as-root",
        "-np 16 --host ip-10-0-0-1:8,h2:8",
        "--map-by ppr:8:node --bind-to none",
        "--mca pml ^cm --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0",
        "-x PATH -x LD_LIBRARY_PATH",
    ):
        assert part in mpirun, (part, mpirun)
    assert "NCCL_TUNER_PLUGIN" not in mpirun
    assert [c for c in node.calls() if c.startswith("ssh ")] == ["ssh -o BatchMode=yes -o ConnectTimeout=5 h2 true"]


def test_mpirun_without_ssh_trust_fails_with_one_clear_line(node: FakeNode) -> None:
    """Defect 6: ec2 nodes have no SSH trust; say so instead of hanging or failing obscurely."""
    result, summary = _validate(
        node, "--instance-type", "p5.48xlarge", "--nccl-hosts", "h1,h2", FAKE_ALLREDUCE_OUTPUT=_allreduce_output(node)
    )
    assert result.returncode == 1
    assert _status(summary, "nccl-allreduce") == "FAIL"
    assert "mpirun needs passwordless SSH from ip-10-0-0-1 to h1" in result.stdout and "--launcher srun" in result.stdout
    assert not any(c.startswith("mpirun") for c in node.calls())


def test_srun_is_used_inside_slurm_without_ssh(node: FakeNode) -> None:
    """Defect 6: inside a Slurm allocation srun starts the ranks; no SSH is tried."""
    result, summary = _validate(
        node, "--instance-type", "p5.48xlarge", "--nccl-hosts", "h1,h2", FAKE_ALLREDUCE_OUTPUT=_allreduce_output(node), SLURM_JOB_ID="42"
    )
    assert _status(summary, "nccl-allreduce") == "PASS", result.stdout
    srun = next(c for c in node.calls() if c.startswith("srun "))
    assert "--nodelist=h1,h2 --nodes=2 --ntasks-per-node=8 --mpi=pmix --export=ALL" in srun
    assert not any(c.startswith("ssh") for c in node.calls())


def test_pin_bump_is_installed_not_just_recorded(node: FakeNode) -> None:
    """Defect 7: a bumped NCCL pin replaces the held NCCL fminfra installed; the marker follows."""
    first = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert first.returncode == 0, first.stderr[-2000:]
    assert (node.state / "held" / "libnccl2").exists()
    node.offer("libnccl2", "2.30.5-1+cuda13.2")
    node.offer("libnccl-dev", "2.30.5-1+cuda13.2")
    node.set_manifest(NCCL_VERSION="2.30.5-1")
    second = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert second.returncode == 0, second.stderr[-2000:]
    assert node.package("libnccl2") == "2.30.5-1+cuda13.2"
    assert (node.markers / "nccl.done").read_text().strip() == "NCCL 2.30.5-1+cuda13.2"
    replaced = "NCCL 2.30.4+cuda13.2 at /usr/lib/x86_64-linux-gnu/libnccl.so.2 (ldconfig); package libnccl2 2.30.4-1+cuda13.2"
    assert f"nccl: replacing {replaced} with NCCL 2.30.5-1+cuda13.2 (fminfra installed the older version)" in second.stderr
    # nccl-tests are rebuilt against the NCCL now installed.
    assert "against NCCL 2.30.5+cuda13.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2" in (node.markers / "nccl-tests.done").read_text()


def test_pin_bump_of_an_efa_installer_fminfra_installed_reinstalls_it(node: FakeNode) -> None:
    """Defect 7: the same for a download (the EFA installer)."""
    assert node.run("bootstrap.sh", "--instance-type", "p5.48xlarge").returncode == 0
    write_efa_installer(node, "1.51.1", MANIFEST["AWS_OFI_NCCL_VERSION"])
    node.set_manifest(EFA_INSTALLER_VERSION="1.51.1")
    result = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr[-2000:]
    assert sum(1 for c in node.calls() if c.startswith("efa_installer.sh")) == 2
    assert (node.markers / "efa.done").read_text().startswith("EFA installer 1.51.1")


def test_pin_bump_on_an_adopted_component_is_reported_never_recorded(tmp_path: Path) -> None:
    """Defect 7: on an image whose NCCL fminfra did not install, a bump is reported (WARN, marker
    'adopted:') and FMINFRA_ENFORCE_VERSIONS=1 replaces it although apt holds it."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib-arch")
    nccl_package(node, "libnccl2", "2.27.5-1+cuda12.8", "/usr/lib/x86_64-linux-gnu")  # an image that carries one
    node.run("bootstrap.sh", "--instance-type", instance_type)
    (node.state / "held").mkdir(exist_ok=True)
    (node.state / "held" / "libnccl2").touch()  # the image holds its NCCL
    result = node.run("bootstrap.sh", "--instance-type", instance_type)
    found = "NCCL 2.27.5+cuda12.8 at /usr/lib/x86_64-linux-gnu/libnccl.so.2 (ldconfig); package libnccl2 2.27.5-1+cuda12.8"
    assert f"nccl: adopting what the image carries ({found})" in result.stderr
    assert (node.markers / "nccl.done").read_text().startswith(f"adopted: {found}")
    assert f"nccl: adopted: {found}" in (node.markers / "bootstrap.done").read_text()
    enforced = node.run("install_nccl.sh", "--instance-type", instance_type, FMINFRA_ENFORCE_VERSIONS="1")
    assert enforced.returncode == 0, enforced.stderr
    assert node.package("libnccl2") == NCCL_PKG
    assert any("--allow-change-held-packages" in c and f"libnccl2={NCCL_PKG}" in c for c in node.installs())
    assert (node.markers / "nccl.done").read_text().strip() == f"NCCL {NCCL_PKG}"


def test_fake_apt_refuses_to_change_a_held_package(tmp_path: Path) -> None:
    """Test of the test (defect 7): without --allow-change-held-packages the fake apt refuses, as apt does."""
    node = make_node(tmp_path)
    node.install_packages(libnccl2="2.27.3-1+cuda12.9")
    (node.state / "held").mkdir()
    (node.state / "held" / "libnccl2").touch()
    result = subprocess.run(["apt-get", "-y", "install", f"libnccl2={NCCL_PKG}"], env=node.env, capture_output=True, text=True, check=False)
    assert result.returncode == 100 and "Held packages were changed" in result.stderr


def test_gb200_gets_imex_and_no_fabric_manager(tmp_path: Path) -> None:
    """Defect 8: p6e-gb200 has no local NVSwitch: nvidia-imex at the driver's version, no Fabric Manager."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-24.04-arm64")
    result = node.run("install_driver.sh", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert any(c.endswith("nvidia-imex=595.91.07-1") for c in node.installs())
    assert not any("fabricmanager" in c or "fabric-manager" in c for c in node.installs())
    assert "fabric-manager: not needed on p6e-gb200.36xlarge" in result.stderr
    assert (node.state / "held" / "nvidia-imex").exists()


@pytest.mark.parametrize(
    ("os_id", "os_version", "deps"), [("ubuntu", "24.04", "infiniband-diags libibumad3"), ("amzn", "2023", "infiniband-diags libibumad")]
)
def test_blackwell_hgx_gets_nvlsm_with_its_dependencies(tmp_path: Path, os_id: str, os_version: str, deps: str) -> None:
    """Defect 8: p6-b200 gets Fabric Manager, then nvlsm with its InfiniBand dependencies and ib_umad at boot, held."""
    node = make_node(tmp_path, os_id=os_id, os_version=os_version)
    result = node.run("install_driver.sh", "--instance-type", "p6-b200.48xlarge")
    assert result.returncode == 0, result.stderr
    calls = node.installs()
    assert _index(calls, "fabric") < _index(calls, deps) < _index(calls, " nvlsm")
    assert (node.root / "etc/modules-load.d/fminfra-ib-umad.conf").read_text().strip() == "ib_umad"
    assert (node.state / "held" / "nvlsm").exists()


def test_instance_table_fabric_column() -> None:
    """Defect 8: what each type's NVLink fabric needs (docs/facts/node-software.md#nvlink-fabric-software)."""
    fabric = {name: cols[3] for name, cols in _table().items()}
    assert {n for n, f in fabric.items() if f == "imex"} == {"p6e-gb200.36xlarge"}
    assert {n for n, f in fabric.items() if f == "fm+nvlsm"} == {"p6-b200.48xlarge", "p6-b300.48xlarge"}
    assert {n for n, f in fabric.items() if f == "fm"} == {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"}
    assert all(f == "-" for n, f in fabric.items() if n.startswith("g"))


def test_bad_fabric_value_exits_2(node: FakeNode, tmp_path: Path) -> None:
    table = tmp_path / "types.tsv"
    table.write_text("p5.48xlarge 8 32 yes nvswitch x86_64 - -\n")
    result = node.run("bootstrap.sh", "--dry-run", "--instance-type", "p5.48xlarge", FMINFRA_INSTANCE_TABLE=str(table))
    assert result.returncode == 2
    assert "p5.48xlarge: fabric 'nvswitch' is not one of -, fm, fm+nvlsm, imex" in result.stderr


def test_gdrcopy_is_loadable_by_name_and_after_reboot(node: FakeNode) -> None:
    """Defect 9: the unversioned libgdrapi.so is on the loader path (aws-ofi-nccl dlopen()s it) and a
    unit loads gdrdrv at boot; the marker names the kernel."""
    result = node.run("install_gdrcopy.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr
    assert (node.root / "opt/gdrcopy/lib/libgdrapi.so").exists()
    assert (node.root / "etc/ld.so.conf.d/fminfra-gdrcopy.conf").read_text().strip() == "/opt/gdrcopy/lib"
    unit = (node.root / "etc/systemd/system/fminfra-gdrdrv.service").read_text()
    assert "ExecStart=/opt/gdrcopy/sbin/fminfra-gdrdrv-load" in unit and "WantedBy=multi-user.target" in unit
    assert "modprobe gdrdrv" in (node.root / "opt/gdrcopy/sbin/fminfra-gdrdrv-load").read_text()
    assert "systemctl enable --now fminfra-gdrdrv.service" in node.calls()
    assert (node.markers / "gdrcopy.done").read_text().strip().endswith(f"gdrdrv for kernel {KERNEL}")


def test_gdrcopy_module_is_rebuilt_for_a_new_kernel(node: FakeNode) -> None:
    """Defect 9: after a kernel update the marker no longer holds and gdrdrv is built again."""
    assert node.run("install_gdrcopy.sh", "--instance-type", "p5.48xlarge").returncode == 0
    n_calls = len(node.calls())
    result = node.run("install_gdrcopy.sh", "--instance-type", "p5.48xlarge", FMINFRA_KERNEL_RELEASE="6.8.0-2000-aws")
    assert result.returncode == 0, result.stderr
    assert any("drv_install" in c for c in node.calls()[n_calls:])
    assert (node.root / "lib/modules/6.8.0-2000-aws/extra/gdrdrv.ko").exists()


def test_gdrcopy_package_without_the_unversioned_library_is_not_done(tmp_path: Path) -> None:
    """Defect 9: a GDRCopy package that lacks libgdrapi.so is not taken as done: the library is built."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    (node.root / "usr/lib/x86_64-linux-gnu/libgdrapi.so").unlink()
    result = node.run("install_gdrcopy.sh", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert "missing: libgdrapi.so on the loader path" in result.stderr
    assert any("lib_install" in c for c in node.calls())
    assert not any("drv_install" in c for c in node.calls())  # the DKMS module is there and loads at boot
    assert not (node.root / "etc/systemd/system/fminfra-gdrdrv.service").exists()


def test_ofi_source_build_installs_its_build_requirements(tmp_path: Path) -> None:
    """Defect 10: hwloc and a C++20 compiler for the opt-in aws-ofi-nccl source build."""
    for os_id, os_version, packages in (("ubuntu", "22.04", "g++ libhwloc-dev"), ("amzn", "2023", "gcc-c++ hwloc-devel")):
        node = make_node(tmp_path / os_id, os_id=os_id, os_version=os_version)
        node.set_manifest(AWS_OFI_NCCL_SOURCE_COMMIT="4" * 40)
        result = node.run("install_nccl.sh", "--instance-type", "p5.48xlarge")
        assert result.returncode == 0, result.stderr
        calls = node.calls()
        assert _index(calls, packages) < _index(calls, "aws-ofi-nccl.git") < _index(calls, "configure --prefix=")


def test_ofi_source_build_without_cxx20_stops(node: FakeNode) -> None:
    """Defect 10: a compiler without C++20 stops before the checkout, with one line."""
    node.set_manifest(AWS_OFI_NCCL_SOURCE_COMMIT="4" * 40)
    result = node.run("install_nccl.sh", "--instance-type", "p5.48xlarge", FAKE_GXX_VERSION="9")
    assert result.returncode == 1
    assert "the source build needs a C++20 compiler; g++ 9 does not accept -std=c++20" in result.stderr
    assert not any("aws-ofi-nccl.git" in c for c in node.calls())


# --- issue #31: checks of what a node can do, on the images AWS publishes ------------------------


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_verify_on_the_untouched_image(tmp_path: Path, image: str) -> None:
    """As HyperPod runs on_create on a fresh node: `--verify` before anything was installed gives the
    answer the image's published contents imply (node_fakes.VERIFY_UNTOUCHED): a pass on the
    HyperPod AMIs, whatever form their NCCL and GDRCopy take; one FAIL line naming each missing
    component elsewhere. Nothing is installed or written outside the logs."""
    node, instance_type = make_image(tmp_path, image)
    before = node.snapshot()
    # on_create.sh says where NCCL comes from on a HyperPod node: the container.
    where = {"FMINFRA_NCCL_FROM": "container"} if image.startswith("hyperpod-") else {}
    result = node.run("bootstrap.sh", "--verify", "--instance-type", instance_type, **where)
    expected = VERIFY_UNTOUCHED[image]
    if expected is None:
        assert result.returncode == 0, result.stderr[-3000:]
        assert " FAIL " not in result.stderr
    else:
        assert result.returncode == 1
        for line in expected:
            assert line in result.stderr, (line, result.stderr[-3000:])
    assert read_only(node.calls()), node.calls()
    assert node.snapshot() == before


def test_efa_record_without_a_version_reads_as_a_version_other_than_the_pin(tmp_path: Path) -> None:
    """The x86_64 HyperPod Slurm AMI's note names libfabric's version where the installer's belongs
    (docs/facts/hyperpod.md#hyperpod-slurm-ami-contents), so its fake records no installer version:
    `--verify` answers as for any version other than the pin (a WARN naming what it read), and the
    absent record stays a FAIL."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib")
    unknown = node.run("install_efa.sh", "--verify", "--instance-type", instance_type)
    assert unknown.returncode == 0, unknown.stderr
    assert "WARN efa: EFA installer unknown version" in unknown.stderr
    node.put("/opt/amazon/efa_installed_packages", "# EFA installer version: 1.45.0\n")
    other = node.run("install_efa.sh", "--verify", "--instance-type", instance_type)
    assert (other.returncode, "WARN efa: EFA installer 1.45.0" in other.stderr) == (0, True), other.stderr
    (node.root / "opt/amazon/efa_installed_packages").unlink()
    absent = node.run("install_efa.sh", "--verify", "--instance-type", instance_type)
    assert absent.returncode == 1
    assert "FAIL efa: no EFA installer has run" in absent.stderr


def test_nccl_is_found_where_the_loader_finds_it_not_by_package_name(tmp_path: Path) -> None:
    """Defect 1: NCCL compiled into a CUDA folder (no package) counts, with the version the library
    itself reports; a package record without the library does not."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-x86_64-2026-01-25/nccl-cuda/ofi-lib")
    result = node.run("install_nccl.sh", "--verify", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert "WARN nccl: NCCL 2.27.5+cuda12.8 compiled into /usr/local/cuda-12.8/lib/libnccl.so.2" in result.stderr
    # A package that is recorded as installed but whose library is gone is not NCCL a node can load.
    bare = make_node(tmp_path / "bare")
    bare.install_packages(libnccl2=NCCL_PKG)
    result = bare.run("install_nccl.sh", "--verify", "--instance-type", "g6e.xlarge")
    assert result.returncode == 1 and "FAIL nccl: no NCCL" in result.stderr


def test_image_nccl_in_a_cuda_folder_goes_on_the_loader_path_and_never_shadows_a_pinned_one(tmp_path: Path) -> None:
    """Defect 1 / risk 6: the image's NCCL in /usr/local/cuda-X.Y/lib is put on the loader path when
    it is the NCCL in use; when fminfra installs the pinned libnccl2, its folder comes first on
    LD_LIBRARY_PATH, so that the image's copy in a CUDA folder cannot shadow it."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-arm64-2025-08-12/gdrcopy-dkms")
    assert node.run("configure_environment.sh", "--instance-type", instance_type).returncode == 0
    assert "/usr/local/cuda/lib\n" in (node.root / "etc/ld.so.conf.d/fminfra-gpu.conf").read_text() + "\n"
    assert node.run("install_nccl.sh", "--verify", "--instance-type", instance_type).returncode == 0
    pinned, _ = make_image(tmp_path / "pinned", "hyperpod-slurm-x86_64-2026-01-25/nccl-cuda/ofi-lib")
    (pinned.root / "usr/local/cuda-13.0/lib").mkdir(parents=True)
    (pinned.root / "usr/local/cuda-13.0/lib/libnccl.so.2").symlink_to("../../cuda-12.8/lib/libnccl.so.2.27.5")
    result = pinned.run("install_nccl.sh", "--instance-type", "p5.48xlarge", FMINFRA_ENFORCE_VERSIONS="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert pinned.run("configure_environment.sh", "--instance-type", "p5.48xlarge").returncode == 0
    profile = (pinned.root / "etc/profile.d/fminfra-gpu.sh").read_text()
    assert "export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:/usr/local/cuda-13.0/lib64:" in profile


def test_gdrcopy_missing_on_a_hyperpod_ami_is_a_warning_in_verify(tmp_path: Path) -> None:
    """Defect 1: GDRCopy is not named by every HyperPod AMI release; --verify WARNs, never FAILs,
    and names what a node lacks (the loader's answer, the module)."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-arm64-2025-08-12/gdrcopy-source")
    result = node.run("install_gdrcopy.sh", "--verify", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert "WARN gdrcopy: no gdrcopy build or package; missing: libgdrapi.so on the loader path" in result.stderr
    # The same build, once its folder is on the loader path (ld.so.conf.d), is found by the loader.
    node.put("/etc/ld.so.conf.d/gdrcopy.conf", "/opt/gdrcopy/lib\n")
    result = node.run("install_gdrcopy.sh", "--verify", "--instance-type", instance_type)
    assert "libgdrapi.so on the loader path" not in result.stderr.split("missing:")[-1]


@pytest.mark.parametrize("name", ["nvidia-fabricmanager", "nvidia-fabricmanager-595"])
def test_fabric_manager_of_branch_590_and_later(tmp_path: Path, name: str) -> None:
    """Defect 5: from branch 590 NVIDIA's CUDA repository names the package nvidia-fabricmanager
    (Ubuntu's archive keeps nvidia-fabricmanager-595): an image's Fabric Manager is found under
    either name; a missing one is installed under NVIDIA's name at the driver's version and held, so
    that an upgrade cannot move it to another branch."""
    node, instance_type = make_image(tmp_path, "dlami-base-oss-ubuntu-22.04")
    (node.state / "pkgs" / "nvidia-fabricmanager-595").unlink()
    node.install_packages(**{name: "595.91.07-1"})
    result = node.run("install_driver.sh", "--verify", "--instance-type", instance_type)
    assert f"PASS fabric-manager: {name} 595.91.07-1, driver 595.91.07" in result.stderr
    (node.state / "pkgs" / name).unlink()
    (node.root / "usr/bin/nv-fabricmanager").unlink()  # the package and what it installed
    result = node.run("install_driver.sh", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert any(c.endswith(" nvidia-fabricmanager=595.91.07-1") for c in node.installs()), node.installs()
    assert (node.state / "held" / "nvidia-fabricmanager").exists()


def test_driver_branch_590_or_later_is_not_installed_on_ubuntu(node: FakeNode) -> None:
    """Defect 5: the renamed packages of branch 590+ are not installed by a guess at their names."""
    node.set_manifest(NVIDIA_DRIVER_BRANCH="595")
    result = node.run("install_driver.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 2
    assert "NVIDIA_DRIVER_BRANCH=595: installing branch 590 or later on Ubuntu is not supported" in result.stderr
    assert node.installs() == []


def test_imex_at_another_version_than_the_driver_is_kept(tmp_path: Path) -> None:
    """The HyperPod AMI of 2025-08-12 pairs IMEX 570.172.08-1 with driver 570.158.01: reported, kept."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-arm64-2025-08-12/gdrcopy-dkms")
    result = node.run("install_driver.sh", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert "nvidia-imex: adopting what the image carries (nvidia-imex-570 570.172.08-1, driver 570.158.01" in result.stderr
    assert node.installs() == []


# --- NCCL from the container on HyperPod; Fabric Manager and IMEX as what the node can run --------


def test_hyperpod_verify_without_host_nccl_warns_where_nccl_comes_from(tmp_path: Path) -> None:
    """A1: no HyperPod x86_64 release entry names NCCL (docs/facts/hyperpod.md#hyperpod-nccl-from-container):
    with FMINFRA_NCCL_FROM=container (on_create.sh) a node without host NCCL is a WARN that says
    where NCCL comes from; on EC2 (the default, host) the same node FAILs; any other value exits 2."""
    node, instance_type = make_image(tmp_path, "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib")
    result = node.run("install_nccl.sh", "--verify", "--instance-type", instance_type, FMINFRA_NCCL_FROM="container")
    assert result.returncode == 0, result.stderr
    assert "WARN nccl: no host NCCL (libnccl.so.2 is neither on the loader path nor in a CUDA folder); " in result.stderr
    assert "NCCL comes from the job's container (pyxis/enroot on Slurm, the pod's image on EKS)" in result.stderr
    host = node.run("install_nccl.sh", "--verify", "--instance-type", instance_type)
    assert host.returncode == 1 and "FAIL nccl: no NCCL" in host.stderr
    bad = node.run("install_nccl.sh", "--verify", "--instance-type", instance_type, FMINFRA_NCCL_FROM="image")
    assert bad.returncode == 2
    assert "FMINFRA_NCCL_FROM='image' is not one of host, container" in bad.stderr


@pytest.mark.parametrize(
    ("image", "step", "binary", "package"),
    [
        ("hyperpod-eks-al2023-x86_64-2025-10-22/nccl-none", "fabric-manager", "nv-fabricmanager", "nvidia-fabricmanager"),
        ("hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib", "fabric-manager", "nv-fabricmanager", "nvidia-fabricmanager-580"),
        ("hyperpod-slurm-arm64-2025-08-12/gdrcopy-dkms", "nvidia-imex", "nvidia-imex", "nvidia-imex-570"),
    ],
)
def test_fabric_manager_and_imex_are_what_the_node_can_run(tmp_path: Path, image: str, step: str, binary: str, package: str) -> None:
    """B1 class: Fabric Manager and IMEX count when their program is on the node (/usr/bin, as
    ParallelCluster's cookbook checks: docs/facts/node-software.md#fabric-manager-imex-binaries), a
    package being one way to learn the version: a package record without the program is missing;
    the program without a package is kept, its version unknown (WARN)."""
    node, instance_type = make_image(tmp_path, image)
    (node.root / "usr/bin" / binary).unlink()
    result = node.run("install_driver.sh", "--verify", "--instance-type", instance_type)
    assert result.returncode == 1
    assert f"FAIL {step}: no /usr/bin/{binary}" in result.stderr, result.stderr
    assert f"(package {package} is recorded, but its program is not on the node)" in result.stderr
    node.put(f"/usr/bin/{binary}")
    (node.root / "usr/bin" / binary).chmod(0o755)
    (node.state / "pkgs" / package).unlink()
    result = node.run("install_driver.sh", "--verify", "--instance-type", instance_type)
    assert result.returncode == 0, result.stderr
    assert f"WARN {step}: /usr/bin/{binary}, version unknown (no package records it: " in result.stderr, result.stderr


@pytest.mark.parametrize(("driver", "name"), [("570.172.08", "nvidia-fabric-manager"), ("580.95.05", "nvidia-fabricmanager")])
def test_fabric_manager_rpm_name_follows_the_driver_branch(tmp_path: Path, driver: str, name: str) -> None:
    """B1: on Amazon Linux 2023 Fabric Manager is nvidia-fabric-manager before branch 580 and
    nvidia-fabricmanager from 580 on (docs/facts/node-software.md#nvidia-fabric-manager-rpm-name):
    installed under the loaded driver's branch name, at its version, held."""
    node = make_node(tmp_path, os_id="amzn", os_version="2023")
    node.load_driver(driver)
    result = node.run("install_driver.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr[-2000:]
    assert [c for c in node.installs() if "fabric" in c] == [f"dnf -y -q install {name}-{driver}-1"]
    assert (node.state / "held" / name).exists() and (node.root / "usr/bin/nv-fabricmanager").exists()
