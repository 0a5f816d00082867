"""Policy gates over every synthesized template, and the own rules' ability to fail."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from fminfra.ops.gate import cfn_lint
from fminfra.policy.rules import check_templates
from tests.conftest import ROOT, Synth


def test_cdk_nag_has_no_unsuppressed_findings(synth: Synth) -> None:
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    plugins = {p["pluginName"]: p for p in report["pluginReports"]}
    assert plugins["AwsSolutions"]["violations"] == []
    for suppressed in plugins["AwsSolutions"]["suppressedViolations"]:
        assert len(suppressed["reason"]) >= 30, suppressed["ruleName"]


def test_cdk_nag_findings_fail_synth() -> None:
    from cdk_nag import AwsSolutionsChecks

    app = cdk.App()
    stage = cdk.Stage(app, "bad", env=cdk.Environment(account="111111111111", region="us-west-2"))
    s3.Bucket(cdk.Stack(stage, "Data"), "Unlogged")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()


def test_cfn_lint_is_clean_on_every_template(synth: Synth) -> None:
    paths = [s.path for s in synth.all_templates()]
    code, output = cfn_lint(paths, ROOT / ".cfnlintrc.yaml")
    assert code == 0, output


def test_own_rules_pass_on_every_template(synth: Synth) -> None:
    findings = check_templates({s.stack_name: s.template for s in synth.all_templates()})
    assert [str(f) for f in findings] == []


def _network_template(synth: Synth) -> dict:
    return copy.deepcopy(synth.template("dev", "Network"))


def test_own_rule_catches_efa_group_without_self_egress(synth: Synth) -> None:
    template = _network_template(synth)
    egress = [lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    for lid in egress:
        del template["Resources"][lid]
    findings = check_templates({"t": template})
    assert [f.rule_id for f in findings] == ["FMI-EFA-SG-SELF"]
    assert "egress" in findings[0].message


def test_own_rule_catches_subnet_by_az_name(synth: Synth) -> None:
    template = _network_template(synth)
    subnet = next(r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Subnet")
    subnet["Properties"]["AvailabilityZone"] = subnet["Properties"].pop("AvailabilityZoneId").replace("usw2-az", "us-west-2")
    assert [f.rule_id for f in check_templates({"t": template})] == ["FMI-SUBNET-AZ-ID"]


def test_own_rule_acknowledgement_needs_a_reason(synth: Synth) -> None:
    template = _network_template(synth)
    subnet = next(r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Subnet")
    subnet["Properties"].pop("AvailabilityZoneId")
    subnet["Metadata"] = {"fminfra:acknowledge": [{"id": "FMI-SUBNET-AZ-ID", "reason": ""}]}
    assert len(check_templates({"t": template})) == 1
    subnet["Metadata"]["fminfra:acknowledge"][0]["reason"] = "imported subnet in a Local Zone"
    assert check_templates({"t": template}) == []


def test_cfn_lint_fails_on_a_broken_template(tmp_path: Path, synth: Synth) -> None:
    template = _network_template(synth)
    subnet = next(r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Subnet")
    subnet["Properties"]["CidrBlok"] = subnet["Properties"].pop("CidrBlock")
    bad = tmp_path / "bad.template.json"
    bad.write_text(json.dumps(template))
    code, output = cfn_lint([bad], ROOT / ".cfnlintrc.yaml")
    assert code != 0 and "CidrBlok" in output
