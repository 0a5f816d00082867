"""Fakes for the node's drain at a Capacity Block's end (scripts/node/drain_on_terminate.sh): an
Auto Scaling group with a termination lifecycle hook, the instance metadata service the node reads
it from, the `aws` CLI the node completes it with, a Slurm controller (`scontrol`, `scancel`,
`squeue`, `sinfo`) and `kubectl drain`.

What they model, and where that comes from:

- Auto Scaling's lifecycle-hook protocol (`AutoScalingGroupModel`; docs/facts/capacity.md
  #lifecycle-hook-heartbeat-timeout, #lifecycle-hook-target-state-imds,
  #lifecycle-hook-not-held-by-capacity-reclaim): a scale-in moves an instance to Terminating, and
  with an `autoscaling:EC2_INSTANCE_TERMINATING` hook to Terminating:Wait, where it stays until
  CompleteLifecycleAction (CONTINUE or ABANDON, naming the hook, the group and the instance id) or
  until the hook's HeartbeatTimeout passes (then its DefaultResult); RecordLifecycleActionHeartbeat
  restarts the timeout, up to 100 timeouts or 48 hours in all. While the instance prepares to
  terminate, the instance metadata item autoscaling/target-lifecycle-state reads Terminated.
  Completing an instance that is not waiting fails the way the API does (ValidationError). EC2
  reclaiming the block's capacity terminates the instance whether a hook waits or not, as the
  Auto Scaling guide says of capacity that is no longer available.
- IMDSv2 (`MetadataServer`; docs/facts/network.md#imdsv2-session-token): PUT /latest/api/token
  with X-aws-ec2-metadata-token-ttl-seconds (1-21600) returns a token; a GET without a valid
  X-aws-ec2-metadata-token header is 401.
- The aws CLI's `sagemaker describe-training-plan --training-plan-name NAME_OR_ARN` (botocore's
  sagemaker model: TrainingPlanName takes a name or an ARN; the response's EndTime is a timestamp,
  printed in ISO 8601; an unknown plan is ResourceNotFound:
  docs/facts/hyperpod.md#describe-training-plan-end-time), from the plans in FAKE_TRAINING_PLANS,
  which `training_plans` writes after checking each against botocore's DescribeTrainingPlanResponse
  shape (ReservedCapacitySummaries: at most 5 ReservedCapacitySummary, each with its
  ReservedCapacityArn, InstanceType, TotalInstanceCount, Status and its own StartTime/EndTime:
  docs/facts/hyperpod.md#training-plan-reserved-capacities). `--query` is JMESPath (the CLI's
  own library, jmespath); `--output text` prints a scalar as is, None for null, a list of
  scalars as one tab-separated line and a list of lists one line each.
- The aws CLI (`aws` on PATH): `autoscaling complete-lifecycle-action` and
  `record-lifecycle-action-heartbeat` with the options botocore's autoscaling model names
  (LifecycleHookName, AutoScalingGroupName, InstanceId, LifecycleActionResult); a service error
  prints `An error occurred (CODE) when calling the OPERATION operation: MESSAGE` and exits 254.
- Slurm (docs/facts/jobs.md#slurm-drain-node, #slurm-scancel-signal): `scontrol update
  NodeName=N State=DRAIN|DOWN Reason=R` (a Reason is required for DRAIN and DOWN); a DRAIN node
  takes no new jobs and its running jobs go on; DOWN ends them. `scancel --signal=SIG` sends the
  signal to the jobs' steps and, only with --full (or --batch), to the batch script; `--nodelist`
  picks the jobs on those nodes. `squeue --noheader --nodelist=N --format=%i` lists the running
  jobs' ids. `scontrol update NodeName=N State=RESUME` returns a DRAIN or DOWN node to service
  and clears its Reason (docs/facts/jobs.md#slurm-resume-node); `sinfo --noheader --nodes=N
  --format='%t %E'` prints, once per partition of the node, its compact state in lower case
  (drain: drained, drng: draining, down, idle, alloc, mix) with its flag suffix (`*` not
  responding, `$` maintenance, ...), a space, and its Reason in full, "none" for a node without
  one (docs/facts/jobs.md#slurm-sinfo-state-reason). Each job is a real process whose pid the
  state holds; a job is running while it lives.
- kubectl drain (docs/facts/eks.md#kubectl-drain): the node is cordoned (unschedulable) first;
  daemon set pods stop the drain without --ignore-daemonsets and are never evicted; pods no
  controller manages stop it without --force; pods with emptyDir stop it without
  --delete-emptydir-data; every other pod is evicted; a pod whose eviction is refused (a
  PodDisruptionBudget) is retried until --timeout, then the drain fails.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOOK_WAIT_MAX_S = 48 * 3600


@dataclass
class Hook:
    name: str
    transition: str
    heartbeat_timeout_s: int
    default_result: str


@dataclass
class Instance:
    instance_id: str
    state: str = "InService"
    target_state: str = "InService"
    wait_started: float | None = None
    timeout_at: float | None = None
    hook: str | None = None


@dataclass
class AutoScalingGroupModel:
    """One Auto Scaling group, its hooks and instances; `events` records (time, what) in order."""

    group_name: str
    hooks: dict[str, Hook] = field(default_factory=dict)
    instances: dict[str, Instance] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_template(cls, group_name: str, resource: dict[str, Any]) -> AutoScalingGroupModel:
        """The group as a synthesized AWS::AutoScaling::AutoScalingGroup defines its hooks."""
        model = cls(group_name)
        for spec in resource.get("Properties", {}).get("LifecycleHookSpecificationList") or []:
            hook = Hook(
                spec["LifecycleHookName"],
                spec["LifecycleTransition"],
                int(spec.get("HeartbeatTimeout", 3600)),
                spec.get("DefaultResult", "ABANDON"),
            )
            if not 30 <= hook.heartbeat_timeout_s <= 7200:
                raise ValueError(f"HeartbeatTimeout must be 30-7200, got {hook.heartbeat_timeout_s}")
            model.hooks[hook.name] = hook
        return model

    def _event(self, what: str) -> None:
        self.events.append((time.time(), what))

    def launch(self, instance_id: str) -> None:
        with self.lock:
            self.instances[instance_id] = Instance(instance_id)

    def scale_in(self, instance_id: str) -> None:
        """Auto Scaling picks the instance to terminate (a scheduled or manual scale-in)."""
        with self.lock:
            inst = self.instances[instance_id]
            inst.target_state = "Terminated"
            hooks = [h for h in self.hooks.values() if h.transition == "autoscaling:EC2_INSTANCE_TERMINATING"]
            self._event(f"scale-in {instance_id}")
            if not hooks:
                inst.state = "Terminated"
                self._event(f"terminated {instance_id}")
                return
            inst.state, inst.hook = "Terminating:Wait", hooks[0].name
            inst.wait_started = time.time()
            inst.timeout_at = inst.wait_started + hooks[0].heartbeat_timeout_s

    def ec2_reclaim(self, instance_id: str) -> None:
        """EC2 takes the block's capacity back: the instance ends whether a hook waits or not."""
        with self.lock:
            inst = self.instances[instance_id]
            if inst.state != "Terminated":
                inst.state = inst.target_state = "Terminated"
                self._event(f"reclaimed {instance_id}")

    def tick(self) -> None:
        """A hook whose timeout passed takes its default result."""
        with self.lock:
            for inst in self.instances.values():
                if inst.state == "Terminating:Wait" and inst.timeout_at is not None and time.time() >= inst.timeout_at:
                    result = self.hooks[inst.hook or ""].default_result
                    inst.state = "Terminated"
                    self._event(f"hook timed out {inst.instance_id} ({result})")
                    self._event(f"terminated {inst.instance_id}")

    def call(self, operation: str, params: dict[str, str]) -> tuple[str, str] | None:
        """An Auto Scaling API call: None on success, else (error code, message)."""
        with self.lock:
            if params.get("AutoScalingGroupName") != self.group_name:
                return "ValidationError", f"AutoScalingGroup name not found - {params.get('AutoScalingGroupName')}"
            if params.get("LifecycleHookName") not in self.hooks:
                return "ValidationError", f"No Lifecycle Hook found with name {params.get('LifecycleHookName')}"
            inst = self.instances.get(params.get("InstanceId", ""))
            if inst is None or inst.state != "Terminating:Wait" or inst.hook != params["LifecycleHookName"]:
                return "ValidationError", f"No active Lifecycle Action found with instance ID {params.get('InstanceId')}"
            if operation == "CompleteLifecycleAction":
                if params.get("LifecycleActionResult") not in ("CONTINUE", "ABANDON"):
                    return "ValidationError", "LifecycleActionResult must be CONTINUE or ABANDON"
                inst.state = "Terminated"
                self._event(f"completed {inst.instance_id} {params['LifecycleActionResult']}")
                self._event(f"terminated {inst.instance_id}")
                return None
            if operation == "RecordLifecycleActionHeartbeat":
                hook = self.hooks[inst.hook or ""]
                limit = (inst.wait_started or 0) + min(100 * hook.heartbeat_timeout_s, HOOK_WAIT_MAX_S)
                inst.timeout_at = min(time.time() + hook.heartbeat_timeout_s, limit)
                self._event(f"heartbeat {inst.instance_id}")
                return None
            return "InvalidAction", f"unknown operation {operation}"

    def times(self, prefix: str) -> list[float]:
        return [t for t, what in self.events if what.startswith(prefix)]


