"""Layer 5: the node scripts, run under a fake root with fake commands on PATH (tests/node_fakes.py),
plus shellcheck, the no-eval rule, the per-type table against the catalog and the one-manifest rule."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fminfra import catalog
from tests.conftest import ROOT
from tests.node_fakes import MANIFEST, NODE, FakeNode, install_ami, make_node, sign

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
        if script.name in ("lib.sh", "manifest.sh"):  # sourced libraries, never run
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


def test_instance_table_matches_the_catalog() -> None:
    table = _table()
    assert set(table) == set(catalog.CATALOG)
    for name, (gpus, efa, nvswitch, _nvlsm, arch, _fail, _warn) in table.items():
        spec = catalog.get(name)
        attached = catalog.attached_efa_interfaces(name) if spec.training else 0
        assert (int(gpus), int(efa), nvswitch == "yes", arch) == (spec.gpus, attached, spec.nvswitch, spec.architecture), name


def test_only_measured_types_have_nccl_thresholds() -> None:
    # docs/facts/instances.md#nccl-allreduce-p5-two-node (measured on 2x p5.48xlarge) and #nccl-allreduce-ci-gate-250: fail below 250 GB/s, warn below 400.
    thresholds = {name: (cols[5], cols[6]) for name, cols in _table().items() if cols[5] != "-"}
    assert thresholds == {"p5.48xlarge": ("250", "400")}


def test_no_component_version_outside_the_manifest() -> None:
    keys = [
        k for k in MANIFEST if k.endswith(("_VERSION", "_FINGERPRINT", "_COMMIT", "_SHA256")) and k != "EKS_SUPPORTED_KUBERNETES_VERSIONS"
    ]
    keys += [k for k in MANIFEST if k.startswith(("CHART_", "EKS_ADDON_"))]
    values = {k: MANIFEST[k] for k in keys if MANIFEST[k] and len(MANIFEST[k]) >= 4}
    assert "NCCL_VERSION" in values and "EFA_INSTALLER_VERSION" in values
    # baselines/ holds synthesized templates (like the snapshots under tests/): they quote the manifest.
    skip_parts = {
        ".git",
        ".venv",
        ".venv-checkov",
        ".hypothesis",
        "node_modules",
        "cdk.out",
        "baselines",
        "build",
        "dist",
        "tests",
        "__pycache__",
        ".pytest_cache",
        ".ruff_cache",
        ".mypy_cache",
    }
    hits = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        # package-lock.json pins npm packages, whose versions can equal a manifest value by chance.
        if not path.is_file() or skip_parts & set(rel.parts) or path.suffix == ".md" or rel.name == "package-lock.json":
            continue
        if rel == Path("scripts/node/versions.env"):
            continue
        text = path.read_text(errors="ignore")
        for key, value in values.items():
            if re.search(rf"(?<![0-9A-Za-z.]){re.escape(value)}(?![0-9A-Za-z])", text):
                hits.append(f"{rel}: {key}={value}")
    assert hits == []


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
    assert f"NCCL {MANIFEST['NCCL_VERSION']}+cuda{MANIFEST['CUDA_VERSION']}" in out
    assert f"EFA installer {MANIFEST['EFA_INSTALLER_VERSION']}" in out
    assert f"os={os_name}" in out and f"instance-type={instance_type}" in out
    steps = re.findall(r"^  \[([a-z-]+)\]", out, flags=re.M)
    assert steps == [
        "nvidia-repo",
        "nvidia-driver",
        "fabric-manager",
        "nvlsm",
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
        "insmod.sh",
        "nccl-tests.git",
        "BUILDDIR=",
        "ldconfig",
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
    assert "NCCL_TUNER_PLUGIN=/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-ofi-tuner.so" in profile
    for banned in ("FI_PROVIDER", "NCCL_PROTO", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE"):
        assert banned not in profile
    assert (node.root / "var/log/fminfra/bootstrap.log").read_text().count("bootstrap: done") == 1
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ install_efa INFO: ", (node.root / "var/log/fminfra/install_efa.log").read_text())

    before, n_calls = node.snapshot(), len(calls)
    second = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert second.returncode == 0, second.stderr
    again = node.calls()[n_calls:]
    assert {c.split()[0] for c in again} <= {"dpkg-query", "nvidia-smi"}, again
    assert node.snapshot() == before
    assert "done-marker matches" in second.stderr


def test_al2023_uses_dnf_and_the_rpm_key(tmp_path: Path) -> None:
    node = make_node(tmp_path, os_id="amzn", os_version="2023")
    result = node.run("bootstrap.sh", "--instance-type", "p6-b200.48xlarge")
    assert result.returncode == 0, result.stderr
    calls = node.calls()
    assert _index(calls, "dnf -y -q module install nvidia-driver:") < _index(calls, "nvidia-fabric-manager") < _index(calls, "nvlsm")
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


def test_ami_components_are_verified_not_reinstalled(node: FakeNode) -> None:
    install_ami(node, libnccl2="2.27.3-1+cuda12.9")
    result = node.run("bootstrap.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr
    installs = [c for c in node.calls() if c.startswith("apt-get") and " install " in c]
    assert not any("libnccl2" in c or "cuda-toolkit" in c or "nvidia-driver" in c for c in installs), installs
    assert not any("efa_installer.sh" in c for c in node.calls())
    assert "nccl: the node carries another version (libnccl2 2.27.3-1+cuda12.9" in result.stderr


def test_verify_mode_installs_nothing_and_fails_on_a_bare_node(node: FakeNode) -> None:
    result = node.run("bootstrap.sh", "--verify", "--instance-type", "p5.48xlarge")
    assert result.returncode == 1
    assert "FAIL nvidia-driver: no NVIDIA driver responds" in result.stderr
    assert "FAIL efa: no EFA installer has run" in result.stderr
    assert {c.split()[0] for c in node.calls()} <= {"dpkg-query", "nvidia-smi"}


def test_verify_mode_passes_on_an_ami_that_carries_everything(node: FakeNode) -> None:
    install_ami(node)
    result = node.run("bootstrap.sh", "--verify", "--instance-type", "ml.p5.48xlarge")
    assert result.returncode == 0, result.stderr
    for name in ("nvidia-driver", "fabric-manager", "cuda-toolkit", "efa", "nccl", "aws-ofi-nccl", "gdrcopy"):
        assert f"PASS {name}:" in result.stderr
    # fminfra's own additions: configuration is left alone, nccl-tests is optional on an AMI.
    assert "SKIP nvidia-repo:" in result.stderr and "SKIP environment:" in result.stderr
    assert "WARN nccl-tests: nccl-tests: not built by fminfra" in result.stderr
    assert "FAIL" not in result.stderr
    assert {c.split()[0] for c in node.calls()} <= {"dpkg-query", "nvidia-smi"}
    assert not node.markers.exists()


def test_verify_mode_warns_on_other_versions(node: FakeNode) -> None:
    install_ami(node, libnccl2="2.27.3-1+cuda12.9")
    result = node.run("bootstrap.sh", "--verify", "--instance-type", "p5.48xlarge")
    assert result.returncode == 0, result.stderr
    assert "WARN nccl: libnccl2 2.27.3-1+cuda12.9 (manifest: NCCL " in result.stderr


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
    node = make_node(tmp_path, pinned_commits=False)
    result = node.run("install_gdrcopy.sh", "--instance-type", "p5.48xlarge")
    assert result.returncode == 1
    assert "verification failed: no commit pinned for https://github.com/NVIDIA/gdrcopy.git" in result.stderr
    assert not (node.markers / "gdrcopy.done").exists()


def test_checked_out_commit_must_equal_the_pin(node: FakeNode) -> None:
    result = node.run("install_nccl_tests.sh", "--instance-type", "p5.48xlarge", FAKE_GIT_HEAD="3" * 40)
    assert result.returncode == 1
    assert f"checked out {'3' * 40}, the manifest pins {'2' * 40}" in result.stderr
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
        node, "--instance-type", "p5.48xlarge", "--nccl-hosts", "h1,h2", "--launcher", "mpirun", FAKE_ALLREDUCE_OUTPUT=str(output)
    )
    assert _status(summary, "nccl-allreduce") == status, result.stdout
    assert f"{status} nccl-allreduce: bus bandwidth {busbw} GB/s" in result.stdout
    assert result.returncode == (1 if status == "FAIL" else 0)
    assert any(c.startswith("mpirun -np 16 --host h1:8,h2:8") for c in node.calls())


def test_validate_reports_missing_driver_and_inactive_nvlink(node: FakeNode) -> None:
    result, _ = _validate(node, "--instance-type", "p5.48xlarge", FAKE_DRIVER_VERSION="", FAKE_FI_INFO_OK="0")
    assert "FAIL driver: nvidia-smi failed" in result.stdout and "FAIL fi-info:" in result.stdout
    result, _ = _validate(node, "--instance-type", "p5.48xlarge", FAKE_NVLINK_INACTIVE="1")
    assert "FAIL nvlink: 1 NVLinks inactive" in result.stdout
