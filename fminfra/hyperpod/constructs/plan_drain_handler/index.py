"""The HyperPod EKS training-plan drain: run on a schedule (every minute), it drains the nodes of a
training-plan instance group before SageMaker terminates them, and undoes its own drain when the
capacity goes on. The Kubernetes side of `scripts/node/drain_before_plan_end.sh` (the Slurm path).

Event: {"Groups": [{"InstanceGroup": NAME, "TrainingPlanArn": ARN, "InstanceType": "ml.p5.48xlarge",
"DrainSeconds": 600}, ...]} (plus "ClusterName" and "Region" for `handler`). For each group, each run:

1. The end: the earliest end not yet passed of the plan's reserved capacities of the group's
   instance type that are not Failed, else the plan's EndTime (DescribeTrainingPlan;
   docs/facts/hyperpod.md#training-plan-reserved-capacities). A capacity without an EndTime (the
   member is optional: a Pending one) gives no end, and with no end nothing is drained. SageMaker
   begins terminating 30 minutes before it (docs/facts/hyperpod.md#training-plan-reserved-capacity-termination).
2. The group's nodes: those labelled `sagemaker.amazonaws.com/instance-group-name=NAME`
   (docs/facts/eks.md#hyperpod-node-instance-group-label).
3. From end - 30 minutes - DrainSeconds until the end: each node is cordoned (`spec.unschedulable:
   true`, what `kubectl cordon` sets: docs/facts/eks.md#k8s-cordon-unschedulable) and marked with
   DRAINED_FOR (the end, epoch seconds); a node already unschedulable (an operator's cordon) is left
   unmarked. A cordon the API server refuses (a 403: docs/facts/eks.md#k8s-authorization-deny-403,
   a 409, any answer but 200) evicts nothing, since the pods could be scheduled back onto the still
   schedulable node: it is logged with its status and tried again at the next run. Every pod on it but DaemonSet and mirror pods and finished pods is evicted through the
   Eviction API (policy/v1), which respects PodDisruptionBudgets: a 429 (a budget forbids it now) is
   tried again at the next run, a 404 is a pod already gone (docs/facts/eks.md#k8s-api-eviction).
   The pods learn of it as any eviction tells them: SIGTERM and their termination grace period.
4. A node marked for an end that has passed (the node is still here: the plan was extended or its
   next capacity goes on) or that the current end is later than (the end moved) is uncordoned and
   unmarked. Only marked nodes: never one an operator cordoned.

Errors: a group or a node that fails (DescribeTrainingPlan's error, a DRAINED_FOR a person
set to something other than epoch seconds, an answer that is not JSON, a timeout or an unreachable
API server, a refused cordon or eviction) is logged, one line, and the run goes on with the next
node and the next group. Once every group was tried, `run` raises `DrainFailed` if any step failed,
and `handler` prints every line before it re-raises, so that the invocation is a Lambda error
(its Errors metric) with its log. Lambda does not retry it (docs/facts/eks.md#lambda-async-retries):
the next minute's run reads everything again.

Every collaborator comes in as an argument (`describe_plan`, `send`, `now`), so tests drive it with
fakes (tests/fakes/k8s_drain_fakes.py).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

# SageMaker begins terminating a reserved capacity's instances this long before its end.
TERMINATES_BEFORE_END_S = 1800
GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
# The annotation on a node this drain cordoned: the end (epoch seconds) it was cordoned for.
DRAINED_FOR = "fminfra.io/plan-drained-for"
# A mirror (static) pod carries this annotation; the API cannot evict it (kubectl drain skips it).
MIRROR = "kubernetes.io/config.mirror"

Send = Callable[[str, str, Mapping[str, Any] | None, str], tuple[int, dict[str, Any]]]
DescribePlan = Callable[[str], Mapping[str, Any]]


def _epoch(value: Any) -> int:
    return int(value.timestamp()) if isinstance(value, datetime) else int(datetime.fromisoformat(str(value)).timestamp())


def plan_end(plan: Mapping[str, Any], instance_type: str, now: int) -> int | None:
    """The end to drain for (epoch seconds), or None when every end has passed."""
    capacities = [
        c
        for c in plan.get("ReservedCapacitySummaries") or []
        if (not instance_type or c.get("InstanceType") == instance_type) and c.get("Status") != "Failed"
    ]
    if capacities:
        ends = [_epoch(c["EndTime"]) for c in capacities if c.get("EndTime")]
    else:
        ends = [_epoch(plan["EndTime"])] if plan.get("EndTime") else []
    ahead = [e for e in ends if e > now]
    return min(ahead) if ahead else None


def _path(base: str, **query: str) -> str:
    return f"{base}?{urllib.parse.urlencode(query)}" if query else base


class DrainFailed(Exception):
    """Raised by `run` once every group was tried, when a step failed; `lines` is the whole run's log."""

    def __init__(self, lines: list[str], failures: int) -> None:
        super().__init__(f"{failures} step(s) of the plan drain failed (the lines logged before this say which)")
        self.lines = lines
        self.failures = failures


