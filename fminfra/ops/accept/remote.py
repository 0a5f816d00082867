"""`fminfra accept-remote ENV`: run `fminfra accept` from CI, where the cluster is not at hand.

HyperPod Slurm: the acceptance jobs are submitted with `sbatch` on the cluster's login node
(`fminfra accept`, which must run there). CI reaches that node the way the SageMaker developer
guide documents for HyperPod nodes: an SSM Session Manager session, `aws ssm start-session
--target sagemaker-cluster:<cluster-id>_<group>-<instance-id>`
(docs/facts/hyperpod.md#hyperpod-node-ssm-session). The guide shows interactive sessions and the
`AWS-StartSSHSession` document; a non-interactive command through the `AWS-StartNonInteractiveCommand`
session document on such a target is documented by AWS Labs' HyperPod skill only, which also says
that SSM Run Command (`send-command`) does not take `sagemaker-cluster:` targets
(docs/facts/jobs.md#hyperpod-ssm-target). That is the route here; it has never run against a real
cluster.

The node: DescribeCluster gives the cluster ARN (its last segment is the cluster id), and
ListClusterNodes the first Running node of the login group, or of the controller group when the
cluster has no login group. One short session starts `fminfra accept` in the background on the node
(its log and exit code under the run folder on FSx, so nothing depends on a session lasting as long
as the jobs); later short sessions read the log's new bytes and, at the end, the exit code, which
becomes this command's. What runs there travels inside the starting session: the plan (jobs and
thresholds, made here from the config and pipeline.yaml), the scripts the jobs run, and
`fminfra.ops.accept.node`, which needs only the node's python3 (standard library, Python 3.10:
docs/facts/hyperpod.md#hyperpod-slurm-ami-python). So the node needs nothing installed, and runs
the code of this fminfra version, whatever was deployed before.

EKS: `fminfra accept` reaches the cluster from here (Kubernetes API with an IAM token); this command
hands EKS environments to it unchanged.

A session that fails to run (start-session exits non-zero without the node's reply: throttled,
TargetNotConnected; or it runs past SESSION_TIMEOUT_S) ends the gate with one line when it is the
starting session; while polling it counts, like a session that brings nothing back, toward
MAX_SILENT_POLLS in a row.

Exit codes: those of `fminfra accept` (0 pass, 1 a figure fails, 2 bad input), 1 when the remote run
does not finish in time, 2 when the node cannot be found or reached.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fminfra.config import CONTROLLER_GROUP_NAME, LOGIN_GROUP_NAME, EnvironmentConfig
from fminfra.config.pipeline import DEFAULT_PIPELINE_FILE, gate_enabled, load_pipeline
from fminfra.core.resources import scripts_root
from fminfra.ops import accept as accept_command
from fminfra.ops.accept import node as node_package
from fminfra.ops.accept import slurm as accept
from fminfra.ops.accept.checks import _overrides, end_dry_run, read_instance_thresholds
from fminfra.ops.common import EXIT_CHECK_FAILED, EXIT_OK, UsageError, load_configs

# The session document that runs one command and ends (docs/facts/jobs.md#hyperpod-ssm-target).
SSM_DOCUMENT = "AWS-StartNonInteractiveCommand"
BEGIN, END, EXIT, SIZE = "FMINFRA-BEGIN", "FMINFRA-END", "FMINFRA-EXIT=", "FMINFRA-LOG-BYTES="
MAX_SILENT_POLLS = 5  # polls in a row that bring back nothing readable, or fail to run, before giving up
SESSION_TIMEOUT_S = 300  # one session: a poll reads a few KiB, the start ships the config
# Where HyperPod Slurm nodes keep sbatch, sacct and scancel (docs/facts/observability.md#hyperpod-slurm-bin-path):
# on no PATH the session gets (the agent's service environment, or sudo's secure_path).
SLURM_BIN = "/opt/slurm/bin"


@dataclass(frozen=True)
class Node:
    cluster_id: str
    group: str
    instance_id: str

    @property
    def target(self) -> str:
        """The Session Manager target of a HyperPod node (docs/facts/hyperpod.md#hyperpod-node-ssm-session)."""
        return f"sagemaker-cluster:{self.cluster_id}_{self.group}-{self.instance_id}"


def cluster_name(cfg: EnvironmentConfig) -> str:
    """The HyperPod cluster fminfra creates for an environment (fminfra/compute/stack/clusters.py)."""
    return cfg.physical_name("hyperpod")


def node_group(cfg: EnvironmentConfig) -> str:
    """Where `fminfra accept` runs: the login group, or the controller when there is none."""
    slurm = cfg.compute.slurm
    return LOGIN_GROUP_NAME if slurm is not None and slurm.login.count > 0 else CONTROLLER_GROUP_NAME


def find_node(sagemaker: Any, name: str, group: str) -> Node:
    """The first Running node of `group` (sagemaker:DescribeCluster, sagemaker:ListClusterNodes)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        cluster = sagemaker.describe_cluster(ClusterName=name)
        if cluster["ClusterStatus"] != "InService":
            raise UsageError(f"accept-remote: cluster {name} is {cluster['ClusterStatus']}, not InService; wait for it, or redeploy")
        cluster_id = cluster["ClusterArn"].rsplit("/", 1)[1]
        states = []
        for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=name, InstanceGroupNameContains=group):
            for node in page["ClusterNodeSummaries"]:
                if node["InstanceGroupName"] != group:
                    continue  # a filter by substring: "login" also matches "login-2"
                if node["InstanceStatus"]["Status"] == "Running":
                    return Node(cluster_id, group, node["InstanceId"])
                states.append(f"{node['InstanceId']} {node['InstanceStatus']['Status']}")
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise UsageError(f"accept-remote: cluster {name}: {error.get('Code', '?')}: {error.get('Message', exc)}") from None
    except BotoCoreError as exc:  # no credentials, no endpoint: one line
        raise UsageError(f"accept-remote: cluster {name}: {exc}") from None
    found = ", ".join(states) if states else "no nodes"
    raise UsageError(f"accept-remote: cluster {name}: no Running node in group {group} ({found})")


# --- what runs on the node -----------------------------------------------------------------------------


def _ship(data: bytes, path: str) -> str:
    return f"printf %s {base64.b64encode(data).decode()} | base64 -d > {shlex.quote(path)}"


# The name `fminfra.ops.accept.node` travels under (its imports are relative), and what of scripts/
# the jobs read: scripts/jobs and what its common.sh reads from ../node.
NODE_PACKAGE = "fminfra_accept_node"
NODE_SCRIPTS = ("jobs", "node/versions.env", "node/manifest.sh")


def node_bundle() -> bytes:
    """lib/fminfra_accept_node/ and scripts/ for the run folder, a .tar.gz (the same bytes for the same files)."""
    package = Path(node_package.__file__).parent
    members = [(f"lib/{NODE_PACKAGE}/{f.name}", f) for f in sorted(package.glob("*.py"))]
    for name in NODE_SCRIPTS:
        top = scripts_root() / name
        files = sorted(f for f in top.rglob("*") if f.is_file() and "__pycache__" not in f.parts) if top.is_dir() else [top]
        members += [(f"scripts/{f.relative_to(scripts_root()).as_posix()}", f) for f in files]
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for arcname, path in members:
            info = tarfile.TarInfo(arcname)
            data = path.read_bytes()
            info.size, info.mode = len(data), 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def start_script(plan: accept.Plan, ns: argparse.Namespace) -> str:
    """Check the node's python3, unpack the node code and the scripts, write the plan, start the run."""
    node_plan = plan.for_node()
    run = node_plan.run_dir
    python = shlex.quote(ns.remote_python)
    want = ".".join(map(str, node_package.PYTHON_VERSION))
    args = ["../plan.json", "--timeout-s", f"{ns.timeout_minutes * 60:g}", "--poll-s", f"{ns.poll_seconds:g}"]
    node_cmd = f"cd lib && {python} -s -m {NODE_PACKAGE} {shlex.join(args)}"
    background = f"{node_cmd} > ../gate.log 2>&1; echo $? > ../gate.exit.tmp; mv ../gate.exit.tmp ../gate.exit"
    version_check = f"import sys; sys.exit(sys.version_info[:2] < {node_package.PYTHON_VERSION!r})"
    lines = [
        "set -eu",
        f'export PATH="{SLURM_BIN}:$PATH"',
        f"mkdir -p {shlex.quote(run)} && cd {shlex.quote(run)}",
        f"echo {BEGIN}",
        f"if ! {python} -c {shlex.quote(version_check)}; then",
        f"  echo {EXIT}2; echo 'accept-remote: {ns.remote_python} on this node is not Python {want} or later, which the gate runs on"
        f" (the HyperPod Slurm AMI has had 3.10 since 2025-05-13: update the cluster software, or give --remote-python)'",
        f"  echo {END}; exit 0",
        "fi",
        _ship(node_bundle(), "bundle.tar.gz"),
        "tar -xzf bundle.tar.gz && rm bundle.tar.gz",
        _ship(node_plan.to_json().encode(), "plan.json"),
        f"setsid nohup bash -c {shlex.quote(background)} < /dev/null > /dev/null 2>&1 &",
        f"echo started; echo {END}",
    ]
    return "\n".join(lines) + "\n"


def poll_script(run_dir: str, offset: int) -> str:
    """The exit code if accept has ended (read first: then the log is complete), then the log's new bytes."""
    run = shlex.quote(run_dir)
    return "\n".join(
        [
            f"cd {run} || exit 0",
            f"echo {BEGIN}",
            f'if [ -f gate.exit ]; then echo "{EXIT}$(cat gate.exit)"; fi',
            "size=$(stat -c %s gate.log 2>/dev/null || echo 0)",
            f'echo "{SIZE}$size"',
            f'tail -c +{offset + 1} gate.log 2>/dev/null | head -c "$((size - {offset}))"',
            f"echo; echo {END}",
        ]
    )


def session_parameters(script: str, user: str) -> dict[str, list[str]]:
    """The document's `command` parameter: `script`, base64-encoded (no quoting to go wrong), run by
    bash as `user` if given. The agent runs the parameter without a shell: it splits it into words
    and executes the first (docs/facts/jobs.md#ssm-noninteractive-command-no-shell), so the pipe
    runs inside `bash -c '...'`, whose single-quoted word holds only base64, the user (a name that
    needs no quoting, `remote_user_problem`) and the test below. Who the session itself is depends on
    the account's Session Manager preferences: root by SageMaker's HyperPod guide, `ssm-user` (in
    sudoers) by Session Manager's default, the Run As user when that is on
    (docs/facts/hyperpod.md#hyperpod-node-ssm-session). So: bash directly when the session already
    is `user`, else `sudo -n` (fails at once, never waits for a password the session cannot type)."""
    check_remote_user(user)
    shell = f'if [ "$(id -un)" = {user} ]; then bash; else sudo -n -u {user} -H bash; fi' if user else "bash"
    pipeline = f"echo {base64.b64encode(script.encode()).decode()} | base64 -d | {shell}"
    return {"command": [f"bash -c '{pipeline}'"]}


def remote_user_problem(user: str) -> str:
    """Why `user` cannot be the remote user ('' when it can): it travels unquoted inside the
    command's single-quoted word, so only names that need no shell quoting (letters, digits and
    `@%+=:,./-_`, as `shlex.quote` leaves alone) are taken; every Linux login name is one."""
    if user and shlex.quote(user) != user:
        return f"{user!r} is not a user name: letters, digits and @%+=:,./-_ only"
    return ""


def check_remote_user(user: str) -> None:
    """UsageError naming `--remote-user` when `remote_user_problem` has one."""
    if problem := remote_user_problem(user):
        raise UsageError(f"accept-remote: --remote-user: {problem}")


def session_argv(region: str, target: str, params_file: str) -> list[str]:
    """`aws ssm start-session` with the non-interactive command document."""
    return [
        "aws",
        "ssm",
        "start-session",
        "--region",
        region,
        "--target",
        target,
        "--document-name",
        SSM_DOCUMENT,
        "--parameters",
        f"file://{params_file}",
    ]


@dataclass
class Reply:
    exit_code: int | None
    log_bytes: int | None
    text: str


def parse_reply(output: str) -> Reply | None:
    """What the node printed between the markers (the plugin adds its own session lines); None when
    the session brought nothing back."""
    lines = output.replace("\r", "").split("\n")
    if BEGIN not in lines or END not in lines:
        return None
    body = lines[lines.index(BEGIN) + 1 : len(lines) - 1 - lines[::-1].index(END)]
    exit_code = log_bytes = None
    text: list[str] = []
    for line in body:
        if line.startswith(EXIT) and not text and line[len(EXIT) :].strip().isdigit():
            exit_code = int(line[len(EXIT) :])
        elif line.startswith(SIZE) and not text and line[len(SIZE) :].strip().isdigit():
            log_bytes = int(line[len(SIZE) :])
        else:
            text.append(line)
    return Reply(exit_code, log_bytes, "\n".join(text))


Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


class SessionFailed(UsageError):
    """One session that did not run: `start-session` exited non-zero without the node's reply
    (throttled, TargetNotConnected, denied) or ran past SESSION_TIMEOUT_S. Fatal for the starting
    session; while polling, counted like an empty session (run_remote)."""


def _run_session(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The plugin with a stdin that stays open and silent: it forwards what it reads there to the
    session and ends the session when the read ends (docs/facts/jobs.md#session-manager-plugin-stdin),
    so neither CI's stdin nor /dev/null (at once at its end, before the node's output) will do."""
    read_end, write_end = os.pipe()
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=SESSION_TIMEOUT_S, stdin=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)


def session(runner: Runner, region: str, node: Node, script: str, user: str) -> Reply | None:
    """One session; None when it ran but brought nothing back; SessionFailed when it did not run."""
    prefix = f"accept-remote: aws ssm start-session --target {node.target}"
    with tempfile.TemporaryDirectory(prefix="fminfra-ssm-") as tmp:
        params = Path(tmp) / "command.json"
        params.write_text(json.dumps(session_parameters(script, user)))
        try:
            result = runner(session_argv(region, node.target, str(params)))
        except subprocess.TimeoutExpired as exc:
            raise SessionFailed(f"{prefix}: no end after {exc.timeout:g} s") from None
    if result.returncode != 0 and BEGIN not in result.stdout:
        first = (result.stderr or result.stdout).strip().splitlines()
        raise SessionFailed(f"{prefix}: exit {result.returncode}: {first[-1] if first else ''}")
    return parse_reply(result.stdout)


def run_remote(
    node: Node,
    plan: accept.Plan,
    start: str,
    ns: argparse.Namespace,
    runner: Runner = _run_session,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    cfg, run_dir = plan.cfg, plan.run_dir
    print(f"accept-remote {cfg.name}: {node.target} (group {node.group}), run {ns.run_id}", flush=True)
    reply = session(runner, cfg.region, node, start, ns.remote_user)
    if reply is None:
        raise UsageError(f"accept-remote: {node.target}: the starting session brought nothing back; the run may not have started")
    if reply.exit_code is not None:  # refused before accept started (the node's python3)
        print(reply.text, flush=True)
        return reply.exit_code
    # accept's own timeout, plus time for its last sacct poll, scancel and the report
    deadline = clock() + ns.timeout_minutes * 60 + 10 * 60
    offset, silent = 0, 0
    while True:
        sleep(ns.poll_seconds)
        try:
            reply = session(runner, cfg.region, node, poll_script(run_dir, offset), ns.remote_user)
            why = "brought nothing back"
        except SessionFailed as exc:  # throttled (start-session: 3 TPS), node briefly unreachable: poll again
            reply, why = None, str(exc).removeprefix("accept-remote: ")
            print(f"accept-remote {cfg.name}: {why}; polling again", file=sys.stderr, flush=True)
        if reply is None:
            silent += 1
            if silent >= MAX_SILENT_POLLS:
                raise UsageError(f"accept-remote: {node.target}: {silent} sessions in a row brought nothing back (last: {why})")
        else:
            silent = 0
            if reply.text.strip():
                print(reply.text.rstrip("\n"), flush=True)
            if reply.log_bytes is not None:
                offset = max(offset, reply.log_bytes)
            if reply.exit_code is not None:
                print(f"accept-remote {cfg.name}: fminfra accept exited {reply.exit_code}; report {run_dir}/accept.json")
                return reply.exit_code
        if clock() >= deadline:
            print(
                f"accept-remote {cfg.name}: no result from the node after {ns.timeout_minutes:g} + 10 minutes; see {run_dir}/gate.log",
                file=sys.stderr,
            )
            return EXIT_CHECK_FAILED


# --- the verb --------------------------------------------------------------------------------------------


def _as_accept_namespace(ns: argparse.Namespace) -> argparse.Namespace:
    """accept's own arguments (`fminfra accept ENV ...`, its defaults for the rest), as its parser
    would read them from the command line accept-remote passes on."""
    return argparse.Namespace(
        config=ns.config,
        dry_run=bool(ns.dry_run),
        pipeline=Path(str(ns.pipeline)) if ns.pipeline else None,
        run_id=ns.run_id or None,
        timeout_minutes=float(f"{ns.timeout_minutes:g}"),
        poll_seconds=float(f"{ns.poll_seconds:g}"),
        report=None,
        serving=False,
        endpoint=None,
        if_gated=False,
    )


def command(ns: argparse.Namespace) -> int:
    [(config_file, cfg)] = load_configs([ns.config])
    if ns.timeout_minutes <= 0 or ns.poll_seconds <= 0:
        raise UsageError("accept-remote: --timeout-minutes and --poll-seconds must be greater than 0")
    pipeline_file = ns.pipeline or DEFAULT_PIPELINE_FILE
    if ns.if_gated and pipeline_file.exists():
        loaded, configs = load_pipeline(pipeline_file)
        entry = next((e for e, c in zip(loaded.environments, configs, strict=True) if c.name == cfg.name), None)
        if entry is not None and not gate_enabled(entry, cfg):
            print(f"accept-remote {cfg.name}: the acceptance gate is off (pipeline.yaml accept.gate, or no training GPUs): nothing to run")
            return EXIT_OK
    orchestrator = cfg.compute.orchestrator
    if orchestrator != "slurm":
        # The EKS path reaches the cluster from here: `fminfra accept` itself (docs/first-job.md); it
        # also says what an environment without training groups (nothing to run) or ec2 (not covered) gets.
        return accept_command.command(_as_accept_namespace(ns))
    ns.run_id = ns.run_id or f"{cfg.name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    if not ns.run_id.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"accept-remote: --run-id: letters, digits, '-' and '_' only, got {ns.run_id!r}")
    check_remote_user(ns.remote_user)  # before any AWS call; session_parameters checks it too
    accept.check_shared_folder(cfg, config_file)
    plan = accept.slurm_plan(cfg, ns.run_id, _overrides(ns.pipeline, cfg.name), read_instance_thresholds())
    start = start_script(plan, ns)
    group = node_group(cfg)
    if ns.dry_run:
        target = f"sagemaker-cluster:<cluster-id>_{group}-<instance-id>"
        print(f"# fminfra accept-remote {cfg.name} (dry run): HyperPod cluster {cluster_name(cfg)}, {cfg.region}")
        print(f"# the node: the first Running node of group {group} (sagemaker:DescribeCluster, sagemaker:ListClusterNodes)")
        print(shlex.join(session_argv(cfg.region, target, "command.json")))
        print("# command.json, exactly:")
        print(json.dumps(session_parameters(start, ns.remote_user)))
        print(f"# which runs this script as {ns.remote_user or 'root'}:")
        print(start, end="")
        print(f"# then every {ns.poll_seconds:g} s, until gate.exit appears:")
        print(poll_script(plan.run_dir, 0))
        print("# plan.json, as the script writes it:")
        print(plan.for_node().to_json(), end="")
        print(f"# and on the node, {NODE_PACKAGE} (python3 -m, from lib/) runs that plan:")
        accept.print_plan(plan)
        return end_dry_run("accept-remote", cfg.name, plan.missing)
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        client = boto3.client("sagemaker", region_name=cfg.region)
    except BotoCoreError as exc:  # credentials that cannot be loaded: one line
        raise UsageError(f"accept-remote: {cluster_name(cfg)}: {exc}") from None
    node = find_node(client, cluster_name(cfg), group)
    if shutil.which("aws") is None or shutil.which("session-manager-plugin") is None:
        raise UsageError(
            "accept-remote: the AWS CLI (aws) and the Session Manager plugin (session-manager-plugin) must be on PATH: they run the session"
        )
    return run_remote(node, plan, start, ns)
