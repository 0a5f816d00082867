"""Fine-grained assertions on the Network and Compute templates."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match, Template

from tests.conftest import SHIPPED_NAMES, Synth


@pytest.mark.parametrize("env", SHIPPED_NAMES)
def test_subnets_are_placed_by_az_id(synth: Synth, env: str) -> None:
    cfg = synth.configs[env]
    subnets = synth.resources(env, "Network", "AWS::EC2::Subnet")
    plans = {s.cidr: s for s in cfg.network.subnets()}
    assert {r["Properties"]["CidrBlock"] for r in subnets.values()} == set(plans)
    for resource in subnets.values():
        props = resource["Properties"]
        assert "AvailabilityZone" not in props
        assert props["AvailabilityZoneId"] == plans[props["CidrBlock"]].az_id
        assert props["MapPublicIpOnLaunch"] is False


def test_compute_subnet_is_the_large_one_in_the_compute_az(synth: Synth) -> None:
    subnets = synth.resources("dev", "Network", "AWS::EC2::Subnet").values()
    compute = [s["Properties"] for s in subnets if {"Key": "fminfra:subnet-kind", "Value": "compute"} in s["Properties"]["Tags"]]
    assert [(c["AvailabilityZoneId"], c["CidrBlock"]) for c in compute] == [("usw2-az4", "10.0.0.0/18")]


@pytest.mark.parametrize(("env", "nats"), [("dev", 1), ("prod", 3)])
def test_nat_gateways(synth: Synth, env: str, nats: int) -> None:
    assert len(synth.resources(env, "Network", "AWS::EC2::NatGateway")) == nats


def test_efa_security_group_allows_all_traffic_to_and_from_itself(synth: Synth) -> None:
    template = Template.from_stack(synth.stages["dev"].network)
    groups = synth.resources("dev", "Network", "AWS::EC2::SecurityGroup")
    efa_id = next(lid for lid, r in groups.items() if r["Properties"]["GroupDescription"].startswith("EFA:"))
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"IpProtocol": "-1", "GroupId": {"Fn::GetAtt": [efa_id, "GroupId"]}, "SourceSecurityGroupId": {"Fn::GetAtt": [efa_id, "GroupId"]}},
    )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress",
        {
            "IpProtocol": "-1",
            "GroupId": {"Fn::GetAtt": [efa_id, "GroupId"]},
            "DestinationSecurityGroupId": {"Fn::GetAtt": [efa_id, "GroupId"]},
        },
    )
    # The decision of docs/facts/network.md#efa-security-group-egress-anywhere: outbound to
    # anywhere stays beside the rule to itself, as in AWS's HyperPod sample template.
    assert {"CidrIp": "0.0.0.0/0", "Description": "Allow all outbound traffic by default", "IpProtocol": "-1"} in groups[efa_id][
        "Properties"
    ]["SecurityGroupEgress"]


def test_endpoints_and_flow_logs(synth: Synth) -> None:
    template = Template.from_stack(synth.stages["dev"].network)
    endpoints = synth.resources("dev", "Network", "AWS::EC2::VPCEndpoint")
    services = {r["Properties"]["ServiceName"] for r in endpoints.values() if r["Properties"].get("VpcEndpointType") == "Interface"}
    for needed in ("sts", "ssm", "ssmmessages", "ec2messages", "ecr.api", "ecr.dkr", "logs", "monitoring", "aps-workspaces"):
        assert f"com.amazonaws.us-west-2.{needed}" in services
    gateway = [r for r in endpoints.values() if r["Properties"].get("VpcEndpointType") == "Gateway"]
    assert len(gateway) == 1
    template.has_resource_properties("AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL"})
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 90})


def test_network_custom_resources_are_only_those_the_local_deploy_emulates(synth: Synth) -> None:
    """The Network stack deploys on the local emulator: its one Lambda-backed custom resource type,
    the default security group's restriction, is one `scripts/deploy_local.py` carries out itself."""
    from tests.app.test_deploy_local import deploy_local

    for env in SHIPPED_NAMES:
        types = [r["Type"] for r in synth.template(env, "Network")["Resources"].values()]
        custom = {t for t in types if t.startswith("Custom::") or t == "AWS::CloudFormation::CustomResource"}
        assert custom == set(deploy_local.EMULATED_CUSTOM_TYPES) == {"Custom::VpcRestrictDefaultSG"}
        assert types.count("AWS::Lambda::Function") == 1  # AwsCustomResource's singleton handler


def test_physical_names_carry_the_environment(synth: Synth) -> None:
    template = Template.from_stack(synth.stages["dev"].compute)
    template.has_resource_properties("AWS::IAM::Role", {"RoleName": Match.string_like_regexp("^fminfra-dev-")})


def test_cluster_placement_group_for_ec2_groups(synth: Synth) -> None:
    groups = synth.resources("ec2-odcr", "Compute", "AWS::EC2::PlacementGroup")
    assert [g["Properties"]["Strategy"] for g in groups.values()] == ["cluster"]
    # HyperPod places its own nodes; a Capacity Block brings its own placement.
    assert synth.resources("dev", "Compute", "AWS::EC2::PlacementGroup") == {}
    assert synth.resources("ec2-cb", "Compute", "AWS::EC2::PlacementGroup") == {}


def test_stacks_in_deploy_order(synth: Synth) -> None:
    names = [s.node.id for s in synth.stages["dev"].stacks]
    assert names[0] == "Network" and names[-1] == "Compute"
    assert synth.stages["prod"].network.termination_protection is True
