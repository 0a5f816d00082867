"""A fake `kubectl` for `fminfra accept` on EKS (tests/ops/accept/test_eks.py): a script on PATH whose
cluster is a JSON state file (FAKE_KUBECTL_STATE).

What it models, and from where:
- `--kubeconfig FILE` must name a kubeconfig whose user is an exec credential of apiVersion
  `client.authentication.k8s.io/v1beta1` running `aws ... eks get-token --cluster-name NAME` with NAME
  the cluster's name, not its ARN (what `aws eks update-kubeconfig` writes; EKS User Guide, "Connect
  kubectl to an EKS cluster by creating a kubeconfig file": docs/facts/jobs.md#eks-kubectl-get-token);
  `client.authentication.k8s.io/v1alpha1` fails as kubectl 1.24 and later fail on it (`exec plugin:
  invalid apiVersion`, kubernetes/kubernetes#108616), a token for another cluster name as the API
  server answers it (Unauthorized), anything else as an unauthenticated kubectl does (exit 1,
  "error: You must be logged in to the server").
- `version --client -o json` (no kubeconfig, no server) prints kubectl's Version struct with
  clientVersion major, minor, gitVersion (kubernetes/kubernetes staging/src/k8s.io/kubectl/pkg/cmd/version/version.go:
  docs/facts/eks.md#kubectl-version-json), gitVersion from the state's `kubectl_version` (default v1.34.5).
- `apply -f -` reads a YAML stream, refuses an object without apiVersion, kind, metadata.name or
  metadata.namespace, and prints `<resource>/<name> created` per object (kubectl's output form:
  `configmap/x created`, `mpijob.kubeflow.org/x created`, `job.batch/x created`).
- Kueue (docs/facts/jobs.md#acceptance-job-conditions): a job labelled `kueue.x-k8s.io/queue-name`
  with a LocalQueue of the state's `existing` list is suspended at creation and resumed on admission
  (its name is recorded in the state's `admitted`); one naming a missing LocalQueue stays suspended;
  one without the label is not Kueue's and runs unqueued (not recorded).
- `get RESOURCE NAME -n NS -o json` returns the stored object with `status.conditions` advanced one
  update per call, True and False alike, the way each controller writes them:
  MPIJob (kubeflow/mpi-operator v0.5.0 `pkg/controller/mpi_job_controller_status.go`: an updated
  condition is removed and appended at the end; Succeeded or Failed sets Running to False):
  Created, Suspended True, Running False, Suspended False, Running True, then Succeeded|Failed;
  batch Job (Kubernetes 1.34, conditions updated in place): Suspended True, Suspended False, then
  SuccessCriteriaMet + Complete, or FailureTarget + Failed; HyperPodPyTorchJob (aws/sagemaker-hyperpod-cli's
  status model and CLI): Created, Running, Completed|Failed. A job that "hangs" stops after it is
  resumed (admitted, never running). A missing object is `Error from server (NotFound)`, exit 1.
- `get namespace NAME -o name` and `get localqueues.kueue.x-k8s.io NAME -n NS -o name` answer from the
  state's `existing` list (`namespace/x`, `localqueue.kueue.x-k8s.io/x`), else NotFound, exit 1
  (the namespace and LocalQueue task governance creates; docs/facts/jobs.md#kueue-local-queue). With
  `no_kueue` in the state (no Kueue CRDs), the LocalQueue lookup fails as kubectl fails on a resource
  the API server does not serve: `error: the server doesn't have a resource type "localqueues"`, exit 1
  (docs/facts/jobs.md#kubectl-no-resource-type).
- `get pods -n NS -l K=V[,K=V] -o json` returns a List whose items carry the labels the operators
  put on their pods (docs/facts/jobs.md#acceptance-pod-labels): MPIJob launcher
  `training.kubeflow.org/job-name` + `job-role=launcher`; HyperPodPyTorchJob `HPJob=<name>`;
  batch Job `batch.kubernetes.io/job-name`.
- The pods run on nodes (`spec.nodeName`, the scheduler's binding): the MPIJob's workers
  (`training.kubeflow.org/job-role=worker`, mpi-operator v0.5.0) on the state's `node_names` in order,
  the HyperPodPyTorchJob's pods likewise (default `hyperpod-i-0`, `hyperpod-i-1`, ...). The fake keeps
  every pod while its job exists (mpi-operator deletes the workers when the launcher ends:
  cleanPodPolicy Running, so `accept` reads placement while the job runs).
- `get nodes NAME... -o json` returns the Node for one name and a List of the named nodes for several, as
  kubectl prints them (docs/facts/jobs.md#kubectl-get-single-object), with the labels of the state's
  `nodes` (name -> labels; the network-node-layer labels HyperPod applies:
  docs/facts/hyperpod.md#hyperpod-topology-labels); a name not there is `Error from server (NotFound):
  nodes "NAME" not found`, exit 1; with `forbid_nodes` in the state, the API server's RBAC denial of a
  cluster-scoped request (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go,
  `forbiddenMessage`: `User %q cannot %s resource %q in API group %q at the cluster scope`), exit 1.
- `get resourceflavors.kueue.x-k8s.io -o json` returns a List of the state's `flavors` (Kueue's ResourceFlavor,
  cluster-scoped, `spec.nodeLabels` and, where topology-aware, `spec.topologyName`: kubernetes-sigs/kueue
  v0.19.2 `apis/kueue/v1beta2/resourceflavor_types.go`, docs/facts/eks.md#kueue-topology-aware-scheduling);
  with `forbid_flavors`, the API server's RBAC denial of a cluster-scoped list (the `forbiddenMessage` above:
  `User %q cannot list resource "resourceflavors" in API group "kueue.x-k8s.io" at the cluster scope`), exit 1.
- `logs POD -n NS` prints the scenario's log for that pod's job kind (recorded nccl-tests output,
  the DDP result line, fio JSON), the way each job's script writes it (accept_manifests).
- `delete RESOURCE NAME ...` removes the object.
- `get service NAME -n NS -o jsonpath={.status.loadBalancer.ingress[0].hostname}` prints the state's
  `services` entry `NS/NAME` (the Service's load balancer host, as the AWS Load Balancer Controller
  writes it into the Service's status; "" while it is pending), without a newline as kubectl's
  jsonpath output; a Service not there is `Error from server (NotFound)`, exit 1.
- `unreachable` in the state: every call that needs the server fails as kubectl fails when the
  endpoint does not answer (`Unable to connect to the server: <error>`, exit 1; kubernetes/kubectl
  `pkg/cmd/util/helpers.go` `StandardErrorMessage`: docs/facts/eks.md#kubectl-unable-to-connect).
It does not model: admission (Kueue), scheduling, image pulls, or pods failing on their own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    import pytest

RESOURCES = {
    ("v1", "ConfigMap"): "configmap",
    ("kubeflow.org/v2beta1", "MPIJob"): "mpijob.kubeflow.org",
    ("sagemaker.amazonaws.com/v1", "HyperPodPyTorchJob"): "hyperpodpytorchjob.sagemaker.amazonaws.com",
    ("batch/v1", "Job"): "job.batch",
}
PLURAL = {
    "mpijobs.kubeflow.org": "mpijob.kubeflow.org",
    "hyperpodpytorchjobs.sagemaker.amazonaws.com": "hyperpodpytorchjob.sagemaker.amazonaws.com",
    "jobs.batch": "job.batch",
}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
EXEC_API = "client.authentication.k8s.io/v1beta1"
UNAUTHENTICATED = "error: You must be logged in to the server (the server has asked for the client to provide credentials)"
# Condition updates (type, status) per resource and scenario; "queued" marks where Kueue's suspension
# goes (dropped for a job Kueue does not manage). A hanging job stops after "resumed".
_MPI_QUEUED = [("Created", "True"), ("Suspended", "True"), ("Running", "False"), ("Suspended", "False")]
_JOB_QUEUED = [("Suspended", "True"), ("Suspended", "False")]
UPDATES = {
    "mpijob.kubeflow.org": {
        "ok": [*_MPI_QUEUED, ("Running", "True"), ("Succeeded", "True")],
        "fail": [*_MPI_QUEUED, ("Running", "True"), ("Failed", "True")],
        "hang": _MPI_QUEUED,
    },
    "hyperpodpytorchjob.sagemaker.amazonaws.com": {
        "ok": [("Created", "True"), ("Running", "True"), ("Completed", "True")],
        "fail": [("Created", "True"), ("Running", "True"), ("Failed", "True")],
        "hang": [("Created", "True"), ("Running", "True")],
    },
    "job.batch": {
        "ok": [*_JOB_QUEUED, ("SuccessCriteriaMet", "True"), ("Complete", "True")],
        "fail": [*_JOB_QUEUED, ("FailureTarget", "True"), ("Failed", "True")],
        "hang": _JOB_QUEUED,
    },
}


def put_on_path(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `kubectl` in `folder`/bin that runs this fake, first on PATH (monkeypatch: pytest's), with the repository
    importable from it."""
    import stat

    bin_dir = folder / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} "$@"\n')
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def main(argv: list[str]) -> None:
    path = Path(os.environ["FAKE_KUBECTL_STATE"])
    state = json.loads(path.read_text())
    if argv == ["version", "--client", "-o", "json"]:
        # kubectl's Version struct, client side only (docs/facts/eks.md#kubectl-version-json)
        git = state.get("kubectl_version", "v1.34.5")
        major, minor = git.lstrip("v").split(".")[:2]
        print(json.dumps({"clientVersion": {"major": major, "minor": minor, "gitVersion": git}, "kustomizeVersion": "v5.7.1"}, indent=2))
        return
    if argv[:1] != ["--kubeconfig"]:
        fail("error: You must be logged in to the server (the server has asked for the client to provide credentials)")
    authenticate(yaml.safe_load(Path(argv[1]).read_text()), state)
    if state.get("unreachable"):
        host = state["endpoint"].removeprefix("https://")
        fail(f"Unable to connect to the server: dial tcp: lookup {host}: i/o timeout")
    args = argv[2:]
    state.setdefault("calls", []).append(args)
    objects = state.setdefault("objects", {})
    if args[:3] == ["apply", "-f", "-"]:
        for doc in yaml.safe_load_all(sys.stdin.read()):
            meta = doc.get("metadata") or {}
            if not all((doc.get("apiVersion"), doc.get("kind"), meta.get("name"), meta.get("namespace"))):
                fail("error: error validating data: apiVersion, kind, metadata.name and metadata.namespace are required")
            resource = RESOURCES[(doc["apiVersion"], doc["kind"])]
            objects[f"{resource}/{meta['name']}"] = {"object": doc, "polls": 0}
            print(f"{resource}/{meta['name']} created")
    elif args[:2] == ["get", "localqueues.kueue.x-k8s.io"] and state.get("no_kueue"):
        fail('error: the server doesn\'t have a resource type "localqueues"')
    elif args[:2] == ["get", "namespace"] or args[:2] == ["get", "localqueues.kueue.x-k8s.io"]:
        kind = "namespace" if args[1] == "namespace" else "localqueue.kueue.x-k8s.io"
        if f"{kind}/{args[2]}" not in state.get("existing", []):
            fail(f'Error from server (NotFound): {args[1]} "{args[2]}" not found')
        print(f"{kind}/{args[2]}")
    elif args[:2] == ["get", "nodes"]:
        names = [a for a in args[2:] if a not in ("-o", "json")]
        if state.get("forbid_nodes"):
            fail(
                f'Error from server (Forbidden): nodes "{names[0]}" is forbidden: User "fminfra-accept" cannot get resource '
                '"nodes" in API group "" at the cluster scope'
            )
        known = state.get("nodes", {})
        for name in names:
            if name not in known:
                fail(f'Error from server (NotFound): nodes "{name}" not found')
        items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": known[n]}} for n in names]
        # one name: the Node itself; several: a List (docs/facts/jobs.md#kubectl-get-single-object)
        print(json.dumps(items[0] if len(items) == 1 else {"apiVersion": "v1", "kind": "List", "items": items}))
    elif args[:2] == ["get", "resourceflavors.kueue.x-k8s.io"]:
        if state.get("forbid_flavors"):
            fail(
                'Error from server (Forbidden): resourceflavors.kueue.x-k8s.io is forbidden: User "fminfra-accept" cannot list '
                'resource "resourceflavors" in API group "kueue.x-k8s.io" at the cluster scope'
            )
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": state.get("flavors", [])}))
    elif args[:2] == ["get", "service"]:
        # the serving gate's read of a model's load balancer: `get service NAME -n NS -o jsonpath=...`
        namespace, name = args[args.index("-n") + 1], args[2]
        if args[-1] != "jsonpath={.status.loadBalancer.ingress[0].hostname}":
            fail(f"error: the fake answers only the load balancer host's jsonpath, got {args[-1]}")
        services = state.get("services", {})
        if f"{namespace}/{name}" not in services:
            fail(f'Error from server (NotFound): services "{name}" not found')
        print(services[f"{namespace}/{name}"], end="")  # jsonpath output has no newline; "" while the NLB is pending
    elif args[:2] == ["get", "pods"]:
        selector = dict(kv.split("=", 1) for kv in args[args.index("-l") + 1].split(","))
        items = [p for p in pods(state) if all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    elif args[0] == "get":
        key = f"{PLURAL[args[1]]}/{args[2]}"
        if key not in objects:
            fail(f'Error from server (NotFound): {args[1]} "{args[2]}" not found')
        entry = objects[key]
        entry["polls"] += 1
        obj = dict(entry["object"], status={"conditions": conditions(PLURAL[args[1]], entry, state)})
        print(json.dumps(obj))
    elif args[0] == "logs":
        pod = next(p for p in pods(state) if p["metadata"]["name"] == args[1])
        print(state["logs"][pod["metadata"]["annotations"]["log"]], end="")
    elif args[0] == "delete":
        resource = PLURAL.get(args[1], args[1])
        objects.pop(f"{resource}/{args[2]}", None)
        print(f'{resource} "{args[2]}" deleted')
    else:
        fail(f"fake kubectl: unmodelled command {args}")
    path.write_text(json.dumps(state))


def authenticate(config: dict, state: dict) -> None:
    """What kubectl and the EKS API server do with the kubeconfig's exec credential."""
    user = config["users"][0]["user"].get("exec") or {}
    args = user.get("args", [])
    if user.get("apiVersion") == "client.authentication.k8s.io/v1alpha1":
        fail('error: exec plugin: invalid apiVersion "client.authentication.k8s.io/v1alpha1"')
    if (
        user.get("apiVersion") != EXEC_API
        or user.get("command") != "aws"
        or args[args.index("eks") : args.index("eks") + 2] != ["eks", "get-token"]
        or "--cluster-name" not in args
        or config["clusters"][0]["cluster"]["server"] != state["endpoint"]
    ):
        fail(UNAUTHENTICATED)
    if args[args.index("--cluster-name") + 1] != state["cluster"]:
        fail("error: You must be logged in to the server (Unauthorized)")


def conditions(resource: str, entry: dict, state: dict) -> list[dict]:
    """The job's status.conditions after `polls` updates of its scenario."""
    obj = entry["object"]
    labels = obj["metadata"]["labels"]
    scenario = state["scenario"].get(labels["fminfra/accept-job"], "ok")
    updates = list(UPDATES[resource][scenario])
    queue = labels.get(QUEUE_LABEL)
    queued = resource != "hyperpodpytorchjob.sagemaker.amazonaws.com"  # its Kueue integration is not modelled
    if queued and queue is None:  # not Kueue's: never suspended
        updates = [u for u in updates if u[0] != "Suspended" and u != ("Running", "False")]
    elif queued and f"localqueue.kueue.x-k8s.io/{queue}" not in state.get("existing", []):
        updates = updates[: updates.index(("Suspended", "True")) + 1]  # inadmissible: stays suspended
    out: list[dict] = []
    for kind, status in updates[: entry["polls"]]:
        if queued and (kind, status) == ("Suspended", "False"):
            admitted = state.setdefault("admitted", [])
            if obj["metadata"]["name"] not in admitted:
                admitted.append(obj["metadata"]["name"])
        cond = {"type": kind, "status": status}
        if resource == "job.batch":  # the Job controller updates a condition in place
            same = [c for c in out if c["type"] == kind]
            if same:
                same[0]["status"] = status
            else:
                out.append(cond)
            continue
        out = [c for c in out if c["type"] != kind]  # mpi-operator: remove, then append
        if resource == "mpijob.kubeflow.org" and kind in ("Succeeded", "Failed"):
            out = [dict(c, status="False") if c["type"] in ("Running", "Failed") else c for c in out]
        out.append(cond)
    return out


def pods(state: dict) -> list[dict]:
    """The pods each stored job would have, labelled as its operator labels them."""
    out = []
    nodes = state.get("node_names") or [f"hyperpod-i-{i}" for i in range(16)]
    for key, entry in state.get("objects", {}).items():
        resource, name = key.split("/", 1)
        obj = entry["object"]
        if resource == "mpijob.kubeflow.org":
            labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "launcher"}
            out.append({"metadata": {"name": f"{name}-launcher-x7k2p", "labels": labels, "annotations": {"log": "nccl"}}})
            for i in range(obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]):
                labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "worker"}
                out.append({"metadata": {"name": f"{name}-worker-{i}", "labels": labels}, "spec": {"nodeName": nodes[i]}})
        elif resource == "hyperpodpytorchjob.sagemaker.amazonaws.com":
            for i in range(obj["spec"]["replicaSpecs"][0]["replicas"]):
                log = "ddp" if i == 0 else "ddp-other"
                meta = {"name": f"{name}-pod-{i}", "labels": {"HPJob": name}, "annotations": {"log": log}}
                out.append({"metadata": meta, "spec": {"nodeName": nodes[i]}})
        elif resource == "job.batch":
            for i in range(obj["spec"]["completions"]):
                labels = {"batch.kubernetes.io/job-name": name}
                out.append({"metadata": {"name": f"{name}-{i}-abcde", "labels": labels, "annotations": {"log": f"fsx-{i}"}}})
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
