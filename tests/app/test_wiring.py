"""How the stacks are wired together: node bootstrap in ec2 user data, the AMP scraper and the
exporter charts on EKS, the remote-write settings the nodes get."""

from __future__ import annotations

import base64
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


def test_eks_environment_has_a_scraper_writing_through_its_own_roles(synth: Synth) -> None:
    """The workspace has a customer managed key, so the scraper writes through a role
    configuration; AMP creates its access to the cluster itself, so no template declares an access
    entry or RBAC for it (docs/facts/observability.md#amp-scraper-creates-its-access-entry)."""
    scrapers = synth.resources("staging", "Compute", "AWS::APS::Scraper")
    assert len(scrapers) == 1
    (scraper,) = scrapers.values()
    source = scraper["Properties"]["Source"]["EksConfiguration"]
    assert len(source["SubnetIds"]) >= 2
    assert "job_name: dcgm" in base64.b64decode(scraper["Properties"]["ScrapeConfiguration"]["ConfigurationBlob"]).decode()
    roles = scraper["Properties"]["RoleConfiguration"]
    assert set(roles) == {"SourceRoleArn", "TargetRoleArn"}
    template = json.dumps(synth.template("staging", "Compute"))
    assert "aps-collector" not in template
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


def _dcgm_affinity_types(template: dict) -> list[list[str]]:
    """The instance types each dcgm-exporter chart of a template requires of its nodes (`Values` is
    a JSON string, or a Fn::Join of one when it holds a token)."""
    found = []
    for r in (template.get("Resources") or {}).values():
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "dcgm-exporter":
            values = r["Properties"]["Values"]
            text = values if isinstance(values, str) else "".join(p for p in values["Fn::Join"][1] if isinstance(p, str))
            affinity = json.loads(text).get("affinity", {})
            terms = affinity.get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
            found.append(
                [v for t in terms for e in t["matchExpressions"] if e["key"] == "node.kubernetes.io/instance-type" for v in e["values"]]
            )
    return found


def test_dcgm_exporter_runs_only_on_the_clusters_gpu_nodes(synth: Synth) -> None:
    """On a CPU node the exporter finds no GPU and ExporterDown fires for ever: the chart's
    affinity names exactly the cluster's GPU node types, never its system nodes
    (docs/facts/observability.md#dcgm-exporter-chart-node-placement)."""
    from fminfra.compute.stack.clusters import gpu_node_types

    checked = 0
    for env, cfg in synth.configs.items():
        for stack in synth.stacks[env]:
            for types in _dcgm_affinity_types(stack.template):
                assert types == gpu_node_types(cfg), (stack.display_name, types)
                assert cfg.compute.eks.system_nodes.instance_type not in types
                checked += 1
    assert checked >= 2, "the staging and an inference-only config install the DCGM exporter"


def test_a_dcgm_exporter_without_affinity_is_found() -> None:
    """A test of the test: the chart as the defaults leave it (`affinity: {}`) requires nothing."""
    values = json.dumps({"affinity": {}, "tolerations": [{"operator": "Exists"}]})
    template = {"Resources": {"C": {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {"Chart": "dcgm-exporter", "Values": values}}}}
    assert _dcgm_affinity_types(template) == [[]]
