"""scripts/node/drain_before_plan_end.sh end to end: a HyperPod Slurm node of a training-plan
group reads its plan's end (DescribeTrainingPlan), and at the end - 30 minutes - the drain sets
itself DRAIN and tells its jobs, ending what is still running before SageMaker starts terminating
the plan's instances (tests/fakes/drain_fakes.py models the CLI and Slurm and cites its sources)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fminfra.hyperpod.constructs.plan_drain_handler.index import plan_end as handler_plan_end
from tests.conftest import ROOT
from tests.fakes.drain_fakes import CHECKPOINTING_JOB, STUBBORN_JOB, install_fakes, slurm_state, training_plans

SCRIPT = ROOT / "scripts" / "node" / "drain_before_plan_end.sh"
PLAN = "arn:aws:sagemaker:us-east-1:333333333333:training-plan/fminfra-prod-p5en"
NODE = "ip-10-1-0-12"
TERMINATIONS_BEFORE_END = timedelta(minutes=30)
# The PATH systemd gives a service that sets none (systemd.exec(5); docs/facts/hyperpod.md#systemd-service-path).
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    install_fakes(tmp_path / "bin")
    return {
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "FMINFRA_ROOT": str(tmp_path / "root"),
        "FMINFRA_PLAN_ARN": PLAN,
        "FMINFRA_PLAN_DRAIN_SECONDS": "600",
        # A fifth of a second: the poll takes a decimal (GNU sleep's NUMBER, docs/facts/node-software.md#gnu-sleep-fraction).
        "FMINFRA_DRAIN_POLL_SECONDS": "0.2",
        "FMINFRA_DRAIN_MARGIN_SECONDS": "5",
        "FMINFRA_SLURM_NODE_NAME": NODE,
        "FMINFRA_RETRIES": "1",
        "FAKE_AWS_LOG": str(tmp_path / "aws.log"),
        "FAKE_SLURM_STATE": str(tmp_path / "slurm.json"),
        "FAKE_TRAINING_PLANS": str(tmp_path / "plans.json"),
    }


def _capacity(n: int, instance_type: str, start: datetime, end: datetime, status: str = "Active") -> dict[str, object]:
    """One ReservedCapacitySummary (botocore's shape: its required members and its own times)."""
    arn = f"arn:aws:sagemaker:us-east-1:333333333333:reserved-capacity/fminfra-prod-p5en-{n:04d}"
    return {
        "ReservedCapacityArn": arn,
        "InstanceType": instance_type,
        "TotalInstanceCount": 2,
        "Status": status,
        "StartTime": start,
        "EndTime": end,
    }


def _plan(env: dict[str, str], end: datetime, capacities: list[dict[str, object]] | None = None) -> None:
    """The plan as DescribeTrainingPlan returns it (its required members, EndTime and, where
    given, its ReservedCapacitySummaries)."""
    plan: dict[str, object] = {"TrainingPlanArn": PLAN, "TrainingPlanName": PLAN.rsplit("/", 1)[1], "Status": "Active", "EndTime": end}
    if capacities is not None:
        plan["ReservedCapacitySummaries"] = capacities
    training_plans(Path(env["FAKE_TRAINING_PLANS"]), [plan])


def _node_running(tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]], body: str) -> None:
    script = tmp_path / "job.sh"
    script.write_text(body)
    jobs.append(subprocess.Popen(["bash", str(script)], env={**os.environ, "CKPT": str(tmp_path / "job.ckpt")}))
    slurm_state(Path(env["FAKE_SLURM_STATE"]), NODE, {"201": jobs[-1].pid})


def _run(env: dict[str, str], verb: str = "check", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), verb], env=env, capture_output=True, text=True, check=False, timeout=timeout)


def _slurm(env: dict[str, str]) -> dict[str, object]:
    return json.loads(Path(env["FAKE_SLURM_STATE"]).read_text())


def test_nothing_drains_before_the_drain_time(tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]) -> None:
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    end = datetime(2027, 1, 17, 11, 30, tzinfo=UTC)
    _plan(env, end)
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "drain at 2027-01-17T10:50:00Z" in result.stderr + result.stdout
    assert "log" not in _slurm(env)
    # No reserved capacities listed: the plan's EndTime.
    calls = [json.loads(line) for line in Path(env["FAKE_AWS_LOG"]).read_text().splitlines()]
    assert [c[1]["--query"] for c in calls] == ["ReservedCapacitySummaries[].[InstanceType,Status,EndTime]", "EndTime"]
    assert all(c[1]["--training-plan-name"] == PLAN and c[1]["--output"] == "text" for c in calls)


