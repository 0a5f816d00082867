"""The HyperPod dependency chart installer's Lambda handler, driven offline with recorded inputs
(tests/data/hyperpod_dependencies/README.md says what each models). The Lambda itself, GitHub and
a real cluster are never reached here."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.stub import Stubber

from fminfra.core.versions import version
from fminfra.hyperpod.constructs.dependencies_handler import index

DATA = Path(__file__).resolve().parents[2] / "data" / "hyperpod_dependencies"
COMMIT = "011ca927123e02b35a399935bbb3ab1905fe33c7"
TOP = f"sagemaker-hyperpod-cli-{COMMIT}"


def _event(name: str = "create_event.json", **changes: Any) -> dict[str, Any]:
    event = json.loads((DATA / name).read_text())
    event.update(changes)
    return event


def _archive(members: Mapping[str, bytes | None] | None = None, links: Sequence[str] = ()) -> bytes:
    """A tarball laid out as codeload.github.com serves one: `<repo>-<commit>/...`."""
    files = members if members is not None else {
        f"{TOP}/README.md": b"outside the chart\n",
        f"{TOP}/helm_chart/HyperPodHelmChart/Chart.yaml": b"apiVersion: v2\nname: stand-in\nversion: 0.1.0\n",
        f"{TOP}/helm_chart/HyperPodHelmChart/values.yaml": b"stand: in\n",
        f"{TOP}/helm_chart/HyperPodHelmChart/charts/sub/Chart.yaml": b"apiVersion: v2\nname: sub\nversion: 0.1.0\n",
    }  # fmt: skip
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
        for name in links:
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return out.getvalue()


class Recorder:
    """Stands in for helm: records each argument list and environment; fails on request."""

    def __init__(self, fail_on: str | None = None, message: str = "") -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.fail_on, self.message = fail_on, message

    def __call__(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        self.calls.append((list(argv), dict(env)))
        if self.fail_on and self.fail_on in argv:
            raise index.HandlerError(f"{' '.join(argv[:3])} failed (1): {self.message}")
        return ""


@cache
def _session() -> botocore.session.Session:
    return botocore.session.get_session()  # one session: botocore loads the EKS model once


def _eks_describe() -> tuple[Any, Stubber]:
    """DescribeCluster through botocore's Stubber: the recorded response must match the EKS model."""
    client = _session().create_client("eks", region_name="us-west-2", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
    stubber = Stubber(client)
    recorded = json.loads((DATA / "describe_cluster.json").read_text())
    recorded["cluster"]["createdAt"] = datetime(2026, 11, 30, 12, tzinfo=UTC)
    stubber.add_response("describe_cluster", recorded, {"name": "fminfra-staging-eks"})
    stubber.activate()
    return client, stubber


def _deps(tmp_path: Path, run: Recorder, fetched: list[str], archive: bytes | None = None) -> dict[str, Any]:
    def fetch(url: str) -> bytes:
        fetched.append(url)
        return archive if archive is not None else _archive()

    def describe(name: str) -> Any:
        client, _ = _eks_describe()
        return client.describe_cluster(name=name)["cluster"]

    return {
        "work": tmp_path / "work",
        "fetch": fetch,
        "run": run,
        "describe": describe,
        "token": lambda name: f"k8s-aws-v1.token-for-{name}",
    }


def test_recorded_event_matches_the_synthesized_properties() -> None:
    props = _event()["ResourceProperties"]
    assert props["Commit"] == version("HYPERPOD_CLI_COMMIT")
    assert index.parse_properties(props)["Values"] == {"health-monitoring-agent": {"region": "us-west-2"}}


def test_create_downloads_the_pinned_commit_and_installs_the_release(tmp_path: Path) -> None:
    run, fetched = Recorder(), []
    physical, done = index.handle(_event(), **_deps(tmp_path, run, fetched))
    assert fetched == [f"https://codeload.github.com/aws/sagemaker-hyperpod-cli/tar.gz/{COMMIT}"]
    chart = tmp_path / "work" / "src" / "helm_chart" / "HyperPodHelmChart"
    assert (chart / "charts" / "sub" / "Chart.yaml").is_file()
    assert not (tmp_path / "work" / "src" / "README.md").exists()  # only the chart is unpacked
    (dep_update, env1), (upgrade, env2) = run.calls
    assert dep_update == [index.HELM, "dependency", "update", str(chart)]
    assert upgrade == [
        index.HELM, "upgrade", "--install", "hyperpod-dependencies", str(chart),
        "--namespace", "kube-system", "--values", str(tmp_path / "work" / "values.json"), "--timeout", "10m",
    ]  # fmt: skip
    assert json.loads((tmp_path / "work" / "values.json").read_text()) == {"health-monitoring-agent": {"region": "us-west-2"}}
    kubeconfig = json.loads((tmp_path / "work" / "kubeconfig.json").read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com"
    assert kubeconfig["users"][0]["user"] == {"token": "k8s-aws-v1.token-for-fminfra-staging-eks"}
    assert env2["KUBECONFIG"] == str(tmp_path / "work" / "kubeconfig.json")
    assert all(v.startswith(str(tmp_path)) for k, v in env1.items() if k.startswith("HELM_"))
    assert physical == "fminfra-staging-eks/kube-system/hyperpod-dependencies"
    assert COMMIT in done


def test_update_reinstalls_and_keeps_the_physical_id(tmp_path: Path) -> None:
    run = Recorder()
    stale = tmp_path / "work" / "src" / "helm_chart" / "HyperPodHelmChart" / "templates" / "from-an-older-commit.yaml"
    stale.parent.mkdir(parents=True)
    stale.write_text("kind: Stale\n")  # a warm Lambda's /tmp from an earlier commit
    event = _event(RequestType="Update", PhysicalResourceId="fminfra-staging-eks/kube-system/hyperpod-dependencies")
    physical, _ = index.handle(event, **_deps(tmp_path, run, []))
    assert physical == event["PhysicalResourceId"]
    assert [argv[1] for argv, _ in run.calls] == ["dependency", "upgrade"]
    assert not stale.exists()


def test_a_helm_failure_is_reported_not_swallowed(tmp_path: Path) -> None:
    run = Recorder(fail_on="upgrade", message="Error: INSTALLATION FAILED: cannot re-use a name that is still in use")
    with pytest.raises(index.HandlerError, match="INSTALLATION FAILED"):
        index.handle(_event(), **_deps(tmp_path, run, []))


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (_archive({f"{TOP}/README.md": b"x"}), r"helm_chart/HyperPodHelmChart/Chart.yaml is not in aws/sagemaker-hyperpod-cli at"),
        (_archive({f"{TOP}/../../etc/x": b"x"}), r"escapes the archive"),
        (_archive(links=[f"{TOP}/helm_chart/HyperPodHelmChart/templates/evil.yaml"]), r"is a link or device"),
        (_archive({f"other-{COMMIT}/helm_chart/HyperPodHelmChart/Chart.yaml": b"x"}), r"is not in"),
    ],
)
def test_archive_checks(tmp_path: Path, archive: bytes, message: str) -> None:
    with pytest.raises(index.HandlerError, match=message):
        index.handle(_event(), **_deps(tmp_path, Recorder(), [], archive))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("Commit", "main", r"Commit 'main' does not match"),
        ("Commit", COMMIT.upper(), r"does not match"),
        ("Repository", "aws/../x", r"Repository"),
        ("ChartPath", "helm_chart/../..", r"ChartPath"),
        ("Namespace", "Kube_System", r"Namespace"),
        ("Values", "[1]", r"Values must be a JSON object, got list"),
    ],
)
def test_bad_properties_fail_the_request(tmp_path: Path, key: str, value: str, message: str) -> None:
    event = _event()
    event["ResourceProperties"][key] = value
    with pytest.raises(index.HandlerError, match=message):
        index.handle(event, **_deps(tmp_path, Recorder(), []))


