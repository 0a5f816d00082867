"""Template assertions for the Observability stack and its constructs."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template

from fminfra.core.errors import ValidationError
from fminfra.observability.constructs.alerting import AlertTopic, AlertTopicProps, FsxLustreAlarms, FsxLustreAlarmsProps
from fminfra.observability.constructs.amp_scraper import AmpScraper, AmpScraperProps, PodScrapeJob
from fminfra.observability.constructs.grafana_workspace import GrafanaWorkspace, GrafanaWorkspaceProps
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace, PrometheusWorkspaceProps
from fminfra.observability.rules import expected_node_count, expected_nodes_group, load_rule_groups
from tests.conftest import ROOT, SHIPPED_NAMES, Synth

ENV = cdk.Environment(account="111111111111", region="us-west-2")


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "T", env=ENV)


def _actions(statement: dict) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def _only(resources: dict) -> dict:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.values()))


@pytest.mark.parametrize("env", SHIPPED_NAMES)
def test_shipped_environments_have_prometheus_and_alerting_but_no_grafana(synth: Synth, env: str) -> None:
    template = Template.from_stack(synth.stages[env].observability)
    template.resource_count_is("AWS::APS::Workspace", 1)
    template.resource_count_is("AWS::APS::RuleGroupsNamespace", 1)
    template.resource_count_is("AWS::SNS::Topic", 1)
    template.resource_count_is("AWS::Grafana::Workspace", 0)
    assert synth.stages[env].observability.prometheus is not None


def test_amp_workspace_has_its_own_key_and_logging(synth: Synth) -> None:
    workspace = _only(synth.resources("dev", "Observability", "AWS::APS::Workspace"))["Properties"]
    key_id = workspace["KmsKeyArn"]["Fn::GetAtt"][0]
    log_id = workspace["LoggingConfiguration"]["LogGroupArn"]["Fn::GetAtt"][0]
    keys = synth.resources("dev", "Observability", "AWS::KMS::Key")
    assert keys[key_id]["Properties"]["EnableKeyRotation"] is True
    log_group = synth.resources("dev", "Observability", "AWS::Logs::LogGroup")[log_id]["Properties"]
    assert log_group["LogGroupName"] == "/aws/vendedlogs/prometheus/fminfra-dev-metrics"
    assert workspace["Alias"] == "fminfra-dev-metrics"


def test_rule_groups_namespace_holds_exactly_the_repo_rules(synth: Synth) -> None:
    """The repo's rule files (the serving rules only with a serving: section), and the environment's
    expected node count."""
    for env in SHIPPED_NAMES:
        namespace = _only(synth.resources(env, "Observability", "AWS::APS::RuleGroupsNamespace"))["Properties"]
        assert namespace["Name"] == f"fminfra-{env}-rules"
        count = expected_node_count(synth.configs[env])
        groups = load_rule_groups(serving=synth.configs[env].serving is not None)
        assert yaml.safe_load(namespace["Data"]) == {"groups": [*groups, expected_nodes_group(count)]}


def test_alert_manager_routes_to_the_topic_with_sigv4(synth: Synth) -> None:
    workspace = _only(synth.resources("dev", "Observability", "AWS::APS::Workspace"))["Properties"]
    parts = workspace["AlertManagerDefinition"]["Fn::Join"][1]
    topic_id = _only(synth.resources("dev", "Observability", "AWS::SNS::Topic"))
    topic_lid = next(lid for lid in synth.resources("dev", "Observability", "AWS::SNS::Topic"))
    assert {"Ref": topic_lid} in parts and topic_id
    text = "".join(p if isinstance(p, str) else "ARN" for p in parts)
    config = yaml.safe_load(yaml.safe_load(text)["alertmanager_config"])
    sns = config["receivers"][0]["sns_configs"][0]
    assert sns["topic_arn"] == "ARN" and sns["sigv4"] == {"region": "us-west-2"}
    assert config["route"]["receiver"] == config["receivers"][0]["name"]


def test_alert_topic_key_and_topic_policies_let_aps_and_cloudwatch_in(synth: Synth) -> None:
    topic_lid, topic = next(iter(synth.resources("dev", "Observability", "AWS::SNS::Topic").items()))
    key_lid = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = synth.resources("dev", "Observability", "AWS::KMS::Key")[key_lid]["Properties"]
    key_statements = {s.get("Sid"): s for s in key["KeyPolicy"]["Statement"]}
    # AMP's documented key statement has no condition: a condition AMP's requests may not carry
    # would refuse every alert (docs/facts/observability.md#amp-alert-manager-sns-key-policy).
    aps = key_statements["PrometheusAlertManagerUsesTheKey"]
    assert aps["Principal"] == {"Service": "aps.amazonaws.com"} and "Condition" not in aps
    cloudwatch = key_statements["CloudWatchAlarmsUseTheKey"]
    assert cloudwatch["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    for statement in (aps, cloudwatch):
        assert set(statement["Action"]) == {"kms:GenerateDataKey*", "kms:Decrypt"}
    policy = _only(synth.resources("dev", "Observability", "AWS::SNS::TopicPolicy"))["Properties"]
    assert policy["Topics"] == [{"Ref": topic_lid}]
    statements = {s.get("Sid"): s for s in policy["PolicyDocument"]["Statement"]}
    # AMP's documented statement: Publish and GetTopicAttributes, only from this workspace and
    # account (docs/facts/observability.md#amp-alert-manager-sns-topic-policy).
    (workspace_lid,) = synth.resources("dev", "Observability", "AWS::APS::Workspace")
    assert statements["PrometheusAlertManagerPublish"] == {
        "Sid": "PrometheusAlertManagerPublish",
        "Effect": "Allow",
        "Principal": {"Service": "aps.amazonaws.com"},
        "Action": ["sns:GetTopicAttributes", "sns:Publish"],
        "Resource": {"Ref": topic_lid},
        "Condition": {
            "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [workspace_lid, "Arn"]}},
            "StringEquals": {"aws:SourceAccount": "111111111111"},
        },
    }
    # CloudWatch alarms: their own statement, from this account's alarms in this region
    # (docs/facts/observability.md#cloudwatch-alarm-sns-topic-policy).
    assert statements["CloudWatchAlarmsPublish"] == {
        "Sid": "CloudWatchAlarmsPublish",
        "Effect": "Allow",
        "Principal": {"Service": "cloudwatch.amazonaws.com"},
        "Action": "sns:Publish",
        "Resource": {"Ref": topic_lid},
        "Condition": {
            "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:us-west-2:111111111111:alarm:*"},
            "StringEquals": {"aws:SourceAccount": "111111111111"},
        },
    }
    assert set(statements) == {"AllowPublishThroughSSLOnly", "CloudWatchAlarmsPublish", "PrometheusAlertManagerPublish"}
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["PolicyDocument"]["Statement"]
    )


def test_node_role_only_amp_right_is_remote_write_on_this_workspace(synth: Synth) -> None:
    for env in SHIPPED_NAMES:
        compute = Template.from_stack(synth.stages[env].compute).to_json()
        statements = [
            (lid, s)
            for lid, r in compute["Resources"].items()
            if r["Type"] == "AWS::IAM::Policy"
            for s in r["Properties"]["PolicyDocument"]["Statement"]
        ]
        # The AMP scraper's target role (AmpScraper...) has the same right; its own test covers it.
        aps = [(lid, s) for lid, s in statements if any(a.startswith("aps:") for a in _actions(s)) and not lid.startswith("AmpScraper")]
        assert len(aps) == 1, aps
        lid, statement = aps[0]
        assert statement["Action"] == "aps:RemoteWrite" and statement["Effect"] == "Allow"
        # The resource is the workspace ARN imported from the Observability stack, not "*".
        assert "Fn::ImportValue" in statement["Resource"] and "Prometheus" in statement["Resource"]["Fn::ImportValue"]
        policy = compute["Resources"][lid]["Properties"]
        assert len(policy["Roles"]) == 1
        role_lid = policy["Roles"][0]["Ref"]
        role = compute["Resources"][role_lid]["Properties"]
        assert all("Prometheus" not in str(arn) for arn in role.get("ManagedPolicyArns", []))


def test_remote_write_url_is_built_from_the_workspace_id(synth: Synth) -> None:
    """AMP's RemoteWrite URI (docs/facts/observability.md#amp-remote-write-url):
    https://aps-workspaces.<region>.<url suffix>/workspaces/<id>/api/v1/remote_write, never the
    PrometheusEndpoint attribute + "remote_write" (which gives .../workspaces/<id>/remote_write)."""
    stage = synth.stages["dev"]
    assert stage.compute.remote_write_url == stage.observability.prometheus.remote_write_url
    outputs = synth.template("dev", "Observability")["Outputs"]
    url = outputs["RemoteWriteUrl"]["Value"]
    assert url["Fn::Join"][0] == ""
    parts = url["Fn::Join"][1]
    workspace = next(iter(synth.resources("dev", "Observability", "AWS::APS::Workspace")))
    assert parts == [
        f"https://aps-workspaces.{stage.observability.region}.",
        {"Ref": "AWS::URLSuffix"},
        "/workspaces/",
        {"Fn::GetAtt": [workspace, "WorkspaceId"]},
        "/api/v1/remote_write",
    ]
    assert "PrometheusEndpoint" not in json.dumps(url)


def test_observability_deploys_before_compute(synth: Synth) -> None:
    stage = synth.stages["dev"]
    names = [s.node.id for s in stage.stacks]
    assert names.index("Network") < names.index("Observability") < names.index("Compute")
    assert stage.observability in stage.compute.dependencies


def test_grafana_workspace_when_enabled(synth: Synth) -> None:
    grafana = _only(synth.resources("obs-grafana", "Observability", "AWS::Grafana::Workspace"))["Properties"]
    assert grafana["PermissionType"] == "CUSTOMER_MANAGED"
    assert grafana["AuthenticationProviders"] == ["AWS_SSO"]
    assert grafana["AccountAccessType"] == "CURRENT_ACCOUNT"
    role_lid = grafana["RoleArn"]["Fn::GetAtt"][0]
    role = synth.resources("obs-grafana", "Observability", "AWS::IAM::Role")[role_lid]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "grafana.amazonaws.com"}
    policy = next(
        p["Properties"]
        for p in synth.resources("obs-grafana", "Observability", "AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role_lid}]
    )
    by_action = {
        a: s["Resource"]
        for s in policy["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    workspace_lid = next(iter(synth.resources("obs-grafana", "Observability", "AWS::APS::Workspace")))
    assert by_action["aps:QueryMetrics"] == {"Fn::GetAtt": [workspace_lid, "Arn"]}
    assert by_action["cloudwatch:GetMetricData"] == "*"
    subscription = _only(synth.resources("obs-grafana", "Observability", "AWS::SNS::Subscription"))["Properties"]
    assert subscription["Protocol"] == "email" and subscription["Endpoint"] == "oncall@example.com"
    assert "GrafanaUrl" in synth.template("obs-grafana", "Observability")["Outputs"]


def test_fsx_alarms_on_aws_fsx_metrics_into_the_topic() -> None:
    stack = _stack()
    topic = AlertTopic(stack, "Topic", AlertTopicProps(topic_name="fminfra-t-alerts"))
    FsxLustreAlarms(
        stack,
        "Fsx",
        FsxLustreAlarmsProps(file_system_id="fs-0123456789abcdef0", storage_capacity_gib=4800, throughput_mb_per_s=4800, topic=topic),
    )
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::CloudWatch::Alarm", 2)
    topic_ref = {"Ref": Match.string_like_regexp("^Topic")}
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/FSx",
            "MetricName": "FreeDataStorageCapacity",
            "Dimensions": [{"Name": "FileSystemId", "Value": "fs-0123456789abcdef0"}],
            "ComparisonOperator": "LessThanThreshold",
            "Threshold": 4800 * 1024**3 // 10,
            # The whole file system's free bytes: Sum over a 1-minute period (one data point per
            # storage target per minute); Minimum would be the fullest storage target only.
            "Statistic": "Sum",
            "Period": 60,
            "AlarmActions": [topic_ref],
            "OKActions": [topic_ref],
        },
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "ComparisonOperator": "GreaterThanThreshold",
            "Threshold": 4320,
            "AlarmActions": [topic_ref],
            "Metrics": Match.array_with(
                [
                    Match.object_like(
                        {
                            "MetricStat": Match.object_like(
                                {"Metric": Match.object_like({"Namespace": "AWS/FSx", "MetricName": "DataReadBytes"})}
                            )
                        }
                    )
                ]
            ),
        },
    )


@pytest.mark.parametrize("env", SHIPPED_NAMES)
def test_shipped_file_systems_get_fsx_alarms_into_the_topic(synth: Synth, env: str) -> None:
    cfg = synth.configs[env]
    assert cfg.storage is not None and cfg.storage.lustre is not None
    lustre = cfg.storage.lustre
    alarms = synth.resources(env, "Observability", "AWS::CloudWatch::Alarm")
    topic_lid = next(iter(synth.resources(env, "Observability", "AWS::SNS::Topic")))
    assert len(alarms) == 2
    free = next(a["Properties"] for a in alarms.values() if a["Properties"].get("MetricName") == "FreeDataStorageCapacity")
    fs_id = free["Dimensions"][0]["Value"]
    assert "Fn::ImportValue" in fs_id and "Storage" in fs_id["Fn::ImportValue"]
    assert free["Threshold"] == lustre.capacity_gib * 1024**3 // 10
    throughput = next(a["Properties"] for a in alarms.values() if "Metrics" in a["Properties"])
    assert throughput["Threshold"] == pytest.approx(round(lustre.throughput_gb_per_s * 1000) * 0.9)
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_lid}]
    stage = synth.stages[env]
    assert stage.storage in stage.observability.dependencies


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"storage_capacity_gib": 100}, "storage_capacity_gib must be at least 1200 (the smallest Lustre file system), got 100"),
        ({"throughput_alarm_percent": 100}, "throughput_alarm_percent must be 1 to 99, got 100"),
    ],
)
def test_fsx_alarm_props_are_validated(kwargs: dict, message: str) -> None:
    stack = _stack()
    topic = AlertTopic(stack, "Topic", AlertTopicProps(topic_name="t"))
    props = {"file_system_id": "fs-1", "storage_capacity_gib": 1200, "throughput_mb_per_s": 300, "topic": topic, **kwargs}
    with pytest.raises(ValidationError, match=f"^{re.escape(message)}$"):
        FsxLustreAlarms(stack, "Fsx", FsxLustreAlarmsProps(**props))


def test_existing_topic_is_used_without_a_new_key_or_topic() -> None:
    stack = _stack()
    arn = "arn:aws:sns:us-west-2:111111111111:oncall"
    topic = AlertTopic(stack, "Topic", AlertTopicProps(topic_name="t", existing_topic_arn=arn, emails=("a@example.com",)))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::SNS::Topic", 0)
    template.resource_count_is("AWS::KMS::Key", 0)
    template.has_resource_properties("AWS::SNS::Subscription", {"TopicArn": arn, "Protocol": "email"})
    assert topic.key is None and topic.topic_arn == arn


def _vpc_subnets(stack: cdk.Stack, azs: list[str]) -> list[ec2.ISubnet]:
    return [ec2.Subnet.from_subnet_attributes(stack, f"S{i}", subnet_id=f"subnet-{i}", availability_zone=az) for i, az in enumerate(azs)]


def test_scraper_for_an_eks_cluster() -> None:
    stack = _stack()
    workspace = PrometheusWorkspace(stack, "Prometheus", PrometheusWorkspaceProps(alias="fminfra-t-metrics"))
    group = ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-0123")
    scraper = AmpScraper(
        stack,
        "Scraper",
        AmpScraperProps(
            cluster_arn="arn:aws:eks:us-west-2:111111111111:cluster/t",
            subnets=_vpc_subnets(stack, ["us-west-2a", "us-west-2b"]),
            security_groups=[group],
            workspace=workspace,
            scrape_interval_seconds=60,
        ),
    )
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::APS::Scraper",
        {
            "Source": {
                "EksConfiguration": {
                    "ClusterArn": "arn:aws:eks:us-west-2:111111111111:cluster/t",
                    "SubnetIds": ["subnet-0", "subnet-1"],
                    "SecurityGroupIds": ["sg-0123"],
                }
            },
            "Destination": {
                "AmpConfiguration": {"WorkspaceArn": {"Fn::GetAtt": [Match.string_like_regexp("^PrometheusWorkspace"), "Arn"]}}
            },
        },
    )
    config = yaml.safe_load(scraper.configuration)
    assert config["global"]["scrape_interval"] == "60s"
    blob = next(iter(template.find_resources("AWS::APS::Scraper").values()))["Properties"]["ScrapeConfiguration"]["ConfigurationBlob"]
    assert base64.b64decode(blob).decode() == scraper.configuration, "CloudFormation takes the YAML base64-encoded"
    assert {c["job_name"]: c["relabel_configs"][0]["regex"] for c in config["scrape_configs"]} == {"dcgm": "9400", "node": "9100"}


def _scraper_template() -> tuple[Template, AmpScraper]:
    stack = _stack()
    workspace = PrometheusWorkspace(stack, "Prometheus", PrometheusWorkspaceProps(alias="fminfra-t-metrics"))
    subnets = _vpc_subnets(stack, ["us-west-2a", "us-west-2b"])
    scraper = AmpScraper(
        stack, "Scraper", AmpScraperProps(cluster_arn="arn:aws:eks:us-west-2:111111111111:cluster/t", subnets=subnets, workspace=workspace)
    )
    return Template.from_stack(stack), scraper


def _role_of(template: Template, logical_prefix: str) -> dict:
    (role,) = [r for lid, r in template.find_resources("AWS::IAM::Role").items() if lid.startswith(logical_prefix)]
    return role["Properties"]


def test_scraper_writes_to_the_encrypted_workspace_through_a_source_and_a_target_role() -> None:
    """AMP's guide: a workspace with a customer managed key takes a scraper with a role
    configuration, source and target in the same account (docs/facts/observability.md#amp-scraper-role-configuration)."""
    template, _ = _scraper_template()
    props = next(iter(template.find_resources("AWS::APS::Scraper").values()))["Properties"]
    assert set(props["RoleConfiguration"]) == {"SourceRoleArn", "TargetRoleArn"}
    source_arn = json.dumps(props["RoleConfiguration"]["SourceRoleArn"])
    target_arn = json.dumps(props["RoleConfiguration"]["TargetRoleArn"])
    assert "ScraperSourceRole" in source_arn and "ScraperTargetRole" in target_arn
    scrapers = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":aps:us-west-2:111111111111:scraper/*"]]}
    (source_trust,) = _role_of(template, "ScraperSourceRole")["AssumeRolePolicyDocument"]["Statement"]
    assert source_trust["Principal"] == {"Service": "scraper.aps.amazonaws.com"}
    assert source_trust["Condition"] == {"ArnLike": {"aws:SourceArn": scrapers}, "StringEquals": {"aws:SourceAccount": "111111111111"}}
    (target_trust,) = _role_of(template, "ScraperTargetRole")["AssumeRolePolicyDocument"]["Statement"]
    assert "ScraperSourceRole" in json.dumps(target_trust["Principal"])
    assert target_trust["Condition"] == {"StringLike": {"sts:ExternalId": scrapers}}
    statements = [
        st
        for lid, p in template.find_resources("AWS::IAM::Policy").items()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if "ScraperTargetRole" in json.dumps(p["Properties"]["Roles"])
    ]
    assert {json.dumps(st["Action"]) for st in statements} == {'"aps:RemoteWrite"', '["kms:GenerateDataKey", "kms:Decrypt"]'}
    key_use = next(st for st in statements if st["Action"] != "aps:RemoteWrite")
    assert key_use["Condition"] == {"StringEquals": {"kms:ViaService": {"Fn::Join": ["", ["aps.us-west-2.", {"Ref": "AWS::URLSuffix"}]]}}}
    source_policy = [
        st
        for p in template.find_resources("AWS::IAM::Policy").values()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if "ScraperSourceRole" in json.dumps(p["Properties"]["Roles"])
    ]
    assert [st["Action"] for st in source_policy] == ["sts:AssumeRole"]
    depends = next(iter(template.find_resources("AWS::APS::Scraper").values()))["DependsOn"]
    assert any(d.startswith("ScraperTargetRolePrometheusRemoteWrite") for d in depends)
    assert any(d.startswith("ScraperSourceRoleDefaultPolicy") for d in depends)


