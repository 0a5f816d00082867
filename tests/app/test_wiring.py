"""How the stacks are wired together: node bootstrap in ec2 user data, the AMP scraper and the
exporter charts on EKS, the remote-write settings the nodes get."""

from __future__ import annotations

import json

from fminfra.core.versions import version
from tests.conftest import Synth


def _user_data(synth: Synth, env: str) -> dict[str, str]:
    """Launch template logical id -> rendered user data (JSON text of the Fn::Base64 argument)."""
    templates = synth.resources(env, "Compute", "AWS::EC2::LaunchTemplate")
    return {lid: json.dumps(r["Properties"]["LaunchTemplateData"].get("UserData")) for lid, r in templates.items()}


def test_ec2_groups_run_the_node_bootstrap_from_user_data(synth: Synth) -> None:
    user_data = _user_data(synth, "ec2-odcr")
    assert user_data
    for text in user_data.values():
        assert "node/bootstrap.sh" in text
        assert "--instance-type p5.48xlarge" in text
        assert "FMINFRA_NODE_KIND='worker'" in text
        # The remote-write URL is built from the workspace id (AMP's RemoteWrite URI), never parsed text.
        assert "FMINFRA_REMOTE_WRITE_URL='" in text and "WorkspaceId" in text and "/api/v1/remote_write" in text


def test_ec2_node_role_reads_only_the_bootstrap_asset(synth: Synth) -> None:
    policies = synth.resources("ec2-odcr", "Compute", "AWS::IAM::Policy")
    statements = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    reads = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert reads, "the node role must read the scripts asset"
    for statement in reads:
        resource = json.dumps(statement["Resource"])
        assert "cdk-hnb659fds-assets" in resource and ".zip" in resource


def test_eks_environment_has_a_scraper_with_cluster_access(synth: Synth) -> None:
    scrapers = synth.resources("staging", "Compute", "AWS::APS::Scraper")
    assert len(scrapers) == 1
    (scraper,) = scrapers.values()
    source = scraper["Properties"]["Source"]["EksConfiguration"]
    assert len(source["SubnetIds"]) >= 2
    assert "dcgm" in scraper["Properties"]["ScrapeConfiguration"]["ConfigurationBlob"]
    entries = [
        e["Properties"]
        for e in synth.resources("staging", "Compute", "AWS::EKS::AccessEntry").values()
        if e["Properties"].get("Username") == "aps-collector-user"
    ]
    assert len(entries) == 1 and entries[0]["Type"] == "STANDARD"
    assert synth.resources("dev", "Compute", "AWS::APS::Scraper") == {}


def test_eks_exporter_charts_are_pinned(synth: Synth) -> None:
    charts = {
        r["Properties"]["Chart"]: r["Properties"]
        for r in synth.template("staging", "Compute")["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    }
    assert charts["dcgm-exporter"]["Version"] == version("CHART_DCGM_EXPORTER_VERSION")
    assert charts["prometheus-node-exporter"]["Version"] == version("CHART_PROMETHEUS_NODE_EXPORTER_VERSION")
    assert f"v{version('NODE_EXPORTER_VERSION')}" in charts["prometheus-node-exporter"]["Values"]
