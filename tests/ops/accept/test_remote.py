"""`fminfra accept-remote`: the HyperPod node found through botocore's Stubber (response shapes from
botocore's SageMaker model), and the SSM sessions run against a fake `aws ssm start-session` that
executes the session's command in a local folder standing in for the login node.

What the fake session models (docs/facts/jobs.md#hyperpod-ssm-target,
docs/facts/jobs.md#ssm-noninteractive-command-no-shell, docs/facts/hyperpod.md#hyperpod-node-ssm-session):
`--parameters file://...` holds `{"command": ["..."]}`; the agent splits the command into words
(google/shlex at the agent's pin, which behaves as Python's `shlex.split` with comments) and
executes them with no shell, in its service's environment (systemd's PATH, no /opt/slurm/bin), as
root (here, as this user); the output comes back with the plugin's own session lines around it; a
session may also come back empty (the plugin racing to close), which the polling tolerates. Not
modelled: IAM, the 3 TPS start-session limit, session timeouts."""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fminfra.cli.main import main as cli_main
from fminfra.ops import accept as accept_command
from fminfra.ops.accept import checks as accept_checks
from fminfra.ops.accept import remote as accept_remote
from fminfra.ops.accept import slurm as accept_slurm
from fminfra.ops.accept.node.runner import NodePlan
from fminfra.ops.accept.remote import Node, find_node, parse_reply, run_remote, start_script
from fminfra.ops.common import UsageError, load_configs
from tests.conftest import ROOT, SHIPPED_NAMES

CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111111111111:cluster/aa11bbbbb222"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("FMINFRA_ALLOW_UNPINNED", raising=False)


# --- every shipped config passes its dry run ------------------------------------------------------------


def _training_thresholds(name: str, pipeline: Path) -> dict[str, float | None]:
    [(_, cfg)] = load_configs([name])
    overrides = accept_checks._overrides(pipeline, cfg.name)
    table = accept_checks.read_instance_thresholds()
    return {g.name: accept_checks.nccl_threshold(g.spec.name, overrides, table).fail_gbps for g in cfg.compute.instance_groups}


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_every_shipped_config_has_an_nccl_threshold(name: str) -> None:
    thresholds = _training_thresholds(name, ROOT / "pipeline.yaml")
    assert thresholds and None not in thresholds.values(), thresholds


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_shipped_slurm_config_dry_run_exits_0(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The EKS config (staging) gets its dry run with the EKS path of `accept` (branch eksjobs)."""
    assert cli_main(["accept", name, "--dry-run", "--run-id", "r1"]) == 0, capsys.readouterr().out
    assert cli_main(["accept-remote", name, "--dry-run", "--run-id", "r1"]) == 0
    assert "--dry-run: missing:" not in capsys.readouterr().err


def test_the_threshold_check_fails_without_pipeline_thresholds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The test of the two tests above: pipeline.yaml without the p5en policy leaves prod and staging none."""
    bare = tmp_path / "pipeline.yaml"
    text = (ROOT / "pipeline.yaml").read_text().replace("config/", f"{ROOT}/config/")
    # staging keeps its runner labels (load_pipeline requires them for its private EKS endpoint)
    text = text.replace("accept: {nccl_fail_gbps: 250, nccl_warn_gbps: 400, runs_on:", "accept: {runs_on:")
    bare.write_text("\n".join(line for line in text.splitlines() if "accept: {nccl_fail_gbps" not in line) + "\n")
    assert _training_thresholds("prod", bare) == {"workers": None}
    assert _training_thresholds("staging", bare) == {"workers": None}
    # a dry run runs nothing: exit 0, and what a run would miss on stderr
    assert cli_main(["accept", "prod", "--dry-run", "--run-id", "r1", "--pipeline", str(bare)]) == 0
    assert "accept prod --dry-run: missing: nccl workers: no threshold" in capsys.readouterr().err


def test_the_shipped_p5en_threshold_says_it_is_policy() -> None:
    """Never presented as measured: the pipeline.yaml comment names it a policy and cites both types."""
    text = (ROOT / "pipeline.yaml").read_text()
    assert "POLICY, NOT A MEASUREMENT" in text
    for anchor in ("gpu-p5-48xlarge", "gpu-p5en-48xlarge", "nccl-allreduce-p5-two-node"):
        assert f"docs/facts/instances.md#{anchor}" in text


def test_dry_run_prints_the_session_the_script_and_the_sbatch_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["accept-remote", "dev", "--dry-run", "--run-id", "r1"]) == 0
    out = capsys.readouterr().out
    assert (
        "aws ssm start-session --region us-west-2 --target 'sagemaker-cluster:<cluster-id>_login-<instance-id>'"
        " --document-name AWS-StartNonInteractiveCommand --parameters file://command.json"
    ) in out
    assert "cd lib && python3 -s -m fminfra_accept_node ../plan.json --timeout-s 3600 --poll-s 30" in out
    # what is printed is what is sent: the parameters decode to the script printed below them
    lines = out.splitlines()
    params = json.loads(lines[lines.index("# command.json, exactly:") + 1])
    encoded = shlex.split(params["command"][0])[2].split()[1]
    script = base64.b64decode(encoded).decode()
    start = lines.index("# which runs this script as ubuntu:") + 1
    assert "\n".join(lines[start : start + script.count("\n")]) + "\n" == script
    assert params["command"][0].endswith('| base64 -d | if [ "$(id -un)" = ubuntu ]; then bash; else sudo -n -u ubuntu -H bash; fi\'')
    assert "sbatch --parsable --job-name=fminfra-accept-nccl-workers --partition=workers --nodes=2" in out