class MetadataServer:
    """IMDSv2 for one instance of `model`, plus the endpoint the fake aws CLI calls."""

    def __init__(self, model: AutoScalingGroupModel, instance_id: str, local_hostname: str) -> None:
        self.model, self.instance_id, self.local_hostname = model, instance_id, local_hostname
        self.tokens: set[str] = set()
        # How often each metadata item was read with a valid token (what a test waits on).
        self.reads: Counter[str] = Counter()
        self.reads_lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
                if self.path != "/latest/api/token" or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                    self._send(400, "")
                    return
                token = secrets.token_hex(16)
                server.tokens.add(token)
                self._send(200, token)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") not in server.tokens:
                    self._send(401, "")
                    return
                with server.reads_lock:
                    server.reads[self.path.removeprefix("/latest/meta-data/")] += 1
                server.model.tick()
                inst = server.model.instances[server.instance_id]
                items = {
                    "/latest/meta-data/instance-id": server.instance_id,
                    "/latest/meta-data/local-hostname": server.local_hostname,
                    "/latest/meta-data/autoscaling/target-lifecycle-state": inst.target_state,
                }
                if self.path in items:
                    self._send(200, items[self.path])
                else:
                    self._send(404, "")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.model.tick()
                error = server.model.call(body["operation"], body["params"])
                self._send(200, json.dumps({"error": error}))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # serve_forever looks for a shutdown every poll_interval (0.5 s by default): a short one ends the server at once.
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> MetadataServer:
        self.thread.start()
        return self

    def read_count(self, item: str) -> int:
        """How often the item (autoscaling/target-lifecycle-state) has been read so far."""
        with self.reads_lock:
            return self.reads[item]

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


