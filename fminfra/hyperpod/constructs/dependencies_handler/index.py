"""CloudFormation custom resource `Custom::HyperPodDependencies`: installs the HyperPod dependency
Helm chart into an EKS cluster at deploy time, the way AWS's guide does it by hand
(docs/facts/hyperpod.md#hyperpod-eks-helm-chart-required):

1. download the repository archive at a pinned commit from GitHub (codeload) and unpack only the
   chart's folder (no links, no paths outside it);
2. `helm dependency update` the chart (fetches the charts it pins: NVIDIA and EFA device plugins,
   cert-manager) through the NAT;
3. `helm upgrade --install RELEASE CHART --namespace NAMESPACE --values values.json` with a
   kubeconfig whose token is a presigned STS GetCallerIdentity URL (what `aws eks get-token`
   prints), for the cluster endpoint `eks:DescribeCluster` returns;
4. on Delete, `helm uninstall`; a cluster that is already gone (or unreachable) is not an error,
   so a failed create can roll back.

Runs in the VPC with the CDK kubectl layer (helm at /opt/helm/helm). Every step gets its
collaborators as arguments so tests drive it with recorded inputs (tests/test_hyperpod_dependencies.py).
Answers CloudFormation itself (PUT to the presigned ResponseURL), so it needs no provider framework.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import traceback
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

HELM = "/opt/helm/helm"
WORK = Path("/tmp/hyperpod-dependencies")  # noqa: S108 - Lambda's only writable place
ARCHIVE_URL = "https://codeload.github.com/{repository}/tar.gz/{commit}"
MAX_ARCHIVE_BYTES = 200 * 1024 * 1024
HELM_TIMEOUT = "10m"
REPOSITORY_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")
COMMIT_RULE = re.compile(r"^[0-9a-f]{40}$")
NAME_RULE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
CHART_PATH_RULE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
REQUIRED = ("ClusterName", "Repository", "Commit", "ChartPath", "Release", "Namespace", "Values")
# What helm prints when a release or the cluster is gone: Delete then has nothing left to do.
GONE = ("release: not found", "not found", "no such host", "connection refused", "i/o timeout", "Unauthorized")

Run = Callable[[Sequence[str], Mapping[str, str]], str]
Fetch = Callable[[str], bytes]


class HandlerError(Exception):
    """A failure reported to CloudFormation as the resource's Reason."""


def parse_properties(props: Mapping[str, Any]) -> dict[str, Any]:
    """The resource properties, checked: CloudFormation passes every value as a string except Values."""
    missing = [k for k in REQUIRED if k not in props]
    if missing:
        raise HandlerError(f"ResourceProperties lack {', '.join(missing)}")
    checks = {
        "Repository": REPOSITORY_RULE,
        "Commit": COMMIT_RULE,
        "ChartPath": CHART_PATH_RULE,
        "Release": NAME_RULE,
        "Namespace": NAME_RULE,
    }
    for key, rule in checks.items():
        if not isinstance(props[key], str) or not rule.match(props[key]) or ".." in props[key].split("/"):
            raise HandlerError(f"{key} {props[key]!r} does not match {rule.pattern}")
    values = props["Values"]
    if isinstance(values, str):
        values = json.loads(values)
    if not isinstance(values, dict):
        raise HandlerError(f"Values must be a JSON object, got {type(values).__name__}")
    return {**{k: props[k] for k in REQUIRED if k != "Values"}, "Values": values}


def physical_id(props: Mapping[str, Any]) -> str:
    return f"{props['ClusterName']}/{props['Namespace']}/{props['Release']}"


def extract_chart(archive: bytes, repository: str, commit: str, chart_path: str, dest: Path) -> Path:
    """Unpack `<repo name>-<commit>/<chart_path>/**` of a GitHub tarball into dest; returns the
    chart folder. Links, devices and members outside the chart are refused or skipped."""
    top = f"{repository.split('/')[1]}-{commit}"
    prefix = PurePosixPath(top, chart_path)
    chart_dir = dest / chart_path
    found = False
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise HandlerError(f"archive member {member.name!r} escapes the archive")
            if name != prefix and prefix not in name.parents:
                continue
            if not (member.isfile() or member.isdir()):
                raise HandlerError(f"archive member {member.name!r} is a link or device; the chart must hold only files")
            target = dest / name.relative_to(PurePosixPath(top))
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
            found = found or target == chart_dir / "Chart.yaml"
    if not found:
        raise HandlerError(f"{chart_path}/Chart.yaml is not in {repository} at {commit}")
    return chart_dir


def eks_token(cluster_name: str, region: str, session: Any) -> str:
    """A Kubernetes bearer token for EKS: `k8s-aws-v1.` + base64url(presigned STS
    GetCallerIdentity URL carrying the x-k8s-aws-id header) (docs/facts/eks.md#eks-iam-token-form)."""
    sts = session.create_client("sts", region_name=region, endpoint_url=f"https://sts.{region}.amazonaws.com")

    def add_cluster_header(request: Any, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_header)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def kubeconfig(cluster: Mapping[str, Any], token: str) -> dict[str, Any]:
    """A kubeconfig (as JSON, which is YAML) for one cluster from its DescribeCluster `cluster`."""
    name = cluster["name"]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": cluster["endpoint"], "certificate-authority-data": cluster["certificateAuthority"]["data"]},
            }
        ],
        "users": [{"name": "installer", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "installer"}}],
        "current-context": name,
    }