def test_at_the_drain_time_jobs_checkpoint_and_the_node_drains_once(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    # The drain (600 s) started a minute ago; SageMaker terminates 30 minutes before the end.
    _plan(env, datetime.now(UTC) + TERMINATIONS_BEFORE_END + timedelta(seconds=540))
    result = _run(env)
    assert result.returncode == 0, result.stderr
    slurm = _slurm(env)
    assert slurm["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1"]  # type: ignore[index]
    assert "training plan ends" in slurm["nodes"][NODE]["reason"]  # type: ignore[index]
    assert (tmp_path / "job.ckpt").read_text().startswith("step=")
    again = _run(env)
    assert again.returncode == 0 and "already drained" in again.stderr + again.stdout
    assert _slurm(env)["log"] == slurm["log"]


def test_a_job_that_ignores_the_signal_ends_before_sagemaker_terminates(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    _node_running(tmp_path, env, jobs, STUBBORN_JOB)
    # On a whole second (the script reads the end to the second): the deadline, the margin (5 s)
    # before the terminations, is exactly 3 s after the next whole second.
    terminations = datetime.fromtimestamp(math.ceil(time.time()) + 8, UTC)
    _plan(env, terminations + TERMINATIONS_BEFORE_END)
    result = _run(env)
    finished = time.time()
    assert result.returncode == 0, result.stderr
    expected = [f"node {NODE} DRAIN", "job 201 signalled USR1", f"node {NODE} DOWN", "job 201 ended (node DOWN)"]
    assert _slurm(env)["log"] == expected
    # Ended by the margin (5 s) before the terminations, never after them.
    assert finished < terminations.timestamp()


def test_watch_wakes_for_the_drain_not_a_poll_late(tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]) -> None:
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    # 1-2 s ahead, on a whole second (the script reads the end to the second): the first check
    # (a fraction of a second) finds the drain still ahead and the loop sleeps until it.
    drain_at = datetime.fromtimestamp(math.ceil(time.time()) + 2, UTC)
    _plan(env, drain_at + timedelta(seconds=600) + TERMINATIONS_BEFORE_END)
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "watch"],
        env={**env, "FMINFRA_PLAN_POLL_SECONDS": "300"},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 30
        while time.time() < deadline and "log" not in _slurm(env):
            time.sleep(0.1)
        assert _slurm(env).get("log", [])[:1] == [f"node {NODE} DRAIN"]
        assert time.time() < drain_at.timestamp() + 15
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the watch loop and its sleep
        proc.communicate()


def test_the_end_is_read_again_and_an_unknown_plan_drains_nothing(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    Path(env["FAKE_TRAINING_PLANS"]).write_text("[]")
    result = _run(env)
    assert result.returncode == 0
    assert "ResourceNotFound" in result.stderr and "could not read the end" in result.stderr
    assert "log" not in _slurm(env)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FMINFRA_PLAN_ARN", ""),
        ("FMINFRA_PLAN_ARN", "arn:aws:sagemaker:us-east-1:333333333333:cluster/abc"),
        ("FMINFRA_PLAN_DRAIN_SECONDS", "ten"),
        ("FMINFRA_DRAIN_POLL_SECONDS", ".5"),
        ("FMINFRA_DRAIN_POLL_SECONDS", "0.00"),
        ("FMINFRA_PLAN_POLL_SECONDS", "0.5"),
    ],
)
def test_bad_settings_exit_2_with_one_line(env: dict[str, str], name: str, value: str) -> None:
    result = _run({**env, name: value})
    assert result.returncode == 2
    assert name in result.stderr and result.stderr.count("\n") == 1


def test_the_fake_cli_refuses_what_the_real_one_does(env: dict[str, str]) -> None:
    """Test of the test: an option DescribeTrainingPlan does not take, and a missing plan name."""
    Path(env["FAKE_TRAINING_PLANS"]).write_text("[]")
    for args in (["--plan-name", PLAN], ["--query", "EndTime"]):
        result = subprocess.run(["aws", "sagemaker", "describe-training-plan", *args], env=env, capture_output=True, text=True, check=False)
        assert result.returncode == 252, result.stderr


