"""`fminfra accept`: the dry run of each shipped config, thresholds, and a run end to end on the login
node of the fake Slurm cluster (tests/fakes/slurm_fakes.py): pass, fail on low bandwidth, timeout, no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fminfra.cli.main import main as cli_main
from fminfra.config.pipeline import AcceptThresholds
from fminfra.core.versions import load_versions
from fminfra.ops.accept import slurm as accept
from fminfra.ops.accept.checks import SlurmJob, ddp_check, fsx_checks, nccl_threshold, read_instance_thresholds
from fminfra.ops.common import UsageError
from tests.conftest import ROOT
from tests.fakes.slurm_fakes import DATA, FakeCluster, ddp_result_line, make_cluster


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("FMINFRA_ALLOW_UNPINNED", raising=False)


# --- thresholds -----------------------------------------------------------------------------------


def test_thresholds_come_from_the_table_validate_sh_uses() -> None:
    """p5.48xlarge: fail < 250, warn < 400 (docs/facts/instances.md#nccl-allreduce-p5-two-node)."""
    table = read_instance_thresholds()
    assert table["p5.48xlarge"] == (250.0, 400.0)
    assert nccl_threshold("p5.48xlarge", None, table).fail_gbps == 250.0
    unmeasured = nccl_threshold("p5en.48xlarge", None, table)
    assert unmeasured.fail_gbps is None
    assert "no measured threshold for p5en.48xlarge" in unmeasured.source


def test_pipeline_thresholds_win() -> None:
    table = read_instance_thresholds()
    t = nccl_threshold("p5en.48xlarge", AcceptThresholds(nccl_fail_gbps=300), table)
    assert (t.fail_gbps, t.warn_gbps, t.source) == (300, 300, "pipeline.yaml accept")
    t = nccl_threshold("p5.48xlarge", AcceptThresholds(nccl_fail_gbps=200, nccl_warn_gbps=350), table)
    assert (t.fail_gbps, t.warn_gbps) == (200, 350)


def test_bad_instance_table_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "instance_types.tsv"
    bad.write_text("# name gpus ...\np5.48xlarge 8 32 yes no x86_64 fast 400\n")
    with pytest.raises(UsageError, match=r"instance_types.tsv: line 2: nccl_fail_gbps/nccl_warn_gbps must be numbers or '-'"):
        read_instance_thresholds(bad)


# --- dry run ----------------------------------------------------------------------------------------


def test_dry_run_dev_prints_the_sbatch_lines(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FMINFRA_ALLOW_UNPINNED", "1")
    assert cli_main(["accept", "dev", "--dry-run", "--run-id", "r1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "RUN=/fsx/fminfra-accept/r1"
    sbatch = [line for line in out if line.startswith("sbatch ")]
    assert sbatch[0] == (
        "sbatch --parsable --job-name=fminfra-accept-nccl-workers --partition=workers --nodes=2 --switches=1@5:00"
        " --output=$RUN/workers/nccl/slurm-%j.out"
        " --export=ALL,FMINFRA_JOBS_DIR=$RUN/scripts/jobs,FMINFRA_RESULTS_DIR=$RUN/workers/nccl,GPUS_PER_NODE=8"
        " $RUN/scripts/jobs/nccl-tests.sbatch"
    )
    assert [line.rsplit("/", 1)[1] for line in sbatch] == ["nccl-tests.sbatch", "ddp-smoke.sbatch", "fsx-probe.sbatch"]
    assert "fail < 250 GB/s, warn < 400 GB/s (instance_types.tsv (p5.48xlarge))" in "\n".join(out)
    assert "warn below the baseline 0.23 GB/s" in out[-1]  # 1200 GiB x 200 MB/s/TiB


def test_dry_run_takes_the_pinned_image(capsys: pytest.CaptureFixture[str]) -> None:
    """versions.env pins the image by digest (docs/facts/jobs.md#accept-pytorch-image): no image failure."""
    cli_main(["accept", "dev", "--dry-run", "--run-id", "r1"])
    assert "not pinned by digest" not in capsys.readouterr().out


def test_dry_run_reports_the_unpinned_image_as_missing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run ran no job, so it exits 0; what the run would refuse is reported."""
    manifest = load_versions() | {"ACCEPT_PYTORCH_IMAGE_DIGEST": ""}
    monkeypatch.setattr(accept, "load_versions", lambda: manifest)
    assert cli_main(["accept", "dev", "--dry-run", "--run-id", "r1"]) == 0
    out = capsys.readouterr()
    assert "ddp: MISSING, image nvcr.io/nvidia/pytorch:25.06-py3 is not pinned by digest" in out.out
    assert "accept dev --dry-run: missing: ddp: image nvcr.io/nvidia/pytorch:25.06-py3 is not pinned by digest" in out.err
    assert "FAIL" not in out.out


def _pipeline_without_thresholds() -> str:
    """The shipped pipeline.yaml less its accept thresholds (staging's and prod's p5en policy); runner
    labels stay (load_pipeline requires them for staging's private EKS endpoint)."""
    text = (ROOT / "pipeline.yaml").read_text().replace("config/", f"{ROOT}/config/")
    text = text.replace("accept: {nccl_fail_gbps: 250, nccl_warn_gbps: 400, runs_on:", "accept: {runs_on:")
    return "\n".join(line for line in text.splitlines() if "accept: {nccl_fail_gbps" not in line) + "\n"


def test_dry_run_prod_without_a_threshold_reports_it_missing_and_exits_0(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FMINFRA_ALLOW_UNPINNED", "1")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(_pipeline_without_thresholds())
    assert cli_main(["accept", "prod", "--dry-run", "--run-id", "r1", "--pipeline", str(pipeline)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "--partition=workers --nodes=16" in out
    assert (
        "MISSING, no threshold (none: instance_types.tsv has no measured threshold for p5en.48xlarge); set accept.nccl_fail_gbps for prod"
        in out
    )
    assert captured.err.splitlines() == [
        "accept prod --dry-run: missing: nccl workers: no threshold (none: instance_types.tsv has no measured threshold for "
        "p5en.48xlarge); set accept.nccl_fail_gbps for prod in pipeline.yaml",
        "accept prod --dry-run: nothing ran; a real run fails until the missing items above are set",
    ]


def test_dry_run_prod_with_a_pipeline_threshold(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FMINFRA_ALLOW_UNPINNED", "1")
    pipeline = tmp_path / "pipeline.yaml"
    text = _pipeline_without_thresholds()
    text = text.replace("    approval: true", "    approval: true\n    accept: {nccl_fail_gbps: 300, nccl_warn_gbps: 420}")
    pipeline.write_text(text)
    assert cli_main(["accept", "prod", "--dry-run", "--run-id", "r1", "--pipeline", str(pipeline)]) == 0
    assert "fail < 300 GB/s, warn < 420 GB/s (pipeline.yaml accept)" in capsys.readouterr().out


def test_dry_run_one_node_group_has_no_nccl_job(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FMINFRA_ALLOW_UNPINNED", "1")
    config = tmp_path / "one.yaml"
    config.write_text((ROOT / "config" / "dev.yaml").read_text().replace("count: 2", "count: 1"))
    assert cli_main(["accept", str(config), "--dry-run", "--run-id", "r1"]) == 0
    out = capsys.readouterr().out
    assert "nccl-tests.sbatch" not in out and "ddp-smoke.sbatch" in out
    assert "note: group workers: 1 node; the NCCL thresholds are for 2 nodes, no NCCL job" in out


def test_bad_pipeline_threshold_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    text = _pipeline_without_thresholds()
    pipeline.write_text(text.replace("    approval: true", "    approval: true\n    accept: {nccl_fail_gbps: 300, nccl_warn_gbps: 100}"))
    assert cli_main(["accept", "prod", "--dry-run", "--pipeline", str(pipeline)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{pipeline}: environments[2].accept: nccl_warn_gbps (100.0) must not be below nccl_fail_gbps (300.0)"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["accept", "examples/ec2-odcr.yaml", "--dry-run"],
            "compute.orchestrator: accept runs on slurm and eks (HyperPod) environments; ec2 is not supported yet",
        ),
        (["accept", "nosuch", "--dry-run"], "config/nosuch.yaml"),
        (["accept", "dev", "--dry-run", "--run-id", "a/b"], "--run-id: letters, digits, '-' and '_' only"),
        (["accept", "dev", "--dry-run", "--pipeline", "missing.yaml"], "missing.yaml: no such pipeline file"),
        (["accept", "dev", "--timeout-minutes", "0"], "--timeout-minutes and --poll-seconds must be greater than 0"),
    ],
)
def test_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def _without_lustre(tmp_path: Path) -> Path:
    """dev.yaml less storage.lustre: a HyperPod Slurm environment whose nodes share no file system
    (the lifecycle mounts /fsx only when the parameters name FSx: scripts/lifecycle/on_create.sh)."""
    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    del data["storage"]["lustre"]
    config = tmp_path / "nolustre.yaml"
    config.write_text(yaml.safe_dump(data))
    return config


@pytest.mark.parametrize("verb", ["accept", "accept-remote"])
@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
def test_a_slurm_environment_without_lustre_is_one_line(
    verb: str, dry_run: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without FSx the jobs' folder (/fsx/fminfra-accept/RUN) is on no shared file system: exit 2 before anything runs."""
    config = _without_lustre(tmp_path)
    assert cli_main([verb, str(config), "--run-id", "r1", *dry_run]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"{config}: storage.lustre: not set, and HyperPod Slurm nodes then share no file system (fminfra mounts only FSx for Lustre,"
        " at /fsx): the acceptance jobs run from a folder every node sees: add storage.lustre, or leave the environment out of"
        " the gate (accept: {gate: false} in pipeline.yaml)"
    ]


# --- end to end against the fake cluster ----------------------------------------------------------


@pytest.fixture
def login_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    """This process as the login node: the fakes on PATH, /fsx in a temporary folder."""
    cluster = make_cluster(tmp_path)
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    # The DDP image is pinned by digest: the nodes need enroot 4.0.0 or later (docs/facts/jobs.md#enroot-digest-references).
    monkeypatch.setenv("FAKE_ENROOT_VERSION", "4.1.2")
    monkeypatch.setattr(accept, "FSX_MOUNT", str(cluster.root))
    ddp = cluster.state / "ddp.txt"
    ddp.write_text(ddp_result_line(41.5, 1.2, 0.2) + "\n")
    monkeypatch.setenv("FAKE_TORCHRUN_OUTPUT", str(ddp))
    return cluster


def _accept(tmp_path: Path, *extra: str) -> int:
    return cli_main(["accept", "dev", "--run-id", "e2e", "--poll-seconds", "0.01", "--report", str(tmp_path / "report.json"), *extra])


def test_end_to_end_pass(login_node: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _accept(tmp_path) == 0
    out = capsys.readouterr().out
    assert "PASS nccl all_reduce workers" in out and "436.95 GB/s" in out
    assert "PASS ddp workers" in out and "41.5 ms/step" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["result"] == "PASS"
    by_name = {c["name"]: c for c in report["checks"]}
    assert set(by_name) == {
        "topology slurm",
        "placement nccl workers",
        "nccl all_reduce workers",
        "nccl all_gather workers",
        "nccl reduce_scatter workers",
        "ddp workers",
        "fsx write workers",
        "fsx read workers",
    }
    # fio-plot's SATA SSD is slower than dev's FSx baseline (0.23 GB/s) when written: a warning, not a failure.
    assert by_name["fsx write workers"]["status"] == "WARN"
    assert by_name["fsx read workers"]["figure"] == "0.38 GB/s"  # two nodes x 188.6 MB/s
    assert (login_node.root / "fminfra-accept" / "e2e" / "scripts" / "jobs" / "nccl-tests.sbatch").is_file()
    # the NCCL job asked for one leaf switch and landed under one (the fake's topology)
    assert "--switches=1@5:00" in login_node.job(1001)["argv"]
    assert (by_name["topology slurm"]["status"], by_name["topology slurm"]["figure"]) == ("PASS", "topology/tree")
    assert by_name["placement nccl workers"]["status"] == "PASS" and by_name["placement nccl workers"]["figure"] == "1 1 1 domains"
    assert by_name["nccl all_reduce workers"]["detail"].endswith("; inside one leaf switch")
    assert report["nccl_busbw_by_placement"] == {
        "workers": {
            "placement": "inside one leaf switch",
            "spans": {"switch-level-2": 1, "switch-level-1": 1, "switch-level-0": 1},
            "all_reduce_busbw_gbps": 436.95,
        }
    }
    assert report["placement"]["nccl workers"]["nodes"]["node-2"]["switch-level-0"] == "nn-3a2b3c4d5e6f70801"


def test_end_to_end_fails_on_low_bandwidth(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real 2x p4de.24xlarge output (76.79 GB/s) against p5.48xlarge's 250 GB/s floor."""
    monkeypatch.setenv("FAKE_NCCL_OUTPUT", str(DATA / "nccl-all-reduce-2x-p4de.txt"))
    assert _accept(tmp_path) == 1
    out = capsys.readouterr().out
    assert "FAIL nccl all_reduce workers" in out and "76.79 GB/s" in out
    assert "PASS ddp workers" in out
    assert json.loads((tmp_path / "report.json").read_text())["result"] == "FAIL"


def test_end_to_end_warns_between_the_thresholds(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The MPIJob output (313.29 GB/s at 1 GiB): above the floor, below the 400 GB/s expected."""
    monkeypatch.setenv("FAKE_NCCL_OUTPUT", str(DATA / "nccl-all-reduce-2x-p5-mpijob.txt"))
    assert _accept(tmp_path) == 0
    assert "WARN nccl all_reduce workers" in capsys.readouterr().out


def test_end_to_end_fails_without_efa(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Full bandwidth figures, but no rank logged "NET/OFI Selected provider is efa": a p5 must use EFA."""
    monkeypatch.setenv("FAKE_NCCL_DEBUG_OUTPUT", "")
    assert _accept(tmp_path) == 1
    assert "FAIL nccl all_reduce workers" in capsys.readouterr().out
    checks = json.loads((tmp_path / "report.json").read_text())["checks"]
    assert [c["detail"] for c in checks if c["name"] == "nccl all_reduce workers"] == [
        "NCCL did not use EFA: no 'NET/OFI Selected provider' line (NCCL_DEBUG=INFO); inside one leaf switch"
    ]


def test_end_to_end_torchrun_failure(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_TORCHRUN_OUTPUT", str(DATA / "torchrun-child-failed.txt"))
    monkeypatch.setenv("FAKE_TORCHRUN_EXIT", "1")
    assert _accept(tmp_path) == 1
    assert "ended FAILED" in capsys.readouterr().out


def test_end_to_end_timeout_cancels(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_SACCT_STATE", "RUNNING")
    assert _accept(tmp_path, "--timeout-minutes", "0.0005") == 1
    assert "did not finish in time (last state RUNNING); cancelled" in capsys.readouterr().out
    assert len((login_node.state / "scancel.log").read_text().splitlines()) == 3


def test_end_to_end_without_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here: not a login node
    assert _accept(tmp_path) == 2
    assert "sbatch/sacct not found; run `fminfra accept` on the cluster's login node, or use --dry-run" in capsys.readouterr().err


# --- checks that need every node -----------------------------------------------------------------


def test_ddp_with_fewer_ranks_than_the_group_fails(tmp_path: Path) -> None:
    job = SlurmJob("ddp", "workers", 2, 8, "ddp-smoke.sbatch", "workers/ddp")
    (tmp_path / "ddp.log").write_text("0: " + ddp_result_line(40.0, 1.0, 0.1, world_size=8) + "\n")
    check = ddp_check(job, tmp_path)
    assert (check.status, check.detail.split(": ")[-1]) == ("FAIL", "expected 16 ranks (2 nodes x 8 GPUs)")
    (tmp_path / "ddp.log").write_text("0: " + ddp_result_line(40.0, 1.0, 0.1) + "\n")
    assert ddp_check(job, tmp_path).status == "PASS"


def test_fsx_with_a_node_missing_fails(tmp_path: Path) -> None:
    job = SlurmJob("fsx", "workers", 2, 8, "fsx-probe.sbatch", "workers/fsx")
    for rw in ("read", "write"):
        (tmp_path / f"fio-node-1-{rw}.json").write_text((DATA / f"fio-3.1-rand{rw}-32jobs.json").read_text())
    checks = fsx_checks(job, tmp_path, 0.1)
    assert [(c.status, c.detail) for c in checks] == [
        ("FAIL", "results from 1 of 2 nodes, baseline 0.10 GB/s"),
        ("FAIL", "results from 1 of 2 nodes, baseline 0.10 GB/s"),
    ]


# --- placement: one leaf switch asked, where the nodes landed reported ----------------------------


def _checks(tmp_path: Path) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in json.loads((tmp_path / "report.json").read_text())["checks"]}


def test_nodes_under_two_leaf_switches_warn(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The test of the placement check: a topology where the two nodes hang off different leaves."""
    monkeypatch.setenv("FAKE_TOPOLOGY", str(DATA / "scontrol-show-topology-two-leaves.txt"))
    assert _accept(tmp_path) == 0  # a warning: the job ran, placed wider than asked
    checks = _checks(tmp_path)
    placement = checks["placement nccl workers"]
    assert (placement["status"], placement["figure"]) == ("WARN", "1 1 2 domains")
    assert placement["detail"].startswith("2 nodes, across 2 leaf switches, inside one level-1 switch")
    assert placement["detail"].endswith("asked: sbatch --switches=1@5:00")
    assert checks["nccl all_reduce workers"]["detail"].endswith("; across 2 leaf switches, inside one level-1 switch")
    assert "WARN placement nccl workers" in capsys.readouterr().out


@pytest.mark.parametrize("plugin", ["topology/default", "topology/flat"])
def test_no_topology_plugin_is_a_warning(login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin: str) -> None:
    """Slurm without a tree or block topology prints none (`scontrol show topology` is empty): warn, run anyway."""
    monkeypatch.setenv("FAKE_TOPOLOGY_PLUGIN", plugin)
    assert _accept(tmp_path) == 0
    checks = _checks(tmp_path)
    assert (checks["topology slurm"]["status"], checks["topology slurm"]["figure"]) == ("WARN", plugin)
    assert checks["placement nccl workers"]["status"] == "WARN"
    assert f"placement unknown (TopologyPlugin {plugin}: no topology to read)" in checks["placement nccl workers"]["detail"]


def test_slurm_25_topology_yaml_is_the_topology_whatever_the_plugin_prints(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 25.05+ Slurm takes the topology from topology.yaml beside slurm.conf and never reads
    TopologyPlugin, which `scontrol show config` then prints as topology/flat (scheduling re-read, B1)."""
    monkeypatch.setenv("FAKE_SLURM_VERSION", "25.11.2")
    monkeypatch.setenv("FAKE_TOPOLOGY_PLUGIN", "topology/flat")
    etc = tmp_path / "slurm-etc"
    etc.mkdir()
    monkeypatch.setenv("FAKE_SLURM_CONF", str(etc / "slurm.conf"))
    # the test of the test: without the file, flat is no topology
    assert _accept(tmp_path) == 0
    assert _checks(tmp_path)["topology slurm"]["status"] == "WARN"
    (etc / "topology.yaml").write_text("- topology: default\n  cluster_default: true\n  tree: {switches: []}\n")
    assert _accept(tmp_path) == 0
    checks = _checks(tmp_path)
    assert (checks["topology slurm"]["status"], checks["topology slurm"]["figure"]) == ("PASS", "topology/flat")
    assert str(etc / "topology.yaml") in checks["topology slurm"]["detail"]
    assert checks["placement nccl workers"]["figure"] == "1 1 1 domains"


def test_slurm_25_reads_slurmctlds_topology_where_the_login_node_has_no_file(
    login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configless login node has no topology.yaml on disk; `scontrol show topoconf` prints slurmctld's
    (scheduling third read, C1). The test of the test: a topoconf of a flat topology is no topology."""
    monkeypatch.setenv("FAKE_SLURM_VERSION", "25.11.2")
    monkeypatch.setenv("FAKE_TOPOLOGY_PLUGIN", "topology/flat")
    monkeypatch.setenv("FAKE_SLURM_CONF", str(tmp_path / "nowhere" / "slurm.conf"))
    topoconf = tmp_path / "topoconf.yaml"
    topoconf.write_text("- topology: default\n  cluster_default: true\n  flat: true\n")
    monkeypatch.setenv("FAKE_TOPOCONF", str(topoconf))
    assert _accept(tmp_path) == 0
    assert _checks(tmp_path)["topology slurm"]["status"] == "WARN"
    topoconf.write_text(
        "- topology: default\n  cluster_default: true\n  tree:\n    switches:\n      - switch: nn-1\n        nodes: ip-[1-2]\n"
    )
    assert _accept(tmp_path) == 0
    checks = _checks(tmp_path)
    assert checks["topology slurm"]["status"] == "PASS" and "scontrol show topoconf" in checks["topology slurm"]["detail"]
    assert checks["placement nccl workers"]["figure"] == "1 1 1 domains"


def test_slurm_25_names_the_node_with_node_equals(login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """25.05 and later read a bare word as a topology name (`scontrol show topology [name] [node=NAME]`)."""
    monkeypatch.setenv("FAKE_SLURM_VERSION", "25.11.2")
    assert _accept(tmp_path) == 0
    assert _checks(tmp_path)["placement nccl workers"]["figure"] == "1 1 1 domains"
    # the test of the test: the 24.11 form against 25.11 finds no switch
    from fminfra.ops.accept.node import runner

    monkeypatch.setattr(runner, "slurm_version", lambda: (24, 11))
    assert _accept(tmp_path) == 0
    assert "printed no switch or block" in _checks(tmp_path)["placement nccl workers"]["detail"]


def test_the_fake_sbatch_refuses_a_bad_switches_value(login_node: FakeCluster) -> None:
    """`--switches=<count>[@max-time]` (sbatch.1): anything else is refused, as sbatch refuses it."""
    script = str(login_node.root / "run" / "scripts" / "jobs" / "nccl-tests.sbatch")
    result = login_node.sbatch("--parsable", "--switches=one", script)
    assert result.returncode != 0 and "Invalid --switches" in result.stderr


def test_a_type_without_topology_asks_for_no_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A type without EC2 network topology (g5, g6: docs/facts/instances.md#ec2-topology-network-layers) gets
    no --switches. Training groups are EFA types, all with a topology today, so the catalog is stood in for."""
    from fminfra.config import load_config

    cfg = load_config(ROOT / "config" / "dev.yaml")
    with_topology = accept.slurm_plan(cfg, "r1", None, read_instance_thresholds())
    assert next(j for j in with_topology.jobs if j.kind == "nccl").switches == accept.NCCL_SWITCHES
    monkeypatch.setattr(accept, "network_layers", lambda instance_type: None)
    plan = accept.slurm_plan(cfg, "r1", None, read_instance_thresholds())
    nccl = next(j for j in plan.jobs if j.kind == "nccl")
    assert nccl.switches == "" and not any(a.startswith("--switches") for a in nccl.sbatch("/run"))


def test_an_ultraserver_group_asks_for_no_switch() -> None:
    """UltraServers get HyperPod's block topology, where --switches does nothing (scheduling re-read, C1)."""
    from fminfra.config import load_config

    text = (ROOT / "config" / "dev.yaml").read_text()
    cfg = load_config(ROOT / "config" / "dev.yaml")
    group = cfg.compute.instance_groups[0]
    assert group.spec.fabric != "imex" and "p6e-gb200" not in text  # the test of the test: dev asks for a switch
    assert next(j for j in accept.slurm_plan(cfg, "r1", None, read_instance_thresholds()).jobs if j.kind == "nccl").switches
    ultra = cfg.model_copy(deep=True)
    object.__setattr__(ultra.compute.instance_groups[0], "instance_type", "ml.p6e-gb200.36xlarge")
    nccl = next(j for j in accept.slurm_plan(ultra, "r1", None, read_instance_thresholds()).jobs if j.kind == "nccl")
    assert nccl.switches == ""


def test_a_partition_topology_of_topology_yaml_is_read(login_node: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """25.05+: the cluster default may be flat while the GPU partition has its own tree (topology.yaml);
    accept reads the partition's `Topology=` and names it to `scontrol show topology`."""
    monkeypatch.setenv("FAKE_SLURM_VERSION", "25.11.2")
    monkeypatch.setenv("FAKE_TOPOLOGY_PLUGIN", "topology/flat")
    monkeypatch.setenv("FAKE_PARTITION_TOPOLOGY", "gpu-tree")
    assert _accept(tmp_path) == 0
    checks = _checks(tmp_path)
    assert checks["topology slurm"]["status"] == "PASS" and "partition workers: topology gpu-tree" in checks["topology slurm"]["detail"]
    assert checks["placement nccl workers"]["figure"] == "1 1 1 domains"
    # the test of the test: without the partition's topology the flat default has nothing to show
    monkeypatch.delenv("FAKE_PARTITION_TOPOLOGY")
    assert _accept(tmp_path) == 0
    assert _checks(tmp_path)["topology slurm"]["status"] == "WARN"


def test_a_region_without_ec2_topology_asks_for_no_switch_and_says_why() -> None:
    """Outside the regions where EC2 describes instance topology (docs/facts/instances.md#ec2-topology-regions)
    HyperPod has no tree to write: no --switches, and the placement row says so instead of "unknown"."""
    from fminfra.config import load_config
    from fminfra.ops.accept.node.runner import evaluate, job_placement

    cfg = load_config(ROOT / "config" / "dev.yaml")
    assert next(j for j in accept.slurm_plan(cfg, "r1", None, read_instance_thresholds()).jobs if j.kind == "nccl").switches
    elsewhere = cfg.model_copy(update={"region": "eu-south-1"})
    plan = accept.slurm_plan(elsewhere, "r1", None, read_instance_thresholds())
    nccl = next(j for j in plan.jobs if j.kind == "nccl")
    assert nccl.switches == "" and nccl.no_topology == "no EC2 topology in eu-south-1"
    # the login node reads no switches for it (a tree plugin would print none): the row says why
    placement = job_placement(nccl, ["a", "b"], "topology/tree", (24, 11))
    checks = evaluate(plan.for_node(), {"1": "COMPLETED"}, {j: "1" for j in plan.jobs}, {nccl: placement})
    row = next(c for c in checks if c.name == "placement nccl workers")
    assert (row.status, row.detail) == ("PASS", "no EC2 topology in eu-south-1; asked: nothing (no EC2 topology in eu-south-1)")
