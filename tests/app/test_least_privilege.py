"""Least privilege where the gates were silenced: the data bucket grant by prefix, IMDS hop limit 1
on EKS nodes, log groups under customer keys, the access-log bucket versioned, honest S1 reasons.
Each test reads the synthesized templates (and fails on the templates as they were before)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from tests.config.test_environment import DEV, _with
from tests.conftest import Synth


def _node_statements(synth: Synth, env: str) -> list[dict[str, Any]]:
    policies = synth.resources(env, "Compute", "AWS::IAM::Policy")
    attached = [p for p in policies.values() if {"Ref": "NodeRole52753DAC"} in p["Properties"]["Roles"]]
    return [s for p in attached for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _object_resources(statement: dict[str, Any]) -> list[str]:
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    out = []
    for r in resources:
        if isinstance(r, str):
            out.append(r)
        elif "Fn::Join" in r:
            out.append("".join(p if isinstance(p, str) else "<token>" for p in r["Fn::Join"][1]))
    return out


def test_nodes_delete_only_under_the_read_write_prefixes(synth: Synth) -> None:
    bucket = "fminfra-dev-data-111111111111-us-west-2"
    statements = [s for s in _node_statements(synth, "dev") if any(bucket in r for r in _object_resources(s))]
    deleting = [s for s in statements if any(a.startswith("s3:DeleteObject") for a in s["Action"])]
    assert deleting, statements
    for s in deleting:
        objects = [r for r in _object_resources(s) if r.startswith(f"arn:aws:s3:::{bucket}/")]
        assert objects == [f"arn:aws:s3:::{bucket}/checkpoints/*"], s
    reading = {r for s in statements if "s3:GetObject*" in s["Action"] for r in _object_resources(s)}
    assert f"arn:aws:s3:::{bucket}/datasets/*" in reading
    assert f"arn:aws:s3:::{bucket}/*" not in reading  # nothing on the whole bucket


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "storage.bucket.read_write_prefixes",
            ["/checkpoints/"],
            "storage.bucket.read_write_prefixes[0]: must be a prefix of the data bucket",
        ),
        ("storage.bucket.read_only_prefixes", ["data"], "storage.bucket.read_only_prefixes[0]: must be a prefix of the data bucket"),
        (
            "storage.bucket.read_only_prefixes",
            ["checkpoints/old/"],
            "storage.bucket.read_only_prefixes[0]: 'checkpoints/old/' overlaps 'checkpoints/' (read_write_prefixes[0])",
        ),
    ],
)
def test_bad_prefixes_are_one_line(field: str, value: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_with(DEV, field, value), "f.yaml")
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(f"f.yaml: {expected}"), info.value.problems


def test_prefix_defaults_are_datasets_read_only_and_checkpoints_read_write() -> None:
    bucket = parse_config(DEV).storage.bucket  # type: ignore[union-attr]
    assert (bucket.read_only_prefixes, bucket.read_write_prefixes) == (["datasets/"], ["checkpoints/"])


def test_every_eks_node_launch_template_has_hop_limit_1(synth: Synth) -> None:
    seen = 0
    for env in synth.configs:
        for template in [s.template for s in synth.stacks[env]]:
            for res in (template.get("Resources") or {}).values():
                if res["Type"] == "AWS::EC2::LaunchTemplate":
                    seen += 1
                    assert res["Properties"]["LaunchTemplateData"]["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert seen >= 5


def _log_groups(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    out = {}
    for stack in ("Network", "Observability"):
        out.update(synth.resources(env, stack, "AWS::Logs::LogGroup"))
    return out


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_flow_log_and_amp_log_groups_use_a_customer_key_that_lets_logs_use_it(synth: Synth, env: str) -> None:
    groups = _log_groups(synth, env)
    assert {lid.rstrip("0123456789ABCDEF") for lid in groups} >= {"VpcFlowLogGroup", "PrometheusLogs"}
    for stack, lid, group in [
        (s, lid, g) for s in ("Network", "Observability") for lid, g in synth.resources(env, s, "AWS::Logs::LogGroup").items()
    ]:
        key_ref = group["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
        key = synth.resources(env, stack, "AWS::KMS::Key")[key_ref]
        assert key["Properties"]["EnableKeyRotation"] is True
        logs = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "CloudWatchLogs"]
        assert len(logs) == 1, lid
        assert logs[0]["Principal"] == {"Service": f"logs.{synth.configs[env].region}.amazonaws.com"}
        assert "kms:EncryptionContext:aws:logs:arn" in logs[0]["Condition"]["ArnLike"]


def test_access_log_bucket_is_versioned(synth: Synth) -> None:
    buckets = synth.resources("prod", "Data", "AWS::S3::Bucket")
    log_bucket = next(b for lid, b in buckets.items() if lid.startswith("DataBucketAccessLogBucket"))
    assert log_bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}


def test_no_acknowledgment_claims_cloudtrail_records_object_access(synth: Synth) -> None:
    """S3 object reads and writes are CloudTrail data events, off unless the account enables them."""
    import json

    report = json.loads((synth.outdir / "validation-report.json").read_text())
    reasons = [v["reason"] for p in report["pluginReports"] for v in p.get("suppressedViolations") or []]
    s1 = [r for r in reasons if "CloudTrail" in r]
    assert s1, "expected the lifecycle bucket's S1 reason to speak about CloudTrail data events"
    assert not [r for r in s1 if "(recorded in CloudTrail)" in r or r.endswith("CloudTrail audits access")]


def test_default_security_group_rules_are_removed_in_both_directions(synth: Synth) -> None:
    network = synth.resources("dev", "Network", "Custom::VpcRestrictDefaultSG")
    calls = {}
    for res in network.values():
        join = res["Properties"]["Create"]["Fn::Join"][1]
        text = "".join(p if isinstance(p, str) else "<sg>" for p in join)
        assert {"Fn::GetAtt": ["VpcFB0DB6AD", "DefaultSecurityGroup"]} in join
        calls[json.loads(text)["action"]] = json.loads(text)["parameters"]["IpPermissions"]
    assert calls == {
        "revokeSecurityGroupIngress": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "<sg>"}]}],
        "revokeSecurityGroupEgress": [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    }
    # the handler may revoke rules of this one group only
    policies = synth.resources("dev", "Network", "AWS::IAM::Policy")
    statements = [
        s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"] if "Revoke" in json.dumps(s["Action"])
    ]
    assert statements and all("DefaultSecurityGroup" in json.dumps(s["Resource"]) for s in statements)