@pytest.mark.parametrize("jobs", [{"dcgm": 0}, {"k": PodScrapeJob(port=65536, namespace="kube-system")}])
def test_scraper_refuses_a_port_no_pod_has(jobs: dict[str, int | PodScrapeJob]) -> None:
    stack = _stack()
    workspace = PrometheusWorkspace(stack, "Prometheus", PrometheusWorkspaceProps(alias="a"))
    [(name, job)] = jobs.items()
    port = job.port if isinstance(job, PodScrapeJob) else job
    with pytest.raises(ValidationError, match=f"^{re.escape(f'jobs[{name!r}] must be a port 1-65535, got {port}')}$"):
        AmpScraper(
            stack, "Scraper", AmpScraperProps(cluster_arn="arn", subnets=_vpc_subnets(stack, ["a", "b"]), workspace=workspace, jobs=jobs)
        )


@pytest.mark.parametrize("seconds", [5, 15, 29, 301])
def test_scraper_refuses_an_interval_the_collector_refuses(seconds: int) -> None:
    stack = _stack()
    workspace = PrometheusWorkspace(stack, "Prometheus", PrometheusWorkspaceProps(alias="a"))
    message = f"scrape_interval_seconds must be 30 to 300 seconds (the AMP managed collector refuses intervals below 30 s), got {seconds}"
    with pytest.raises(ValidationError, match=f"^{re.escape(message)}$"):
        AmpScraper(
            stack,
            "Scraper",
            AmpScraperProps(
                cluster_arn="arn", subnets=_vpc_subnets(stack, ["a", "b"]), workspace=workspace, scrape_interval_seconds=seconds
            ),
        )