_AWS = r"""
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["sagemaker", "describe-training-plan"]:
    opts, rest = {}, args[2:]
    while rest:
        name = rest.pop(0)
        if name not in ("--training-plan-name", "--query", "--output", "--region") or not rest:
            print(f"aws: error: unknown or incomplete option {name}", file=sys.stderr); sys.exit(252)
        opts[name] = rest.pop(0)
    if "--training-plan-name" not in opts:
        print("aws: error: the following arguments are required: --training-plan-name", file=sys.stderr); sys.exit(252)
    plans = json.load(open(os.environ["FAKE_TRAINING_PLANS"]))
    with open(os.environ["FAKE_AWS_LOG"], "a") as log:
        log.write(json.dumps(["describe-training-plan", opts]) + "\n")
    wanted = opts["--training-plan-name"]
    # TrainingPlanName takes a name or an ARN (botocore: TrainingPlanNameOrArn).
    plan = next((p for p in plans if wanted in (p["TrainingPlanArn"], p["TrainingPlanName"])), None)
    if plan is None:
        print(f"\nAn error occurred (ResourceNotFound) when calling the DescribeTrainingPlan operation: Training plan {wanted} not found", file=sys.stderr)
        sys.exit(254)
    out = plan
    if "--query" in opts:
        import jmespath
        out = jmespath.search(opts["--query"], plan)
    if opts.get("--output") == "text":
        def cell(v):
            return "None" if v is None else str(v)
        if isinstance(out, list):
            if out and all(isinstance(r, list) for r in out):
                print("\n".join("\t".join(cell(v) for v in r) for r in out))
            elif out:
                print("\t".join(cell(v) for v in out))
        else:
            print(cell(out))
    else:
        print(json.dumps(out))
    sys.exit(0)
OPS = {"complete-lifecycle-action": "CompleteLifecycleAction", "record-lifecycle-action-heartbeat": "RecordLifecycleActionHeartbeat"}
OPTS = {"--lifecycle-hook-name": "LifecycleHookName", "--auto-scaling-group-name": "AutoScalingGroupName",
        "--instance-id": "InstanceId", "--lifecycle-action-result": "LifecycleActionResult", "--region": None}
if len(args) < 2 or args[0] != "autoscaling" or args[1] not in OPS:
    sys.exit(f"aws: fake supports autoscaling {' | '.join(OPS)}, got {' '.join(args)}")
params, rest = {}, args[2:]
while rest:
    name = rest.pop(0)
    if name not in OPTS or not rest:
        print(f"aws: error: unknown or incomplete option {name}", file=sys.stderr); sys.exit(252)
    value = rest.pop(0)
    if OPTS[name]:
        params[OPTS[name]] = value
with open(os.environ["FAKE_AWS_LOG"], "a") as log:
    log.write(json.dumps([args[1], params]) + "\n")
# The call goes to the test's model over a plain HTTP/1.0 POST (a socket: urllib.request takes longer to import than the call takes).
import socket
from urllib.parse import urlsplit
endpoint = urlsplit(os.environ["FAKE_AWS_ENDPOINT"])
body = json.dumps({"operation": OPS[args[1]], "params": params}).encode()
with socket.create_connection((endpoint.hostname, endpoint.port)) as sock:
    sock.sendall(f"POST / HTTP/1.0\r\nHost: {endpoint.netloc}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    reply = b"".join(iter(lambda: sock.recv(65536), b""))
head, _, rest = reply.partition(b"\r\n\r\n")
if head.split()[1:2] != [b"200"]:
    sys.exit(f"aws: fake: the model answered {head.splitlines()[:1]}")
error = json.loads(rest)["error"]
if error:
    print(f"\nAn error occurred ({error[0]}) when calling the {OPS[args[1]]} operation: {error[1]}", file=sys.stderr)
    sys.exit(254)
"""

