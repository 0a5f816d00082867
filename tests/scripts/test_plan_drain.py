"""scripts/node/drain_before_plan_end.sh end to end: a HyperPod Slurm node of a training-plan
group reads its plan's end (DescribeTrainingPlan), and at the end - 30 minutes - the drain sets
itself DRAIN and tells its jobs, ending what is still running before SageMaker starts terminating
the plan's instances (tests/fakes/drain_fakes.py models the CLI and Slurm and cites its sources)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fakes.drain_fakes import install_fakes, slurm_state

SCRIPT = ROOT / "scripts" / "node" / "drain_before_plan_end.sh"
PLAN = "arn:aws:sagemaker:us-east-1:333333333333:training-plan/fminfra-prod-p5en"
NODE = "ip-10-1-0-12"
TERMINATIONS_BEFORE_END = timedelta(minutes=30)

CHECKPOINTING_JOB = """trap 'echo step=$STEP > "$CKPT"; exit 0' USR1
STEP=0
while :; do STEP=$((STEP + 1)); sleep 0.1; done
"""
STUBBORN_JOB = """trap '' USR1
while :; do sleep 0.1; done
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    install_fakes(tmp_path / "bin")
    return {
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "FMINFRA_ROOT": str(tmp_path / "root"),
        "FMINFRA_PLAN_ARN": PLAN,
        "FMINFRA_PLAN_DRAIN_SECONDS": "600",
        "FMINFRA_DRAIN_POLL_SECONDS": "1",
        "FMINFRA_DRAIN_MARGIN_SECONDS": "5",
        "FMINFRA_SLURM_NODE_NAME": NODE,
        "FMINFRA_RETRIES": "1",
        "FAKE_AWS_LOG": str(tmp_path / "aws.log"),
        "FAKE_SLURM_STATE": str(tmp_path / "slurm.json"),
        "FAKE_TRAINING_PLANS": str(tmp_path / "plans.json"),
    }


def _plan(env: dict[str, str], end: datetime) -> None:
    """The plan as DescribeTrainingPlan returns it (its required members and EndTime), with the
    timestamp as the AWS CLI prints it."""
    plan = {"TrainingPlanArn": PLAN, "TrainingPlanName": PLAN.rsplit("/", 1)[1], "Status": "Active", "EndTime": end.isoformat()}
    Path(env["FAKE_TRAINING_PLANS"]).write_text(json.dumps([plan]))


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
    (call,) = [json.loads(line) for line in Path(env["FAKE_AWS_LOG"]).read_text().splitlines()]
    assert call == ["describe-training-plan", {"--training-plan-name": PLAN, "--query": "EndTime", "--output": "text"}]


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
    terminations = datetime.now(UTC) + timedelta(seconds=9)
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
    drain_at = datetime.now(UTC) + timedelta(seconds=3)
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
            time.sleep(0.5)
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
    assert f"ExecStart=/usr/bin/env bash {SCRIPT} watch" in unit
    settings = (root / "etc/fminfra/plan-drain.env").read_text().splitlines()
    assert f"FMINFRA_PLAN_ARN={PLAN}" in settings and "FMINFRA_PLAN_DRAIN_SECONDS=600" in settings
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now fminfra-plan-drain.service"]
