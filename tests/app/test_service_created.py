"""What AWS creates on the user's behalf, fminfra never declares: over every synthesized template.

A resource a service creates itself (a service-linked role, an access entry, a log group, a
Kubernetes namespace or RBAC object) collides when a template declares it too: CloudFormation
fails to create the second one, or deletes the service's own copy with the stack. Each entry of
SERVICE_CREATED is one such resource, with its facts entry; each finds the declarations of it
in one template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import Synth

Template = dict[str, Any]


def _resources(template: Template, *types: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") in types:
            yield logical_id, resource.get("Properties") or {}


def _manifest_objects(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    """Kubernetes objects the CDK's kubectl provider applies (`Manifest` is a JSON list; a token
    inside it leaves a `Fn::Join`, whose literal parts are searched as text instead)."""
    for logical_id, props in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource"):
        manifest = props.get("Manifest")
        if isinstance(manifest, str):
            for obj in json.loads(manifest):
                yield logical_id, obj
        elif manifest is not None:
            yield logical_id, {"text": json.dumps(manifest)}


def _scraper_access_entries(template: Template) -> list[str]:
    scrapers = {lid for lid, _ in _resources(template, "AWS::APS::Scraper")}
    found = []
    for logical_id, props in _resources(template, "AWS::EKS::AccessEntry"):
        principal = json.dumps(props.get("PrincipalArn"))
        if any(f'["{s}", "RoleArn"]' in principal for s in scrapers) or "AWSServiceRoleForAmazonPrometheusScraper" in principal:
            found.append(logical_id)
    return found


def _scraper_rbac(template: Template) -> list[str]:
    found = []
    for logical_id, obj in _manifest_objects(template):
        text = json.dumps(obj)
        rbac = obj.get("kind") in ("ClusterRoleBinding", "RoleBinding", "ClusterRole") or "text" in obj
        if rbac and ("aps-collector-user" in text or "aps-collector-role" in text):
            found.append(logical_id)
    return found


def _scraper_service_linked_role(template: Template) -> list[str]:
    return [
        lid
        for lid, props in _resources(template, "AWS::IAM::ServiceLinkedRole")
        if props.get("AWSServiceName") == "scraper.aps.amazonaws.com"
    ]


def _eks_control_plane_log_group(template: Template) -> list[str]:
    rule = re.compile(r"^/aws/eks/[^/]+/cluster$")
    found = []
    for logical_id, props in _resources(template, "AWS::Logs::LogGroup"):
        name = props.get("LogGroupName")
        text = name if isinstance(name, str) else json.dumps(name)
        if rule.match(text) or ("/aws/eks/" in text and text.endswith('/cluster"]]}')):
            found.append(logical_id)
    return found


def _task_governance_namespaces(template: Template) -> list[str]:
    return [
        lid
        for lid, obj in _manifest_objects(template)
        if obj.get("kind") == "Namespace" and str(obj.get("metadata", {}).get("name", "")).startswith("hyperpod-ns-")
    ]


@dataclass(frozen=True)
class ServiceCreated:
    what: str
    fact: str
    find: Callable[[Template], list[str]]


SERVICE_CREATED = (
    ServiceCreated(
        "the AMP scraper's EKS access entry",
        "docs/facts/observability.md#amp-scraper-creates-its-access-entry",
        _scraper_access_entries,
    ),
    ServiceCreated(
        "the AMP scraper's Kubernetes permissions (aps-collector-user, aps-collector-role)",
        "docs/facts/observability.md#amp-scraper-creates-its-access-entry",
        _scraper_rbac,
    ),
    ServiceCreated(
        "the AMP scraper's service-linked role",
        "docs/facts/observability.md#amp-scraper-service-linked-role",
        _scraper_service_linked_role,
    ),
    ServiceCreated(
        "the EKS control plane's log group /aws/eks/<cluster>/cluster",
        "docs/facts/eks.md#eks-control-plane-log-group",
        _eks_control_plane_log_group,
    ),
    ServiceCreated(
        "a HyperPod task governance team's namespace hyperpod-ns-<team>",
        "docs/facts/hyperpod.md#hyperpod-task-governance-names",
        _task_governance_namespaces,
    ),
)

# Declarations kept on purpose, each with the reason a reviewer can judge.
ACKNOWLEDGED = {
    ("a HyperPod task governance team's namespace hyperpod-ns-<team>", "AcceptNamespaces"): (
        "fminfra/eks/constructs/accept_access.py applies the namespace again with `kubectl apply` (overwrite) so the "
        "acceptance Role has somewhere to go, because whether task governance's namespace exists when CloudFormation "
        "reports the quota created is not documented; the manifest is retained and not pruned, so fminfra never deletes "
        "it (tests/eks/constructs/test_accept_access.py checks every template)"
    ),
}


def declared(template: Template) -> list[tuple[str, str]]:
    """(what, logical id) for each service-created resource the template declares, less ACKNOWLEDGED."""
    out = []
    for entry in SERVICE_CREATED:
        for logical_id in entry.find(template):
            if not any(what == entry.what and logical_id.startswith(prefix) for what, prefix in ACKNOWLEDGED):
                out.append((entry.what, logical_id))
    return out


def test_no_template_declares_what_a_service_creates_itself(synth: Synth) -> None:
    found = [f"{s.display_name}: {lid} declares {what}" for s in synth.all_templates() for what, lid in declared(s.template)]
    assert found == []


def test_every_entry_cites_a_fact() -> None:
    from tests.app.test_facts import all_entries

    known = {f"docs/facts/{page}#{anchor}" for page, anchor in all_entries()}
    assert [e.fact for e in SERVICE_CREATED if e.fact not in known] == []


SCRAPER: Template = {"Scraper": {"Type": "AWS::APS::Scraper", "Properties": {}}}


@pytest.mark.parametrize(
    ("resources", "what"),
    [
        (
            {**SCRAPER, "Entry": {"Type": "AWS::EKS::AccessEntry", "Properties": {"PrincipalArn": {"Fn::GetAtt": ["Scraper", "RoleArn"]}}}},
            "the AMP scraper's EKS access entry",
        ),
        (
            {
                "Rbac": {
                    "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                    "Properties": {
                        "Manifest": json.dumps(
                            [{"kind": "ClusterRoleBinding", "subjects": [{"kind": "User", "name": "aps-collector-user"}]}]
                        )
                    },
                }
            },
            "the AMP scraper's Kubernetes permissions (aps-collector-user, aps-collector-role)",
        ),
        (
            {"Slr": {"Type": "AWS::IAM::ServiceLinkedRole", "Properties": {"AWSServiceName": "scraper.aps.amazonaws.com"}}},
            "the AMP scraper's service-linked role",
        ),
        (
            {"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/aws/eks/fminfra-staging-eks/cluster"}}},
            "the EKS control plane's log group /aws/eks/<cluster>/cluster",
        ),
        (
            {
                "Ns": {
                    "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                    "Properties": {"Manifest": json.dumps([{"kind": "Namespace", "metadata": {"name": "hyperpod-ns-research"}}])},
                }
            },
            "a HyperPod task governance team's namespace hyperpod-ns-<team>",
        ),
    ],
)
def test_a_declared_service_resource_is_found(resources: dict[str, Any], what: str) -> None:
    """A test of the test: each kind, declared in a template, is reported."""
    assert [w for w, _ in declared({"Resources": resources})] == [what]
