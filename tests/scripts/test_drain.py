"""scripts/node/drain_on_terminate.sh end to end: an Auto Scaling group with the drain hook scales
an instance in, the node sees it in its instance metadata, drains itself from Slurm or
Kubernetes and completes the hook, before EC2 reclaims the block (tests/fakes/drain_fakes.py
models each party and cites its source)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fminfra.capacity.rules import DRAIN_HOOK_NAME, DRAIN_HOOK_TRANSITION, drain_budget_seconds, hook_heartbeat_seconds
from tests.conftest import ROOT
from tests.fakes.drain_fakes import CHECKPOINTING_JOB, STUBBORN_JOB, AutoScalingGroupModel, MetadataServer, install_fakes, slurm_state

SCRIPT = ROOT / "scripts" / "node" / "drain_on_terminate.sh"
GROUP = "fminfra-dev-train"
INSTANCE = "i-0123456789abcdef0"
NODE = "train-1"
K8S_NODE = "ip-10-0-1-23.us-west-2.compute.internal"
TARGET_STATE = "autoscaling/target-lifecycle-state"


def _group(drain_s: int, hooks: bool = True) -> AutoScalingGroupModel:
    spec = {"LifecycleHookName": DRAIN_HOOK_NAME, "LifecycleTransition": DRAIN_HOOK_TRANSITION, "DefaultResult": "CONTINUE"}
    spec["HeartbeatTimeout"] = hook_heartbeat_seconds(timedelta(seconds=drain_s))
    model = AutoScalingGroupModel.from_template(GROUP, {"Properties": {"LifecycleHookSpecificationList": [spec] if hooks else []}})
    model.launch(INSTANCE)
    return model


@pytest.fixture
def env_base(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FMINFRA_ROOT": str(tmp_path / "root"),
        "FMINFRA_DRAIN_GROUP": GROUP,
        "FMINFRA_DRAIN_HOOK": DRAIN_HOOK_NAME,
        # A fifth of a second: the poll takes a decimal (GNU sleep's NUMBER, docs/facts/node-software.md#gnu-sleep-fraction).
        "FMINFRA_DRAIN_POLL_SECONDS": "0.2",
        "FMINFRA_SLURM_NODE_NAME": NODE,
        "FAKE_AWS_LOG": str(tmp_path / "aws.log"),
        "FAKE_SLURM_STATE": str(tmp_path / "slurm.json"),
        "FAKE_K8S_STATE": str(tmp_path / "k8s.json"),
    }


def _job(tmp_path: Path, body: str, name: str) -> subprocess.Popen[bytes]:
    script = tmp_path / f"{name}.sh"
    script.write_text(body)
    return subprocess.Popen(["bash", str(script)], env={**os.environ, "CKPT": str(tmp_path / f"{name}.ckpt")})


def _watch(
    env: dict[str, str], model: AutoScalingGroupModel, server: MetadataServer, in_service_reads: int = 3
) -> subprocess.CompletedProcess[str]:
    """Starts the handler's watch loop, lets it read InService `in_service_reads` times, scales the
    instance in, and waits for the handler to end."""
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "watch"],
        env={**env, "FMINFRA_IMDS_URL": server.url, "FAKE_AWS_ENDPOINT": server.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 30
    while server.read_count(TARGET_STATE) < in_service_reads and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert server.read_count(TARGET_STATE) >= in_service_reads, "the handler must poll the target lifecycle state"
    assert proc.poll() is None, "the handler must wait while the instance is InService"
    model.scale_in(INSTANCE)
    out, err = proc.communicate(timeout=60)
    model.tick()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _slurm_node_running(tmp_path: Path, env: dict[str, str], jobs: list[subprocess.Popen[bytes]], job_id: str, body: str) -> None:
    """The fakes on PATH and a Slurm node running one job (a real process)."""
    install_fakes(tmp_path / "bin")
    jobs.append(_job(tmp_path, body, f"job{job_id}"))
    slurm_state(Path(env["FAKE_SLURM_STATE"]), NODE, {job_id: jobs[-1].pid})


def _whole_seconds_from_now(seconds: int) -> datetime:
    """`seconds` after the next whole second. The handler reads FMINFRA_DRAIN_NOT_AFTER and the
    clock to the second (`date +%s`), so a deadline derived from this time is exactly where the
    test puts it, never up to a second earlier."""
    return datetime.fromtimestamp(math.ceil(time.time()) + seconds, UTC)


def _until(reclaim_at: datetime, **settings: str) -> dict[str, str]:
    return {**settings, "FMINFRA_DRAIN_NOT_AFTER": reclaim_at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_slurm_jobs_checkpoint_and_the_hook_completes_before_the_block_is_reclaimed(
    tmp_path: Path, env_base: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    _slurm_node_running(tmp_path, env_base, jobs, "101", CHECKPOINTING_JOB)
    drain_s = 20
    reclaim_at = datetime.now(UTC) + timedelta(seconds=drain_s + 5)
    env = {**env_base, **_until(reclaim_at, FMINFRA_DRAIN_SECONDS=str(drain_s), FMINFRA_DRAIN_MARGIN_SECONDS="5")}
    model = _group(drain_s)
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        result = _watch(env, model, server)
    assert result.returncode == 0, result.stderr
    slurm = json.loads(Path(env_base["FAKE_SLURM_STATE"]).read_text())
    # Drained first (no new jobs), then the job was told and checkpointed, then the hook completed.
    assert slurm["log"][:2] == [f"node {NODE} DRAIN", "job 101 signalled USR1"]
    assert slurm["nodes"][NODE]["state"] == "DRAIN" and slurm["nodes"][NODE]["reason"]
    assert (tmp_path / "job101.ckpt").read_text().startswith("step=")
    assert [what for _, what in model.events] == [f"scale-in {INSTANCE}", f"completed {INSTANCE} CONTINUE", f"terminated {INSTANCE}"]
    (completed,) = model.times("completed")
    assert completed < reclaim_at.timestamp()
    assert completed - model.times("scale-in")[0] < drain_s


def _drain_a_stubborn_job(
    tmp_path: Path, env_base: dict[str, str], jobs: list[subprocess.Popen[bytes]], **node: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], float, datetime]:
    """A node (in the state `node` gives) runs a job that ignores the signal; the block's reclaim
    comes before the budget runs out: the deadline (the reclaim less the margin of 3 s) is 2-3 s
    away, after the drain has started. Returns the handler's result, Slurm's state, when the hook
    completed and the reclaim time."""
    _slurm_node_running(tmp_path, env_base, jobs, "202", STUBBORN_JOB)
    if node:
        slurm_state(Path(env_base["FAKE_SLURM_STATE"]), NODE, {"202": jobs[-1].pid}, **node)
    reclaim_at = _whole_seconds_from_now(6)
    env = {**env_base, **_until(reclaim_at, FMINFRA_DRAIN_SECONDS="600", FMINFRA_DRAIN_MARGIN_SECONDS="3")}
    model = _group(600)
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        result = _watch(env, model, server)
    assert result.returncode == 0, result.stderr
    (completed,) = model.times("completed")
    return result, json.loads(Path(env_base["FAKE_SLURM_STATE"]).read_text()), completed, reclaim_at


def test_a_job_that_ignores_the_signal_is_ended_at_the_deadline_before_ec2_reclaims(
    tmp_path: Path, env_base: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    # The drain stops a margin before the reclaim.
    result, slurm, completed, reclaim_at = _drain_a_stubborn_job(tmp_path, env_base, jobs)
    assert slurm["log"] == [f"node {NODE} DRAIN", "job 202 signalled USR1", f"node {NODE} DOWN", "job 202 ended (node DOWN)"]
    assert "still on" in result.stderr
    assert completed < reclaim_at.timestamp()


def test_a_node_an_operator_drained_keeps_its_state_and_its_jobs_still_get_the_signal(
    tmp_path: Path, env_base: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    """The instance goes either way: its jobs are told to checkpoint, but the operator's DRAIN and
    Reason stay (no DRAIN over it, no DOWN at the deadline)."""
    result, slurm, completed, reclaim_at = _drain_a_stubborn_job(tmp_path, env_base, jobs, state="DRAIN", reason="disk replacement")
    assert slurm["log"] == ["job 202 signalled USR1"]
    assert slurm["nodes"][NODE] == {"state": "DRAIN", "reason": "disk replacement"}
    assert "left as it is" in result.stderr
    assert completed < reclaim_at.timestamp()


def test_the_default_budget_is_the_one_the_launch_template_gets() -> None:
    """drain_lib.sh's drain_budget_seconds (the default where the launch template sets none) and
    fminfra.capacity.rules.drain_budget_seconds agree for every drain up to 3 hours."""
    drains = list(range(1, 10801))
    lib = ROOT / "scripts" / "node"
    script = f'source "{lib}/lib.sh"; source "{lib}/drain_lib.sh"; for s in "$@"; do drain_budget_seconds "$s"; done'
    result = subprocess.run(["bash", "-c", script, "budget", *map(str, drains)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    shell = [int(line) for line in result.stdout.split()]
    python = [drain_budget_seconds(timedelta(seconds=s)) for s in drains]
    assert [(s, sh, py) for s, sh, py in zip(drains, shell, python, strict=True) if sh != py] == []


def test_the_budget_comparison_sees_a_difference() -> None:
    """Test of the test: a shell budget off by one second for odd drains (the old rounding) differs."""
    lib = ROOT / "scripts" / "node"
    floor = "drain_budget_seconds() { echo $(($1 > 120 ? $1 - 60 : $1 / 2)); }"
    script = f'source "{lib}/lib.sh"; source "{lib}/drain_lib.sh"; {floor}; drain_budget_seconds 7'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert int(result.stdout) != drain_budget_seconds(timedelta(seconds=7))


def test_a_failed_squeue_does_not_end_the_drain(tmp_path: Path, env_base: dict[str, str], jobs: list[subprocess.Popen[bytes]]) -> None:
    """squeue exits 1 when slurmctld does not answer (docs/facts/jobs.md#slurm-squeue-exit-status): that
    says nothing about the jobs, so the drain keeps asking; a job still there at the deadline is ended."""
    _slurm_node_running(tmp_path, env_base, jobs, "303", STUBBORN_JOB)
    # The deadline (the reclaim less the margin of 3 s) is 3-4 s away: over 2 s after the scale-in.
    reclaim_at = _whole_seconds_from_now(7)
    env = {**env_base, **_until(reclaim_at, FMINFRA_DRAIN_SECONDS="600", FMINFRA_DRAIN_MARGIN_SECONDS="3"), "FAKE_SQUEUE_FAILS": "2"}
    model = _group(600)
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        result = _watch(env, model, server)
    assert result.returncode == 0, result.stderr
    assert "squeue failed" in result.stderr and "has no jobs left" not in result.stderr
    slurm = json.loads(Path(env_base["FAKE_SLURM_STATE"]).read_text())
    assert slurm["log"] == [f"node {NODE} DRAIN", "job 303 signalled USR1", f"node {NODE} DOWN", "job 303 ended (node DOWN)"]
    (completed,) = model.times("completed")
    assert model.times("scale-in")[0] + 2 < completed < reclaim_at.timestamp()


def test_a_passed_reclaim_time_of_an_extended_block_leaves_the_jobs_their_budget(
    tmp_path: Path, env_base: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    """The instance was launched before its block was extended: its settings carry the old reclaim
    time, now passed (docs/facts/capacity.md#capacity-block-extension). EC2 has not reclaimed it, so
    the jobs get the drain's budget, not an immediate DOWN."""
    _slurm_node_running(tmp_path, env_base, jobs, "404", STUBBORN_JOB)
    old_reclaim = datetime.now(UTC) - timedelta(days=6)
    budget = 3
    env = {**env_base, **_until(old_reclaim, FMINFRA_DRAIN_SECONDS="600", FMINFRA_DRAIN_BUDGET_SECONDS=str(budget))}
    model = _group(600)
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        result = _watch(env, model, server)
    assert result.returncode == 0, result.stderr
    assert "has passed with this instance running (the block was extended)" in result.stderr
    slurm = json.loads(Path(env_base["FAKE_SLURM_STATE"]).read_text())
    assert slurm["log"] == [f"node {NODE} DRAIN", "job 404 signalled USR1", f"node {NODE} DOWN", "job 404 ended (node DOWN)"]
    (completed,) = model.times("completed")
    # The budget, less at most the second `date +%s` drops when the drain starts.
    assert completed - model.times("scale-in")[0] >= budget - 1


def test_the_squeue_fake_fails_as_squeue_does(tmp_path: Path, env_base: dict[str, str]) -> None:
    install_fakes(tmp_path / "bin")
    slurm_state(Path(env_base["FAKE_SLURM_STATE"]), NODE, {})
    env = {**os.environ, **env_base, "FAKE_SQUEUE_FAILS": "1"}
    argv = ["squeue", "--noheader", f"--nodelist={NODE}", "--format=%i"]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    second = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert (first.returncode, first.stdout) == (1, "") and "slurm_load_jobs error" in first.stderr
    assert (second.returncode, second.stdout) == (0, "")


def test_kubernetes_node_is_cordoned_and_its_pods_evicted_before_the_hook_completes(tmp_path: Path, env_base: dict[str, str]) -> None:
    install_fakes(tmp_path / "bin", slurm=False, kubectl=True)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    pods = [
        {"name": "infer-0", "namespace": "serve", "node": K8S_NODE, "owner": "ReplicaSet"},
        {"name": "scratch", "namespace": "serve", "node": K8S_NODE, "owner": "ReplicaSet", "emptydir": True},
        {"name": "debug", "namespace": "default", "node": K8S_NODE, "owner": ""},
        {"name": "dcgm-exporter-x", "namespace": "monitoring", "node": K8S_NODE, "owner": "DaemonSet"},
    ]
    Path(env_base["FAKE_K8S_STATE"]).write_text(json.dumps({"nodes": {K8S_NODE: {"unschedulable": False}}, "pods": pods}))
    env = {**env_base, "FMINFRA_DRAIN_SECONDS": "20", "FMINFRA_DRAIN_KUBECONFIG": str(kubeconfig)}
    model = _group(20)
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        result = _watch(env, model, server)
    assert result.returncode == 0, result.stderr
    k8s = json.loads(Path(env_base["FAKE_K8S_STATE"]).read_text())
    assert k8s["nodes"][K8S_NODE]["unschedulable"] is True
    assert k8s["log"][0] == f"node {K8S_NODE} cordoned"
    assert [p["name"] for p in k8s["pods"]] == ["dcgm-exporter-x"]  # daemon set pods stay
    assert [what for _, what in model.events][1] == f"completed {INSTANCE} CONTINUE"


def test_a_drain_longer_than_the_hook_timeout_records_heartbeats(
    tmp_path: Path, env_base: dict[str, str], jobs: list[subprocess.Popen[bytes]]
) -> None:
    """Auto Scaling caps HeartbeatTimeout at 7200 s: a longer drain keeps the instance with heartbeats."""
    _slurm_node_running(tmp_path, env_base, jobs, "303", STUBBORN_JOB)
    env = {**env_base, "FMINFRA_DRAIN_SECONDS": "9000", "FMINFRA_DRAIN_BUDGET_SECONDS": "2"}
    model = _group(9000)
    assert model.hooks[DRAIN_HOOK_NAME].heartbeat_timeout_s == 7200
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        result = _watch(env, model, server)
    assert result.returncode == 0, result.stderr
    assert model.times("heartbeat"), "a drain past the hook's timeout must record a heartbeat"


def test_without_a_hook_the_instance_terminates_at_once_and_nothing_drains(tmp_path: Path, env_base: dict[str, str]) -> None:
    """The fake's protocol: no termination hook, no Terminating:Wait (what the group had before the
    hook), and completing an instance that is not waiting fails as the API does."""
    install_fakes(tmp_path / "bin")
    model = _group(20, hooks=False)
    model.scale_in(INSTANCE)
    assert [what for _, what in model.events] == [f"scale-in {INSTANCE}", f"terminated {INSTANCE}"]
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        done = subprocess.run(
            ["aws", "autoscaling", "complete-lifecycle-action", "--lifecycle-hook-name", DRAIN_HOOK_NAME, "--auto-scaling-group-name", GROUP,
             "--instance-id", INSTANCE, "--lifecycle-action-result", "CONTINUE"],
            env={**env_base, "FAKE_AWS_ENDPOINT": server.url}, capture_output=True, text=True, check=False,
        )  # fmt: skip
    assert done.returncode == 254 and "(ValidationError)" in done.stderr


def test_ec2_reclaim_does_not_wait_for_the_hook() -> None:
    model = _group(600)
    model.scale_in(INSTANCE)
    model.ec2_reclaim(INSTANCE)
    assert model.instances[INSTANCE].state == "Terminated"
    assert model.call(
        "CompleteLifecycleAction",
        {"AutoScalingGroupName": GROUP, "LifecycleHookName": DRAIN_HOOK_NAME, "InstanceId": INSTANCE, "LifecycleActionResult": "CONTINUE"},
    )


def test_the_fake_refuses_a_drain_without_a_reason_and_imds_without_a_token(tmp_path: Path, env_base: dict[str, str]) -> None:
    install_fakes(tmp_path / "bin")
    slurm_state(Path(env_base["FAKE_SLURM_STATE"]), NODE, {})
    bad = subprocess.run(
        ["scontrol", "update", f"NodeName={NODE}", "State=DRAIN"], env=env_base, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1 and "reason" in bad.stderr
    model = _group(20)
    with MetadataServer(model, INSTANCE, K8S_NODE) as server:
        plain = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{server.url}/latest/meta-data/instance-id"],
            capture_output=True,
            text=True,
            check=False,
        )
    assert plain.stdout == "401"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FMINFRA_DRAIN_GROUP", ""),
        ("FMINFRA_DRAIN_SECONDS", "ten"),
        ("FMINFRA_DRAIN_NOT_AFTER", "2027-13-45"),
        ("FMINFRA_DRAIN_POLL_SECONDS", ".5"),
        ("FMINFRA_DRAIN_POLL_SECONDS", "0.5s"),
        ("FMINFRA_DRAIN_POLL_SECONDS", "1,5"),
        # zero: the watch and drain loops would never pause (metadata and squeue in a tight loop)
        ("FMINFRA_DRAIN_POLL_SECONDS", "0"),
        ("FMINFRA_DRAIN_POLL_SECONDS", "0.0"),
    ],
)
def test_bad_settings_exit_2_with_one_line(env_base: dict[str, str], name: str, value: str) -> None:
    result = subprocess.run(["bash", str(SCRIPT), "drain"], env={**env_base, name: value}, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert name in result.stderr and result.stderr.count("\n") == 1


def test_install_writes_and_starts_the_unit_twice_the_same(tmp_path: Path, env_base: dict[str, str]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl.log"
    (bin_dir / "systemctl").write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n')
    (bin_dir / "systemctl").chmod(0o755)
    env = {**env_base, "FMINFRA_DRAIN_SECONDS": "600", "FMINFRA_DRAIN_NOT_AFTER": "2027-01-17T11:00:00Z", "FMINFRA_AWS_REGION": "us-west-2"}
    for _ in range(2):
        result = subprocess.run(["bash", str(SCRIPT), "install"], env=env, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
    root = Path(env["FMINFRA_ROOT"])
    unit = (root / "etc/systemd/system/fminfra-drain.service").read_text()
    # The unit runs a persistent copy (drain_lib.sh's install_service), with Slurm's folder on PATH.
    assert f"ExecStart=/usr/bin/env bash {root / 'opt/fminfra/node' / SCRIPT.name} watch" in unit and "EnvironmentFile=" in unit
    assert (root / "opt/fminfra/node" / SCRIPT.name).read_text() == SCRIPT.read_text()
    assert "Environment=PATH=/opt/slurm/bin:" in unit
    settings = (root / "etc/fminfra/drain.env").read_text().splitlines()
    assert f"FMINFRA_DRAIN_GROUP={GROUP}" in settings and "FMINFRA_DRAIN_NOT_AFTER=2027-01-17T11:00:00Z" in settings
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now fminfra-drain.service"] * 2


def test_install_from_the_folder_the_unit_runs_from(tmp_path: Path, env_base: dict[str, str]) -> None:
    """An ec2 node's user data unpacks the scripts into /opt/fminfra/node, the unit's own folder:
    install keeps them there (GNU install refuses to copy a file onto itself)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text("#!/usr/bin/env bash\n")
    (bin_dir / "systemctl").chmod(0o755)
    root = Path(env_base["FMINFRA_ROOT"])
    node = root / "opt/fminfra/node"
    shutil.copytree(SCRIPT.parent, node)
    env = {**env_base, "FMINFRA_DRAIN_SECONDS": "600", "FMINFRA_DRAIN_NOT_AFTER": "2027-01-17T11:00:00Z", "FMINFRA_AWS_REGION": "us-west-2"}
    result = subprocess.run(["bash", str(node / SCRIPT.name), "install"], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    unit = (root / "etc/systemd/system/fminfra-drain.service").read_text()
    assert f"ExecStart=/usr/bin/env bash {node / SCRIPT.name} watch" in unit
    assert (node / SCRIPT.name).read_text() == SCRIPT.read_text()