def helm_env(work: Path) -> dict[str, str]:
    """Helm's caches and config under the writable work folder; nothing from the Lambda's HOME."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work),
        "HELM_CACHE_HOME": str(work / "cache"),
        "HELM_CONFIG_HOME": str(work / "config"),
        "HELM_DATA_HOME": str(work / "data"),
        "KUBECONFIG": str(work / "kubeconfig.json"),
    }


def install(
    props: Mapping[str, Any],
    *,
    work: Path,
    fetch: Fetch,
    run: Run,
    describe: Callable[[str], Mapping[str, Any]],
    token: Callable[[str], str],
) -> None:
    """Create and Update: download, unpack, resolve the chart's dependencies, upgrade --install."""
    # A warm Lambda keeps /tmp: start from an empty folder so no file of an earlier commit remains.
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    url = ARCHIVE_URL.format(repository=props["Repository"], commit=props["Commit"])
    chart = extract_chart(fetch(url), props["Repository"], props["Commit"], props["ChartPath"], work / "src")
    (work / "values.json").write_text(json.dumps(props["Values"], sort_keys=True))
    env = helm_env(work)
    run([HELM, "dependency", "update", str(chart)], env)
    cluster = describe(props["ClusterName"])
    (work / "kubeconfig.json").write_text(json.dumps(kubeconfig(cluster, token(props["ClusterName"]))))
    run(
        [
            HELM,
            "upgrade",
            "--install",
            props["Release"],
            str(chart),
            "--namespace",
            props["Namespace"],
            "--values",
            str(work / "values.json"),
            "--timeout",
            HELM_TIMEOUT,
        ],
        env,
    )


def uninstall(
    props: Mapping[str, Any], *, work: Path, run: Run, describe: Callable[[str], Mapping[str, Any]], token: Callable[[str], str]
) -> str:
    """Delete: `helm uninstall`; returns what happened. A cluster or release already gone is success."""
    try:
        cluster = describe(props["ClusterName"])
    except Exception as exc:  # a deleted cluster is the usual reason: nothing is left to remove
        return f"cluster {props['ClusterName']} not described ({exc}); nothing to uninstall"
    work.mkdir(parents=True, exist_ok=True)
    (work / "kubeconfig.json").write_text(json.dumps(kubeconfig(cluster, token(props["ClusterName"]))))
    try:
        run([HELM, "uninstall", props["Release"], "--namespace", props["Namespace"], "--timeout", HELM_TIMEOUT], helm_env(work))
    except HandlerError as exc:
        if any(marker in str(exc) for marker in GONE):
            return f"release {props['Release']} already gone ({exc})"
        raise
    return f"release {props['Release']} uninstalled"


def handle(event: Mapping[str, Any], **deps: Any) -> tuple[str, str]:
    """One CloudFormation request -> (physical resource id, what was done)."""
    request = event["RequestType"]
    if request == "Delete":
        try:
            props = parse_properties(event["ResourceProperties"])
        except (HandlerError, ValueError) as exc:
            return event.get("PhysicalResourceId", "none"), f"properties unusable ({exc}); nothing was installed"
        return event["PhysicalResourceId"], uninstall(props, **{k: deps[k] for k in ("work", "run", "describe", "token")})
    props = parse_properties(event["ResourceProperties"])
    install(props, **deps)
    return physical_id(props), f"release {props['Release']} of {props['Repository']}@{props['Commit']} installed in {props['Namespace']}"


def response_body(event: Mapping[str, Any], status: str, physical: str, reason: str) -> bytes:
    """The JSON CloudFormation expects at ResponseURL (docs/facts/hyperpod.md#cfn-custom-resource-response)."""
    body = {
        "Status": status,
        "Reason": reason[:3000],
        "PhysicalResourceId": physical,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "NoEcho": False,
        "Data": {},
    }
    return json.dumps(body).encode()


def respond(event: Mapping[str, Any], status: str, physical: str, reason: str, put: Callable[[str, bytes], None]) -> None:
    put(event["ResponseURL"], response_body(event, status, physical, reason))


# --- the real collaborators (used only in Lambda) ----------------------------------------------


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - a fixed https URL
        data = response.read(MAX_ARCHIVE_BYTES + 1)
    if len(data) > MAX_ARCHIVE_BYTES:
        raise HandlerError(f"{url}: archive larger than {MAX_ARCHIVE_BYTES} bytes")
    return data


def _run(argv: Sequence[str], env: Mapping[str, str]) -> str:
    result = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, timeout=840, check=False)
    output = (result.stdout + result.stderr).strip()
    print(f"$ {' '.join(argv[:3])} ... -> {result.returncode}\n{output[-4000:]}")
    if result.returncode != 0:
        raise HandlerError(f"{' '.join(argv[:3])} failed ({result.returncode}): {output[-1500:]}")
    return output


def _put(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))})  # noqa: S310
    with urllib.request.urlopen(request, timeout=60):  # noqa: S310 - the presigned ResponseURL
        pass


def on_event(event: Mapping[str, Any], context: Any = None) -> None:
    """Lambda entry point."""
    import boto3  # Lambda's runtime ships boto3; imported here so tests need no AWS

    region = os.environ["AWS_REGION"]
    session = boto3.session.Session()._session  # botocore session for the presigner
    eks = boto3.client("eks", region_name=region)
    deps = {
        "work": WORK,
        "fetch": _fetch,
        "run": _run,
        "describe": lambda name: eks.describe_cluster(name=name)["cluster"],
        "token": lambda name: eks_token(name, region, session),
    }
    physical = event.get("PhysicalResourceId") or event.get("LogicalResourceId", "hyperpod-dependencies")
    try:
        physical, done = handle(event, **deps)
        print(done)
        respond(event, "SUCCESS", physical, done, _put)
    except Exception as exc:  # every failure must reach CloudFormation, or the stack waits an hour
        traceback.print_exc()
        respond(event, "FAILED", physical, f"{type(exc).__name__}: {exc}", _put)
