"""A fake Kubernetes API server for the HyperPod EKS plan drain
(fminfra/hyperpod/constructs/plan_drain_handler/index.py), answering its REST calls the way the API
server does (`FakeKubernetes.send`):

- Nodes (docs/facts/eks.md#k8s-cordon-unschedulable): `GET /api/v1/nodes?labelSelector=K=V` lists
  the nodes with that label; `PATCH /api/v1/nodes/NAME` takes a JSON merge patch
  (`application/merge-patch+json`, RFC 7386: objects merge, null removes a key) and answers 415 to
  any other content type; `spec.unschedulable: true` is what `kubectl cordon` sets, and the
  scheduler places no new pod on such a node. HyperPod labels each node with its instance group
  (`sagemaker.amazonaws.com/instance-group-name`, docs/facts/eks.md#hyperpod-node-instance-group-label).
- Pods: `GET /api/v1/pods?fieldSelector=spec.nodeName=N` lists the pods on node N.
- API-initiated eviction (docs/facts/eks.md#k8s-api-eviction): `POST
  /api/v1/namespaces/NS/pods/NAME/eviction` with a policy/v1 Eviction naming the pod: 200 and the
  pod is deleted (it terminates gracefully) when no PodDisruptionBudget covers it or the one that
  does allows a disruption; 429 Too Many Requests when that budget allows none now (try again
  later); 500 when more than one budget selects the pod; 404 for a pod that does not exist. A
  budget here is `minAvailable` over the pods of its namespace whose labels match its selector:
  it allows a disruption while more than `minAvailable` of them are running.

- Authorization (docs/facts/eks.md#k8s-authorization-deny-403): a request whose (verb, resource)
  is in `forbidden` (what the caller's RBAC does not allow, as `request_attributes` derives them
  from the request the way the API server does) is answered 403 Forbidden with a Status whose
  message names the user, verb and resource, before anything is read or changed.

`serve(kube)` puts a FakeKubernetes behind a local HTTP server (http.server), so that the handler's
real `urllib` path (its request, headers, JSON bodies, and HTTPError for a 4xx answer) reaches it;
`CLUSTER_CA_PEM` is a self-signed test certificate (its key was thrown away) that stands for the
cluster's CA, which DescribeCluster returns base64-encoded in `certificateAuthority.data`.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def request_attributes(method: str, path: str) -> tuple[str, str]:
    """(verb, resource) of a core-group request as the API server derives them (requestinfo.go:
    docs/facts/eks.md#k8s-rbac-request-attributes): GET without a name `list`, with one `get`;
    PATCH `patch`; POST `create`; a subresource is `resource/subresource`."""
    parts = urllib.parse.urlsplit(path).path.strip("/").split("/")[2:]  # after api/v1
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    named = len(parts) > 1
    verb = {"GET": "get" if named else "list", "PATCH": "patch", "POST": "create", "DELETE": "delete"}[method]
    return verb, resource


@dataclass
class FakeKubernetes:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    budgets: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    # (verb, resource) the caller may not: answered 403.
    forbidden: set[tuple[str, str]] = field(default_factory=set)
    user: str = "arn:aws:sts::555555555555:assumed-role/fminfra-plan-drain/session"

    def add_node(self, name: str, group: str, *, unschedulable: bool = False, annotations: Mapping[str, str] | None = None) -> None:
        self.nodes[name] = {
            "metadata": {
                "name": name,
                "labels": {"sagemaker.amazonaws.com/instance-group-name": group},
                "annotations": dict(annotations or {}),
            },
            "spec": {"unschedulable": True} if unschedulable else {},
        }

    def add_pod(self, namespace: str, name: str, node: str, *, owner: str = "ReplicaSet", labels: Mapping[str, str] | None = None) -> None:
        self.pods.append(
            {
                "metadata": {"namespace": namespace, "name": name, "labels": dict(labels or {}), "ownerReferences": [{"kind": owner}]},
                "spec": {"nodeName": node},
                "status": {"phase": "Running"},
            }
        )

    def add_budget(self, namespace: str, selector: Mapping[str, str], min_available: int) -> None:
        self.budgets.append({"namespace": namespace, "selector": dict(selector), "minAvailable": min_available})

    def pod_names(self, node: str) -> list[str]:
        return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.pods if p["spec"]["nodeName"] == node]

    def _covers(self, budget: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        labels = pod["metadata"]["labels"]
        return budget["namespace"] == pod["metadata"]["namespace"] and all(labels.get(k) == v for k, v in budget["selector"].items())

    def send(self, method: str, path: str, body: Mapping[str, Any] | None, content_type: str) -> tuple[int, dict[str, Any]]:
        self.calls.append((method, path))
        url = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        verb, resource = request_attributes(method, path)
        if (verb, resource) in self.forbidden:
            return 403, {
                "kind": "Status",
                "status": "Failure",
                "reason": "Forbidden",
                "code": 403,
                "message": f'{resource} is forbidden: User "{self.user}" cannot {verb} resource "{resource}" in API group "" at the cluster scope',
            }
        if method == "GET" and url.path == "/api/v1/nodes":
            key, _, value = query.get("labelSelector", "").partition("=")
            items = [n for n in self.nodes.values() if not key or n["metadata"]["labels"].get(key) == value]
            return 200, {"kind": "NodeList", "items": copy.deepcopy(items)}
        if method == "PATCH" and parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            if content_type != "application/merge-patch+json":
                return 415, {
                    "message": f"the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, got {content_type}"
                }
            if parts[3] not in self.nodes:
                return 404, {"message": f'nodes "{parts[3]}" not found'}
            self.nodes[parts[3]] = merge_patch(self.nodes[parts[3]], body)
            return 200, copy.deepcopy(self.nodes[parts[3]])
        if method == "GET" and url.path == "/api/v1/pods":
            _, _, node = query.get("fieldSelector", "").partition("spec.nodeName=")
            return 200, {"kind": "PodList", "items": copy.deepcopy([p for p in self.pods if p["spec"]["nodeName"] == node])}
        if (
            method == "POST"
            and len(parts) == 7
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "pods"
            and parts[6] == "eviction"
        ):
            ns, name = parts[3], parts[5]
            if (
                not body
                or body.get("apiVersion") != "policy/v1"
                or body.get("kind") != "Eviction"
                or body.get("metadata", {}).get("name") != name
            ):
                return 400, {"message": "not a policy/v1 Eviction of this pod"}
            pod = next((p for p in self.pods if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name), None)
            if pod is None:
                return 404, {"message": f'pods "{name}" not found'}
            budgets = [b for b in self.budgets if self._covers(b, pod)]
            if len(budgets) > 1:
                return 500, {"message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}
            if budgets:
                running = [p for p in self.pods if self._covers(budgets[0], p) and p["status"]["phase"] == "Running"]
                if len(running) <= budgets[0]["minAvailable"]:
                    return 429, {"message": "Cannot evict pod as it would violate the pod's disruption budget."}
            self.pods.remove(pod)
            return 200, {"kind": "Status", "status": "Success"}
        return 404, {"message": f"the server could not find the requested resource ({method} {path})"}


CLUSTER_CA_PEM = """-----BEGIN CERTIFICATE-----
MIIBnDCCAUGgAwIBAgIUalWlF0Mjpg9Zri25UnFIn9OLYukwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXZm1pbmZyYS10ZXN0LWNsdXN0ZXItY2EwIBcNMjYxMjAyMDYz
MDI4WhgPMjEyNjExMDgwNjMwMjhaMCIxIDAeBgNVBAMMF2ZtaW5mcmEtdGVzdC1j
bHVzdGVyLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEhKLD2yhF04+a59+r
vKqHrqF2vFmuLSpZ1m7iC7Ik65QQhcpqqSSKmlZTrHGRLIa2S5CkQcIdlrNaKLt8
AWsWeqNTMFEwHQYDVR0OBBYEFK8A2Ww2uSsDcXlBR8fxAPmUOLrRMB8GA1UdIwQY
MBaAFK8A2Ww2uSsDcXlBR8fxAPmUOLrRMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDSQAwRgIhAJT10LlBI44VpVKal8fDsUKB/ZF+fukgTkGc+W/A6SpOAiEA
n0igJ0rYsomLNl3kb+IPt2+4B6R9oNfkN3lnSw/2xyM=
-----END CERTIFICATE-----
"""


@dataclass
class Served:
    """What the server saw: each request's method, path and headers."""

    endpoint: str
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


@contextmanager
def serve(kube: FakeKubernetes) -> Iterator[Served]:
    """`kube` behind http://127.0.0.1:PORT, answering each request with `kube.send`."""
    served = Served(endpoint="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            served.requests.append((self.command, self.path, dict(self.headers.items())))
            status, answer = kube.send(self.command, self.path, body, self.headers.get("Content-Type", ""))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