def test_eks_environments_are_handed_to_accept(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook for the EKS path: accept-remote calls `accept` with the same arguments, from here."""
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(accept_command, "command", lambda ns: seen.append(ns) or 7)
    assert cli_main(["accept-remote", "staging", "--dry-run", "--run-id", "r1"]) == 7
    assert (seen[0].config, seen[0].dry_run, seen[0].run_id) == ("staging", True, "r1")


# --- the node, through botocore's Stubber ---------------------------------------------------------------


def _node(group: str, instance_id: str, status: str = "Running") -> dict[str, Any]:
    # The members botocore's ClusterNodeSummary marks required.
    return {
        "InstanceGroupName": group,
        "InstanceId": instance_id,
        "InstanceType": "ml.m5.4xlarge",
        "LaunchTime": "2026-11-30T10:00:00Z",
        "InstanceStatus": {"Status": status, "Message": ""},
    }


def _describe(status: str = "InService") -> dict[str, Any]:
    return {"ClusterArn": CLUSTER_ARN, "ClusterStatus": status, "InstanceGroups": []}


def test_the_login_node_is_found_across_pages() -> None:
    client = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response("describe_cluster", _describe(), {"ClusterName": "fminfra-dev-hyperpod"})
        request = {"ClusterName": "fminfra-dev-hyperpod", "InstanceGroupNameContains": "login"}
        stub.add_response(
            "list_cluster_nodes",
            {"ClusterNodeSummaries": [_node("login", "i-0aaa", "Pending"), _node("login-extra", "i-0bbb")], "NextToken": "t1"},
            request,
        )
        stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [_node("login", "i-0ccc")]}, {**request, "NextToken": "t1"})
        node = find_node(client, "fminfra-dev-hyperpod", "login")
    assert node == Node("aa11bbbbb222", "login", "i-0ccc")
    assert node.target == "sagemaker-cluster:aa11bbbbb222_login-i-0ccc"


@pytest.mark.parametrize(
    ("describe", "nodes", "message"),
    [
        (None, [], "cluster fminfra-dev-hyperpod: ResourceNotFound: Cluster not found"),
        (_describe("Creating"), [], "cluster fminfra-dev-hyperpod is Creating, not InService"),
        (_describe(), [_node("login", "i-0aaa", "Failure")], "no Running node in group login (i-0aaa Failure)"),
        (_describe(), [], "no Running node in group login (no nodes)"),
    ],
)
def test_no_usable_node_is_one_line(describe: dict[str, Any] | None, nodes: list[dict[str, Any]], message: str) -> None:
    client = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        if describe is None:
            stub.add_client_error("describe_cluster", "ResourceNotFound", "Cluster not found", 400)
        else:
            stub.add_response("describe_cluster", describe)
            if describe["ClusterStatus"] == "InService":
                stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": nodes})
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            find_node(client, "fminfra-dev-hyperpod", "login")


def test_a_cluster_without_login_group_uses_the_controller(tmp_path: Path) -> None:
    config = tmp_path / "nologin.yaml"
    config.write_text((ROOT / "config" / "dev.yaml").read_text().replace("count: 1}", "count: 0}"))
    [(_, cfg)] = load_configs([str(config)])
    assert accept_remote.node_group(cfg) == "controller"


# --- the sessions, against a fake node ------------------------------------------------------------------


# The PATH of a service the system's systemd starts, the agent's (docs/facts/hyperpod.md#systemd-service-path).
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


class FakeNode:
    """`aws ssm start-session` stand-in: runs the command of `--parameters file://...` as the agent
    does (split into words, executed without a shell, systemd's PATH) and wraps its output in the
    plugin's session lines. The node's Slurm commands are in `slurm_bin` (/opt/slurm/bin on HyperPod),
    which the start script must put on PATH: the fake python3 fails as `sbatch` would be missing."""

    def __init__(
        self, tmp_path: Path, accept_rc: int = 0, version_ok: bool = True, empty_sessions: int = 0, env: dict[str, str] | None = None
    ) -> None:
        self.calls: list[list[str]] = []
        self.env = {"PATH": SYSTEMD_PATH} if env is None else env
        self.empty_sessions = empty_sessions
        self.slurm_bin = tmp_path / "opt-slurm-bin"
        self.slurm_bin.mkdir(exist_ok=True)
        for name in ("sbatch", "sacct", "scancel"):
            (self.slurm_bin / name).write_text("#!/bin/sh\nexit 0\n")
            (self.slurm_bin / name).chmod(0o755)
        self.python = tmp_path / "python"
        # a python3 of the version the node code needs (or not), whose run prints and exits as told
        self.python.write_text(
            "#!/bin/bash\n"
            f'if [ "$1" = -c ]; then exit {0 if version_ok else 1}; fi\n'
            'command -v sbatch >/dev/null || { echo "accept: sbatch: not found on PATH=$PATH"; exit 127; }\n'
            'echo "node $*"; echo "PASS nccl all_reduce workers 436.95 GB/s"\n'
            f"exit {accept_rc}\n"
        )
        self.python.chmod(0o755)

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        assert argv[:3] == ["aws", "ssm", "start-session"] and argv[argv.index("--document-name") + 1] == "AWS-StartNonInteractiveCommand"
        params = json.loads(Path(argv[argv.index("--parameters") + 1].removeprefix("file://")).read_text())
        (command,) = params["command"]
        if self.empty_sessions:
            self.empty_sessions -= 1
            return subprocess.CompletedProcess(argv, 0, "\r\nStarting session with SessionId: s1\r\n\r\n", "")
        words = shlex.split(command, comments=True)
        result = subprocess.run(words, capture_output=True, text=True, check=False, timeout=60, env=self.env)
        out = f"\r\nStarting session with SessionId: s1\r\n{result.stdout}\r\nExiting session with sessionId: s1.\r\n"
        return subprocess.CompletedProcess(argv, 0, out, result.stderr)


@pytest.fixture(autouse=True)
def _slurm_bin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fake node's /opt/slurm/bin (FakeNode.slurm_bin), where the start script looks."""
    monkeypatch.setattr(accept_remote, "SLURM_BIN", str(tmp_path / "opt-slurm-bin"))


def _ns(fake: FakeNode, **extra: Any) -> argparse.Namespace:
    return argparse.Namespace(run_id="r1", timeout_minutes=1.0, poll_seconds=0.01, remote_python=str(fake.python), remote_user="", **extra)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeNode, clock: Any = None, runner: Any = None) -> int:
    import time

    monkeypatch.setattr(accept_slurm, "FSX_MOUNT", str(tmp_path / "fsx"))
    [(_, cfg)] = load_configs(["dev"])
    ns = _ns(fake)
    plan = accept_slurm.slurm_plan(
        cfg, "r1", accept_checks._overrides(ROOT / "pipeline.yaml", "dev"), accept_checks.read_instance_thresholds()
    )
    start = start_script(plan, ns)
    node = Node("aa11bbbbb222", "login", "i-0ccc")
    return run_remote(node, plan, start, ns, runner=runner or fake, sleep=lambda s: time.sleep(0.05), clock=clock or time.monotonic)


def test_remote_accept_passes_and_streams_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeNode(tmp_path, accept_rc=0, empty_sessions=0)
    assert _run(tmp_path, monkeypatch, fake) == 0
    out = capsys.readouterr().out
    assert "PASS nccl all_reduce workers 436.95 GB/s" in out and "fminfra accept exited 0" in out
    run = tmp_path / "fsx" / "fminfra-accept" / "r1"
    # what travelled: the plan with pipeline.yaml's thresholds, the node code, the jobs' scripts
    plan = NodePlan.from_json((run / "plan.json").read_text(), "plan.json")
    assert plan.nccl["workers"].fail_gbps == 250 and plan.run_dir == str(run)
    assert (run / "lib" / "fminfra_accept_node" / "runner.py").is_file() and (run / "scripts" / "jobs" / "common.sh").is_file()
    assert "node -s -m fminfra_accept_node ../plan.json --timeout-s 60 --poll-s 0.01" in (run / "gate.log").read_text()
    assert all(c[c.index("--target") + 1] == "sagemaker-cluster:aa11bbbbb222_login-i-0ccc" for c in fake.calls)


def test_remote_accept_failure_is_the_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(tmp_path, monkeypatch, FakeNode(tmp_path, accept_rc=1)) == 1


def test_empty_sessions_are_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNode(tmp_path, accept_rc=0)
    monkeypatch.setattr(accept_remote, "session", _empty_after_start(accept_remote.session, 2))
    assert _run(tmp_path, monkeypatch, fake) == 0


def _empty_after_start(real: Any, count: int) -> Any:
    state = {"calls": 0}

    def wrapped(*args: Any) -> Any:
        state["calls"] += 1
        if 1 < state["calls"] <= 1 + count:
            return None
        return real(*args)

    return wrapped


def test_a_node_with_an_older_python_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, monkeypatch, FakeNode(tmp_path, version_ok=False)) == 2
    assert "on this node is not Python 3.10 or later" in capsys.readouterr().out


