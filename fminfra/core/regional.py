"""What each region offers, from the data cfn-lint keeps of AWS's published CloudFormation schemas
and price list (`regional.json` beside this module, written by scripts/refresh_regional_data.py;
docs/facts/network.md#regional-availability): the CloudFormation resource types fminfra creates
that exist there, and the instance types SageMaker HyperPod offers there; and, for HyperPod task
governance's compute quotas, the regions their resource schema's description names, which disagree
with the per-region lists (docs/facts/hyperpod.md#hyperpod-compute-quota-schema)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION

DATA = Path(__file__).with_name("regional.json")
# The CDK's own template validator's refusals of HyperPod types per region (tests/hyperpod/cdk_validate_data.py;
# docs/facts/hyperpod.md#cdk-validate-hyperpod-instance-types).
CDK_VALIDATE_DATA = Path(__file__).with_name("cdk_validate.json")
# The catalog's GPU types EC2 offers per region, from cfn-lint's AWS::EC2::Instance enums
# (tests/core/ec2_regional_data.py; docs/facts/network.md#regional-availability).
EC2_DATA = Path(__file__).with_name("ec2_regional.json")
# What an acknowledgment of the CDK validator's finding on a HyperPod type cites.
CDK_VALIDATE_RULE = "CloudFormation-Validate::E3644"
# What each part of an environment needs, named for the message.
SERVICE_NAMES = {
    "AWS::SageMaker::Cluster": "SageMaker HyperPod",
    "AWS::EKS::Cluster": "Amazon EKS",
    "AWS::FSx::FileSystem": "FSx for Lustre",
    "AWS::FSx::DataRepositoryAssociation": "FSx data repository associations",
    "AWS::APS::Workspace": "Amazon Managed Service for Prometheus",
    "AWS::APS::Scraper": "AMP managed scrapers",
    "AWS::Grafana::Workspace": "Amazon Managed Grafana",
    "AWS::EC2::CapacityReservation": "EC2 On-Demand Capacity Reservations",
    "AWS::SageMaker::ComputeQuota": "HyperPod task governance compute quotas",
    "AWS::SageMaker::ClusterSchedulerConfig": "HyperPod task governance cluster policies",
}


@cache
def _data() -> dict[str, Any]:
    return dict(json.loads(DATA.read_text(encoding="utf-8")))


def resource_types_in(region: str) -> set[str] | None:
    """The resource types of SERVICE_NAMES that CloudFormation offers in the region; None when unknown."""
    found = _data()["resource_types"].get(region)
    return None if found is None else set(found)


def hyperpod_types_in(region: str) -> set[str] | None:
    """The `ml.` instance types HyperPod offers in the region; None when the data has no list for it."""
    found = _data()["hyperpod_instance_types"].get(region)
    return None if found is None else set(found)


@cache
def _ec2() -> dict[str, list[str]]:
    return dict(json.loads(EC2_DATA.read_text(encoding="utf-8"))["ec2_instance_types"])


def ec2_types_in(region: str) -> set[str] | None:
    """The catalog's GPU types EC2 offers in the region; None when the data has no list for it."""
    found = _ec2().get(region)
    return None if found is None else set(found)


@cache
def ec2_types_anywhere() -> frozenset[str]:
    """Every type some region's EC2 list names: one outside it (p6e-gb200, in a Local Zone) cannot be judged by region."""
    return frozenset(t for types in _ec2().values() for t in types)


@cache
def _ec2_all() -> dict[str, frozenset[str]]:
    """Every EC2 instance type per region, from the installed cfn-lint: the list fminfra/core/ec2_regional.json
    is cut from (its GPU catalog types); for the CPU types a config may name, such as the system nodes'."""
    import cfnlint

    path = Path(cfnlint.__file__).parent / "data" / "schemas" / "extensions" / "aws_ec2_instance" / "instancetype_enum.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return {region: frozenset(v["enum"]) for region, v in data.items() if isinstance(v, dict) and region != "all"}