class _Log:
    """One group's lines, each prefixed with the group; `failed` also counts the line as a failure."""

    def __init__(self, group: str) -> None:
        self.prefix = f"group {group}: "
        self.lines: list[str] = []
        self.failures = 0

    def append(self, line: str) -> None:
        self.lines.append(self.prefix + line)

    def failed(self, line: str) -> None:
        self.append(line)
        self.failures += 1


def _status(code: int, answer: Mapping[str, Any]) -> str:
    message = answer.get("message", "")
    return f"HTTP {code}: {message}" if message else f"HTTP {code}"


def _patch_node(send: Send, name: str, unschedulable: bool, mark: str | None) -> tuple[int, dict[str, Any]]:
    body = {"metadata": {"annotations": {DRAINED_FOR: mark}}, "spec": {"unschedulable": unschedulable}}
    return send("PATCH", f"/api/v1/nodes/{urllib.parse.quote(name)}", body, "application/merge-patch+json")


def _evict_pods(send: Send, node: str, log: _Log) -> None:
    status, pods = send("GET", _path("/api/v1/pods", fieldSelector=f"spec.nodeName={node}"), None, "application/json")
    if status != 200:
        log.failed(f"{node}: could not list its pods ({_status(status, pods)}); trying again at the next run")
        return
    for pod in pods.get("items", []):
        meta = pod["metadata"]
        owners = [o.get("kind") for o in meta.get("ownerReferences") or []]
        if "DaemonSet" in owners or MIRROR in (meta.get("annotations") or {}):
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        ns, name = meta["namespace"], meta["name"]
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
        path = f"/api/v1/namespaces/{urllib.parse.quote(ns)}/pods/{urllib.parse.quote(name)}/eviction"
        code, answer = send("POST", path, eviction, "application/json")
        if code in (200, 201):
            log.append(f"{node}: evicted {ns}/{name}")
        elif code == 404:
            log.append(f"{node}: {ns}/{name} is already gone")
        elif code == 429:
            log.append(f"{node}: {ns}/{name} not evicted yet, a PodDisruptionBudget forbids it now: trying again at the next run")
        else:
            log.failed(f"{node}: evicting {ns}/{name} failed ({_status(code, answer)}); trying again at the next run")


def drain_group(group: Mapping[str, Any], describe_plan: DescribePlan, send: Send, now: int, log: _Log) -> None:
    """One run for one instance group, into `log`; an error of one node is logged and the next node goes on."""
    name = group["InstanceGroup"]
    end = plan_end(describe_plan(group["TrainingPlanArn"]), group.get("InstanceType", ""), now)
    status, nodes = send("GET", _path("/api/v1/nodes", labelSelector=f"{GROUP_LABEL}={name}"), None, "application/json")
    if status != 200:
        log.failed(f"could not list its nodes ({_status(status, nodes)}); trying again at the next run")
        return
    draining = end is not None and now >= end - TERMINATES_BEFORE_END_S - int(group["DrainSeconds"])
    for node in nodes.get("items", []):
        node_name = node["metadata"]["name"]
        try:
            _drain_node(node, end, draining, send, now, log)
        except Exception as error:
            log.failed(f"{node_name}: skipped, {type(error).__name__}: {error}; the other nodes go on")


def _drain_node(node: Mapping[str, Any], end: int | None, draining: bool, send: Send, now: int, log: _Log) -> None:
    node_name = node["metadata"]["name"]
    mark = (node["metadata"].get("annotations") or {}).get(DRAINED_FOR)
    cordoned = bool(node.get("spec", {}).get("unschedulable"))
    if mark is not None and not str(mark).isdigit():
        log.failed(f"{node_name}: its {DRAINED_FOR} is {mark!r}, not an end in epoch seconds (not this drain's): skipped")
        return
    if mark and mark != str(end) and (int(mark) <= now or (end is not None and end > int(mark))):
        status, answer = _patch_node(send, node_name, False, None)
        if status != 200:
            log.failed(f"{node_name}: uncordon refused ({_status(status, answer)}); trying again at the next run")
            return
        log.append(f"{node_name}: still here after the plan's end {mark} passed or moved: uncordoned")
        mark, cordoned = None, False
    if not draining:
        return
    if not cordoned:
        status, answer = _patch_node(send, node_name, True, str(end))
        if status != 200:
            log.failed(f"{node_name}: cordon refused ({_status(status, answer)}): its pods are not evicted; trying again at the next run")
            return
        log.append(f"{node_name}: cordoned for the plan's end {end}")
    elif not mark:
        log.append(f"{node_name}: already cordoned by someone else: its pods are evicted, its cordon is left to them")
    _evict_pods(send, node_name, log)


