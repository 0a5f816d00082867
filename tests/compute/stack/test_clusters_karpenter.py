"""The Compute stack of the Karpenter test config (tests/configs/eks-karpenter.yaml): pools instead of
inference node groups, the chart after the system node group and the core add-ons, the pools after it."""

from __future__ import annotations

import base64
import json
from typing import Any

import yaml

from tests.conftest import Synth

ENV = "eks-karp"


def test_pools_replace_the_inference_node_groups(synth: Synth) -> None:
    nodegroups = synth.resources(ENV, "Compute", "AWS::EKS::Nodegroup")
    assert [lid for lid in nodegroups if "System" in lid] == list(nodegroups)  # the system node group only
    manifests = synth.resources(ENV, "Compute", "Custom::AWSCDK-EKS-KubernetesResource")
    pools = {lid: json.dumps(r["Properties"]["Manifest"]) for lid, r in manifests.items() if "KarpenterPool" in lid}
    assert len(pools) == 2
    [block] = [text for text in pools.values() if "serve-p5" in text]
    assert '\\"capacityReservationSelectorTerms\\":[{\\"id\\":\\"cr-0123456789abcdef0\\"}]' in block
    assert '\\"values\\":[\\"reserved\\"]' in block
    [g6e] = [text for text in pools.values() if "serve-g6e" in text]
    assert '\\"values\\":[\\"on-demand\\",\\"spot\\"]' in g6e


def test_the_chart_waits_for_the_system_nodes_and_core_addons_and_the_pools_for_it(synth: Synth) -> None:
    template = synth.template(ENV, "Compute")["Resources"]
    [(chart_id, chart)] = [(lid, r) for lid, r in template.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and "karpenter" in lid]
    kinds = {template[d]["Type"] for d in chart["DependsOn"]}
    assert {"AWS::EKS::Nodegroup", "AWS::EKS::Addon"} <= kinds
    addons = {template[d]["Properties"]["AddonName"] for d in chart["DependsOn"] if template[d]["Type"] == "AWS::EKS::Addon"}
    assert addons == {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"}
    for lid, r in template.items():
        if "KarpenterPool" in lid:
            assert chart_id in r["DependsOn"]


def test_the_shipped_environments_have_no_karpenter(synth: Synth) -> None:
    for env in ("dev", "staging", "prod"):
        assert synth.resources(env, "Compute", "AWS::SQS::Queue") == {}


def _scrape_jobs(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    [scraper] = synth.resources(env, "Compute", "AWS::APS::Scraper").values()
    blob = scraper["Properties"]["ScrapeConfiguration"]["ConfigurationBlob"]
    return {c["job_name"]: c for c in yaml.safe_load(base64.b64decode(blob))["scrape_configs"]}


def test_the_scraper_scrapes_karpenters_controller_only_where_karpenter_runs(synth: Synth) -> None:
    """The karpenter job (fminfra.observability.constructs.amp_scraper.karpenter_scrape_job, checked
    against the chart in tests/observability/test_karpenter_metrics.py) where Karpenter is on; the
    inference-only cluster without it keeps the exporters' jobs only."""
    assert set(_scrape_jobs(synth, ENV)) == {"dcgm", "node", "karpenter"}
    assert set(_scrape_jobs(synth, "eks-inf")) == {"dcgm", "node"}
