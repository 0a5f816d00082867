"""Contract test: every synthesized template (every config, example and test config, the pipeline
and the GitHub OIDC stacks), with each intrinsic resolved to a representative deploy-time value,
against the CloudFormation registry schemas cfn-lint ships (tests/contract/registry.py;
docs/facts/pipeline.md#cfn-registry-schemas-in-cfn-lint). Each check is shown to fail on a
deliberately broken input (the `*_fails_*` tests)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Synth
from tests.contract import registry
from tests.contract.registry import Resolver, Stack, Unresolvable


@pytest.fixture(scope="module")
def stacks(synth: Synth, pipeline_synth: tuple[Any, Path, dict[str, Any]], oidc_synth: tuple[list[Any], Path]) -> list[Stack]:
    """Every stack of the three session synths, with the account and region it deploys to (the
    pipeline's stages, the environments as the pipeline deploys them, under `pipeline:`)."""
    return [
        *registry.assembly_stacks(synth.outdir),
        *registry.assembly_stacks(pipeline_synth[1], "pipeline:"),
        *registry.assembly_stacks(oidc_synth[1]),
    ]


def test_every_resource_validates_against_its_registry_schema_with_deploy_time_values(stacks: list[Stack]) -> None:
    problems, validated = registry.problems(stacks)
    assert len(stacks) >= 60 and any(s.name.startswith("pipeline:fminfra-pipeline") for s in stacks)
    assert len(validated) >= 50, f"resource types validated: {sorted(validated)}"
    assert problems == []


def test_every_reference_has_the_shape_the_referenced_schema_gives(stacks: list[Stack]) -> None:
    problems, checked = registry.reference_problems(stacks)
    assert checked >= 1000
    assert problems == []


# ---- Known defects of AWS's schemas ----------------------------------------------------------------


@pytest.mark.parametrize("defect", registry.SCHEMA_DEFECTS, ids=lambda d: f"{d.resource_type}{d.path[1:]}")
def test_each_known_schema_defect_is_still_in_the_installed_schema(defect: registry.SchemaDefect) -> None:
    """The defect's proof: a value the service accepts fails the schema. When this fails, AWS fixed
    the schema (a newer cfn-lint): drop the entry and its avoidance."""
    resource_schema = registry.schema(defect.resource_type, "us-east-1")
    assert resource_schema is not None
    errors = registry.schema_errors({**resource_schema, "required": []}, {defect.path.removeprefix("$."): defect.correct_value})
    assert [(e.json_path, e.validator) for e in errors] == [(defect.path, defect.keyword)]
    file, anchor = defect.fact.split("#")
    assert re.search(rf"(?m)^### {re.escape(anchor)}$", (ROOT / file).read_text()), defect.fact
    assert defect.avoidance.startswith("fminfra must not set this property")


def test_a_template_that_sets_a_defective_property_fails_and_says_why() -> None:
    template = _template(
        {
            "Group": {"Type": "AWS::EC2::PlacementGroup", "Properties": {"Strategy": "cluster"}},
            "Reservation": {
                "Type": "AWS::EC2::CapacityReservation",
                "Properties": {
                    "InstanceCount": 2,
                    "InstancePlatform": "Linux/UNIX",
                    "InstanceType": "p5.48xlarge",
                    "AvailabilityZoneId": "usw2-az2",
                    "PlacementGroupArn": {
                        "Fn::Join": [
                            "",
                            ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-west-2:111111111111:placement-group/", {"Ref": "Group"}],
                        ]
                    },
                },
            },
        }
    )
    (problem,) = _problems(template)
    assert "Reservation (AWS::EC2::CapacityReservation) $.PlacementGroupArn:" in problem
    assert "AWS's schema defect: the pattern" in problem and "fminfra must not set this property" in problem
    del template["Resources"]["Reservation"]["Properties"]["PlacementGroupArn"]
    assert _problems(template) == []


# ---- Tests of the test: a broken value fails ---------------------------------------------------------


def _template(resources: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"Resources": resources, **extra}


def _problems(*templates: dict[str, Any]) -> list[str]:
    stacks = [Stack(f"t{i}/Stack", t, "111111111111", "us-west-2") for i, t in enumerate(templates)]
    return registry.problems(stacks)[0]


def _dev(stacks: list[Stack], name: str) -> Stack:
    (stack,) = [s for s in stacks if s.name == name]
    return Stack(stack.name, copy.deepcopy(stack.template), stack.account, stack.region)


def _first(stack: Stack, resource_type: str, prop: str) -> dict[str, Any]:
    """The properties of the first resource of a type that sets `prop`, else of the first of that type."""
    of_type = [r["Properties"] for r in stack.resources().values() if r["Type"] == resource_type]
    return next((p for p in of_type if prop in p), of_type[0])


@pytest.mark.parametrize(
    ("stack_name", "resource_type", "prop", "value", "expected"),
    [
        ("dev/Network", "AWS::EC2::SubnetRouteTableAssociation", "SubnetId", "subnet-xyz", "is not a 'AWS::EC2::Subnet.Id'"),
        ("dev/Network", "AWS::EC2::FlowLog", "TrafficType", "EVERYTHING", "is not one of ['ACCEPT', 'ALL', 'REJECT']"),
        ("dev/Network", "AWS::Logs::LogGroup", "RetentionInDays", 100, "is not one of"),
        ("dev/Network", "AWS::Logs::LogGroup", "KmsKeyId", "key/1234", "does not match"),
        ("dev/Network", "AWS::EC2::Subnet", "CidrBlock", "10.0.0.0/33", "is not a 'ipv4-network'"),
        (
            "dev/Network",
            "AWS::EC2::Subnet",
            "VpcId",
            {"Fn::GetAtt": ["EfaSecurityGroupEAC022BA", "GroupId"]},
            "is not a 'AWS::EC2::VPC.Id'",
        ),
        ("dev/Compute", "AWS::SageMaker::Cluster", "ClusterName", "x" * 64, "is too long"),
        ("dev/Compute", "AWS::IAM::Role", "MaxSessionDuration", 100, "less than the minimum of 3600"),
        ("dev/Compute", "AWS::SageMaker::Cluster", "InstanceGroups", "workers", "is not of type 'array'"),
    ],
)
def test_schema_check_fails_on_a_broken_value_in_a_real_template(
    stacks: list[Stack], stack_name: str, resource_type: str, prop: str, value: Any, expected: str
) -> None:
    stack = _dev(stacks, stack_name)
    assert registry.problems([stack], Resolver(stacks))[0] == []
    _first(stack, resource_type, prop)[prop] = value
    found = registry.problems([stack], Resolver(stacks))[0]
    assert found and all(resource_type in p for p in found) and any(expected in p for p in found), found


def test_a_required_property_left_out_fails(stacks: list[Stack]) -> None:
    stack = _dev(stacks, "dev/Network")
    del _first(stack, "AWS::EC2::FlowLog", "ResourceType")["ResourceType"]
    assert any("'ResourceType' is a required property" in p for p in registry.problems([stack], Resolver(stacks))[0])


def test_a_wrong_representative_value_fails_both_checks(stacks: list[Stack], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.REF_SHAPES, "AWS::EC2::Subnet", ("SubnetId", lambda r: "subnet-not-hex"))
    network = [_dev(stacks, "dev/Network")]
    assert any("'subnet-not-hex' is not a 'AWS::EC2::Subnet.Id'" in p for p in registry.problems(network)[0])
    assert any("is not the shape the schema gives SubnetId" in p for p in registry.reference_problems(network)[0])
    monkeypatch.setitem(registry.GETATT_SHAPES, ("AWS::KMS::Key", "Arn"), lambda r: "arn:aws:kms:us-west-2:1:key/x")
    assert any("is not the shape the schema gives Arn" in p for p in registry.reference_problems(network)[0])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"Fn::GetAtt": ["Role", "RoleId"]}, "no representative value for AWS::IAM::Role.RoleId; add it to GETATT_SHAPES"),
        ({"Ref": "Alarm"}, "no representative value for a Ref to AWS::CloudWatch::Alarm; add it to REF_SHAPES"),
        ({"Fn::ImportValue": "nobody-exports-this"}, "Fn::ImportValue nobody-exports-this: no synthesized stack"),
        ({"Ref": "Missing"}, "Ref Missing: no such resource or parameter"),
        ({"Ref": "Password"}, "Ref Password: a String parameter without a default"),
        ({"Fn::Transform": {"Name": "AWS::Include"}}, "Fn::Transform: an intrinsic function this resolver does not know"),
    ],
)
def test_a_value_without_a_known_shape_fails_and_says_so(value: Any, expected: str) -> None:
    template = _template(
        {
            "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": []}}},
            "Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {}},
            "Topic": {"Type": "AWS::SNS::Topic", "Properties": {"DisplayName": value}},
        },
        Parameters={"Password": {"Type": "String"}},
    )
    (found,) = [p for p in _problems(template) if "Topic" in p]
    assert found.startswith("t0/Stack Topic (AWS::SNS::Topic): cannot resolve to a deploy-time shape: ") and expected in found, found


