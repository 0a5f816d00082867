"""`python -m fminfra grafana sync CONFIG`: data sources, dashboards and admins of the AMG workspace.

With a short-lived service-account token from boto3 (deleted when done) it creates or updates,
through the Grafana HTTP API, the AMP data source (SigV4 with the workspace role) and a
CloudWatch data source, uploads the repo's dashboards (same uid: update; the Serving dashboard only
with a `serving:` section), and grants the config's `admin_group_ids` the ADMIN role through the AMG
`UpdatePermissions` API. Idempotent:
a second run only reads. Exit codes: 0 done, 1 an AWS or Grafana call failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fminfra.config import EnvironmentConfig
from fminfra.core.errors import ConfigError
from fminfra.observability.rules import load_dashboards, partition_dns_suffix, workspace_urls

PROMETHEUS_UID = "fminfra-amp"
CLOUDWATCH_UID = "fminfra-cloudwatch"
SERVICE_ACCOUNT = "fminfra-sync"
TOKEN_SECONDS = 600
HTTP_TIMEOUT_SECONDS = 30


class SyncError(Exception):
    """An AWS or Grafana call failed: one line, exit 1."""


@dataclass
class SyncReport:
    """What a run did, one line per object."""

    lines: list[str] = field(default_factory=list)
    changes: int = 0

    def note(self, action: str, what: str) -> None:
        self.lines.append(f"{action}: {what}")
        if action != "unchanged":
            self.changes += 1


ClientFactory = Callable[[str], Any]


# Grafana's name for "the credentials of the machine Grafana runs on": on Amazon Managed Grafana the
# workspace's IAM role (grafana-aws-sdk's auth types: docs/facts/observability.md#grafana-aws-auth-types).
WORKSPACE_ROLE_AUTH = "ec2_iam_role"


def _stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


class GrafanaApi:
    """The few Grafana HTTP API calls sync needs, with a bearer token."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - the URL is the workspace's https endpoint
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method == "GET":
                return 404, None
            detail = exc.read().decode(errors="replace")[:200]
            raise SyncError(f"Grafana {method} {path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise SyncError(f"Grafana {method} {path}: {exc}") from None


def desired_data_sources(region: str, prometheus_url: str) -> list[dict[str, Any]]:
    """The AMP data source (SigV4 with the workspace role) and the CloudWatch data source."""
    return [
        {
            "uid": PROMETHEUS_UID,
            "name": "Amazon Managed Prometheus (fminfra)",
            "type": "prometheus",
            "access": "proxy",
            "url": prometheus_url,
            "isDefault": True,
            "jsonData": {"httpMethod": "POST", "sigV4Auth": True, "sigV4AuthType": WORKSPACE_ROLE_AUTH, "sigV4Region": region},
        },
        {
            "uid": CLOUDWATCH_UID,
            "name": "CloudWatch (fminfra)",
            "type": "cloudwatch",
            "access": "proxy",
            "isDefault": False,
            "jsonData": {"authType": WORKSPACE_ROLE_AUTH, "defaultRegion": region},
        },
    ]


def _differs(desired: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether any field we set differs (fields Grafana adds are ignored)."""
    for key, value in desired.items():
        if isinstance(value, dict):
            if _differs(value, current.get(key) or {}):
                return True
        elif current.get(key) != value:
            return True
    return False


def sync_data_sources(api: GrafanaApi, desired: list[dict[str, Any]], report: SyncReport) -> None:
    for source in desired:
        status, current = api.call("GET", f"/api/datasources/uid/{source['uid']}")
        if status == 404:
            api.call("POST", "/api/datasources", source)
            report.note("created", f"data source {source['uid']}")
        elif _differs(source, current):
            api.call("PUT", f"/api/datasources/uid/{source['uid']}", {**current, **source})
            report.note("updated", f"data source {source['uid']}")
        else:
            report.note("unchanged", f"data source {source['uid']}")


def _comparable(dashboard: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in dashboard.items() if k not in ("id", "version")}


def sync_dashboards(api: GrafanaApi, dashboards: list[dict[str, Any]], report: SyncReport) -> None:
    for dashboard in dashboards:
        uid = dashboard["uid"]
        status, current = api.call("GET", f"/api/dashboards/uid/{uid}")
        if status != 404 and _comparable(current["dashboard"]) == _comparable(dashboard):
            report.note("unchanged", f"dashboard {uid}")
            continue
        body = {
            "dashboard": {k: v for k, v in dashboard.items() if k != "version"} | {"id": None},
            "overwrite": True,
            "message": "fminfra grafana sync",
        }
        api.call("POST", "/api/dashboards/db", body)
        report.note("created" if status == 404 else "updated", f"dashboard {uid}")


def sync_admins(grafana: Any, workspace_id: str, group_ids: list[str], report: SyncReport) -> None:
    """Grant ADMIN to each group that does not have it (groups not in the config are left alone)."""
    for group_id in group_ids:
        permissions = grafana.list_permissions(workspaceId=workspace_id, groupId=group_id).get("permissions", [])
        if any(p["user"]["id"] == group_id and p["user"]["type"] == "SSO_GROUP" and p["role"] == "ADMIN" for p in permissions):
            report.note("unchanged", f"admin group {group_id}")
            continue
        errors = grafana.update_permissions(
            workspaceId=workspace_id,
            updateInstructionBatch=[{"action": "ADD", "role": "ADMIN", "users": [{"id": group_id, "type": "SSO_GROUP"}]}],
        ).get("errors", [])
        if errors:
            raise SyncError(f"UpdatePermissions for group {group_id}: {errors[0].get('message', errors[0])}")
        report.note("granted", f"admin group {group_id}")


def _service_account_id(grafana: Any, workspace_id: str) -> str:
    accounts = grafana.list_workspace_service_accounts(workspaceId=workspace_id).get("serviceAccounts", [])
    for account in accounts:
        if account["name"] == SERVICE_ACCOUNT:
            return str(account["id"])
    created = grafana.create_workspace_service_account(workspaceId=workspace_id, name=SERVICE_ACCOUNT, grafanaRole="ADMIN")
    return str(created["id"])


def sync(cfg: EnvironmentConfig, *, client: ClientFactory, grafana_url: str | None = None) -> SyncReport:
    """Run the sync for one environment; `client(service)` returns a boto3 client of its region."""
    if not cfg.observability.grafana.enabled:
        raise ConfigError([f"{cfg.name}: observability.grafana.enabled: is false; there is no Grafana workspace to sync"])
    stack_name = f"{cfg.name}-Observability"
    outputs = _stack_outputs(client("cloudformation"), stack_name)
    missing = [k for k in ("GrafanaWorkspaceId", "PrometheusWorkspaceId") if k not in outputs]
    if missing:
        raise SyncError(f"stack {stack_name} has no output {', '.join(missing)}: deploy the Observability stack first")
    grafana = client("grafana")
    workspace_id = outputs["GrafanaWorkspaceId"]
    endpoint = grafana.describe_workspace(workspaceId=workspace_id)["workspace"]["endpoint"]
    amp_workspace_id = outputs["PrometheusWorkspaceId"]
    client("amp").describe_workspace(workspaceId=amp_workspace_id)  # the workspace exists and we may read it
    # Built from the workspace id (the PrometheusEndpoint text differs between sources); Grafana's
    # Prometheus data source appends /api/v1/... itself.
    prometheus_url = workspace_urls(cfg.region, amp_workspace_id, partition_dns_suffix(cfg.region)).base
    account_id = _service_account_id(grafana, workspace_id)
    token = grafana.create_workspace_service_account_token(
        workspaceId=workspace_id, serviceAccountId=account_id, name=f"{SERVICE_ACCOUNT}-{int(time.time())}", secondsToLive=TOKEN_SECONDS
    )["serviceAccountToken"]
    report = SyncReport()
    try:
        api = GrafanaApi(grafana_url or f"https://{endpoint}", token["key"])
        sync_data_sources(api, desired_data_sources(cfg.region, prometheus_url), report)
        sync_dashboards(api, load_dashboards(serving=cfg.serving is not None), report)
        sync_admins(grafana, workspace_id, cfg.observability.grafana.admin_group_ids, report)
    finally:
        grafana.delete_workspace_service_account_token(workspaceId=workspace_id, serviceAccountId=account_id, tokenId=token["id"])
    return report


def boto3_clients(region: str) -> ClientFactory:
    """Clients of one session with normal credential resolution; AwsAccessError (exit 2) without credentials."""
    from fminfra.ops.aws import make_session

    session = make_session(region=region)
    return lambda service: session.client(service)  # type: ignore[call-overload]


def run(cfg: EnvironmentConfig, *, grafana_url: str | None = None, client: ClientFactory | None = None) -> int:
    """The CLI's handler: print one line per object; 0 done, 1 a call failed."""
    import sys

    from botocore.exceptions import BotoCoreError, ClientError

    try:
        report = sync(cfg, client=client or boto3_clients(cfg.region), grafana_url=grafana_url)
    except (SyncError, ClientError, BotoCoreError) as exc:
        print(f"{cfg.name}: grafana sync: {exc}", file=sys.stderr)
        return 1
    for line in report.lines:
        print(f"{cfg.name}: {line}")
    print(f"{cfg.name}: {report.changes} change(s)")
    return 0


def command(ns: argparse.Namespace) -> int:
    from fminfra.ops.common import load_configs

    (path, cfg), *_ = load_configs([ns.config])
    if not cfg.observability.grafana.enabled:
        raise ConfigError(
            [f"{path}: observability.grafana.enabled: is false, so there is no Grafana workspace to sync; set it to true and deploy"]
        )
    return run(cfg, grafana_url=ns.grafana_url)
