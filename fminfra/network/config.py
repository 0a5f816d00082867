"""The `network` section: VPC CIDR, the AZ IDs it spans, endpoints, flow logs (mirrors network/stack.py)."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fminfra.core.config_base import Model, Problems, _raise_problems
from fminfra.core.errors import ValidationError
from fminfra.core.findings import error
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION, is_az_id, region_of_az_id
from fminfra.core.rules import LOG_RETENTION_DAYS, one_of_problem
from fminfra.network.rules import AZ_NAME_RULE, SubnetPlan, plan_subnets

RFC1918_NETWORKS = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
# The AZ ID form (usw2-az4) for editors; the validator also checks the region's prefix.
AZ_ID_PATTERN = r"^[a-z]+[0-9]+-az[0-9]+$"


def az_form_problem(value: str) -> str:
    """Why a value is not an AZ ID; for an AZ name, the ID form in its region and how to list them."""
    name = AZ_NAME_RULE.match(value)
    region = name["region"] if name else None
    if region and region in AZ_ID_PREFIX_BY_REGION:
        return (
            f"{value!r} is an AZ name, which maps to a different zone in every account; give the AZ ID, e.g. "
            f"{AZ_ID_PREFIX_BY_REGION[region]}-az1 (list this account's: aws ec2 describe-availability-zones "
            f"--region {region} --query 'AvailabilityZones[].[ZoneName,ZoneId]' --output text)"
        )
    return f"{value!r} is not an AZ ID such as usw2-az1"


class NetworkConfig(Model):
    """The VPC: CIDR, the AZs (by AZ ID) it spans, and where the GPU capacity lives."""

    cidr: str = Field(default="10.0.0.0/16", description="IPv4 CIDR of the VPC, /16 to /24.")
    az_ids: list[str] = Field(
        min_length=1,
        max_length=6,
        description="AZ IDs of the region, e.g. usw2-az1.",
        json_schema_extra={"items": {"pattern": AZ_ID_PATTERN}},
    )
    compute_az_id: str = Field(
        description="AZ ID holding GPU capacity, FSx and the placement group.", json_schema_extra={"pattern": AZ_ID_PATTERN}
    )
    compute_subnet_prefix: int = Field(default=18, ge=16, le=26, description="Prefix of the compute-AZ private subnet.")
    private_subnet_prefix: int = Field(default=20, ge=16, le=27, description="Prefix of each other private subnet.")
    public_subnet_prefix: int = Field(default=26, ge=16, le=28, description="Prefix of each public (NAT-only) subnet.")
    nat_gateways: Literal["one", "per-az"] = Field(
        default="one", description="one: a NAT gateway in the compute AZ; per-az: one in every AZ."
    )
    flow_log_retention_days: int = Field(default=90, description="CloudWatch Logs retention of VPC flow logs.")

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"must be an IPv4 network such as 10.0.0.0/16, got {value!r} ({exc})") from None
        if not 16 <= network.prefixlen <= 24:
            raise ValueError(f"prefix must be /16 to /24 (the VPC limits), got /{network.prefixlen}")
        # docs/facts/network.md#vpc-cidr-private-ranges: AWS recommends RFC 1918; a public range
        # would shadow those addresses on the internet for everything in the VPC.
        if not any(network.subnet_of(private) for private in RFC1918_NETWORKS):
            allowed = ", ".join(map(str, RFC1918_NETWORKS))
            raise ValueError(f"must lie in a private (RFC 1918) range: {allowed}; got {value}, which is publicly routable or reserved")
        return value

    @field_validator("az_ids")
    @classmethod
    def _az_ids(cls, value: list[str]) -> list[str]:
        problems = [error(f"[{i}]", az_form_problem(az)) for i, az in enumerate(value) if not is_az_id(az)]
        _raise_problems(problems)
        duplicates = sorted({az for az in value if value.count(az) > 1})
        if duplicates:
            raise ValueError(f"AZ IDs must be unique, repeated: {', '.join(duplicates)}")
        return value

    @field_validator("flow_log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if problem := one_of_problem(LOG_RETENTION_DAYS, value):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _compute_az(self) -> NetworkConfig:
        if not is_az_id(self.compute_az_id):
            raise Problems([error("compute_az_id", az_form_problem(self.compute_az_id))])
        if self.compute_az_id not in self.az_ids:
            regions = {region_of_az_id(az) for az in self.az_ids} - {None}
            own = region_of_az_id(self.compute_az_id)
            hint = (
                f"; az_ids are AZ IDs of {', '.join(sorted(r for r in regions if r))}, compute_az_id of {own}: list the AZ IDs of the "
                "environment's region"
                if own is not None and regions and own not in regions
                else ""
            )
            raise Problems([error("compute_az_id", f"{self.compute_az_id!r} is not one of az_ids ({', '.join(self.az_ids)}){hint}")])
        try:
            self.subnets()
        except ValidationError as exc:
            raise Problems([f.under("cidr") for f in exc.findings]) from None
        return self

    def subnets(self) -> list[SubnetPlan]:
        """The subnet plan (see `fminfra.network.rules`)."""
        return plan_subnets(
            cidr=self.cidr,
            az_ids=self.az_ids,
            compute_az_id=self.compute_az_id,
            compute_subnet_prefix=self.compute_subnet_prefix,
            private_subnet_prefix=self.private_subnet_prefix,
            public_subnet_prefix=self.public_subnet_prefix,
        )