def test_grafana_may_decrypt_the_workspace_through_amp() -> None:
    """AMP's encryption page: another service reads a CMK workspace only with access to the key
    (docs/facts/observability.md#amp-workspace-cmk-key-access)."""
    stack = _stack()
    workspace = PrometheusWorkspace(stack, "Prometheus", PrometheusWorkspaceProps(alias="a"))
    GrafanaWorkspace(stack, "Grafana", GrafanaWorkspaceProps(name="g", prometheus=workspace))
    template = Template.from_stack(stack)
    statements = [
        st
        for p in template.find_resources("AWS::IAM::Policy").values()
        if "GrafanaRole" in json.dumps(p["Properties"]["Roles"])
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    decrypt = [st for st in statements if st["Action"] == "kms:Decrypt"]
    assert len(decrypt) == 1
    assert decrypt[0]["Resource"]["Fn::GetAtt"][0].startswith("PrometheusKey")
    assert decrypt[0]["Condition"] == {
        "StringEquals": {"kms:ViaService": {"Fn::Join": ["", ["aps.us-west-2.", {"Ref": "AWS::URLSuffix"}]]}}
    }


@pytest.mark.parametrize(
    ("azs", "message"),
    [
        (["us-west-2a"], "subnets must list 2 to 5 subnets in at least two AZs, got 1"),
        (["us-west-2a", "us-west-2a"], "subnets must be in at least two AZs, got only us-west-2a"),
        (
            ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d", "us-west-2a", "us-west-2b"],
            "subnets must list 2 to 5 subnets in at least two AZs, got 6",
        ),
    ],
)
def test_scraper_subnets_are_validated(azs: list[str], message: str) -> None:
    stack = _stack()
    workspace = PrometheusWorkspace(stack, "Prometheus", PrometheusWorkspaceProps(alias="a"))
    with pytest.raises(ValidationError, match=f"^{re.escape(message)}$"):
        AmpScraper(stack, "Scraper", AmpScraperProps(cluster_arn="arn", subnets=_vpc_subnets(stack, azs), workspace=workspace))


def test_grant_remote_write_is_an_inline_policy_in_the_roles_stack() -> None:
    app = cdk.App()
    obs = cdk.Stack(app, "Obs", env=ENV)
    compute = cdk.Stack(app, "Compute", env=ENV)
    workspace = PrometheusWorkspace(obs, "Prometheus", PrometheusWorkspaceProps(alias="a"))
    role = iam.Role(compute, "Role", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    workspace.grant_remote_write(role)
    Template.from_stack(compute).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {"Action": "aps:RemoteWrite", "Effect": "Allow", "Resource": {"Fn::ImportValue": Match.any_value()}},
                    {
                        "Action": ["kms:GenerateDataKey", "kms:Decrypt"],
                        "Effect": "Allow",
                        "Resource": {"Fn::ImportValue": Match.any_value()},
                        "Condition": {"StringEquals": {"kms:ViaService": Match.any_value()}},
                    },
                ]
            }
        },
    )
    Template.from_stack(obs).resource_count_is("AWS::IAM::Policy", 0)