def test_a_silent_node_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="the starting session brought nothing back"):
        _run(tmp_path, monkeypatch, FakeNode(tmp_path, empty_sessions=99))


def test_timeout_fails_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeNode(tmp_path)
    fake.python.write_text('#!/bin/bash\n[ "$1" = -c ] && exit 0\nsleep 3\n')  # accept never ends
    ticks = iter(range(0, 10_000, 400))
    assert _run(tmp_path, monkeypatch, fake, clock=lambda: float(next(ticks))) == 1
    assert "no result from the node after 1 + 10 minutes" in capsys.readouterr().err


def test_a_failing_session_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(
            argv, 255, "", "\nAn error occurred (AccessDeniedException) when calling the StartSession operation: denied\n"
        )

    with pytest.raises(UsageError, match=r"exit 255: An error occurred \(AccessDeniedException\)"):
        _run(tmp_path, monkeypatch, FakeNode(tmp_path), runner=refused)


def _failing_polls(fake: FakeNode, failures: list[str]) -> Any:
    """The fake, except that the polls after the starting session fail as listed, then recover:
    "timeout" as subprocess.run(timeout=...) raises it, "throttled" as the AWS CLI exits when
    StartSession is throttled (exit 254 and the service's error line, no session output)."""
    state = {"calls": 0}

    def runner(argv: list[str]) -> subprocess.CompletedProcess[str]:
        state["calls"] += 1
        kind = failures[state["calls"] - 2] if 2 <= state["calls"] < 2 + len(failures) else None
        if kind == "timeout":
            raise subprocess.TimeoutExpired(argv, accept_remote.SESSION_TIMEOUT_S)
        if kind == "throttled":
            err = "\nAn error occurred (ThrottlingException) when calling the StartSession operation (reached max retries: 2): Rate exceeded\n"
            return subprocess.CompletedProcess(argv, 254, "", err)
        return fake(argv)

    return runner