_SLURM_COMMON = r"""
import fcntl, json, os, signal, sys
STATE = os.environ["FAKE_SLURM_STATE"]
def load():
    with open(STATE) as f:
        return json.load(f)
def save(state):
    # Whole or not at all: a test polling the state never reads a half-written file.
    with open(STATE + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(STATE + ".tmp", STATE)
def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
def running(state, node):
    return [j for j, job in sorted(state["jobs"].items()) if job["node"] == node and alive(job["pid"])]
def record(state, what):
    state.setdefault("log", []).append(what)
"""

_SCONTROL = (
    _SLURM_COMMON
    + r"""
args = sys.argv[1:]
if not args or args[0] != "update":
    sys.exit(f"scontrol: fake supports update NodeName=... State=... Reason=..., got {args}")
opts = dict(a.split("=", 1) for a in args[1:])
opts = {k.lower(): v for k, v in opts.items()}
state = load()
node = opts.get("nodename")
if node not in state["nodes"]:
    print(f"slurm_update error: Invalid node name specified", file=sys.stderr); sys.exit(1)
new = opts.get("state", "").upper()
if new not in ("DRAIN", "DOWN", "RESUME"):
    print(f"scontrol: invalid node state specified", file=sys.stderr); sys.exit(1)
if new in ("DRAIN", "DOWN") and not opts.get("reason"):
    print("You must specify a reason when DOWNING or DRAINING a node. Request denied", file=sys.stderr); sys.exit(1)
# RESUME returns a DRAIN or DOWN node to service and clears its Reason.
state["nodes"][node] |= {"state": "IDLE", "reason": ""} if new == "RESUME" else {"state": new, "reason": opts.get("reason", "")}
record(state, f"node {node} {new}")
if new == "DOWN":
    for j in running(state, node):
        os.kill(state["jobs"][j]["pid"], signal.SIGKILL)
        record(state, f"job {j} ended (node DOWN)")
save(state)
"""
)

