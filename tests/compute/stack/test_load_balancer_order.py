"""With the AWS Load Balancer Controller on, nothing installs into the cluster while its chart does.

The chart's mutating webhook for Services (`mservice.elbv2.k8s.aws`: every Service CREATE, failurePolicy
Fail, on by default: tests/data/aws_load_balancer_controller/webhook-3.5.0.yaml and values-3.5.0.yaml)
refuses every new Service from the moment the chart creates it until the controller's pods answer. An
add-on, chart or manifest installed at the same time as the chart can fail on it; so each one is ordered
before the chart or after it (Helm waits for the controller's pods), read from the templates'
DependsOn and Ref/GetAtt edges. Serving read, B: the training operator and task governance add-ons and
extensions anchored on vpc-cni or core-addons were not ordered after the chart."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from fminfra.app.synth import build_app
from fminfra.config import parse_config, read_yaml
from fminfra.core.assembly import read_assembly
from fminfra.eks.rules import LBC_RELEASE
from tests.conftest import ROOT, Synth
from tests.hyperpod.constructs.test_eks import created_before, dependency_graph

DATA = ROOT / "tests" / "data" / "aws_load_balancer_controller"
# What installs into the cluster: managed add-ons, Helm charts, manifests, HyperPod's dependency chart.
INSTALLS = {"AWS::EKS::Addon", "Custom::AWSCDK-EKS-HelmChart", "Custom::AWSCDK-EKS-KubernetesResource", "Custom::HyperPodDependencies"}


def concurrent_installs(template: dict[str, Any]) -> list[str]:
    """Installs neither before nor after the load balancer controller's chart ([] without the chart)."""
    resources = template.get("Resources") or {}
    charts = [
        lid
        for lid, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and (r.get("Properties") or {}).get("Release") == LBC_RELEASE
    ]
    if not charts:
        return []
    (chart,) = charts
    edges = dependency_graph(template)
    before = created_before(edges, chart)
    reverse: dict[str, set[str]] = {lid: set() for lid in resources}
    for lid, waits in edges.items():
        for w in waits:
            reverse[w].add(lid)
    after = created_before(reverse, chart)
    return sorted(lid for lid, r in resources.items() if r["Type"] in INSTALLS and lid != chart and lid not in before | after)


def test_the_recorded_webhook_refuses_services_until_the_controller_answers() -> None:
    """The premise, from the chart at the pin: a Service webhook on CREATE, failurePolicy Fail, on by default."""
    webhook = (DATA / "webhook-3.5.0.yaml").read_text()
    values = (DATA / "values-3.5.0.yaml").read_text()
    assert "name: mservice.elbv2.k8s.aws" in webhook and "{{- if .Values.enableServiceMutatorWebhook }}" in webhook
    assert "enableServiceMutatorWebhook: true" in values
    section = values.split("serviceMutatorWebhookConfig:", 1)[1].split("\n\n", 1)[0]
    assert "failurePolicy: Fail" in section


def test_nothing_installs_beside_the_load_balancer_controller(synth: Synth) -> None:
    with_chart = [
        s.display_name
        for s in synth.all_templates()
        if any((r.get("Properties") or {}).get("Release") == LBC_RELEASE for r in (s.template.get("Resources") or {}).values())
    ]
    assert {"eks-inf/Compute", "cap-eks/Compute", "eks-karp/Compute"} <= set(with_chart), with_chart
    problems = {s.display_name: found for s in synth.all_templates() if (found := concurrent_installs(s.template))}
    assert not problems, problems


def test_the_check_fails_on_the_old_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test of the test: cap-eks (HyperPod EKS, task governance, the controller, an extension
    after core-addons) with the chart's new edges taken away."""
    from fminfra.compute.constructs import clusters

    monkeypatch.setattr(clusters, "_after_load_balancer", lambda *a, **k: None)
    data = copy.deepcopy(read_yaml(ROOT / "tests" / "configs" / "capacity-eks.yaml"))
    cfg = parse_config(data, "capacity-eks.yaml")
    app = cdk.App(outdir=str(tmp_path))
    build_app([cfg], app=app)
    app.synth()
    compute = next(s for s in read_assembly(tmp_path)[cfg.name] if s.display_name.endswith("/Compute"))
    found = concurrent_installs(compute.template)
    assert any("TrainingOperator" in f or "hyperpodtrainingoperator" in f.lower() for f in found), found
    assert any("TaskGovernance" in f or "taskgovernance" in f.lower() for f in found), found