def test_a_poll_that_times_out_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeNode(tmp_path)
    assert _run(tmp_path, monkeypatch, fake, runner=_failing_polls(fake, ["timeout"])) == 0
    assert "no end after 300 s; polling again" in capsys.readouterr().err


def test_a_throttled_poll_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeNode(tmp_path)
    assert _run(tmp_path, monkeypatch, fake, runner=_failing_polls(fake, ["throttled", "timeout", "throttled"])) == 0
    assert "exit 254: An error occurred (ThrottlingException)" in capsys.readouterr().err


def test_polls_that_keep_failing_end_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNode(tmp_path)
    failing = _failing_polls(fake, ["throttled"] * accept_remote.MAX_SILENT_POLLS)
    with pytest.raises(UsageError, match=r"5 sessions in a row brought nothing back \(last: .*ThrottlingException"):
        _run(tmp_path, monkeypatch, fake, runner=failing)


def test_a_starting_session_that_times_out_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def hangs(argv: list[str]) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, 300)

    with pytest.raises(UsageError, match=r"start-session --target sagemaker-cluster:aa11bbbbb222_login-i-0ccc: no end after 300 s"):
        _run(tmp_path, monkeypatch, FakeNode(tmp_path), runner=hangs)


# The plugin as its source behaves (docs/facts/jobs.md#session-manager-plugin-stdin): it reads its
# stdin for the session and ends when that read fails; the node's output comes a moment later.
FAKE_PLUGIN = """
import os, threading, time
def keyboard():
    while os.read(0, 1024):  # b'' at end of file: the plugin's read fails and the session ends
        pass
    os._exit(0)
threading.Thread(target=keyboard, daemon=True).start()
time.sleep(0.5)
os.write(1, b"FMINFRA-BEGIN\\nnode output\\nFMINFRA-END\\n")
os._exit(0)
"""


