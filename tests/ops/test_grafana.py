"""`grafana sync` against a local HTTP server that records requests; boto3 stubbed with Stubber."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from fminfra.cli import main as cli
from fminfra.config import load_config
from fminfra.observability.rules import load_dashboards, partition_dns_suffix, workspace_urls
from fminfra.ops.grafana import CLOUDWATCH_UID, PROMETHEUS_UID, SERVICE_ACCOUNT, run, sync
from tests.conftest import ROOT

# grafana/grafana-aws-sdk pkg/awsds/settings.go, ToAuthType (docs/facts/observability.md#grafana-aws-auth-types).
GRAFANA_AUTH_TYPES = {"default", "credentials", "sharedCreds", "keys", "ec2_iam_role", "grafana_assume_role", "arn"}

CONFIG = ROOT / "tests" / "configs" / "obs-grafana.yaml"
GROUP = "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
WORKSPACE = "g-0123456789"
AMP_WORKSPACE = "ws-01234567-89ab-cdef-0123-456789abcdef"
TOKEN = "glsa_test_token"


class FakeGrafana:
    """The Grafana HTTP API as far as sync uses it, with state, recording every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.auth: set[str] = set()
        self.data_sources: dict[str, dict[str, Any]] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        if method == "GET" and path.startswith("/api/datasources/uid/"):
            uid = path.rsplit("/", 1)[1]
            return (200, self.data_sources[uid]) if uid in self.data_sources else (404, {"message": "not found"})
        if method == "POST" and path == "/api/datasources":
            self.data_sources[body["uid"]] = {**body, "id": len(self.data_sources) + 1, "orgId": 1, "readOnly": False}
            return 200, {"message": "Datasource added"}
        if method == "PUT" and path.startswith("/api/datasources/uid/"):
            self.data_sources[path.rsplit("/", 1)[1]] = body
            return 200, {"message": "Datasource updated"}
        if method == "GET" and path.startswith("/api/dashboards/uid/"):
            uid = path.rsplit("/", 1)[1]
            return (200, {"dashboard": self.dashboards[uid], "meta": {}}) if uid in self.dashboards else (404, {"message": "not found"})
        if method == "POST" and path == "/api/dashboards/db":
            dashboard = body["dashboard"]
            old = self.dashboards.get(dashboard["uid"])
            self.dashboards[dashboard["uid"]] = {**dashboard, "id": 7, "version": (old or {}).get("version", 0) + 1}
            return 200, {"status": "success", "uid": dashboard["uid"]}
        return 400, {"message": f"unexpected {method} {path}"}

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.requests if m != "GET"]


