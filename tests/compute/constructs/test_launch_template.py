"""EfaLaunchTemplate: interface layouts against docs/facts/network.md#efa-launch-template-layout, capacity targeting, EKS use."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from fminfra import catalog
from fminfra.compute.constructs.launch_template import (
    IMDS_HOP_LIMIT_FOR_PODS,
    ROOT_DEVICE_UBUNTU,
    CapacityReservationTarget,
    EfaLaunchTemplate,
    EfaLaunchTemplateProps,
)
from fminfra.core.errors import ValidationError


def _efa_only_cards(cards: range) -> list[tuple[int, int, str]]:
    return [(card, 0, "efa-only") for card in cards]


# Written out from docs/facts/network.md#efa-launch-template-layout and the gpu-* entries of docs/facts/instances.md, not derived from the catalog, so that a
# catalog mistake shows up here. (card, device, InterfaceType)
EXPECTED_LAYOUTS: dict[str, list[tuple[int, int, str]]] = {
    "p4d.24xlarge": [(0, 0, "interface"), (0, 1, "efa-only"), *_efa_only_cards(range(1, 4))],
    "p4de.24xlarge": [(0, 0, "interface"), (0, 1, "efa-only"), *_efa_only_cards(range(1, 4))],
    "p5.48xlarge": [(0, 0, "interface"), (0, 1, "efa-only"), *_efa_only_cards(range(1, 32))],
    "p5e.48xlarge": [(0, 0, "interface"), (0, 1, "efa-only"), *_efa_only_cards(range(1, 32))],
    "p5en.48xlarge": [(0, 0, "interface"), (0, 1, "efa-only"), *_efa_only_cards(range(1, 16))],
    "p6-b200.48xlarge": [(0, 0, "interface"), (0, 1, "efa-only"), *_efa_only_cards(range(1, 8))],
    "p6-b300.48xlarge": [(0, 0, "interface"), *_efa_only_cards(range(1, 17))],
}
EXPECTED_EFA = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "p5e.48xlarge": 32, "p5en.48xlarge": 16}
EXPECTED_EFA |= {"p6-b200.48xlarge": 8, "p6-b300.48xlarge": 16}
VERIFIED_TRAINING_TYPES = [t for t in catalog.TRAINING_TYPES if catalog.CATALOG[t].verified]
INFERENCE_TYPES = [t.name for t in catalog.CATALOG.values() if not t.training]


class _Fixture:
    def __init__(self) -> None:
        self.app = cdk.App()
        self.stack = cdk.Stack(self.app, "Templates", env=cdk.Environment(account="111111111111", region="us-west-2"))
        vpc = ec2.Vpc.from_vpc_attributes(
            self.stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-west-2a"], private_subnet_ids=["subnet-1"]
        )
        self.efa = ec2.SecurityGroup(self.stack, "Efa", vpc=vpc)
        self.cluster_sg = ec2.SecurityGroup.from_security_group_id(self.stack, "ClusterSg", "sg-0123456789abcdef0")
        role = iam.Role(self.stack, "Role", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
        self.profile = iam.InstanceProfile(self.stack, "Profile", role=role)
        self.placement = ec2.PlacementGroup(self.stack, "Pg", strategy=ec2.PlacementGroupStrategy.CLUSTER)
        self.templates: dict[str, EfaLaunchTemplate] = {}
        for name in [*catalog.TRAINING_TYPES, *INFERENCE_TYPES]:
            self.add(f"type-{name}", instance_type=name)
        self.add("odcr", instance_type="p5.48xlarge", capacity=CapacityReservationTarget(reservation_id="cr-0123456789abcdef0"))
        self.add(
            "group",
            instance_type="p5.48xlarge",
            capacity=CapacityReservationTarget(resource_group_arn="arn:aws:resource-groups:us-west-2:111111111111:group/g"),
        )
        self.add(
            "block",
            instance_type="p6-b200.48xlarge",
            capacity=CapacityReservationTarget(reservation_id="cr-0123456789abcdef1", capacity_block=True),
        )
        self.add("placed", instance_type="p5en.48xlarge", placement_group=self.placement)
        user_data = ec2.UserData.for_linux()
        user_data.add_commands("echo bootstrap")
        self.add(
            "ec2",
            instance_type="p5.48xlarge",
            instance_profile=self.profile,
            image=ec2.MachineImage.generic_linux({"us-west-2": "ami-0123456789abcdef0"}),
            root_device_name=ROOT_DEVICE_UBUNTU,
            root_volume_gib=1000,
            threads_per_core=1,
            user_data=user_data,
            launch_template_name="fminfra-dev-workers",
        )
        self.add("eks", instance_type="g6e.12xlarge", additional_security_groups=[self.cluster_sg], imds_hop_limit=IMDS_HOP_LIMIT_FOR_PODS)
        self.template = Template.from_stack(self.stack).to_json()

    def add(self, key: str, **kwargs: Any) -> None:
        kwargs.setdefault("efa_security_group", self.efa)
        self.templates[key] = EfaLaunchTemplate(self.stack, f"Lt-{key}", EfaLaunchTemplateProps(**kwargs))

    def data(self, key: str) -> dict[str, Any]:
        lid = self.stack.get_logical_id(self.templates[key].cfn_launch_template)
        return self.template["Resources"][lid]["Properties"]["LaunchTemplateData"]


@pytest.fixture(scope="module")
def lts() -> _Fixture:
    return _Fixture()


def _layout(data: dict[str, Any]) -> list[tuple[int, int, str]]:
    return [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in data["NetworkInterfaces"]]


@pytest.mark.parametrize("instance_type", VERIFIED_TRAINING_TYPES)
def test_interfaces_match_the_facts_file_exactly(lts: _Fixture, instance_type: str) -> None:
    layout = _layout(lts.data(f"type-{instance_type}"))
    assert layout == EXPECTED_LAYOUTS[instance_type]
    assert sum(1 for _, _, kind in layout if kind == "efa-only") == EXPECTED_EFA[instance_type]


def test_every_verified_training_type_has_an_expected_layout() -> None:
    assert sorted(VERIFIED_TRAINING_TYPES) == sorted(EXPECTED_LAYOUTS)


@pytest.mark.parametrize("instance_type", INFERENCE_TYPES)
def test_inference_types_get_the_primary_only(lts: _Fixture, instance_type: str) -> None:
    assert _layout(lts.data(f"type-{instance_type}")) == [(0, 0, "interface")]


@pytest.mark.parametrize("instance_type", catalog.TRAINING_TYPES)
def test_no_public_ip_and_every_interface_in_the_efa_group(lts: _Fixture, instance_type: str) -> None:
    nics = lts.data(f"type-{instance_type}")["NetworkInterfaces"]
    efa_id = {"Fn::GetAtt": [lts.stack.get_logical_id(lts.efa.node.default_child), "GroupId"]}  # type: ignore[arg-type]
    assert nics[0]["AssociatePublicIpAddress"] is False
    assert all(n.get("AssociatePublicIpAddress", False) is False for n in nics)
    assert all(n["Groups"] == [efa_id] and n["DeleteOnTermination"] is True for n in nics)
    assert "SubnetId" not in str(nics)


def test_defaults_imdsv2_encrypted_gp3_no_reservation(lts: _Fixture) -> None:
    data = lts.data("type-p5.48xlarge")
    assert data["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1}
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 500, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}}
    ]
    for absent in ("CapacityReservationSpecification", "InstanceMarketOptions", "Placement", "IamInstanceProfile", "ImageId", "UserData"):
        assert absent not in data
    assert data["InstanceType"] == "p5.48xlarge"


def test_odcr_targets_the_reservation_only(lts: _Fixture) -> None:
    data = lts.data("odcr")
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"},
    }
    assert "InstanceMarketOptions" not in data


def test_several_reservations_target_the_resource_group(lts: _Fixture) -> None:
    target = lts.data("group")["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationResourceGroupArn": "arn:aws:resource-groups:us-west-2:111111111111:group/g"}


def test_capacity_block_uses_its_market_type(lts: _Fixture) -> None:
    data = lts.data("block")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"]["CapacityReservationPreference"] == "capacity-reservations-only"
    assert "Placement" not in data


def test_placement_group(lts: _Fixture) -> None:
    assert lts.data("placed")["Placement"] == {
        "GroupName": {"Fn::GetAtt": [lts.stack.get_logical_id(lts.placement.node.default_child), "GroupName"]}
    }  # type: ignore[arg-type]


def test_ec2_consumer_gets_profile_image_user_data_and_cpu_options(lts: _Fixture) -> None:
    data = lts.data("ec2")
    assert data["IamInstanceProfile"] == {"Arn": {"Fn::GetAtt": [lts.stack.get_logical_id(lts.profile.node.default_child), "Arn"]}}  # type: ignore[arg-type]
    assert data["ImageId"] == "ami-0123456789abcdef0"
    assert data["BlockDeviceMappings"][0]["DeviceName"] == "/dev/sda1"
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 1000
    assert data["CpuOptions"] == {"CoreCount": 96, "ThreadsPerCore": 1}
    assert data["UserData"] == {"Fn::Base64": "#!/bin/bash\necho bootstrap"}
    assert {t["ResourceType"] for t in data["TagSpecifications"]} == {"instance", "volume", "network-interface"}


def test_eks_consumer_cluster_security_group_and_hop_limit(lts: _Fixture) -> None:
    data = lts.data("eks")
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["NetworkInterfaces"][0]["Groups"][1] == "sg-0123456789abcdef0"
    assert "IamInstanceProfile" not in data and "ImageId" not in data
    assert len(lts.templates["eks"].security_groups) == 2


def test_attributes(lts: _Fixture) -> None:
    lt = lts.templates["odcr"]
    assert lts.stack.resolve(lt.launch_template_id) == {"Ref": lts.stack.get_logical_id(lt.cfn_launch_template)}
    assert lts.stack.resolve(lt.latest_version_number) == {
        "Fn::GetAtt": [lts.stack.get_logical_id(lt.cfn_launch_template), "LatestVersionNumber"]
    }
    assert lt.instance_type == "p5.48xlarge"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"instance_type": "p9.48xlarge"}, "instance type 'p9.48xlarge' is not in the GPU catalog"),
        ({"root_volume_gib": 4}, "root_volume_gib must be 8-16384 (a gp3 volume), got 4"),
        ({"imds_hop_limit": 0}, "imds_hop_limit must be 1-64, got 0"),
        ({"threads_per_core": 3}, "threads_per_core must be 1, 2 or None, got 3"),
        ({"instance_type": "p6e-gb200.36xlarge", "threads_per_core": 1}, "threads_per_core 1 needs the vCPU count of p6e-gb200.36xlarge"),
        ({"capacity": CapacityReservationTarget()}, "capacity must name exactly one of reservation_id and resource_group_arn"),
        (
            {"capacity": CapacityReservationTarget(reservation_id="cr-0123456789abcdef0", resource_group_arn="arn:x")},
            "capacity must name exactly one of reservation_id and resource_group_arn",
        ),
        (
            {"capacity": CapacityReservationTarget(reservation_id="cr-0123456789abcdef0", capacity_block=True), "placement": True},
            "placement_group must be None with a Capacity Block",
        ),
    ],
)
def test_invalid_props_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    stack = cdk.Stack(cdk.App(), "S")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["a"], private_subnet_ids=["s"])
    props: dict[str, Any] = {"instance_type": "p5.48xlarge", "efa_security_group": ec2.SecurityGroup(stack, "Sg", vpc=vpc)}
    if kwargs.pop("placement", False):
        props["placement_group"] = ec2.PlacementGroup(stack, "Pg")
    props |= kwargs
    with pytest.raises(ValidationError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        EfaLaunchTemplate(stack, "Lt", EfaLaunchTemplateProps(**props))