def test_the_plugin_keeps_an_open_stdin_and_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stdin at its end (/dev/null) ends the plugin before the node answers; an open, silent pipe
    lets the session run to its own end. The timeout still bounds it."""
    result = accept_remote._run_session([sys.executable, "-c", FAKE_PLUGIN])
    assert result.returncode == 0 and "node output" in result.stdout
    # the test of the test: the same plugin given /dev/null, as _run_session did, ends with nothing
    ended = subprocess.run([sys.executable, "-c", FAKE_PLUGIN], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    assert ended.stdout == ""
    seen: dict[str, Any] = {}

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.update(kwargs)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(accept_remote.subprocess, "run", run)
    accept_remote._run_session(["aws"])
    # never CI's stdin: a pipe of ours, and the timeout
    assert isinstance(seen["stdin"], int) and seen["stdin"] > 2 and seen["timeout"] == accept_remote.SESSION_TIMEOUT_S


def test_the_agent_runs_the_command_without_a_shell(tmp_path: Path) -> None:
    """The agent splits the parameter into words and executes them: a bare `echo ... | base64 -d |
    bash` would only echo its words. The command is one `bash -c` whose word holds the pipe."""
    (command,) = accept_remote.session_parameters("echo ran the script\n", "")["command"]
    words = shlex.split(command, comments=True)
    assert words[:2] == ["bash", "-c"] and len(words) == 3
    ran = subprocess.run(words, capture_output=True, text=True, check=False, env={"PATH": SYSTEMD_PATH})
    assert ran.stdout == "ran the script\n"
    # the test of the test: the form sent before this check existed, as the agent runs it
    old = f"echo {base64.b64encode(b'echo ran the script').decode()} | base64 -d | bash"
    echoed = subprocess.run(shlex.split(old, comments=True), capture_output=True, text=True, check=False)
    assert "ran the script" not in echoed.stdout and "| base64 -d | bash" in echoed.stdout


@pytest.mark.parametrize("user", ["a b", "o'neil", "x;reboot", "#root"])
def test_a_remote_user_that_needs_quoting_is_refused(user: str) -> None:
    with pytest.raises(UsageError, match=r"--remote-user: .* is not a user name"):
        accept_remote.session_parameters("true\n", user)
    assert accept_remote.remote_user_problem("ubuntu") == accept_remote.remote_user_problem("svc-1.x@corp") == ""


def test_the_slurm_commands_are_on_the_path_the_node_code_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start script puts /opt/slurm/bin first on PATH; without it the node code finds no sbatch."""
    assert _run(tmp_path, monkeypatch, FakeNode(tmp_path)) == 0
    monkeypatch.setattr(accept_remote, "SLURM_BIN", str(tmp_path / "elsewhere"))
    assert _run(tmp_path, monkeypatch, FakeNode(tmp_path)) != 0