def test_grafana_rejects_other_authentication() -> None:
    stack = _stack()
    workspace = PrometheusWorkspace(stack, "Prometheus", PrometheusWorkspaceProps(alias="a"))
    with pytest.raises(ValidationError, match=r"^authentication must be one of AWS_SSO, got 'SAML'$"):
        GrafanaWorkspace(stack, "Grafana", GrafanaWorkspaceProps(name="g", prometheus=workspace, authentication="SAML"))


def test_workspace_log_retention_is_validated() -> None:
    with pytest.raises(ValidationError, match=r"^log_retention_days must be one of 1, 3, 5, .* got 2$"):
        PrometheusWorkspace(_stack(), "P", PrometheusWorkspaceProps(alias="a", log_retention_days=2))


def _observability_stack(section: dict) -> Template:
    from fminfra.config import parse_config
    from fminfra.observability.stack import ObservabilityStack
    from tests.config.test_environment import DEV, _with

    cfg = parse_config(_with(DEV, "observability", section))
    stack = ObservabilityStack(cdk.App(), "Observability", cfg=cfg, env=ENV)
    return Template.from_stack(stack)


def test_prometheus_off_keeps_the_alert_topic_and_creates_no_amp_resources() -> None:
    template = _observability_stack({"prometheus": False})
    for resource_type in ("AWS::APS::Workspace", "AWS::APS::RuleGroupsNamespace", "AWS::Grafana::Workspace"):
        template.resource_count_is(resource_type, 0)
    template.resource_count_is("AWS::SNS::Topic", 1)
    assert "RemoteWriteUrl" not in template.to_json().get("Outputs", {})


