"""The acceptance jobs (scripts/jobs/) against a fake Slurm cluster (tests/fakes/slurm_fakes.py says what it
models), shellcheck, and the image-pin rule."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fminfra.core.versions import load_versions
from fminfra.ops.accept.node.results import busbw_at, parse_nccl_tests, read_fsx_results
from tests.fakes.slurm_fakes import DATA, JOBS, FakeCluster, make_cluster

DIGEST = "sha256:" + "ab" * 32
SBATCH_SCRIPTS = sorted(JOBS.glob("*.sbatch"))


@pytest.fixture
def cluster(tmp_path: Path) -> FakeCluster:
    return make_cluster(tmp_path)


def _env(cluster: FakeCluster, **extra: str) -> list[str]:
    run = cluster.root / "run"
    pairs = {"FMINFRA_JOBS_DIR": str(run / "scripts" / "jobs"), "FMINFRA_RESULTS_DIR": str(run / "results"), "GPUS_PER_NODE": "8", **extra}
    return ["--parsable", "--export=ALL," + ",".join(f"{k}={v}" for k, v in pairs.items())]


def _submit(cluster: FakeCluster, script: str, *extra_args: str, **extra_env: str) -> tuple[int, str]:
    jobs = cluster.root / "run" / "scripts" / "jobs"
    result = cluster.sbatch(*_env(cluster, **extra_env), *extra_args, str(jobs / script))
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout.strip())
    job = cluster.job(job_id)
    return int(job["exit_code"]), Path(str(job["output"])).read_text()


def test_shellcheck_is_clean() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    paths = [*SBATCH_SCRIPTS, *JOBS.glob("*.sh")]
    result = subprocess.run([str(shellcheck), "--external-sources", *map(str, paths)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", SBATCH_SCRIPTS, ids=lambda p: p.name)
def test_sbatch_directives_come_before_any_command(script: Path) -> None:
    """sbatch stops reading #SBATCH at the first non-comment line (docs/facts/jobs.md#sbatch-directives-before-commands)."""
    lines = script.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    late = [line for line in lines[first_command:] if line.startswith("#SBATCH")]
    assert late == []
    assert {"--nodes=2", "--exclusive"} <= {line.split()[1] for line in lines[:first_command] if line.startswith("#SBATCH")}


def test_nccl_job_runs_each_collective_over_all_gpus(cluster: FakeCluster) -> None:
    code, output = _submit(cluster, "nccl-tests.sbatch")
    assert code == 0, output
    calls = cluster.srun_calls()
    assert len(calls) == 3
    for call, collective in zip(calls, ("all_reduce", "all_gather", "reduce_scatter"), strict=True):
        assert call.startswith("--mpi=pmix --label --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=8 ")
        assert f"/{collective}_perf -b 8 -e 2G -f 2 -g 1" in call
    log = (cluster.root / "run" / "results" / "nccl-all_reduce.log").read_text()
    assert log.startswith("0: ")  # srun --label, as the recorded README output
    assert log.count("NCCL INFO NET/OFI Selected Provider is efa") == 16  # NCCL_DEBUG=INFO, every rank
    assert busbw_at(parse_nccl_tests(log)) == 436.95


def test_nccl_job_takes_the_node_environment(cluster: FakeCluster, tmp_path: Path) -> None:
    """The batch shell is no login shell: the job reads configure_environment.sh's profile itself."""
    profile = tmp_path / "fminfra-gpu.sh"
    profile.write_text("export NCCL_TUNER_PLUGIN=/opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so\n")
    code, output = _submit(cluster, "nccl-tests.sbatch", NODE_PROFILE=str(profile))
    assert code == 0, output
    assert "(NCCL_TUNER_PLUGIN=/opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so)" in output
    code, output = _submit(cluster, "nccl-tests.sbatch", NODE_PROFILE=str(tmp_path / "absent.sh"))
    assert code == 0 and "environment from" not in output


def test_nccl_job_missing_binaries(cluster: FakeCluster) -> None:
    code, output = _submit(cluster, "nccl-tests.sbatch", NCCL_TESTS_DIR="/nonexistent")
    assert code == 2
    assert "/nonexistent/all_reduce_perf not found: run scripts/node/install_nccl_tests.sh" in output
    assert cluster.srun_calls() == []


def test_nccl_job_rejects_an_unknown_collective(cluster: FakeCluster) -> None:
    code, output = _submit(cluster, "nccl-tests.sbatch", COLLECTIVES="alltoall")
    assert code == 2
    assert "COLLECTIVES: 'alltoall' is not one of all_reduce, all_gather, reduce_scatter" in output