def test_the_remote_user_runs_the_script_whoever_the_session_is(tmp_path: Path) -> None:
    """The session may start as root, ssm-user or (Run As) the user itself
    (docs/facts/hyperpod.md#hyperpod-node-ssm-session): as that user, bash runs the script itself;
    as anyone else, `sudo -n -u USER`, which fails instead of waiting for a password."""
    import getpass

    (command,) = accept_remote.session_parameters("echo ran as $(id -un)\n", getpass.getuser())["command"]
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "sudo").write_text('#!/bin/sh\necho "sudo $*" >&2\necho "sudo: a password is required" >&2\nexit 1\n')
    (fakebin / "sudo").chmod(0o755)
    env = {"PATH": f"{fakebin}:/usr/bin:/bin"}
    same = subprocess.run(shlex.split(command, comments=True), capture_output=True, text=True, env=env, check=False)
    assert (same.returncode, same.stdout.strip(), same.stderr) == (0, f"ran as {getpass.getuser()}", "")
    (command,) = accept_remote.session_parameters("echo ran\n", "fminfra-nobody")["command"]
    other = subprocess.run(shlex.split(command, comments=True), capture_output=True, text=True, env=env, check=False)
    assert other.returncode == 1 and "sudo -n -u fminfra-nobody -H bash" in other.stderr and other.stdout == ""


def test_reply_parser_ignores_the_plugin_lines() -> None:
    reply = parse_reply(
        "Starting session with SessionId: s\r\nFMINFRA-BEGIN\r\nFMINFRA-EXIT=1\r\nFMINFRA-LOG-BYTES=12\r\nFAIL x\r\n\r\nFMINFRA-END\r\nExiting"
    )
    assert reply is not None and (reply.exit_code, reply.log_bytes, reply.text.strip()) == (1, 12, "FAIL x")
    assert parse_reply("Starting session with SessionId: s\r\n") is None


def test_an_environment_without_training_groups_is_handed_to_accept(capsys: pytest.CaptureFixture[str]) -> None:
    """Inference-only EKS: accept-remote says what accept says (nothing to run, exit 0), not an orchestrator error."""
    from fminfra.cli.main import main as cli_main

    assert cli_main(["accept-remote", str(ROOT / "tests" / "configs" / "eks-inference-only.yaml"), "--dry-run"]) == 0
    assert "no training groups" in capsys.readouterr().out


def test_a_fresh_node_runs_the_gate_with_nothing_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node as the HyperPod Slurm AMI leaves it: the fake Slurm cluster's commands in its
    /opt/slurm/bin, on no PATH the session has, and `python3` on systemd's PATH, a Python without
    site-packages (-S: the standard library only, no fminfra, no PyYAML). With the
    verb's own defaults (`--remote-python`), the session's command carries all the node runs, and
    the jobs' results come back as the checks' table, exit code and report."""
    import sys

    import fminfra
    from fminfra.cli.verbs import accept_remote as verb
    from tests.fakes.slurm_fakes import ddp_result_line, make_cluster

    cluster = make_cluster(tmp_path / "node")
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FAKE_ENROOT_VERSION", "4.1.2")
    (cluster.state / "ddp.txt").write_text(ddp_result_line(41.5, 1.2, 0.2) + "\n")
    monkeypatch.setenv("FAKE_TORCHRUN_OUTPUT", str(cluster.state / "ddp.txt"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    usr_bin = tmp_path / "usr-bin"
    usr_bin.mkdir()
    (usr_bin / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    (usr_bin / "python3").chmod(0o755)
    monkeypatch.setattr(accept_remote, "SLURM_BIN", str(cluster.bin))
    session_env = {**os.environ, "PATH": f"{usr_bin}:{SYSTEMD_PATH}"}
    monkeypatch.setattr(accept_slurm, "FSX_MOUNT", str(cluster.root))
    parser = argparse.ArgumentParser()
    verb.add_arguments(parser)
    ns = parser.parse_args(["dev", "--run-id", "r1", "--poll-seconds", "0.01", "--remote-user", ""])
    [(_, cfg)] = load_configs(["dev"])
    plan = accept_slurm.slurm_plan(
        cfg, "r1", accept_checks._overrides(ROOT / "pipeline.yaml", "dev"), accept_checks.read_instance_thresholds()
    )
    node = Node("aa11bbbbb222", "login", "i-0ccc")
    assert run_remote(node, plan, start_script(plan, ns), ns, runner=FakeNode(tmp_path, env=session_env), sleep=lambda s: None) == 0
    out = capsys.readouterr().out
    assert "PASS nccl all_reduce workers" in out and "436.95 GB/s" in out and "PASS ddp workers" in out
    report = json.loads((cluster.root / "fminfra-accept" / "r1" / "accept.json").read_text())
    assert (report["result"], report["fminfra_version"]) == ("PASS", fminfra.__version__)