def test_delete_uninstalls(tmp_path: Path) -> None:
    run = Recorder()
    event = _event(RequestType="Delete", PhysicalResourceId="fminfra-staging-eks/kube-system/hyperpod-dependencies")
    physical, done = index.handle(event, **_deps(tmp_path, run, []))
    ((argv, _),) = run.calls
    assert argv == [index.HELM, "uninstall", "hyperpod-dependencies", "--namespace", "kube-system", "--timeout", "10m"]
    assert (physical, done) == (event["PhysicalResourceId"], "release hyperpod-dependencies uninstalled")


def test_delete_succeeds_when_the_release_or_cluster_is_gone(tmp_path: Path) -> None:
    event = _event(RequestType="Delete", PhysicalResourceId="p")
    run = Recorder(fail_on="uninstall", message="Error: uninstall: Release not loaded: hyperpod-dependencies: release: not found")
    assert "already gone" in index.handle(event, **_deps(tmp_path, run, []))[1]
    deps = _deps(tmp_path, Recorder(), [])

    def gone(name: str) -> Mapping[str, Any]:
        raise RuntimeError(f"ResourceNotFoundException: No cluster found for name: {name}.")

    deps["describe"] = gone
    assert "nothing to uninstall" in index.handle(event, **deps)[1]
    # Any other helm failure still fails the delete.
    run = Recorder(fail_on="uninstall", message="Error: context deadline exceeded")
    with pytest.raises(index.HandlerError, match="deadline"):
        index.handle(event, **_deps(tmp_path, run, []))


def test_response_body_has_the_fields_cloudformation_requires() -> None:
    event = _event()
    body = json.loads(index.response_body(event, "FAILED", "p", "x" * 5000))
    assert set(body) == {"Status", "Reason", "PhysicalResourceId", "StackId", "RequestId", "LogicalResourceId", "NoEcho", "Data"}
    assert (body["StackId"], body["RequestId"], body["LogicalResourceId"]) == (
        event["StackId"],
        event["RequestId"],
        event["LogicalResourceId"],
    )
    assert len(index.response_body(event, "FAILED", "p", "x" * 5000)) <= 4096  # CloudFormation's limit


def test_token_is_a_presigned_get_caller_identity_with_the_cluster_header() -> None:
    session = botocore.session.get_session()
    session.set_credentials("AKIDEXAMPLE", "secret")
    token = index.eks_token("fminfra-staging-eks", "us-west-2", session)
    assert token.startswith("k8s-aws-v1.") and "=" not in token
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    parsed = urllib.parse.urlparse(url)
    query = urllib.parse.parse_qs(parsed.query)
    assert parsed.netloc == "sts.us-west-2.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"] and query["Version"] == ["2011-06-15"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Expires"] == ["60"]


def test_handler_imports_nothing_from_fminfra() -> None:
    # It runs alone in Lambda: only the standard library (and boto3, imported inside on_event).
    source = Path(index.__file__).read_text()
    assert "fminfra" not in source.replace("fminfra-", "")