def test_an_existing_topic_receives_the_alert_manager_and_no_topic_is_created() -> None:
    arn = "arn:aws:sns:us-west-2:111111111111:oncall"
    template = _observability_stack({"alerts": {"sns_topic_arn": arn}})
    template.resource_count_is("AWS::SNS::Topic", 0)
    definition = template.find_resources("AWS::APS::Workspace")
    text = next(iter(definition.values()))["Properties"]["AlertManagerDefinition"]
    assert f"topic_arn: {arn}" in text


def test_eks_dcgm_chart_collects_the_same_counters_file() -> None:
    """The chart's default list leaves out the ECC, violation, NVLink error and Xid-count fields
    the rules use; customMetrics (the chart's ConfigMap, mounted over its default-counters.csv)
    ships ours (docs/facts/observability.md#dcgm-exporter-chart-custom-metrics)."""
    from fminfra.compute.stack.clusters import exporter_charts
    from fminfra.observability.rules import dcgm_counters_file

    dcgm = next(c for c in exporter_charts(["ml.p5.48xlarge"]) if c.chart == "dcgm-exporter")
    assert dcgm.values["customMetrics"] == dcgm_counters_file().read_text(encoding="utf-8")
    assert "arguments" not in dcgm.values, "the chart's default -f /etc/dcgm-exporter/default-counters.csv reads the ConfigMap"