def run(event: Mapping[str, Any], describe_plan: DescribePlan, send: Send, now: int) -> list[str]:
    """One run for every group; returns what it did, one line each. An error of one group is logged
    and the next group goes on; then `DrainFailed` (with every line) if any step failed."""
    groups: Sequence[Mapping[str, Any]] = event["Groups"]
    lines: list[str] = []
    failures = 0
    for group in groups:
        log = _Log(str(group.get("InstanceGroup")))
        try:
            drain_group(group, describe_plan, send, now, log)
        except Exception as error:
            log.failed(f"failed, {type(error).__name__}: {error}; the other groups go on")
        lines += log.lines
        failures += log.failures
    if failures:
        raise DrainFailed(lines, failures)
    return lines


def eks_token(cluster_name: str, region: str, session: Any) -> str:
    """A Kubernetes bearer token for EKS: `k8s-aws-v1.` + base64url(presigned STS
    GetCallerIdentity URL carrying the x-k8s-aws-id header) (docs/facts/eks.md#eks-iam-token-form)."""
    import base64

    sts = session.create_client("sts", region_name=region, endpoint_url=f"https://sts.{region}.amazonaws.com")

    def add_cluster_header(request: Any, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_header)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def api_sender(endpoint: str, ca_file: str, token: str, urlopen: Callable[..., Any]) -> Send:
    """`send` for the cluster's API server at `endpoint`: JSON over HTTPS, verified against the
    cluster's CA, with the bearer token; an HTTP error answers its status and body."""
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cafile=ca_file)

    def answer(data: bytes) -> dict[str, Any]:
        # Not every answer is a JSON object: a proxy's page, or an API server that answers text/plain
        # (docs/facts/eks.md#k8s-authorization-deny-403); its text is the message.
        try:
            parsed = json.loads(data or b"{}")
        except ValueError:
            parsed = None
        return parsed if isinstance(parsed, dict) else {"message": data[:300].decode(errors="replace")}

    def send(method: str, path: str, body: Mapping[str, Any] | None, content_type: str) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type, "Accept": "application/json"}
        request = urllib.request.Request(endpoint + path, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with urlopen(request, context=context, timeout=30) as response:
                return int(response.status), answer(response.read())
        except urllib.error.HTTPError as error:
            return error.code, answer(error.read())

    return send


def handler(
    event: Mapping[str, Any],
    _context: Any,
    *,
    client: Callable[[str, str], Any] | None = None,
    session: Any = None,
    urlopen: Callable[..., Any] | None = None,
    clock: Callable[[], float] | None = None,
) -> list[str]:
    """The Lambda entry point: the cluster's endpoint and CA from DescribeCluster, an IAM token for
    it, then `run`. The keyword arguments are for tests: `client(service, region)` (default boto3's),
    `session` (a botocore session for the token), `urlopen` (default urllib's), `clock` (time.time)."""
    import base64
    import tempfile
    import time
    import urllib.request

    if client is None:
        import boto3

        def client(service: str, region: str) -> Any:
            return boto3.client(service, region_name=region)  # type: ignore[call-overload]

    if session is None:
        import botocore.session

        session = botocore.session.get_session()
    region, cluster_name = event["Region"], event["ClusterName"]
    cluster = client("eks", region).describe_cluster(name=cluster_name)["cluster"]
    sagemaker = client("sagemaker", region)
    token = eks_token(cluster_name, region, session)
    with tempfile.NamedTemporaryFile("wb", suffix=".pem") as ca:
        ca.write(base64.b64decode(cluster["certificateAuthority"]["data"]))
        ca.flush()
        send = api_sender(cluster["endpoint"], ca.name, token, urlopen or urllib.request.urlopen)
        now = int((clock or time.time)())
        try:
            lines = run(event, lambda arn: sagemaker.describe_training_plan(TrainingPlanName=arn), send, now)
        except DrainFailed as failed:
            for line in failed.lines:
                print(line)
            raise
    for line in lines:
        print(line)
    return lines