def test_install_writes_and_starts_the_unit(tmp_path: Path, env: dict[str, str]) -> None:
    calls = tmp_path / "systemctl.log"
    (tmp_path / "bin" / "systemctl").write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n')
    (tmp_path / "bin" / "systemctl").chmod(0o755)
    result = _run({**env, "FMINFRA_AWS_REGION": "us-east-1"}, "install")
    assert result.returncode == 0, result.stderr
    root = Path(env["FMINFRA_ROOT"])
    unit = (root / "etc/systemd/system/fminfra-plan-drain.service").read_text()
    node = root / "opt/fminfra/node"
    assert f"ExecStart=/usr/bin/env bash {node / SCRIPT.name} watch" in unit
    assert "Environment=PATH=/opt/slurm/bin:" in unit
    assert {p.name for p in node.iterdir()} >= {SCRIPT.name, "lib.sh", "drain_lib.sh", "manifest.sh", "versions.env"}
    settings = (root / "etc/fminfra/plan-drain.env").read_text().splitlines()
    assert f"FMINFRA_PLAN_ARN={PLAN}" in settings and "FMINFRA_PLAN_DRAIN_SECONDS=600" in settings
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now fminfra-plan-drain.service"]


def test_a_plan_of_two_capacities_drains_before_the_first_ends_and_again_before_the_second(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    """Each reserved capacity of the group's type ends on its own (SageMaker terminates 30 minutes
    before each end); another type's capacity and a Failed one are not this node's."""
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    now = datetime.now(UTC).replace(microsecond=0)
    first_end = now + TERMINATIONS_BEFORE_END + timedelta(seconds=540)  # its drain began a minute ago
    second_start, second_end = now + timedelta(days=2), now + timedelta(days=4)
    capacities = [
        _capacity(1, "ml.p5en.48xlarge", now - timedelta(days=1), first_end),
        _capacity(2, "ml.p5en.48xlarge", second_start, second_end, "Scheduled"),
        _capacity(3, "ml.p5.48xlarge", now - timedelta(days=1), now + TERMINATIONS_BEFORE_END + timedelta(seconds=60)),
        _capacity(4, "ml.p5en.48xlarge", now - timedelta(days=1), now + TERMINATIONS_BEFORE_END + timedelta(seconds=60), "Failed"),
    ]
    _plan(env, second_end, capacities)
    typed = {**env, "FMINFRA_INSTANCE_TYPE": "ml.p5en.48xlarge"}
    result = _run(typed)
    assert result.returncode == 0, result.stderr
    assert _slurm(env)["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1"]
    assert f"training plan ends {first_end:%Y-%m-%dT%H:%M:%SZ}" in _slurm(env)["nodes"][NODE]["reason"]  # type: ignore[index]
    # The first capacity has ended; the second's drain time has come: it drains again.
    second_end = (
        datetime.now(UTC).replace(microsecond=0) + TERMINATIONS_BEFORE_END + timedelta(seconds=570)
    )  # never the first end, however fast the first check ran
    capacities[0]["EndTime"] = now - timedelta(seconds=1)
    capacities[1].update(StartTime=now, EndTime=second_end, Status="Active")
    _plan(env, second_end, capacities)
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    again = _run(typed)
    assert again.returncode == 0, again.stderr + again.stdout
    assert _slurm(env).get("log") == [f"node {NODE} DRAIN", "job 201 signalled USR1"], again.stderr
    assert f"training plan ends {second_end:%Y-%m-%dT%H:%M:%SZ}" in _slurm(env)["nodes"][NODE]["reason"]  # type: ignore[index]


def test_the_fake_plan_is_botocores_shape(env: dict[str, str]) -> None:
    """Test of the test: a capacity without its required members is not a DescribeTrainingPlan response."""
    with pytest.raises(ValueError, match="ReservedCapacityArn"):
        _plan(env, datetime.now(UTC), [{"InstanceType": "ml.p5en.48xlarge", "EndTime": datetime.now(UTC)}])


def _unit(root: Path, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The installed unit's ExecStart and the environment systemd would give it: only its
    Environment= and EnvironmentFile= settings, PATH systemd's own where the unit sets none. Each
    PATH folder is looked up under the fake root first (the fakes' /opt/slurm/bin, /usr/local/bin)."""
    unit = (root / "etc/systemd/system/fminfra-plan-drain.service").read_text().splitlines()
    env = {"PATH": SYSTEMD_PATH}
    for line in unit:
        if line.startswith("Environment="):
            name, _, value = line.removeprefix("Environment=").partition("=")
            env[name] = value
        elif line.startswith("EnvironmentFile="):
            for setting in Path(line.removeprefix("EnvironmentFile=")).read_text().splitlines():
                if setting and not setting.startswith("#"):
                    name, _, value = setting.partition("=")
                    env[name] = value
    env["PATH"] = ":".join(f"{root}{d}:{d}" for d in env["PATH"].split(":"))
    env |= {"FMINFRA_ROOT": str(root), "FMINFRA_RETRIES": "1", "FMINFRA_DRAIN_POLL_SECONDS": "0.2"}
    env |= {
        k: str(tmp_path / v)
        for k, v in (("FAKE_AWS_LOG", "aws.log"), ("FAKE_SLURM_STATE", "slurm.json"), ("FAKE_TRAINING_PLANS", "plans.json"))
    }
    (exec_start,) = [line.removeprefix("ExecStart=") for line in unit if line.startswith("ExecStart=")]
    return shlex.split(exec_start), env


def _install_from_lifecycle_folder(tmp_path: Path, env: dict[str, str]) -> Path:
    """Installs the unit the way on_create.sh does on HyperPod: from the folder HyperPod copied
    the lifecycle scripts to; the fakes where a HyperPod node has the real commands."""
    root = Path(env["FMINFRA_ROOT"])
    install_fakes(root / "opt/slurm/bin")
    (root / "opt/slurm/bin/aws").rename(tmp_path / "aws")
    (root / "usr/local/bin").mkdir(parents=True)
    (tmp_path / "aws").rename(root / "usr/local/bin/aws")
    lifecycle = tmp_path / "sagemaker-lifecycle-abc" / "node"
    shutil.copytree(SCRIPT.parent, lifecycle)
    result = subprocess.run(
        ["bash", str(lifecycle / SCRIPT.name), "install"],
        env={**env, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return lifecycle.parent


def _run_unit(argv: list[str], env: dict[str, str]) -> str:
    """Runs the unit's ExecStart until the node is DRAIN and its job signalled (or 30 s); returns what it logged."""
    proc = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and len(_slurm(env).get("log", [])) < 2 and proc.poll() is None:  # type: ignore[arg-type]
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


@pytest.mark.parametrize("lifecycle_gone", [False, True], ids=["installed", "after-reboot"])
def test_the_unit_drains_with_slurm_only_in_opt_slurm_bin(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]], lifecycle_gone: bool
) -> None:
    """systemd's PATH has no /opt/slurm/bin, where HyperPod's scontrol is; after a reboot
    HyperPod's lifecycle folder (/tmp/sagemaker-lifecycle-*) is gone and the unit still runs."""
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text("#!/usr/bin/env bash\n")
    systemctl.chmod(0o755)
    (tmp_path / "bin" / "scontrol").unlink()
    lifecycle = _install_from_lifecycle_folder(tmp_path, env)
    if lifecycle_gone:
        shutil.rmtree(lifecycle)
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    _plan(env, datetime.now(UTC) + TERMINATIONS_BEFORE_END + timedelta(seconds=540))
    argv, unit_env = _unit(Path(env["FMINFRA_ROOT"]), tmp_path)
    out = _run_unit(argv, unit_env)
    assert _slurm(env).get("log", [])[:2] == [f"node {NODE} DRAIN", "job 201 signalled USR1"], out


def test_without_scontrol_no_drain_is_recorded(tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]) -> None:
    """A node where scontrol is not found has not drained: the next check, with Slurm found, drains."""
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    _plan(env, datetime.now(UTC) + TERMINATIONS_BEFORE_END + timedelta(seconds=540))
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(tmp_path / "bin" / "aws", bare / "aws")
    result = _run({**env, "PATH": f"{bare}:{SYSTEMD_PATH}"})
    assert result.returncode == 1 and "no scontrol on PATH" in result.stderr
    assert not list((Path(env["FMINFRA_ROOT"]) / "var/lib/fminfra").glob("plan-drained-*"))
    assert "log" not in _slurm(env)
    again = _run(env)
    assert again.returncode == 0, again.stderr
    assert _slurm(env)["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1"]


def _drained_before(env: dict[str, str], end: datetime, reason: str) -> None:
    """A node this script drained for `end` (its marker), whose Slurm Reason is now `reason`."""
    state_dir = Path(env["FMINFRA_ROOT"]) / "var/lib/fminfra"
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / f"plan-drained-{int(end.timestamp())}").touch()
    slurm = _slurm(env)
    slurm["nodes"] = {NODE: {"state": "DRAIN", "reason": reason}}
    Path(env["FAKE_SLURM_STATE"]).write_text(json.dumps(slurm))


def test_a_node_still_there_after_the_end_it_drained_for_is_resumed(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    """The plan went on (extended, or its next capacity): the end passed and SageMaker did not
    terminate the node, so the drain is undone."""
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    now = datetime.now(UTC).replace(microsecond=0)
    passed = now - timedelta(minutes=5)
    _drained_before(env, passed, f"fminfra: training plan ends {passed:%Y-%m-%dT%H:%M:%SZ}")
    _plan(env, now + timedelta(days=7))
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert _slurm(env)["log"] == [f"node {NODE} RESUME"]
    assert _slurm(env)["nodes"][NODE] == {"state": "IDLE", "reason": ""}  # type: ignore[index]
    again = _run(env)
    assert again.returncode == 0 and _slurm(env)["log"] == [f"node {NODE} RESUME"]


def test_a_drained_node_whose_plan_end_moved_later_is_resumed(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    _plan(env, datetime.now(UTC).replace(microsecond=0) + TERMINATIONS_BEFORE_END + timedelta(seconds=540))
    assert _run(env).returncode == 0
    assert _slurm(env)["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1"]
    _plan(env, datetime.now(UTC) + timedelta(days=14))  # the plan was extended
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert _slurm(env)["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1", f"node {NODE} RESUME"]


def test_a_node_an_operator_drained_is_not_resumed(tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]) -> None:
    """After this script's drain, an operator drained the node for a reason of their own."""
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    passed = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    _drained_before(env, passed, "disk replacement")
    _plan(env, datetime.now(UTC) + timedelta(days=7))
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "log" not in _slurm(env)
    assert _slurm(env)["nodes"][NODE] == {"state": "DRAIN", "reason": "disk replacement"}  # type: ignore[index]
    assert "not this script's" in result.stderr


def _sinfo(env: dict[str, str], fmt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sinfo", "--noheader", f"--nodes={NODE}", f"--format={fmt}"], env=env, capture_output=True, text=True, check=False
    )


def test_the_fake_sinfo_refuses_another_format(env: dict[str, str]) -> None:
    """Test of the test: the fake answers only the query the script makes."""
    slurm_state(Path(env["FAKE_SLURM_STATE"]), NODE, {})
    for fmt in ("%T", "%E", "%t|%E"):
        assert _sinfo(env, fmt).returncode != 0, fmt


@pytest.mark.parametrize(
    ("state", "flags", "busy", "printed"),
    [
        ("DRAIN", {}, True, "drng disk replacement"),
        ("DRAIN", {}, False, "drain disk replacement"),
        ("DOWN", {"suffix": "*"}, False, "down* disk replacement"),
        ("DRAIN", {"suffix": "$", "partitions": 2}, False, "drain$ disk replacement\ndrain$ disk replacement"),
        ("IDLE", {}, False, "idle none"),
    ],
)
def test_the_fake_sinfo_prints_state_and_reason_as_sinfo_does(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]], state: str, flags: dict[str, object], busy: bool, printed: str
) -> None:
    """Test of the test: %t is the compact state (drng while jobs run, drain once none do) with
    its flag suffix, %E the whole reason or "none", a line per partition (docs/facts/jobs.md#slurm-sinfo-state-reason)."""
    reason = "" if state == "IDLE" else "disk replacement"
    if busy:
        _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    pids = {"201": jobs[-1].pid} if busy else {}
    slurm_state(Path(env["FAKE_SLURM_STATE"]), NODE, pids, state=state, reason=reason, **flags)
    result = _sinfo(env, "%t %E")
    assert result.returncode == 0, result.stderr
    assert result.stdout == printed + "\n"


