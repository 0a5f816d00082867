"""A fake `kubectl` for `fminfra accept` on EKS (tests/test_accept_eks.py): a script on PATH whose
cluster is a JSON state file (FAKE_KUBECTL_STATE).

What it models, and from where:
- `--kubeconfig FILE` must name a kubeconfig whose user runs `aws eks get-token --cluster-name NAME`
  (what `aws eks update-kubeconfig` writes; EKS User Guide, "Connect kubectl to an EKS cluster by
  creating a kubeconfig file": docs/facts/jobs.md#eks-kubectl-get-token); anything else fails as an
  unauthenticated kubectl does (exit 1, "error: You must be logged in to the server").
- `apply -f -` reads a YAML stream, refuses an object without apiVersion, kind, metadata.name or
  metadata.namespace, and prints `<resource>/<name> created` per object (kubectl's output form:
  `configmap/x created`, `mpijob.kubeflow.org/x created`, `job.batch/x created`).
- `get RESOURCE NAME -n NS -o json` returns the stored object with a `status.conditions` list that
  advances one step per call along the scenario's condition types (`status: "True"`, the newest
  last), as the operators write them: MPIJob Created, Running, Succeeded|Failed (kubeflow/mpi-operator
  v0.5.0 `pkg/apis/kubeflow/v2beta1/types.go`); HyperPodPyTorchJob Created, Running, Completed|Failed
  (aws/sagemaker-hyperpod-cli's status model and CLI); batch Job Complete|Failed (Kubernetes Job
  conditions). A missing object is `Error from server (NotFound)`, exit 1.
- `get namespace NAME -o name` and `get localqueues.kueue.x-k8s.io NAME -n NS -o name` answer from the
  state's `existing` list (`namespace/x`, `localqueue.kueue.x-k8s.io/x`), else NotFound, exit 1
  (the namespace and LocalQueue task governance creates; docs/facts/jobs.md#kueue-local-queue).
- `get pods -n NS -l K=V[,K=V] -o json` returns a List whose items carry the labels the operators
  put on their pods (docs/facts/jobs.md#acceptance-pod-labels): MPIJob launcher
  `training.kubeflow.org/job-name` + `job-role=launcher`; HyperPodPyTorchJob `HPJob=<name>`;
  batch Job `batch.kubernetes.io/job-name`.
- `logs POD -n NS` prints the scenario's log for that pod's job kind (recorded nccl-tests output,
  the DDP result line, fio JSON), the way each job's script writes it (accept_manifests).
- `delete RESOURCE NAME ...` removes the object.
It does not model: admission (Kueue), scheduling, image pulls, or pods failing on their own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

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
PROGRESS = {
    "mpijob.kubeflow.org": ("Created", "Running", "Succeeded"),
    "hyperpodpytorchjob.sagemaker.amazonaws.com": ("Created", "Running", "Completed"),
    "job.batch": (None, "Complete"),
}


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def main(argv: list[str]) -> None:
    path = Path(os.environ["FAKE_KUBECTL_STATE"])
    state = json.loads(path.read_text())
    if argv[:1] != ["--kubeconfig"]:
        fail("error: You must be logged in to the server (the server has asked for the client to provide credentials)")
    config = yaml.safe_load(Path(argv[1]).read_text())
    user = config["users"][0]["user"].get("exec") or {}
    if (
        user.get("command") != "aws"
        or "get-token" not in user.get("args", [])
        or config["clusters"][0]["cluster"]["server"] != state["endpoint"]
    ):
        fail("error: You must be logged in to the server (the server has asked for the client to provide credentials)")
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
    elif args[:2] == ["get", "namespace"] or args[:2] == ["get", "localqueues.kueue.x-k8s.io"]:
        kind = "namespace" if args[1] == "namespace" else "localqueue.kueue.x-k8s.io"
        if f"{kind}/{args[2]}" not in state.get("existing", []):
            fail(f'Error from server (NotFound): {args[1]} "{args[2]}" not found')
        print(f"{kind}/{args[2]}")
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
        kind = state["scenario"].get(entry["object"]["metadata"]["labels"]["fminfra/accept-job"], "ok")
        steps = list(PROGRESS[PLURAL[args[1]]])
        if kind == "fail":
            steps[-1] = "Failed"
        if kind == "hang":
            steps = steps[:-1]
        reached = [t for t in steps[: entry["polls"]] if t]
        obj = dict(entry["object"], status={"conditions": [{"type": t, "status": "True"} for t in reached]})
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


def pods(state: dict) -> list[dict]:
    """The pods each stored job would have, labelled as its operator labels them."""
    out = []
    for key, entry in state.get("objects", {}).items():
        resource, name = key.split("/", 1)
        obj = entry["object"]
        if resource == "mpijob.kubeflow.org":
            labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "launcher"}
            out.append({"metadata": {"name": f"{name}-launcher-x7k2p", "labels": labels, "annotations": {"log": "nccl"}}})
        elif resource == "hyperpodpytorchjob.sagemaker.amazonaws.com":
            for i in range(obj["spec"]["replicaSpecs"][0]["replicas"]):
                log = "ddp" if i == 0 else "ddp-other"
                out.append({"metadata": {"name": f"{name}-pod-{i}", "labels": {"HPJob": name}, "annotations": {"log": log}}})
        elif resource == "job.batch":
            for i in range(obj["spec"]["completions"]):
                labels = {"batch.kubernetes.io/job-name": name}
                out.append({"metadata": {"name": f"{name}-{i}-abcde", "labels": labels, "annotations": {"log": f"fsx-{i}"}}})
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
