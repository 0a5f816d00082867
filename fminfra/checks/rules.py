"""The rules themselves. Later issues add theirs here, one function per rule."""

from __future__ import annotations

from typing import Any

from fminfra.checks import Resource, Template, rule

EFA_GROUP_DESCRIPTION_PREFIX = "EFA:"


def refers_to(value: Any, logical_id: str) -> bool:
    """True when a property value is a Ref or GetAtt of the given logical id."""
    if isinstance(value, dict):
        if value.get("Ref") == logical_id:
            return True
        get_att = value.get("Fn::GetAtt")
        if isinstance(get_att, list) and get_att and get_att[0] == logical_id:
            return True
    return False


def _self_rules(logical_id: str, resource: Resource, template: Template, direction: str) -> bool:
    """Whether the group has an all-traffic rule to/from itself (inline or standalone)."""
    inline_key, peer_key, standalone = (
        ("SecurityGroupIngress", "SourceSecurityGroupId", "AWS::EC2::SecurityGroupIngress")
        if direction == "ingress"
        else ("SecurityGroupEgress", "DestinationSecurityGroupId", "AWS::EC2::SecurityGroupEgress")
    )
    props = resource.get("Properties") or {}
    candidates = list(props.get(inline_key) or [])
    for other in (template.get("Resources") or {}).values():
        other_props = other.get("Properties") or {}
        if other.get("Type") == standalone and refers_to(other_props.get("GroupId"), logical_id):
            candidates.append(other_props)
    return any(str(c.get("IpProtocol")) == "-1" and refers_to(c.get(peer_key), logical_id) for c in candidates)


def is_efa_group(resource: Resource) -> bool:
    return str((resource.get("Properties") or {}).get("GroupDescription", "")).startswith(EFA_GROUP_DESCRIPTION_PREFIX)


@rule("FMI-EFA-SG-SELF", "AWS::EC2::SecurityGroup")
def efa_group_allows_all_traffic_to_and_from_itself(logical_id: str, resource: Resource, template: Template) -> str | None:
    """An EFA security group allows all traffic in from itself and out to itself."""
    if not is_efa_group(resource):
        return None
    missing = [d for d in ("ingress", "egress") if not _self_rules(logical_id, resource, template, d)]
    if missing:
        return f"EFA security group lacks an all-traffic {' and '.join(missing)} rule to itself (EFA traffic fails without it)"
    return None


@rule("FMI-SUBNET-AZ-ID", "AWS::EC2::Subnet")
def subnet_is_placed_by_az_id(logical_id: str, resource: Resource, template: Template) -> str | None:
    """Every subnet is placed by AZ ID (the same physical zone in every account), not AZ name."""
    props = resource.get("Properties") or {}
    if "AvailabilityZone" in props:
        return "subnet is placed by AvailabilityZone (a name, which differs between accounts); use AvailabilityZoneId"
    if not props.get("AvailabilityZoneId"):
        return "subnet has no AvailabilityZoneId"
    return None