@pytest.fixture
def grafana_server() -> Iterator[tuple[FakeGrafana, str]]:
    fake = FakeGrafana()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            fake.auth.add(self.headers.get("Authorization", ""))
            status, payload = fake.handle(self.command, self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class StubbedAws:
    """boto3 clients with Stubber: the expected AWS calls of one run, in order."""

    def __init__(self, *, granted: bool, account_exists: bool, grafana_fails: bool = False) -> None:
        self.clients = {
            s: boto3.client(s, region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
            for s in ("cloudformation", "grafana", "amp")
        }
        self.stubs = {s: Stubber(c) for s, c in self.clients.items()}
        cfn, grafana, amp = self.stubs["cloudformation"], self.stubs["grafana"], self.stubs["amp"]
        cfn.add_response(
            "describe_stacks",
            {
                "Stacks": [
                    {
                        "StackName": "obs-grafana-Observability",
                        "CreationTime": "2026-11-29T00:00:00Z",
                        "StackStatus": "CREATE_COMPLETE",
                        "Outputs": [
                            {"OutputKey": "GrafanaWorkspaceId", "OutputValue": WORKSPACE},
                            {"OutputKey": "PrometheusWorkspaceId", "OutputValue": AMP_WORKSPACE},
                        ],
                    }
                ]
            },
            {"StackName": "obs-grafana-Observability"},
        )
        grafana.add_response("describe_workspace", {"workspace": _workspace()}, {"workspaceId": WORKSPACE})
        amp.add_response(
            "describe_workspace",
            {
                "workspace": {
                    "workspaceId": AMP_WORKSPACE,
                    "arn": f"arn:aws:aps:us-west-2:555555555555:workspace/{AMP_WORKSPACE}",
                    "status": {"statusCode": "ACTIVE"},
                    # The form the service returns (docs/facts/observability.md#amp-prometheus-endpoint-form);
                    # sync builds the data source URL from the id and never parses this.
                    "prometheusEndpoint": f"https://aps-workspaces.us-west-2.amazonaws.com/workspaces/{AMP_WORKSPACE}/",
                    "createdAt": "2026-11-29T00:00:00Z",
                }
            },
            {"workspaceId": AMP_WORKSPACE},
        )
        accounts = [{"id": "3", "name": SERVICE_ACCOUNT, "grafanaRole": "ADMIN", "isDisabled": "false"}] if account_exists else []
        grafana.add_response(
            "list_workspace_service_accounts", {"serviceAccounts": accounts, "workspaceId": WORKSPACE}, {"workspaceId": WORKSPACE}
        )
        if not account_exists:
            grafana.add_response(
                "create_workspace_service_account",
                {"id": "3", "name": SERVICE_ACCOUNT, "grafanaRole": "ADMIN", "workspaceId": WORKSPACE},
                {"workspaceId": WORKSPACE, "name": SERVICE_ACCOUNT, "grafanaRole": "ADMIN"},
            )
        grafana.add_response(
            "create_workspace_service_account_token",
            {"serviceAccountToken": {"id": "9", "name": "t", "key": TOKEN}, "serviceAccountId": "3", "workspaceId": WORKSPACE},
            {"workspaceId": WORKSPACE, "serviceAccountId": "3", "name": ANY, "secondsToLive": 600},
        )
        permission = {"role": "ADMIN", "user": {"id": GROUP, "type": "SSO_GROUP"}}
        if not grafana_fails:
            grafana.add_response(
                "list_permissions", {"permissions": [permission] if granted else []}, {"workspaceId": WORKSPACE, "groupId": GROUP}
            )
        if not granted and not grafana_fails:
            grafana.add_response(
                "update_permissions",
                {"errors": []},
                {
                    "workspaceId": WORKSPACE,
                    "updateInstructionBatch": [{"action": "ADD", "role": "ADMIN", "users": [{"id": GROUP, "type": "SSO_GROUP"}]}],
                },
            )
        grafana.add_response(
            "delete_workspace_service_account_token",
            {"tokenId": "9", "serviceAccountId": "3", "workspaceId": WORKSPACE},
            {"workspaceId": WORKSPACE, "serviceAccountId": "3", "tokenId": "9"},
        )
        for stub in self.stubs.values():
            stub.activate()

    def client(self, service: str) -> Any:
        return self.clients[service]

    def assert_all_called(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


def _workspace() -> dict[str, Any]:
    return {
        "id": WORKSPACE,
        "endpoint": f"{WORKSPACE}.grafana-workspace.us-west-2.amazonaws.com",
        "status": "ACTIVE",
        "authentication": {"providers": ["AWS_SSO"]},
        "created": "2026-11-29T00:00:00Z",
        "modified": "2026-11-29T00:00:00Z",
        "dataSources": [],
        "grafanaVersion": "10.4",
    }


def test_first_run_creates_everything_and_second_run_changes_nothing(grafana_server: tuple[FakeGrafana, str]) -> None:
    fake, url = grafana_server
    cfg = load_config(CONFIG)

    first = StubbedAws(granted=False, account_exists=False)
    report = sync(cfg, client=first.client, grafana_url=url)
    first.assert_all_called()
    # without a serving: section, no Serving dashboard
    dashboards = load_dashboards(serving=False)
    assert cfg.serving is None and "fminfra-serving" not in {d["uid"] for d in dashboards}
    assert fake.writes() == [
        ("POST", "/api/datasources"),
        ("POST", "/api/datasources"),
        *[("POST", "/api/dashboards/db")] * len(dashboards),
    ]
    assert fake.auth == {f"Bearer {TOKEN}"}
    amp = fake.data_sources[PROMETHEUS_UID]
    assert amp["url"] == f"https://aps-workspaces.us-west-2.amazonaws.com/workspaces/{AMP_WORKSPACE}"
    assert amp["jsonData"] == {"httpMethod": "POST", "sigV4Auth": True, "sigV4AuthType": "ec2_iam_role", "sigV4Region": "us-west-2"}
    cloudwatch = fake.data_sources[CLOUDWATCH_UID]
    assert cloudwatch["type"] == "cloudwatch"
    # The auth types Grafana's AWS SDK knows (docs/facts/observability.md#grafana-aws-auth-types): any other
    # value fails every signed AMP query or falls back to `default`.
    assert {amp["jsonData"]["sigV4AuthType"], cloudwatch["jsonData"]["authType"]} <= GRAFANA_AUTH_TYPES
    assert set(fake.dashboards) == {d["uid"] for d in dashboards}
    assert report.changes == 2 + len(dashboards) + 1
    assert f"granted: admin group {GROUP}" in report.lines

    fake.requests.clear()
    second = StubbedAws(granted=True, account_exists=True)
    report = sync(cfg, client=second.client, grafana_url=url)
    second.assert_all_called()
    assert fake.writes() == []
    assert report.changes == 0
    assert all(line.startswith("unchanged: ") for line in report.lines)


def test_an_environment_that_serves_models_gets_the_serving_dashboard(grafana_server: tuple[FakeGrafana, str]) -> None:
    fake, url = grafana_server
    serving = load_config(ROOT / "examples" / "serving.yaml").serving
    cfg = load_config(CONFIG).model_copy(update={"serving": serving})
    sync(cfg, client=StubbedAws(granted=False, account_exists=False).client, grafana_url=url)
    assert set(fake.dashboards) == {d["uid"] for d in load_dashboards()} and "fminfra-serving" in fake.dashboards


def test_a_changed_dashboard_and_data_source_are_updated_by_uid(grafana_server: tuple[FakeGrafana, str]) -> None:
    fake, url = grafana_server
    cfg = load_config(CONFIG)
    sync(cfg, client=StubbedAws(granted=False, account_exists=False).client, grafana_url=url)
    uid = load_dashboards()[0]["uid"]
    fake.dashboards[uid]["title"] = "edited by hand"
    fake.data_sources[PROMETHEUS_UID]["jsonData"]["sigV4Region"] = "eu-west-1"
    fake.requests.clear()
    report = sync(cfg, client=StubbedAws(granted=True, account_exists=True).client, grafana_url=url)
    assert fake.writes() == [("PUT", f"/api/datasources/uid/{PROMETHEUS_UID}"), ("POST", "/api/dashboards/db")]
    assert fake.dashboards[uid]["title"] == load_dashboards()[0]["title"] and fake.dashboards[uid]["version"] == 2
    assert fake.data_sources[PROMETHEUS_UID]["jsonData"]["sigV4Region"] == "us-west-2"
    assert report.changes == 2


def test_grafana_errors_exit_1_in_one_line_and_the_token_is_deleted(
    grafana_server: tuple[FakeGrafana, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = grafana_server
    cfg = load_config(CONFIG)
    fake.handle = lambda method, path, body: (500, {"message": "boom"})  # type: ignore[method-assign]
    # The run stops at the first Grafana call; the token is still deleted (the last stub).
    aws = StubbedAws(granted=True, account_exists=True, grafana_fails=True)
    assert run(cfg, client=aws.client, grafana_url=url) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("obs-grafana: grafana sync: Grafana GET /api/datasources/uid/fminfra-amp: HTTP 500")
    aws.assert_all_called()


def test_cli_rejects_an_environment_without_grafana(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["grafana", "sync", str(ROOT / "config" / "dev.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"{ROOT / 'config' / 'dev.yaml'}: observability.grafana.enabled: is false, so there is no Grafana workspace to sync; "
        "set it to true and deploy"
    )


def test_cli_without_credentials_exits_2_with_the_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert cli.main(["grafana", "sync", str(CONFIG)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "no AWS credentials found (environment variables, --profile, SSO or an instance role); this command needs read access to the account in the config"
    ]


@pytest.mark.parametrize(
    ("region", "base"),
    [
        ("us-west-2", "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1"),
        ("us-gov-west-1", "https://aps-workspaces.us-gov-west-1.amazonaws.com/workspaces/ws-1"),
        ("cn-north-1", "https://aps-workspaces.cn-north-1.amazonaws.com.cn/workspaces/ws-1"),
    ],
)
def test_workspace_urls_follow_the_amp_api_and_the_partition(region: str, base: str) -> None:
    """AMP's RemoteWrite and QueryMetrics URIs (docs/facts/observability.md#amp-remote-write-url,
    #amp-query-url) on the partition's DNS suffix (botocore's partitions data)."""
    urls = workspace_urls(region, "ws-1", partition_dns_suffix(region))
    assert urls.base == base
    assert urls.remote_write == base + "/api/v1/remote_write"
    assert urls.query == base + "/api/v1/query"