def test_jobs_refuse_to_run_outside_sbatch(cluster: FakeCluster) -> None:
    jobs = cluster.root / "run" / "scripts" / "jobs"
    env = {**cluster.env, "FMINFRA_JOBS_DIR": str(jobs), "FMINFRA_RESULTS_DIR": str(cluster.root / "r")}
    result = subprocess.run(["bash", str(jobs / "nccl-tests.sbatch")], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "SLURM_JOB_ID is not set: submit this script with sbatch" in result.stderr


def test_jobs_need_the_jobs_folder_named(cluster: FakeCluster) -> None:
    """sbatch runs a copy from its spool folder, so the script cannot find common.sh beside itself."""
    jobs = cluster.root / "run" / "scripts" / "jobs"
    result = cluster.sbatch("--parsable", str(jobs / "nccl-tests.sbatch"))
    job = cluster.job(int(result.stdout))
    assert job["exit_code"] != 0
    assert "set FMINFRA_JOBS_DIR to the jobs folder on the shared file system" in Path(str(job["output"])).read_text()


TAG_ONLY = "nvcr.io/nvidia/pytorch:25.06-py3"
PINNED = f"nvcr.io#nvidia/pytorch:25.06-py3@{load_versions()['ACCEPT_PYTORCH_IMAGE_DIGEST']}"


def test_ddp_job_refuses_an_unpinned_image(cluster: FakeCluster) -> None:
    """An image without a digest stops the job before srun (docs/facts/jobs.md#accept-pytorch-image)."""
    code, output = _submit(cluster, "ddp-smoke.sbatch", FMINFRA_IMAGE=TAG_ONLY)
    assert code == 2
    assert "image 'nvcr.io/nvidia/pytorch:25.06-py3' is not pinned by digest" in output
    assert cluster.srun_calls() == []


def test_ddp_job_runs_the_manifest_pin_on_enroot_4(cluster: FakeCluster) -> None:
    """By default the job runs versions.env's tag@digest; enroot 4.0.0 or later accepts it."""
    (cluster.state / "out.txt").write_text("x\n")
    code, output = _submit(cluster, "ddp-smoke.sbatch", FAKE_ENROOT_VERSION="4.1.2", FAKE_TORCHRUN_OUTPUT=str(cluster.state / "out.txt"))
    assert code == 0, output
    assert f"--container-image={PINNED} " in cluster.srun_calls()[0]


def test_ddp_job_with_the_manifest_pin_runs_on_the_lifecycle_enroot(cluster: FakeCluster) -> None:
    """The lifecycle's enroot agrees with the pinned image (issue #31): the enroot it builds
    (ENROOT_VERSION) and the oldest it adopts from an AMI (ENROOT_MIN_VERSION) both pull it by
    digest (docs/facts/jobs.md#enroot-digest-references); enroot 3.5.0, which it used to install, did not."""
    (cluster.state / "out.txt").write_text("x\n")
    versions = load_versions()
    for enroot in (versions["ENROOT_VERSION"], versions["ENROOT_MIN_VERSION"]):
        code, output = _submit(cluster, "ddp-smoke.sbatch", FAKE_ENROOT_VERSION=enroot, FAKE_TORCHRUN_OUTPUT=str(cluster.state / "out.txt"))
        assert code == 0, (enroot, output)


def test_ddp_job_runs_torchrun_in_the_pinned_container(cluster: FakeCluster) -> None:
    (cluster.state / "out.txt").write_text('fminfra-ddp result {"world_size": 16}\n')
    code, output = _submit(
        cluster,
        "ddp-smoke.sbatch",
        FMINFRA_IMAGE=f"nvcr.io/nvidia/pytorch:25.06-py3@{DIGEST}",
        FAKE_ENROOT_VERSION="4.1.2",
        FAKE_TORCHRUN_OUTPUT=str(cluster.state / "out.txt"),
    )
    assert code == 0, output
    (call,) = cluster.srun_calls()
    assert f"--container-image=nvcr.io#nvidia/pytorch:25.06-py3@{DIGEST}" in call
    assert "--ntasks-per-node=1" in call
    assert re.search(r"torchrun --nnodes=2 --nproc-per-node=8 --rdzv-id=\d+ --rdzv-backend=c10d --rdzv-endpoint=node-1:29500 ", call)
    assert "/fminfra/jobs/ddp_smoke.py --steps 200 --result /fminfra/results/ddp.json" in call
    log = (cluster.root / "run" / "results" / "ddp.log").read_text()
    assert log == '0: fminfra-ddp result {"world_size": 16}\n'


def test_ddp_job_with_a_digest_fails_on_old_enroot(cluster: FakeCluster) -> None:
    """enroot before 4.0.0 cannot pull by digest (docs/facts/jobs.md#enroot-digest-references)."""
    code, _ = _submit(cluster, "ddp-smoke.sbatch", FMINFRA_IMAGE=f"nvcr.io/nvidia/pytorch:25.06-py3@{DIGEST}", FAKE_ENROOT_VERSION="3.5.0")
    assert code != 0
    log = (cluster.root / "run" / "results" / "ddp.log").read_text()
    assert "Invalid image reference" in log


def test_ddp_job_runs_unpinned_only_when_allowed(cluster: FakeCluster) -> None:
    (cluster.state / "out.txt").write_text("x\n")
    code, output = _submit(
        cluster, "ddp-smoke.sbatch", FMINFRA_IMAGE=TAG_ONLY, FMINFRA_ALLOW_UNPINNED="1", FAKE_TORCHRUN_OUTPUT=str(cluster.state / "out.txt")
    )
    assert code == 0, output
    assert "WARNING: running image 'nvcr.io/nvidia/pytorch:25.06-py3', not pinned by digest" in output
    assert "--container-image=nvcr.io#nvidia/pytorch:25.06-py3 " in cluster.srun_calls()[0]


def test_ddp_job_without_pyxis_fails(cluster: FakeCluster) -> None:
    """A test of the fake: without pyxis, srun has no --container-image option."""
    code, _ = _submit(cluster, "ddp-smoke.sbatch", FMINFRA_IMAGE=TAG_ONLY, FMINFRA_ALLOW_UNPINNED="1", FAKE_PYXIS="0")
    assert code != 0
    assert "srun: unrecognized option '--container-image'" in (cluster.root / "run" / "results" / "ddp.log").read_text()


def test_ddp_job_reports_torchrun_failure(cluster: FakeCluster) -> None:
    code, _ = _submit(
        cluster,
        "ddp-smoke.sbatch",
        FMINFRA_IMAGE=TAG_ONLY,
        FMINFRA_ALLOW_UNPINNED="1",
        FAKE_TORCHRUN_OUTPUT=str(DATA / "torchrun-child-failed.txt"),
        FAKE_TORCHRUN_EXIT="1",
    )
    assert code == 1
    assert "0: Root Cause (first observed failure):" in (cluster.root / "run" / "results" / "ddp.log").read_text()


def test_fsx_probe_runs_fio_on_every_node(cluster: FakeCluster) -> None:
    fsx = cluster.root
    code, output = _submit(cluster, "fsx-probe.sbatch", FSX_DIR=str(fsx))
    assert code == 0, output
    (call,) = cluster.srun_calls()
    assert "--nodes=2 --ntasks-per-node=1" in call
    results = cluster.root / "run" / "results"
    assert sorted(p.name for p in results.glob("fio-*.json")) == [
        "fio-node-1-read.json",
        "fio-node-1-write.json",
        "fio-node-2-read.json",
        "fio-node-2-write.json",
    ]
    assert read_fsx_results(results, "read").gb_per_s > 0
    assert not (fsx / "fminfra-accept").exists() or not any((fsx / "fminfra-accept").rglob("node-*"))


def test_fsx_probe_without_the_file_system(cluster: FakeCluster) -> None:
    code, output = _submit(cluster, "fsx-probe.sbatch", FSX_DIR="/nonexistent")
    assert code == 2
    assert "FSX_DIR /nonexistent is not a folder on the login node; is FSx for Lustre mounted?" in output


def test_sbatch_refuses_more_nodes_than_the_cluster(tmp_path: Path) -> None:
    """A test of the fake: a job larger than the cluster is refused at submission."""
    cluster = make_cluster(tmp_path, nodes=1)
    jobs = cluster.root / "run" / "scripts" / "jobs"
    result = cluster.sbatch(*_env(cluster), str(jobs / "nccl-tests.sbatch"))
    assert result.returncode != 0
    assert "Requested node configuration is not available" in result.stderr


def test_sbatch_ignores_directives_after_a_command(cluster: FakeCluster, tmp_path: Path) -> None:
    """A test of the fake: a late #SBATCH --nodes=5 is a comment, so the job gets 1 node."""
    late = tmp_path / "late.sbatch"
    late.write_text("#!/usr/bin/env bash\necho start\n#SBATCH --nodes=5\necho $SLURM_JOB_NUM_NODES\n")
    result = cluster.sbatch("--parsable", str(late))
    job = cluster.job(int(result.stdout))
    assert Path(str(job["output"])).read_text() == "start\n1\n"