def test_every_intrinsic_resolves_to_its_deploy_time_value() -> None:
    stack = Stack(
        "dev/Network",
        _template(
            {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}, "Role": {"Type": "AWS::IAM::Role"}},
            Parameters={
                "Ami": {"Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>", "Default": "/aws/service/x"},
                "Size": {"Type": "Number", "Default": 3},
            },
            Mappings={"Sizes": {"us-west-2": {"Small": "m5.large"}}},
            Conditions={"InAws": {"Fn::Equals": [{"Ref": "AWS::Partition"}, "aws"]}, "NotInAws": {"Fn::Not": [{"Condition": "InAws"}]}},
            Outputs={"VpcId": {"Value": {"Ref": "Vpc"}, "Export": {"Name": "dev-Network:VpcId"}}},
        ),
        "111111111111",
        "us-west-2",
    )
    resolver = Resolver([stack])

    def resolve(value: Any) -> Any:
        return resolver.resolve(value, stack)

    vpc_id = resolve({"Ref": "Vpc"})
    assert re.fullmatch(r"vpc-[0-9a-f]{17}", vpc_id) and resolve({"Ref": "Vpc"}) == vpc_id
    assert resolve({"Fn::ImportValue": "dev-Network:VpcId"}) == vpc_id
    assert re.fullmatch(r"ami-[0-9a-f]{17}", resolve({"Ref": "Ami"}))
    assert resolve({"Ref": "Size"}) == 3
    assert re.fullmatch(r"dev-Network-Role-[0-9A-F]{12}", resolve({"Ref": "Role"}))
    assert re.fullmatch(r"arn:aws:iam::111111111111:role/dev-Network-Role-[0-9A-F]{12}", resolve({"Fn::GetAtt": "Role.Arn"}))
    assert (
        resolve({"Fn::Sub": ["${AWS::Partition}:${AWS::AccountId}:${X}", {"X": {"Ref": "AWS::URLSuffix"}}]})
        == "aws:111111111111:amazonaws.com"
    )
    assert resolve({"Fn::Sub": "${Vpc}/${Role.Arn}/${!Literal}"}) == f"{vpc_id}/{resolve({'Fn::GetAtt': ['Role', 'Arn']})}/${{Literal}}"
    assert resolve({"Fn::Join": ["-", ["a", {"Ref": "AWS::Region"}]]}) == "a-us-west-2"
    assert resolve({"Fn::Select": [1, {"Fn::Split": [",", "a,b,c"]}]}) == "b"
    assert resolve({"Fn::Select": [0, {"Fn::GetAZs": ""}]}) == "us-west-2a"
    assert resolve({"Fn::Cidr": ["10.0.0.0/16", 2, 8]}) == ["10.0.0.0/24", "10.0.1.0/24"]
    assert resolve({"Fn::FindInMap": ["Sizes", {"Ref": "AWS::Region"}, "Small"]}) == "m5.large"
    assert resolve({"Fn::Base64": "hi"}) == "aGk="
    assert resolve({"Fn::If": ["NotInAws", "no", "yes"]}) == "yes"
    assert resolve({"A": {"Fn::If": ["InAws", {"Ref": "AWS::NoValue"}, 1]}, "B": [1, {"Ref": "AWS::NoValue"}]}) == {"B": [1]}
    with pytest.raises(Unresolvable, match=r"Fn::FindInMap Sizes\.eu-west-1\.Small"):
        resolve({"Fn::FindInMap": ["Sizes", "eu-west-1", "Small"]})


def test_a_resource_type_without_a_schema_in_the_region_fails() -> None:
    template = _template({"Quota": {"Type": "AWS::SageMaker::ClusterSchedulerConfig", "Properties": {}}})
    assert _problems(template) == [
        "t0/Stack Quota (AWS::SageMaker::ClusterSchedulerConfig): no registry schema for AWS::SageMaker::ClusterSchedulerConfig in us-west-2"
    ]