# A node an operator (or Slurm) took out of service: its state, reason and sinfo flags.
OTHERS_HOLD = {
    "draining": ("DRAIN", "disk replacement", {}),
    "drained-in-maintenance": ("DRAIN", "disk replacement", {"suffix": "$", "partitions": 2}),
    "down-not-responding": ("DOWN", "Not responding", {"suffix": "*"}),
    "down": ("DOWN", "GPU 3 fell off the bus", {}),
}


@pytest.mark.parametrize("hold", OTHERS_HOLD.values(), ids=OTHERS_HOLD.keys())
def test_a_node_already_out_of_service_for_another_reason_is_left_alone_until_it_returns(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]], hold: tuple[str, str, dict[str, object]]
) -> None:
    """Not drained, not signalled, no drain recorded: once the operator resumes the node, the
    next check drains it for the plan's end."""
    state, reason, flags = hold
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    slurm_state(Path(env["FAKE_SLURM_STATE"]), NODE, {"201": jobs[-1].pid}, state=state, reason=reason, **flags)
    _plan(env, datetime.now(UTC) + TERMINATIONS_BEFORE_END + timedelta(seconds=540))
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "log" not in _slurm(env)
    assert _slurm(env)["nodes"][NODE] == {"state": state, "reason": reason, **flags}  # type: ignore[index]
    assert f"'{reason}'" in result.stderr and "left as it is" in result.stderr
    assert not list((Path(env["FMINFRA_ROOT"]) / "var/lib/fminfra").glob("plan-drained-*"))
    assert not (tmp_path / "job.ckpt").exists()
    # The operator resumes it: the next check drains it.
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    again = _run(env)
    assert again.returncode == 0, again.stderr
    assert _slurm(env)["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1"]