_SCANCEL = (
    _SLURM_COMMON
    + r"""
args = sys.argv[1:]
sig, full, nodes, ids = None, False, None, []
for a in args:
    if a.startswith("--signal="): sig = a.split("=", 1)[1]
    elif a in ("--full", "-f", "--batch", "-b"): full = True
    elif a.startswith("--nodelist="): nodes = a.split("=", 1)[1].split(",")
    elif a.startswith("-"): sys.exit(f"scancel: unrecognized option '{a}'")
    else: ids.append(a)
state = load()
targets = [j for n in (nodes or []) for j in running(state, n)] + ids
number = getattr(signal, "SIG" + sig.upper().removeprefix("SIG")) if sig else signal.SIGKILL
for j in targets:
    job = state["jobs"][j]
    # Without --full/--batch a signal other than KILL reaches the steps only, not the batch script.
    if number == signal.SIGKILL or full or job.get("step"):
        os.kill(job["pid"], number)
        record(state, f"job {j} signalled {sig or 'KILL'}")
    else:
        record(state, f"job {j} batch script not signalled {sig}")
save(state)
"""
)

_SQUEUE = (
    _SLURM_COMMON
    + r"""
args = sys.argv[1:]
opts = dict(a.split("=", 1) for a in args if "=" in a)
if "--noheader" not in args or opts.get("--format") != "%i" or "--nodelist" not in opts:
    sys.exit(f"squeue: fake supports --noheader --nodelist=N --format=%i, got {args}")
# FAKE_SQUEUE_FAILS=N: the first N calls find slurmctld not answering, as squeue reports it: a
# message on stderr and exit status 1 (squeue(1), EXIT STATUS; docs/facts/jobs.md#slurm-squeue-exit-status).
fails = int(os.environ.get("FAKE_SQUEUE_FAILS", "0"))
counter = os.environ["FAKE_SLURM_STATE"] + ".squeue-calls"
calls = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(calls + 1))
if calls < fails:
    sys.stderr.write("squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation\n")
    sys.exit(1)
state = load()
for j in running(state, opts["--nodelist"]):
    print(j)
"""
)

_SINFO = (
    _SLURM_COMMON
    + r"""
args = sys.argv[1:]
opts = dict(a.split("=", 1) for a in args if "=" in a)
if "--noheader" not in args or opts.get("--format") != "%t %E" or "--nodes" not in opts:
    sys.exit(f"sinfo: fake supports --noheader --nodes=N --format='%t %E', got {args}")
state = load()
name = opts["--nodes"]
node = state["nodes"].get(name)
if node is not None:
    # %t: the compact state, lower case; a DRAIN node still running jobs is drng, one without is
    # drain; then the node's flag suffix (* not responding, $ maintenance, ...).
    base = node["state"]
    busy = bool(running(state, name))
    compact = {"DRAIN": "drng" if busy else "drain", "DOWN": "down", "IDLE": "idle", "ALLOCATED": "alloc", "MIXED": "mix"}[base]
    # %E: the reason, in full (no field size given), "none" for a node without one; one line per partition.
    for _ in range(node.get("partitions", 1)):
        print(f"{compact}{node.get('suffix', '')} {node['reason'] or 'none'}")
"""
)