def test_eks_node_exporter_runs_the_efa_collector_beside_it() -> None:
    """A sidecar of the node exporter pod runs collect_efa.sh (from a ConfigMap, in the node exporter
    image's busybox sh) into a volume the node exporter's textfile collector reads; /sys is the
    chart's own host mount named sys (docs/facts/observability.md#chart-node-exporter-sidecar-values)."""
    from fminfra.compute.stack.clusters import exporter_charts
    from fminfra.core.resources import scripts_root

    node = next(c for c in exporter_charts(["ml.p5.48xlarge"]) if c.chart == "prometheus-node-exporter")
    values = node.values
    (configmap_text,) = values["extraManifests"]
    configmap = yaml.safe_load(configmap_text)
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["namespace"] == node.namespace
    assert configmap["data"]["collect_efa.sh"] == (scripts_root() / "observability" / "collect_efa.sh").read_text(encoding="utf-8")
    assert "{{" not in configmap_text, "the chart renders extraManifests with tpl"
    assert values["configmaps"] == [{"name": configmap["metadata"]["name"], "mountPath": "/opt/fminfra"}]
    (sidecar,) = values["sidecars"]
    assert sidecar["command"][:2] == ["/bin/sh", "/opt/fminfra/collect_efa.sh"] and sidecar["command"][2] == "--every"
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    assert mounts["sys"] == env["SYSFS_ROOT"] == "/host/sys"
    assert mounts[configmap["metadata"]["name"]] == "/opt/fminfra"
    (shared,) = values["sidecarVolumeMount"]
    assert shared["mountPath"] == env["TEXTFILE_DIR"] and shared["readOnly"] is False
    assert f"--collector.textfile.directory={env['TEXTFILE_DIR']}" in values["extraArgs"]