def test_a_node_fminfra_drained_before_is_drained_again(tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]) -> None:
    """A node whose Reason is fminfra's (a drain whose marker was lost) is this script's to drain."""
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    slurm_state(
        Path(env["FAKE_SLURM_STATE"]), NODE, {"201": jobs[-1].pid}, state="DRAIN", reason="fminfra: training plan ends 2027-01-17T11:30:00Z"
    )
    _plan(env, datetime.now(UTC) + TERMINATIONS_BEFORE_END + timedelta(seconds=540))
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert _slurm(env)["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1"]


def test_a_node_whose_state_cannot_be_read_is_not_drained_nor_recorded(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    (tmp_path / "bin" / "sinfo").write_text("#!/usr/bin/env bash\necho 'sinfo: error: slurm_load_node: Socket timed out' >&2\nexit 1\n")
    _plan(env, datetime.now(UTC) + TERMINATIONS_BEFORE_END + timedelta(seconds=540))
    result = _run(env)
    assert result.returncode == 1 and "could not read the state" in result.stderr
    assert "log" not in _slurm(env)
    assert not list((Path(env["FMINFRA_ROOT"]) / "var/lib/fminfra").glob("plan-drained-*"))


def test_a_node_drained_for_another_reason_after_the_drain_is_not_resumed_even_when_still_drained(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    """The Reason decides, read in full: an operator's reason that merely contains ours is not ours."""
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    passed = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    _drained_before(env, passed, f"RMA, was fminfra: training plan ends {passed:%Y-%m-%dT%H:%M:%SZ}")
    _plan(env, datetime.now(UTC) + timedelta(days=7))
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "log" not in _slurm(env)


def _capacity_without_end(n: int, instance_type: str) -> dict[str, object]:
    """A ReservedCapacitySummary without its optional StartTime and EndTime (botocore's shape)."""
    capacity = _capacity(n, instance_type, datetime.now(UTC), datetime.now(UTC), "Pending")
    del capacity["StartTime"], capacity["EndTime"]
    return capacity


def test_a_capacity_without_an_end_time_is_skipped_and_the_others_still_drain(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    now = datetime.now(UTC).replace(microsecond=0)
    ending = now + TERMINATIONS_BEFORE_END + timedelta(seconds=540)
    _plan(
        env,
        now + timedelta(days=9),
        [_capacity_without_end(1, "ml.p5en.48xlarge"), _capacity(2, "ml.p5en.48xlarge", now - timedelta(days=1), ending)],
    )
    result = _run({**env, "FMINFRA_INSTANCE_TYPE": "ml.p5en.48xlarge"})
    assert result.returncode == 0, result.stderr
    assert _slurm(env)["log"] == [f"node {NODE} DRAIN", "job 201 signalled USR1"]
    assert f"training plan ends {ending:%Y-%m-%dT%H:%M:%SZ}" in _slurm(env)["nodes"][NODE]["reason"]  # type: ignore[index]


def test_capacities_without_end_times_give_nothing_to_drain_for(
    tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    """Not an error read again every poll, and not the plan's EndTime: as the EKS handler does."""
    _node_running(tmp_path, env, jobs, CHECKPOINTING_JOB)
    _plan(env, datetime.now(UTC) + TERMINATIONS_BEFORE_END + timedelta(seconds=540), [_capacity_without_end(1, "ml.p5en.48xlarge")])
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "nothing to drain for" in result.stderr and "could not read" not in result.stderr
    assert "log" not in _slurm(env)


def _shell_end(result: subprocess.CompletedProcess[str]) -> int | None:
    """The end `check` acted on, from its log: None where it found nothing to drain for."""
    out = result.stderr + result.stdout
    if "nothing to drain for" in out:
        return None
    found = re.search(r"ends (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ): (?:drain at|draining until)", out)
    assert found, out
    return int(datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())


def _plan_shapes(now: datetime) -> dict[str, tuple[datetime | None, list[dict[str, object]] | None]]:
    later, much_later, passed = now + timedelta(days=2), now + timedelta(days=5), now - timedelta(hours=1)
    return {
        "plan-end-only": (later, None),
        "plan-without-end": (None, None),
        "capacity-without-end": (later, [_capacity_without_end(1, "ml.p5en.48xlarge")]),
        "one-without-end-one-with": (
            much_later,
            [_capacity_without_end(1, "ml.p5en.48xlarge"), _capacity(2, "ml.p5en.48xlarge", now, later)],
        ),
        "passed-and-ahead": (
            much_later,
            [_capacity(1, "ml.p5en.48xlarge", passed - timedelta(days=1), passed), _capacity(2, "ml.p5en.48xlarge", now, much_later)],
        ),
        "all-passed": (passed, [_capacity(1, "ml.p5en.48xlarge", passed - timedelta(days=1), passed)]),
        "failed-and-other-type": (
            much_later,
            [_capacity(1, "ml.p5en.48xlarge", now, later, "Failed"), _capacity(2, "ml.p5.48xlarge", now, later)],
        ),
    }


@pytest.mark.parametrize("shape", list(_plan_shapes(datetime.now(UTC))))
def test_the_end_is_the_one_the_eks_handler_finds(env: dict[str, str], shape: str) -> None:
    """The Slurm path and the HyperPod EKS handler (plan_drain_handler/index.py's plan_end) pick
    the same end from the same DescribeTrainingPlan answer."""
    now = datetime.now(UTC).replace(microsecond=0)
    end, capacities = _plan_shapes(now)[shape]
    plan: dict[str, object] = {"TrainingPlanArn": PLAN, "TrainingPlanName": PLAN.rsplit("/", 1)[1], "Status": "Active"}
    if end is not None:
        plan["EndTime"] = end
    if capacities is not None:
        plan["ReservedCapacitySummaries"] = capacities
    training_plans(Path(env["FAKE_TRAINING_PLANS"]), [plan])
    slurm_state(Path(env["FAKE_SLURM_STATE"]), NODE, {})
    result = _run({**env, "FMINFRA_INSTANCE_TYPE": "ml.p5en.48xlarge"})
    assert result.returncode == 0, result.stderr
    assert _shell_end(result) == handler_plan_end(plan, "ml.p5en.48xlarge", int(now.timestamp()))


def test_the_end_comparison_sees_a_difference(env: dict[str, str]) -> None:
    """Test of the test: the shell's end of one plan is not the handler's end of another (an
    earlier capacity the shell was not shown)."""
    now = datetime.now(UTC).replace(microsecond=0)
    end, capacities = _plan_shapes(now)["passed-and-ahead"]
    plan: dict[str, object] = {"TrainingPlanArn": PLAN, "TrainingPlanName": PLAN.rsplit("/", 1)[1], "Status": "Active", "EndTime": end}
    plan["ReservedCapacitySummaries"] = capacities
    training_plans(Path(env["FAKE_TRAINING_PLANS"]), [plan])
    slurm_state(Path(env["FAKE_SLURM_STATE"]), NODE, {})
    result = _run({**env, "FMINFRA_INSTANCE_TYPE": "ml.p5en.48xlarge"})
    other = {**plan, "ReservedCapacitySummaries": [*capacities, _capacity(3, "ml.p5en.48xlarge", now, now + timedelta(days=1))]}  # type: ignore[misc]
    assert _shell_end(result) != handler_plan_end(other, "ml.p5en.48xlarge", int(now.timestamp()))