_KUBECTL = r"""
import json, os, sys, time
args = sys.argv[1:]
STATE = os.environ["FAKE_K8S_STATE"]
state = json.load(open(STATE))
def save():
    json.dump(state, open(STATE, "w"))
if args[:1] != ["--kubeconfig"] or not os.path.isfile(args[1]):
    print("error: You must be logged in to the server (the server has asked for the client to provide credentials)", file=sys.stderr); sys.exit(1)
args = args[2:]
if args[:1] != ["drain"] or len(args) < 2:
    sys.exit(f"kubectl: fake supports drain NODE, got {args}")
node, flags = args[1], set(a.split("=")[0] for a in args[2:])
timeout = next((float(a.split("=")[1].rstrip("s")) for a in args[2:] if a.startswith("--timeout=")), 0)
if node not in state["nodes"]:
    print(f'Error from server (NotFound): nodes "{node}" not found', file=sys.stderr); sys.exit(1)
state["nodes"][node]["unschedulable"] = True
state.setdefault("log", []).append(f"node {node} cordoned")
save()
print(f"node/{node} cordoned")
pods = [p for p in state["pods"] if p["node"] == node]
errors = []
if any(p["owner"] == "DaemonSet" for p in pods) and "--ignore-daemonsets" not in flags:
    errors.append("cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)")
if any(p["owner"] == "" for p in pods) and "--force" not in flags:
    errors.append("cannot delete Pods that declare no controller (use --force to override)")
if any(p.get("emptydir") for p in pods) and "--delete-emptydir-data" not in flags:
    errors.append("cannot delete Pods with local storage (use --delete-emptydir-data to override)")
if errors:
    print("error: unable to drain node " + repr(node) + " due to error: " + ", ".join(errors), file=sys.stderr); sys.exit(1)
deadline = time.time() + timeout if timeout else None
for p in pods:
    if p["owner"] == "DaemonSet":
        continue
    if p.get("eviction_refused"):
        while deadline is None or time.time() < deadline:
            time.sleep(0.2)
            if deadline is None: break
        print(f"error: error when evicting pods/\"{p['name']}\" -n \"{p['namespace']}\": global timeout reached: {timeout:g}s", file=sys.stderr)
        sys.exit(1)
    state["pods"].remove(p)
    state["log"].append(f"pod {p['namespace']}/{p['name']} evicted")
    save()
    print(f"pod/{p['name']} evicted")
print(f"node/{node} drained")
"""


# The jobs the drain tests run on a fake Slurm node. A job that checkpoints when told: it traps USR1, writes its checkpoint and exits.
CHECKPOINTING_JOB = """trap 'echo step=$STEP > "$CKPT"; exit 0' USR1
STEP=0
while :; do STEP=$((STEP + 1)); sleep 0.1; done
"""
# A job that ignores the signal and would run forever.
STUBBORN_JOB = """trap '' USR1
while :; do sleep 0.1; done
"""


def install_fakes(bin_dir: Path, *, slurm: bool = True, kubectl: bool = False) -> None:
    """Writes `aws`, and the Slurm commands and/or `kubectl`, into bin_dir (put it first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    programs = {"aws": _AWS}
    if slurm:
        programs |= {"scontrol": _SCONTROL, "scancel": _SCANCEL, "squeue": _SQUEUE, "sinfo": _SINFO}
    if kubectl:
        programs["kubectl"] = _KUBECTL
    for name, body in programs.items():
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)


@functools.cache
def _describe_training_plan_response() -> Any:
    """botocore's DescribeTrainingPlanResponse shape (loaded once: the sagemaker model is large)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker").operation_model("DescribeTrainingPlan").output_shape


def training_plans(path: Path, plans: list[dict[str, Any]]) -> None:
    """Writes the plans DescribeTrainingPlan returns (timestamps as datetimes, stored as the CLI
    prints them, ISO 8601), each first checked against botocore's DescribeTrainingPlanResponse."""
    from botocore.validate import ParamValidator

    shape = _describe_training_plan_response()
    for plan in plans:
        report = ParamValidator().validate(plan, shape)
        if report.has_errors():
            raise ValueError(f"not a DescribeTrainingPlan response: {report.generate_report()}")
    path.write_text(json.dumps(plans, default=lambda v: v.isoformat()))


def slurm_state(path: Path, node: str, jobs: dict[str, int], *, state: str = "ALLOCATED", reason: str = "", **flags: object) -> None:
    """A Slurm state with one node running the given jobs (id -> pid of the job's batch script);
    `state` and `reason` as an operator or Slurm left them, `flags` the sinfo fake's `suffix`
    and `partitions`."""
    record = {"state": state, "reason": reason, **flags}
    path.write_text(json.dumps({"nodes": {node: record}, "jobs": {j: {"node": node, "pid": pid} for j, pid in jobs.items()}}))


def stop(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