def ec2_offers(region: str, instance_type: str) -> bool | None:
    """Whether EC2 offers the type in the region on demand; None when that cannot be judged (no list for
    the region, or a type no region lists: a Local Zone type such as p6e-gb200)."""
    found = _ec2_all().get(region)
    if found is None or not any(instance_type in types for types in _ec2_all().values()):
        return None
    return instance_type in found


def regions_offering_any_ec2(instance_type: str) -> list[str]:
    """The regions fminfra accepts whose EC2 list names the type (any type), sorted."""
    return sorted(r for r, types in _ec2_all().items() if instance_type in types and r in AZ_ID_PREFIX_BY_REGION)


def regions_offering_ec2(instance_type: str) -> list[str]:
    """The regions fminfra accepts whose EC2 list names the type, sorted."""
    return sorted(r for r, types in _ec2().items() if instance_type in types and r in AZ_ID_PREFIX_BY_REGION)


def regions_offering(resource_type: str) -> list[str]:
    """The regions fminfra accepts whose CloudFormation resource types include `resource_type`, sorted."""
    return sorted(r for r, types in _data()["resource_types"].items() if resource_type in types and r in AZ_ID_PREFIX_BY_REGION)


@cache
def hyperpod_types_anywhere() -> frozenset[str]:
    """Every `ml.` type some region's HyperPod list names: a type outside it is one the data does not know
    (p6e-gb200, sold through training plans, is in no list), so no region can be judged for it."""
    return frozenset(t for types in _data()["hyperpod_instance_types"].values() for t in types)


@cache
def _cdk_validate() -> dict[str, Any]:
    return dict(json.loads(CDK_VALIDATE_DATA.read_text(encoding="utf-8")))


def cdk_validate_refuses(region: str, instance_type: str) -> bool:
    """Whether the CDK's own template validator (run by every `cdk synth`) refuses the HyperPod type in the region."""
    return instance_type in _cdk_validate()["refused_hyperpod_types"].get(region, ())


def cdk_validate_acknowledged(region: str, instance_types: list[str]) -> list[str]:
    """The types of a cluster's groups whose CDK validator finding fminfra acknowledges: those it refuses in the
    region but cfn-lint's newer list, fminfra's source, offers there. Empty unless every type it refuses is one:
    an acknowledgment covers the cluster's every E3644 finding, and one no source contradicts must fail synth."""
    refused = sorted({t for t in instance_types if cdk_validate_refuses(region, t)})
    offered = hyperpod_types_in(region) or set()
    return refused if refused and all(t in offered for t in refused) else []


@dataclass(frozen=True)
class QuotaSources:
    """Whether each source offers AWS::SageMaker::ComputeQuota in a region: `provider`, cfn-lint's list of
    resource types for the region (CloudFormation's per-region schemas); `described`, the resource schema's
    description ("Available in 15 regions (...)", also on the CDK CfnComputeQuota page)."""

    provider: bool
    described: bool

    @property
    def both(self) -> bool:
        return self.provider and self.described

    @property
    def either(self) -> bool:
        return self.provider or self.described

    def disagreement(self, region: str) -> str:
        """The two sources on the region, in one clause."""
        return (
            f"the sources disagree on {region}: cfn-lint's CloudFormation resource types for {region} "
            f"{'include' if self.provider else 'lack'} AWS::SageMaker::ComputeQuota, the resource schema's description "
            f"(also the CDK CfnComputeQuota page) {'lists' if self.described else 'does not list'} {region}"
        )


def compute_quota_sources(region: str) -> QuotaSources | None:
    """Both sources on compute quotas in the region; None when the data has no list for the region."""
    available = resource_types_in(region)
    if available is None:
        return None
    return QuotaSources("AWS::SageMaker::ComputeQuota" in available, region in _data()["compute_quota_described_regions"])