def test_rule_namespace_records_the_expected_node_count(synth: Synth) -> None:
    """NodesMissing compares the reporting nodes with the count the config expects: the stack writes
    it into the rule groups namespace."""
    from fminfra.observability.rules import EXPECTED_NODES_RECORD, expected_node_count

    for env in SHIPPED_NAMES:
        cfg = synth.configs[env]
        if not cfg.observability.prometheus:
            continue
        (namespace,) = synth.resources(env, "Observability", "AWS::APS::RuleGroupsNamespace").values()
        groups = yaml.safe_load(namespace["Properties"]["Data"])["groups"]
        expected = [r for g in groups for r in g["rules"] if r.get("record") == EXPECTED_NODES_RECORD]
        assert expected == [{"record": EXPECTED_NODES_RECORD, "expr": f"vector({expected_node_count(cfg)})"}], env
        assert any(r.get("alert") == "NodesMissing" for g in groups for r in g["rules"])


def test_expected_node_count_counts_every_node_with_an_exporter(synth: Synth) -> None:
    from fminfra.observability.rules import expected_node_count

    for env in SHIPPED_NAMES:
        cfg = synth.configs[env]
        compute = cfg.compute
        count = sum(g.count for g in compute.instance_groups)
        if compute.orchestrator == "slurm":
            assert compute.slurm is not None
            count += 1 + compute.slurm.login.count
        assert expected_node_count(cfg) >= count > 0, env


