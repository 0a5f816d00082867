"""Every Kubernetes object fminfra applies has CDK's kubectl provider to apply it, whatever else the
cluster has: a HyperPod EKS cluster without charts (no inference groups, Prometheus off) with each
manifest-applying feature alone (compute read, B: `accept_access` alone validated and failed at synth
with "Kubectl Provider is not defined in this cluster")."""

from __future__ import annotations

import copy
from typing import Any

import aws_cdk as cdk
import pytest

from fminfra.app.synth import build_app
from fminfra.config import parse_config, read_yaml
from tests.conftest import ROOT

STAGING = read_yaml(ROOT / "config" / "staging.yaml")


def _chartless(**features: bool) -> dict[str, Any]:
    """Staging without inference groups, Prometheus or FSx (so no chart and no FSx volume), with the features asked for."""
    data = copy.deepcopy(STAGING)
    data["compute"].pop("inference_node_groups", None)
    data["storage"].pop("lustre", None)
    data["compute"]["eks"].pop("load_balancer_controller", None)
    data["observability"] = {**(data.get("observability") or {}), "prometheus": False}
    data["compute"]["eks"]["accept_access"] = features.get("accept_access", False)
    if features.get("plan_drain"):
        group = data["compute"]["instance_groups"][0]
        group["capacity"] = {
            "type": "training-plan",
            "training_plan_arn": f"arn:aws:sagemaker:{data['region']}:{data['account']}:training-plan/p",
        }
    return data


def _build(data: dict[str, Any]) -> None:
    build_app([parse_config(data, "f.yaml")], app=cdk.App())


@pytest.mark.parametrize("feature", ["accept_access", "plan_drain"])
def test_a_manifest_feature_alone_builds(feature: str) -> None:
    _build(_chartless(**{feature: True}))


def test_the_check_fails_without_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test of the test: the provider decided as it was (the plan drain alone)."""
    from fminfra.compute.stack import clusters

    monkeypatch.setattr(
        clusters, "applies_manifests", lambda cfg: cfg.compute.orchestrator == "eks" and bool(clusters.plan_drain_groups(cfg))
    )
    with pytest.raises(RuntimeError, match="Kubectl Provider is not defined in this cluster"):
        _build(_chartless(accept_access=True))