def test_expected_node_count_counts_every_eks_node(synth: Synth) -> None:
    # The node exporter chart tolerates every taint and selects no node, so every node of every managed
    # node group (system and inference) runs it, at the group's DesiredSize (nothing else scales it).
    from fminfra.observability.rules import expected_node_count

    checked = 0
    for env, cfg in synth.configs.items():
        compute = cfg.compute
        if not compute.needs_eks or not cfg.observability.prometheus:
            continue
        stacks = [s for s in synth.stacks[env] if s.display_name.endswith("/Compute")]
        groups = [r for s in stacks for r in (s.template.get("Resources") or {}).values() if r["Type"] == "AWS::EKS::Nodegroup"]
        eks_nodes = sum(g["Properties"]["ScalingConfig"]["DesiredSize"] for g in groups)
        training = sum(g.count for g in compute.instance_groups) + (
            1 + compute.slurm.login.count if compute.orchestrator == "slurm" and compute.slurm is not None else 0
        )
        assert expected_node_count(cfg) == training + eks_nodes, env
        checked += 1
    assert checked >= 3


def test_expected_node_count_leaves_out_karpenters_nodes(tmp_path: Path) -> None:
    """Karpenter keeps no desired size (docs/compute.md#karpenter): a pool's desired_size counted as
    expected nodes would page NodesMissing whenever no pod needs the pool. Only the system nodes."""
    from fminfra.config import load_config
    from fminfra.observability.rules import expected_node_count

    text = (ROOT / "tests" / "configs" / "eks-karpenter.yaml").read_text().replace("desired_size: 0", "desired_size: 2")
    assert text.count("desired_size: 2") == 2
    (tmp_path / "k.yaml").write_text(text)
    cfg = load_config(tmp_path / "k.yaml")
    assert cfg.compute.karpenter and [g.desired_size for g in cfg.compute.inference_node_groups] == [2, 2]
    assert expected_node_count(cfg) == cfg.compute.system_node_count() == 2
    # the old count, and the count of the same groups as node groups: each at its desired size
    off = load_config(tmp_path / "k.yaml")
    assert off.compute.eks is not None
    off.compute.eks.karpenter.enabled = False
    assert expected_node_count(off) == 2 + 2 + 2
